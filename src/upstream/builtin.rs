//! The built-in legacy server as an in-process backend over a duplex pipe: the `builtin`
//! transport. The server (the `mrtr_fixture` crate) runs as a task of this process and speaks
//! newline-delimited JSON-RPC as a stdio child would, so the session on our end of the pipe is
//! the stdio transport's own; only the start and the end differ (a task spawned, then aborted,
//! instead of a process spawned, then reaped).

use super::Error;
use super::session::{Begin, Start};
use super::stdio;
use tokio_util::sync::CancellationToken;

/// Bytes buffered each way between the session and the server, as a pipe to a child would.
const PIPE_BYTES: usize = 64 * 1024;

/// Starts the server on one end of a pipe, runs `initialize` over the other, and returns the
/// handle of the task that owns the session; when that task ends, the server task is aborted.
pub(crate) async fn spawn<B: Begin>(
    opts: &mrtr_fixture::Options,
    start: Start,
    shutdown: CancellationToken,
    begin: B,
) -> Result<B::Output, Error> {
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let (their_read, their_write) = tokio::io::split(theirs);
    let server = tokio::spawn(mrtr_fixture::serve(their_read, their_write, opts.clone()));
    let (our_read, our_write) = tokio::io::split(ours);
    let on_exit = async move {
        server.abort();
    };
    stdio::connect(
        our_read,
        our_write,
        crate::config::DEFAULT_WRITE_QUEUE,
        start,
        shutdown,
        on_exit,
        begin,
    )
    .await
}

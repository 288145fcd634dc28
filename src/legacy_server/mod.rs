//! The gateway's built-in legacy MCP server.
//!
//! A small, self-contained MCP server that speaks the pre-2026 protocol revisions
//! (2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25) over newline-delimited JSON-RPC. The
//! `demo` command runs the gateway in front of it (`mrtr-gateway legacy-server`), and the
//! end-to-end tests use it as their fixture backend, so it deliberately behaves like a real
//! legacy server: while a `tools/call` (or `prompts/get`, `resources/read`) is running it sends
//! its own requests to the client (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) and blocks until they are answered.
//!
//! What lives where:
//! - `wire`: JSON-RPC message shapes, error codes, the writer task and the message log.
//! - `session`: per-session state, the pending server->client requests and their correlation.
//! - `dispatch`: the reader loop, lifecycle, concurrency, cancellation and method routing.
//! - `asks`: the server->client requests, gated by negotiated version and client capabilities.
//! - `tools`, `catalog`: the tools, prompts and resources this server offers.
//!
//! Only JSON-RPC lines are written to the output stream; diagnostics go through `tracing`,
//! whose subscriber (installed by the binary) writes to stderr.

mod asks;
mod catalog;
mod dispatch;
mod session;
mod tools;
mod wire;

#[cfg(test)]
mod tests;

use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

/// Protocol revisions this server can speak, oldest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 4] =
    ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The revision offered when the client asks for one this server does not know.
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";

/// Options of the built-in legacy MCP server (`mrtr-gateway legacy-server`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Answer `initialize` with this protocol version whatever the client asks (default: echo
    /// the client's version if it is one of the four supported, else 2025-11-25).
    #[arg(long = "protocol")]
    pub protocol: Option<String>,
    /// Send `roots/list` right after `notifications/initialized` (the answer is cached and
    /// reported by the `list_roots` tool as `cachedRoots`).
    #[arg(long)]
    pub roots_on_init: bool,
    /// Append every JSON-RPC message received and sent, one JSON object per line
    /// `{"dir":"in"|"out","msg":<message>,"pid":<process id>}`, to this file.
    #[arg(long, env = "MRTR_LEGACY_LOG")]
    pub log: Option<std::path::PathBuf>,
    /// Push elicitation, sampling and roots requests even when the client did not declare the
    /// capability, as some real legacy servers do (the gateway must refuse them upstream).
    #[arg(long)]
    pub ignore_capabilities: bool,
}

/// Serve one session on any byte streams (tests use `tokio::io::duplex`).
///
/// Returns `Ok(())` once `input` reaches end of file; work still in flight at that point is
/// abandoned. Returns an error if the message log cannot be opened, if reading or writing
/// fails, or if the `crash` tool was called (recognise that case with [`is_crash_request`]);
/// in every case the output is shut down before returning.
pub async fn serve<R, W>(input: R, output: W, opts: Options) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    dispatch::run(input, output, opts).await
}

/// Serve on this process's stdin/stdout; returns when stdin closes.
///
/// When the `crash` tool is called the process exits with status 3 straight away, which is
/// what the gateway's crash handling is exercised against.
pub async fn run_stdio(opts: Options) -> io::Result<()> {
    match serve(tokio::io::stdin(), tokio::io::stdout(), opts).await {
        Err(err) if is_crash_request(&err) => {
            tracing::warn!("crash tool called; exiting with status 3");
            std::process::exit(3)
        }
        other => other,
    }
}

/// Whether an error returned by [`serve`] means the `crash` tool was called.
pub fn is_crash_request(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<CrashRequested>())
}

/// Carried inside the `io::Error` that [`serve`] returns after the `crash` tool ran.
#[derive(Debug, thiserror::Error)]
#[error("the crash tool was called")]
struct CrashRequested;

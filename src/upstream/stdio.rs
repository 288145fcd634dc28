//! Legacy stdio backends: one task owns each child process. It reads stdout with a line limit
//! while a writer task it owns writes newline-delimited JSON to the child's stdin (so a child
//! that answers at length before reading on never blocks both), sends stderr to tracing, and on
//! shutdown closes stdin, waits, then kills; the child is always reaped. The child leads a
//! process group of its own, and whatever is left of that group when it ends is killed too: a
//! server started through a wrapper (`sh -c`, `npx`, `uv run`) leaves no orphan behind.
//! Children of 2026-07-28 backends (`modern::stdio`) are started and ended the same way
//! ([`launch`], [`write_lines`]).

use super::Error;
use super::session::{Begin, Inbound, Start, Transport};
use crate::config::Stdio;
use crate::jsonrpc;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::process::Stdio as ProcStdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

/// How long a child gets to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Spawns the child, runs `initialize`, and hands the session to `begin`.
pub(crate) async fn spawn<B: Begin>(
    cfg: &Stdio,
    start: Start,
    shutdown: CancellationToken,
    begin: B,
) -> Result<B::Output, Error> {
    let child = launch(cfg, &start.backend)?;
    connect(
        child.stdout,
        child.stdin,
        cfg.write_queue,
        start,
        shutdown,
        child.on_exit,
        begin,
    )
    .await
}

/// A running child: its pipes, and what to await once its stdin is closed.
pub(super) struct Launched {
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    /// Waits [`EXIT_GRACE`] for the child to exit, kills it if it has not, then kills what is
    /// left of its process group.
    pub on_exit: BoxFuture<'static, ()>,
}

/// Starts `cfg`'s program in a process group of its own, its stderr drained to the log.
pub(super) fn launch(cfg: &Stdio, backend: &str) -> Result<Launched, Error> {
    let mut cmd = tokio::process::Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .envs(&cfg.env)
        .stdin(ProcStdio::piped())
        .stdout(ProcStdio::piped())
        .stderr(ProcStdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| {
        // The command line is the operator's business: clients hear only the error.
        tracing::warn!(%backend, command = %cfg.command.display(), "cannot start the backend: {e}");
        Error::Spawn {
            backend: backend.to_owned(),
            reason: e.to_string(),
        }
    })?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let pid = child.id();
    let name = backend.to_owned();
    // Drained to its end whatever it carries: a child whose stderr pipe closed would die on its
    // next log line.
    tokio::spawn(drain_stderr(
        stderr,
        cfg.max_stderr_line_bytes,
        move |line| {
            tracing::info!(backend = %name, pid, "stderr: {line}");
        },
    ));
    let backend = backend.to_owned();
    let group = Group(pid);
    let on_exit = Box::pin(async move {
        // Closing stdin (done by whoever owns it) asks the child to exit; then it is killed.
        match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            Ok(status) => tracing::debug!(%backend, pid, ?status, "backend exited"),
            Err(_) => {
                let _ = child.kill().await;
                tracing::debug!(%backend, pid, "backend killed after grace");
            }
        }
        // Dropped here, or with the task if it never gets this far: the rest of the group goes
        // (the child itself, once its grace is over, was killed above).
        drop(group);
    });
    Ok(Launched {
        stdin,
        stdout,
        on_exit,
    })
}

/// The process group a child leads (its id is the child's pid). Dropping it kills what is left
/// of the group. The id cannot name another group meanwhile: a pid is not handed out again while
/// a process still uses it as its group's id.
#[derive(Debug)]
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self
            .0
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // ESRCH (nothing left of the group) is the usual outcome.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Reads `stderr` until it ends, handing each line to `log`: bytes that are not UTF-8 are
/// replaced, and a line longer than `max` bytes is cut there (and says so), so a child that
/// writes without newlines holds at most `max` bytes here.
async fn drain_stderr<R: AsyncRead + Unpin>(stderr: R, max: usize, mut log: impl FnMut(&str)) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut dropped = 0usize;
    let mut say = |line: &mut Vec<u8>, dropped: &mut usize| {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches('\r');
        if *dropped > 0 {
            log(&format!(
                "{text}… ({dropped} more bytes of this line dropped)"
            ));
        } else {
            log(text);
        }
        line.clear();
        *dropped = 0;
    };
    loop {
        let buf = match reader.fill_buf().await {
            Ok([]) => break,
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!("reading a backend's stderr failed: {e}");
                break;
            }
        };
        let end = buf.iter().position(|b| *b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        let kept = chunk.len().min(max - line.len());
        line.extend_from_slice(&chunk[..kept]);
        dropped += chunk.len() - kept;
        let used = end.map_or(buf.len(), |i| i + 1);
        reader.consume(used);
        if end.is_some() {
            say(&mut line, &mut dropped);
        }
    }
    if !line.is_empty() || dropped > 0 {
        say(&mut line, &mut dropped);
    }
}

/// Runs a session over any byte streams (the built-in backend and tests use in-memory pipes);
/// at most `write_queue` lines wait for the writer: past them, the session task waits too, for
/// as long as the writer waits on a write that makes no progress (`start.init_timeout`).
pub(crate) async fn connect<R, W, F, B>(
    reader: R,
    writer: W,
    write_queue: usize,
    start: Start,
    shutdown: CancellationToken,
    on_exit: F,
    begin: B,
) -> Result<B::Output, Error>
where
    B: Begin,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    // The writer runs apart from the session task, which so keeps reading the child while a
    // write waits: a child that writes a large answer before it reads on never blocks both.
    let (out, queue) = mpsc::channel(write_queue);
    let failed = Arc::new(OnceLock::new());
    let stopped = CancellationToken::new();
    let writer = tokio::spawn(write_lines(
        writer,
        queue,
        start.init_timeout,
        failed.clone(),
        stopped.clone(),
    ));
    let lines = Lines {
        backend: start.backend.clone(),
        reader: FramedRead::new(
            reader,
            LinesCodec::new_with_max_length(start.max_message_bytes),
        ),
        out,
        writer,
        failed,
        stopped,
        max_depth: start.max_json_depth,
        unparseable: 0,
    };
    begin.begin(lines, start, shutdown, on_exit).await
}

/// How long a closing session's writer may take to pass on what is queued.
const CLOSE_WRITES: Duration = Duration::from_secs(2);

/// Newline-delimited JSON over a pair of byte streams: the session task reads, a writer task
/// (fed by a bounded queue) writes.
struct Lines<R> {
    backend: String,
    reader: FramedRead<R, LinesCodec>,
    out: mpsc::Sender<Vec<u8>>,
    writer: JoinHandle<()>,
    /// Why the writer stopped, once it has.
    failed: Arc<OnceLock<String>>,
    /// Cancelled when a write fails: the session is over.
    stopped: CancellationToken,
    max_depth: usize,
    /// Lines that were not JSON-RPC messages (see [`UNPARSEABLE_LOGGED`]).
    unparseable: u64,
}

/// Lines a session logs as warnings when its child writes something other than messages to
/// stdout (a banner, a progress bar); later ones are logged at debug level, and the session's
/// end says how many there were. A child that writes nothing else would fill the log otherwise.
pub(super) const UNPARSEABLE_LOGGED: u64 = 10;

impl<R> Lines<R> {
    fn write_failure(&self) -> String {
        self.failed
            .get()
            .cloned()
            .unwrap_or_else(|| "the backend's input is closed".to_owned())
    }
}

/// The writer task: writes each queued line, then closes the child's input once the session
/// lets go of the queue. A write that makes no progress for `stall` (the child reads nothing)
/// or fails ends it, saying why in `failed`.
pub(super) async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut queue: mpsc::Receiver<Vec<u8>>,
    stall: Duration,
    failed: Arc<OnceLock<String>>,
    stopped: CancellationToken,
) {
    while let Some(line) = queue.recv().await {
        if let Err(why) = write_line(&mut writer, &line, stall).await {
            let _ = failed.set(why);
            stopped.cancel();
            return;
        }
    }
    // Closing stdin asks a stdio server to exit.
    let _ = tokio::time::timeout(stall, writer.shutdown()).await;
}

async fn write_line<W: AsyncWrite + Unpin>(
    writer: &mut W,
    mut line: &[u8],
    stall: Duration,
) -> Result<(), String> {
    let stalled = || {
        format!(
            "the backend read none of its input for {}s",
            stall.as_secs_f64()
        )
    };
    while !line.is_empty() {
        match tokio::time::timeout(stall, writer.write(line)).await {
            Err(_) => return Err(stalled()),
            Ok(Ok(0)) => return Err("write failed: the backend closed its input".to_owned()),
            Ok(Ok(n)) => line = &line[n..],
            Ok(Err(e)) => return Err(format!("write failed: {e}")),
        }
    }
    match tokio::time::timeout(stall, writer.flush()).await {
        Err(_) => Err(stalled()),
        Ok(result) => result.map_err(|e| format!("write failed: {e}")),
    }
}

impl<R> Transport for Lines<R>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    async fn send(&mut self, msg: Value) -> Result<(), String> {
        let mut bytes = serde_json::to_vec(&msg).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        self.out.send(bytes).await.map_err(|_| self.write_failure())
    }

    async fn recv(&mut self) -> Inbound {
        loop {
            // Both cancel-safe: a partial line stays buffered in `FramedRead`.
            let next = tokio::select! {
                next = self.reader.next() => next,
                _ = self.stopped.cancelled() => {
                    return Inbound::ended(self.write_failure());
                }
            };
            let line = match next {
                Some(Ok(line)) => line,
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    return Inbound::ended("the backend sent a line over the size limit");
                }
                Some(Err(LinesCodecError::Io(e))) => {
                    return Inbound::ended(format!("read failed: {e}"));
                }
                None => return Inbound::ended("the backend exited"),
            };
            if line.trim().is_empty() {
                continue;
            }
            match jsonrpc::parse(line.as_bytes(), self.max_depth) {
                Ok(msg) => return Inbound::Message(msg),
                Err(e) => {
                    self.unparseable += 1;
                    match self.unparseable {
                        ..UNPARSEABLE_LOGGED => {
                            tracing::warn!(backend = %self.backend, "backend sent an unparseable line: {e}")
                        }
                        UNPARSEABLE_LOGGED => {
                            tracing::warn!(backend = %self.backend, "backend sent an unparseable line: {e}; this session logs further ones at debug level")
                        }
                        _ => {
                            tracing::debug!(backend = %self.backend, "backend sent an unparseable line: {e}")
                        }
                    }
                }
            }
        }
    }

    async fn close(self) {
        let Lines {
            out,
            writer,
            unparseable,
            backend,
            ..
        } = self;
        if unparseable > UNPARSEABLE_LOGGED {
            tracing::warn!(%backend, "backend sent {unparseable} unparseable lines in this session");
        }
        // The writer passes on what is queued, then closes the child's input; one that cannot
        // is stopped, which closes it too.
        drop(out);
        let abort = writer.abort_handle();
        if tokio::time::timeout(CLOSE_WRITES, writer).await.is_err() {
            abort.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Everything a child writes to stderr through a small pipe, and the lines logged from it.
    async fn drained(max: usize, written: Vec<u8>) -> Vec<String> {
        let (mut child, ours) = tokio::io::duplex(64);
        let mut lines = Vec::new();
        let writer = async move {
            // Completes only if the reader keeps reading: the pipe holds 64 bytes.
            child.write_all(&written).await.expect("stderr is drained");
        };
        let reader = drain_stderr(ours, max, |l| lines.push(l.to_owned()));
        tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(writer, reader)
        })
        .await
        .expect("drained to the end");
        lines
    }

    #[tokio::test]
    async fn a_child_that_writes_much_besides_messages_gets_ten_warnings_and_a_count() {
        let log = crate::app::LogSink::default();
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || sink.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let (mut child, ours) = tokio::io::duplex(1 << 16);
        let (out, _queued) = mpsc::channel(1);
        let mut lines = Lines {
            backend: "chatty".into(),
            reader: FramedRead::new(ours, LinesCodec::new_with_max_length(1 << 16)),
            out,
            writer: tokio::spawn(async {}),
            failed: Arc::default(),
            stopped: CancellationToken::new(),
            max_depth: 64,
            unparseable: 0,
        };
        let mut written = "progress 42%\n".repeat(25);
        written.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        child.write_all(written.as_bytes()).await.unwrap();
        assert!(matches!(lines.recv().await, Inbound::Message(_)));
        lines.close().await;
        let text = log.text();
        let warned = text.lines().filter(|l| l.contains("WARN")).count();
        assert_eq!(warned, 11, "ten lines and the count at the end:\n{text}");
        assert!(
            text.contains("backend sent 25 unparseable lines in this session"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_backend_that_stops_reading_ends_its_session_after_the_write_stalls() {
        use crate::upstream::CallEvent;
        use crate::upstream::session;
        let (ours, theirs) = tokio::io::duplex(1024);
        let (our_read, our_write) = tokio::io::split(ours);
        let (their_read, mut their_write) = tokio::io::split(theirs);
        // Answers `initialize`, then reads nothing more (and keeps its ends open).
        let backend = tokio::spawn(async move {
            let mut lines = BufReader::new(their_read).lines();
            let _ = lines.next_line().await;
            let answer = br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}"#;
            their_write.write_all(answer).await.expect("answer");
            their_write.write_all(b"\n").await.expect("answer");
            std::future::pending::<()>().await;
            drop(lines);
        });
        let start = Start {
            backend: "mute".into(),
            protocol_version: "2025-06-18",
            declared: Default::default(),
            client_info: None,
            max_message_bytes: 1 << 20,
            max_json_depth: 64,
            max_held_roots: 4,
            init_timeout: Duration::from_millis(300),
            rules: session::Rules {
                static_roots: Arc::new(Vec::new()),
                held_roots_wait: Duration::from_secs(1),
            },
            authorization: None,
            tasks: Default::default(),
            init_results: Default::default(),
            restarted: Default::default(),
        };
        let session = connect(
            our_read,
            our_write,
            crate::config::DEFAULT_WRITE_QUEUE,
            start,
            CancellationToken::new(),
            async {},
            session::Pooled,
        )
        .await
        .expect("initialized");
        let args = json!({"name": "t", "arguments": {"text": "x".repeat(100_000)}});
        let mut call = session
            .request("tools/call", Some(args), false)
            .await
            .expect("sent");
        let event = tokio::time::timeout(Duration::from_secs(5), call.events.recv())
            .await
            .expect("the call hears before its deadline");
        let Some(CallEvent::Closed(reason)) = event else {
            panic!("the call fails: {event:?}");
        };
        assert!(reason.contains("read none of its input"), "{reason}");
        assert!(!session.is_alive());
        backend.abort();
    }

    #[tokio::test]
    async fn stderr_that_is_not_utf8_is_logged_and_drained_to_the_end() {
        let mut written = b"before\n\xff\xfe broken\n".to_vec();
        written.extend(b"after\n".repeat(1000));
        let lines = drained(1024, written).await;
        assert_eq!(lines[0], "before");
        assert_eq!(lines[1], "\u{fffd}\u{fffd} broken");
        assert_eq!(lines.len(), 1002, "every line after the bad bytes is read");
        assert_eq!(lines[1001], "after");
    }

    #[tokio::test]
    async fn an_over_long_stderr_line_is_cut_and_the_next_one_is_whole() {
        let mut written = vec![b'x'; 100_000];
        written.extend(b"\nnext\nunfinished");
        let lines = drained(16, written).await;
        assert_eq!(
            lines,
            [
                "xxxxxxxxxxxxxxxx… (99984 more bytes of this line dropped)",
                "next",
                "unfinished",
            ]
        );
    }
}

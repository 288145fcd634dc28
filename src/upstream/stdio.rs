//! Legacy stdio backends: one task owns each child process. It writes newline-delimited JSON to
//! the child's stdin, reads stdout with a line limit, sends stderr to tracing, and on shutdown
//! closes stdin, waits, then kills; the child is always reaped.

use super::Error;
use super::session::{self, Inbound, Session, Start, Transport};
use crate::config::Stdio;
use crate::jsonrpc;
use futures_util::StreamExt;
use serde_json::Value;
use std::process::Stdio as ProcStdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

/// How long a child gets to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Spawns the child, runs `initialize`, and returns the handle of the task that owns it.
pub async fn spawn(
    cfg: &Stdio,
    start: Start,
    shutdown: CancellationToken,
) -> Result<Session, Error> {
    let mut cmd = tokio::process::Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .envs(&cfg.env)
        .stdin(ProcStdio::piped())
        .stdout(ProcStdio::piped())
        .stderr(ProcStdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = &cfg.cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| Error::Spawn {
        backend: start.backend.clone(),
        reason: format!("{}: {e}", cfg.command.display()),
    })?;
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let backend = start.backend.clone();
    let pid = child.id();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(backend = %backend, pid, "stderr: {line}");
        }
    });
    let backend = start.backend.clone();
    let on_exit = async move {
        // Closing stdin (done by the session task) asks the child to exit; then it is killed.
        match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            Ok(status) => tracing::debug!(backend = %backend, pid, ?status, "backend exited"),
            Err(_) => {
                let _ = child.kill().await;
                tracing::debug!(backend = %backend, pid, "backend killed after grace");
            }
        }
    };
    connect(stdout, stdin, start, shutdown, on_exit).await
}

/// Runs a session over any byte streams (the built-in backend and tests use in-memory pipes).
pub async fn connect<R, W, F>(
    reader: R,
    writer: W,
    start: Start,
    shutdown: CancellationToken,
    on_exit: F,
) -> Result<Session, Error>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let lines = Lines {
        backend: start.backend.clone(),
        reader: FramedRead::new(
            reader,
            LinesCodec::new_with_max_length(start.max_message_bytes),
        ),
        writer,
        max_depth: start.max_json_depth,
    };
    session::open(lines, start, shutdown, on_exit).await
}

/// Newline-delimited JSON over a pair of byte streams.
struct Lines<R, W> {
    backend: String,
    reader: FramedRead<R, LinesCodec>,
    writer: W,
    max_depth: usize,
}

impl<R, W> Transport for Lines<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    async fn send(&mut self, msg: Value) -> Result<(), String> {
        let mut bytes = serde_json::to_vec(&msg).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        self.writer
            .write_all(&bytes)
            .await
            .map_err(|e| format!("write failed: {e}"))?;
        self.writer
            .flush()
            .await
            .map_err(|e| format!("write failed: {e}"))
    }

    async fn recv(&mut self) -> Inbound {
        loop {
            // `FramedRead::next` is cancel-safe: a partial line stays buffered.
            let line = match self.reader.next().await {
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
                    tracing::warn!(backend = %self.backend, "backend sent an unparseable line: {e}")
                }
            }
        }
    }

    async fn close(mut self) {
        // Closing stdin asks a stdio server to exit.
        let _ = self.writer.shutdown().await;
    }
}

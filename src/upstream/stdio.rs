//! Legacy stdio backends: one task owns each child process. It writes newline-delimited JSON to
//! the child's stdin, reads stdout with a line limit, sends stderr to tracing, and on shutdown
//! closes stdin, waits, then kills; the child is always reaped.

use super::Error;
use super::session::{Cmd, InitInfo, Router, Rules, Session};
use crate::config::Stdio;
use crate::jsonrpc::{self, Message};
use crate::protocol::caps::Declared;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use std::process::Stdio as ProcStdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

static SESSION_IDS: AtomicU64 = AtomicU64::new(1);

/// How long a child gets to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Everything a new session needs to know.
#[derive(Debug, Clone)]
pub struct Start {
    pub backend: String,
    pub protocol_version: &'static str,
    pub declared: Declared,
    pub modern_caps: Map<String, Value>,
    pub client_info: Option<Value>,
    pub max_line_bytes: usize,
    pub max_json_depth: usize,
    pub init_timeout: Duration,
    pub rules: Rules,
}

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
        // Closing stdin (dropped with the writer) asks the child to exit; then it is killed.
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

/// Runs `initialize` over any byte streams and starts the session task (tests use in-memory pipes).
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
    let mut lines = FramedRead::new(
        reader,
        LinesCodec::new_with_max_length(start.max_line_bytes),
    );
    let mut writer = writer;
    let backend = start.backend.clone();
    let init_error = |reason: String| Error::Init {
        backend: backend.clone(),
        reason,
    };

    let params = json!({
        "protocolVersion": start.protocol_version,
        "capabilities": start.declared.to_legacy(start.protocol_version, &start.modern_caps),
        "clientInfo": start.client_info.clone().unwrap_or_else(|| json!({"name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION")})),
    });
    let init = Message::Request {
        id: jsonrpc::Id::Number(0),
        method: "initialize".into(),
        params: Some(params),
    }
    .to_value();
    write_line(&mut writer, &init)
        .await
        .map_err(|e| init_error(e.to_string()))?;

    let handshake = async {
        loop {
            let line = match lines.next().await {
                Some(Ok(line)) => line,
                Some(Err(e)) => return Err(init_error(line_error(&e))),
                None => return Err(init_error("the backend closed its output".into())),
            };
            match jsonrpc::parse(line.as_bytes(), start.max_json_depth) {
                Ok(Message::Response {
                    id: jsonrpc::Id::Number(0),
                    outcome,
                }) => {
                    return outcome
                        .map_err(|e| init_error(format!("error {}: {}", e.code, e.message)));
                }
                Ok(Message::Request { id, .. }) => {
                    // Requests before the handshake ends (e.g. ping) get an error; none is a call's.
                    let resp = jsonrpc::response(
                        Some(&id),
                        Err(jsonrpc::ErrorObject::new(
                            jsonrpc::INTERNAL_ERROR,
                            "not initialized",
                        )),
                    );
                    write_line(&mut writer, &resp)
                        .await
                        .map_err(|e| init_error(e.to_string()))?;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(backend = %start.backend, "unparseable line during initialize: {e}")
                }
            }
        }
    };
    let result = tokio::time::timeout(start.init_timeout, handshake)
        .await
        .map_err(|_| init_error("no initialize result in time".into()))??;
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !crate::protocol::is_legacy(&version) {
        return Err(init_error(format!(
            "unsupported protocol version `{version}`"
        )));
    }
    let initialized = Message::Notification {
        method: "notifications/initialized".into(),
        params: None,
    }
    .to_value();
    write_line(&mut writer, &initialized)
        .await
        .map_err(|e| init_error(e.to_string()))?;

    let declared = start.declared.at_version(&version);
    let info = InitInfo {
        protocol_version: version,
        result,
        declared,
    };
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let alive = Arc::new(AtomicBool::new(true));
    let id = SESSION_IDS.fetch_add(1, Ordering::Relaxed);
    let session = Session::new(id, start.backend.clone(), cmd_tx, info, alive.clone());
    let router = Router::new(start.backend.clone(), declared, start.rules.clone());
    tokio::spawn(async move {
        run(
            lines,
            writer,
            cmd_rx,
            router,
            start.max_json_depth,
            shutdown,
        )
        .await;
        alive.store(false, Ordering::Release);
        on_exit.await;
    });
    Ok(session)
}

async fn run<R, W>(
    mut lines: FramedRead<R, LinesCodec>,
    mut writer: W,
    mut cmds: mpsc::Receiver<Cmd>,
    mut router: Router,
    max_depth: usize,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let reason = loop {
        let held = router.next_deadline();
        tokio::select! {
            _ = shutdown.cancelled() => break "the gateway is shutting down".to_owned(),
            _ = async { tokio::time::sleep_until(held.expect("guarded")).await }, if held.is_some() => {
                if let Err(e) = write_all(&mut writer, router.expire_held(tokio::time::Instant::now())).await {
                    break format!("write failed: {e}");
                }
            }
            cmd = cmds.recv() => {
                let Some(cmd) = cmd else { break "the session was closed".to_owned() };
                let msg = match cmd {
                    Cmd::Request { method, params, interactive, reply } => {
                        let (call, msg) = router.start(method, params, interactive).await;
                        let _ = reply.send(Ok(call));
                        msg
                    }
                    Cmd::Respond { id, outcome } => jsonrpc::response(Some(&id), outcome),
                    Cmd::Notify { method, params } => Message::Notification { method, params }.to_value(),
                    Cmd::Forget { id } => { router.forget(&id); continue; }
                };
                if let Err(e) = write_line(&mut writer, &msg).await { break format!("write failed: {e}"); }
            }
            line = lines.next() => {
                let line = match line {
                    Some(Ok(line)) => line,
                    Some(Err(e)) => break line_error(&e),
                    None => break "the backend exited".to_owned(),
                };
                if line.trim().is_empty() { continue; }
                match jsonrpc::parse(line.as_bytes(), max_depth) {
                    Ok(msg) => {
                        let out = router.route(msg).await;
                        if let Err(e) = write_all(&mut writer, out).await {
                            break format!("write failed: {e}");
                        }
                    }
                    Err(e) => tracing::warn!(backend = %router.backend, "backend sent an unparseable line: {e}"),
                }
            }
        }
    };
    tracing::info!(backend = %router.backend, "upstream session ended: {reason}");
    router.close_all(&reason).await;
    let _ = writer.shutdown().await;
}

fn line_error(e: &LinesCodecError) -> String {
    match e {
        LinesCodecError::MaxLineLengthExceeded => {
            "the backend sent a line over the size limit".into()
        }
        LinesCodecError::Io(e) => format!("read failed: {e}"),
    }
}

async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, msgs: Vec<Value>) -> std::io::Result<()> {
    for msg in msgs {
        write_line(w, &msg).await?;
    }
    Ok(())
}

async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, msg: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    w.write_all(&bytes).await?;
    w.flush().await
}

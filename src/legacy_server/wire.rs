//! JSON-RPC message shapes, error codes, the single writer of the output stream and the
//! optional message log.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// MCP's code for `resources/read` of an unknown URI.
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;
/// MCP 2025-11-25's `URLElicitationRequiredError`.
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;

/// A JSON-RPC error object, either produced here or received from the client.
///
/// Its `Display` form (`error <code>: <message>`) is exactly the text tools report when the
/// client answered one of their requests with an error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("error {code}: {message}")]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// Reads the `error` member of a client's response, tolerating sloppy shapes so that a
    /// malformed error still fails the waiting tool instead of hanging it.
    pub(crate) fn from_client(error: &Value) -> Self {
        Self {
            code: error
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(INTERNAL_ERROR),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_owned(),
            data: error.get("data").cloned(),
        }
    }

    fn to_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), self.code.into());
        obj.insert("message".into(), self.message.clone().into());
        if let Some(data) = &self.data {
            obj.insert("data".into(), data.clone());
        }
        Value::Object(obj)
    }
}

/// A response to the client's request `id`.
pub(crate) fn response(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(err) => json!({"jsonrpc": "2.0", "id": id, "error": err.to_value()}),
    }
}

/// A server->client request.
pub(crate) fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// What the writer task is asked to do.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// A message, with the id of the client request it was made for, if any.
    Message { msg: Value, origin: Option<Value> },
    /// Flush, shut the output down and acknowledge.
    Shutdown(oneshot::Sender<()>),
}

/// Where the writer task puts outgoing messages.
pub(crate) trait Sink: Send + 'static {
    fn put(
        &mut self,
        msg: Value,
        origin: Option<Value>,
    ) -> impl Future<Output = io::Result<()>> + Send;
    fn close(&mut self) -> impl Future<Output = io::Result<()>> + Send;
}

/// Newline-delimited JSON on a byte stream (stdio, in-memory pipes).
#[derive(Debug)]
pub(crate) struct Lines<W>(pub W);

impl<W: AsyncWrite + Unpin + Send + 'static> Sink for Lines<W> {
    async fn put(&mut self, msg: Value, _origin: Option<Value>) -> io::Result<()> {
        let mut line = serde_json::to_string(&msg).map_err(io::Error::other)?;
        line.push('\n');
        self.0.write_all(line.as_bytes()).await?;
        self.0.flush().await
    }

    async fn close(&mut self) -> io::Result<()> {
        self.0.flush().await?;
        self.0.shutdown().await
    }
}

/// An outgoing message and the id of the client request it was made for.
#[derive(Debug)]
pub(crate) struct Routed {
    pub msg: Value,
    pub origin: Option<Value>,
}

/// Hands messages, still tagged with their origin, to an HTTP transport.
#[derive(Debug)]
pub(crate) struct Channel(pub mpsc::Sender<Routed>);

impl Sink for Channel {
    async fn put(&mut self, msg: Value, origin: Option<Value>) -> io::Result<()> {
        self.0
            .send(Routed { msg, origin })
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "transport closed"))
    }

    async fn close(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Owns the output so that concurrently running handlers never interleave messages.
pub(crate) async fn write_loop<S: Sink>(
    mut out: S,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    log: Option<std::sync::Arc<MessageLog>>,
) -> io::Result<()> {
    while let Some(item) = rx.recv().await {
        match item {
            Outgoing::Message { msg, origin } => {
                if let Some(log) = &log {
                    log.record(Direction::Out, &msg);
                }
                out.put(msg, origin).await?;
            }
            Outgoing::Shutdown(ack) => {
                out.close().await?;
                let _ = ack.send(());
                return Ok(());
            }
        }
    }
    out.close().await
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Direction {
    In,
    Out,
}

#[derive(Serialize)]
struct LogEntry<'a> {
    dir: Direction,
    msg: &'a Value,
    pid: u32,
}

/// Append-only record of every message crossing the wire, one JSON object per line.
///
/// Each entry is written with a single unbuffered `write_all` on an `O_APPEND` file so that a
/// test reading the file concurrently sees whole lines, even with several server processes
/// sharing one log.
#[derive(Debug)]
pub(crate) struct MessageLog {
    file: Mutex<File>,
    pid: u32,
}

impl MessageLog {
    /// The log at `path`, if one was asked for (`--log`).
    pub(crate) fn open_if(path: Option<&Path>) -> io::Result<Option<std::sync::Arc<Self>>> {
        path.map(Self::open)
            .transpose()
            .map(|log| log.map(std::sync::Arc::new))
    }

    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Mutex::new(file),
            pid: std::process::id(),
        })
    }

    pub(crate) fn record(&self, dir: Direction, msg: &Value) {
        let entry = LogEntry {
            dir,
            msg,
            pid: self.pid,
        };
        let Ok(line) = serde_json::to_string(&entry) else {
            return;
        };
        self.append(line);
    }

    /// Records one HTTP request as received, before any checks.
    pub(crate) fn record_http(&self, req: &HttpRequestSeen<'_>) {
        let entry = HttpLogEntry {
            dir: "http",
            req,
            pid: self.pid,
        };
        if let Ok(line) = serde_json::to_string(&entry) {
            self.append(line);
        }
    }

    fn append(&self, mut line: String) {
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(err) = file.write_all(line.as_bytes()) {
            tracing::warn!(%err, "could not append to the message log");
        }
    }
}

/// What the message log keeps of an HTTP request: the headers tests make assertions on.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HttpRequestSeen<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub session: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    pub last_event_id: Option<&'a str>,
    /// Every `x-*` header, lowercase name to value.
    pub extra: std::collections::BTreeMap<&'a str, &'a str>,
}

#[derive(Serialize)]
struct HttpLogEntry<'a> {
    dir: &'static str,
    #[serde(flatten)]
    req: &'a HttpRequestSeen<'a>,
    pid: u32,
}

//! The legacy server over HTTP: Streamable HTTP (2025-03-26 .. 2025-11-25) at `/mcp` and the
//! 2024-11-05 HTTP+SSE transport at `/sse` + `/messages`.
//!
//! This module owns the listener, the connections and the table of sessions. Each session is
//! one instance of the legacy core ([`super::dispatch::run`]) fed through an in-memory pipe;
//! its output comes back tagged with the client request it was made for, and
//! [`streams::Streams`] puts every message on the right connection. Sessions end on DELETE,
//! on `POST /control/expire` (every session at once, as if the server had restarted), when a
//! 2024-11-05 event stream closes, and at shutdown.

mod sse_transport;
mod streamable;
mod streams;

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use self::streams::{Policy, StreamError, Streams};
use super::session::lock;
use super::wire::{self, Channel, HttpRequestSeen, MessageLog, Routed, RpcError};
use super::{CrashRequested, Options, dispatch, is_crash_request};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How long shutdown waits for connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Size of the in-memory pipe feeding each session's legacy core.
const PIPE_BYTES: usize = 64 * 1024;
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Which HTTP transport to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Streamable,
    Sse,
}

/// Serves the legacy server over Streamable HTTP at `/mcp` until `shutdown` is cancelled.
///
/// Returns an error if the message log cannot be opened or the `crash` tool was called (see
/// [`super::is_crash_request`]).
pub async fn serve_http(
    listener: TcpListener,
    opts: Options,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve(listener, opts, Mode::Streamable, shutdown).await
}

/// Serves the legacy server over the 2024-11-05 HTTP+SSE transport (`GET /sse`,
/// `POST /messages?session_id=..`) until `shutdown` is cancelled.
pub async fn serve_sse(
    listener: TcpListener,
    opts: Options,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve(listener, opts, Mode::Sse, shutdown).await
}

async fn serve(
    listener: TcpListener,
    opts: Options,
    mode: Mode,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let log = MessageLog::open_if(opts.log.as_deref())?;
    let padding = (opts.http.header_padding > 0)
        .then(|| http::HeaderValue::from_str(&"p".repeat(opts.http.header_padding)).ok())
        .flatten();
    let server = Arc::new(Server {
        permits: Arc::new(Semaphore::new(opts.http.max_connections.max(1))),
        padding,
        opts,
        mode,
        log,
        sessions: Mutex::new(HashMap::new()),
        tasks: TaskTracker::new(),
        crashed: CancellationToken::new(),
    });
    let stop = shutdown.child_token();
    let connections = TaskTracker::new();
    let outcome = loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => break Ok(()),
            () = server.crashed.cancelled() => break Err(io::Error::other(CrashRequested)),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(%err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&server.permits).try_acquire_owned() else {
            tracing::warn!(%peer, "connection limit reached; closing");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let server = Arc::clone(&server);
        let stop = stop.clone();
        connections.spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn({
                let server = Arc::clone(&server);
                move |req| {
                    let server = Arc::clone(&server);
                    async move {
                        let mut response = server.handle(req).await;
                        server.pad(&mut response);
                        Ok::<_, Infallible>(response)
                    }
                }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                res = conn.as_mut() => if let Err(err) = res {
                    tracing::debug!(%peer, %err, "connection ended");
                },
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
                () = server.crashed.cancelled() => {}
            }
        });
    };
    drop(listener);
    stop.cancel();
    // Ending every session ends every event stream, which lets connections close.
    server.expire_all();
    connections.close();
    server.tasks.close();
    let all = async {
        connections.wait().await;
        server.tasks.wait().await;
    };
    if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
        tracing::warn!("HTTP connections still open after the shutdown grace");
    }
    outcome
}

#[derive(Debug)]
struct Server {
    opts: Options,
    mode: Mode,
    log: Option<Arc<MessageLog>>,
    sessions: Mutex<HashMap<String, Arc<HttpSession>>>,
    /// Every session's tasks.
    tasks: TaskTracker,
    permits: Arc<Semaphore>,
    /// `--header-padding`: the `X-Padding` value added to every response head.
    padding: Option<http::HeaderValue>,
    /// Cancelled when a session's `crash` tool runs: the whole server goes down, as a
    /// crashing process would.
    crashed: CancellationToken,
}

/// One legacy session reachable over HTTP.
#[derive(Debug)]
struct HttpSession {
    id: String,
    /// Messages for the legacy core, in arrival order.
    input: mpsc::Sender<Value>,
    streams: Mutex<Streams>,
    /// Cancelled when the session ends, for whatever reason.
    ended: CancellationToken,
}

impl HttpSession {
    fn streams(&self) -> std::sync::MutexGuard<'_, Streams> {
        lock(&self.streams)
    }

    /// Hands messages to the legacy core, in order.
    async fn deliver(&self, msgs: Vec<Value>) -> Result<(), HttpError> {
        for msg in msgs {
            self.input
                .send(msg)
                .await
                .map_err(|_| HttpError::SessionEnded)?;
        }
        Ok(())
    }
}

/// Why an HTTP request is refused. [`HttpError::into_response`] is the one place these
/// become status codes and bodies.
#[derive(Debug, thiserror::Error)]
enum HttpError {
    #[error("Bad Request: missing Mcp-Session-Id")]
    MissingSession,
    #[error("Bad Request: missing session_id")]
    MissingSessionParam,
    #[error("Not Found: unknown or expired session")]
    UnknownSession,
    #[error("Not Found: the session ended")]
    SessionEnded,
    #[error("Bad Request: unsupported MCP-Protocol-Version {0}")]
    UnsupportedVersion(String),
    #[error("Conflict: {0}")]
    Busy(StreamError),
    #[error("Bad Request: {0}")]
    BadEventId(StreamError),
    #[error("too many sessions (limit {0})")]
    TooManySessions(usize),
    #[error("Payload Too Large")]
    TooLarge,
    #[error("Bad Request: unreadable body")]
    UnreadableBody,
    /// Answered with a JSON-RPC error object.
    #[error("Parse error: {0}")]
    Parse(String),
    /// Answered with a JSON-RPC error object.
    #[error("{0}")]
    InvalidRequest(String),
    #[error("Method Not Allowed")]
    MethodNotAllowed,
    #[error("Not Found")]
    NoRoute,
}

impl From<StreamError> for HttpError {
    fn from(err: StreamError) -> Self {
        match err {
            StreamError::Busy => Self::Busy(err),
            StreamError::BadEventId => Self::BadEventId(err),
            StreamError::DuplicateId(_) => Self::InvalidRequest(err.to_string()),
        }
    }
}

impl HttpError {
    fn status(&self) -> StatusCode {
        match self {
            Self::MissingSession
            | Self::MissingSessionParam
            | Self::UnsupportedVersion(_)
            | Self::BadEventId(_)
            | Self::UnreadableBody
            | Self::Parse(_)
            | Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::UnknownSession | Self::SessionEnded | Self::NoRoute => StatusCode::NOT_FOUND,
            Self::Busy(_) => StatusCode::CONFLICT,
            Self::TooManySessions(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    fn into_response(self) -> Response<Body> {
        let status = self.status();
        let code = match &self {
            Self::Parse(_) => wire::PARSE_ERROR,
            Self::InvalidRequest(_) => wire::INVALID_REQUEST,
            _ => return text(status, &self.to_string()),
        };
        let error = RpcError::new(code, self.to_string());
        json_response(status, &wire::response(Value::Null, Err(error)))
    }
}

type Handled = Result<Response<Body>, HttpError>;

impl Server {
    /// Adds `--header-padding` bytes to a response head.
    fn pad(&self, response: &mut Response<Body>) {
        if let Some(value) = &self.padding {
            response.headers_mut().insert("x-padding", value.clone());
        }
    }

    async fn handle(self: &Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        self.record(&req);
        let handled = match (self.mode, req.uri().path()) {
            (_, "/control/expire") if req.method() == Method::POST => {
                let n = self.expire_all();
                Ok(json_response(StatusCode::OK, &json!({"expired": n})))
            }
            (_, "/control/expire") => Err(HttpError::MethodNotAllowed),
            (Mode::Streamable, "/mcp") => streamable::handle(self, req).await,
            (Mode::Sse, "/sse") if req.method() == Method::GET => sse_transport::open(self),
            (Mode::Sse, "/messages") if req.method() == Method::POST => {
                sse_transport::post(self, req).await
            }
            (Mode::Sse, "/sse" | "/messages") => Err(HttpError::MethodNotAllowed),
            _ => Err(HttpError::NoRoute),
        };
        handled.unwrap_or_else(HttpError::into_response)
    }

    fn record(&self, req: &Request<Incoming>) {
        let Some(log) = &self.log else {
            return;
        };
        let headers = req.headers();
        log.record_http(&HttpRequestSeen {
            method: req.method().as_str(),
            path: req.uri().path(),
            session: header_str(headers, "mcp-session-id"),
            authorization: header_str(headers, "authorization"),
            protocol_version: header_str(headers, "mcp-protocol-version"),
            last_event_id: header_str(headers, "last-event-id"),
            extra: headers
                .iter()
                .filter(|(name, _)| name.as_str().starts_with("x-"))
                .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
                .collect(),
        });
    }

    fn session(&self, id: &str) -> Result<Arc<HttpSession>, HttpError> {
        lock(&self.sessions)
            .get(id)
            .cloned()
            .ok_or(HttpError::UnknownSession)
    }

    /// Starts a legacy core for a new session.
    fn create_session(self: &Arc<Self>) -> Result<Arc<HttpSession>, HttpError> {
        let http = &self.opts.http;
        let policy = Policy {
            json_response: self.mode == Mode::Streamable && http.json_response,
            push_on_get: http.push_on_get,
            resumable: self.mode == Mode::Streamable
                && (http.close_post_early || http.event_ids || http.resume_gap || http.poll_get),
            close_early: self.mode == Mode::Streamable && http.close_post_early,
            resume_gap: self.mode == Mode::Streamable && http.resume_gap,
            poll_get: self.mode == Mode::Streamable && http.poll_get,
            batch: self.mode == Mode::Streamable && http.batch_responses,
            limit: http.max_queued_events,
        };
        let queue = http.max_queued_events.max(1);
        let (input, mut input_rx) = mpsc::channel::<Value>(queue);
        let (out_tx, mut out_rx) = mpsc::channel::<Routed>(queue);
        let session = Arc::new(HttpSession {
            id: new_session_id(),
            input,
            streams: Mutex::new(Streams::new(policy)),
            ended: CancellationToken::new(),
        });
        {
            let mut sessions = lock(&self.sessions);
            if sessions.len() >= http.max_sessions {
                return Err(HttpError::TooManySessions(http.max_sessions));
            }
            sessions.insert(session.id.clone(), Arc::clone(&session));
        }

        let (mut pipe_in, pipe_out) = tokio::io::duplex(PIPE_BYTES);
        // Feeds the core; when the session ends the pipe closes and the core shuts down. What
        // was accepted before the end (a POST already answered for it) still reaches the core.
        let feeder = Arc::clone(&session);
        self.tasks.spawn(async move {
            loop {
                let msg = tokio::select! {
                    biased;
                    msg = input_rx.recv() => match msg {
                        Some(msg) => msg,
                        None => break,
                    },
                    () = feeder.ended.cancelled() => break,
                };
                let mut line = msg.to_string();
                line.push('\n');
                if pipe_in.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
            let _ = pipe_in.shutdown().await;
        });
        let server = Arc::clone(self);
        let core_session = Arc::clone(&session);
        let opts = self.opts.clone();
        self.tasks.spawn(async move {
            let outcome = dispatch::run(pipe_out, Channel(out_tx), opts).await;
            match outcome {
                Err(err) if is_crash_request(&err) => {
                    tracing::warn!("crash tool called; the HTTP server goes down");
                    server.crashed.cancel();
                }
                Err(err) => tracing::info!(%err, "legacy session ended"),
                Ok(()) => {}
            }
            server.end_session(&core_session);
        });
        // Routes the core's output onto connections.
        let router = Arc::clone(&session);
        self.tasks.spawn(async move {
            loop {
                let routed = tokio::select! {
                    () = router.ended.cancelled() => break,
                    routed = out_rx.recv() => match routed {
                        Some(routed) => routed,
                        None => break,
                    },
                };
                router.streams().route(routed.msg, routed.origin.as_ref());
            }
            router.streams().close_all();
        });
        tracing::info!(session = %session.id, "session created");
        Ok(session)
    }

    fn end_session(&self, session: &HttpSession) {
        {
            let mut sessions = lock(&self.sessions);
            if sessions
                .get(&session.id)
                .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), session))
            {
                sessions.remove(&session.id);
            }
        }
        session.ended.cancel();
        session.streams().close_all();
    }

    /// Forgets every session; returns how many there were.
    fn expire_all(&self) -> usize {
        let all: Vec<Arc<HttpSession>> = lock(&self.sessions).drain().map(|(_, s)| s).collect();
        for session in &all {
            session.ended.cancel();
            session.streams().close_all();
        }
        if !all.is_empty() {
            tracing::info!(count = all.len(), "sessions expired");
        }
        all.len()
    }
}

fn new_session_id() -> String {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut bytes = [0u8; 16];
    if SystemRandom::new().fill(&mut bytes).is_err() {
        // Uniqueness is all a fixture needs; fall back to something unique per process.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return format!("{:x}-{n}", std::process::id());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A client message as the HTTP layer sees it.
#[derive(Debug)]
enum Kind {
    Request(String),
    Notification,
    Response,
}

fn classify(msg: &Value) -> Option<Kind> {
    let obj = msg.as_object()?;
    match (obj.get("method"), obj.get("id")) {
        (Some(Value::String(_)), Some(id)) if id.is_string() || id.is_number() => {
            Some(Kind::Request(streams::id_key(id)))
        }
        (Some(Value::String(_)), None) => Some(Kind::Notification),
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => {
            Some(Kind::Response)
        }
        _ => None,
    }
}

/// A POST body: one JSON-RPC message or a batch of them.
#[derive(Debug)]
struct Posted {
    msgs: Vec<Value>,
    batch: bool,
}

/// Reads and checks a POST body.
async fn read_posted(req: Request<Incoming>, limit: usize) -> Result<Posted, HttpError> {
    let bytes = match Limited::new(req.into_body(), limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            return Err(HttpError::TooLarge);
        }
        Err(_) => return Err(HttpError::UnreadableBody),
    };
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|err| HttpError::Parse(err.to_string()))?;
    let (msgs, batch) = match value {
        Value::Array(items) if !items.is_empty() => (items, true),
        Value::Array(_) => return Err(HttpError::InvalidRequest("empty batch".into())),
        msg => (vec![msg], false),
    };
    if msgs.iter().any(|m| classify(m).is_none()) {
        return Err(HttpError::InvalidRequest(
            "not a JSON-RPC request, notification or response".into(),
        ));
    }
    Ok(Posted { msgs, batch })
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    typed(
        status,
        "text/plain; charset=utf-8",
        full(message.to_owned()),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    typed(status, "application/json", full(body.to_string()))
}

fn typed(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}

/// An event-stream response fed by `rx`; `guard` (if any) fires when the client goes away
/// or the stream ends.
fn sse_response(rx: mpsc::Receiver<Bytes>, guard: Option<DropGuard>) -> Response<Body> {
    let stream = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let bytes = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), (rx, guard)))
    });
    let mut resp = typed(
        StatusCode::OK,
        "text/event-stream",
        StreamBody::new(stream).boxed_unsync(),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    resp
}

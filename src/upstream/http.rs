//! Legacy Streamable HTTP backends (2025-03-26 .. 2025-11-25), and the HTTP plumbing the
//! 2024-11-05 HTTP+SSE transport (`http_sse`) shares.
//!
//! Every message to the backend is a POST. A request's answer comes back as JSON or as an SSE
//! stream that may carry the backend's own requests and notifications before the response. The
//! call that sent the request reads that stream itself (`Direct`): its response and progress
//! reach it without a detour, and the backend's requests go to the session task to be routed,
//! so a long tool call never blocks the session. The backend's answers to our answers (202) are
//! awaited in line, in order. One more task keeps the standalone GET stream open for pushes
//! unrelated to a POST. A stream that ends early after giving event ids is resumed with GET +
//! `Last-Event-ID`. A 404 on a known session means the backend forgot it: the request that saw it
//! is reported as never delivered (so a new call can go to a new session), and the session ends.

use super::h1::{self, Body};
use super::session::{Inbound, Mark, Transport};
use crate::config::Http as Config;
use crate::jsonrpc::{self, Id, Message};
use crate::protocol::header::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::sse::{self, DecodeError};
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a stream's messages go: the session task's queue, or a call reading its own stream.
pub(crate) type Sink = mpsc::Sender<Box<Inbound>>;

pub use super::h1::{Client, Request};

/// How many times in a row one request's stream is resumed with `Last-Event-ID` without
/// progress before giving up: with the waits between them, about 1.3 s, or eight of the
/// backend's `retry` hints when those are longer.
const MAX_RESUMES: u32 = 8;
/// The first wait before resuming again after a pick-up that brought nothing; it doubles.
const RESUME_BACKOFF: Duration = Duration::from_millis(10);
/// How long a picked-up stream may stay quiet before it is picked up again, at first...
const QUIET_FIRST: Duration = Duration::from_millis(500);
/// ...and at most.
const QUIET_MAX: Duration = Duration::from_secs(30);
/// Longest wait between reconnects of the standalone GET stream, and the cap on a server's
/// `retry` hint.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long closing a session (DELETE) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Inbound queue depth: a full queue slows the backend's streams, never drops.
const INBOUND: usize = 64;
/// How much of an unexpected body is quoted in an error.
const SNIPPET: usize = 160;

/// Builds the client for one backend: keep-alive pools of at most `pool_max` idle connections,
/// connect timeout, TLS for `https` URLs with the bundled Mozilla roots or the backend's own CA,
/// and the gateway's client certificate where one is configured.
pub fn client(cfg: &Config, pool_max: usize) -> Client {
    // One TLS configuration (and root store) for all the pools.
    Client::new(
        h1::connector(
            cfg.connect_timeout,
            cfg.ca.as_ref().map(|ca| &*ca.roots),
            cfg.client_cert.as_ref().map(|c| &c.key),
        ),
        pool_max,
        cfg.max_response_head_bytes,
    )
}

/// What the HTTP transports share with the tasks they spawn.
#[derive(Debug)]
pub(crate) struct Link {
    pub backend: String,
    pub client: Client,
    /// Configured headers plus the `Authorization` the backend's policy allows.
    pub headers: HeaderMap,
    pub max_message: usize,
    pub max_depth: usize,
    /// Deadline for response headers and for whole JSON bodies.
    pub timeout: Duration,
    /// Boxed: the queue allocates room for 32 messages up front, for every session.
    pub inbound: Sink,
    /// Cancelled when the session closes: every task of the session stops.
    pub stop: CancellationToken,
}

/// Why an exchange with the backend failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Could not connect or send: the request may not have reached the backend.
    Connect(String),
    Timeout,
    /// The backend forgot the session (404 on a known session id).
    Gone,
    /// Anything else, said as the call should hear it.
    Other(String),
}

impl Failure {
    /// What happened, said of the backend without naming it: messages to clients name it once
    /// where they are made, and logs carry it as a field.
    pub fn describe(&self) -> String {
        match self {
            Failure::Connect(e) => format!("not reachable: {e}"),
            Failure::Timeout => "did not answer in time".to_owned(),
            Failure::Gone => "forgot the session (HTTP 404)".to_owned(),
            Failure::Other(e) => e.clone(),
        }
    }
}

impl Link {
    pub fn new(
        backend: String,
        client: Client,
        headers: HeaderMap,
        start: &super::session::Start,
        stop: CancellationToken,
    ) -> (Arc<Link>, mpsc::Receiver<Box<Inbound>>) {
        let (inbound, rx) = mpsc::channel(INBOUND);
        let link = Link {
            backend,
            client,
            headers,
            max_message: start.max_message_bytes,
            max_depth: start.max_json_depth,
            timeout: start.init_timeout,
            inbound,
            stop,
        };
        (Arc::new(link), rx)
    }

    /// Sends one HTTP request and waits for its response headers.
    pub async fn exchange(
        &self,
        method: Method,
        url: &Uri,
        headers: &[(HeaderName, HeaderValue)],
        json: Option<&[u8]>,
    ) -> Result<http::Response<Body>, Failure> {
        let req = h1::Request {
            method: &method,
            uri: url,
            configured: &self.headers,
            headers,
            json,
        };
        // Boxed: a request's task keeps the room of its largest phase for as long as it lives,
        // and a parked call's lives until the retry.
        match tokio::time::timeout(self.timeout, Box::pin(self.client.send(req))).await {
            Err(_) => Err(Failure::Timeout),
            Ok(Err(h1::Error::Connect(e))) => Err(Failure::Connect(e)),
            Ok(Err(e @ h1::Error::HeadTooLarge(_))) => Err(Failure::Other(e.to_string())),
            Ok(Err(h1::Error::Exchange(e))) => {
                Err(Failure::Other(format!("the HTTP exchange failed: {e}")))
            }
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// Reads a whole JSON body (within the size limit and the deadline) as messages.
    pub async fn read_json(&self, body: Body) -> Result<Vec<Message>, Failure> {
        let bytes = match tokio::time::timeout(
            self.timeout,
            Limited::new(body, self.max_message).collect(),
        )
        .await
        {
            Err(_) => return Err(Failure::Timeout),
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Err(Failure::Other(format!(
                    "a response body over {} bytes",
                    self.max_message
                )));
            }
            Ok(Err(e)) => return Err(Failure::Other(format!("reading the body failed: {e}"))),
            Ok(Ok(b)) => b.to_bytes(),
        };
        jsonrpc::parse_many(&bytes, self.max_depth).map_err(|e| {
            // What the backend wrote stays in the log: it may hold what clients must not see.
            tracing::warn!(backend = %self.backend, body = %snippet(&bytes), "a body that is not JSON-RPC");
            Failure::Other(format!("a body that is not JSON-RPC ({e})"))
        })
    }

    /// Pumps an SSE body into the session task until it ends, recording in `cursor` where the
    /// stream got to (last event id, `retry`) and whether the response to `awaited` went by.
    /// With `quiet`, it also stops when the stream has carried nothing for that long.
    pub async fn pump(
        &self,
        sink: &Sink,
        body: Body,
        awaited: Option<&Id>,
        cursor: &mut Cursor,
        quiet: Option<Duration>,
    ) -> Result<Ending, DecodeError> {
        let mut events = events(body, self.max_message);
        loop {
            let next = match quiet {
                None => events.next().await,
                Some(quiet) => match tokio::time::timeout(quiet, events.next()).await {
                    Ok(next) => next,
                    Err(_) => return Ok(Ending::Quiet),
                },
            };
            let Some(event) = next else {
                return Ok(Ending::Closed);
            };
            let event = event?;
            if let Some(ms) = event.retry_ms {
                cursor.retry = Duration::from_millis(ms).min(MAX_BACKOFF);
            }
            if event.event == "message" && !event.data.is_empty() {
                match jsonrpc::parse_many(event.data.as_bytes(), self.max_depth) {
                    Ok(msgs) => {
                        if msgs.iter().any(|m| is_response_to(m, awaited)) {
                            cursor.answered = true;
                        }
                        cursor.delivered += msgs.len();
                        if !deliver(sink, msgs).await {
                            return Ok(Ending::Unheard);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(backend = %self.backend, "backend sent an SSE event that is not JSON-RPC: {e}")
                    }
                }
            }
            // Noted once delivered: a stream picked up again from here loses nothing.
            if let Some(id) = event.id {
                cursor.passed(id);
            }
        }
    }
}

/// How a pumped stream stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The backend ended it.
    Closed,
    /// It carried nothing for the time it was given.
    Quiet,
    /// Nobody takes what it carries any more.
    Unheard,
}

/// Hands messages to `sink`; false once nobody listens.
pub(crate) async fn deliver(sink: &Sink, msgs: Vec<Message>) -> bool {
    for msg in msgs {
        if sink.send(Box::new(Inbound::Message(msg))).await.is_err() {
            return false;
        }
    }
    true
}

/// Hands one thing the backend said (or a failure) to `sink`, whether or not anyone listens.
pub(crate) async fn report(sink: &Sink, inbound: Inbound) {
    let _ = sink.send(Box::new(inbound)).await;
}

/// Where a stream got to, for resuming it.
#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    pub last_id: Option<String>,
    pub retry: Duration,
    pub answered: bool,
    /// Messages delivered from the stream so far.
    pub delivered: usize,
    /// Shares `last_id` with a call that may let the stream go while parked.
    pub mark: Option<Mark>,
}

impl Cursor {
    /// Notes an event id. One that cannot be sent back as `Last-Event-ID` (a control character)
    /// leaves the stream with no point to be picked up from: neither resumed nor let go.
    fn passed(&mut self, id: String) {
        let id = HeaderValue::from_str(&id).is_ok().then_some(id);
        if let Some(mark) = &self.mark {
            mark.lock().expect("mark lock").clone_from(&id);
        }
        self.last_id = id;
    }
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor {
            last_id: None,
            retry: Duration::from_secs(1),
            answered: false,
            delivered: 0,
            mark: None,
        }
    }
}

/// The next inbound event of an HTTP transport (cancel-safe: a channel receive).
pub(crate) async fn next(rx: &mut mpsc::Receiver<Box<Inbound>>) -> Inbound {
    rx.recv()
        .await
        .map_or_else(|| Inbound::ended("the transport stopped"), |i| *i)
}

fn is_response_to(msg: &Message, awaited: Option<&Id>) -> bool {
    matches!((msg, awaited), (Message::Response { id, .. }, Some(want)) if id == want)
}

/// The SSE events of a body, each bounded by `max` bytes.
pub(crate) fn events(
    body: Body,
    max: usize,
) -> impl Stream<Item = Result<sse::Event, DecodeError>> + Send + Unpin {
    let bytes = http_body_util::BodyDataStream::new(body);
    sse::decode(bytes, max)
}

pub(crate) fn content_type(resp: &http::Response<Body>) -> String {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The first bytes of a body, printable, for an error message.
pub(crate) fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SNIPPET)]);
    let mut s: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if bytes.len() > SNIPPET {
        s.push('…');
    }
    format!("{s:?}")
}

/// How long the start of an error response's body is waited for, for the log.
const ERROR_BODY_WAIT: Duration = Duration::from_secs(2);

/// An unexpected status. The start of its body goes to the log only: an error page may carry
/// stack traces or credentials that clients must not see. The body is waited for briefly (and
/// never past the request timeout): a backend that sends the head and stalls must not hold the
/// call, the session's task or its pool slot.
pub(crate) async fn status_failure(resp: http::Response<Body>, link: &Link) -> Failure {
    let status = resp.status();
    let read = Limited::new(resp.into_body(), link.max_message.min(4096)).collect();
    let body = match tokio::time::timeout(ERROR_BODY_WAIT.min(link.timeout), read).await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => bytes::Bytes::new(),
    };
    tracing::warn!(backend = %link.backend, %status, body = %snippet(&body), "backend answered with an unexpected status");
    Failure::Other(format!("HTTP {status}"))
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// Session facts the request tasks read: the id the backend gave, the negotiated version.
#[derive(Debug, Default)]
struct Ids {
    session: Option<HeaderValue>,
    version: Option<HeaderValue>,
}

/// Where a session's requests go.
#[derive(Debug, Clone)]
struct Endpoint {
    link: Arc<Link>,
    ids: Arc<Mutex<Ids>>,
    url: Uri,
}

/// A Streamable HTTP session.
pub(crate) struct StreamableHttp {
    ep: Endpoint,
    rx: mpsc::Receiver<Box<Inbound>>,
    tasks: TaskTracker,
    /// Whether to keep the standalone GET stream open.
    standalone: bool,
    /// Whether a parked call may let its numbered stream go until its retry.
    release_parked: bool,
}

impl StreamableHttp {
    pub fn new(link: Arc<Link>, rx: mpsc::Receiver<Box<Inbound>>, cfg: &Config) -> StreamableHttp {
        StreamableHttp {
            ep: Endpoint {
                link,
                ids: Arc::new(Mutex::new(Ids::default())),
                url: cfg.url.clone(),
            },
            rx,
            tasks: TaskTracker::new(),
            standalone: cfg.standalone_stream,
            release_parked: cfg.release_parked_streams,
        }
    }
}

/// Made once, as the MCP header names are ([`crate::protocol::header`]).
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// `Accept` of a POST: its answer may be a JSON message or an event stream.
pub(crate) const ACCEPT_ANSWER: HeaderValue =
    HeaderValue::from_static("application/json, text/event-stream");
/// `Accept` of a GET for an event stream.
pub(crate) const ACCEPT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");

/// A request's own headers (the configured ones aside): a few, each named once, written in
/// order.
type Headers = Vec<(HeaderName, HeaderValue)>;

/// Headers every request of the session carries, and room for two more.
fn session_headers(ids: &Mutex<Ids>) -> Headers {
    let ids = ids.lock().expect("ids lock");
    let mut h = Vec::with_capacity(4);
    if let Some(s) = &ids.session {
        h.push((MCP_SESSION_ID, s.clone()));
    }
    if let Some(v) = &ids.version {
        h.push((MCP_PROTOCOL_VERSION, v.clone()));
    }
    h
}

fn post_headers(ids: &Mutex<Ids>) -> Headers {
    let mut h = session_headers(ids);
    h.push((header::ACCEPT, ACCEPT_ANSWER));
    h
}

/// The headers of a GET for an event stream, resumed after `last` if given.
fn stream_headers(ids: &Mutex<Ids>, last: Option<&str>) -> Headers {
    let mut h = session_headers(ids);
    h.push((header::ACCEPT, ACCEPT_STREAM));
    if let Some(v) = last.and_then(|l| HeaderValue::from_str(l).ok()) {
        h.push((LAST_EVENT_ID, v));
    }
    h
}

fn has_session(ids: &Mutex<Ids>) -> bool {
    ids.lock().expect("ids lock").session.is_some()
}

/// A message's JSON text, as a body for the backend.
pub(crate) fn encode(msg: &Value) -> Result<Vec<u8>, String> {
    serde_json::to_vec(msg).map_err(|e| format!("cannot encode a message: {e}"))
}

/// POSTs a message that opens no answer stream (a response to the backend's request, or a
/// notification). An error means the session is gone; any other refusal is logged, since the
/// backend may be waiting for the message and the call's deadline covers that.
async fn send_one_way(ep: &Endpoint, msg: &Value) -> Result<(), String> {
    let json = encode(msg)?;
    let resp = ep
        .link
        .exchange(Method::POST, &ep.url, &post_headers(&ep.ids), Some(&json))
        .await;
    let failure = match resp {
        Ok(r) if r.status().is_success() => return Ok(()),
        Ok(r) if r.status() == StatusCode::NOT_FOUND && has_session(&ep.ids) => Failure::Gone,
        Ok(r) => status_failure(r, &ep.link).await,
        Err(f) => f,
    };
    let backend = &ep.link.backend;
    if matches!(failure, Failure::Gone) {
        return Err(failure.describe());
    }
    tracing::warn!(%backend, "a message to the backend was not accepted: {}", failure.describe());
    Ok(())
}

/// The calls' own way to the backend: each call POSTs its request and reads the answer stream
/// itself, so a response reaches the call without a detour through the session task.
#[derive(Debug)]
struct Direct {
    ep: Endpoint,
    release_parked: bool,
}

impl super::session::Direct for Direct {
    fn post(
        &self,
        id: Id,
        method: String,
        msg: Vec<u8>,
        sink: Sink,
        mark: Option<Mark>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(unless_closed(self.ep.clone(), sink, id, method, msg, mark))
    }

    fn resume(&self, id: Id, last: String, sink: Sink, mark: Mark) -> BoxFuture<'static, ()> {
        let ep = self.ep.clone();
        Box::pin(async move {
            // At once: the call let the stream go itself, the backend asked for no wait.
            let cursor = Cursor {
                last_id: Some(last),
                retry: Duration::ZERO,
                mark: Some(mark),
                ..Cursor::default()
            };
            resume(&ep, &sink, &id, cursor).await
        })
    }

    fn send(&self, msg: Value) -> BoxFuture<'static, Result<(), String>> {
        let ep = self.ep.clone();
        Box::pin(async move { send_one_way(&ep, &msg).await })
    }

    fn releases_parked(&self) -> bool {
        self.release_parked
    }

    fn session_queue(&self) -> &Sink {
        &self.ep.link.inbound
    }
}

impl Transport for StreamableHttp {
    fn direct(&self) -> Option<Arc<dyn super::session::Direct>> {
        Some(Arc::new(Direct {
            ep: self.ep.clone(),
            release_parked: self.release_parked,
        }))
    }

    async fn send(&mut self, msg: Value) -> Result<(), String> {
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = msg
            .get("id")
            .and_then(|v| serde_json::from_value::<Id>(v.clone()).ok());
        match (method, id) {
            (Some(method), Some(id)) => {
                // Only `initialize` comes this way: calls send their own (`Direct`). The session's
                // tasks end with it.
                let sink = self.ep.link.inbound.clone();
                let stop = self.ep.link.stop.clone();
                let msg = encode(&msg)?;
                let request = unless_closed(self.ep.clone(), sink, id, method, msg, None);
                self.tasks.spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = request => {}
                    }
                });
                Ok(())
            }
            (method, _) => {
                send_one_way(&self.ep, &msg).await?;
                if method.as_deref() == Some("notifications/initialized") && self.standalone {
                    self.tasks.spawn(standalone(self.ep.clone()));
                }
                Ok(())
            }
        }
    }

    async fn recv(&mut self) -> Inbound {
        next(&mut self.rx).await
    }

    fn ready(&mut self, version: &str) {
        // The header exists from 2025-06-18 on.
        if version >= "2025-06-18" {
            self.ep.ids.lock().expect("ids lock").version = HeaderValue::from_str(version).ok();
        }
    }

    async fn close(self) {
        let StreamableHttp { ep, rx, tasks, .. } = self;
        // Nothing reads the queue from here on: calls whose streams still carry something for
        // the session hear at once that it cannot be delivered.
        drop(rx);
        ep.link.stop.cancel();
        tasks.close();
        if has_session(&ep.ids) {
            let link = ep.link.clone();
            let headers = session_headers(&ep.ids);
            let delete = link.exchange(Method::DELETE, &ep.url, &headers, None);
            match tokio::time::timeout(CLOSE_TIMEOUT, delete).await {
                Ok(Ok(r)) => {
                    tracing::debug!(backend = %link.backend, status = %r.status(), "session deleted")
                }
                Ok(Err(f)) => {
                    tracing::debug!(backend = %link.backend, "DELETE failed: {}", f.describe())
                }
                Err(_) => tracing::debug!(backend = %link.backend, "DELETE timed out"),
            }
        }
        tasks.wait().await;
    }
}

/// [`request`], unless the session has already closed: then the backend never saw it, and it is
/// reported unsent.
///
/// A call's own request runs to its verdict even if the session closes meanwhile: the backend
/// still answers it, or refuses it (404) as unsent, and the call's deadline bounds the wait.
async fn unless_closed(
    ep: Endpoint,
    sink: Sink,
    id: Id,
    method: String,
    msg: Vec<u8>,
    mark: Option<Mark>,
) {
    if ep.link.stop.is_cancelled() {
        let reason = "the session ended before the request was sent".to_owned();
        let unsent = Some(id);
        return report(&sink, Inbound::Ended { reason, unsent }).await;
    }
    request(&ep, &sink, id, &method, msg, mark).await
}

/// A request that failed: logged, and its call told why.
async fn failed(sink: &Sink, link: &Link, method: &str, id: &Id, why: String) {
    tracing::warn!(backend = %link.backend, %method, "{why}");
    report(sink, Inbound::failed(id, why)).await;
}

/// One request's POST and everything its answer carries.
async fn request(
    ep: &Endpoint,
    sink: &Sink,
    id: Id,
    method: &str,
    msg: Vec<u8>,
    mark: Option<Mark>,
) {
    let (link, ids, url) = (&*ep.link, &*ep.ids, &ep.url);
    let known_session = has_session(ids);
    let resp = match link
        .exchange(Method::POST, url, &post_headers(ids), Some(&msg))
        .await
    {
        Ok(r) => r,
        Err(f) => return failed(sink, link, method, &id, f.describe()).await,
    };
    // Sent: the answer stream may stay open for as long as the call is parked.
    drop(msg);
    if method == "initialize"
        && let Some(sid) = resp.headers().get(MCP_SESSION_ID)
    {
        ids.lock().expect("ids lock").session = Some(sid.clone());
    }
    let status = resp.status();
    if status == StatusCode::NOT_FOUND && known_session {
        return report(
            sink,
            Inbound::Ended {
                reason: Failure::Gone.describe(),
                unsent: Some(id),
            },
        )
        .await;
    }
    if status == StatusCode::ACCEPTED {
        // 202 is for notifications and responses: a request must be answered with JSON or an
        // event stream, so this call would wait for nothing.
        let why = "answered a request with 202 Accepted and no response";
        return failed(sink, link, method, &id, why.to_owned()).await;
    }
    if !status.is_success() {
        let f = Box::pin(status_failure(resp, link)).await;
        return failed(sink, link, method, &id, f.describe()).await;
    }
    match content_type(&resp).as_str() {
        "application/json" => match Box::pin(link.read_json(resp.into_body())).await {
            Ok(msgs) => {
                let answered = msgs.iter().any(|m| is_response_to(m, Some(&id)));
                if deliver(sink, msgs).await && !answered {
                    report(
                        sink,
                        Inbound::failed(&id, "answered without a response to the request"),
                    )
                    .await;
                }
            }
            Err(f) => failed(sink, link, method, &id, f.describe()).await,
        },
        "text/event-stream" => {
            let mut cursor = Cursor {
                mark,
                ..Cursor::default()
            };
            // Boxed, like the other phases: a request's task holds only the phase it is in.
            match Box::pin(link.pump(sink, resp.into_body(), Some(&id), &mut cursor, None)).await {
                // A numbered stream that broke off (a proxy's read timeout, a reset) is picked
                // up below like one that ended early.
                Err(DecodeError::Stream(why)) if cursor.last_id.is_some() => {
                    tracing::debug!(backend = %link.backend, %method, "the response stream broke off ({why}); resuming it");
                }
                Err(e) => {
                    return failed(sink, link, method, &id, e.to_string()).await;
                }
                Ok(_) => {}
            }
            if !cursor.answered {
                Box::pin(resume(ep, sink, &id, cursor)).await;
            }
        }
        other => {
            let why = format!("answered with Content-Type `{other}`, not JSON or an event stream");
            failed(sink, link, method, &id, why).await;
        }
    }
}

/// A request's stream ended before its response: resume it with `Last-Event-ID` if the backend
/// gave event ids (2025-11-25), else fail the call.
///
/// A picked-up stream that stays quiet is picked up again, from the same event, after
/// [`QUIET_FIRST`], then after twice as long each time, up to [`QUIET_MAX`]. Backends may lose an
/// event they write as a GET takes their stream over: the Python SDK stores it, but hands it to
/// no connection, when it comes between the replay and the hand-over to the new connection. Only
/// a new pick-up replays it; without one, the call would wait for its deadline. For a tool that is
/// still running, a quiet pick-up costs a new GET that replays nothing.
async fn resume(ep: &Endpoint, sink: &Sink, id: &Id, mut cursor: Cursor) {
    let (link, ids, url) = (&*ep.link, &*ep.ids, &ep.url);
    let mut attempts = 0;
    let mut quiet = QUIET_FIRST;
    while !cursor.answered {
        let Some(last) = cursor.last_id.clone().filter(|_| attempts < MAX_RESUMES) else {
            let why = "ended the response stream without answering";
            tracing::warn!(backend = %link.backend, %id, "{why}");
            return report(sink, Inbound::failed(id, why)).await;
        };
        // The backend's `retry` hint, or, when a pick-up has just brought nothing, a short wait
        // that doubles: a backend may refuse a GET for a stream until it has seen the previous
        // one closed. A zero wait is skipped, not slept: the timer would still round it up.
        let backoff = match attempts {
            0 => Duration::ZERO,
            n => RESUME_BACKOFF * 2u32.pow(n - 1),
        };
        let wait = cursor.retry.max(backoff);
        attempts += 1;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let headers = stream_headers(ids, Some(&last));
        let resp = match link.exchange(Method::GET, url, &headers, None).await {
            Ok(r) => r,
            Err(f) => {
                tracing::debug!(backend = %link.backend, "resuming a stream failed: {}", f.describe());
                continue;
            }
        };
        if resp.status() == StatusCode::NOT_FOUND {
            // The session is over, and the call with it: one word says both, so whoever reads
            // it (the call or the session task) ends the session before anything else goes out.
            return report(sink, Inbound::ended(Failure::Gone.describe())).await;
        }
        if !resp.status().is_success() || content_type(&resp) != "text/event-stream" {
            tracing::debug!(backend = %link.backend, status = %resp.status(), "resuming a stream was refused");
            continue;
        }
        let before = cursor.last_id.clone();
        match link
            .pump(sink, resp.into_body(), Some(id), &mut cursor, Some(quiet))
            .await
        {
            Err(DecodeError::Stream(why)) => {
                tracing::debug!(backend = %link.backend, %id, "a picked-up stream broke off ({why}); picking it up again");
            }
            Err(e) => {
                return report(sink, Inbound::failed(id, e.to_string())).await;
            }
            Ok(Ending::Quiet) => {
                tracing::debug!(backend = %link.backend, %id, after = ?quiet, "a picked-up stream went quiet: picking it up again");
                quiet = (quiet * 2).min(QUIET_MAX);
                attempts = 0; // a live stream, not a refusal
            }
            Ok(Ending::Unheard) => return,
            Ok(Ending::Closed) => {}
        }
        if cursor.last_id != before {
            attempts = 0; // progress: the stream is alive
        }
    }
}

/// The standalone GET stream: pushes unrelated to any POST. Reopened with backoff while the
/// session lives; a backend that offers none (405, or 404 without a session id) is left alone.
///
/// Picked up with `Last-Event-ID` once its events have ids, it can lose an event in the
/// hand-over as a call's stream can (see [`resume`]), so a picked-up stream that stays quiet is
/// picked up again after [`QUIET_FIRST`], doubling to [`QUIET_MAX`] while nothing comes, back to
/// [`QUIET_FIRST`] once it has carried a message (an empty priming event is no message).
async fn standalone(ep: Endpoint) {
    let Endpoint { link, ids, url } = ep;
    let mut cursor = Cursor::default();
    let mut backoff = Duration::from_millis(100);
    let mut quiet = QUIET_FIRST;
    loop {
        let (picked_up, delivered) = (cursor.last_id.clone(), cursor.delivered);
        let headers = stream_headers(&ids, picked_up.as_deref());
        let opened = tokio::select! {
            _ = link.stop.cancelled() => return,
            r = link.exchange(Method::GET, &url, &headers, None) => r,
        };
        match opened {
            // Without a session id a 404 cannot mean a forgotten session: a stateless backend
            // routes no GET.
            Ok(resp)
                if resp.status() == StatusCode::METHOD_NOT_ALLOWED
                    || (resp.status() == StatusCode::NOT_FOUND && !has_session(&ids)) =>
            {
                tracing::debug!(backend = %link.backend, status = %resp.status(), "backend offers no standalone stream");
                return;
            }
            Ok(resp) if resp.status() == StatusCode::NOT_FOUND => {
                return report(&link.inbound, Inbound::ended(Failure::Gone.describe())).await;
            }
            Ok(resp)
                if resp.status().is_success() && content_type(&resp) == "text/event-stream" =>
            {
                backoff = Duration::from_millis(100);
                let watch = picked_up.is_some().then_some(quiet);
                let pumped = tokio::select! {
                    _ = link.stop.cancelled() => return,
                    r = link.pump(&link.inbound, resp.into_body(), None, &mut cursor, watch) => r,
                };
                if cursor.delivered != delivered {
                    quiet = QUIET_FIRST;
                }
                match pumped {
                    Ok(Ending::Quiet) => {
                        tracing::debug!(backend = %link.backend, after = ?quiet, "the picked-up standalone stream went quiet: picking it up again");
                        quiet = (quiet * 2).min(QUIET_MAX);
                        // Only the backend's `retry` hint: a quiet stream is no refusal.
                        tokio::select! {
                            _ = link.stop.cancelled() => return,
                            _ = tokio::time::sleep(cursor.retry) => {}
                        }
                        continue;
                    }
                    Ok(Ending::Unheard) => return,
                    Ok(Ending::Closed) => {}
                    Err(e) => {
                        tracing::warn!(backend = %link.backend, "standalone stream: {e}")
                    }
                }
            }
            Ok(resp) => {
                tracing::debug!(backend = %link.backend, status = %resp.status(), "standalone stream refused");
            }
            Err(f) => {
                tracing::debug!(backend = %link.backend, "standalone stream: {}", f.describe());
            }
        }
        let wait = backoff.max(cursor.retry.min(MAX_BACKOFF));
        tokio::select! {
            _ = link.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_that_cannot_be_sent_back_leaves_no_point_to_resume_from() {
        let mark: Mark = Default::default();
        let mut cursor = Cursor {
            mark: Some(mark.clone()),
            ..Cursor::default()
        };
        cursor.passed("e1".into());
        assert_eq!(cursor.last_id.as_deref(), Some("e1"));
        assert_eq!(mark.lock().unwrap().as_deref(), Some("e1"));
        cursor.passed("e\u{1}2".into());
        assert_eq!(cursor.last_id, None);
        assert_eq!(*mark.lock().unwrap(), None);
    }
}

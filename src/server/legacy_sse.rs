//! The 2024-11-05 HTTP+SSE face, for clients of that transport, on the paths a backend names in
//! `sse_path` and `messages_path` ([`route`]). A GET on the SSE path opens the client's stream,
//! whose first event (`endpoint`) says where to POST: the messages path and `?session_id=`
//! the stream's id (the parameter the SDKs read). Each message POSTed there is accepted (202); whatever answers it goes on the
//! stream as `event: message`: `initialize`'s result, a call's requests and its response, and
//! the backend's messages that belong to no request.
//!
//! The stream opens before its session, so the stream is this face's: kept with the engine
//! (`Bridge::hold_waiting`) under a random id, bound to its backend and principal. An `initialize` opens the engine's
//! session (`Bridge::initialize`), which the stream then holds, busy, for as long as it is
//! open; closing the stream ends it (`Bridge::end_session`). Every other message goes to the
//! session through the engine's own check of its sealed id (`Bridge::session`).

use super::Body;
use super::legacy::{Owner, forward, initialize_params, is_response, take};
use super::request::{authorization, principal, read_message};
use super::respond::{self, Refusal};
use crate::bridge::Bridge;
use crate::bridge::session::{self, Found, Initialize, Listen, Live};
use crate::config::Config;
use crate::jsonrpc::{self, ErrorObject, INTERNAL_ERROR, INVALID_REQUEST};
use crate::jsonrpc::{Id, Message};
use crate::seal::{Digest, ParkId};
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use hyper::body::{Frame, Incoming};
use serde_json::Value;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Messages waiting for a client that reads its stream slowly; past them its answers wait.
const DEPTH: usize = 64;

/// How long a stream stays quiet before it sends a comment: so a client's read timeout and the
/// proxies between never take it for dead, and a client gone without a word is noticed (the
/// write fails) and its session ended.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Which of a backend's HTTP+SSE paths a request is on.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint {
    /// `sse_path`: GET opens a stream.
    Stream,
    /// `messages_path`: POST sends a stream's message.
    Messages,
}

/// The backend and endpoint of `path`, if it is one of a backend's HTTP+SSE paths.
pub fn route(config: &Config, path: &str) -> Option<(usize, Endpoint)> {
    config.backends.iter().enumerate().find_map(|(i, b)| {
        let paths = b.legacy_sse.as_ref()?;
        if paths.sse_path == path {
            Some((i, Endpoint::Stream))
        } else if paths.messages_path == path {
            Some((i, Endpoint::Messages))
        } else {
            None
        }
    })
}

/// Serves one request on a backend's HTTP+SSE paths.
pub async fn serve(
    bridge: &Arc<Bridge>,
    backend: usize,
    endpoint: Endpoint,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, Refusal> {
    match (endpoint, req.method()) {
        (Endpoint::Stream, &Method::GET) => open(bridge, backend, req.headers()),
        (Endpoint::Messages, &Method::POST) => post(bridge, backend, req).await,
        (Endpoint::Stream, _) => Ok(not_allowed("GET")),
        (Endpoint::Messages, _) => Ok(not_allowed("POST")),
    }
}

fn not_allowed(allow: &'static str) -> hyper::Response<Body> {
    let mut resp = Refusal::new(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        INVALID_REQUEST,
        format!("this HTTP+SSE path accepts {allow} only"),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

fn bad(message: String) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, None, INVALID_REQUEST, message)
}

/// 404: the id names no stream this client can use.
fn gone() -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        None,
        INVALID_REQUEST,
        "session not found: it ended, or is not this client's; open a new stream",
    )
}

/// A client's stream, from its GET until it closes.
#[derive(Debug)]
struct Stream {
    engine: Weak<Bridge>,
    backend: usize,
    principal: Digest,
    outbox: mpsc::Sender<Out>,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Waiting for its `initialize`.
    Waiting,
    /// Its `initialize` is under way.
    Initializing,
    /// Its session: the sealed id the engine checks on each message, and the session to end
    /// when the stream closes.
    Open { session_id: String, live: Arc<Live> },
    /// The stream closed.
    Closed,
}

/// What goes to a stream.
#[derive(Debug)]
enum Out {
    Message(Value),
    /// The session's own messages, from its `initialize` on.
    Session(Listen),
}

/// Opens a client's stream: its first event names where it POSTs.
fn open(
    bridge: &Arc<Bridge>,
    backend: usize,
    headers: &http::HeaderMap,
) -> Result<hyper::Response<Body>, Refusal> {
    if bridge.is_draining() {
        return Err(Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            id: None,
            error: crate::bridge::shutting_down(),
            method: crate::metrics::Method::Other,
        });
    }
    let principal = principal(&bridge.config.principal, headers).map_err(bad)?;
    let (outbox, rx) = mpsc::channel(DEPTH);
    let key = ParkId::random();
    let stream = Arc::new(Stream {
        engine: Arc::downgrade(bridge),
        backend,
        principal,
        outbox,
        state: Mutex::new(State::Waiting),
    });
    bridge.hold_waiting(key, stream.clone());
    let paths = bridge.config.backends[backend].legacy_sse.as_ref();
    let messages = &paths.expect("routed here by its paths").messages_path;
    let idle = bridge.config.limits.session_idle;
    let feed = Feed {
        key,
        stream,
        rx,
        endpoint: Some(format!(
            "{messages}?session_id={}",
            bridge.stream_id(backend, key, principal)
        )),
        listen: None,
        deadline: Instant::now() + idle,
        idle,
        quiet_until: Instant::now() + KEEPALIVE,
    };
    let frames = futures_util::stream::unfold(feed, |mut feed| async move {
        let event = feed.next().await?;
        Some((Ok(Frame::data(event)), feed))
    });
    Ok(respond::event_stream(frames))
}

/// A stream's events as they come; dropped when the client closed it (or it ended).
struct Feed {
    key: ParkId,
    stream: Arc<Stream>,
    rx: mpsc::Receiver<Out>,
    /// The `endpoint` event, until sent.
    endpoint: Option<String>,
    listen: Option<Listen>,
    /// When a stream still waiting for its `initialize` ends.
    deadline: Instant,
    idle: Duration,
    /// When the stream sends a comment unless an event goes first.
    quiet_until: Instant,
}

impl Feed {
    /// The next event (or comment), or `None` once the stream is over: its session ended, or
    /// it waited for its `initialize` as long as a session may idle.
    async fn next(&mut self) -> Option<Bytes> {
        let next = self.event().await;
        self.quiet_until = Instant::now() + KEEPALIVE;
        next
    }

    /// What [`Feed::next`] sends, the stream's quiet clock aside.
    async fn event(&mut self) -> Option<Bytes> {
        if let Some(endpoint) = self.endpoint.take() {
            return Some(Bytes::from(crate::sse::encode_text("endpoint", &endpoint)));
        }
        loop {
            let opened = self.listen.is_some();
            tokio::select! {
                biased;
                out = self.rx.recv() => match out? {
                    Out::Message(message) => return Some(event(&message)),
                    Out::Session(listen) => self.listen = Some(listen),
                },
                message = session_message(&mut self.listen) => return message.map(|m| event(&m)),
                () = tokio::time::sleep_until(self.deadline), if !opened => {
                    let waiting = matches!(*self.stream.state(), State::Waiting);
                    if waiting {
                        let idle = self.idle;
                        tracing::info!("HTTP+SSE stream without initialize for {idle:?}: ended");
                        return None;
                    }
                    self.deadline = Instant::now() + self.idle;
                }
                () = tokio::time::sleep_until(self.quiet_until) => {
                    return Some(Bytes::from_static(b": keepalive\n\n"));
                }
            }
        }
    }
}

fn event(message: &Value) -> Bytes {
    Bytes::from(crate::sse::encode("message", message))
}

/// The session's next own message; never, before the session opened.
async fn session_message(listen: &mut Option<Listen>) -> Option<Value> {
    match listen {
        Some(listen) => listen.recv().await,
        None => std::future::pending().await,
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut *self.stream.state(), State::Closed);
        if let Some(bridge) = self.stream.engine.upgrade() {
            bridge.forget_waiting(&self.key);
            if let State::Open { live, .. } = state {
                bridge.end_session(&live);
            }
        }
    }
}

impl Stream {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("stream state lock")
    }

    /// Its `initialize` opened no session: the client may send another.
    fn not_opened(&self) {
        let mut state = self.state();
        if matches!(*state, State::Initializing) {
            *state = State::Waiting;
        }
    }

    /// The stream's session, its sealed id checked by the engine like any session's.
    fn session(&self, bridge: &Bridge) -> Result<Arc<Live>, Refusal> {
        let session_id = match &*self.state() {
            State::Open { session_id, .. } => session_id.clone(),
            State::Closed => return Err(gone()),
            State::Waiting | State::Initializing => {
                return Err(bad(
                    "this stream has no session yet: send initialize first".into()
                ));
            }
        };
        bridge
            .session(self.backend, &session_id, &self.principal)
            .map_err(|session::Gone| gone())
    }

    /// Takes the session `initialize` opened, unless the stream closed meanwhile (then the
    /// session ends): its own messages, for the stream.
    fn opened(&self, bridge: &Bridge, session_id: String) -> Result<Option<Listen>, ErrorObject> {
        let Ok(live) = bridge.session(self.backend, &session_id, &self.principal) else {
            self.not_opened();
            return Err(ErrorObject::new(
                INTERNAL_ERROR,
                "the backend session ended as it opened; initialize again",
            ));
        };
        let mut state = self.state();
        if matches!(*state, State::Closed) {
            drop(state);
            bridge.end_session(&live);
            return Ok(None);
        }
        let listen = live.listen();
        *state = State::Open { session_id, live };
        Ok(listen)
    }
}

/// The `session` parameter of a POST's query: there once, or the POST names no stream.
fn session_param(query: Option<&str>) -> Result<&str, Refusal> {
    let mut found = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.strip_prefix("session_id="));
    match (found.next(), found.next()) {
        (Some(token), None) => Ok(token),
        (None, _) => Err(bad(
            "no ?session_id= names a stream: open one with a GET on the SSE path first".into(),
        )),
        (Some(_), Some(_)) => Err(bad("the session parameter appears more than once".into())),
    }
}

/// A POST of a stream's message: checked against the stream before its body is read.
async fn post(
    bridge: &Arc<Bridge>,
    backend: usize,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, Refusal> {
    let token = session_param(req.uri().query())?.to_owned();
    let headers = req.headers();
    let principal = principal(&bridge.config.principal, headers).map_err(bad)?;
    let authorization = authorization(headers).map_err(bad)?;
    let key = match bridge.locate_stream(backend, &token, &principal) {
        Ok(key) => key,
        Err(Found::Owner { owner, addr }) => {
            let credential = authorization.and_then(|v| v.to_str().ok().map(str::to_owned));
            let to = Owner {
                token,
                principal,
                owner,
                addr,
                stream: Some(credential),
            };
            return forward(bridge, backend, to, req).await;
        }
        Err(_) => return Err(gone()),
    };
    let (_, message) = read_message(bridge, req).await?;
    held(bridge, backend, key, principal, authorization, message).await
}

/// A message POSTed for a stream held here (under `key`), by its client or forwarded by the
/// replica it reached.
pub(super) async fn held(
    bridge: &Arc<Bridge>,
    backend: usize,
    key: ParkId,
    principal: Digest,
    authorization: Option<HeaderValue>,
    message: Message,
) -> Result<hyper::Response<Body>, Refusal> {
    let stream = bridge
        .waiting::<Stream>(&key)
        .filter(|s| s.backend == backend && s.principal == principal)
        .ok_or_else(gone)?;
    match message {
        Message::Request { id, method, params } if method == "initialize" => {
            let params = initialize_params(&id, params)?;
            let init = Initialize {
                params,
                principal,
                authorization,
            };
            initialize(bridge, stream, id, init)
        }
        message => {
            let live = stream.session(bridge)?;
            deliver(&stream, live, message).await
        }
    }
}

/// A stream's `initialize`: accepted at once, its session opened meanwhile, and the result
/// (or why there is none) sent on the stream.
fn initialize(
    bridge: &Arc<Bridge>,
    stream: Arc<Stream>,
    id: Id,
    init: Initialize,
) -> Result<hyper::Response<Body>, Refusal> {
    {
        let mut state = stream.state();
        if !matches!(*state, State::Waiting) {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                Some(&id),
                INVALID_REQUEST,
                "this stream's session is initialized already",
            ));
        }
        *state = State::Initializing;
    }
    let bridge = bridge.clone();
    tokio::spawn(async move {
        let outcome = match bridge.initialize(stream.backend, init).await {
            Ok(opened) => match stream.opened(&bridge, opened.session_id) {
                Ok(Some(listen)) => {
                    let _ = stream.outbox.send(Out::Session(listen)).await;
                    Ok(opened.result)
                }
                Ok(None) => Ok(opened.result),
                Err(e) => Err(e),
            },
            Err(e) => {
                stream.not_opened();
                Err(e)
            }
        };
        let response = jsonrpc::response(Some(&id), outcome);
        let _ = stream.outbox.send(Out::Message(response)).await;
    });
    Ok(respond::empty(StatusCode::ACCEPTED))
}

/// A message of an open session: a request is accepted and answered on the stream; a
/// notification or a response goes upstream now.
async fn deliver(
    stream: &Stream,
    live: Arc<Live>,
    message: Message,
) -> Result<hyper::Response<Body>, Refusal> {
    match message {
        Message::Request { id, method, params } => {
            tokio::spawn(answer(live, stream.outbox.clone(), id, method, params));
            Ok(respond::empty(StatusCode::ACCEPTED))
        }
        other => {
            take(&live, other, gone).await?;
            Ok(respond::empty(StatusCode::ACCEPTED))
        }
    }
}

/// Puts a request's answer on the stream: what the backend says about it, its response last.
async fn answer(
    live: Arc<Live>,
    outbox: mpsc::Sender<Out>,
    id: Id,
    method: String,
    params: Option<Value>,
) {
    let mut answer = live.request(id.clone(), method, params).await;
    while let Some(message) = answer.rx.recv().await {
        let last = is_response(&message);
        if outbox.send(Out::Message(message)).await.is_err() || last {
            return;
        }
    }
    let e = ErrorObject::new(INTERNAL_ERROR, "the request ended without a result");
    let _ = outbox
        .send(Out::Message(jsonrpc::response(Some(&id), Err(e))))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_names_its_stream_once() {
        assert_eq!(session_param(Some("session_id=ab")).ok(), Some("ab"));
        assert_eq!(session_param(Some("x=1&session_id=ab")).ok(), Some("ab"));
        assert!(session_param(None).is_err());
        assert!(session_param(Some("session_ids=ab")).is_err());
        assert!(session_param(Some("session_id=a&session_id=b")).is_err());
    }
}

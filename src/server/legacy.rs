//! The legacy face: MCP 2025-11-25, 2025-06-18 and 2025-03-26 over Streamable HTTP, on the
//! same endpoint as the modern face. An `initialize` without the 2026-07-28 header opens a
//! session ([`initialize`]); every request that carries an `Mcp-Session-Id` belongs to one
//! ([`serve`]): a POST of a request (answered as JSON, or as an event stream when the backend
//! says something first), of a notification or of a response (202), a GET for the session's own
//! stream, a DELETE to end it. What the session is and where its messages go is the engine's
//! (`bridge::session`); this face only reads and writes HTTP. A session another replica holds
//! is served there: its requests cross the internal hop ([`forward`]; the owner's end is
//! `server::internal`, which hands them to [`held`]).

use super::Body;
use super::request::{authorization, principal, read_messages, single};
use super::respond::{self, Refusal};
use crate::bridge::Bridge;
use crate::bridge::session::{self, Answer, Found, Initialize, Live, Refused};
use crate::bridge::streams;
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS, INVALID_REQUEST, Id, Message, Payload};
use crate::protocol::header::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::seal::Digest;
use crate::wire::hop;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::Value;
use std::sync::Arc;

/// A legacy client's `initialize`: a session opened, its id in `Mcp-Session-Id`.
pub async fn initialize(
    bridge: &Arc<Bridge>,
    backend: usize,
    headers: &HeaderMap,
    id: Id,
    params: Option<Value>,
) -> Result<hyper::Response<Body>, Refusal> {
    let params = initialize_params(&id, params)?;
    let bad = |msg: String| Refusal::new(StatusCode::BAD_REQUEST, Some(&id), INVALID_REQUEST, msg);
    let principal = principal(&bridge.config.principal, headers).map_err(bad)?;
    let authorization = authorization(headers).map_err(bad)?;
    let init = Initialize {
        params,
        principal,
        authorization,
    };
    match bridge.initialize(backend, init).await {
        Ok(opened) => {
            let mut resp = respond::outcome(&id, Ok(Payload::Value(opened.result)));
            let sid =
                HeaderValue::from_str(&opened.session_id).expect("a sealed id is visible ASCII");
            resp.headers_mut().insert(MCP_SESSION_ID, sid);
            Ok(resp)
        }
        Err(e) => Ok(respond::outcome(&id, Err(e))),
    }
}

/// An `initialize`'s params, which must be an object.
pub(super) fn initialize_params(
    id: &Id,
    params: Option<Value>,
) -> Result<serde_json::Map<String, Value>, Refusal> {
    match params {
        Some(Value::Object(params)) => Ok(params),
        _ => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            Some(id),
            INVALID_PARAMS,
            "initialize params must be an object",
        )),
    }
}

/// A request of an open session: its id opened once and checked once; a session held by
/// another replica of the fleet is forwarded there ([`forward`]), and one that is not
/// this client's, for whatever reason, is 404 (the client initializes again).
pub async fn serve(
    bridge: &Arc<Bridge>,
    backend: usize,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, Refusal> {
    let bad = |msg: String| Refusal::new(StatusCode::BAD_REQUEST, None, INVALID_REQUEST, msg);
    let headers = req.headers();
    let token = single(headers, &MCP_SESSION_ID)
        .map_err(bad)?
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let principal = principal(&bridge.config.principal, headers).map_err(bad)?;
    let live = match bridge.locate(backend, token, &principal) {
        Found::Here(live) => live,
        Found::Owner { owner, addr } => {
            check_version(headers)?;
            let to = Owner {
                token: token.to_owned(),
                principal,
                owner,
                addr,
                stream: None,
            };
            return forward(bridge, backend, to, req).await;
        }
        Found::Gone => return Err(gone(None)),
    };
    check_version(headers)?;
    let request = match *req.method() {
        Method::POST => {
            let batches = live.version() == "2025-03-26";
            Held::Post(read_messages(bridge, req, batches).await?.1)
        }
        Method::GET => Held::Get {
            last_event: last_event(headers),
        },
        Method::DELETE => Held::Delete,
        _ => return Ok(not_allowed()),
    };
    held(bridge, &live, request).await
}

/// The `Last-Event-ID` a GET resumes after, if any.
fn last_event(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("last-event-id")?.to_str().ok()?;
    Some(value.to_owned())
}

/// A request of a session, read from its client or from the hop.
#[derive(Debug)]
pub(super) enum Held {
    /// One message, or (2025-03-26) a batch.
    Post(Vec<Message>),
    /// The session's stream, or one resumed after `last_event`.
    Get {
        last_event: Option<String>,
    },
    Delete,
}

/// A request of a session held here, from its client or forwarded by the replica it reached.
pub(super) async fn held(
    bridge: &Bridge,
    live: &Arc<Live>,
    request: Held,
) -> Result<hyper::Response<Body>, Refusal> {
    match request {
        Held::Post(messages) => post(live, messages).await,
        Held::Get { last_event } => Ok(listen(live, last_event.as_deref())),
        Held::Delete => {
            bridge.end_session(live);
            Ok(respond::empty(StatusCode::OK))
        }
    }
}

/// 405: a method a session has no use for.
pub(super) fn not_allowed() -> hyper::Response<Body> {
    let mut resp = Refusal::new(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        INVALID_REQUEST,
        "a session's requests are POST, GET and DELETE",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    resp
}

/// Where a legacy session (or an HTTP+SSE stream) another replica holds is served: read from
/// its id's seal.
#[derive(Debug)]
pub(super) struct Owner {
    /// The session's (or stream's) id, as the client sent it.
    pub token: String,
    /// The client's principal, as this replica computed it.
    pub principal: Digest,
    pub owner: String,
    pub addr: String,
    /// An HTTP+SSE stream's message, with the client's `Authorization` (its `initialize` may
    /// open a session with it); `None` for a session's request.
    pub stream: Option<Option<String>>,
}

/// Forwards a request of a legacy session to the replica that holds it and relays its answer
/// as it comes (a JSON body, or an event stream for as long as it lasts). A POST's message is
/// read and checked here first, within this replica's limits. An owner that cannot be reached
/// leaves the session gone (404): the client initializes again.
pub(super) async fn forward(
    bridge: &Arc<Bridge>,
    backend: usize,
    to: Owner,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, Refusal> {
    let method = req.method().clone();
    let last_event_id = last_event(req.headers());
    let message = match method {
        // A batch is read as one: the owner knows whether the session's version takes them.
        Method::POST => {
            let mut messages = read_messages(bridge, req, true).await?.1;
            Some(match messages.len() {
                1 => messages.remove(0).into_value(),
                _ => Value::Array(messages.into_iter().map(Message::into_value).collect()),
            })
        }
        Method::GET | Method::DELETE => None,
        _ => return Ok(not_allowed()),
    };
    let request = hop::Session {
        backend: bridge.config.backends[backend].path.clone(),
        principal: to.principal,
        method: method.to_string(),
        session: to.token,
        message,
        last_event_id,
        stream: to.stream.is_some(),
        authorization: to.stream.flatten(),
    };
    let Some(answer) = bridge.forward_session(&to.owner, &to.addr, &request).await else {
        return Err(gone(None));
    };
    let mut resp = hyper::Response::builder().status(answer.status);
    if let Some(kind) = answer.content_type {
        if kind.as_bytes().starts_with(b"text/event-stream") {
            // As the owner's own event stream says: nothing between here and the client holds
            // events back.
            resp = resp
                .header(header::CACHE_CONTROL, "no-cache")
                .header("x-accel-buffering", "no");
        }
        resp = resp.header(header::CONTENT_TYPE, kind);
    }
    let body = answer
        .body
        .map(|chunk| Ok::<_, std::convert::Infallible>(Frame::data(chunk)));
    Ok(resp
        .body(BodyExt::boxed_unsync(StreamBody::new(body)))
        .expect("valid response"))
}

/// 404: the session is not (or no longer) one this client can use.
pub(super) fn gone(id: Option<&Id>) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        id,
        INVALID_REQUEST,
        "session not found: it ended, or is not this client's; initialize again",
    )
}

/// From 2025-06-18 on a client names its version on every request; a version the gateway does
/// not speak is refused.
fn check_version(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(version) = headers.get(&MCP_PROTOCOL_VERSION) else {
        return Ok(());
    };
    let version = version.to_str().unwrap_or_default();
    if crate::protocol::is_legacy(version) {
        return Ok(());
    }
    Err(Refusal::new(
        StatusCode::BAD_REQUEST,
        None,
        INVALID_REQUEST,
        format!("MCP-Protocol-Version `{version}` is not a version of a legacy session"),
    ))
}

/// A POST of a session: one JSON-RPC message, or (2025-03-26 only) a batch of them.
async fn post(
    live: &Arc<Live>,
    mut messages: Vec<Message>,
) -> Result<hyper::Response<Body>, Refusal> {
    if messages.len() == 1 {
        return one(live, messages.remove(0)).await;
    }
    batch(live, messages).await
}

/// One message of a session: a request answered on its own stream, a notification or a
/// response taken with 202.
async fn one(live: &Arc<Live>, message: Message) -> Result<hyper::Response<Body>, Refusal> {
    match message {
        Message::Request { id, method, .. } if method == "initialize" => Err(initialized(&id)),
        Message::Request { id, method, params } => {
            let answer = live.request(id.clone(), method, params).await;
            Ok(answer_of(live, id, answer).await)
        }
        other => {
            take(live, other, || gone(None)).await?;
            Ok(respond::empty(StatusCode::ACCEPTED))
        }
    }
}

/// A 2025-03-26 batch: its notifications and responses taken in order, its requests answered
/// together on one event stream (each request's messages in order, the requests' interleaved
/// as they come); a batch of no request is 202.
async fn batch(live: &Arc<Live>, messages: Vec<Message>) -> Result<hyper::Response<Body>, Refusal> {
    let mut answers = Vec::new();
    for message in messages {
        match message {
            Message::Request { id, method, .. } if method == "initialize" => {
                return Err(initialized(&id));
            }
            Message::Request { id, method, params } => {
                let answer = live.request(id, method, params).await;
                answers.push(Box::pin(futures_util::stream::unfold(
                    answer,
                    |mut a| async move {
                        let next = a.rx.recv().await?;
                        Some((next, a))
                    },
                )));
            }
            other => take(live, other, || gone(None)).await?,
        }
    }
    if answers.is_empty() {
        return Ok(respond::empty(StatusCode::ACCEPTED));
    }
    let events = futures_util::stream::select_all(answers).map(|next| {
        let event = Bytes::from(crate::sse::encode("message", &next));
        Ok(Frame::data(event))
    });
    Ok(respond::event_stream(events))
}

/// A notification or a response of the client, passed to the session; `gone` is what the
/// client is told of a session that ended.
pub(super) async fn take(
    live: &Live,
    message: Message,
    gone: fn() -> Refusal,
) -> Result<(), Refusal> {
    let id = match &message {
        Message::Response { id, .. } => Some(id.clone()),
        _ => None,
    };
    match live.send(message).await {
        Ok(()) => Ok(()),
        Err(Refused::Unasked(_)) if id.is_none() => Ok(()),
        Err(Refused::Unasked(unasked)) => Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            id: Some(unasked.clone()),
            error: session::unasked(&unasked),
            method: crate::metrics::Method::Other,
        }),
        Err(Refused::Ended) => Err(gone()),
    }
}

fn initialized(id: &Id) -> Refusal {
    Refusal::new(
        StatusCode::BAD_REQUEST,
        Some(id),
        INVALID_REQUEST,
        "this session is initialized already",
    )
}

/// Whether `value` is a response (the last message of a request's answer).
pub(super) fn is_response(value: &Value) -> bool {
    value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some())
}

/// A request's answer: its response alone as JSON, or an event stream of everything the
/// backend said about it, its response last. Each event has an id a client can resume after;
/// a client that lets the stream go before the response leaves it to a resumption.
async fn answer_of(live: &Arc<Live>, id: Id, mut answer: Answer) -> hyper::Response<Body> {
    let Some(first) = answer.rx.recv().await else {
        let e = ErrorObject::new(
            jsonrpc::INTERNAL_ERROR,
            "the request ended without a result",
        );
        return respond::outcome(&id, Err(e));
    };
    if is_response(&first) {
        return respond::json(StatusCode::OK, &first);
    }
    let stream = live.streams.open();
    let sending = Sending {
        live: live.clone(),
        stream,
        first: Some(first),
        rx: Some(answer.rx),
    };
    respond::event_stream(sending.events())
}

/// An answer stream being sent: what comes next, and where it goes if the client leaves.
struct Sending {
    live: Arc<Live>,
    stream: u64,
    first: Option<Value>,
    /// `None` once the response went.
    rx: Option<tokio::sync::mpsc::Receiver<Value>>,
}

impl Sending {
    fn events(
        self,
    ) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> {
        futures_util::stream::unfold(self, |mut sending| async move {
            let next = match sending.first.take() {
                Some(first) => first,
                None => sending.rx.as_mut()?.recv().await?,
            };
            if is_response(&next) {
                sending.rx = None;
            }
            let event = sending
                .live
                .streams
                .sent(sending.stream, |id| sse_event(id, &next));
            Some((Ok(Frame::data(event)), sending))
        })
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            self.live.streams.detach(self.stream, rx);
        }
    }
}

/// One event of a session's stream, under its id.
fn sse_event(id: &str, msg: &Value) -> Bytes {
    Bytes::from(crate::sse::encode_with_id("message", id, msg))
}

/// The session's own stream (GET): the backend's messages that belong to no request, until
/// the session ends. One at a time: 409 while another is open. With `Last-Event-ID`, a stream
/// the client lost is resumed instead: what it missed, then what is still to come on it.
fn listen(live: &Arc<Live>, last_event: Option<&str>) -> hyper::Response<Body> {
    let resumed = last_event.and_then(|id| live.streams.resume(id));
    let missed = match resumed {
        Some(resumed) if resumed.stream != streams::STANDALONE => {
            let rest = Sending {
                live: live.clone(),
                stream: resumed.stream,
                first: None,
                rx: resumed.detached,
            };
            let missed = resumed
                .missed
                .into_iter()
                .map(|event| Ok(Frame::data(event)));
            return respond::event_stream(futures_util::stream::iter(missed).chain(rest.events()));
        }
        Some(resumed) => resumed.missed,
        None => Vec::new(),
    };
    let Some(listen) = live.listen() else {
        return Refusal::new(
            StatusCode::CONFLICT,
            None,
            INVALID_REQUEST,
            "this session's GET stream is open already",
        )
        .into_response();
    };
    let missed: Vec<_> = missed
        .into_iter()
        .map(|event| Ok(Frame::data(event)))
        .collect();
    let live = live.clone();
    let events = futures_util::stream::unfold((listen, live), |(mut listen, live)| async move {
        let next = listen.recv().await?;
        let event = live
            .streams
            .sent(streams::STANDALONE, |id| sse_event(id, &next));
        Some((Ok(Frame::data(event)), (listen, live)))
    });
    respond::event_stream(futures_util::stream::iter(missed).chain(events))
}

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
use super::request::{principal, read_message, single};
use super::respond::{self, Refusal};
use crate::bridge::Bridge;
use crate::bridge::session::{self, Answer, Found, Initialize, Live, Refused};
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
    let bad = |code, msg: String| Refusal::new(StatusCode::BAD_REQUEST, Some(&id), code, msg);
    let Some(Value::Object(params)) = params else {
        return Err(bad(
            INVALID_PARAMS,
            "initialize params must be an object".into(),
        ));
    };
    let principal =
        principal(&bridge.config.principal, headers).map_err(|e| bad(INVALID_REQUEST, e))?;
    let authorization = single(headers, &header::AUTHORIZATION)
        .map_err(|e| bad(INVALID_REQUEST, e))?
        .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
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
            };
            return forward(bridge, backend, to, req).await;
        }
        Found::Gone => return Err(gone(None)),
    };
    check_version(headers)?;
    let method = req.method().clone();
    let message = match method {
        Method::POST => Some(read_message(bridge, req).await?.1),
        _ => None,
    };
    held(bridge, &live, &method, message).await
}

/// A request of a session held here, from its client or forwarded by the replica it reached:
/// a POST (its message read already), a GET, a DELETE.
pub(super) async fn held(
    bridge: &Bridge,
    live: &Arc<Live>,
    method: &Method,
    message: Option<Message>,
) -> Result<hyper::Response<Body>, Refusal> {
    match (method, message) {
        (&Method::POST, Some(message)) => post(live, message).await,
        (&Method::GET, _) => Ok(listen(live)),
        (&Method::DELETE, _) => {
            bridge.end_session(live);
            Ok(respond::empty(StatusCode::OK))
        }
        _ => Ok(not_allowed()),
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

/// Where a legacy session another replica holds is served: read from its id's seal.
#[derive(Debug)]
struct Owner {
    /// The session id, as the client sent it.
    token: String,
    /// The client's principal, as this replica computed it.
    principal: Digest,
    owner: String,
    addr: String,
}

/// Forwards a request of a legacy session to the replica that holds it and relays its answer
/// as it comes (a JSON body, or an event stream for as long as it lasts). A POST's message is
/// read and checked here first, within this replica's limits. An owner that cannot be reached
/// leaves the session gone (404): the client initializes again.
async fn forward(
    bridge: &Arc<Bridge>,
    backend: usize,
    to: Owner,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, Refusal> {
    let method = req.method().clone();
    let message = match method {
        Method::POST => Some(read_message(bridge, req).await?.1.into_value()),
        Method::GET | Method::DELETE => None,
        _ => return Ok(not_allowed()),
    };
    let request = hop::Session {
        backend: bridge.config.backends[backend].path.clone(),
        principal: to.principal,
        method: method.to_string(),
        session: to.token,
        message,
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

/// A POST of a session: one JSON-RPC message.
async fn post(live: &Arc<Live>, message: Message) -> Result<hyper::Response<Body>, Refusal> {
    match message {
        Message::Request { id, method, .. } if method == "initialize" => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            Some(&id),
            INVALID_REQUEST,
            "this session is initialized already",
        )),
        Message::Request { id, method, params } => {
            let answer = live.request(id.clone(), method, params).await;
            Ok(answer_of(id, answer).await)
        }
        Message::Response { id, outcome } => {
            let response = Message::Response {
                id: id.clone(),
                outcome,
            };
            match live.send(response).await {
                Ok(()) => Ok(respond::empty(StatusCode::ACCEPTED)),
                Err(Refused::Unasked(_)) => Err(Refusal {
                    status: StatusCode::BAD_REQUEST,
                    id: Some(id.clone()),
                    error: session::unasked(&id),
                    method: crate::metrics::Method::Other,
                }),
                Err(Refused::Ended) => Err(gone(None)),
            }
        }
        notification => match live.send(notification).await {
            Ok(()) | Err(Refused::Unasked(_)) => Ok(respond::empty(StatusCode::ACCEPTED)),
            Err(Refused::Ended) => Err(gone(None)),
        },
    }
}

/// Whether `value` is a response (the last message of a request's answer).
fn is_response(value: &Value) -> bool {
    value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some())
}

/// A request's answer: its response alone as JSON, or an event stream of everything the
/// backend said about it, its response last.
async fn answer_of(id: Id, mut answer: Answer) -> hyper::Response<Body> {
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
    let events =
        futures_util::stream::unfold((Some(first), Some(answer)), |(first, answer)| async move {
            let mut answer = answer?;
            let next = match first {
                Some(first) => first,
                None => answer.rx.recv().await?,
            };
            let last = is_response(&next);
            let event = Bytes::from(crate::sse::encode("message", &next));
            let rest = (!last).then_some(answer);
            Some((Ok(Frame::data(event)), (None, rest)))
        });
    respond::event_stream(events)
}

/// The session's own stream (GET): the backend's messages that belong to no request, until
/// the session ends. One at a time: 409 while another is open.
fn listen(live: &Arc<Live>) -> hyper::Response<Body> {
    let Some(listen) = live.listen() else {
        return Refusal::new(
            StatusCode::CONFLICT,
            None,
            INVALID_REQUEST,
            "this session's GET stream is open already",
        )
        .into_response();
    };
    let events = futures_util::stream::unfold(listen, |mut listen| async move {
        let next = listen.recv().await?;
        let event = Bytes::from(crate::sse::encode("message", &next));
        Some((Ok(Frame::data(event)), listen))
    });
    respond::event_stream(events)
}

//! The internal listener: what other replicas forward (see [`crate::wire::hop`]), retries of
//! calls parked here and requests of legacy sessions held here. A hop is checked (path, method,
//! body size, the MAC over its head and body, the time and the target replica) and never
//! forwarded again. A retry goes to the engine, whose replies stream back to the sending
//! replica as SSE; a session's request goes to the legacy face (`legacy::held`), whose answer
//! goes back as it is, named by the session's id.

use super::Body;
use super::legacy;
use super::legacy_sse;
use super::listener::{self, BodyError, Limits, read_body};
use super::respond::{self, Refusal};
use crate::bridge::session::Found;
use crate::bridge::{self, Bridge, Reply};
use crate::jsonrpc;
use crate::metrics::Listener;
use crate::protocol::header::MCP_SESSION_ID;
use crate::protocol::{self, meta::RequestMeta};
use crate::seal::Digest;
use crate::shard::Shards;
use crate::wire::hop;
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};
use hyper::body::{Frame, Incoming};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the internal listener until `stop`, then lets in-flight hops finish.
pub async fn serve(
    listener: TcpListener,
    bridge: Arc<Bridge>,
    shards: Shards,
    stop: CancellationToken,
) {
    let limits = Limits {
        name: "internal",
        max_connections: bridge.config.server.max_connections,
        // Each other replica is one address, and a busy one holds a connection per forwarded
        // retry: a per-address cap would refuse its hops. The listener faces the fleet only.
        max_per_address: bridge.config.server.max_connections,
        evict_idle: false,
        header_read_timeout: bridge.config.server.header_timeout,
        write_timeout: bridge.config.server.write_timeout,
    };
    let grace = bridge.config.server.shutdown_grace + Duration::from_secs(1);
    let metrics = bridge.metrics.listener(Listener::Internal);
    let connections = listener::serve(
        listener,
        limits,
        &shards,
        metrics,
        stop,
        move |req, peer| handle(bridge.clone(), req, peer),
    )
    .await;
    // Hops in flight end when their calls do; the bridge bounds that by the shutdown grace.
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("internal connections still open after the shutdown grace");
    }
}

/// A hop refused: the reason as a JSON-RPC error, under `status`.
fn refuse(status: StatusCode, message: &str) -> hyper::Response<Body> {
    Refusal::new(status, None, jsonrpc::INVALID_REQUEST, message).into_response()
}

async fn handle(
    bridge: Arc<Bridge>,
    req: hyper::Request<Incoming>,
    peer: std::net::SocketAddr,
) -> hyper::Response<Body> {
    let path = req.uri().path();
    if path != hop::PATH && path != hop::SESSION_PATH {
        return refuse(StatusCode::NOT_FOUND, "no such internal endpoint");
    }
    if req.method() != Method::POST {
        return refuse(StatusCode::METHOD_NOT_ALLOWED, "POST only");
    }
    let (parts, body) = req.into_parts();
    // Room for the client's body plus the hop's own fields.
    let limit = bridge.config.limits.max_body_bytes + 4096;
    let body = match read_body(body, limit, bridge.config.server.body_timeout).await {
        Ok(body) => body,
        Err(e @ BodyError::TimedOut(_)) => {
            return refuse(StatusCode::REQUEST_TIMEOUT, &e.to_string());
        }
        Err(e) => return refuse(StatusCode::PAYLOAD_TOO_LARGE, &e.to_string()),
    };
    let fleet = &bridge.config.fleet;
    let from = match hop::verify(
        &bridge.keys,
        &parts,
        &body,
        &fleet.replica_id,
        fleet.max_clock_skew,
        now_ms(),
    ) {
        Ok(from) => from,
        Err(e) => {
            tracing::warn!(%peer, "internal hop refused: {e}");
            return refuse(
                StatusCode::UNAUTHORIZED,
                &format!("internal hop refused: {e}"),
            );
        }
    };
    let session = parts.uri.path() == hop::SESSION_PATH;
    // A session's message sits one level down in the hop's body, and is checked on its own
    // when parsed; a retry's params sit where they did in the client's request.
    let depth = bridge.config.limits.max_json_depth + usize::from(session);
    if let Err(e) = jsonrpc::check_depth(&body, depth) {
        return refuse(StatusCode::BAD_REQUEST, &e.to_string());
    }
    if session {
        return serve_session(&bridge, &from, &body).await;
    }
    serve_retry(&bridge, &from, peer, &body)
}

/// A retry of a call parked here, handed to the engine; its replies stream back as SSE.
fn serve_retry(
    bridge: &Arc<Bridge>,
    from: &str,
    peer: std::net::SocketAddr,
    body: &[u8],
) -> hyper::Response<Body> {
    let forwarded: hop::Body = match serde_json::from_slice(body) {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(%peer, %from, "internal hop with a malformed body: {e}");
            return refuse(StatusCode::BAD_REQUEST, "malformed hop body");
        }
    };
    let Some(backend) = bridge.route(&forwarded.backend) else {
        tracing::warn!(%from, backend = %forwarded.backend, "internal hop for an unknown backend");
        return refuse(StatusCode::NOT_FOUND, "unknown backend");
    };
    let state_ok = forwarded
        .params
        .get("requestState")
        .is_some_and(|s| s.is_string());
    if !protocol::is_mrtr_method(&forwarded.method) || !state_ok {
        tracing::warn!(%from, method = %forwarded.method, "internal hop that is not a retry: refused");
        return refuse(StatusCode::BAD_REQUEST, "only retries are forwarded");
    }
    let params = Value::Object(forwarded.params);
    let meta = match RequestMeta::from_params(Some(&params)) {
        Ok(m) => m,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let Value::Object(params) = params else {
        unreachable!("built as an object")
    };
    tracing::debug!(%from, "serving a forwarded retry");
    let rx = bridge.handle_hop(
        backend,
        bridge::Request {
            id: None,
            method: forwarded.method,
            params,
            meta,
            principal: forwarded.principal,
            // Credentials never cross the hop; a resumed call already holds its session.
            authorization: None,
            // Checked by the replica the client sent them to.
            param_headers: Default::default(),
        },
    );
    let events = futures_util::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        let reply = rx.recv().await?;
        let last = matches!(reply, Reply::Done(_));
        let frame = Frame::data(Bytes::from(crate::sse::encode_text(
            "message",
            &hop::encode_reply(&reply),
        )));
        Some((
            Ok::<_, std::convert::Infallible>(frame),
            (!last).then_some(rx),
        ))
    });
    respond::event_stream(events)
}

/// A request of a legacy session held here, served by the legacy face as if its client had
/// sent it here, for the principal the sending replica computed (under the MAC). A session held
/// elsewhere is gone: a request is forwarded at most once.
async fn serve_session(bridge: &Arc<Bridge>, from: &str, body: &[u8]) -> hyper::Response<Body> {
    let forwarded: hop::Session = match serde_json::from_slice(body) {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(%from, "internal hop with a malformed session body: {e}");
            return refuse(StatusCode::BAD_REQUEST, "malformed hop body");
        }
    };
    let Some(backend) = bridge.route(&forwarded.backend) else {
        tracing::warn!(%from, backend = %forwarded.backend, "internal hop for an unknown backend");
        return refuse(StatusCode::NOT_FOUND, "unknown backend");
    };
    let shape = match (forwarded.method.as_str(), forwarded.message) {
        ("POST", Some(message)) => Shape::Post(message),
        ("GET", None) => Shape::Get,
        ("DELETE", None) => Shape::Delete,
        (method, _) => {
            tracing::warn!(%from, %method, "internal hop with a session request of no known shape");
            return refuse(StatusCode::BAD_REQUEST, "malformed hop body");
        }
    };
    if forwarded.stream {
        let session = (
            forwarded.session,
            forwarded.principal,
            forwarded.authorization,
        );
        return stream_message(bridge, from, backend, session, shape).await;
    }
    let answer = match bridge.locate(backend, &forwarded.session, &forwarded.principal) {
        Found::Here(live) => {
            let request = match shape {
                Shape::Post(message) => {
                    let batches = live.version() == "2025-03-26";
                    parse(bridge, message, batches).map(legacy::Held::Post)
                }
                Shape::Get => Ok(legacy::Held::Get {
                    last_event: forwarded.last_event_id,
                }),
                Shape::Delete => Ok(legacy::Held::Delete),
            };
            match request {
                Ok(request) => legacy::held(bridge, &live, request).await,
                Err(refused) => Err(refused),
            }
        }
        Found::Owner { owner, .. } => {
            tracing::warn!(%from, %owner, "a forwarded legacy session request names another replica as owner: gone, a request is forwarded at most once");
            Err(legacy::gone(None))
        }
        Found::Gone => Err(legacy::gone(None)),
    };
    let mut resp = answer.unwrap_or_else(Refusal::into_response);
    // Names the session it answers for: the sending replica relays only such an answer.
    if let Ok(session) = HeaderValue::from_str(&forwarded.session) {
        resp.headers_mut().insert(MCP_SESSION_ID, session);
    }
    resp
}

/// A message POSTed for an HTTP+SSE stream held here, forwarded by the replica its client
/// reached: served as the face serves its own (`legacy_sse::held`). A stream held elsewhere is
/// gone: a request is forwarded at most once.
async fn stream_message(
    bridge: &Arc<Bridge>,
    from: &str,
    backend: usize,
    (stream, principal, authorization): (String, Digest, Option<String>),
    shape: Shape,
) -> hyper::Response<Body> {
    let Shape::Post(message) = shape else {
        return refuse(StatusCode::BAD_REQUEST, "malformed hop body");
    };
    let answer = match bridge.locate_stream(backend, &stream, &principal) {
        Ok(key) => match parse(bridge, message, false) {
            Ok(mut messages) => {
                let authorization = authorization.and_then(|v| HeaderValue::from_str(&v).ok());
                let message = messages.remove(0);
                legacy_sse::held(bridge, backend, key, principal, authorization, message).await
            }
            Err(refused) => Err(refused),
        },
        Err(Found::Owner { owner, .. }) => {
            tracing::warn!(%from, %owner, "a forwarded HTTP+SSE message names another replica as owner: gone, a request is forwarded at most once");
            Err(legacy::gone(None))
        }
        Err(_) => Err(legacy::gone(None)),
    };
    let mut resp = answer.unwrap_or_else(Refusal::into_response);
    if let Ok(session) = HeaderValue::from_str(&stream) {
        resp.headers_mut().insert(MCP_SESSION_ID, session);
    }
    resp
}

/// What a forwarded session request is.
enum Shape {
    Post(Value),
    Get,
    Delete,
}

/// A forwarded POST's message (or batch, where the session's version takes them), checked as
/// the legacy face checks a client's.
fn parse(bridge: &Bridge, message: Value, batches: bool) -> Result<Vec<jsonrpc::Message>, Refusal> {
    let bytes = serde_json::to_vec(&message).expect("JSON values serialize");
    let depth = bridge.config.limits.max_json_depth;
    let parsed = if batches {
        jsonrpc::parse_many(&bytes, depth)
    } else {
        jsonrpc::parse(&bytes, depth).map(|m| vec![m])
    };
    parsed.map_err(|e| Refusal {
        status: StatusCode::BAD_REQUEST,
        id: None,
        error: e.to_error(),
        method: crate::metrics::Method::Other,
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

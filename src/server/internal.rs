//! The internal listener: retries forwarded by other replicas (see [`crate::wire::hop`]). A
//! request is checked (path, method, body size, the MAC over its head and body, the time and
//! the target replica), never forwarded again, and handed to the engine, whose replies stream
//! back to the sending replica as SSE.

use super::Body;
use super::listener::{self, BodyError, Limits, read_body};
use super::respond::{self, Refusal};
use crate::bridge::{self, Bridge, Reply};
use crate::jsonrpc;
use crate::metrics::Listener;
use crate::protocol::{self, meta::RequestMeta};
use crate::shard::Shards;
use crate::wire::hop;
use bytes::Bytes;
use http::{Method, StatusCode};
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
    if req.uri().path() != hop::PATH {
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
    if let Err(e) = jsonrpc::check_depth(&body, bridge.config.limits.max_json_depth) {
        return refuse(StatusCode::BAD_REQUEST, &e.to_string());
    }
    let forwarded: hop::Body = match serde_json::from_slice(&body) {
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

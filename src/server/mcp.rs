//! The modern face: MCP 2026-07-28 over Streamable HTTP. POST only; each body is one JSON-RPC
//! request, checked here (size, depth, shape, headers against body, `_meta`, version, Origin)
//! before it becomes a [`bridge::Request`]. Replies go out as one JSON object, or as an SSE
//! stream when notifications come before the result. Dropping the response stream (the client
//! closed it) drops the reply receiver, which cancels the call.

use super::Body;
use super::request::{authorization, principal, read_message, single};
use super::respond::{self, Refusal};
use crate::bridge::{self, Bridge, Reply};
use crate::jsonrpc::{self, ErrorObject, HEADER_MISMATCH, INVALID_PARAMS, Id, Message, Payload};
use crate::metrics::{self, Metrics, Outcome};
use crate::protocol::header::{
    MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, MCP_SESSION_ID, decode_value,
};
use crate::protocol::meta::RequestMeta;
use crate::protocol::param;
use crate::protocol::{self, MODERN};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, StatusCode, header};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use std::sync::Arc;

/// Serves one HTTP request.
pub async fn serve(bridge: Arc<Bridge>, req: hyper::Request<Incoming>) -> hyper::Response<Body> {
    match handle(bridge.clone(), req).await {
        Ok(resp) => resp,
        Err(r) => {
            bridge.metrics().request(r.method, Outcome::Refused);
            r.into_response()
        }
    }
}

async fn handle(
    bridge: Arc<Bridge>,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, Refusal> {
    // Before anything else: a request from a page of a foreign origin learns nothing here.
    check_origin(&bridge.config.server.allowed_origins, req.headers())?;
    // A backend's 2024-11-05 HTTP+SSE paths are that transport's, whatever the request says.
    if let Some((backend, at)) = super::legacy_sse::route(&bridge.config, req.uri().path()) {
        return super::legacy_sse::serve(&bridge, backend, at, req).await;
    }
    let Some(backend) = bridge.route(req.uri().path()) else {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            None,
            jsonrpc::METHOD_NOT_FOUND,
            "no MCP endpoint at this path",
        ));
    };
    // A session's request, unless it says it is 2026-07-28's: then the header means nothing.
    if req.headers().contains_key(&MCP_SESSION_ID) && !is_modern(req.headers()) {
        return super::legacy::serve(&bridge, backend, req).await;
    }
    if req.method() != Method::POST {
        bridge
            .metrics()
            .request(metrics::Method::Other, Outcome::Refused);
        let mut resp = Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            jsonrpc::INVALID_REQUEST,
            "this MCP endpoint accepts POST only (2026-07-28 has no GET stream and no sessions)",
        )
        .into_response();
        resp.headers_mut()
            .insert(header::ALLOW, http::HeaderValue::from_static("POST"));
        return Ok(resp);
    }
    let (parts, message) = read_message(&bridge, req).await?;
    let message = match message {
        // A legacy client's handshake opens a session of its own.
        Message::Request { id, method, params }
            if method == "initialize" && !is_modern(&parts.headers) =>
        {
            return super::legacy::initialize(&bridge, backend, &parts.headers, id, params).await;
        }
        other => other,
    };
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (id, method, params),
        Message::Notification { .. } => {
            // 2026-07-28 defines no client notifications over HTTP; accepting them is harmless.
            return Ok(respond::empty(StatusCode::ACCEPTED));
        }
        Message::Response { id, .. } => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                Some(&id),
                jsonrpc::INVALID_REQUEST,
                "clients must not send responses to a 2026-07-28 server",
            ));
        }
    };
    let params = match params {
        None => serde_json::Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                Some(&id),
                INVALID_PARAMS,
                "params must be an object",
            ));
        }
    };
    let limits = &bridge.config.limits;
    let label = metrics::Method::from_name(&method);
    let params_value = Value::Object(params);
    let meta =
        check_request(&parts.headers, &id, &method, &params_value).map_err(|r| r.of(label))?;
    let Value::Object(params) = params_value else {
        unreachable!("built as an object")
    };
    let refused = |msg: String| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            Some(&id),
            jsonrpc::INVALID_REQUEST,
            msg,
        )
        .of(label)
    };
    let principal = principal(&bridge.config.principal, &parts.headers).map_err(refused)?;
    let authorization = authorization(&parts.headers).map_err(refused)?;
    // Checked by the engine, which knows which of them the tool declares.
    let param_headers = param::Headers::from_request(&parts.headers);
    // park and round are filled in by the engine once known.
    let span = tracing::info_span!(
        "request",
        %method,
        %id,
        backend = %bridge.config.backends[backend].name,
        park = tracing::field::Empty,
        round = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    if let Some(trace) = &meta.trace {
        span.record("trace_id", trace.trace_id());
    }
    // The span goes with the request's work, which is where its logs are made; waiting for the
    // reply logs nothing, so it is not entered here.
    let rx = bridge.handle(
        backend,
        bridge::Request {
            id: Some(id.clone()),
            method,
            params,
            meta,
            principal,
            authorization,
            param_headers,
        },
        span,
    );
    let tally = Tally {
        metrics: bridge.metrics().clone(),
        method: label,
        counted: false,
    };
    Ok(reply(id, rx, tally, limits.max_reply_bytes).await)
}

/// Whether a request says it is 2026-07-28's: its `MCP-Protocol-Version` header names it. A
/// legacy `initialize` has no such header (or a legacy version in it).
fn is_modern(headers: &HeaderMap) -> bool {
    headers
        .get(&MCP_PROTOCOL_VERSION)
        .is_some_and(|v| v.as_bytes() == MODERN.as_bytes())
}

/// Counts one request's outcome exactly once; a request dropped before its outcome went out
/// (the client closed the connection) counts as `disconnected`.
struct Tally {
    metrics: Arc<Metrics>,
    method: metrics::Method,
    counted: bool,
}

impl Tally {
    fn outcome(&mut self, outcome: &Result<Payload, ErrorObject>) {
        let o = match outcome {
            Ok(Payload::Value(r))
                if r.get("resultType").and_then(Value::as_str) == Some("input_required") =>
            {
                Outcome::InputRequired
            }
            Ok(_) => Outcome::Complete,
            Err(_) => Outcome::Error,
        };
        self.metrics.request(self.method, o);
        self.counted = true;
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if !self.counted {
            self.metrics.request(self.method, Outcome::Disconnected);
        }
    }
}

/// Header and `_meta` checks, in the order the spec's error codes imply.
fn check_request(
    headers: &HeaderMap,
    id: &Id,
    method: &str,
    params: &Value,
) -> Result<RequestMeta, Refusal> {
    let mismatch =
        |msg: String| Refusal::new(StatusCode::BAD_REQUEST, Some(id), HEADER_MISMATCH, msg);
    let header_version = match header_str(headers, &MCP_PROTOCOL_VERSION).map_err(&mismatch)? {
        Some(v) => v,
        None => return Err(mismatch("MCP-Protocol-Version header is required".into())),
    };
    if header_version != MODERN {
        return Err(unsupported(id, header_version));
    }
    let header_method = header_str(headers, &MCP_METHOD)
        .map_err(&mismatch)?
        .ok_or_else(|| mismatch("Mcp-Method header is required".into()))?;
    if header_method != method {
        return Err(mismatch(format!(
            "Mcp-Method header `{header_method}` does not match body method `{method}`"
        )));
    }
    let known = method == "server/discover"
        || method == protocol::LISTEN
        || protocol::is_forwarded_method(method)
        || protocol::is_mrtr_method(method);
    if !known {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            Some(id),
            jsonrpc::METHOD_NOT_FOUND,
            format!("method `{method}` is not available"),
        ));
    }
    let meta = RequestMeta::from_params(Some(params)).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            Some(id),
            INVALID_PARAMS,
            e.to_string(),
        )
    })?;
    if header_version != meta.protocol_version {
        return Err(mismatch(format!(
            "MCP-Protocol-Version header `{header_version}` does not match _meta version `{}`",
            meta.protocol_version
        )));
    }
    if protocol::is_mrtr_method(method) {
        let field = if method == "resources/read" {
            "uri"
        } else {
            "name"
        };
        let body_name = params.get(field).and_then(Value::as_str).ok_or_else(|| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                Some(id),
                INVALID_PARAMS,
                format!("params.{field} is required"),
            )
        })?;
        let raw = header_str(headers, &MCP_NAME)
            .map_err(&mismatch)?
            .ok_or_else(|| mismatch("Mcp-Name header is required".into()))?;
        let name = decode_value(raw).ok_or_else(|| {
            mismatch("Mcp-Name header has a malformed =?base64?...?= value".into())
        })?;
        if name != body_name {
            return Err(mismatch(format!(
                "Mcp-Name header does not match params.{field}"
            )));
        }
    }
    Ok(meta)
}

/// 400 with -32022: the version asked for is not the one this endpoint speaks.
fn unsupported(id: &Id, requested: &str) -> Refusal {
    Refusal::new(
        StatusCode::BAD_REQUEST,
        Some(id),
        jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        format!("protocol version `{requested}` is not supported"),
    )
    .with_data(json!({"supported": [MODERN], "requested": requested}))
}

fn header_str<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h str>, String> {
    match single(headers, name)? {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(Some)
            .map_err(|_| format!("{name} header has invalid characters")),
    }
}

fn check_origin(allowed: &[String], headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default();
    let ok = if allowed.is_empty() {
        is_loopback_origin(origin)
    } else {
        allowed.iter().any(|a| a == "*" || a == origin)
    };
    if ok {
        Ok(())
    } else {
        Err(Refusal::new(
            StatusCode::FORBIDDEN,
            None,
            jsonrpc::INVALID_REQUEST,
            "Origin not allowed",
        ))
    }
}

fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if rest.starts_with('[') {
        rest.split(']').next().map(|h| &h[1..])
    } else {
        rest.split(':').next()
    };
    matches!(host, Some("localhost" | "127.0.0.1" | "::1"))
}

/// Waits for the first reply: a result goes out as JSON; a notification first opens SSE.
async fn reply(
    id: Id,
    mut rx: tokio::sync::mpsc::Receiver<Reply>,
    mut tally: Tally,
    max_reply_bytes: usize,
) -> hyper::Response<Body> {
    let outcome = match rx.recv().await {
        Some(Reply::Done(outcome)) => outcome,
        None => Err(ErrorObject::new(
            jsonrpc::INTERNAL_ERROR,
            "the request ended without a result",
        )),
        Some(Reply::Notification(first)) => {
            let events = Events {
                first: Some(first),
                rx: Some(rx),
                id,
                tally,
                max_reply_bytes,
            };
            let frames = futures_util::stream::unfold(events, |mut events| async move {
                let event = events.next().await?;
                Some((Ok(Frame::data(event)), events))
            });
            return respond::event_stream(frames);
        }
    };
    tally.outcome(&outcome);
    respond::outcome(&id, outcome)
}

/// A reply sent as an event stream, notifications first: what is left of it to send.
struct Events {
    /// The notification that opened the stream, until it is sent.
    first: Option<Value>,
    /// `None` once the result went.
    rx: Option<tokio::sync::mpsc::Receiver<Reply>>,
    id: Id,
    tally: Tally,
    max_reply_bytes: usize,
}

impl Events {
    /// The next event to send, or `None` once the result went (or the request ended without
    /// one: the client reads the end of the stream).
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(event) = self.first.take().and_then(|note| self.note(&note)) {
            return Some(event);
        }
        loop {
            match self.rx.as_mut()?.recv().await? {
                Reply::Notification(note) => {
                    if let Some(event) = self.note(&note) {
                        return Some(event);
                    }
                }
                Reply::Done(outcome) => {
                    self.rx = None;
                    self.tally.outcome(&outcome);
                    // The outcome goes here: the event is the one copy of it left.
                    let text = jsonrpc::response_text(Some(&self.id), &outcome);
                    drop(outcome);
                    // Made of JSON text: UTF-8.
                    let text = String::from_utf8_lossy(&text);
                    return Some(Bytes::from(crate::sse::encode_text("message", &text)));
                }
            }
        }
    }

    /// A notification's event, or `None` when it is over the limit: it is dropped, as
    /// notifications are for a client that does not read them.
    fn note(&self, note: &Value) -> Option<Bytes> {
        let event = Bytes::from(crate::sse::encode("message", note));
        if event.len() > self.max_reply_bytes {
            tracing::debug!(
                bytes = event.len(),
                "notification over limits.max_reply_bytes; dropped"
            );
            return None;
        }
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_origins_pass_by_default() {
        assert!(is_loopback_origin("http://localhost:3000"));
        assert!(is_loopback_origin("http://127.0.0.1"));
        assert!(is_loopback_origin("http://[::1]:8080"));
        assert!(!is_loopback_origin("http://localhost.evil.com"));
        assert!(!is_loopback_origin("https://example.com"));
    }
}

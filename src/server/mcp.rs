//! The modern face: MCP 2026-07-28 over Streamable HTTP. POST only; each body is one JSON-RPC
//! request, checked here (size, depth, shape, headers against body, `_meta`, version, Origin)
//! before it becomes a [`bridge::Request`]. Replies go out as one JSON object, or as an SSE
//! stream when notifications come before the result. Dropping the response stream (the client
//! closed it) drops the reply receiver, which cancels the call.

use super::Body;
use super::listener::{BodyError, read_body};
use super::respond::{self, Refusal};
use crate::bridge::{self, Bridge, Reply};
use crate::config::PrincipalSource;
use crate::jsonrpc::{self, ErrorObject, HEADER_MISMATCH, INVALID_PARAMS, Id, Message, Payload};
use crate::metrics::{self, Metrics, Outcome};
use crate::protocol::header::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, decode_value};
use crate::protocol::meta::RequestMeta;
use crate::protocol::param;
use crate::protocol::{self, MODERN};
use crate::seal::{self, Digest};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
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
    let Some(backend) = bridge.route(req.uri().path()) else {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            None,
            jsonrpc::METHOD_NOT_FOUND,
            "no MCP endpoint at this path",
        ));
    };
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
    let limits = &bridge.config.limits;
    let unread = |e: BodyError| {
        let (status, code) = match e {
            BodyError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, jsonrpc::INVALID_REQUEST),
            BodyError::TimedOut(_) => (StatusCode::REQUEST_TIMEOUT, jsonrpc::INVALID_REQUEST),
            BodyError::Failed(_) => (StatusCode::BAD_REQUEST, jsonrpc::PARSE_ERROR),
        };
        Refusal::new(status, None, code, e.to_string())
    };
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limits.max_body_bytes as u64
    {
        return Err(unread(BodyError::TooLarge(limits.max_body_bytes)));
    }
    let (parts, body) = req.into_parts();
    let bytes = read_body(
        body,
        limits.max_body_bytes,
        bridge.config.server.body_timeout,
    )
    .await
    .map_err(unread)?;
    let message = jsonrpc::parse(&bytes, limits.max_json_depth).map_err(|e| Refusal {
        status: StatusCode::BAD_REQUEST,
        id: None,
        error: e.to_error(),
        method: metrics::Method::Other,
    })?;
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
    // Copied: the header shares the connection's read buffer, which a parked call would
    // otherwise keep alive. Authorization is a singleton field: a repeated one is refused
    // whatever the principal comes from, since the backend is given one copy.
    let authorization = single(&parts.headers, &header::AUTHORIZATION)
        .map_err(refused)?
        .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
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
        // A legacy client's handshake: tell it which version this endpoint speaks.
        None if method == "initialize" => {
            let asked = params.get("protocolVersion").and_then(Value::as_str);
            return Err(handshake(id, asked.unwrap_or("unknown")));
        }
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

/// 400 with -32022 for a legacy `initialize`. Asking for another version, it is told that
/// version is not spoken here; asking for 2026-07-28, it is told what is wrong instead, since
/// 2026-07-28 is supported and has no handshake. The data is that of any version refused.
fn handshake(id: &Id, requested: &str) -> Refusal {
    let mut refusal = unsupported(id, requested);
    if requested == MODERN {
        refusal.error.message = format!(
            "`initialize` is a legacy handshake this endpoint does not serve: {MODERN} has no \
             `initialize`; send each request with the `MCP-Protocol-Version: {MODERN}` and \
             `Mcp-Method` headers, and its protocol version and client capabilities in `_meta`"
        );
    }
    refusal
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

/// A header that must appear at most once. A repeated one is refused rather than read by its
/// first copy: a proxy in front of the gateway that reads another copy (or all of them) would
/// route, authorize or attribute on a value the gateway never checked.
fn single(
    headers: &HeaderMap,
    name: impl header::AsHeaderName + Copy + std::fmt::Display,
) -> Result<Option<&HeaderValue>, String> {
    let mut all = headers.get_all(name).iter();
    let first = all.next();
    if all.next().is_some() {
        return Err(format!("{name} header appears more than once"));
    }
    Ok(first)
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

/// The principal a request acts for, as a digest (raw credentials are never kept). A request
/// that carries its principal's header more than once is refused.
pub fn principal(source: &PrincipalSource, headers: &HeaderMap) -> Result<Digest, String> {
    let value = match source {
        PrincipalSource::Authorization => single(headers, &header::AUTHORIZATION)?,
        PrincipalSource::Header(name) => single(headers, name)?,
        PrincipalSource::Anonymous => None,
    };
    Ok(match value {
        Some(v) => {
            let mut bytes = b"principal\0".to_vec();
            bytes.extend_from_slice(v.as_bytes());
            seal::digest(&bytes)
        }
        None => *ANONYMOUS,
    })
}

/// The principal of every request without a credential, hashed once.
static ANONYMOUS: std::sync::LazyLock<Digest> =
    std::sync::LazyLock::new(|| seal::digest(b"anonymous"));

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

    #[test]
    fn principals_differ_by_credential() {
        let mut a = HeaderMap::new();
        a.insert(header::AUTHORIZATION, "Bearer a".parse().unwrap());
        let mut b = HeaderMap::new();
        b.insert(header::AUTHORIZATION, "Bearer b".parse().unwrap());
        let src = PrincipalSource::Authorization;
        assert_ne!(principal(&src, &a), principal(&src, &b));
        assert_eq!(
            principal(&src, &HeaderMap::new()),
            principal(&PrincipalSource::Anonymous, &a)
        );
    }

    #[test]
    fn a_repeated_principal_header_is_refused() {
        let mut h = HeaderMap::new();
        h.append(header::AUTHORIZATION, "Bearer alice".parse().unwrap());
        h.append(header::AUTHORIZATION, "Bearer mallory".parse().unwrap());
        let err = principal(&PrincipalSource::Authorization, &h).unwrap_err();
        assert_eq!(err, "authorization header appears more than once");
        let name = HeaderName::from_static("x-user");
        h.append(&name, "alice".parse().unwrap());
        assert!(principal(&PrincipalSource::Header(name.clone()), &h).is_ok());
        h.append(&name, "mallory".parse().unwrap());
        assert!(principal(&PrincipalSource::Header(name), &h).is_err());
    }
}

//! What every face reads from a request the same way: the body within its limits as one
//! JSON-RPC message, headers that must appear at most once, and the principal the request acts
//! for.

use super::listener::{BodyError, read_body};
use super::respond::Refusal;
use crate::bridge::Bridge;
use crate::config::PrincipalSource;
use crate::jsonrpc::{self, Message};
use crate::metrics;
use crate::seal::{self, Digest};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use hyper::body::Incoming;

/// Reads and parses one POST's body within the limits: one JSON-RPC message.
pub async fn read_message(
    bridge: &Bridge,
    req: hyper::Request<Incoming>,
) -> Result<(http::request::Parts, Message), Refusal> {
    read_messages(bridge, req, false)
        .await
        .map(|(parts, mut messages)| (parts, messages.remove(0)))
}

/// Reads and parses one POST's body within the limits: one JSON-RPC message, or a batch of
/// them where `batch` allows it (never empty).
pub async fn read_messages(
    bridge: &Bridge,
    req: hyper::Request<Incoming>,
    batch: bool,
) -> Result<(http::request::Parts, Vec<Message>), Refusal> {
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
    let parsed = if batch {
        jsonrpc::parse_many(&bytes, limits.max_json_depth)
    } else {
        jsonrpc::parse(&bytes, limits.max_json_depth).map(|m| vec![m])
    };
    let messages = parsed.map_err(|e| Refusal {
        status: StatusCode::BAD_REQUEST,
        id: None,
        error: e.to_error(),
        method: metrics::Method::Other,
    })?;
    Ok((parts, messages))
}

/// The client's `Authorization`, if it sent one: refused when repeated (a singleton field,
/// and the backend is given one copy), whatever the principal comes from. Copied: the header
/// shares the connection's read buffer, which a parked call would otherwise keep alive.
pub fn authorization(headers: &HeaderMap) -> Result<Option<HeaderValue>, String> {
    let value = single(headers, &header::AUTHORIZATION)?;
    Ok(value.and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()))
}

/// A header that must appear at most once. A repeated one is refused rather than read by its
/// first copy: a proxy in front of the gateway that reads another copy (or all of them) would
/// route, authorize or attribute on a value the gateway never checked.
pub fn single(
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

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

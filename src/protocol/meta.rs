//! The per-request `_meta` of 2026-07-28: protocol version, client capabilities, client info,
//! log level, progress token and W3C trace context, read once at the edge.
//!
//! Trace context: a well-formed `traceparent` (and its `tracestate`) is passed to the backend in
//! the upstream request's `_meta` unchanged, so the backend's spans join the client's trace. The
//! gateway makes no spans of its own in that trace. A malformed `traceparent` is dropped with its
//! `tracestate`, as the W3C rules say, rather than handed on.

use serde_json::{Map, Value};

pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// On a subscription's notifications: the id of the `subscriptions/listen` request.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// Longest `tracestate` passed on (the W3C limit is 32 members of at most 256 characters each).
const MAX_TRACESTATE: usize = 8192;

/// W3C trace context from the request's `_meta`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context in `meta`, if its `traceparent` is well formed.
    fn from_meta(meta: &Map<String, Value>) -> Option<TraceContext> {
        let traceparent = meta.get(TRACEPARENT)?.as_str()?;
        if !valid_traceparent(traceparent) {
            return None;
        }
        let tracestate = meta
            .get(TRACESTATE)
            .and_then(Value::as_str)
            .filter(|s| s.len() <= MAX_TRACESTATE)
            .map(str::to_owned);
        Some(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The 32-hex-digit trace id.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }
}

/// `version-traceid-parentid-flags`, lowercase hex; later versions may append fields.
fn valid_traceparent(s: &str) -> bool {
    let hex = |p: &str, len: usize| {
        p.len() == len
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |p: &str| p.bytes().any(|b| b != b'0');
    let parts: Vec<&str> = s.split('-').collect();
    let [version, trace, parent, flags, rest @ ..] = parts.as_slice() else {
        return false;
    };
    hex(version, 2)
        && *version != "ff"
        && (rest.is_empty() || *version != "00")
        && hex(trace, 32)
        && nonzero(trace)
        && hex(parent, 16)
        && nonzero(parent)
        && hex(flags, 2)
}

/// The request metadata a 2026-07-28 client sends with every request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestMeta {
    pub protocol_version: String,
    pub capabilities: Map<String, Value>,
    pub client_info: Option<Value>,
    pub log_level: Option<String>,
    pub progress_token: Option<Value>,
    pub trace: Option<TraceContext>,
    /// Other keys outside the MCP namespace, forwarded upstream unchanged.
    pub other: Map<String, Value>,
}

/// Why `_meta` was refused; each becomes -32602.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetaError {
    #[error("params._meta is required")]
    Missing,
    #[error("params._meta[\"{PROTOCOL_VERSION}\"] is required and must be a string")]
    NoVersion,
    #[error("params._meta[\"{CLIENT_CAPABILITIES}\"] is required and must be an object")]
    NoCapabilities,
    #[error(
        "params._meta[\"{LOG_LEVEL}\"] must be one of debug, info, notice, warning, error, critical, alert, emergency"
    )]
    BadLogLevel,
}

/// The log levels (RFC 5424 names, as MCP uses them), lowest first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of a log level in [`LOG_LEVELS`].
pub fn severity(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

impl RequestMeta {
    pub fn from_params(params: Option<&Value>) -> Result<RequestMeta, MetaError> {
        let meta = params
            .and_then(|p| p.get("_meta"))
            .and_then(Value::as_object)
            .ok_or(MetaError::Missing)?;
        let protocol_version = meta
            .get(PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .ok_or(MetaError::NoVersion)?
            .to_owned();
        let capabilities = meta
            .get(CLIENT_CAPABILITIES)
            .and_then(Value::as_object)
            .ok_or(MetaError::NoCapabilities)?
            .clone();
        let log_level = match meta.get(LOG_LEVEL) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if severity(s).is_some() => Some(s.clone()),
            Some(_) => return Err(MetaError::BadLogLevel),
        };
        let other = meta
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("io.modelcontextprotocol/")
                    && !matches!(k.as_str(), "progressToken" | TRACEPARENT | TRACESTATE)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(RequestMeta {
            protocol_version,
            capabilities,
            client_info: meta.get(CLIENT_INFO).cloned(),
            log_level,
            progress_token: meta.get("progressToken").cloned(),
            trace: TraceContext::from_meta(meta),
            other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_required_and_optional_fields() {
        let params = json!({"_meta": {
            PROTOCOL_VERSION: "2026-07-28",
            CLIENT_CAPABILITIES: {"elicitation": {}},
            CLIENT_INFO: {"name": "c", "version": "1"},
            "progressToken": 7,
            "com.example/tenant": "t1"
        }});
        let meta = RequestMeta::from_params(Some(&params)).unwrap();
        assert_eq!(meta.protocol_version, "2026-07-28");
        assert!(meta.capabilities.contains_key("elicitation"));
        assert_eq!(meta.progress_token, Some(json!(7)));
        assert_eq!(meta.other.get("com.example/tenant"), Some(&json!("t1")));
        assert_eq!(meta.trace, None);
    }

    fn trace_of(fields: Value) -> Option<TraceContext> {
        let mut meta = json!({PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: {}});
        for (k, v) in fields.as_object().unwrap() {
            meta[k] = v.clone();
        }
        let m = RequestMeta::from_params(Some(&json!({ "_meta": meta }))).unwrap();
        assert!(!m.other.contains_key(TRACEPARENT) && !m.other.contains_key(TRACESTATE));
        m.trace
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_kept_with_its_tracestate() {
        let t = trace_of(json!({TRACEPARENT: PARENT, TRACESTATE: "congo=t61rcWkgMzE"})).unwrap();
        assert_eq!(t.traceparent, PARENT);
        assert_eq!(t.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert!(trace_of(json!({ TRACEPARENT: later })).is_some());
    }

    #[test]
    fn a_malformed_traceparent_is_dropped_with_its_tracestate() {
        for bad in [
            json!("00-abc"),
            json!(42),
            json!("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
            json!("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            json!("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
            json!("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            json!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"),
        ] {
            assert_eq!(
                trace_of(json!({TRACEPARENT: bad, TRACESTATE: "a=b"})),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn missing_fields_are_refused() {
        assert_eq!(RequestMeta::from_params(None), Err(MetaError::Missing));
        let no_caps = json!({"_meta": {PROTOCOL_VERSION: "2026-07-28"}});
        assert_eq!(
            RequestMeta::from_params(Some(&no_caps)),
            Err(MetaError::NoCapabilities)
        );
        let no_version = json!({"_meta": {CLIENT_CAPABILITIES: {}}});
        assert_eq!(
            RequestMeta::from_params(Some(&no_version)),
            Err(MetaError::NoVersion)
        );
    }
}

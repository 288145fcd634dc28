//! The per-request `_meta` of 2026-07-28: protocol version, client capabilities, client info,
//! log level and progress token, read once at the edge.

use serde_json::{Map, Value};

pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The request metadata a 2026-07-28 client sends with every request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta {
    pub protocol_version: String,
    pub capabilities: Map<String, Value>,
    pub client_info: Option<Value>,
    pub log_level: Option<String>,
    pub progress_token: Option<Value>,
    /// Keys outside the MCP namespace (e.g. `traceparent`), forwarded upstream unchanged.
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
    #[error("params._meta[\"{LOG_LEVEL}\"] must be a string")]
    BadLogLevel,
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
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(MetaError::BadLogLevel),
        };
        let other = meta
            .iter()
            .filter(|(k, _)| !k.starts_with("io.modelcontextprotocol/") && *k != "progressToken")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(RequestMeta {
            protocol_version,
            capabilities,
            client_info: meta.get(CLIENT_INFO).cloned(),
            log_level,
            progress_token: meta.get("progressToken").cloned(),
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
            "traceparent": "00-abc"
        }});
        let meta = RequestMeta::from_params(Some(&params)).unwrap();
        assert_eq!(meta.protocol_version, "2026-07-28");
        assert!(meta.capabilities.contains_key("elicitation"));
        assert_eq!(meta.progress_token, Some(json!(7)));
        assert_eq!(meta.other.get("traceparent"), Some(&json!("00-abc")));
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

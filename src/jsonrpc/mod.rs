//! The JSON-RPC 2.0 message model: ids, messages, error objects and codes, and the framing limits
//! applied before any byte becomes a typed message.
//!
//! Every byte stream the gateway reads (client bodies, backend stdout lines) passes through
//! [`parse`], so depth and size limits are enforced in one place.
//!
//! Here: the error codes, [`Id`], [`ErrorObject`] and [`Message`]. `parse` turns bytes into
//! messages within the limits, and `raw` keeps a result as its sender wrote it, sets members
//! on it, and writes requests and responses as text.

mod parse;
mod raw;
#[cfg(test)]
mod tests;

pub use parse::{FrameError, check_depth, parse, parse_many};
pub use raw::{Payload, Raw, request_text, response, response_text};

use raw::id_value;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// 2026-07-28: HTTP headers do not match the body, or are missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: the request needs a client capability it did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// 2026-07-28: the protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// 2025-11-25 and earlier: resource not found (2026-07-28 uses -32602).
pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
/// 2025-11-25 only: URL elicitation required.
pub const LEGACY_URL_ELICITATION_REQUIRED: i64 = -32042;
/// The gateway's own: it cannot take the call now (pool exhausted, parking full, draining). Its
/// own codes lie outside the JSON-RPC reserved range (-32768..-32000), where 2026-07-28 asks
/// codes it does not define to go, so none can be taken for a backend's legacy -32000..-32019.
pub const BACKEND_BUSY: i64 = -31000;
/// The gateway's own: the backend failed (died, timed out, answered garbage).
pub const BACKEND_FAILED: i64 = -31001;

/// A JSON-RPC request id. Kept as the peer sent it, so it is echoed back unchanged.
///
/// Every integer JSON can carry in 64 bits is an id: those from `i64::MIN` to `i64::MAX` are a
/// `Number`, those above are `Unsigned` (variants are tried in order, so each value has exactly
/// one form and equal ids compare equal). Larger integers and fractions are refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    Number(i64),
    Unsigned(u64),
    String(String),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::Unsigned(n) => write!(f, "{n}"),
            Id::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// One JSON-RPC message, classified by shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Response {
        id: Id,
        outcome: Result<Raw, ErrorObject>,
    },
}

impl Message {
    /// The message as JSON, its params moved in (not copied).
    pub fn into_value(self) -> Value {
        let (id, method, params) = match self {
            Message::Response { id, outcome } => {
                let outcome = outcome.and_then(|raw| {
                    raw.to_value()
                        .map_err(|e| ErrorObject::new(INTERNAL_ERROR, e.to_string()))
                });
                return response(Some(&id), outcome);
            }
            Message::Request { id, method, params } => (Some(id), method, params),
            Message::Notification { method, params } => (None, method, params),
        };
        let mut m = Map::new();
        m.insert("jsonrpc".into(), Value::String("2.0".into()));
        if let Some(id) = id {
            m.insert("id".into(), id_value(Some(&id)));
        }
        m.insert("method".into(), Value::String(method));
        if let Some(p) = params {
            m.insert("params".into(), p);
        }
        Value::Object(m)
    }
}

//! The JSON-RPC 2.0 message model: ids, messages, error objects and codes, and the framing limits
//! applied before any byte becomes a typed message.
//!
//! Every byte stream the gateway reads (client bodies, backend stdout lines) passes through
//! [`parse`], so depth and size limits are enforced in one place.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
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
/// Implementation range: the backend cannot take the call now (pool exhausted).
pub const BACKEND_BUSY: i64 = -32000;
/// Implementation range: the backend failed (died, timed out, answered garbage).
pub const BACKEND_FAILED: i64 = -32001;

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
        outcome: Result<Value, ErrorObject>,
    },
}

/// Why bytes did not become a message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    #[error("parse error: {0}")]
    Parse(String),
    #[error("JSON nesting deeper than {0} levels")]
    TooDeep(usize),
    #[error("invalid request: {0}")]
    Shape(String),
    #[error("batches are not supported")]
    Batch,
}

impl FrameError {
    pub fn code(&self) -> i64 {
        match self {
            FrameError::Parse(_) | FrameError::TooDeep(_) => PARSE_ERROR,
            FrameError::Shape(_) | FrameError::Batch => INVALID_REQUEST,
        }
    }

    pub fn to_error(&self) -> ErrorObject {
        ErrorObject::new(self.code(), self.to_string())
    }
}

/// Rejects input nested deeper than `max` without parsing it: a byte scan, for text that is not
/// parsed here (a body forwarded as it is) or did not parse.
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), FrameError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(FrameError::TooDeep(max));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Parses one message from bytes, within the nesting limit.
pub fn parse(bytes: &[u8], max_depth: usize) -> Result<Message, FrameError> {
    from_value(parse_value(bytes, max_depth)?)
}

/// Parses what a backend sent in one HTTP body or SSE event: one message, or a batch (a JSON
/// array, which 2025-03-26 servers may send), within the nesting limit.
pub fn parse_many(bytes: &[u8], max_depth: usize) -> Result<Vec<Message>, FrameError> {
    match parse_value(bytes, max_depth)? {
        Value::Array(items) if items.is_empty() => Err(FrameError::Shape("an empty batch".into())),
        Value::Array(items) => items.into_iter().map(from_value).collect(),
        single => Ok(vec![from_value(single)?]),
    }
}

/// Parses JSON text nested at most `max_depth` deep. The parser itself refuses nesting past
/// its own ceiling (above any configurable limit, `config::MAX_JSON_DEPTH`), so hostile nesting
/// costs no deep recursion, and the limit is checked on the tree it built: cheaper than a scan
/// of every byte first. Text that does not parse is scanned, so that too deep is the error
/// reported for it whenever it applies.
fn parse_value(bytes: &[u8], max_depth: usize) -> Result<Value, FrameError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) if depth(&value) > max_depth => Err(FrameError::TooDeep(max_depth)),
        Ok(value) => Ok(value),
        Err(e) => {
            check_depth(bytes, max_depth)?;
            Err(FrameError::Parse(e.to_string()))
        }
    }
}

/// How deeply `value` nests arrays and objects: 0 for a scalar, 1 for `{}`. Recursion is
/// bounded by the parser's ceiling.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Classifies a parsed JSON value as a JSON-RPC message.
pub fn from_value(value: Value) -> Result<Message, FrameError> {
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => return Err(FrameError::Batch),
        _ => return Err(FrameError::Shape("a message must be a JSON object".into())),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(FrameError::Shape("`jsonrpc` must be \"2.0\"".into()));
    }
    let id = match obj.remove("id") {
        None => None,
        // MCP: a request's id is never null; a response carries null only when the id of the
        // message it answers was unknown, which leaves nothing to route it to.
        Some(Value::Null) if obj.contains_key("method") => {
            return Err(FrameError::Shape(
                "`id` must not be null (a notification has no `id`)".into(),
            ));
        }
        Some(Value::Null) => None,
        Some(v) => Some(serde_json::from_value::<Id>(v).map_err(|_| {
            FrameError::Shape("`id` must be a string or an integer that fits in 64 bits".into())
        })?),
    };
    let params = obj.remove("params");
    if let Some(p) = &params
        && !(p.is_object() || p.is_array())
    {
        return Err(FrameError::Shape(
            "`params` must be an object or array".into(),
        ));
    }
    match obj.remove("method") {
        Some(Value::String(method)) => Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        }),
        Some(_) => Err(FrameError::Shape("`method` must be a string".into())),
        None => {
            let id = id.ok_or_else(|| FrameError::Shape("a response needs an `id`".into()))?;
            let outcome = match (obj.remove("result"), obj.remove("error")) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(serde_json::from_value::<ErrorObject>(error)
                    .map_err(|_| FrameError::Shape("malformed `error` object".into()))?),
                _ => {
                    return Err(FrameError::Shape(
                        "a response needs exactly one of `result` and `error`".into(),
                    ));
                }
            };
            Ok(Message::Response { id, outcome })
        }
    }
}

impl Message {
    /// The message as JSON, its params moved in (not copied).
    pub fn into_value(self) -> Value {
        let (id, method, params) = match self {
            Message::Response { id, outcome } => return response(Some(&id), outcome),
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

/// A response object; `id` is `None` only for errors about a message whose id is unknown. The
/// result is moved in, not copied (as `json!` would).
pub fn response(id: Option<&Id>, outcome: Result<Value, ErrorObject>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::String("2.0".into()));
    m.insert("id".into(), id_value(id));
    match outcome {
        Ok(result) => m.insert("result".into(), result),
        Err(error) => m.insert("error".into(), json!(error)),
    };
    Value::Object(m)
}

fn id_value(id: Option<&Id>) -> Value {
    serde_json::to_value(id).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests_notifications_and_responses() {
        let req = parse(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{}}"#, 8).unwrap();
        assert!(matches!(
            req,
            Message::Request {
                id: Id::Number(1),
                ..
            }
        ));
        let note = parse(br#"{"jsonrpc":"2.0","method":"n"}"#, 8).unwrap();
        assert!(matches!(note, Message::Notification { .. }));
        let resp = parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#, 8).unwrap();
        assert!(matches!(resp, Message::Response { outcome: Ok(_), .. }));
        let err = parse(
            br#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"x"}}"#,
            8,
        )
        .unwrap();
        assert!(matches!(
            err,
            Message::Response {
                outcome: Err(_),
                ..
            }
        ));
    }

    #[test]
    fn rejects_wrong_shapes_with_invalid_request() {
        for bad in [
            &br#"{"id":1,"method":"m"}"#[..],
            br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":3}"#,
            br#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
            br#"{"jsonrpc":"2.0","id":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}"#,
            br#"[1]"#,
            br#""str""#,
        ] {
            let err = parse(bad, 8).unwrap_err();
            assert_eq!(
                err.code(),
                INVALID_REQUEST,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn integer_ids_across_64_bits_echo_back_unchanged() {
        for text in [
            "-9223372036854775808",
            "0",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{text},"method":"m"}}"#);
            let Message::Request { id, .. } = parse(body.as_bytes(), 8).unwrap() else {
                panic!("{text}: not a request");
            };
            assert_eq!(id.to_string(), text);
            let reply = serde_json::to_string(&response(Some(&id), Ok(json!({})))).unwrap();
            assert!(reply.contains(&format!(r#""id":{text}"#)), "{reply}");
        }
        // Each value has one form, so an id read back from a backend's answer finds its call.
        let high: Id = serde_json::from_str("9223372036854775808").unwrap();
        assert_eq!(high, Id::Unsigned(1 << 63));
        assert_eq!(serde_json::from_str::<Id>("7").unwrap(), Id::Number(7));
        for bad in ["1.5", "1e3", "18446744073709551616", "-9223372036854775809"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{bad},"method":"m"}}"#);
            let err = parse(body.as_bytes(), 8).unwrap_err();
            assert_eq!(err.code(), INVALID_REQUEST, "{bad}");
            assert!(err.to_string().contains("64 bits"), "{bad}: {err}");
        }
    }

    #[test]
    fn backend_bodies_may_be_batches() {
        let many = parse_many(
            br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"n"}]"#,
            8,
        )
        .unwrap();
        assert_eq!(many.len(), 2);
        assert_eq!(
            parse_many(br#"{"jsonrpc":"2.0","method":"n"}"#, 8)
                .unwrap()
                .len(),
            1
        );
        assert!(parse_many(b"[]", 8).is_err());
        assert!(parse_many(b"<html>", 8).is_err());
    }

    #[test]
    fn malformed_json_is_a_parse_error() {
        assert_eq!(parse(b"{nope", 8).unwrap_err().code(), PARSE_ERROR);
    }

    #[test]
    fn parsed_messages_are_held_to_the_nesting_limit() {
        // A request whose params nest `n` levels deep: the message itself is one more.
        let request = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}{}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(parse(request(7).as_bytes(), 8).is_ok());
        assert_eq!(
            parse(request(8).as_bytes(), 8).unwrap_err(),
            FrameError::TooDeep(8)
        );
        assert_eq!(
            parse_many(request(8).as_bytes(), 8).unwrap_err(),
            FrameError::TooDeep(8)
        );
        // At the highest limit a configuration may set, and far past the parser's own ceiling.
        let max = crate::config::MAX_JSON_DEPTH;
        assert!(parse(request(max - 1).as_bytes(), max).is_ok());
        for n in [max, 100_000] {
            assert_eq!(
                parse(request(n).as_bytes(), max).unwrap_err(),
                FrameError::TooDeep(max)
            );
        }
        // Too deep and malformed: too deep is what is said; malformed and shallow: a parse error.
        let deep_and_broken = format!(r#"{{"a":{}"#, "[".repeat(20));
        assert_eq!(
            parse(deep_and_broken.as_bytes(), 8).unwrap_err(),
            FrameError::TooDeep(8)
        );
        assert!(matches!(
            parse(br#"{"a":[[["#, 8).unwrap_err(),
            FrameError::Parse(_)
        ));
        // Brackets inside strings are not nesting.
        let quoted = format!(
            r#"{{"jsonrpc":"2.0","method":"m","params":["{}"]}}"#,
            "[".repeat(50)
        );
        assert!(parse(quoted.as_bytes(), 2).is_ok());
    }

    #[test]
    fn nesting_beyond_the_limit_is_refused_before_parsing() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(
            check_depth(deep.as_bytes(), 64),
            Err(FrameError::TooDeep(64))
        );
        assert!(check_depth(deep.as_bytes(), 100).is_ok());
        // brackets inside strings do not count
        assert!(check_depth(br#"{"a":"[[[[[[[[\"[[[["}"#, 2).is_ok());
    }
}

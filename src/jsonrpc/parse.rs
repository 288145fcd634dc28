//! Bytes to messages: [`parse`] and [`parse_many`] read a message's members in one pass
//! ([`Fields`]), keep a result as text, and hold everything to the nesting limit;
//! [`check_depth`] is the byte scan for text that is not parsed here.

use super::{ErrorObject, INVALID_REQUEST, Id, Message, PARSE_ERROR, Raw};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

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
    if nests_deeper(bytes, max) {
        return Err(FrameError::TooDeep(max));
    }
    Ok(())
}

/// Whether `bytes`, as JSON text, nests arrays and objects more than `max` deep.
fn nests_deeper(bytes: &[u8], max: usize) -> bool {
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
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Parses one message from bytes, within the nesting limit. A JSON array is refused as a batch.
pub fn parse(bytes: &[u8], max_depth: usize) -> Result<Message, FrameError> {
    parse_one(bytes, max_depth)
}

/// Parses what a backend sent in one HTTP body or SSE event: one message, or a batch (a JSON
/// array, which 2025-03-26 servers may send), within the nesting limit.
pub fn parse_many(bytes: &[u8], max_depth: usize) -> Result<Vec<Message>, FrameError> {
    if first_byte(bytes) != Some(b'[') {
        return Ok(vec![parse_one(bytes, max_depth)?]);
    }
    // Each message is read on its own, one level down; a batch is rare.
    let items: Vec<&RawValue> = match serde_json::from_slice(bytes) {
        Ok(items) => items,
        Err(e) => {
            check_depth(bytes, max_depth)?;
            return Err(FrameError::Parse(e.to_string()));
        }
    };
    if items.is_empty() {
        return Err(FrameError::Shape("an empty batch".into()));
    }
    let inner = max_depth.saturating_sub(1);
    items
        .iter()
        .map(|item| match parse_one(item.get().as_bytes(), inner) {
            Err(FrameError::TooDeep(_)) => Err(FrameError::TooDeep(max_depth)),
            other => other,
        })
        .collect()
}

fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// One message: its members read in one pass, a result kept as text.
fn parse_one(bytes: &[u8], max_depth: usize) -> Result<Message, FrameError> {
    if first_byte(bytes) != Some(b'{') {
        return match parse_value(bytes, max_depth)? {
            Value::Array(_) => Err(FrameError::Batch),
            _ => Err(FrameError::Shape("a message must be a JSON object".into())),
        };
    }
    // Checked as UTF-8 once, as a whole: read from bytes, each string is checked on its own.
    let read = match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str::<Fields>(text).map_err(|e| e.to_string()),
        Err(e) => Err(format!("not UTF-8 text: {e}")),
    };
    let fields = match read {
        Ok(fields) => fields,
        Err(e) => {
            check_depth(bytes, max_depth)?;
            return Err(FrameError::Parse(e));
        }
    };
    if fields.nests_deeper(max_depth) {
        return Err(FrameError::TooDeep(max_depth));
    }
    fields.into_message()
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

/// The members of a message object that say what it is, as read; a later duplicate wins, as in
/// a `serde_json` map. The result stays text; members of no meaning here are skipped, their
/// nesting noted.
#[derive(Debug, Default)]
struct Fields {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Box<RawValue>>,
    error: Option<Value>,
    /// Whether a skipped member nested deeper than the limit allows (see `nests_deeper`).
    others: Vec<Box<RawValue>>,
}

enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Key, E> {
                Ok(match name {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" => Key::Result,
                    "error" => Key::Error,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut f = Fields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Jsonrpc => f.jsonrpc = Some(map.next_value()?),
                        Key::Id => f.id = Some(map.next_value()?),
                        Key::Method => f.method = Some(map.next_value()?),
                        Key::Params => f.params = Some(map.next_value()?),
                        Key::Result => f.result = Some(map.next_value()?),
                        Key::Error => f.error = Some(map.next_value()?),
                        Key::Other => {
                            // Kept only if it nests: its depth is checked with the rest.
                            let raw: Box<RawValue> = map.next_value()?;
                            if raw.get().starts_with(['{', '[']) {
                                f.others.push(raw);
                            }
                        }
                    }
                }
                Ok(f)
            }
        }
        d.deserialize_map(FieldsVisitor)
    }
}

impl Fields {
    /// Whether the message (one level for itself) nests deeper than `max`.
    fn nests_deeper(&self, max: usize) -> bool {
        let Some(inner) = max.checked_sub(1) else {
            return true;
        };
        let trees = [
            &self.jsonrpc,
            &self.id,
            &self.method,
            &self.params,
            &self.error,
        ];
        trees.into_iter().flatten().any(|v| depth(v) > inner)
            || self
                .result
                .iter()
                .chain(&self.others)
                .any(|raw| nests_deeper(raw.get().as_bytes(), inner))
    }

    /// Classifies the message by its members.
    fn into_message(self) -> Result<Message, FrameError> {
        if self.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(FrameError::Shape("`jsonrpc` must be \"2.0\"".into()));
        }
        let id = match self.id {
            None => None,
            // MCP: a request's id is never null; a response carries null only when the id of
            // the message it answers was unknown, which leaves nothing to route it to.
            Some(Value::Null) if self.method.is_some() => {
                return Err(FrameError::Shape(
                    "`id` must not be null (a notification has no `id`)".into(),
                ));
            }
            Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value::<Id>(v).map_err(|_| {
                FrameError::Shape("`id` must be a string or an integer that fits in 64 bits".into())
            })?),
        };
        let params = self.params;
        if let Some(p) = &params
            && !(p.is_object() || p.is_array())
        {
            return Err(FrameError::Shape(
                "`params` must be an object or array".into(),
            ));
        }
        match self.method {
            Some(Value::String(method)) => Ok(match id {
                Some(id) => Message::Request { id, method, params },
                None => Message::Notification { method, params },
            }),
            Some(_) => Err(FrameError::Shape("`method` must be a string".into())),
            None => {
                let id = id.ok_or_else(|| FrameError::Shape("a response needs an `id`".into()))?;
                let outcome = match (self.result, self.error) {
                    (Some(result), None) => Ok(Raw(result)),
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
}

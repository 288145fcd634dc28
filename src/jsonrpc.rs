//! The JSON-RPC 2.0 message model: ids, messages, error objects and codes, and the framing limits
//! applied before any byte becomes a typed message.
//!
//! Every byte stream the gateway reads (client bodies, backend stdout lines) passes through
//! [`parse`], so depth and size limits are enforced in one place.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
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

/// A result as its sender wrote it: JSON text, checked when it was read (well formed, within the
/// nesting limit) and kept as it is. A backend's result goes to the client without being built
/// into a tree and written out again; what needs to look inside turns it into one.
#[derive(Debug, Clone)]
pub struct Raw(Box<RawValue>);

impl PartialEq for Raw {
    fn eq(&self, other: &Raw) -> bool {
        self.get() == other.get()
    }
}

impl Raw {
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The result as a tree.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The result, an object, with the members of `set` (names, and values as JSON text) in
    /// place of any of the same names: its own members as written, in their order, then those
    /// of `set`. `None` if it is not an object.
    pub fn with_members(&self, set: &[(&str, &str)]) -> Option<String> {
        rewrite(self.get(), set, None)
    }

    /// [`Raw::with_members`], and `entry` (a name, and a value as JSON text) in the result's
    /// `_meta`: added to the `_meta` it has (the last, if it has several, as a JSON parser
    /// would read it), or in a new one in place of none or `null`. A `_meta` that already holds
    /// the name, or that is some other value, is left as it is.
    pub fn with_members_and_meta(
        &self,
        set: &[(&str, &str)],
        entry: (&str, &str),
    ) -> Option<String> {
        let text = self.get();
        // As in `rewrite`: without the name in the text, there is no `_meta` to look into.
        if !text.contains("\\u") && !text.contains("_meta") {
            return rewrite(text, set, Some(entry));
        }
        let Members(members) = serde_json::from_str(text.trim()).ok()?;
        let own = members.iter().rev().find(|(n, _)| n == "_meta");
        let meta = match own.map(|(_, own)| own.get().trim()) {
            // No `_meta`, or `null`: a new one (`rewrite` takes a `null` out with the name).
            None | Some("null") => Some(format!("{{{}}}", member_text(entry))),
            Some(own) => match serde_json::from_str::<Members>(own) {
                Ok(Members(inner)) if !inner.iter().any(|(n, _)| *n == entry.0) => {
                    let sep = if inner.is_empty() { "" } else { "," };
                    let open = own[..own.len() - 1].trim_end();
                    Some(format!("{open}{sep}{}}}", member_text(entry)))
                }
                _ => None,
            },
        };
        match meta {
            Some(meta) => rewrite(text, &[set, &[("_meta", meta.as_str())]].concat(), None),
            None => rewrite(text, set, None),
        }
    }
}

/// An object's text with the members of `set` in place of any of the same names (see
/// [`Raw::with_members`]), then, with `new_meta`, a `_meta` holding that one entry (the text
/// must have none).
fn rewrite(text: &str, set: &[(&str, &str)], new_meta: Option<(&str, &str)>) -> Option<String> {
    let text = text.trim();
    if !text.starts_with('{') {
        return None;
    }
    let extra = new_meta.map_or(0, |(n, v)| n.len() + v.len() + 16);
    let mut out = String::with_capacity(text.len() + 64 + extra);
    out.push('{');
    // When none of the names occurs in the text at all (nor an escape that could spell one),
    // no member needs taking out: the members are copied as one piece.
    if !text.contains("\\u") && set.iter().all(|(name, _)| !text.contains(name)) {
        let members = text[1..text.len() - 1].trim();
        out.push_str(members);
        if !members.is_empty() {
            out.push(',');
        }
    } else {
        let Members(members) = serde_json::from_str(text).ok()?;
        for (name, value) in members
            .iter()
            .filter(|(name, _)| !set.iter().any(|(n, _)| n == name))
        {
            write_member(&mut out, name, value.get());
        }
    }
    for (name, value) in set {
        write_member(&mut out, name, value);
    }
    if let Some((name, value)) = new_meta {
        out.push_str("\"_meta\":{");
        write_member(&mut out, name, value);
        out.pop();
        out.push_str("},");
    }
    if out.ends_with(',') {
        out.pop();
    }
    out.push('}');
    Some(out)
}

/// One member, `"name":value`.
fn member_text((name, value): (&str, &str)) -> String {
    let mut out = String::with_capacity(name.len() + value.len() + 4);
    write_member(&mut out, name, value);
    out.pop();
    out
}

fn write_member(out: &mut String, name: &str, value: &str) {
    if name.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(name);
        out.push('"');
    } else {
        out.push_str(&Value::from(name).to_string());
    }
    out.push(':');
    out.push_str(value);
    out.push(',');
}

/// An object's members, their values as text, in order.
struct Members<'a>(Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Members<'de>, D::Error> {
        struct Name<'a>(std::borrow::Cow<'a, str>);
        impl<'de> Deserialize<'de> for Name<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name<'de>, D::Error> {
                struct NameVisitor;
                impl<'de> Visitor<'de> for NameVisitor {
                    type Value = Name<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a member name")
                    }
                    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                        Ok(Name(std::borrow::Cow::Borrowed(v)))
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                        Ok(Name(std::borrow::Cow::Owned(v.to_owned())))
                    }
                }
                d.deserialize_str(NameVisitor)
            }
        }
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(Name(name)) = map.next_key()? {
                    members.push((name, map.next_value()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// A result to send: a tree made here, or the text of a backend's result made ready for the
/// client ([`Raw::with_members`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Value(Value),
    Text(String),
}

impl From<Value> for Payload {
    fn from(value: Value) -> Payload {
        Payload::Value(value)
    }
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Value(v) => v.serialize(s),
            Payload::Text(t) => serde_json::from_str::<&RawValue>(t)
                .map_err(serde::ser::Error::custom)?
                .serialize(s),
        }
    }
}

impl Payload {
    /// The payload as a tree.
    pub fn into_value(self) -> Result<Value, serde_json::Error> {
        match self {
            Payload::Value(v) => Ok(v),
            Payload::Text(t) => serde_json::from_str(&t),
        }
    }
}

/// A request's JSON text, written from its parts (no tree of the whole message is built).
pub fn request_text(id: &Id, method: &str, params: Option<&Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    // An id, a string and a tree always serialize.
    let _ = serde_json::to_writer(&mut out, id);
    out.extend_from_slice(b",\"method\":");
    let _ = serde_json::to_writer(&mut out, method);
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        let _ = serde_json::to_writer(&mut out, p);
    }
    out.push(b'}');
    out
}

/// A response's JSON text: `result` written as it is when it is text already.
pub fn response_text(id: Option<&Id>, outcome: &Result<Payload, ErrorObject>) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\"");
    // An id and an error object always serialize. Without an id (see `response`) there is none.
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        let _ = serde_json::to_writer(&mut out, id);
    }
    match outcome {
        Ok(Payload::Value(v)) => {
            out.extend_from_slice(b",\"result\":");
            let _ = serde_json::to_writer(&mut out, v);
        }
        Ok(Payload::Text(t)) => {
            out.extend_from_slice(b",\"result\":");
            out.extend_from_slice(t.as_bytes());
        }
        Err(e) => {
            out.extend_from_slice(b",\"error\":");
            let _ = serde_json::to_writer(&mut out, e);
        }
    }
    out.push(b'}');
    out
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

/// A response object; `id` is `None` only for errors about a message whose id is unknown, and
/// such an error has no `id` member: 2026-07-28's error response leaves it out then (its schema
/// has no null id). The result is moved in, not copied (as `json!` would).
pub fn response(id: Option<&Id>, outcome: Result<Value, ErrorObject>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::String("2.0".into()));
    if id.is_some() {
        m.insert("id".into(), id_value(id));
    }
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
        let not_utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\xff\"}";
        let err = parse(not_utf8, 8).unwrap_err();
        assert!(
            matches!(&err, FrameError::Parse(m) if m.contains("UTF-8")),
            "{err:?}"
        );
        let deep = b"{\"a\":[[[[\"\xff\"]]]]}";
        assert_eq!(parse(deep, 3).unwrap_err(), FrameError::TooDeep(3));
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

    fn result_of(text: &str) -> Raw {
        let msg = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{text}}}"#);
        match parse(msg.as_bytes(), 16).unwrap() {
            Message::Response {
                outcome: Ok(raw), ..
            } => raw,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_result_is_kept_as_it_was_written() {
        // Spacing, order, escapes and numbers a tree would change (a 23-digit integer would
        // become a float) all stay.
        let text = "{ \"z\": 123456789012345678901234,\n  \"a\": [1.50, \"\\u00e9\"] }";
        assert_eq!(result_of(text).get(), text);
        // A later duplicate of a member wins, as in a map.
        let twice = r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"result":{"b":2}}"#;
        match parse(twice.as_bytes(), 8).unwrap() {
            Message::Response {
                outcome: Ok(raw), ..
            } => assert_eq!(raw.get(), r#"{"b":2}"#),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn results_and_unknown_members_are_held_to_the_nesting_limit() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let response = |member: &str, n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"{member}":{},"result":{{}}}}"#,
                nested(n)
            )
        };
        // The message is one level, its result or other member the rest.
        for member in ["result", "extra"] {
            let within = if member == "result" {
                format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, nested(7))
            } else {
                response(member, 7)
            };
            assert!(parse(within.as_bytes(), 8).is_ok(), "{member}");
            let deep = if member == "result" {
                format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, nested(8))
            } else {
                response(member, 8)
            };
            assert_eq!(
                parse(deep.as_bytes(), 8).unwrap_err(),
                FrameError::TooDeep(8),
                "{member}"
            );
        }
        // In a batch, one more level.
        let batch = |n: usize| format!(r#"[{{"jsonrpc":"2.0","id":1,"result":{}}}]"#, nested(n));
        assert_eq!(parse_many(batch(6).as_bytes(), 8).unwrap().len(), 1);
        assert_eq!(
            parse_many(batch(7).as_bytes(), 8).unwrap_err(),
            FrameError::TooDeep(8)
        );
        // A batch element that is not a message is refused as before.
        assert!(matches!(
            parse_many(br#"[{"jsonrpc":"2.0","method":"n"}, 3]"#, 8).unwrap_err(),
            FrameError::Shape(_)
        ));
    }

    #[test]
    fn members_are_set_on_a_result_as_written() {
        let set = [("resultType", "\"complete\""), ("ttlMs", "0")];
        let cases = [
            (r#"{"a":1}"#, r#"{"a":1,"resultType":"complete","ttlMs":0}"#),
            ("{ }", r#"{"resultType":"complete","ttlMs":0}"#),
            (
                "{ \"a\" : [ 1 ],\n \"b\": {} }",
                "{\"a\" : [ 1 ],\n \"b\": {},\"resultType\":\"complete\",\"ttlMs\":0}",
            ),
            // A member of the same name is replaced, however its name is written.
            (
                r#"{"resultType":"x","b":[1],"ttlMs":5}"#,
                r#"{"b":[1],"resultType":"complete","ttlMs":0}"#,
            ),
            (
                r#"{"result\u0054ype":"x","q\"uote":2}"#,
                r#"{"q\"uote":2,"resultType":"complete","ttlMs":0}"#,
            ),
            // A name that only occurs inside a value is left where it is.
            (
                r#"{"note":"resultType"}"#,
                r#"{"note":"resultType","resultType":"complete","ttlMs":0}"#,
            ),
        ];
        for (text, want) in cases {
            let got = result_of(text).with_members(&set).unwrap();
            assert_eq!(got, want, "{text}");
            let _: Value = serde_json::from_str(&got).unwrap();
        }
        for not_an_object in ["[1]", "\"s\"", "3", "null"] {
            assert_eq!(result_of(not_an_object).with_members(&set), None);
        }
    }

    #[test]
    fn an_entry_goes_into_a_result_s_meta_or_a_new_one() {
        let set = [("resultType", "\"complete\"")];
        let entry = ("io.x/info", r#"{"name":"s"}"#);
        let cases = [
            (
                r#"{"a":1}"#,
                r#"{"a":1,"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
            ),
            (
                "{}",
                r#"{"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
            ),
            // Added to the result's own `_meta`, its members kept as written.
            (
                r#"{"_meta":{ "k" : [1] },"a":1}"#,
                r#"{"a":1,"resultType":"complete","_meta":{ "k" : [1],"io.x/info":{"name":"s"}}}"#,
            ),
            (
                r#"{"_meta":{ },"a":1}"#,
                r#"{"a":1,"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
            ),
            // However the name is written.
            (
                r#"{"\u005fmeta":{"k":1}}"#,
                r#"{"resultType":"complete","_meta":{"k":1,"io.x/info":{"name":"s"}}}"#,
            ),
            // The name only in a value: a new `_meta`.
            (
                r#"{"note":"_meta"}"#,
                r#"{"note":"_meta","resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
            ),
            // A `_meta` that has the entry already, or is not an object, is left as it is.
            (
                r#"{"_meta":{"io.x/info":{"name":"own"}}}"#,
                r#"{"_meta":{"io.x/info":{"name":"own"}},"resultType":"complete"}"#,
            ),
            (r#"{"_meta":3}"#, r#"{"_meta":3,"resultType":"complete"}"#),
            // `null` is no `_meta`: a new one in its place.
            (
                r#"{"_meta":null,"a":1}"#,
                r#"{"a":1,"resultType":"complete","_meta":{"io.x/info":{"name":"s"}}}"#,
            ),
            // Of several, the last is the one a parser reads: the entry joins it.
            (
                r#"{"_meta":{"a":1},"_meta":{"b":2}}"#,
                r#"{"resultType":"complete","_meta":{"b":2,"io.x/info":{"name":"s"}}}"#,
            ),
        ];
        for (text, want) in cases {
            let got = result_of(text).with_members_and_meta(&set, entry).unwrap();
            assert_eq!(got, want, "{text}");
            let _: Value = serde_json::from_str(&got).unwrap();
        }
        for not_an_object in ["[1]", "\"_meta\"", "3"] {
            assert_eq!(
                result_of(not_an_object).with_members_and_meta(&set, entry),
                None
            );
        }
    }

    #[test]
    fn a_response_is_written_with_its_result_as_it_is() {
        let id = Id::Number(7);
        let text = Payload::Text("{\"a\":\n[1]}".into());
        let tree = Payload::Value(json!({"b": 2}));
        let error = ErrorObject::new(INVALID_PARAMS, "no");
        let written = |o: Result<Payload, ErrorObject>| {
            serde_json::from_slice::<Value>(&response_text(Some(&id), &o)).unwrap()
        };
        assert_eq!(
            written(Ok(text)),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"a": [1]}})
        );
        assert_eq!(
            written(Ok(tree)),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"b": 2}})
        );
        assert_eq!(
            written(Err(error)),
            json!({"jsonrpc": "2.0", "id": 7, "error": {"code": INVALID_PARAMS, "message": "no"}})
        );
        let unknown = response_text(None, &Err(ErrorObject::new(PARSE_ERROR, "x")));
        assert!(unknown.starts_with(br#"{"jsonrpc":"2.0","error""#));
        let unknown = response(None, Err(ErrorObject::new(PARSE_ERROR, "x")));
        assert!(unknown.get("id").is_none(), "{unknown}");
    }

    #[test]
    fn a_request_written_from_its_parts_reads_back_as_the_message() {
        let params = json!({"name": "t\"\n", "arguments": {"b": [1, null]}});
        for (id, params) in [
            (Id::Number(3), Some(&params)),
            (Id::String("a\"b".into()), None),
        ] {
            let text = request_text(&id, "tools/call", params);
            let expected = Message::Request {
                id,
                method: "tools/call".into(),
                params: params.cloned(),
            };
            assert_eq!(parse(&text, 64), Ok(expected));
        }
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

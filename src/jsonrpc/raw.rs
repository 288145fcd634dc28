//! A result kept as its sender wrote it ([`Raw`]), the members the gateway sets on it written
//! into that text without building a tree, and the writers of outgoing messages: a [`Payload`]
//! to send, and request and response text made from their parts.

use super::{ErrorObject, Id};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::fmt;

/// A result as its sender wrote it: JSON text, checked when it was read (well formed, within the
/// nesting limit) and kept as it is. A backend's result goes to the client without being built
/// into a tree and written out again; what needs to look inside turns it into one.
#[derive(Debug, Clone)]
pub struct Raw(pub(super) Box<RawValue>);

impl PartialEq for Raw {
    fn eq(&self, other: &Raw) -> bool {
        self.get() == other.get()
    }
}

impl Raw {
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// A result the gateway makes itself.
    pub fn from_value(value: &Value) -> Raw {
        Raw(serde_json::value::to_raw_value(value).expect("a tree always serializes"))
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

/// What a response with a result writes around its id and its result.
const FRAME: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":,\"result\":}";

/// A response's JSON text: `result` written as it is when it is text already. The id and a
/// text result are measured first and given room up front: the buffer is what a client's
/// connection holds until it is written, and one grown by doubling would keep up to twice that.
pub fn response_text(id: Option<&Id>, outcome: &Result<Payload, ErrorObject>) -> Vec<u8> {
    // An id and an error object always serialize. Without an id (see `response`) there is none.
    let id = id.map(|id| serde_json::to_vec(id).unwrap_or_default());
    let result = match outcome {
        Ok(Payload::Text(t)) => t.len(),
        _ => 128,
    };
    let mut out = Vec::with_capacity(FRAME.len() + id.as_ref().map_or(0, Vec::len) + result);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\"");
    if let Some(id) = id {
        out.extend_from_slice(b",\"id\":");
        out.extend_from_slice(&id);
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

pub(super) fn id_value(id: Option<&Id>) -> Value {
    serde_json::to_value(id).unwrap_or(Value::Null)
}

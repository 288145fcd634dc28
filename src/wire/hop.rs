//! The internal hop's format: a request forwarded from one replica to the replica that holds
//! what it needs. Two kinds, each at a path of its own: a retry of a parked call ([`PATH`],
//! body [`Body`]), answered with an SSE stream of [`Reply`] events; and a request of a legacy
//! client's session ([`SESSION_PATH`], body [`Session`]), answered with the legacy face's own
//! answer, marked as the session's by its `Mcp-Session-Id`. Either body goes under headers that
//! a MAC, derived from the state key ring, binds to the method, path, body digest, time, target
//! and sender. The client is `bridge::forward`; the listener `server::internal`.

use super::Reply;
use crate::jsonrpc::{self, ErrorObject};
use crate::seal::{self, Digest};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The internal listener's path for retries.
pub const PATH: &str = "/internal/v1/resume";
/// The internal listener's path for requests of legacy sessions.
pub const SESSION_PATH: &str = "/internal/v1/session";
/// The hop marker: present (value `1`) on every forwarded request, and covered by the MAC.
pub const MARKER: &str = "x-mrtr-hop";
pub const TO: &str = "x-mrtr-hop-to";
pub const FROM: &str = "x-mrtr-hop-from";
pub const TIME: &str = "x-mrtr-hop-time";
pub const MAC: &str = "x-mrtr-hop-mac";

/// Why a forwarded request is refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("header `{0}` is missing")]
    Missing(&'static str),
    #[error("header `{0}` is malformed")]
    Malformed(&'static str),
    #[error("the MAC does not verify")]
    BadMac,
    #[error("the timestamp is outside the allowed clock skew")]
    Stale,
    #[error("the request is addressed to replica `{0}`")]
    WrongReplica(String),
}

/// The body of a forwarded retry.
#[derive(Debug, Serialize, Deserialize)]
pub struct Body {
    /// The backend's path: replicas share one config, so paths name the same backend.
    pub backend: String,
    pub principal: Digest,
    pub method: String,
    pub params: Map<String, Value>,
}

/// The body of a forwarded request of a legacy client's session: the client's request as it
/// came, and the principal the forwarding replica computed from its credential (the owner
/// takes the principal from here only, under the MAC).
#[derive(Debug, Serialize, Deserialize)]
pub struct Session {
    /// The backend's path, as in [`Body`].
    pub backend: String,
    pub principal: Digest,
    /// The client's HTTP method: `POST`, `GET` or `DELETE`.
    pub method: String,
    /// The client's `Mcp-Session-Id`, sealed, as it came.
    pub session: String,
    /// A POST's JSON-RPC message (or a 2025-03-26 batch of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Value>,
    /// A GET's `Last-Event-ID`: the stream it resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
    /// The message is an HTTP+SSE client's, and `session` its stream's id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// An HTTP+SSE client's `Authorization`, which its `initialize` opens a session with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<String>,
}

/// The bytes the hop MAC covers.
fn signed_bytes(
    method: &str,
    path: &str,
    body: &[u8],
    time_ms: u64,
    to: &str,
    from: &str,
) -> Vec<u8> {
    format!(
        "mrtr-hop-v1\n{method}\n{path}\n{:?}\n{time_ms}\n{to}\n{from}\n{MARKER}=1",
        seal::digest(body)
    )
    .into_bytes()
}

/// The headers of a forwarded retry from `from` to `to` carrying `body`.
pub fn sign(
    keys: &seal::KeyRing,
    to: &str,
    from: &str,
    body: &[u8],
    time_ms: u64,
) -> Vec<(&'static str, String)> {
    sign_at(PATH, keys, to, from, body, time_ms)
}

/// The headers of a request from `from` to `to` carrying `body`, POSTed to `path`.
pub fn sign_at(
    path: &str,
    keys: &seal::KeyRing,
    to: &str,
    from: &str,
    body: &[u8],
    time_ms: u64,
) -> Vec<(&'static str, String)> {
    let tag = keys.mac(&signed_bytes("POST", path, body, time_ms, to, from));
    vec![
        (MARKER, "1".to_owned()),
        (TO, to.to_owned()),
        (FROM, from.to_owned()),
        (TIME, time_ms.to_string()),
        (MAC, URL_SAFE_NO_PAD.encode(tag)),
    ]
}

/// Checks a forwarded request (its head and body) addressed to replica `me`; returns the
/// sending replica.
pub fn verify(
    keys: &seal::KeyRing,
    head: &http::request::Parts,
    body: &[u8],
    me: &str,
    skew: Duration,
    now_ms: u64,
) -> Result<String, Error> {
    let headers = &head.headers;
    let get = |name: &'static str| -> Result<&str, Error> {
        headers
            .get(name)
            .ok_or(Error::Missing(name))?
            .to_str()
            .map_err(|_| Error::Malformed(name))
    };
    if get(MARKER)? != "1" {
        return Err(Error::Malformed(MARKER));
    }
    let to = get(TO)?;
    let from = get(FROM)?;
    let time: u64 = get(TIME)?.parse().map_err(|_| Error::Malformed(TIME))?;
    let tag = URL_SAFE_NO_PAD
        .decode(get(MAC)?)
        .map_err(|_| Error::Malformed(MAC))?;
    let data = signed_bytes(head.method.as_str(), head.uri.path(), body, time, to, from);
    if !keys.verify_mac(&data, &tag) {
        return Err(Error::BadMac);
    }
    if now_ms.abs_diff(time) > skew.as_millis() as u64 {
        return Err(Error::Stale);
    }
    if to != me {
        return Err(Error::WrongReplica(to.to_owned()));
    }
    Ok(from.to_owned())
}

/// Room on top of `max_line_bytes` for what the owner adds to a result it sends over a hop.
pub const EVENT_SLACK: usize = 64 * 1024;

/// One reply as an event of the hop's stream. A backend's result goes as the text it is, so
/// it keeps its members' order and its numbers' digits across the hop, as without one; the
/// shape of the event is the same for a result made here (a replica of an earlier release
/// reads either).
pub fn encode_reply(reply: &Reply) -> String {
    match reply {
        Reply::Notification(note) => json!({ "notification": note }).to_string(),
        Reply::Done(Ok(jsonrpc::Payload::Text(text))) => format!("{{\"result\":{text}}}"),
        Reply::Done(Ok(jsonrpc::Payload::Value(result))) => json!({ "result": result }).to_string(),
        Reply::Done(Err(e)) => json!({ "error": e }).to_string(),
    }
}

/// A reply off the hop's stream. A result stays text, but for an `InputRequiredResult` (made
/// by the owner, small), which goes on as a tree: the client's connection counts it by its
/// `resultType`.
pub fn decode_reply(data: &str) -> Option<Reply> {
    #[derive(Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Hopped {
        Notification(Value),
        Result(Box<serde_json::value::RawValue>),
        Error(ErrorObject),
    }
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "resultType", borrow)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    Some(match serde_json::from_str(data).ok()? {
        Hopped::Notification(note) => Reply::Notification(note),
        Hopped::Result(text) => {
            let input_required = serde_json::from_str::<Kind>(text.get())
                .is_ok_and(|k| k.result_type.as_deref() == Some("input_required"));
            Reply::Done(Ok(if input_required {
                jsonrpc::Payload::Value(serde_json::from_str(text.get()).ok()?)
            } else {
                jsonrpc::Payload::Text(text.get().to_owned())
            }))
        }
        Hopped::Error(e) => Reply::Done(Err(e)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&'static str, String)]) -> http::request::Parts {
        let mut req = http::Request::post(PATH);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn hop_macs_bind_body_target_and_time() {
        let ring = seal::KeyRing::new(vec![seal::Key::generate("k").unwrap().0]).unwrap();
        let skew = Duration::from_secs(30);
        let now = 1_000_000;
        let ok = sign(&ring, "a", "b", b"body", now);
        assert_eq!(
            verify(&ring, &head(&ok), b"body", "a", skew, now).unwrap(),
            "b"
        );
        assert!(matches!(
            verify(&ring, &head(&ok), b"bodY", "a", skew, now),
            Err(Error::BadMac)
        ));
        assert!(matches!(
            verify(&ring, &head(&ok), b"body", "c", skew, now),
            Err(Error::WrongReplica(_))
        ));
        assert!(matches!(
            verify(&ring, &head(&ok), b"body", "a", skew, now + 31_000),
            Err(Error::Stale)
        ));
        // Changing any signed header breaks the MAC.
        for (i, name) in [TO, FROM, TIME].iter().enumerate() {
            let mut h = ok.clone();
            h[i + 1].1.push('1');
            let err = verify(&ring, &head(&h), b"body", "a", skew, now).unwrap_err();
            assert!(matches!(err, Error::BadMac | Error::Malformed(_)), "{name}");
        }
        let mut no_marker = ok.clone();
        no_marker[0].1 = "2".into();
        assert!(matches!(
            verify(&ring, &head(&no_marker), b"body", "a", skew, now),
            Err(Error::Malformed(MARKER))
        ));
        let other = seal::KeyRing::new(vec![seal::Key::generate("k").unwrap().0]).unwrap();
        assert!(matches!(
            verify(&other, &head(&ok), b"body", "a", skew, now),
            Err(Error::BadMac)
        ));
    }

    #[test]
    fn a_hop_is_bound_to_its_path() {
        let ring = seal::KeyRing::new(vec![seal::Key::generate("k").unwrap().0]).unwrap();
        let skew = Duration::from_secs(30);
        let now = 1_000_000;
        let at = |path: &str, headers: &[(&'static str, String)]| {
            let mut parts = head(headers);
            parts.uri = path.parse().unwrap();
            verify(&ring, &parts, b"body", "a", skew, now)
        };
        let session = sign_at(SESSION_PATH, &ring, "a", "b", b"body", now);
        assert_eq!(at(SESSION_PATH, &session).unwrap(), "b");
        assert!(matches!(at(PATH, &session), Err(Error::BadMac)));
        // A retry's headers are what they were: signed for the retry path only.
        let retry = sign(&ring, "a", "b", b"body", now);
        assert_eq!(retry, sign_at(PATH, &ring, "a", "b", b"body", now));
        assert!(matches!(at(SESSION_PATH, &retry), Err(Error::BadMac)));
    }

    #[test]
    fn a_session_request_without_a_message_leaves_it_out() {
        let get = Session {
            backend: "/mcp".into(),
            principal: seal::digest(b"p"),
            method: "GET".into(),
            session: "s1.x".into(),
            message: None,
            last_event_id: None,
            stream: false,
            authorization: None,
        };
        let text = serde_json::to_string(&get).unwrap();
        assert!(!text.contains("message"), "{text}");
        assert!(!text.contains("last_event_id"), "{text}");
        let back: Session = serde_json::from_str(&text).unwrap();
        assert_eq!((back.method.as_str(), back.message), ("GET", None));
    }

    #[test]
    fn replies_cross_the_hop_unchanged() {
        let note = Reply::Notification(json!({"method": "notifications/progress"}));
        let Some(Reply::Notification(back)) = decode_reply(&encode_reply(&note)) else {
            panic!("not a notification");
        };
        assert_eq!(back, json!({"method": "notifications/progress"}));
        let error = Reply::Done(Err(ErrorObject::new(-32602, "no")));
        let Some(Reply::Done(Err(back))) = decode_reply(&encode_reply(&error)) else {
            panic!("not an error");
        };
        assert_eq!((back.code, back.message.as_str()), (-32602, "no"));
        let tree = Reply::Done(Ok(json!({"resultType": "input_required"}).into()));
        let Some(Reply::Done(Ok(crate::jsonrpc::Payload::Value(back)))) =
            decode_reply(&encode_reply(&tree))
        else {
            panic!("not a result as a tree");
        };
        assert_eq!(back, json!({"resultType": "input_required"}));
        // A backend's result as text crosses as that text: members in their order, numbers
        // with their digits (through the event stream's framing, as the hop sends it).
        let written = "{\"z\": [1, 2.50],\"a\":1e400, \"resultType\":\"complete\"}";
        let text = Reply::Done(Ok(crate::jsonrpc::Payload::Text(written.into())));
        let event = crate::sse::encode_text("message", &encode_reply(&text));
        let data = event
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect::<Vec<_>>()
            .join("\n");
        let Some(Reply::Done(Ok(crate::jsonrpc::Payload::Text(back)))) = decode_reply(&data) else {
            panic!("not a result as text");
        };
        assert_eq!(back, written);
        assert!(decode_reply("{\"other\": 1}").is_none());
        assert!(decode_reply("not json").is_none());
    }
}

//! Running as one of several replicas: the internal hop between them.
//!
//! A hold-mode requestState names its owner (replica id and the `host:port` of its internal
//! listener) inside the seal. A retry that reaches another replica is forwarded there
//! (`forward`): the original request, the principal this replica computed, signed with a MAC
//! derived from the state key ring over method, path, body digest, timestamp, target, sender
//! and the hop marker. The owner's internal listener ([`serve_internal`]) checks all of that,
//! never forwards a forwarded request again, resumes the parked call and streams the replies
//! back as SSE. Replay-mode states are never forwarded: any replica runs them.

use crate::bridge::{self, Bridge, Reply, Request};
use crate::config::parse_host_port;
use crate::jsonrpc::{self, ErrorObject};
use crate::metrics::StateFailure;
use crate::protocol::{self, meta::RequestMeta};
use crate::seal::{self, Claims, Digest};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The one path of the internal listener.
pub const HOP_PATH: &str = "/internal/v1/resume";
/// The hop marker: present (value `1`) on every forwarded request, and covered by the MAC.
pub const HOP: &str = "x-mrtr-hop";
pub const HOP_TO: &str = "x-mrtr-hop-to";
pub const HOP_FROM: &str = "x-mrtr-hop-from";
pub const HOP_TIME: &str = "x-mrtr-hop-time";
pub const HOP_MAC: &str = "x-mrtr-hop-mac";

/// What went wrong on the internal hop.
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
    #[error("owner address `{0}` is not host:port")]
    BadAddress(String),
    #[error("cannot reach the owner at {addr}: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("the owner did not finish within {0:?}")]
    Timeout(Duration),
    #[error("the owner answered HTTP {0}")]
    Refused(StatusCode),
    #[error("the owner's reply stream broke: {0}")]
    Stream(String),
}

/// The body of a forwarded retry.
#[derive(Debug, Serialize, Deserialize)]
struct Hop {
    /// The backend's path: replicas share one config, so paths name the same backend.
    backend: String,
    principal: Digest,
    method: String,
    params: Map<String, Value>,
}

/// Where a retry is served.
#[derive(Debug)]
pub(crate) enum Route {
    /// Here: the state is ours, or unreadable (the usual checks refuse it).
    Here,
    /// On the owner, over the internal hop.
    Forward { owner: String, addr: String },
    /// Replay mode: run the call again, here.
    Replay(Box<Claims>),
    /// Refused with the frozen error (already logged), counted under the check that failed.
    Refuse(StateFailure),
}

/// Decides where a retry carrying `state` is served. `hop` is true for a request that was
/// forwarded already: it is never forwarded again.
pub(crate) fn route(bridge: &Bridge, req: &Request, state: &str, hop: bool) -> Route {
    let Ok(claims) = bridge.keys.open(state) else {
        return Route::Here;
    };
    if claims.replay.is_some() {
        if hop {
            tracing::warn!(
                "a forwarded retry carries a replay state, which is never forwarded: refused"
            );
            return Route::Refuse(StateFailure::Owner);
        }
        return Route::Replay(Box::new(claims));
    }
    let me = &bridge.config.state.owner;
    if &claims.owner == me {
        return Route::Here;
    }
    if hop {
        tracing::warn!(owner = %claims.owner, "a forwarded retry names another replica as owner: refused, a request is forwarded at most once");
        return Route::Refuse(StateFailure::Owner);
    }
    if bridge.config.fleet.internal_listen.is_none() {
        tracing::info!(owner = %claims.owner, "retry for a call parked on another replica, and this one has no internal listener: refused");
        return Route::Refuse(StateFailure::Owner);
    }
    // Only a retry that would pass the owner's own checks is worth a hop.
    if claims.principal != req.principal {
        return Route::Refuse(StateFailure::Principal);
    }
    if claims.request != Bridge::request_digest(&req.method, &req.params) {
        return Route::Refuse(StateFailure::Request);
    }
    if claims.expires_at_ms <= now_ms() {
        return Route::Refuse(StateFailure::Expired);
    }
    match claims.owner_addr {
        Some(addr) if parse_host_port(&addr).is_some() => Route::Forward {
            owner: claims.owner,
            addr,
        },
        other => {
            tracing::warn!(owner = %claims.owner, addr = ?other, "the owner's sealed address is unusable: refused");
            Route::Refuse(StateFailure::Owner)
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
        "mrtr-hop-v1\n{method}\n{path}\n{:?}\n{time_ms}\n{to}\n{from}\n{HOP}=1",
        seal::digest(body)
    )
    .into_bytes()
}

/// The headers of a forwarded request from `from` to `to` carrying `body`.
pub fn sign(
    keys: &seal::KeyRing,
    to: &str,
    from: &str,
    body: &[u8],
    time_ms: u64,
) -> Vec<(&'static str, String)> {
    let tag = keys.mac(&signed_bytes("POST", HOP_PATH, body, time_ms, to, from));
    vec![
        (HOP, "1".to_owned()),
        (HOP_TO, to.to_owned()),
        (HOP_FROM, from.to_owned()),
        (HOP_TIME, time_ms.to_string()),
        (HOP_MAC, URL_SAFE_NO_PAD.encode(tag)),
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
    if get(HOP)? != "1" {
        return Err(Error::Malformed(HOP));
    }
    let to = get(HOP_TO)?;
    let from = get(HOP_FROM)?;
    let time: u64 = get(HOP_TIME)?
        .parse()
        .map_err(|_| Error::Malformed(HOP_TIME))?;
    let tag = URL_SAFE_NO_PAD
        .decode(get(HOP_MAC)?)
        .map_err(|_| Error::Malformed(HOP_MAC))?;
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

/// Forwards a retry to the replica that holds its call and relays the replies. On error the
/// caller answers the client; replies already relayed stay relayed.
pub(crate) async fn forward(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    owner: &str,
    addr: &str,
    reply: &mpsc::Sender<Reply>,
) -> Result<(), Error> {
    let fleet = &bridge.config.fleet;
    let (host, port) = parse_host_port(addr).ok_or_else(|| Error::BadAddress(addr.to_owned()))?;
    let hop = Hop {
        backend: bridge.config.backends[backend].path.clone(),
        principal: req.principal,
        method: req.method.clone(),
        params: req.params.clone(),
    };
    let body = serde_json::to_vec(&hop).expect("JSON values serialize");
    let mut builder = http::Request::post(HOP_PATH)
        .header(header::HOST, addr)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "text/event-stream");
    for (name, value) in sign(&bridge.keys, owner, &fleet.replica_id, &body, now_ms()) {
        builder = builder.header(name, value);
    }
    let request = builder
        .body(Full::new(Bytes::from(body)))
        .expect("valid request");
    let unreachable = |reason: String| Error::Unreachable {
        addr: addr.to_owned(),
        reason,
    };
    // The owner sends the backend's result (at most `max_line_bytes`) with `resultType` and
    // `_meta` added: room for those on top.
    let max_event = bridge
        .config
        .limits
        .max_line_bytes
        .saturating_add(HOP_EVENT_SLACK);
    let exchange = async {
        let stream = tokio::time::timeout(
            fleet.forward_connect_timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        .map_err(|_| unreachable("connect timed out".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        // The connection task ends with this exchange: when the response is read or dropped.
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("internal hop connection ended: {e}");
            }
        });
        let resp = sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        if resp.status() != StatusCode::OK {
            return Err(Error::Refused(resp.status()));
        }
        let mut events = crate::sse::decode(resp.into_body().into_data_stream(), max_event);
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| Error::Stream(e.to_string()))?;
            match decode_reply(&event.data) {
                Some(done @ Reply::Done(_)) => {
                    let _ = reply.send(done).await;
                    return Ok(());
                }
                Some(note) => {
                    let _ = reply.send(note).await;
                }
                None => return Err(Error::Stream("an event of unknown shape".into())),
            }
        }
        Err(Error::Stream("ended before the result".into()))
    };
    tokio::select! {
        // The client left: dropping the hop connection tells the owner, which abandons the call.
        _ = reply.closed() => Ok(()),
        outcome = tokio::time::timeout(fleet.forward_timeout, exchange) => {
            outcome.unwrap_or(Err(Error::Timeout(fleet.forward_timeout)))
        }
    }
}

/// Room on top of `max_line_bytes` for what the owner adds to a result it sends over a hop.
const HOP_EVENT_SLACK: usize = 64 * 1024;

/// One reply as an event of the hop's stream. A backend's result goes as the text it is, so
/// it keeps its members' order and its numbers' digits across the hop, as without one; the
/// shape of the event is the same for a result made here (a replica of an earlier release
/// reads either).
fn encode_reply(reply: &Reply) -> String {
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
fn decode_reply(data: &str) -> Option<Reply> {
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

/// Serves the internal listener until `stop`, then lets in-flight hops finish.
pub async fn serve_internal(listener: TcpListener, bridge: Arc<Bridge>, stop: CancellationToken) {
    let limits = crate::listener::Limits {
        name: "internal",
        max_connections: bridge.config.server.max_connections,
        header_read_timeout: bridge.config.server.header_timeout,
        write_timeout: bridge.config.server.write_timeout,
    };
    let grace = bridge.config.server.shutdown_grace + Duration::from_secs(1);
    let connections = crate::listener::serve(listener, limits, stop, move |req, peer| {
        handle(bridge.clone(), req, peer)
    })
    .await;
    // Hops in flight end when their calls do; the bridge bounds that by the shutdown grace.
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("internal connections still open after the shutdown grace");
    }
}

type Body = crate::downstream::http::Body;

fn refuse(status: StatusCode, message: &str) -> hyper::Response<Body> {
    let body = jsonrpc::response(
        None,
        Err(ErrorObject::new(jsonrpc::INVALID_REQUEST, message)),
    );
    hyper::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(BodyExt::boxed_unsync(Full::new(Bytes::from(
            serde_json::to_vec(&body).expect("JSON values serialize"),
        ))))
        .expect("valid response")
}

async fn handle(
    bridge: Arc<Bridge>,
    req: hyper::Request<Incoming>,
    peer: std::net::SocketAddr,
) -> hyper::Response<Body> {
    if req.uri().path() != HOP_PATH {
        return refuse(StatusCode::NOT_FOUND, "no such internal endpoint");
    }
    if req.method() != Method::POST {
        return refuse(StatusCode::METHOD_NOT_ALLOWED, "POST only");
    }
    let (parts, body) = req.into_parts();
    // Room for the client's body plus the hop's own fields.
    let limit = bridge.config.limits.max_body_bytes + 4096;
    let body =
        match crate::listener::read_body(body, limit, bridge.config.server.body_timeout).await {
            Ok(body) => body,
            Err(e @ crate::listener::BodyError::TimedOut(_)) => {
                return refuse(StatusCode::REQUEST_TIMEOUT, &e.to_string());
            }
            Err(e) => return refuse(StatusCode::PAYLOAD_TOO_LARGE, &e.to_string()),
        };
    let fleet = &bridge.config.fleet;
    let from = match verify(
        &bridge.keys,
        &parts,
        &body,
        &fleet.replica_id,
        fleet.max_clock_skew,
        now_ms(),
    ) {
        Ok(from) => from,
        Err(e) => {
            tracing::warn!(%peer, "internal hop refused: {e}");
            return refuse(
                StatusCode::UNAUTHORIZED,
                &format!("internal hop refused: {e}"),
            );
        }
    };
    if let Err(e) = jsonrpc::check_depth(&body, bridge.config.limits.max_json_depth) {
        return refuse(StatusCode::BAD_REQUEST, &e.to_string());
    }
    let hop: Hop = match serde_json::from_slice(&body) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(%peer, %from, "internal hop with a malformed body: {e}");
            return refuse(StatusCode::BAD_REQUEST, "malformed hop body");
        }
    };
    let Some(backend) = bridge.route(&hop.backend) else {
        tracing::warn!(%from, backend = %hop.backend, "internal hop for an unknown backend");
        return refuse(StatusCode::NOT_FOUND, "unknown backend");
    };
    let state_ok = hop
        .params
        .get("requestState")
        .is_some_and(|s| s.is_string());
    if !protocol::is_mrtr_method(&hop.method) || !state_ok {
        tracing::warn!(%from, method = %hop.method, "internal hop that is not a retry: refused");
        return refuse(StatusCode::BAD_REQUEST, "only retries are forwarded");
    }
    let params = Value::Object(hop.params);
    let meta = match RequestMeta::from_params(Some(&params)) {
        Ok(m) => m,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let Value::Object(params) = params else {
        unreachable!("built as an object")
    };
    tracing::debug!(%from, "serving a forwarded retry");
    let rx = bridge.handle_hop(
        backend,
        bridge::Request {
            method: hop.method,
            params,
            meta,
            principal: hop.principal,
            // Credentials never cross the hop; a resumed call already holds its session.
            authorization: None,
        },
    );
    let events = futures_util::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        let reply = rx.recv().await?;
        let last = matches!(reply, Reply::Done(_));
        let frame = Frame::data(Bytes::from(crate::sse::encode_text(
            "message",
            &encode_reply(&reply),
        )));
        Some((
            Ok::<_, std::convert::Infallible>(frame),
            (!last).then_some(rx),
        ))
    });
    hyper::Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(BodyExt::boxed_unsync(StreamBody::new(events)))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&'static str, String)]) -> http::request::Parts {
        let mut req = http::Request::post(HOP_PATH);
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
        for (i, name) in [HOP_TO, HOP_FROM, HOP_TIME].iter().enumerate() {
            let mut h = ok.clone();
            h[i + 1].1.push('1');
            let err = verify(&ring, &head(&h), b"body", "a", skew, now).unwrap_err();
            assert!(matches!(err, Error::BadMac | Error::Malformed(_)), "{name}");
        }
        let mut no_marker = ok.clone();
        no_marker[0].1 = "2".into();
        assert!(matches!(
            verify(&ring, &head(&no_marker), b"body", "a", skew, now),
            Err(Error::Malformed(HOP))
        ));
        let other = seal::KeyRing::new(vec![seal::Key::generate("k").unwrap().0]).unwrap();
        assert!(matches!(
            verify(&other, &head(&ok), b"body", "a", skew, now),
            Err(Error::BadMac)
        ));
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

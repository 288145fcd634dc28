//! The 2024-11-05 HTTP+SSE face over real sockets, in front of the built-in legacy server (a
//! stdio child): a GET on the backend's `sse_path` opens a stream whose first event names where
//! to POST; everything the server says, `initialize`'s result and each call's answer included,
//! comes on that stream; a bad session id reaches nothing; closing the stream ends the session.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

const PATHS: &str = "pool_max = 64\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n";

async fn gateway(extra: &str) -> Gateway {
    Gateway::with(Options {
        extra: format!("[principal]\nsource = \"authorization\"\n{extra}"),
        backend_extra: PATHS.into(),
        ..Default::default()
    })
    .await
}

/// `host:port` of the gateway.
fn addr(gw: &Gateway) -> String {
    let uri: http::Uri = gw.url.parse().expect("url");
    format!(
        "{}:{}",
        uri.host().expect("host"),
        uri.port_u16().expect("port")
    )
}

/// One HTTP request on a connection of its own.
async fn send(
    addr: &str,
    method: &str,
    target: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
) -> hyper::Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(target)
        .header("host", addr)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream");
    if let Some(token) = bearer {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
    let req = req
        .body(Full::new(Bytes::from(bytes.unwrap_or_default())))
        .expect("request");
    tokio::time::timeout(WAIT, sender.send_request(req))
        .await
        .expect("answered in time")
        .expect("response")
}

/// POSTs one message: the status and the JSON body (`null` when empty).
async fn post(addr: &str, target: &str, bearer: Option<&str>, body: &Value) -> (u16, Value) {
    let resp = send(addr, "POST", target, bearer, Some(body)).await;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A client's stream, read event by event.
struct Stream {
    body: Incoming,
    buffer: String,
    /// Where the `endpoint` event said to POST.
    endpoint: String,
}

impl Stream {
    async fn open(addr: &str, bearer: Option<&str>) -> Stream {
        let resp = send(addr, "GET", "/sse", bearer, None).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut stream = Stream {
            body: resp.into_body(),
            buffer: String::new(),
            endpoint: String::new(),
        };
        let (event, data) = stream.event().await.expect("the endpoint event");
        assert_eq!(event, "endpoint");
        stream.endpoint = data;
        stream
    }

    /// The next event's name and data, or `None` at the end of the stream.
    async fn event(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    event
                        .lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .map(str::trim_start)
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                return Some((field("event:"), field("data:")));
            }
            let frame = tokio::time::timeout(WAIT, self.body.frame())
                .await
                .expect("an event in time")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buffer.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }

    /// The next event, which must be a message.
    async fn message(&mut self) -> Value {
        let (event, data) = self.event().await.expect("a message");
        assert_eq!(event, "message", "{data}");
        serde_json::from_str(&data).expect("JSON")
    }
}

fn initialize(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "sse-test", "version": "1"}}})
}

fn echo(id: u64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}}})
}

fn tool_text(response: &Value) -> Value {
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {response:#}"));
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

/// A stream of `bearer`'s with its session initialized.
async fn initialized(addr: &str, bearer: &str) -> Stream {
    let mut stream = Stream::open(addr, Some(bearer)).await;
    let (status, _) = post(addr, &stream.endpoint, Some(bearer), &initialize(1)).await;
    assert_eq!(status, 202);
    let init = stream.message().await;
    assert_eq!(init["id"], 1, "{init:#}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init:#}");
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(addr, &stream.endpoint, Some(bearer), &done).await.0,
        202
    );
    stream
}

async fn legacy_sessions_become(gw: &Gateway, want: usize) {
    let bridge = gw.running.as_ref().expect("running").bridge().clone();
    for _ in 0..200 {
        if bridge.legacy_sessions() == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("legacy sessions: {} not {want}", bridge.legacy_sessions());
}

#[tokio::test]
async fn a_stream_carries_initialize_and_a_call_whose_elicitation_is_answered_over_post() {
    let gw = gateway("").await;
    let addr = addr(&gw);
    let mut stream = Stream::open(&addr, Some("alice")).await;
    let id = stream
        .endpoint
        .strip_prefix("/messages?session_id=")
        .unwrap_or_else(|| panic!("a relative POST URL: {}", stream.endpoint));
    // Sealed, and safe in a query as it is.
    assert!(id.starts_with("e1."), "{id}");
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
        "{id}"
    );
    let (status, body) = post(&addr, &stream.endpoint, Some("alice"), &initialize(1)).await;
    assert_eq!((status, body), (202, Value::Null));
    let init = stream.message().await;
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init:#}");
    legacy_sessions_become(&gw, 1).await;
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &done).await.0,
        202
    );

    let ask = json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
        "params": {"name": "ask_form", "arguments": {}}});
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &ask).await.0,
        202
    );
    let asked = stream.message().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked:#}");
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": accept(json!({"name": "Ada"}))});
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &answer)
            .await
            .0,
        202
    );
    let result = stream.message().await;
    assert_eq!(result["id"], "ask", "the client's own id: {result:#}");
    assert_eq!(tool_text(&result)["content"]["name"], "Ada", "{result:#}");

    // Answered once: the same answer again is refused.
    let (status, again) = post(&addr, &stream.endpoint, Some("alice"), &answer).await;
    assert_eq!(status, 400, "{again:#}");
    // The session is initialized once.
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &initialize(9))
            .await
            .0,
        400
    );
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &echo(3, "hi"))
            .await
            .0,
        202
    );
    assert_eq!(tool_text(&stream.message().await), json!({"echo": "hi"}));
    gw.stop().await;
}

#[tokio::test]
async fn forged_tampered_other_principals_and_ended_ids_are_404_and_reach_nothing() {
    let gw = gateway("").await;
    let addr = addr(&gw);
    let mut alice = initialized(&addr, "alice").await;
    let endpoint = alice.endpoint.clone();
    let mut tampered = endpoint.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).unwrap();
    let stolen = echo(7, "stolen");
    for (what, target, who) in [
        ("forged", "/messages?session_id=abc", Some("alice")),
        ("tampered", tampered.as_str(), Some("alice")),
        ("another principal's", endpoint.as_str(), Some("mallory")),
        ("no principal's", endpoint.as_str(), None),
    ] {
        let (status, body) = post(&addr, target, who, &stolen).await;
        assert_eq!(status, 404, "{what}: {body:#}");
    }
    let (status, _) = post(&addr, "/messages", Some("alice"), &stolen).await;
    assert_eq!(status, 400, "no session named");
    assert_eq!(
        send(&addr, "GET", &endpoint, Some("alice"), None)
            .await
            .status(),
        405
    );
    let posted = send(&addr, "POST", "/sse", Some("alice"), Some(&stolen)).await;
    assert_eq!(posted.status(), 405);

    // Before its initialize a stream has no session to call.
    let bob = Stream::open(&addr, Some("bob")).await;
    let (status, body) = post(&addr, &bob.endpoint, Some("bob"), &stolen).await;
    assert_eq!(status, 400, "{body:#}");

    let received = gw.backend_received();
    assert!(
        !received.iter().any(|m| m["method"] == "tools/call"),
        "nothing reached the backend: {received:#?}"
    );
    // Alice's session is untouched.
    assert_eq!(
        post(&addr, &endpoint, Some("alice"), &echo(8, "mine"))
            .await
            .0,
        202
    );
    assert_eq!(tool_text(&alice.message().await), json!({"echo": "mine"}));
    drop(alice);
    legacy_sessions_become(&gw, 0).await;
    let (status, _) = post(&addr, &endpoint, Some("alice"), &echo(9, "late")).await;
    assert_eq!(status, 404, "an ended session's id");
    gw.stop().await;
}

#[tokio::test]
async fn closing_the_stream_ends_the_session_and_frees_its_place() {
    let gw = gateway("[limits]\nmax_sessions_per_principal = 1\n").await;
    let addr = addr(&gw);
    let stream = initialized(&addr, "alice").await;
    let endpoint = stream.endpoint.clone();
    legacy_sessions_become(&gw, 1).await;
    drop(stream);
    legacy_sessions_become(&gw, 0).await;
    let (status, _) = post(&addr, &endpoint, Some("alice"), &echo(2, "late")).await;
    assert_eq!(status, 404, "the closed stream's id names nothing");
    // Alice's one session is free again.
    let mut again = initialized(&addr, "alice").await;
    assert_eq!(
        post(&addr, &again.endpoint, Some("alice"), &echo(3, "again"))
            .await
            .0,
        202
    );
    assert_eq!(tool_text(&again.message().await), json!({"echo": "again"}));
    gw.stop().await;
}

#[tokio::test]
async fn an_open_stream_keeps_its_session_and_a_stream_never_initialized_ends() {
    let gw = gateway("[limits]\nsession_idle = \"1s\"\n").await;
    let addr = addr(&gw);
    let mut stream = initialized(&addr, "alice").await;
    let mut idle = Stream::open(&addr, Some("bob")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(idle.event().await, None, "ended without its initialize");
    assert_eq!(
        post(&addr, &idle.endpoint, Some("bob"), &initialize(1))
            .await
            .0,
        404
    );
    // The session whose stream is open is busy: never idle.
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &echo(2, "still"))
            .await
            .0,
        202
    );
    assert_eq!(tool_text(&stream.message().await), json!({"echo": "still"}));
    gw.stop().await;
}

#[tokio::test]
async fn sessions_past_their_limits_are_refused_on_the_stream() {
    let gw = gateway("[limits]\nmax_sessions_per_principal = 1\n").await;
    let addr = addr(&gw);
    let _first = initialized(&addr, "alice").await;
    let mut second = Stream::open(&addr, Some("alice")).await;
    let (status, _) = post(&addr, &second.endpoint, Some("alice"), &initialize(1)).await;
    assert_eq!(status, 202);
    let refused = second.message().await;
    assert_eq!(refused["id"], 1);
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("max_sessions_per_principal"),
        "{refused:#}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_quiet_stream_sends_a_comment_to_keep_it_open() {
    let gw = gateway("").await;
    let addr = addr(&gw);
    let mut stream = initialized(&addr, "alice").await;
    let quiet = std::time::Instant::now();
    let (event, data) = stream.event().await.expect("a comment");
    assert_eq!(
        (event.as_str(), data.as_str()),
        ("", ""),
        "no event, no data"
    );
    assert!(
        quiet.elapsed() >= Duration::from_secs(10),
        "{:?}",
        quiet.elapsed()
    );
    // The stream goes on.
    assert_eq!(
        post(&addr, &stream.endpoint, Some("alice"), &echo(2, "on"))
            .await
            .0,
        202
    );
    assert_eq!(tool_text(&stream.message().await), json!({"echo": "on"}));
    gw.stop().await;
}

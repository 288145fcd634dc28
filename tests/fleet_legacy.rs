//! Legacy clients' sessions across replicas, over HTTP on loopback sockets: a session opened on
//! one replica is served through another, every request of it (the GET stream and DELETE
//! included) forwarded to its owner over the internal hop; a tampered session id, an unusable
//! sealed address, an owner that cannot be reached, a hop forwarded twice or carrying another
//! principal are all 404 for the client, and never reach a backend.

mod common;
mod legacy_client;

use common::*;
use legacy_client::{Legacy, answers, caps, tool_text};
use mrtr_gateway::config::PrincipalSource;
use mrtr_gateway::seal::{self, Key, KeyRing, SessionClaims};
use mrtr_gateway::wire::hop;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Replicas sharing one key.
struct Fleet {
    secret: String,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet {
            secret: Key::generate("k").unwrap().1,
        }
    }

    fn ring(&self) -> KeyRing {
        KeyRing::new(vec![Key::from_base64("k", &self.secret).unwrap()]).unwrap()
    }

    /// An in-process replica; `fleet` goes into its `[fleet]` table (an internal listener,
    /// say), `server_args` to its built-in legacy server.
    async fn replica(&self, id: &str, fleet: &str, server_args: &[&str]) -> Gateway {
        self.replica_with(id, fleet, server_args, "").await
    }

    /// `replica` with `backend_extra` lines in its `[[backend]]` table.
    async fn replica_with(
        &self,
        id: &str,
        fleet: &str,
        server_args: &[&str],
        backend_extra: &str,
    ) -> Gateway {
        Gateway::with(Options {
            server_args: server_args.iter().map(|a| a.to_string()).collect(),
            extra: format!(
                "[state]\nkeys = [{{ id = \"k\", secret = \"{}\" }}]\n[fleet]\nreplica_id = \"{id}\"\n{fleet}\n",
                self.secret
            ),
            backend_extra: format!("{}{backend_extra}", Options::default().backend_extra),
        })
        .await
    }
}

const INTERNAL: &str = "internal_listen = \"127.0.0.1:0\"";

/// A listener that only counts the connections it gets, and hangs up on each.
async fn recorder() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (addr, count)
}

fn digest_of(token: &str) -> seal::Digest {
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    mrtr_gateway::server::request::principal(&PrincipalSource::Authorization, &headers)
        .expect("one Authorization header")
}

fn alice(url: &str) -> Legacy {
    Legacy::new(url).with_authorization("Bearer alice")
}

/// The same client, its session and all, sending to `url`.
fn at(client: &Legacy, url: &str) -> Legacy {
    let mut moved = client.clone();
    moved.url = url.to_owned();
    moved
}

fn tools_list(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

fn heard(gw: &Gateway, method: &str) -> usize {
    gw.backend_received()
        .iter()
        .filter(|m| m["method"] == method)
        .count()
}

fn legacy_sessions(gw: &Gateway) -> usize {
    gw.running.as_ref().unwrap().bridge().legacy_sessions()
}

#[tokio::test]
async fn a_session_opened_on_one_replica_is_served_through_another() {
    let fleet = Fleet::new();
    let a = fleet.replica("a", INTERNAL, &["--roots-on-init"]).await;
    let b = fleet.replica("b", INTERNAL, &[]).await;
    let mut c = alice(&a.url);
    let (status, init) = c.initialize("2025-11-25", caps()).await;
    assert_eq!(status, 200, "{init:#}");
    let via_b = at(&c, &b.url);

    // The GET stream through B is the owner's: the backend's roots request arrives on it, and
    // the owner's one-at-a-time rule holds across replicas.
    let mut stream = via_b.send("GET", None, &[]).await;
    assert_eq!(stream.status, 200);
    assert_eq!(c.send("GET", None, &[]).await.status, 409);
    let asked = stream.next().await.expect("the roots request");
    assert_eq!(asked["method"], "roots/list", "{asked:#}");
    let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result": roots(&["file:///early"])});
    assert_eq!(via_b.post(&reply).await.status, 202);

    let (list, _) = via_b.call(1, "tools/list", json!({}), answers).await;
    assert!(
        list["result"]["tools"].as_array().unwrap().len() > 5,
        "{list:#}"
    );
    // A call whose backend asks three things, each answered through B.
    let (asked, seen) = via_b
        .call(
            2,
            "tools/call",
            json!({"name": "all_three", "arguments": {}}),
            answers,
        )
        .await;
    assert_eq!(asked["id"], 2);
    assert_eq!(seen.len(), 3, "{seen:#?}");
    let got = tool_text(&asked);
    assert_eq!(got["elicit"]["content"]["name"], "Ada", "{got:#}");
    assert_eq!(got["roots"], json!(["file:///ada"]), "{got:#}");
    let (listed, _) = via_b
        .call(
            3,
            "tools/call",
            json!({"name": "list_roots", "arguments": {}}),
            answers,
        )
        .await;
    assert_eq!(tool_text(&listed)["cachedRoots"], json!(["file:///early"]));

    // The client leaving B's GET stream frees the owner's.
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let again = c.send("GET", None, &[]).await;
        if again.status == 200 {
            break;
        }
        assert_eq!(again.status, 409);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the GET stream was never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    assert_eq!(legacy_sessions(&a), 1);
    assert_eq!(legacy_sessions(&b), 0, "B holds nothing of the session");
    assert_eq!(via_b.send("DELETE", None, &[]).await.status, 200);
    assert_eq!(
        legacy_sessions(&a),
        0,
        "a DELETE through B ends it at its owner"
    );
    assert_eq!(c.post(&tools_list(4)).await.status, 404);
    assert_eq!(via_b.post(&tools_list(5)).await.status, 404);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn tampered_ids_and_unusable_owners_are_gone_and_never_dialled() {
    let fleet = Fleet::new();
    let (trap, connections) = recorder().await;
    // The owner advertises the recorder: any dial from B is seen there, and hung up on.
    let a = fleet
        .replica("a", &format!("{INTERNAL}\nadvertise = \"{trap}\""), &[])
        .await;
    let b = fleet.replica("b", INTERNAL, &[]).await;
    let mut c = alice(&a.url);
    c.initialize("2025-11-25", caps()).await;
    let sid = c.session.clone().expect("a session id");
    let before = heard(&a, "tools/list");
    let start = "s1.".len();
    for i in start..sid.len() {
        let mut bytes = sid.clone().into_bytes();
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        let mut tampered = at(&c, &b.url);
        tampered.session = Some(String::from_utf8(bytes).unwrap());
        let answer = tampered.post(&tools_list(1)).await;
        assert_eq!(answer.status, 404, "byte {i}");
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no tampered id made B dial"
    );

    // Sealed with the fleet's key but naming an address no replica dials.
    let ring = fleet.ring();
    let opened = ring.open_session(&sid).expect("a genuine id opens");
    for addr in [None, Some("not an address"), Some("http://a:1/x")] {
        let forged = ring.seal_session(&SessionClaims {
            owner_addr: addr.map(str::to_owned),
            ..opened.clone()
        });
        let mut client = at(&c, &b.url);
        client.session = Some(forged);
        assert_eq!(client.post(&tools_list(1)).await.status, 404, "{addr:?}");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0);

    // A replica without an internal listener forwards nothing.
    let lone = fleet.replica("c", "", &[]).await;
    assert_eq!(at(&c, &lone.url).post(&tools_list(1)).await.status, 404);
    assert_eq!(connections.load(Ordering::SeqCst), 0);

    // The genuine id makes B dial the sealed address; the recorder hangs up: gone.
    assert_eq!(at(&c, &b.url).post(&tools_list(1)).await.status, 404);
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    // An owner nobody listens for any more: gone too.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut client = at(&c, &b.url);
    client.session = Some(ring.seal_session(&SessionClaims {
        owner_addr: Some(dead),
        ..opened.clone()
    }));
    assert_eq!(client.post(&tools_list(1)).await.status, 404);

    assert_eq!(
        heard(&a, "tools/list"),
        before,
        "no backend heard any of it"
    );
    assert_eq!(legacy_sessions(&a), 1, "the session itself is undisturbed");
    assert_eq!(c.post(&tools_list(2)).await.status, 200);
    a.stop().await;
    b.stop().await;
    lone.stop().await;
}

/// POSTs a session hop to `gw`'s internal listener, signed as from `from` to `to`.
async fn session_hop(gw: &Gateway, ring: &KeyRing, to: &str, body: &Value) -> Reply {
    let addr = gw.running.as_ref().unwrap().internal_addr().unwrap();
    let body = serde_json::to_vec(body).unwrap();
    let headers: Vec<(String, String)> =
        hop::sign_at(hop::SESSION_PATH, ring, to, "b", &body, now_ms())
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
    Client::new(&format!("http://{addr}{}", hop::SESSION_PATH))
        .post_raw("POST", bytes::Bytes::from(body), &headers)
        .await
}

fn session_body(session: &str, principal: &str) -> Value {
    json!({
        "backend": "/mcp",
        "principal": digest_of(principal),
        "method": "POST",
        "session": session,
        "message": tools_list(7),
    })
}

#[tokio::test]
async fn hops_forwarded_twice_or_for_another_principal_reach_no_backend() {
    let fleet = Fleet::new();
    let a = fleet.replica("a", INTERNAL, &[]).await;
    let b = fleet.replica("b", INTERNAL, &[]).await;
    let ring = fleet.ring();
    let mut on_a = alice(&a.url);
    on_a.initialize("2025-11-25", caps()).await;
    let mut on_b = alice(&b.url);
    on_b.initialize("2025-11-25", caps()).await;
    let (sid_a, sid_b) = (on_a.session.clone().unwrap(), on_b.session.clone().unwrap());
    let (a_before, b_before) = (heard(&a, "tools/list"), heard(&b, "tools/list"));

    // B's session forwarded to A: A never forwards it again.
    let r = session_hop(&a, &ring, "a", &session_body(&sid_b, "alice")).await;
    assert_eq!(r.status, 404, "{:#}", r.body);
    // A's session with bob's principal under the MAC: not bob's.
    let r = session_hop(&a, &ring, "a", &session_body(&sid_a, "bob")).await;
    assert_eq!(r.status, 404, "{:#}", r.body);
    // Signed for another replica, or with another key: the hop itself is refused.
    let r = session_hop(&a, &ring, "c", &session_body(&sid_a, "alice")).await;
    assert_eq!(r.status, 401, "{:#}", r.body);
    let other = KeyRing::new(vec![Key::generate("k").unwrap().0]).unwrap();
    let r = session_hop(&a, &other, "a", &session_body(&sid_a, "alice")).await;
    assert_eq!(r.status, 401, "{:#}", r.body);
    // A retry's signature does not carry a session request.
    let body = serde_json::to_vec(&session_body(&sid_a, "alice")).unwrap();
    let retry_signed: Vec<(String, String)> = hop::sign(&ring, "a", "b", &body, now_ms())
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let addr = a.running.as_ref().unwrap().internal_addr().unwrap();
    let r = Client::new(&format!("http://{addr}{}", hop::SESSION_PATH))
        .post_raw("POST", bytes::Bytes::from(body), &retry_signed)
        .await;
    assert_eq!(r.status, 401, "{:#}", r.body);
    assert_eq!(heard(&a, "tools/list"), a_before);
    assert_eq!(heard(&b, "tools/list"), b_before);

    // The genuine hop is answered as the session's, under its id.
    let r = session_hop(&a, &ring, "a", &session_body(&sid_a, "alice")).await;
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.body["id"], 7);
    assert!(r.body["result"]["tools"].is_array(), "{:#}", r.body);
    assert_eq!(r.headers["mcp-session-id"], sid_a.as_str());
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn batches_and_resumptions_cross_the_hop() {
    let fleet = Fleet::new();
    let a = fleet.replica("a", INTERNAL, &[]).await;
    let b = fleet.replica("b", INTERNAL, &[]).await;
    let mut c = alice(&a.url);
    c.initialize("2025-03-26", caps()).await;
    let via_b = at(&c, &b.url);
    // A 2025-03-26 batch sent to B is answered by the owner.
    let mut batch = via_b.post(&json!([tools_list(1), tools_list(2)])).await;
    assert_eq!(batch.status, 200);
    let mut ids = Vec::new();
    while let Some(msg) = batch.next().await {
        ids.push(msg["id"].as_u64().unwrap());
    }
    ids.sort();
    assert_eq!(ids, [1, 2]);
    // A stream let go at the owner is resumed through B with its Last-Event-ID.
    let mut c = alice(&a.url);
    c.initialize("2025-11-25", caps()).await;
    let via_b = at(&c, &b.url);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "ask_form", "arguments": {}}});
    let mut stream = c.post(&call).await;
    let asked = stream.next().await.expect("the elicitation");
    let event = stream.last_event_id.clone().expect("an event id");
    drop(stream);
    let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result": answers(&asked)});
    assert_eq!(via_b.post(&reply).await.status, 202);
    let mut resumed = via_b.send("GET", None, &[("last-event-id", &event)]).await;
    assert_eq!(resumed.status, 200);
    let response = resumed.next().await.expect("the response through B");
    assert_eq!(response["id"], 3, "{response:#}");
    assert_eq!(tool_text(&response)["content"]["name"], "Ada");
}

#[tokio::test]
async fn an_http_sse_stream_takes_its_messages_through_another_replica() {
    let fleet = Fleet::new();
    let paths = "sse_path = \"/sse\"\nmessages_path = \"/messages\"\n";
    let a = fleet.replica_with("a", INTERNAL, &[], paths).await;
    let b = fleet.replica_with("b", INTERNAL, &[], paths).await;
    let base = |gw: &Gateway| gw.url.strip_suffix("/mcp").unwrap().to_owned();
    let mut stream = alice(&format!("{}/sse", base(&a)))
        .send("GET", None, &[])
        .await;
    let (name, endpoint) = stream.event().await.expect("the endpoint event");
    assert_eq!(name, "endpoint");
    // Every message goes to B; the stream, and so the session, is A's.
    let to_b = alice(&format!("{}{endpoint}", base(&b)));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": caps(),
        "clientInfo": {"name": "sse", "version": "1"}}});
    assert_eq!(to_b.post(&init).await.status, 202);
    let result = stream
        .next()
        .await
        .expect("initialize's result on A's stream");
    assert_eq!(
        result["result"]["protocolVersion"], "2024-11-05",
        "{result:#}"
    );
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "via b"}}});
    assert_eq!(to_b.post(&call).await.status, 202);
    let echoed = stream
        .next()
        .await
        .expect("the call's response on A's stream");
    assert_eq!(tool_text(&echoed), json!({"echo": "via b"}));
    assert_eq!(legacy_sessions(&a), 1);
    assert_eq!(legacy_sessions(&b), 0);
    // Another principal's message for the stream, through B: gone, and nothing reaches A's
    // backend.
    let mut mallory = to_b.clone();
    mallory.authorization = Some("Bearer mallory".into());
    assert_eq!(mallory.post(&call).await.status, 404);
    assert_eq!(heard(&a, "tools/call"), 1);
}

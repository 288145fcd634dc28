//! The internal hop and replay states are attacker-facing too: a tampered state never makes a
//! replica connect anywhere, forged or looping hops are refused before any backend hears of
//! them, and a replay transcript that no longer matches the backend is refused.

mod common;

use common::*;
use mrtr_gateway::bridge::Bridge;
use mrtr_gateway::config::PrincipalSource;
use mrtr_gateway::seal::{self, Claims, Key, KeyRing, ParkId, Transcript, Turn};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const FROZEN: &str = "Invalid requestState: issue the request again without it";

fn assert_frozen(r: &Reply) {
    assert_eq!(r.error_code(), -32602, "{:#}", r.body);
    assert_eq!(r.body["error"]["message"], FROZEN);
}

fn caps() -> Value {
    json!({"elicitation": {}})
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

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

    /// An in-process replica with an internal listener; `fleet_extra` goes into `[fleet]`.
    async fn replica(&self, id: &str, fleet_extra: &str, backend_extra: &str) -> Gateway {
        Gateway::with(Options {
            extra: format!(
                "[state]\nkeys = [{{ id = \"k\", secret = \"{}\" }}]\n[fleet]\nreplica_id = \"{id}\"\ninternal_listen = \"127.0.0.1:0\"\n{fleet_extra}\n",
                self.secret
            ),
            backend_extra: format!("pool_max = 64\n{backend_extra}"),
            ..Default::default()
        })
        .await
    }
}

fn internal_url(gw: &Gateway) -> String {
    let addr = gw
        .running
        .as_ref()
        .unwrap()
        .internal_addr()
        .expect("internal listener");
    format!("http://{addr}{}", mrtr_gateway::wire::hop::PATH)
}

/// A listener that only counts the connections it gets.
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

fn alice_digest() -> seal::Digest {
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", "Bearer alice".parse().unwrap());
    mrtr_gateway::server::request::principal(&PrincipalSource::Authorization, &headers)
        .expect("one Authorization header")
}

#[tokio::test]
async fn a_tampered_state_never_makes_a_replica_connect_anywhere() {
    let fleet = Fleet::new();
    let (trap, connections) = recorder().await;
    // The owner advertises the recorder, so any dial from B is seen there.
    let a = fleet
        .replica("a", &format!("advertise = \"{trap}\""), "")
        .await;
    let b = fleet.replica("b", "", "").await;
    let alice = a.client().with_principal("alice");
    let r = alice
        .call_tool("ask_form", json!({"message": "m"}), &caps())
        .await;
    let key = r.key_for("elicitation/create");
    let state = r.state();
    let at_b = Client::new(&b.url).with_principal("alice");
    let answer = json!({ key.clone(): accept(json!({"name": "x"})) });
    let before = a.backend_received().len();
    let start = "v1.k.".len();
    for at in start..state.len() {
        let mut bytes = state.clone().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        let r = at_b
            .retry_tool(
                "ask_form",
                json!({"message": "m"}),
                &caps(),
                answer.clone(),
                &tampered,
            )
            .await;
        assert_frozen(&r);
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no tampered state made B connect"
    );
    // The genuine state does make B dial the sealed address (the recorder hangs up on it).
    let r = at_b
        .retry_tool("ask_form", json!({"message": "m"}), &caps(), answer, &state)
        .await;
    assert_frozen(&r);
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    assert_eq!(a.backend_received().len(), before);
    assert_eq!(a.parked(), 1, "the parked call is undisturbed");
    a.stop().await;
    b.stop().await;
}

type Headers = Vec<(&'static str, String)>;

/// Posts a hop to `url` with `headers`; the reply.
async fn hop(url: &str, body: &[u8], headers: Headers) -> Reply {
    let headers: Vec<(String, String)> = headers
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    Client::new(url)
        .post_raw("POST", bytes::Bytes::copy_from_slice(body), &headers)
        .await
}

fn hop_body(state: &str, key: &str) -> Vec<u8> {
    let params = json!({
        "name": "ask_form",
        "arguments": {"message": "m"},
        "inputResponses": { key: accept(json!({"name": "hop"})) },
        "requestState": state,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": caps(),
        },
    });
    serde_json::to_vec(&json!({
        "backend": "/mcp",
        "principal": alice_digest(),
        "method": "tools/call",
        "params": params,
    }))
    .unwrap()
}

#[tokio::test]
async fn forged_and_looping_hops_are_refused_and_reach_no_backend() {
    let fleet = Fleet::new();
    let a = fleet.replica("a", "", "").await;
    let b = fleet.replica("b", "", "").await;
    let url = internal_url(&a);
    let park = |gw: &Gateway| {
        let client = gw.client().with_principal("alice");
        async move {
            let r = client
                .call_tool("ask_form", json!({"message": "m"}), &caps())
                .await;
            (r.key_for("elicitation/create"), r.state())
        }
    };
    let (key, state) = park(&a).await;
    let body = hop_body(&state, &key);
    let ring = fleet.ring();
    let other = KeyRing::new(vec![Key::generate("k").unwrap().0]).unwrap();
    let sign = |ring: &KeyRing, to: &str, body: &[u8], at: u64| {
        mrtr_gateway::wire::hop::sign(ring, to, "b", body, at)
    };
    let before = a.backend_received().len();
    let mut altered = body.clone();
    let last = altered.len() - 2;
    altered[last] = b' ';
    let forged: Vec<(&str, Headers, Vec<u8>)> = vec![
        ("no hop headers", vec![], body.clone()),
        (
            "MAC from another key",
            sign(&other, "a", &body, now_ms()),
            body.clone(),
        ),
        (
            "stale timestamp",
            sign(&ring, "a", &body, now_ms() - 600_000),
            body.clone(),
        ),
        (
            "addressed to another replica",
            sign(&ring, "c", &body, now_ms()),
            body.clone(),
        ),
        (
            "body changed after signing",
            sign(&ring, "a", &body, now_ms()),
            altered,
        ),
        (
            "MAC header missing",
            sign(&ring, "a", &body, now_ms())
                .into_iter()
                .filter(|(k, _)| *k != mrtr_gateway::wire::hop::MAC)
                .collect(),
            body.clone(),
        ),
    ];
    for (what, headers, body) in forged {
        let r = hop(&url, &body, headers).await;
        assert_eq!(r.status, 401, "{what}: {:#}", r.body);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("internal hop refused"),
            "{what}: {:#}",
            r.body
        );
    }
    assert_eq!(
        a.backend_received().len(),
        before,
        "no backend heard a forged hop"
    );
    assert_eq!(a.parked(), 1);

    // A hop carrying a state owned by B is not forwarded again.
    let (b_key, b_state) = park(&b).await;
    let b_before = b.backend_received().len();
    let loop_body = hop_body(&b_state, &b_key);
    let r = hop(&url, &loop_body, sign(&ring, "a", &loop_body, now_ms())).await;
    assert_eq!(r.status, 200);
    assert_frozen(&r);
    assert_eq!(a.backend_received().len(), before);
    assert_eq!(b.backend_received().len(), b_before);
    assert_eq!(b.parked(), 1, "B's call is undisturbed");

    // A genuine hop resumes the call.
    let r = hop(&url, &body, sign(&ring, "a", &body, now_ms())).await;
    assert_eq!(r.tool_json()["content"]["name"], "hop");
    a.stop().await;
    b.stop().await;
}

fn params(message: &str) -> Map<String, Value> {
    json!({"name": "ask_form", "arguments": {"message": message}})
        .as_object()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn replay_keeps_nothing_and_refuses_a_transcript_the_backend_no_longer_matches() {
    let fleet = Fleet::new();
    let gw = fleet.replica("a", "", "replay = \"replay\"\n").await;
    let alice = gw.client().with_principal("alice");
    // A genuine replayed call: nothing parked between rounds, and it completes.
    let r = alice
        .call_tool("ask_form", json!({"message": "m"}), &caps())
        .await;
    assert_eq!(gw.parked(), 0, "replay mode keeps nothing in memory");
    let key = r.key_for("elicitation/create");
    let done = alice
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            json!({ key.clone(): accept(json!({"name": "ada"})) }),
            &r.state(),
        )
        .await;
    assert_eq!(done.tool_json()["content"]["name"], "ada");

    // A retry without the answer is asked again, under the same key, still keeping nothing.
    let again = alice
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            json!({}),
            &r.state(),
        )
        .await;
    assert_eq!(again.input_keys(), vec![key.clone()]);
    assert_eq!(gw.parked(), 0);
    // Each replay round cancels its upstream run, then answers the question that run asked
    // as an abandoned call does; let both cancellations and both answers land first.
    let cancelled = |log: &[Value]| {
        log.iter()
            .filter(|m| m["method"] == "notifications/cancelled")
            .count()
    };
    let let_go = |log: &[Value]| {
        log.iter()
            .filter(|m| m["result"] == json!({"action": "cancel"}))
            .count()
    };
    gw.wait_log(10, "both rounds cancelled upstream and let go", |log| {
        cancelled(log) >= 2 && let_go(log) >= 2
    })
    .await;

    // The same replay state for bob, or for other arguments: refused, nothing upstream.
    let before = gw.backend_received().len();
    let bob = gw.client().with_principal("bob");
    let answer = json!({ key.clone(): accept(json!({"name": "ada"})) });
    let r2 = bob
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            answer.clone(),
            &r.state(),
        )
        .await;
    assert_frozen(&r2);
    let r3 = alice
        .retry_tool(
            "ask_form",
            json!({"message": "n"}),
            &caps(),
            answer,
            &r.state(),
        )
        .await;
    assert_frozen(&r3);
    assert_eq!(gw.backend_received().len(), before);

    // A transcript whose answer is for a question the backend does not ask (first).
    let claims = Claims {
        park: ParkId::random(),
        owner: "elsewhere".into(),
        principal: alice_digest(),
        request: Bridge::request_digest("tools/call", &params("m")),
        round: 1,
        expires_at_ms: now_ms() + 60_000,
        outstanding: vec![],
        owner_addr: None,
        replay: Some(Transcript {
            backend: "/mcp".into(),
            next_key: 1,
            turns: vec![Turn {
                key: "elicitation-1".into(),
                method: "elicitation/create".into(),
                ask: seal::digest(b"a question nobody asks"),
                answer: Some(accept(json!({"name": "leaked"}))),
            }],
        }),
    };
    let forged = fleet.ring().seal(&claims);
    let cancelled_before = cancelled(&gw.backend_received());
    let r = alice
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            json!({}),
            &forged,
        )
        .await;
    assert_eq!(r.error_code(), -31001, "{:#}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("backend `fixture` asked for different input than before, so this call cannot be replayed"),
        "{:#}",
        r.body
    );
    gw.wait_log(10, "the backend hears the call cancelled", |log| {
        cancelled(log) > cancelled_before
    })
    .await;
    assert!(
        !gw.backend_received()
            .iter()
            .any(|m| m.to_string().contains("leaked")),
        "the mismatched answer never reached the backend"
    );
    gw.stop().await;
}

#[tokio::test]
async fn over_the_transcript_limit_a_replayed_call_is_held() {
    let fleet = Fleet::new();
    let gw = fleet
        .replica("a", "max_transcript_bytes = 10", "replay = \"replay\"\n")
        .await;
    let alice = gw.client().with_principal("alice");
    let r = alice
        .call_tool("ask_form", json!({"message": "m"}), &caps())
        .await;
    assert_eq!(gw.parked(), 1, "held instead");
    let key = r.key_for("elicitation/create");
    let done = alice
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            json!({ key: accept(json!({"name": "ada"})) }),
            &r.state(),
        )
        .await;
    assert_eq!(done.tool_json()["content"]["name"], "ada");
    gw.stop().await;
}

#[tokio::test]
async fn auto_replays_annotated_tools_and_per_tool_settings_win() {
    let fleet = Fleet::new();
    let gw = fleet
        .replica(
            "a",
            "",
            "replay = \"auto\"\nreplay_tools = { ask_form = \"hold\" }\n",
        )
        .await;
    let alice = gw.client().with_principal("alice");
    // two_step is annotated idempotent: replayed.
    let r = alice
        .call_tool("two_step", json!({"tag": "t"}), &caps())
        .await;
    r.state();
    assert_eq!(gw.parked(), 0);
    // ask_form is read-only too, but configured to hold.
    let r = alice
        .call_tool("ask_form", json!({"message": "m"}), &caps())
        .await;
    r.state();
    assert_eq!(gw.parked(), 1);
    gw.wait_log(10, "tool annotations fetched", |log| {
        log.iter().filter(|m| m["method"] == "tools/list").count() == 1
    })
    .await;
    // Fetched before the first call went out: a backend that serves one request at a time
    // would not answer it while that call waits for input.
    let methods: Vec<Value> = gw
        .backend_received()
        .iter()
        .map(|m| m["method"].clone())
        .filter(|m| m == "tools/list" || m == "tools/call")
        .collect();
    assert_eq!(methods.first(), Some(&json!("tools/list")), "{methods:?}");
    gw.stop().await;
}

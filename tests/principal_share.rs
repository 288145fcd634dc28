//! One principal's parked calls against the rest of a backend's pool, end to end: two clients
//! with different `Authorization` headers (two principals) on one gateway, on real sockets, in
//! front of the built-in legacy server as a stdio backend with a small pool. A principal's
//! calls that can ask for input hold at most its share of the sessions (`principal_sessions`),
//! and calls that need no input always find room (`reserved_sessions`).

mod common;

use common::{Client, Gateway, Options, Reply};
use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;

/// The backend's pool: its default share per principal is a quarter of it (one session).
const POOL_MAX: usize = 4;

/// Far longer than any wait of this test, so a call that queues for a session shows as one that
/// does not answer in time.
const QUEUE_WAIT: &str = "30s";

/// How long the test waits for a reply that should come without queueing: well under
/// `QUEUE_WAIT`, so a call that waits for a session fails here instead.
const ANSWERED: Duration = Duration::from_secs(10);

async fn gateway(queue_wait: &str) -> Gateway {
    Gateway::with(Options {
        extra: format!("[limits]\nqueue_wait = \"{queue_wait}\"\n"),
        backend_extra: format!("pool_max = {POOL_MAX}\n"),
        ..Default::default()
    })
    .await
}

fn elicitation() -> Value {
    json!({"elicitation": {}})
}

/// The reply to `request`, or a failure naming `what` if it does not come within [`ANSWERED`].
async fn answered<T>(what: &str, request: impl Future<Output = T>) -> T {
    tokio::time::timeout(ANSWERED, request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in time (queued behind parked calls?)"))
}

async fn tools_list(c: &Client) -> Reply {
    c.send(&c.body("tools/list", json!({}), &json!({}))).await
}

/// Starts `n` calls of principal `a` that each park on an elicitation, at once: those over its
/// share wait for a session meanwhile. Returns the parked ones' replies as they come.
fn park_many(a: &Client, n: usize) -> tokio::sync::mpsc::Receiver<Reply> {
    let (tx, rx) = tokio::sync::mpsc::channel(n);
    for _ in 0..n {
        let (a, tx) = (a.clone(), tx.clone());
        tokio::spawn(async move {
            let reply = a.call_tool("ask_form", json!({}), &elicitation()).await;
            let _ = tx.send(reply).await;
        });
    }
    rx
}

#[tokio::test]
async fn one_principals_parked_calls_leave_the_backend_to_others() {
    let gw = gateway(QUEUE_WAIT).await;
    let a = gw.client().with_principal("alice");
    let b = gw.client().with_principal("bob");
    // Alice tries to take every session of the pool with calls waiting for input; her share
    // (one session) parks, the rest wait for a session of hers.
    let mut parked = park_many(&a, POOL_MAX);
    let first = answered("alice's first call", parked.recv())
        .await
        .expect("a reply");
    assert_eq!(first.result()["resultType"], "input_required");
    // Give the others the time to take sessions, if they could.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let list = answered("bob's tools/list", tools_list(&b)).await;
    assert!(list.result()["tools"].is_array(), "{:#}", list.body);
    let echo = answered(
        "bob's echo",
        b.call_tool("echo", json!({"text": "plain"}), &json!({})),
    )
    .await;
    assert_eq!(echo.tool_json(), json!({"echo": "plain"}));
    let interactive = answered(
        "bob's interactive echo",
        b.call_tool("echo", json!({"text": "asks"}), &elicitation()),
    )
    .await;
    assert_eq!(interactive.tool_json(), json!({"echo": "asks"}));
    // Alice's own calls that need no input still get a session.
    let mine = answered("alice's tools/list", tools_list(&a)).await;
    assert!(mine.result()["tools"].is_array(), "{:#}", mine.body);

    // Each answer frees Alice's session for the next of her calls, which waited for it.
    let mut next = first;
    for i in 1..=POOL_MAX {
        let done = answered("alice's retry", a.answer_ada(json!({}), &next)).await;
        assert_eq!(done.tool_json()["content"]["name"], "Ada");
        if i < POOL_MAX {
            next = answered("alice's next call", parked.recv())
                .await
                .expect("a reply");
        }
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_principal_past_its_share_is_told_its_own_parked_calls_are_why() {
    let gw = gateway("300ms").await;
    let a = gw.client().with_principal("alice");
    let b = gw.client().with_principal("bob");
    let held = answered(
        "alice's first call",
        a.call_tool("ask_form", json!({}), &elicitation()),
    )
    .await;
    assert_eq!(held.result()["resultType"], "input_required");

    let refused = answered(
        "alice's second call",
        a.call_tool("ask_form", json!({}), &elicitation()),
    )
    .await;
    assert_eq!(refused.status, 200);
    assert_eq!(refused.error_code(), -31000, "{:#}", refused.body);
    let message = refused.error_message();
    for part in [
        "backend `fixture`",
        "own calls",
        "parked",
        "hold 1 ",
        "principal_sessions",
    ] {
        assert!(message.contains(part), "no `{part}` in: {message}");
    }

    // Bob's call that waits for input is not refused for Alice's.
    let his = answered(
        "bob's call",
        b.call_tool("ask_form", json!({}), &elicitation()),
    )
    .await;
    assert_eq!(his.result()["resultType"], "input_required");
    for (who, c, first) in [("alice", &a, &held), ("bob", &b, &his)] {
        let done = answered(who, c.answer_ada(json!({}), first)).await;
        assert_eq!(done.tool_json()["content"]["name"], "Ada", "{who}");
    }
    gw.stop().await;
}

//! A child scripted over in-memory pipes: what the gateway writes to it is read here as lines,
//! what it answers is written back.

use super::child::{Child, ChildIo, Replies};
use super::*;
use crate::jsonrpc::{self, Id};
use crate::seal::Digest;
use serde_json::Map;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

/// The child's side of the pipes.
struct Script {
    lines: Lines<BufReader<DuplexStream>>,
    out: DuplexStream,
}

impl Script {
    async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), self.lines.next_line())
            .await
            .expect("the gateway writes in time")
            .expect("readable")
            .expect("a line");
        serde_json::from_str(&line).expect("JSON")
    }

    async fn write(&mut self, msg: Value) {
        let mut line = msg.to_string();
        line.push('\n');
        self.out.write_all(line.as_bytes()).await.expect("written");
    }
}

fn child() -> (Arc<Child>, Script) {
    child_with(1, Arc::new(Notify::new()))
}

fn child_with(index: u32, freed: Arc<Notify>) -> (Arc<Child>, Script) {
    let (gateway_in, child_out) = tokio::io::duplex(1 << 16);
    let (child_in, gateway_out) = tokio::io::duplex(1 << 16);
    let io = ChildIo {
        backend: "scripted".into(),
        index,
        write_queue: 8,
        max_message: 1 << 16,
        max_depth: 64,
        stop: CancellationToken::new(),
        freed,
        cancelled_logs: Duration::from_secs(30),
        tasks: TaskTracker::new(),
    };
    let child = Child::run(io, gateway_in, gateway_out);
    let script = Script {
        lines: BufReader::new(child_in).lines(),
        out: child_out,
    };
    (child, script)
}

fn params(meta: Value) -> Map<String, Value> {
    let Value::Object(p) = json!({"name": "t", "_meta": meta}) else {
        unreachable!()
    };
    p
}

async fn send(child: &Arc<Child>, id: Id, method: &str, params: &Map<String, Value>) -> Replies {
    send_as(child, id, method, params, None).await
}

async fn send_as(
    child: &Arc<Child>,
    id: Id,
    method: &str,
    params: &Map<String, Value>,
    principal: Option<&Digest>,
) -> Replies {
    let out = Outgoing {
        id: &id,
        method,
        params,
        headers: Vec::new(),
        authorization: None,
        child: None,
        principal,
    };
    child.request(&out).await.expect("sent")
}

async fn next(replies: &mut Replies) -> Value {
    let msg = tokio::time::timeout(Duration::from_secs(5), replies.next())
        .await
        .expect("an answer in time")
        .expect("not the end")
        .expect("not broken");
    msg.into_value()
}

#[tokio::test]
async fn clients_with_the_same_id_and_token_each_get_their_own_answers() {
    let (child, mut script) = child();
    let p = params(json!({"progressToken": "tok"}));
    let mut a = send(&child, Id::Number(7), "tools/call", &p).await;
    let mut b = send(&child, Id::Number(7), "tools/call", &p).await;
    let (first, second) = (script.read().await, script.read().await);
    assert_ne!(
        first["id"], second["id"],
        "each request has an id of its own"
    );
    assert_eq!(first["params"]["_meta"]["progressToken"], first["id"]);
    // Answered in the other order, with progress for each first.
    for req in [&second, &first] {
        let token = &req["params"]["_meta"]["progressToken"];
        script
            .write(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": req["id"]}}))
            .await;
        script
            .write(json!({"jsonrpc": "2.0", "id": req["id"],
                "result": {"resultType": "complete", "for": req["id"]}}))
            .await;
    }
    for (replies, req) in [(&mut a, &first), (&mut b, &second)] {
        let note = next(replies).await;
        assert_eq!(note["params"]["progressToken"], "tok", "the client's token");
        assert_eq!(note["params"]["progress"], req["id"]);
        let response = next(replies).await;
        assert_eq!(response["id"], 7, "the client's id");
        assert_eq!(response["result"]["for"], req["id"]);
        assert!(replies.next().await.is_none());
    }
}

#[tokio::test]
async fn an_answer_no_longer_wanted_is_cancelled_on_the_child() {
    let (child, mut script) = child();
    let replies = send(&child, Id::Number(1), "tools/call", &params(json!({}))).await;
    let req = script.read().await;
    drop(replies);
    let cancel = script.read().await;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    // Its late response goes nowhere, and the next request is served.
    script
        .write(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"resultType": "complete"}}))
        .await;
    let mut next_one = send(&child, Id::Number(2), "tools/list", &params(json!({}))).await;
    let req = script.read().await;
    script
        .write(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"resultType": "complete"}}))
        .await;
    assert_eq!(next(&mut next_one).await["id"], 2);
}

#[tokio::test]
async fn a_log_message_reaches_only_the_one_request_that_asked_for_logs() {
    let (child, mut script) = child();
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "hello"}});
    let mut quiet = send(&child, Id::Number(1), "tools/call", &params(json!({}))).await;
    let mut asking = send(
        &child,
        Id::Number(2),
        "tools/call",
        &params(json!({meta::LOG_LEVEL: "info"})),
    )
    .await;
    let (q, a) = (script.read().await, script.read().await);
    script.write(log.clone()).await;
    script
        .write(json!({"jsonrpc": "2.0", "id": q["id"], "result": {"resultType": "complete"}}))
        .await;
    script
        .write(json!({"jsonrpc": "2.0", "id": a["id"], "result": {"resultType": "complete"}}))
        .await;
    assert_eq!(next(&mut asking).await["params"]["data"], "hello");
    assert_eq!(next(&mut asking).await["id"], 2);
    assert_eq!(next(&mut quiet).await["id"], 1, "no log for the quiet one");
    // Two that ask: nothing ties the message to either, so neither gets it.
    let ask = params(json!({meta::LOG_LEVEL: "debug"}));
    let mut one = send(&child, Id::Number(3), "tools/call", &ask).await;
    let mut two = send(&child, Id::Number(4), "tools/call", &ask).await;
    let (r1, r2) = (script.read().await, script.read().await);
    script.write(log).await;
    for r in [&r1, &r2] {
        script
            .write(json!({"jsonrpc": "2.0", "id": r["id"], "result": {"resultType": "complete"}}))
            .await;
    }
    assert_eq!(next(&mut one).await["id"], 3);
    assert_eq!(next(&mut two).await["id"], 4);
}

#[tokio::test]
async fn a_listen_gets_its_events_under_its_own_id_and_completes_when_the_child_ends_it() {
    let (child, mut script) = child();
    let client_id = Id::String("listen-1".into());
    let mut listen = send(&child, client_id, protocol::LISTEN, &params(json!({}))).await;
    let req = script.read().await;
    script
        .write(
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {meta::SUBSCRIPTION_ID: req["id"]}}}),
        )
        .await;
    script
        .write(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": req["id"]}}),
        )
        .await;
    let event = next(&mut listen).await;
    assert_eq!(event["method"], "notifications/tools/list_changed");
    assert_eq!(event["params"]["_meta"][meta::SUBSCRIPTION_ID], "listen-1");
    let done = next(&mut listen).await;
    assert_eq!(done["id"], "listen-1");
    assert_eq!(done["result"]["resultType"], "complete");
}

#[tokio::test]
async fn a_child_that_exits_fails_what_waits_on_it_and_a_request_it_sends_is_refused() {
    let (child, mut script) = child();
    let mut waiting = send(&child, Id::Number(1), "tools/call", &params(json!({}))).await;
    let _ = script.read().await;
    script
        .write(json!({"jsonrpc": "2.0", "id": 99, "method": "roots/list"}))
        .await;
    let refusal = script.read().await;
    assert_eq!(refusal["id"], 99);
    assert_eq!(refusal["error"]["code"], jsonrpc::METHOD_NOT_FOUND);
    drop(script);
    let ended = tokio::time::timeout(Duration::from_secs(5), waiting.next())
        .await
        .expect("in time");
    assert_eq!(ended, Some(Err("the backend exited".into())));
    assert!(child.stop.is_cancelled());
    let out = Outgoing {
        id: &Id::Number(2),
        method: "tools/list",
        params: &Map::new(),
        headers: Vec::new(),
        authorization: None,
        child: None,
        principal: None,
    };
    let refused = child.request(&out).await.expect_err("an ended child");
    assert_eq!(refused.describe(), "the backend exited");
}

#[tokio::test]
async fn a_cancelled_requests_late_logs_never_reach_another_principal() {
    let (child, mut script) = child();
    let (alice, bob) = (crate::seal::digest(b"alice"), crate::seal::digest(b"bob"));
    let ask = params(json!({meta::LOG_LEVEL: "info"}));
    let cancelled = send_as(&child, Id::Number(1), "tools/call", &ask, Some(&alice)).await;
    let _ = script.read().await;
    drop(cancelled);
    assert_eq!(script.read().await["method"], "notifications/cancelled");
    assert!(!child.quiet_for(Some(&bob)) && child.quiet_for(Some(&alice)));
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "alice's, late"}});
    // Bob's request does not get it: it may be alice's cancelled request's.
    let mut bobs = send_as(&child, Id::Number(2), "tools/call", &ask, Some(&bob)).await;
    let req = script.read().await;
    script.write(log.clone()).await;
    script
        .write(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"resultType": "complete"}}))
        .await;
    assert_eq!(next(&mut bobs).await["id"], 2, "the response, and no log");
    // Alice's next request does: whichever of hers it was, it is hers.
    let mut alices = send_as(&child, Id::Number(3), "tools/call", &ask, Some(&alice)).await;
    let req = script.read().await;
    script.write(log).await;
    script
        .write(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"resultType": "complete"}}))
        .await;
    assert_eq!(next(&mut alices).await["params"]["data"], "alice's, late");
    assert_eq!(next(&mut alices).await["id"], 3);
}

/// Two scripted children in the slots of a `children = 2` backend.
fn two_children() -> (Children, Vec<Script>) {
    let config = crate::config::Config::parse(
        "[limits]\nqueue_wait = \"5s\"\n[[backend]]\nname = \"b\"\ncommand = \"/bin/sh\"\nchildren = 2\n",
        None,
    )
    .expect("config");
    let backend = &config.backends[0];
    let crate::config::Transport::Stdio(cfg) = &backend.transport else {
        unreachable!()
    };
    let children = Children::new(backend, cfg, &config.limits, CancellationToken::new());
    let mut scripts = Vec::new();
    for (i, slot) in children.slots.iter().enumerate() {
        let (c, script) = child_with(i as u32, children.freed.clone());
        *slot.try_lock().expect("free") = Some(c);
        scripts.push(script);
    }
    (children, scripts)
}

fn outgoing<'a>(id: &'a Id, params: &'a Map<String, Value>, child: Option<u32>) -> Outgoing<'a> {
    Outgoing {
        id,
        method: "tools/call",
        params,
        headers: Vec::new(),
        authorization: None,
        child,
        principal: None,
    }
}

#[tokio::test]
async fn requests_that_ask_for_logs_go_one_to_a_child_and_a_retry_waits_for_its_own() {
    let (children, mut scripts) = two_children();
    let ask = params(json!({meta::LOG_LEVEL: "info"}));
    let id = Id::Number(1);
    let first = children
        .send(&outgoing(&id, &ask, None))
        .await
        .expect("sent");
    let busy = first.child().expect("a child") as usize;
    let req = scripts[busy].read().await;
    // A new request that asks for logs goes to the other child, every time.
    for _ in 0..8 {
        assert_ne!(children.place(&outgoing(&id, &ask, None)).await, busy);
    }
    // A retry for the busy child waits until its request is answered.
    let pinned = outgoing(&id, &ask, Some(busy as u32));
    let retry = children.place(&pinned);
    tokio::pin!(retry);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut retry)
            .await
            .is_err(),
        "the retry waits while the child's request runs"
    );
    scripts[busy]
        .write(json!({"jsonrpc": "2.0", "id": req["id"], "result": {"resultType": "complete"}}))
        .await;
    let mut first = first;
    assert_eq!(next_message(&mut first).await["id"], 1);
    let placed = tokio::time::timeout(Duration::from_secs(5), retry)
        .await
        .expect("placed once the child is free");
    assert_eq!(placed, busy);
    // A request that asks for no logs is placed at once, wherever.
    let quiet = params(json!({}));
    let _ = children.place(&outgoing(&id, &quiet, None)).await;
}

async fn next_message(m: &mut super::super::Messages) -> Value {
    tokio::time::timeout(Duration::from_secs(5), m.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("not broken")
        .into_value()
}

//! The legacy face over real HTTP, in front of the built-in legacy server (a stdio child): an
//! `initialize` without the 2026-07-28 header opens a session with a sealed `Mcp-Session-Id`,
//! the backend's requests reach the client on the stream of the request they belong to (or
//! the GET stream), and every bad session id, unasked response and session past its limits is
//! refused.

mod common;
mod legacy_client;

use common::*;
use legacy_client::{Legacy, answers, caps, tool_text};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_session_carries_the_backends_requests_to_the_client_and_back() {
    let gw = Gateway::start().await;
    let mut c = Legacy::new(&gw.url);
    let (status, init) = c.initialize("2025-11-25", caps()).await;
    assert_eq!(status, 200, "{init:#}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(init["result"]["serverInfo"]["name"].is_string(), "{init:#}");
    let sid = c.session.clone().expect("a session id");
    assert!(sid.starts_with("s1."), "sealed: {sid}");

    let (list, _) = c.call(1, "tools/list", json!({}), answers).await;
    assert!(
        list["result"]["tools"].as_array().unwrap().len() > 5,
        "{list:#}"
    );

    let (echo, seen) = c
        .call(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
            answers,
        )
        .await;
    assert_eq!(echo["id"], 2);
    assert_eq!(tool_text(&echo), json!({"echo": "hi"}));
    assert!(seen.is_empty());

    let (asked, seen) = c
        .call(
            3,
            "tools/call",
            json!({"name": "all_three", "arguments": {}}),
            answers,
        )
        .await;
    assert_eq!(asked["id"], 3, "the response has the client's own id");
    let methods: Vec<&str> = seen.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(
        methods.len(),
        3,
        "three requests of the backend on the call's stream: {seen:#?}"
    );
    let got = tool_text(&asked);
    assert_eq!(got["elicit"]["content"]["name"], "Ada", "{got:#}");
    assert_eq!(got["sample"]["text"], "sampled by ada", "{got:#}");
    assert_eq!(got["roots"], json!(["file:///ada"]), "{got:#}");

    // The backend saw the client's own capabilities and version.
    let received = gw.backend_received();
    let init_up = received
        .iter()
        .find(|m| m["method"] == "initialize")
        .expect("initialize upstream");
    assert_eq!(init_up["params"]["capabilities"], caps());
    assert_eq!(init_up["params"]["clientInfo"]["name"], "legacy-test");

    let deleted = c.send("DELETE", None, &[]).await;
    assert_eq!(deleted.status, 200);
    let after = c
        .post(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}))
        .await;
    assert_eq!(after.status, 404, "a deleted session is gone");
    gw.stop().await;
}

#[tokio::test]
async fn each_version_is_negotiated_as_its_revision_says() {
    let gw = Gateway::start().await;
    for (asked, got) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        // A version the gateway does not speak as legacy gets the newest legacy one.
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let mut c = Legacy::new(&gw.url);
        let (status, init) = c.initialize(asked, json!({})).await;
        assert_eq!(status, 200, "{asked}: {init:#}");
        assert_eq!(init["result"]["protocolVersion"], got, "{asked}");
        let (echo, _) = c
            .call(
                1,
                "tools/call",
                json!({"name": "echo", "arguments": {"text": asked}}),
                answers,
            )
            .await;
        assert_eq!(tool_text(&echo), json!({"echo": asked}));
    }
    gw.stop().await;
}

#[tokio::test]
async fn forged_tampered_and_other_principals_session_ids_are_404_and_reach_nothing() {
    let gw = Gateway::with(Options {
        extra: "[principal]\nsource = \"authorization\"\n".into(),
        ..Default::default()
    })
    .await;
    let mut alice = Legacy::new(&gw.url).with_authorization("Bearer alice");
    alice.initialize("2025-11-25", caps()).await;
    let sid = alice.session.clone().expect("a session id");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "stolen"}}});

    let mut tampered = sid.clone().into_bytes();
    let at = tampered.len() - 5;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let other_form = format!("v1.{}", &sid[3..]);
    for (what, token, who) in [
        ("forged", "abc".to_owned(), "Bearer alice"),
        ("tampered", tampered, "Bearer alice"),
        ("another frame", other_form, "Bearer alice"),
        ("another principal's", sid.clone(), "Bearer mallory"),
        ("no principal's", sid.clone(), ""),
    ] {
        let mut c = Legacy::new(&gw.url);
        if !who.is_empty() {
            c = c.with_authorization(who);
        }
        c.session = Some(token);
        for method in ["POST", "GET", "DELETE"] {
            let body = (method == "POST").then_some(&call);
            let r = c.send(method, body, &[]).await;
            assert_eq!(r.status, 404, "{what} session id, {method}");
        }
    }
    let received = gw.backend_received();
    assert!(
        !received.iter().any(|m| m["method"] == "tools/call"),
        "nothing reached the backend: {received:#?}"
    );
    // The session itself is untouched: mallory's DELETE did not end it.
    let (echo, _) = alice
        .call(
            8,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "mine"}}),
            answers,
        )
        .await;
    assert_eq!(tool_text(&echo), json!({"echo": "mine"}));
    gw.stop().await;
}

#[tokio::test]
async fn a_response_to_a_request_never_sent_is_refused() {
    let gw = Gateway::start().await;
    let mut c = Legacy::new(&gw.url);
    c.initialize("2025-11-25", caps()).await;
    let stray = json!({"jsonrpc": "2.0", "id": 999, "result": {"action": "accept"}});
    let r = c.post(&stray).await;
    assert_eq!(r.status, 400);
    let body = r.json().await;
    assert_eq!(body["error"]["code"], -32600, "{body:#}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("999"),
        "{body:#}"
    );
    let received = gw.backend_received();
    assert!(
        !received.iter().any(|m| m["id"] == 999),
        "the stray response was not passed upstream: {received:#?}"
    );
    // An answer given twice: the second is refused too.
    let (_, seen) = c
        .call(
            1,
            "tools/call",
            json!({"name": "ask_form", "arguments": {}}),
            answers,
        )
        .await;
    let again = json!({"jsonrpc": "2.0", "id": seen[0]["id"], "result": {"action": "decline"}});
    assert_eq!(c.post(&again).await.status, 400);
    gw.stop().await;
}

#[tokio::test]
async fn sessions_past_their_limits_are_refused_until_one_ends() {
    let gw = Gateway::with(Options {
        extra: "[principal]\nsource = \"authorization\"\n[limits]\nmax_sessions_per_principal = 2\nmax_sessions_total = 3\n".into(),
        ..Default::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = Legacy::new(&gw.url).with_authorization("Bearer alice");
        let (status, init) = c.initialize("2025-11-25", json!({})).await;
        assert_eq!(status, 200, "{init:#}");
        held.push(c);
    }
    let mut third = Legacy::new(&gw.url).with_authorization("Bearer alice");
    let (_, refused) = third.initialize("2025-11-25", json!({})).await;
    assert!(third.session.is_none(), "no session past the limit");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("max_sessions_per_principal"),
        "{refused:#}"
    );

    let mut bob = Legacy::new(&gw.url).with_authorization("Bearer bob");
    assert_eq!(bob.initialize("2025-11-25", json!({})).await.0, 200);
    let mut carol = Legacy::new(&gw.url).with_authorization("Bearer carol");
    let (_, refused) = carol.initialize("2025-11-25", json!({})).await;
    assert!(carol.session.is_none());
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("max_sessions_total"), "{refused:#}");

    assert_eq!(held[0].send("DELETE", None, &[]).await.status, 200);
    let (status, init) = third.initialize("2025-11-25", json!({})).await;
    assert_eq!(status, 200, "a slot freed by DELETE: {init:#}");
    assert!(third.session.is_some());
    gw.stop().await;
}

#[tokio::test]
async fn the_get_stream_carries_what_belongs_to_no_request() {
    let gw = Gateway::with(Options {
        server_args: vec!["--roots-on-init".into()],
        ..Default::default()
    })
    .await;
    let mut c = Legacy::new(&gw.url);
    c.initialize("2025-11-25", caps()).await;
    let mut stream = c.send("GET", None, &[]).await;
    assert_eq!(stream.status, 200);
    assert_eq!(
        c.send("GET", None, &[]).await.status,
        409,
        "one GET stream at a time"
    );
    // The backend asked for roots right after its initialize, outside any request.
    let asked = stream.next().await.expect("the roots request");
    assert_eq!(asked["method"], "roots/list", "{asked:#}");
    let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result": roots(&["file:///early"])});
    assert_eq!(c.post(&reply).await.status, 202);
    let (listed, _) = c
        .call(
            1,
            "tools/call",
            json!({"name": "list_roots", "arguments": {}}),
            answers,
        )
        .await;
    assert_eq!(
        tool_text(&listed)["cachedRoots"],
        json!(["file:///early"]),
        "{listed:#}"
    );
    drop(stream);
    gw.stop().await;
}

#[tokio::test]
async fn an_idle_session_ends_and_its_client_is_told_to_initialize_again() {
    let gw = Gateway::with(Options {
        extra: "[limits]\nsession_idle = \"1s\"\n".into(),
        ..Default::default()
    })
    .await;
    let mut c = Legacy::new(&gw.url);
    c.initialize("2025-11-25", json!({})).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mut status = 200;
    // Each request is activity: ask less often than the session may idle.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        status = c.post(&list).await.status;
        if status == 404 {
            break;
        }
    }
    assert_eq!(status, 404, "the idle session ended");
    let (_, again) = c.initialize("2025-11-25", json!({})).await;
    assert_eq!(again["result"]["protocolVersion"], "2025-11-25");
    gw.stop().await;
}

#[tokio::test]
async fn a_2025_03_26_session_takes_batches_and_later_versions_do_not() {
    let gw = Gateway::start().await;
    let mut c = Legacy::new(&gw.url);
    c.initialize("2025-03-26", json!({})).await;
    let echo = |id: u64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}}})
    };
    let batch = json!([echo(1, "one"), {"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "t", "progress": 1}}, echo(2, "two")]);
    let mut stream = c.post(&batch).await;
    assert_eq!(stream.status, 200);
    let mut got = std::collections::BTreeMap::new();
    while let Some(msg) = stream.next().await {
        got.insert(msg["id"].as_u64().unwrap(), tool_text(&msg));
    }
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[&1], json!({"echo": "one"}));
    assert_eq!(got[&2], json!({"echo": "two"}));
    // Notifications alone: accepted.
    let notes = json!([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]);
    assert_eq!(c.post(&notes).await.status, 202);

    let mut later = Legacy::new(&gw.url);
    later.initialize("2025-06-18", json!({})).await;
    let r = later.post(&json!([echo(1, "one"), echo(2, "two")])).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json().await["error"]["code"], -32600);
    gw.stop().await;
}

#[tokio::test]
async fn a_stream_let_go_before_its_response_is_resumed_with_last_event_id() {
    let gw = Gateway::start().await;
    let mut c = Legacy::new(&gw.url);
    c.initialize("2025-11-25", caps()).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ask_form", "arguments": {}}});
    let mut stream = c.post(&call).await;
    let asked = stream.next().await.expect("the elicitation");
    assert_eq!(asked["method"], "elicitation/create");
    let event_id = stream.last_event_id.clone().expect("events carry ids");
    // The client loses the stream, then answers the elicitation.
    drop(stream);
    let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result":
        {"action": "accept", "content": {"name": "Ada"}}});
    assert_eq!(c.post(&reply).await.status, 202);
    let mut resumed = c.send("GET", None, &[("last-event-id", &event_id)]).await;
    assert_eq!(resumed.status, 200);
    let response = resumed
        .next()
        .await
        .expect("the response, on the resumed stream");
    assert_eq!(response["id"], 1, "{response:#}");
    assert_eq!(tool_text(&response)["content"]["name"], "Ada");
    // Resumed again from the same event: what was sent after it is sent again.
    let mut again = c.send("GET", None, &[("last-event-id", &event_id)]).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.next().await.expect("the response again")["id"], 1);
    gw.stop().await;
}

//! Park expiry with paused time: the engine driven directly, the built-in legacy server on
//! in-memory pipes (so no real socket or child keeps the clock from jumping).

use mrtr_gateway::bridge::{Bridge, Reply, Request};
use mrtr_gateway::config::{Config, Transport};
use mrtr_gateway::protocol::meta::RequestMeta;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tracing::Span;

fn request(name: &str, caps: Value) -> Request {
    let params = json!({"name": name, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    }});
    Request {
        id: None,
        method: "tools/call".into(),
        meta: RequestMeta::from_params(Some(&params)).expect("meta"),
        params: params.as_object().expect("object").clone(),
        principal: mrtr_gateway::seal::digest(b"tester"),
        authorization: None,
        param_headers: Default::default(),
    }
}

fn log_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["dir"] == "in")
        .map(|e| e["msg"].clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn abandoned_park_cancels_upstream_releases_the_session_and_frees_the_entry() {
    let dir = std::env::temp_dir().join(format!("mrtr-expiry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("backend.log");
    let _ = std::fs::remove_file(&log);
    let mut config = Config::parse(
        "[state]\npark_ttl = \"30s\"\n[[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
        None,
    )
    .expect("config");
    config.backends[0].transport = Transport::Builtin(mrtr_fixture::Options {
        log: Some(log.clone()),
        ..Default::default()
    });
    let bridge = Bridge::new(Arc::new(config));

    let mut rx = bridge.handle(
        0,
        request("ask_form", json!({"elicitation": {}})),
        Span::none(),
    );
    let Some(Reply::Done(Ok(first))) = rx.recv().await else {
        panic!("no first round")
    };
    let first = first.into_value().expect("a result");
    assert_eq!(first["resultType"], "input_required");
    assert_eq!(bridge.parked(), 1);
    assert_eq!(bridge.pool(0).open_sessions(), 1);
    let call_id = log_lines(&log)
        .into_iter()
        .find(|m| m["method"] == "tools/call")
        .expect("call reached backend")["id"]
        .clone();

    // Nobody retries. Past the deadline (and the wind-down grace) everything is let go.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let mut done = false;
    for _ in 0..200 {
        let msgs = log_lines(&log);
        let cancelled_answer = msgs.iter().any(|m| m["result"]["action"] == "cancel");
        let cancelled_call = msgs.iter().any(|m| {
            m["method"] == "notifications/cancelled" && m["params"]["requestId"] == call_id
        });
        if cancelled_answer
            && cancelled_call
            && bridge.parked() == 0
            && bridge.pool(0).open_sessions() == 0
        {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        done,
        "after expiry: parked={} sessions={} log={:#?}",
        bridge.parked(),
        bridge.pool(0).open_sessions(),
        log_lines(&log)
    );
    bridge
        .close(tokio::time::Instant::now() + Duration::from_secs(1))
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_before_the_deadline_still_completes() {
    let config = Config::parse(
        "[state]\npark_ttl = \"30s\"\n[[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
        None,
    )
    .expect("config");
    let bridge = Bridge::new(Arc::new(config));
    let mut rx = bridge.handle(
        0,
        request("ask_form", json!({"elicitation": {}})),
        Span::none(),
    );
    let Some(Reply::Done(Ok(first))) = rx.recv().await else {
        panic!("no first round")
    };
    let first = first.into_value().expect("a result");
    tokio::time::sleep(Duration::from_secs(29)).await;
    let key = first["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let mut retry = request("ask_form", json!({"elicitation": {}}));
    retry
        .params
        .insert("requestState".into(), first["requestState"].clone());
    retry.params.insert(
        "inputResponses".into(),
        json!({ key: {"action": "accept", "content": {"name": "late"}} }),
    );
    let mut rx = bridge.handle(0, retry, Span::none());
    let Some(Reply::Done(Ok(done))) = rx.recv().await else {
        panic!("no final result")
    };
    let done = done.into_value().expect("a result");
    assert_eq!(done["resultType"], "complete", "{done:#}");
    assert_eq!(bridge.parked(), 0);
    bridge
        .close(tokio::time::Instant::now() + Duration::from_secs(1))
        .await;
}

//! `Mcp-Param-{Name}` headers checked against the body (2026-07-28 Streamable HTTP, "Custom
//! Headers from Tool Parameters" and "Server Validation"), end to end: the fixture's `mirrored`
//! tool declares `x-mcp-header` on `region`, `shard`, `dry_run` and `target.tenant`; `echo`
//! declares none.

mod common;

use base64::Engine;
use bytes::Bytes;
use common::{Client, Gateway, MODERN, Reply};
use serde_json::{Value, json};

/// A `tools/call` of `name` with the conforming standard headers and `params` as given.
async fn call(client: &Client, name: &str, args: Value, params: &[(&str, &str)]) -> Reply {
    let body = client.body(
        "tools/call",
        json!({"name": name, "arguments": args}),
        &json!({}),
    );
    post(client, &body, params).await
}

/// Posts a `tools/call` body with the conforming standard headers and `params` as given.
async fn post(client: &Client, body: &Value, params: &[(&str, &str)]) -> Reply {
    let name = body["params"]["name"].as_str().expect("a tool name");
    let mut headers = vec![
        ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
        ("Mcp-Method".to_owned(), "tools/call".to_owned()),
        ("Mcp-Name".to_owned(), name.to_owned()),
    ];
    headers.extend(
        params
            .iter()
            .map(|(k, v)| (format!("Mcp-Param-{k}"), (*v).to_owned())),
    );
    let bytes = serde_json::to_vec(body).expect("serialize");
    client.post_raw("POST", Bytes::from(bytes), &headers).await
}

fn base64(text: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
    format!("=?base64?{encoded}?=")
}

/// The refusal 2026-07-28 asks for: 400 with -32020, naming the header.
fn assert_mismatch(reply: &Reply, header: &str) {
    assert_eq!(reply.status, 400, "{:#}", reply.body);
    assert_eq!(reply.error_code(), -32020, "{:#}", reply.body);
    assert!(
        reply.error_message().contains(header),
        "names {header}: {:#}",
        reply.body
    );
}

/// `tools/call` requests of `tool` the backend received.
fn calls_of(gw: &Gateway, tool: &str) -> usize {
    gw.backend_received()
        .iter()
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == tool)
        .count()
}

fn methods_received(gw: &Gateway, method: &str) -> usize {
    gw.backend_received()
        .iter()
        .filter(|m| m["method"] == method)
        .count()
}

#[tokio::test]
async fn matching_headers_pass_in_every_form_the_spec_allows() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let args = json!({
        "region": "Zürich",
        "shard": 42,
        "dry_run": true,
        "target": {"tenant": "acme"},
        "query": "not mirrored",
    });
    let region = base64("Zürich");
    let headers = [
        ("Region", region.as_str()),
        // Integers compare as numbers.
        ("Shard", "42.0"),
        ("Dry-Run", "true"),
        // Header names are case-insensitive.
        ("TENANT", "acme"),
    ];
    let r = call(&c, "mirrored", args.clone(), &headers).await;
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.tool_json(), json!({"arguments": args}));

    // An argument absent (or null) from the body needs no header.
    let r = call(
        &c,
        "mirrored",
        json!({"region": "eu", "shard": null}),
        &[("Region", "eu")],
    )
    .await;
    assert_eq!(r.status, 200, "{:#}", r.body);
    gw.stop().await;
}

#[tokio::test]
async fn a_missing_header_is_refused_before_the_backend_sees_the_call() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = call(&c, "mirrored", json!({"region": "eu"}), &[]).await;
    assert_mismatch(&r, "Mcp-Param-Region");
    let r = call(
        &c,
        "mirrored",
        json!({"region": "eu", "target": {"tenant": "acme"}}),
        &[("Region", "eu")],
    )
    .await;
    assert_mismatch(&r, "Mcp-Param-Tenant");
    assert_eq!(calls_of(&gw, "mirrored"), 0);
    gw.stop().await;
}

#[tokio::test]
async fn a_malformed_header_is_refused() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let args = json!({"region": "Hello"});
    // "Hello" is SGVsbG8= : first without its padding, then with a character base64 lacks.
    for bad in [
        "=?base64?SGVsbG8?=",
        "=?base64?SGV$bG8=?=",
        "=?base64?/w==?=",
    ] {
        let r = call(&c, "mirrored", args.clone(), &[("Region", bad)]).await;
        assert_mismatch(&r, "Mcp-Param-Region");
    }
    assert_eq!(calls_of(&gw, "mirrored"), 0);
    let r = call(&c, "mirrored", args, &[("Region", "=?base64?SGVsbG8=?=")]).await;
    assert_eq!(r.status, 200, "{:#}", r.body);
    gw.stop().await;
}

/// Arguments, the `Mcp-Param-*` headers sent with them, and the header a refusal names.
type Case = (Value, &'static [(&'static str, &'static str)], &'static str);

#[tokio::test]
async fn a_header_that_does_not_match_the_body_is_refused() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let cases: [Case; 5] = [
        (
            json!({"region": "eu"}),
            &[("Region", "us")],
            "Mcp-Param-Region",
        ),
        // Values are case-sensitive.
        (
            json!({"region": "eu"}),
            &[("Region", "EU")],
            "Mcp-Param-Region",
        ),
        (
            json!({"region": "eu", "shard": 7}),
            &[("Region", "eu"), ("Shard", "8")],
            "Mcp-Param-Shard",
        ),
        (
            json!({"region": "eu", "dry_run": false}),
            &[("Region", "eu"), ("Dry-Run", "False")],
            "Mcp-Param-Dry-Run",
        ),
        // A header for an argument the body does not carry matches nothing.
        (
            json!({"region": "eu"}),
            &[("Region", "eu"), ("Tenant", "acme")],
            "Mcp-Param-Tenant",
        ),
    ];
    for (args, headers, named) in cases {
        let r = call(&c, "mirrored", args, headers).await;
        assert_mismatch(&r, named);
    }
    assert_eq!(calls_of(&gw, "mirrored"), 0);
    gw.stop().await;
}

#[tokio::test]
async fn a_tool_without_annotations_needs_no_header_and_ignores_others() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = call(&c, "echo", json!({"text": "hi"}), &[]).await;
    assert_eq!(r.tool_json(), json!({"echo": "hi"}));
    // Mcp-Param headers no annotation declares are not the gateway's to judge.
    let r = call(
        &c,
        "echo",
        json!({"text": "hi"}),
        &[("Region", "=?base64?!?=")],
    )
    .await;
    assert_eq!(r.tool_json(), json!({"echo": "hi"}));
    gw.stop().await;
}

#[tokio::test]
async fn the_clients_own_tools_list_fills_the_annotations() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let list = c.send(&c.body("tools/list", json!({}), &json!({}))).await;
    assert!(list.result()["tools"].is_array());
    let r = call(&c, "mirrored", json!({"region": "eu"}), &[]).await;
    assert_mismatch(&r, "Mcp-Param-Region");
    let r = call(&c, "mirrored", json!({"region": "eu"}), &[("Region", "eu")]).await;
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(
        methods_received(&gw, "tools/list"),
        1,
        "the gateway asked for no list of its own"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_retry_is_checked_as_its_first_request_was() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let args = json!({"region": "eu", "confirm": true});
    let caps = json!({"elicitation": {}});
    let first = c.body(
        "tools/call",
        json!({"name": "mirrored", "arguments": args}),
        &caps,
    );
    let asked = post(&c, &first, &[("Region", "eu")]).await;
    let key = asked.key_for("elicitation/create");
    let retry = |state: &str| {
        let params = json!({
            "name": "mirrored",
            "arguments": args,
            "inputResponses": {key.clone(): common::accept(json!({"name": "Ada"}))},
            "requestState": state,
        });
        c.body("tools/call", params, &caps)
    };
    let state = asked.state();
    let r = post(&c, &retry(&state), &[("Region", "us")]).await;
    assert_mismatch(&r, "Mcp-Param-Region");
    let r = post(&c, &retry(&state), &[]).await;
    assert_mismatch(&r, "Mcp-Param-Region");
    assert_eq!(gw.parked(), 1, "the refused retries left the call parked");
    let done = post(&c, &retry(&state), &[("Region", "eu")]).await;
    assert_eq!(done.tool_json(), json!({"arguments": args}));
    gw.stop().await;
}

/// Calls that find no tool list kept, all at once, share one fetch: the backend is asked for
/// its list once, not once per call (parked calls started together would each have fetched).
/// The principal's sessions are started first (by prompts, which fetch no list), so the calls
/// lease them at once and all look for the list at the same time.
#[tokio::test]
async fn first_calls_at_once_share_one_fetch_of_the_tool_list() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let greet = json!({"name": "greet", "arguments": {"greeting": "Hi"}});
    let parked = (0..4).map(|_| {
        let body = c.body("prompts/get", greet.clone(), &caps);
        let c = &c;
        async move { c.send(&body).await }
    });
    for asked in futures_util::future::join_all(parked).await {
        let key = asked.key_for("elicitation/create");
        let mut retry = greet.clone();
        retry["inputResponses"] = json!({ key: common::accept(json!({"name": "Kim"})) });
        retry["requestState"] = json!(asked.state());
        let done = c.send(&c.body("prompts/get", retry, &caps)).await;
        assert_eq!(done.result()["messages"][0]["content"]["text"], "Hi, Kim");
    }
    assert_eq!(methods_received(&gw, "tools/list"), 0);
    let args = json!({"region": "eu", "confirm": true});
    let asks = (0..4).map(|_| {
        let body = c.body(
            "tools/call",
            json!({"name": "mirrored", "arguments": args}),
            &caps,
        );
        let c = &c;
        async move { post(c, &body, &[("Region", "eu")]).await }
    });
    for asked in futures_util::future::join_all(asks).await {
        asked.key_for("elicitation/create");
    }
    assert_eq!(methods_received(&gw, "tools/list"), 1);
    gw.stop().await;
}

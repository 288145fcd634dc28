//! The 2026-07-28 face: every validation error, over real HTTP, with status and JSON-RPC code;
//! and the cap on the connections one client address may hold.

mod common;

use bytes::Bytes;
use common::*;
use serde_json::{Value, json};

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn call_body(c: &Client, name: &str) -> Value {
    c.body(
        "tools/call",
        json!({"name": name, "arguments": {"text": "x"}}),
        &json!({}),
    )
}

async fn post(c: &Client, body: &Value, headers: &[(&str, &str)]) -> Reply {
    c.post_raw(
        "POST",
        Bytes::from(serde_json::to_vec(body).unwrap()),
        &h(headers),
    )
    .await
}

fn expect(r: &Reply, status: u16, code: i64) {
    assert_eq!(r.status, status, "{:#}", r.body);
    assert_eq!(r.error_code(), code, "{:#}", r.body);
}

const V: (&str, &str) = ("MCP-Protocol-Version", "2026-07-28");
const M: (&str, &str) = ("Mcp-Method", "tools/call");
const N: (&str, &str) = ("Mcp-Name", "echo");

#[tokio::test]
async fn header_mismatches_are_400_with_header_mismatch() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let b = call_body(&c, "echo");
    expect(&post(&c, &b, &[M, N]).await, 400, -32020);
    expect(&post(&c, &b, &[V, N]).await, 400, -32020);
    expect(
        &post(&c, &b, &[V, ("Mcp-Method", "tools/list"), N]).await,
        400,
        -32020,
    );
    expect(&post(&c, &b, &[V, M]).await, 400, -32020);
    expect(
        &post(&c, &b, &[V, M, ("Mcp-Name", "other")]).await,
        400,
        -32020,
    );
    let read = c.body(
        "resources/read",
        json!({"uri": "fixture://info"}),
        &json!({}),
    );
    expect(
        &post(
            &c,
            &read,
            &[
                V,
                ("Mcp-Method", "resources/read"),
                ("Mcp-Name", "fixture://other"),
            ],
        )
        .await,
        400,
        -32020,
    );
    // The base64 form is decoded before comparing.
    let ok = post(&c, &b, &[V, M, ("Mcp-Name", "=?base64?ZWNobw==?=")]).await;
    assert_eq!(ok.tool_json(), json!({"echo": "x"}));
    gw.stop().await;
}

#[tokio::test]
async fn repeated_headers_are_refused_not_read_by_their_first_copy() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let b = call_body(&c, "echo");
    // The first copy of each matches the body; a proxy reading the second would see another call.
    for second in [
        ("MCP-Protocol-Version", "2025-06-18"),
        ("Mcp-Method", "tools/list"),
        ("Mcp-Name", "delete_everything"),
    ] {
        let r = post(&c, &b, &[V, M, N, second]).await;
        expect(&r, 400, -32020);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("appears more than once"),
            "{:#}",
            r.body
        );
    }
    let auth = ("Authorization", "Bearer alice");
    let r = post(
        &c,
        &b,
        &[V, M, N, auth, ("Authorization", "Bearer mallory")],
    )
    .await;
    expect(&r, 400, -32600);
    // One copy of each is served.
    let ok = post(&c, &b, &[V, M, N, auth]).await;
    assert_eq!(ok.tool_json(), json!({"echo": "x"}));
    gw.stop().await;
}

#[tokio::test]
async fn missing_meta_fields_are_400_invalid_params() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let mut b = call_body(&c, "echo");
    b["params"].as_object_mut().unwrap().remove("_meta");
    expect(&post(&c, &b, &[V, M, N]).await, 400, -32602);
    let mut b = call_body(&c, "echo");
    b["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    expect(&post(&c, &b, &[V, M, N]).await, 400, -32602);
    let mut b = call_body(&c, "echo");
    b["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");
    expect(&post(&c, &b, &[V, M, N]).await, 400, -32602);
    gw.stop().await;
}

#[tokio::test]
async fn an_unsupported_version_lists_the_supported_ones() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let mut b = call_body(&c, "echo");
    b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let r = post(&c, &b, &[("MCP-Protocol-Version", "2099-01-01"), M, N]).await;
    expect(&r, 400, -32022);
    assert_eq!(
        r.body["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2099-01-01"})
    );
    // A legacy client's header is answered the same way, whatever its body holds.
    let b = call_body(&c, "echo");
    let r = post(&c, &b, &[("MCP-Protocol-Version", "2025-11-25"), M, N]).await;
    expect(&r, 400, -32022);
    assert_eq!(r.body["error"]["data"]["requested"], "2025-11-25");
    gw.stop().await;
}

#[tokio::test]
async fn unknown_and_legacy_only_methods_are_404_method_not_found() {
    let gw = Gateway::start().await;
    let c = gw.client();
    for method in ["foo/bar", "initialize", "ping", "logging/setLevel"] {
        let b = c.body(method, json!({}), &json!({}));
        expect(
            &post(&c, &b, &[V, ("Mcp-Method", method)]).await,
            404,
            -32601,
        );
        // Without `_meta` too: the method is decided first.
        let bare = json!({"jsonrpc": "2.0", "id": 2, "method": method});
        expect(
            &post(&c, &bare, &[V, ("Mcp-Method", method)]).await,
            404,
            -32601,
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn get_and_delete_are_405() {
    let gw = Gateway::start().await;
    let c = gw.client();
    for method in ["GET", "DELETE"] {
        let r = c.post_raw(method, Bytes::new(), &[]).await;
        assert_eq!(r.status, 405);
        assert_eq!(r.headers.get("allow").unwrap(), "POST");
    }
    gw.stop().await;
}

#[tokio::test]
async fn foreign_origins_are_403_and_loopback_origins_pass() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let b = call_body(&c, "echo");
    assert_eq!(
        post(&c, &b, &[V, M, N, ("Origin", "https://evil.example")])
            .await
            .status,
        403
    );
    let ok = post(&c, &b, &[V, M, N, ("Origin", "http://localhost:1234")]).await;
    assert_eq!(ok.tool_json(), json!({"echo": "x"}));
    // Checked before anything else: a foreign page's GET is 403, not 405.
    let evil = [("Origin".to_owned(), "https://evil.example".to_owned())];
    let r = c.post_raw("GET", Bytes::new(), &evil).await;
    assert_eq!(r.status, 403);
    gw.stop().await;
}

#[tokio::test]
async fn session_headers_are_ignored_and_never_minted() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let b = call_body(&c, "echo");
    let r = post(
        &c,
        &b,
        &[V, M, N, ("Mcp-Session-Id", "abc"), ("Last-Event-ID", "7")],
    )
    .await;
    assert_eq!(r.tool_json(), json!({"echo": "x"}));
    assert!(r.headers.get("mcp-session-id").is_none());
    gw.stop().await;
}

#[tokio::test]
async fn notifications_are_202_and_client_responses_are_invalid_requests() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = post(
        &c,
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}),
        &[V],
    )
    .await;
    assert_eq!(r.status, 202);
    assert!(r.body.is_null());
    expect(
        &post(&c, &json!({"jsonrpc": "2.0", "id": 1, "result": {}}), &[V]).await,
        400,
        -32600,
    );
    gw.stop().await;
}

#[tokio::test]
async fn malformed_and_misshapen_bodies_get_precise_errors() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let raw = |s: &'static str| c.post_raw("POST", Bytes::from_static(s.as_bytes()), &[]);
    let r = raw("{nope").await;
    expect(&r, 400, -32700);
    // No id could be read: the error has none (2026-07-28's schema has no null id).
    assert!(r.body.get("id").is_none(), "{:#}", r.body);
    for bad in [
        r#"{"id":1,"method":"m"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":3}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":"s"}"#,
    ] {
        expect(&raw(bad).await, 400, -32600);
    }
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"a\":{}{}}}}}",
        "[".repeat(100),
        "]".repeat(100)
    );
    expect(
        &c.post_raw("POST", Bytes::from(deep), &[]).await,
        400,
        -32700,
    );
    let big = vec![b' '; (1 << 20) + 10];
    assert_eq!(c.post_raw("POST", Bytes::from(big), &[]).await.status, 413);
    gw.stop().await;
}

#[tokio::test]
async fn mrtr_fields_on_the_wrong_request_are_invalid_params() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let list = c.body(
        "tools/list",
        json!({"inputResponses": {}, "requestState": "x"}),
        &json!({}),
    );
    let r = c.send(&list).await;
    assert_eq!(r.error_code(), -32602);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tools/list")
    );
    let orphan = c.body(
        "tools/call",
        json!({"name": "echo", "arguments": {}, "inputResponses": {}}),
        &json!({}),
    );
    assert_eq!(c.send(&orphan).await.error_code(), -32602);
    gw.stop().await;
}

#[tokio::test]
async fn answers_of_the_wrong_shape_leave_the_park_undisturbed() {
    let gw = Gateway::start().await;
    let c = gw.client();
    for (tool, caps, bad, good) in [
        (
            "ask_form",
            json!({"elicitation": {}}),
            json!({"action": "maybe"}),
            accept(json!({"name": "Z"})),
        ),
        (
            "list_roots",
            json!({"roots": {}}),
            json!({}),
            roots(&["file:///z"]),
        ),
    ] {
        let r = c.call_tool(tool, json!({}), &caps).await;
        let key = r.input_keys()[0].clone();
        let wrong = c
            .retry_tool(
                tool,
                json!({}),
                &caps,
                json!({ key.clone(): bad }),
                &r.state(),
            )
            .await;
        assert_eq!(wrong.error_code(), -32602);
        assert!(
            wrong.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&key),
            "{:#}",
            wrong.body
        );
        assert_eq!(gw.parked(), 1);
        let done = c
            .retry_tool(tool, json!({}), &caps, json!({ key: good }), &r.state())
            .await;
        assert_eq!(done.result()["resultType"], "complete");
    }
    assert_eq!(gw.parked(), 0);
    gw.stop().await;
}

/// A connection to `to` from the loopback address `from` (any of 127.0.0.0/8).
async fn connect_from(from: &str, to: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    let local = format!("{from}:0").parse().expect("a local address");
    socket.bind(local).expect("bind the client's address");
    socket.connect(to).await.expect("connect to the gateway")
}

/// Whether the gateway closes `stream`, which has sent nothing, within a bounded wait.
async fn closed_by_the_gateway(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    let read = stream.read(&mut buf);
    match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Err(_) => false,
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(n)) => panic!(
            "the gateway wrote to a connection that sent nothing: {}",
            String::from_utf8_lossy(&buf[..n])
        ),
    }
}

/// `tools/list` over a connection from the loopback address `from`: its status and body.
async fn tools_list_from(from: &str, gw: &Gateway) -> (u16, Value) {
    use http_body_util::BodyExt;
    let to = gw.running.as_ref().expect("running").local_addr();
    let stream = connect_from(from, to).await;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("http handshake");
    tokio::spawn(conn);
    let c = gw.client();
    let body = serde_json::to_vec(&c.body("tools/list", json!({}), &json!({}))).unwrap();
    let path: http::Uri = gw.url.parse().expect("url");
    let req = http::Request::post(path.path())
        .header("host", to.to_string())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header(V.0, V.1)
        .header("Mcp-Method", "tools/list")
        .body(http_body_util::Full::new(Bytes::from(body)))
        .expect("request");
    let wait = std::time::Duration::from_secs(60);
    let resp = tokio::time::timeout(wait, sender.send_request(req))
        .await
        .expect("answered in time")
        .expect("response");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).expect("a JSON body"))
}

#[tokio::test]
async fn one_address_cannot_take_every_connection_and_another_is_still_served() {
    // The default cap: a sixteenth of the default server.max_connections (1024).
    const PER_ADDRESS: usize = 64;
    let gw = Gateway::with(Options {
        extra: ADMIN_ON.into(),
        ..Default::default()
    })
    .await;
    let to = gw.running.as_ref().expect("running").local_addr();
    // Slow clients: connected, nothing sent.
    let mut slow = Vec::new();
    for _ in 0..PER_ADDRESS {
        slow.push(connect_from("127.0.0.1", to).await);
    }
    let mut over = connect_from("127.0.0.1", to).await;
    assert!(
        closed_by_the_gateway(&mut over).await,
        "a connection over the per-address cap is closed as it is accepted"
    );
    let (status, body) = tools_list_from("127.0.0.2", &gw).await;
    assert_eq!(status, 200, "{body:#}");
    assert!(body["result"]["tools"].is_array(), "{body:#}");
    let shed = gw.scrape().await.get(
        "mrtr_connections_shed_total",
        &[("listener", "mcp"), ("reason", "address_cap")],
    );
    assert_eq!(shed, 1.0);
    drop(slow);
    gw.stop().await;
}

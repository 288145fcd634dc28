//! Session-level tests: a scripted client talks to `serve` over in-memory pipes and checks
//! every line the server writes.

use std::io;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::{Options, SUPPORTED_PROTOCOL_VERSIONS, is_crash_request, serve};

const WAIT: Duration = Duration::from_secs(5);
/// How long "nothing else arrives" is observed for.
const QUIET: Duration = Duration::from_millis(150);

struct Client {
    to_server: Option<DuplexStream>,
    from_server: Lines<BufReader<DuplexStream>>,
    server: JoinHandle<io::Result<()>>,
    next_id: i64,
}

fn start(opts: Options) -> Client {
    let (client_w, server_r) = tokio::io::duplex(1 << 16);
    let (server_w, client_r) = tokio::io::duplex(1 << 16);
    Client {
        to_server: Some(client_w),
        from_server: BufReader::new(client_r).lines(),
        server: tokio::spawn(serve(server_r, server_w, opts)),
        next_id: 100,
    }
}

fn full_caps() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {"listChanged": true}})
}

/// A client that completed the handshake at `version` with every client capability.
async fn ready(version: &str) -> Client {
    ready_with(Options::default(), version, full_caps()).await
}

async fn ready_with(opts: Options, version: &str, caps: Value) -> Client {
    let mut client = start(opts);
    let result = client.initialize(version, caps).await;
    assert_eq!(result["protocolVersion"], version);
    client
}

impl Client {
    async fn send_raw(&mut self, line: &str) {
        let pipe = self.to_server.as_mut().expect("input already closed");
        pipe.write_all(line.as_bytes()).await.unwrap();
        pipe.write_all(b"\n").await.unwrap();
    }

    async fn send(&mut self, msg: Value) {
        self.send_raw(&msg.to_string()).await;
    }

    /// The next line the server writes, parsed.
    async fn recv(&mut self) -> Value {
        let line = timeout(WAIT, self.from_server.next_line())
            .await
            .expect("timed out waiting for the server")
            .unwrap()
            .expect("server closed its output");
        serde_json::from_str(&line).unwrap()
    }

    async fn assert_quiet(&mut self) {
        if let Ok(line) = timeout(QUIET, self.from_server.next_line()).await {
            panic!("unexpected output: {line:?}");
        }
    }

    /// Sends a request and returns its id without waiting.
    async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a request and returns the response, which must be the next message.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        let response = self.recv().await;
        assert_eq!(response["id"], id, "expected the response, got {response}");
        response
    }

    async fn call_tool(&mut self, name: &str, args: Value) -> i64 {
        self.request("tools/call", json!({"name": name, "arguments": args}))
            .await
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    async fn initialize(&mut self, version: &str, caps: Value) -> Value {
        let params = json!({
            "protocolVersion": version,
            "capabilities": caps,
            "clientInfo": {"name": "test-client", "version": "0.0.1"},
        });
        let response = self.call("initialize", params).await;
        self.notify("notifications/initialized", json!({})).await;
        response["result"].clone()
    }

    /// Reads the server's next message, which must be a request for `method`.
    async fn expect_request(&mut self, method: &str) -> Value {
        let msg = self.recv().await;
        assert_eq!(msg["method"], method, "expected {method}, got {msg}");
        assert!(
            msg["id"].is_i64(),
            "server request without integer id: {msg}"
        );
        msg
    }

    async fn answer(&mut self, request: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
            .await;
    }

    /// Reads the response to `id`, which must be the next message.
    async fn response(&mut self, id: i64) -> Value {
        let msg = self.recv().await;
        assert_eq!(msg["id"], id, "expected the response to {id}, got {msg}");
        msg
    }

    /// Closes the server's input and waits for `serve` to return.
    async fn close(mut self) -> io::Result<()> {
        self.to_server = None;
        timeout(WAIT, self.server)
            .await
            .expect("serve did not return")
            .unwrap()
    }
}

/// The JSON document a successful tool call reported.
fn tool_json(response: &Value) -> Value {
    let result = &response["result"];
    assert_ne!(result["isError"], true, "tool failed: {response}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// The text of a tool call that reported `isError: true`.
fn tool_error(response: &Value) -> String {
    assert_eq!(
        response["result"]["isError"], true,
        "tool succeeded: {response}"
    );
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn accept_name(name: &str) -> Value {
    json!({"action": "accept", "content": {"name": name}})
}

fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "test-model"})
}

#[tokio::test]
async fn initialize_echoes_each_supported_version() {
    for version in SUPPORTED_PROTOCOL_VERSIONS {
        let mut client = start(Options::default());
        let result = client.initialize(version, json!({})).await;
        assert_eq!(result["protocolVersion"], version);
        assert_eq!(
            result["capabilities"],
            json!({"tools": {}, "prompts": {}, "resources": {}, "logging": {}})
        );
        assert_eq!(result["serverInfo"]["name"], "mrtr-legacy-demo");
        assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(result["instructions"].is_string());
    }
}

#[tokio::test]
async fn initialize_falls_back_to_latest_for_unknown_version() {
    let mut client = start(Options::default());
    let result = client.initialize("2026-07-28", json!({})).await;
    assert_eq!(result["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn protocol_option_pins_the_version() {
    let opts = Options {
        protocol: Some("2025-03-26".into()),
        ..Options::default()
    };
    let mut client = start(opts);
    let result = client.initialize("2025-11-25", json!({})).await;
    assert_eq!(result["protocolVersion"], "2025-03-26");
}

#[tokio::test]
async fn requests_before_initialize_are_rejected_but_ping_works() {
    let mut client = start(Options::default());
    let response = client.call("tools/list", json!({})).await;
    assert_eq!(response["error"]["code"], -32600);
    let response = client.call("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
}

#[tokio::test]
async fn second_initialize_is_rejected() {
    let mut client = ready("2025-11-25").await;
    let response = client
        .call(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32600);
}

#[tokio::test]
async fn ping_returns_empty_result() {
    let mut client = ready("2025-06-18").await;
    let response = client.call("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
}

#[tokio::test]
async fn unknown_method_is_method_not_found() {
    let mut client = ready("2025-11-25").await;
    let response = client.call("no/such/method", json!({})).await;
    assert_eq!(response["error"]["code"], -32601);
}

#[tokio::test]
async fn malformed_line_gets_parse_error_and_server_keeps_going() {
    let mut client = ready("2025-11-25").await;
    client.send_raw("{this is not json").await;
    let error = client.recv().await;
    assert_eq!(error["id"], Value::Null);
    assert_eq!(error["error"]["code"], -32700);
    let response = client.call("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
}

#[tokio::test]
async fn tools_list_lists_every_tool_with_schemas() {
    let mut client = ready("2025-11-25").await;
    let response = client.call("tools/list", json!({})).await;
    let tools = response["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "echo",
            "ask_form",
            "ask_url",
            "sample",
            "list_roots",
            "all_three",
            "pair",
            "url_required",
            "fail",
            "slow",
            "crash",
            "session_info",
            "progress",
            "two_step",
            "log_levels"
        ]
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object");
    }
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["text"]));

    // Annotations did not exist in the first revision.
    let mut old = ready("2024-11-05").await;
    let response = old.call("tools/list", json!({})).await;
    assert!(response["result"]["tools"][0].get("annotations").is_none());
}

#[tokio::test]
async fn echo_returns_its_text() {
    let mut client = ready("2024-11-05").await;
    let id = client.call_tool("echo", json!({"text": "hi there"})).await;
    let response = client.response(id).await;
    assert_eq!(tool_json(&response), json!({"echo": "hi there"}));
    assert!(response["result"].get("isError").is_none());
}

#[tokio::test]
async fn unknown_tool_is_invalid_params() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("nope", json!({})).await;
    assert_eq!(client.response(id).await["error"]["code"], -32602);
}

#[tokio::test]
async fn ask_form_round_trip() {
    let mut client = ready("2025-11-25").await;
    let id = client
        .call_tool("ask_form", json!({"message": "Your name?"}))
        .await;
    let request = client.expect_request("elicitation/create").await;
    assert_eq!(request["id"], 0, "server request ids start at 0");
    assert_eq!(
        request["params"],
        json!({
            "mode": "form",
            "message": "Your name?",
            "requestedSchema": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "Your name"}},
                "required": ["name"],
            },
        })
    );
    client.answer(&request, accept_name("Ada")).await;
    let response = client.response(id).await;
    assert_eq!(
        tool_json(&response),
        json!({"action": "accept", "content": {"name": "Ada"}})
    );
}

#[tokio::test]
async fn ask_form_omits_mode_on_2025_06_18() {
    let mut client = ready("2025-06-18").await;
    let id = client.call_tool("ask_form", json!({})).await;
    let request = client.expect_request("elicitation/create").await;
    assert!(request["params"].get("mode").is_none());
    assert!(request["params"]["requestedSchema"].is_object());
    client.answer(&request, json!({"action": "decline"})).await;
    let response = client.response(id).await;
    assert_eq!(
        tool_json(&response),
        json!({"action": "decline", "content": null})
    );
}

#[tokio::test]
async fn elicitation_is_refused_before_2025_06_18() {
    let mut client = ready("2025-03-26").await;
    let id = client.call_tool("ask_form", json!({})).await;
    let text = tool_error(&client.response(id).await);
    assert!(text.contains("2025-06-18"), "{text}");
}

#[tokio::test]
async fn undeclared_capability_fails_the_tool_without_asking() {
    let mut client = ready_with(Options::default(), "2025-11-25", json!({"elicitation": {}})).await;
    let id = client.call_tool("sample", json!({})).await;
    let text = tool_error(&client.response(id).await);
    assert!(text.contains("sampling"), "{text}");
    // An empty elicitation capability means form only.
    let id = client.call_tool("ask_url", json!({})).await;
    let text = tool_error(&client.response(id).await);
    assert!(text.contains("elicitation.url"), "{text}");
}

#[tokio::test]
async fn client_error_answer_becomes_is_error_result() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("sample", json!({})).await;
    let request = client.expect_request("sampling/createMessage").await;
    client
        .send(json!({"jsonrpc": "2.0", "id": request["id"],
                     "error": {"code": -1, "message": "User rejected sampling"}}))
        .await;
    let text = tool_error(&client.response(id).await);
    assert_eq!(text, "error -1: User rejected sampling");
}

#[tokio::test]
async fn sample_reports_role_text_and_model() {
    let mut client = ready("2024-11-05").await;
    let id = client
        .call_tool("sample", json!({"prompt": "Say hi"}))
        .await;
    let request = client.expect_request("sampling/createMessage").await;
    assert_eq!(
        request["params"],
        json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
               "maxTokens": 64})
    );
    client.answer(&request, sampled("hi")).await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({"role": "assistant", "text": "hi", "model": "test-model"})
    );
}

#[tokio::test]
async fn pair_sends_two_requests_before_either_is_answered() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("pair", json!({})).await;
    let elicit = client.expect_request("elicitation/create").await;
    let sample = client.expect_request("sampling/createMessage").await;
    assert_ne!(elicit["id"], sample["id"]);
    // Answer in the opposite order to show neither answer is awaited first.
    client.answer(&sample, sampled("both")).await;
    client.answer(&elicit, accept_name("Grace")).await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({
            "elicit": {"action": "accept", "content": {"name": "Grace"}},
            "sample": {"role": "assistant", "text": "both", "model": "test-model"},
        })
    );
}

#[tokio::test]
async fn all_three_asks_one_thing_at_a_time() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("all_three", json!({})).await;
    let elicit = client.expect_request("elicitation/create").await;
    client.assert_quiet().await;
    client.answer(&elicit, accept_name("Lin")).await;
    let sample = client.expect_request("sampling/createMessage").await;
    client.assert_quiet().await;
    client.answer(&sample, sampled("ok")).await;
    let roots = client.expect_request("roots/list").await;
    assert_eq!(
        [&elicit["id"], &sample["id"], &roots["id"]],
        [&json!(0), &json!(1), &json!(2)]
    );
    client
        .answer(
            &roots,
            json!({"roots": [{"uri": "file:///a"}, {"uri": "file:///b", "name": "b"}]}),
        )
        .await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({
            "elicit": {"action": "accept", "content": {"name": "Lin"}},
            "sample": {"role": "assistant", "text": "ok", "model": "test-model"},
            "roots": ["file:///a", "file:///b"],
        })
    );
}

#[tokio::test]
async fn roots_on_init_are_cached_and_reported_by_list_roots() {
    let opts = Options {
        roots_on_init: true,
        ..Options::default()
    };
    let mut client = ready_with(opts, "2025-06-18", full_caps()).await;
    let init_roots = client.expect_request("roots/list").await;
    client
        .answer(&init_roots, json!({"roots": [{"uri": "file:///init"}]}))
        .await;
    // Let the cache be written before asking for it.
    client.call("ping", json!({})).await;
    let id = client.call_tool("list_roots", json!({})).await;
    let roots = client.expect_request("roots/list").await;
    client
        .answer(&roots, json!({"roots": [{"uri": "file:///now"}]}))
        .await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({"roots": ["file:///now"], "cachedRoots": ["file:///init"]})
    );
}

#[tokio::test]
async fn list_roots_without_init_fetch_reports_null_cache() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("list_roots", json!({})).await;
    let roots = client.expect_request("roots/list").await;
    client.answer(&roots, json!({"roots": []})).await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({"roots": [], "cachedRoots": null})
    );
}

#[tokio::test]
async fn ask_url_round_trip_and_refusal_before_2025_11_25() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("ask_url", json!({})).await;
    let request = client.expect_request("elicitation/create").await;
    let params = &request["params"];
    assert_eq!(params["mode"], "url");
    assert!(
        params["url"]
            .as_str()
            .unwrap()
            .starts_with("https://example.com/authorize?session=")
    );
    let elicitation_id = params["elicitationId"].as_str().unwrap().to_owned();
    assert!(params["message"].is_string());
    client.answer(&request, json!({"action": "accept"})).await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({"action": "accept", "elicitationId": elicitation_id})
    );

    let mut old = ready("2025-06-18").await;
    let id = old.call_tool("ask_url", json!({})).await;
    assert!(tool_error(&old.response(id).await).contains("2025-11-25"));
}

#[tokio::test]
async fn url_required_fails_with_32042_then_succeeds() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("url_required", json!({})).await;
    let response = client.response(id).await;
    let error = &response["error"];
    assert_eq!(error["code"], -32042);
    let elicitation = &error["data"]["elicitations"][0];
    assert_eq!(elicitation["mode"], "url");
    assert_eq!(elicitation["url"], "https://example.com/connect");
    assert_eq!(elicitation["message"], "Connect your account");
    assert!(elicitation["elicitationId"].is_string());

    let id = client.call_tool("url_required", json!({})).await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({"connected": true})
    );

    let mut old = ready("2025-06-18").await;
    let id = old.call_tool("url_required", json!({})).await;
    tool_error(&old.response(id).await);
}

#[tokio::test]
async fn cancelled_request_gets_no_response() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("slow", json!({"ms": 30_000})).await;
    client
        .notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "bored"}),
        )
        .await;
    let response = client.call("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
    client.assert_quiet().await;
}

#[tokio::test]
async fn cancelling_a_blocked_tool_withdraws_its_elicitation() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("ask_form", json!({})).await;
    let request = client.expect_request("elicitation/create").await;
    client
        .notify("notifications/cancelled", json!({"requestId": id}))
        .await;
    let withdrawn = client.recv().await;
    assert_eq!(withdrawn["method"], "notifications/cancelled");
    assert_eq!(withdrawn["params"]["requestId"], request["id"]);
    // A late answer is ignored and the cancelled call stays unanswered.
    client.answer(&request, accept_name("late")).await;
    client.assert_quiet().await;
    assert_eq!(client.call("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn requests_run_concurrently() {
    let mut client = ready("2025-11-25").await;
    let blocked = client.call_tool("ask_form", json!({})).await;
    let request = client.expect_request("elicitation/create").await;
    // The blocked tool does not hold up other calls.
    let id = client.call_tool("echo", json!({"text": "meanwhile"})).await;
    assert_eq!(
        tool_json(&client.response(id).await),
        json!({"echo": "meanwhile"})
    );
    client.answer(&request, accept_name("Ada")).await;
    tool_json(&client.response(blocked).await);
}

#[tokio::test]
async fn progress_token_gets_a_started_notification_first() {
    let mut client = ready("2025-11-25").await;
    let id = client
        .request(
            "tools/call",
            json!({"name": "ask_form", "arguments": {}, "_meta": {"progressToken": "tok"}}),
        )
        .await;
    let progress = client.recv().await;
    assert_eq!(progress["method"], "notifications/progress");
    assert_eq!(
        progress["params"],
        json!({"progressToken": "tok", "progress": 0, "total": 1, "message": "started"})
    );
    let request = client.expect_request("elicitation/create").await;
    client.answer(&request, json!({"action": "cancel"})).await;
    client.response(id).await;
}

#[tokio::test]
async fn progress_tool_sends_one_notification_per_step() {
    let mut client = ready("2025-11-25").await;
    let id = client
        .request(
            "tools/call",
            json!({"name": "progress", "arguments": {"steps": 3}, "_meta": {"progressToken": 7}}),
        )
        .await;
    for step in 1..=3 {
        let msg = client.recv().await;
        assert_eq!(msg["method"], "notifications/progress");
        assert_eq!(msg["params"]["progressToken"], 7);
        assert_eq!(msg["params"]["progress"], step);
        assert_eq!(msg["params"]["total"], 3);
    }
    assert_eq!(tool_json(&client.response(id).await), json!({"steps": 3}));
}

#[tokio::test]
async fn slow_reports_how_long_it_slept() {
    let mut client = ready("2025-11-25").await;
    let id = client.call_tool("slow", json!({"ms": 5})).await;
    assert_eq!(tool_json(&client.response(id).await), json!({"slept": 5}));
}

#[tokio::test]
async fn session_info_reports_what_the_client_declared() {
    let mut client = ready("2025-06-18").await;
    let id = client.call_tool("session_info", json!({})).await;
    let info = tool_json(&client.response(id).await);
    assert_eq!(info["protocolVersion"], "2025-06-18");
    assert_eq!(info["clientCapabilities"], full_caps());
    assert_eq!(info["clientInfo"]["name"], "test-client");
    assert_eq!(info["pid"], std::process::id());
}

#[tokio::test]
async fn eof_makes_serve_return_even_with_work_in_flight() {
    let mut client = ready("2025-11-25").await;
    client.call_tool("ask_form", json!({})).await;
    client.expect_request("elicitation/create").await;
    client.call_tool("slow", json!({"ms": 60_000})).await;
    client.close().await.expect("serve should return Ok on EOF");
}

#[tokio::test]
async fn crash_ends_the_session_with_a_crash_error() {
    let mut client = ready("2025-11-25").await;
    client.call_tool("crash", json!({})).await;
    let result = timeout(WAIT, &mut client.server).await.unwrap().unwrap();
    let err = result.expect_err("crash must end serve with an error");
    assert!(is_crash_request(&err), "{err}");
    // No response was sent and the output is closed.
    let next = timeout(WAIT, client.from_server.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next, None);
}

#[tokio::test]
async fn log_file_receives_in_and_out_lines() {
    let path = std::env::temp_dir().join(format!(
        "mrtr-legacy-log-test-{}-{:?}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    let opts = Options {
        log: Some(path.clone()),
        ..Options::default()
    };
    let mut client = ready_with(opts, "2025-11-25", full_caps()).await;
    client.send_raw("not json").await;
    client.recv().await;
    client.close().await.unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let entries: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(String, Value)> = entries
        .iter()
        .map(|e| {
            assert_eq!(e["pid"], std::process::id());
            let msg = &e["msg"];
            let what = msg.get("method").or_else(|| msg.get("id")).unwrap_or(msg);
            (e["dir"].as_str().unwrap().to_owned(), what.clone())
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("in".to_owned(), json!("initialize")),
            ("out".to_owned(), json!(100)),
            ("in".to_owned(), json!("notifications/initialized")),
            ("in".to_owned(), json!("not json")),
            ("out".to_owned(), Value::Null),
        ]
    );
    assert_eq!(entries[1]["msg"]["result"]["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn batch_gets_one_array_response() {
    let mut client = ready("2025-03-26").await;
    client
        .send(json!([
            {"jsonrpc": "2.0", "id": "a", "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": "b", "method": "tools/call",
             "params": {"name": "echo", "arguments": {"text": "x"}}},
        ]))
        .await;
    let batch = client.recv().await;
    let responses = batch.as_array().expect("batch response is an array");
    assert_eq!(responses.len(), 2);
    assert_eq!(responses[0]["id"], "a");
    assert_eq!(tool_json(&responses[1]), json!({"echo": "x"}));
}

#[tokio::test]
async fn greet_prompt_elicits_the_name() {
    let mut client = ready("2025-11-25").await;
    let listed = client.call("prompts/list", json!({})).await;
    assert_eq!(listed["result"]["prompts"][0]["name"], "greet");
    assert_eq!(
        listed["result"]["prompts"][0]["arguments"][0]["required"],
        false
    );

    let id = client
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"greeting": "Hi"}}),
        )
        .await;
    let request = client.expect_request("elicitation/create").await;
    client.answer(&request, accept_name("Bo")).await;
    let response = client.response(id).await;
    assert_eq!(
        response["result"]["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "Hi, Bo"}}])
    );

    let id = client
        .request("prompts/get", json!({"name": "greet"}))
        .await;
    let request = client.expect_request("elicitation/create").await;
    client.answer(&request, json!({"action": "decline"})).await;
    let response = client.response(id).await;
    assert_eq!(
        response["result"]["messages"][0]["content"]["text"],
        "Hello, stranger"
    );
}

#[tokio::test]
async fn resources_read_info_secret_and_unknown() {
    let mut client = ready("2025-11-25").await;
    let listed = client.call("resources/list", json!({})).await;
    let uris: Vec<&Value> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["uri"])
        .collect();
    assert_eq!(uris, [&json!("fixture://info"), &json!("fixture://secret")]);
    let templates = client.call("resources/templates/list", json!({})).await;
    assert_eq!(templates["result"], json!({"resourceTemplates": []}));

    let info = client
        .call("resources/read", json!({"uri": "fixture://info"}))
        .await;
    assert_eq!(
        info["result"],
        json!({"contents": [{"uri": "fixture://info", "mimeType": "text/plain",
                             "text": "legacy demo server"}]})
    );

    for (password, expected) in [("open-sesame", "unlocked"), ("guess", "locked")] {
        let id = client
            .request("resources/read", json!({"uri": "fixture://secret"}))
            .await;
        let request = client.expect_request("elicitation/create").await;
        assert_eq!(
            request["params"]["requestedSchema"]["required"],
            json!(["password"])
        );
        client
            .answer(
                &request,
                json!({"action": "accept", "content": {"password": password}}),
            )
            .await;
        let response = client.response(id).await;
        assert_eq!(response["result"]["contents"][0]["text"], expected);
    }

    let missing = client
        .call("resources/read", json!({"uri": "fixture://nope"}))
        .await;
    assert_eq!(missing["error"]["code"], -32002);
    assert_eq!(missing["error"]["data"], json!({"uri": "fixture://nope"}));
}

#[tokio::test]
async fn logging_set_level_returns_empty_result() {
    let mut client = ready("2025-11-25").await;
    let response = client
        .call("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(response["result"], json!({}));
}

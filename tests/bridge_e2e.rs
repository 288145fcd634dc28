//! End to end: a 2026-07-28 client over loopback HTTP, the gateway, and the built-in legacy
//! server as a real child process. Each test drives one bridge behaviour.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn form_elicitation_round_trip_reaches_the_backend() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let first = c
        .call_tool("ask_form", json!({"message": "Who?"}), &caps)
        .await;
    assert_eq!(first.status, 200);
    let key = first.key_for("elicitation/create");
    let ask = &first.result()["inputRequests"][&key];
    assert_eq!(ask["params"]["message"], "Who?");
    assert!(
        ask.get("id").is_none() && ask.get("jsonrpc").is_none(),
        "input requests carry no JSON-RPC envelope: {ask}"
    );
    assert_eq!(gw.parked(), 1);

    let done = c.answer_ada(json!({"message": "Who?"}), &first).await;
    assert_eq!(
        done.tool_json(),
        json!({"action": "accept", "content": {"name": "Ada"}})
    );
    assert_eq!(gw.parked(), 0);
    gw.stop().await;
}

#[tokio::test]
async fn url_elicitation_drops_the_legacy_elicitation_id() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {"url": {}}});
    let first = c.call_tool("ask_url", json!({}), &caps).await;
    let key = first.key_for("elicitation/create");
    let params = &first.result()["inputRequests"][&key]["params"];
    assert_eq!(params["mode"], "url");
    assert!(params["url"].as_str().unwrap().starts_with("https://"));
    assert!(params.get("elicitationId").is_none(), "{params}");
    let done = c
        .retry_tool(
            "ask_url",
            json!({}),
            &caps,
            json!({ key: {"action": "accept"} }),
            &first.state(),
        )
        .await;
    assert_eq!(done.tool_json()["action"], "accept");
    gw.stop().await;
}

#[tokio::test]
async fn sampling_answer_reaches_the_backend() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"sampling": {}});
    let first = c
        .call_tool("sample", json!({"prompt": "capital of France?"}), &caps)
        .await;
    let key = first.key_for("sampling/createMessage");
    let done = c
        .retry_tool(
            "sample",
            json!({"prompt": "capital of France?"}),
            &caps,
            json!({ key: sampled("Paris") }),
            &first.state(),
        )
        .await;
    let out = done.tool_json();
    assert_eq!(out["text"], "Paris");
    assert_eq!(out["model"], "test-model");
    gw.stop().await;
}

/// Tool use in sampling is a capability of its own (`sampling.tools`): a client that declared it
/// gets the backend's tool-enabled sampling request, and a client that declared sampling alone
/// (same principal, next call) is not handed the session that was told about tools.
#[tokio::test]
async fn tool_enabled_sampling_goes_only_to_clients_that_declared_sampling_tools() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let args = json!({"prompt": "define mrtr", "tools": true});
    let with_tools = json!({"sampling": {"tools": {}}});
    let first = c.call_tool("sample", args.clone(), &with_tools).await;
    let key = first.key_for("sampling/createMessage");
    let params = &first.result()["inputRequests"][&key]["params"];
    assert_eq!(params["tools"][0]["name"], "lookup", "{params:#}");
    assert_eq!(params["toolChoice"]["mode"], "auto", "{params:#}");
    let done = c
        .retry_tool(
            "sample",
            args.clone(),
            &with_tools,
            json!({ key: sampled("a round trip") }),
            &first.state(),
        )
        .await;
    assert_eq!(done.tool_json()["text"], "a round trip");

    let plain = json!({"sampling": {}});
    let r = c.call_tool("sample", args, &plain).await;
    let result = r.result();
    assert_eq!(
        result["resultType"], "complete",
        "no tool-enabled sampling request reaches a client without sampling.tools: {result:#}"
    );
    assert_eq!(result["isError"], true, "{result:#}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("sampling.tools"),
        "its backend session was told only `sampling`: {text}"
    );
    gw.stop().await;
}

/// A backend that sends tool-enabled sampling regardless is refused by the gateway, and the
/// client never sees the request.
#[tokio::test]
async fn tool_enabled_sampling_the_client_did_not_declare_is_refused_upstream() {
    let gw = Gateway::with(Options {
        server_args: vec!["--ignore-capabilities".into()],
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let r = c
        .call_tool("sample", json!({"tools": true}), &json!({"sampling": {}}))
        .await;
    assert_refused_upstream(&gw, &r, "does not support tool use in sampling");
    gw.stop().await;
}

/// The call ended without asking the client anything, as an error, and the backend heard an
/// error saying `refusal` in answer to its push.
fn assert_refused_upstream(gw: &Gateway, r: &Reply, refusal: &str) {
    let result = r.result();
    assert_eq!(
        result["resultType"], "complete",
        "no input request reaches the client: {result:#}"
    );
    assert_eq!(result["isError"], true, "{result:#}");
    let refused = gw.backend_received().into_iter().any(|m| {
        m["error"]["message"]
            .as_str()
            .is_some_and(|s| s.contains(refusal))
    });
    assert!(
        refused,
        "the backend got an error answer: {:#?}",
        gw.backend_received()
    );
}

#[tokio::test]
async fn roots_answer_reaches_the_backend() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"roots": {}});
    let first = c.call_tool("list_roots", json!({}), &caps).await;
    let key = first.key_for("roots/list");
    assert_eq!(
        first.result()["inputRequests"][&key],
        json!({"method": "roots/list"})
    );
    let done = c
        .retry_tool(
            "list_roots",
            json!({}),
            &caps,
            json!({ key: roots(&["file:///work/a"]) }),
            &first.state(),
        )
        .await;
    assert_eq!(done.tool_json()["roots"], json!(["file:///work/a"]));
    gw.stop().await;
}

#[tokio::test]
async fn all_three_kinds_in_one_call_take_three_rounds() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = caps_all();
    let r1 = c.call_tool("all_three", json!({}), &caps).await;
    let k1 = r1.key_for("elicitation/create");
    let r2 = c
        .retry_tool(
            "all_three",
            json!({}),
            &caps,
            json!({ k1: accept(json!({"name": "Grace"})) }),
            &r1.state(),
        )
        .await;
    let k2 = r2.key_for("sampling/createMessage");
    assert_eq!(r2.input_keys().len(), 1);
    let r3 = c
        .retry_tool(
            "all_three",
            json!({}),
            &caps,
            json!({ k2: sampled("forty-two") }),
            &r2.state(),
        )
        .await;
    let k3 = r3.key_for("roots/list");
    let done = c
        .retry_tool(
            "all_three",
            json!({}),
            &caps,
            json!({ k3: roots(&["file:///x"]) }),
            &r3.state(),
        )
        .await;
    let out = done.tool_json();
    assert_eq!(out["elicit"]["content"]["name"], "Grace");
    assert_eq!(out["sample"]["text"], "forty-two");
    assert_eq!(out["roots"], json!(["file:///x"]));
    gw.stop().await;
}

#[tokio::test]
async fn two_pushes_close_together_are_one_round() {
    let gw = Gateway::with(Options::one_round_for_a_pair()).await;
    let c = gw.client();
    let caps = caps_all();
    let r1 = c.call_tool("pair", json!({}), &caps).await;
    assert_eq!(r1.input_keys().len(), 2, "{:#}", r1.body);
    let ke = r1.key_for("elicitation/create");
    let ks = r1.key_for("sampling/createMessage");
    let done = c
        .retry_tool(
            "pair",
            json!({}),
            &caps,
            json!({ ke: accept(json!({"name": "Lin"})), ks: sampled("hi") }),
            &r1.state(),
        )
        .await;
    let out = done.tool_json();
    assert_eq!(out["elicit"]["content"]["name"], "Lin");
    assert_eq!(out["sample"]["text"], "hi");
    gw.stop().await;
}

#[tokio::test]
async fn missing_input_is_asked_again() {
    let gw = Gateway::with(Options::one_round_for_a_pair()).await;
    let c = gw.client();
    let caps = caps_all();
    let r1 = c.call_tool("pair", json!({}), &caps).await;
    let ke = r1.key_for("elicitation/create");
    let ks = r1.key_for("sampling/createMessage");
    // Answer only the elicitation, plus a key nobody asked for (ignored).
    let r2 = c
        .retry_tool(
            "pair",
            json!({}),
            &caps,
            json!({ ke.clone(): accept(json!({"name": "Bo"})), "stray": {"x": 1} }),
            &r1.state(),
        )
        .await;
    assert_eq!(
        r2.input_keys(),
        vec![ks.clone()],
        "only the missing key is asked again"
    );
    assert_ne!(r2.state(), r1.state());
    let done = c
        .retry_tool(
            "pair",
            json!({}),
            &caps,
            json!({ ks: sampled("ok") }),
            &r2.state(),
        )
        .await;
    assert_eq!(done.tool_json()["elicit"]["content"]["name"], "Bo");
    gw.stop().await;
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_is_refused_and_the_same_state_still_works() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let first = c.call_tool("ask_form", json!({}), &caps).await;
    let key = first.key_for("elicitation/create");
    let sent = gw.backend_received().len();
    let bad = c
        .retry_tool(
            "ask_form",
            json!({}),
            &caps,
            json!({ key.clone(): {"action": "maybe"} }),
            &first.state(),
        )
        .await;
    assert_eq!(bad.error_code(), -32602, "{:#}", bad.body);
    let message = bad.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("inputResponses[\"{key}\"]")) && message.contains("maybe"),
        "the error names the answer and what is wrong with it: {message}"
    );
    assert_eq!(gw.parked(), 1, "the park is as it was");
    assert_eq!(
        gw.backend_received().len(),
        sent,
        "nothing reached the backend"
    );
    // At once, with the same state: the call takes retries again before the client hears of
    // the refusal.
    let done = c.answer_ada(json!({}), &first).await;
    assert_eq!(done.tool_json()["content"]["name"], "Ada");
    assert_eq!(gw.parked(), 0);
    gw.stop().await;
}

#[tokio::test]
async fn decline_and_cancel_reach_the_backend_as_such() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    for action in ["decline", "cancel"] {
        let r1 = c.call_tool("ask_form", json!({}), &caps).await;
        let key = r1.key_for("elicitation/create");
        let done = c
            .retry_tool(
                "ask_form",
                json!({}),
                &caps,
                json!({ key: {"action": action} }),
                &r1.state(),
            )
            .await;
        assert_eq!(done.tool_json()["action"], action);
    }
    let answered: Vec<_> = gw
        .backend_received()
        .into_iter()
        .filter_map(|m| m["result"]["action"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(answered, vec!["decline", "cancel"]);
    gw.stop().await;
}

#[tokio::test]
async fn url_elicitation_required_error_becomes_a_round_then_a_reissue() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {"form": {}, "url": {}}});
    let r1 = c.call_tool("url_required", json!({}), &caps).await;
    let key = r1.key_for("elicitation/create");
    let params = &r1.result()["inputRequests"][&key]["params"];
    assert_eq!(params["mode"], "url");
    assert_eq!(params["url"], "https://example.com/connect");
    assert!(params.get("elicitationId").is_none());
    let done = c
        .retry_tool(
            "url_required",
            json!({}),
            &caps,
            json!({ key: {"action": "accept"} }),
            &r1.state(),
        )
        .await;
    assert_eq!(done.tool_json(), json!({"connected": true}));
    let calls = gw
        .backend_received()
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    assert_eq!(calls, 2, "the call was issued again upstream");
    gw.stop().await;
}

/// The backend asks a question, then ends the call with -32042 while the client is away
/// answering it: the retry gets the URL elicitation as a further round, never the legacy code.
#[tokio::test]
async fn url_elicitation_required_while_parked_becomes_a_further_round() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {"form": {}, "url": {}}});
    let args = json!({"ask_first_ms": 300});
    let r1 = c.call_tool("url_required", args.clone(), &caps).await;
    let form = r1.key_for("elicitation/create");
    assert_eq!(
        r1.result()["inputRequests"][&form]["params"]["mode"],
        "form"
    );
    // The backend's -32042 arrives while the call is parked.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let r2 = c
        .retry_tool(
            "url_required",
            args.clone(),
            &caps,
            json!({ form: accept(json!({"name": "Ada"})) }),
            &r1.state(),
        )
        .await;
    assert!(
        r2.body.get("error").is_none(),
        "no legacy error code reaches the client: {:#}",
        r2.body
    );
    let url = r2.key_for("elicitation/create");
    assert_eq!(r2.result()["inputRequests"][&url]["params"]["mode"], "url");
    let done = c
        .retry_tool(
            "url_required",
            args,
            &caps,
            json!({ url: {"action": "accept"} }),
            &r2.state(),
        )
        .await;
    assert_eq!(done.tool_json(), json!({"connected": true}));
    gw.stop().await;
}

/// Codes 2026-07-28 keeps for itself (-32020 to -32099) are not the legacy backend's to use:
/// its -32050 goes out as -32603 with its message and data; codes outside the range pass.
#[tokio::test]
async fn backend_errors_in_the_range_the_specification_keeps_become_internal_errors() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = c
        .call_tool(
            "fail",
            json!({"code": -32050, "message": "odd"}),
            &json!({}),
        )
        .await;
    assert_eq!(r.error_code(), -32603, "{:#}", r.body);
    assert_eq!(r.error_message(), "odd");
    assert_eq!(r.body["error"]["data"]["asked"], -32050);
    let r = c
        .call_tool("fail", json!({"code": -32021}), &json!({}))
        .await;
    assert_eq!(
        r.error_code(),
        -32603,
        "not the 2026-07-28 meaning: {:#}",
        r.body
    );
    let r = c
        .call_tool("fail", json!({"code": -31999}), &json!({}))
        .await;
    assert_eq!(r.error_code(), -31999, "{:#}", r.body);
    gw.stop().await;
}

/// A legacy backend's -32021 that names what it needs in `data.requiredCapabilities` (an object)
/// means what 2026-07-28 means by the code: it passes as -32021 with status 400, as the gateway's
/// own does, its message and data as the backend wrote them. Any other -32021 is mapped as before.
#[tokio::test]
async fn a_backend_missing_capability_error_that_names_them_passes_as_400() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let data = json!({"requiredCapabilities": {"sampling": {"tools": {}}}});
    let r = c
        .call_tool(
            "fail",
            json!({"code": -32021, "message": "needs sampling with tools", "data": data}),
            &json!({}),
        )
        .await;
    assert_eq!(r.error_code(), -32021, "{:#}", r.body);
    assert_eq!(r.status, 400, "2026-07-28 gives -32021 status 400");
    assert_eq!(r.error_message(), "needs sampling with tools");
    assert_eq!(r.body["error"]["data"], data);
    for data in [
        json!({"requiredCapabilities": ["sampling"]}),
        json!({"requiredCapabilities": "sampling"}),
        json!({"needs": {"sampling": {}}}),
        json!("requiredCapabilities"),
    ] {
        let r = c
            .call_tool("fail", json!({"code": -32021, "data": data}), &json!({}))
            .await;
        assert_eq!(r.error_code(), -32603, "data {data}: {:#}", r.body);
        assert_eq!(r.status, 200, "data {data}");
        assert_eq!(r.body["error"]["data"], data);
    }
    gw.stop().await;
}

#[tokio::test]
async fn url_elicitation_required_without_the_capability_is_a_missing_capability_error() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = c
        .call_tool("url_required", json!({}), &json!({"elicitation": {}}))
        .await;
    assert_eq!(r.error_code(), -32021);
    assert_eq!(r.status, 400, "2026-07-28 gives -32021 status 400");
    assert_eq!(
        r.body["error"]["data"]["requiredCapabilities"]["elicitation"]["url"],
        json!({})
    );
    gw.stop().await;
}

#[tokio::test]
async fn fifty_parked_calls_from_five_principals_each_get_their_own_answers() {
    let gw = Gateway::start().await;
    let caps = json!({"elicitation": {}});
    let mut firsts = Vec::new();
    for p in 0..5 {
        for n in 0..10 {
            let c = gw.client().with_principal(&format!("user-{p}"));
            let caps = caps.clone();
            firsts.push(tokio::spawn(async move {
                let msg = format!("p{p}-n{n}");
                let r = c
                    .call_tool("ask_form", json!({"message": msg}), &caps)
                    .await;
                (c, msg, r)
            }));
        }
    }
    let mut parked = Vec::new();
    for f in firsts {
        parked.push(f.await.expect("first round"));
    }
    assert_eq!(gw.parked(), 50);
    let mut finals = Vec::new();
    for (c, msg, r) in parked {
        let caps = caps.clone();
        finals.push(tokio::spawn(async move {
            let key = r.key_for("elicitation/create");
            assert_eq!(
                r.result()["inputRequests"][&key]["params"]["message"],
                msg.as_str()
            );
            let done = c
                .retry_tool(
                    "ask_form",
                    json!({"message": msg}),
                    &caps,
                    json!({ key: accept(json!({"name": msg})) }),
                    &r.state(),
                )
                .await;
            (msg, done.tool_json())
        }));
    }
    for f in finals {
        let (msg, out) = f.await.expect("final round");
        assert_eq!(out["content"]["name"], msg.as_str());
    }
    assert_eq!(gw.parked(), 0);
    gw.stop().await;
}

#[tokio::test]
async fn plain_calls_pass_through_with_result_type() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = c.call_tool("echo", json!({"text": "hi"}), &json!({})).await;
    assert_eq!(r.tool_json(), json!({"echo": "hi"}));
    let list = c.send(&c.body("tools/list", json!({}), &json!({}))).await;
    let result = list.result();
    assert_eq!(result["resultType"], "complete");
    assert!(
        result["ttlMs"].is_u64() && result["cacheScope"].is_string(),
        "{result:#}"
    );
    assert!(
        result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "ask_form")
    );
    gw.stop().await;
}

#[tokio::test]
async fn discover_is_synthesized_from_the_backend_initialize() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = c
        .send(&c.body("server/discover", json!({}), &json!({})))
        .await;
    let result = r.result();
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert!(result["capabilities"]["tools"].is_object());
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mrtr-legacy-demo"
    );
    assert!(result["instructions"].is_string());
    assert!(result["ttlMs"].is_u64());
    gw.stop().await;
}

/// Every result names the backend in `_meta` (`io.modelcontextprotocol/serverInfo`, as its
/// `initialize` gave it): passed through, input required, and the final one; with
/// `server_info = false`, none does, `server/discover` included.
#[tokio::test]
async fn results_carry_the_backend_s_server_info_unless_it_is_turned_off() {
    const KEY: &str = "io.modelcontextprotocol/serverInfo";
    let caps = json!({"elicitation": {}});
    for on in [true, false] {
        let gw = Gateway::with(Options {
            backend_extra: format!("pool_max = 64\nserver_info = {on}\n"),
            ..Options::default()
        })
        .await;
        let c = gw.client();
        let plain = c.call_tool("echo", json!({"text": "hi"}), &json!({})).await;
        let list = c.send(&c.body("tools/list", json!({}), &json!({}))).await;
        let discover = c
            .send(&c.body("server/discover", json!({}), &json!({})))
            .await;
        let first = c.call_tool("ask_form", json!({}), &caps).await;
        let done = c.answer_ada(json!({}), &first).await;
        assert_eq!(first.result()["resultType"], "input_required");
        assert_eq!(done.result()["resultType"], "complete");
        for (what, r) in [
            ("pass-through", &plain),
            ("tools/list", &list),
            ("discover", &discover),
            ("input required", &first),
            ("final", &done),
        ] {
            let info = &r.result()["_meta"][KEY];
            if on {
                assert_eq!(info["name"], "mrtr-legacy-demo", "{what}: {:#}", r.body);
                assert_eq!(info["version"], env!("CARGO_PKG_VERSION"), "{what}");
            } else {
                assert!(info.is_null(), "{what}: {:#}", r.body);
            }
        }
        gw.stop().await;
    }
}

#[tokio::test]
async fn progress_of_the_current_round_streams_as_sse_with_the_client_token() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let mut body = c.body(
        "tools/call",
        json!({"name": "progress", "arguments": {"steps": 3}}),
        &json!({}),
    );
    body["params"]["_meta"]["progressToken"] = json!("tok-1");
    let r = c.send(&body).await;
    assert!(
        r.content_type.starts_with("text/event-stream"),
        "{}",
        r.content_type
    );
    assert!(
        !r.notifications.is_empty(),
        "progress notifications came first"
    );
    for n in &r.notifications {
        assert_eq!(n["method"], "notifications/progress");
        assert_eq!(
            n["params"]["progressToken"], "tok-1",
            "the client's own token is restored"
        );
    }
    assert_eq!(r.tool_json(), json!({"steps": 3}));
    gw.stop().await;
}

#[tokio::test]
async fn closing_the_response_stream_cancels_the_call_upstream() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let mut body = c.body(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 20000}}),
        &json!({}),
    );
    body["params"]["_meta"]["progressToken"] = json!("p");
    // Give up on the request after a moment: the connection closes with it.
    let send = c.send(&body);
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), send).await;
    wait_slow_call_cancelled(&gw).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_push_the_client_did_not_declare_is_refused_upstream_and_never_shown() {
    let gw = Gateway::with(Options {
        server_args: vec!["--ignore-capabilities".into()],
        ..Default::default()
    })
    .await;
    let c = gw.client();
    // Declares sampling only; the backend asks for an elicitation anyway.
    let r = c
        .call_tool("ask_form", json!({}), &json!({"sampling": {}}))
        .await;
    assert_refused_upstream(&gw, &r, "does not support elicitation");
    gw.stop().await;
}

#[tokio::test]
async fn roots_asked_outside_a_call_are_answered_from_static_roots() {
    let gw = Gateway::with(Options {
        server_args: vec!["--roots-on-init".into()],
        extra: "[roots]\nstatic = [{ uri = \"file:///srv/static\", name = \"static\" }]\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    // A plain request starts the session; the backend asks for roots right after initialize.
    c.send(&c.body("server/discover", json!({}), &json!({"roots": {}})))
        .await
        .result();
    gw.wait_log(10, "the post-initialize roots/list answered", |msgs| {
        msgs.iter().any(|m| m["result"]["roots"].is_array())
    })
    .await;
    let r = c
        .call_tool("list_roots", json!({}), &json!({"roots": {}}))
        .await;
    // The call's own roots/list still goes to the client.
    let key = r.key_for("roots/list");
    let done = c
        .retry_tool(
            "list_roots",
            json!({}),
            &json!({"roots": {}}),
            json!({ key: roots(&["file:///client"]) }),
            &r.state(),
        )
        .await;
    let out = done.tool_json();
    assert_eq!(out["roots"], json!(["file:///client"]));
    assert_eq!(
        out["cachedRoots"],
        json!(["file:///srv/static"]),
        "the post-initialize request got the static roots"
    );
    gw.stop().await;
}

#[tokio::test]
async fn roots_asked_outside_a_call_without_static_roots_join_the_next_calls_first_round() {
    let gw = Gateway::with(Options {
        server_args: vec!["--roots-on-init".into()],
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let caps = json!({"roots": {}});
    c.send(&c.body("server/discover", json!({}), &caps))
        .await
        .result();
    // Let the post-initialize roots/list reach the gateway, where it waits for a call.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = c.call_tool("list_roots", json!({}), &caps).await;
    let mut answers = serde_json::Map::new();
    // Possibly two roots requests: the held post-initialize one and the call's own.
    let mut rounds = 0;
    let mut reply = r;
    loop {
        rounds += 1;
        assert!(rounds < 5, "too many rounds");
        if reply.result()["resultType"] == "complete" {
            break;
        }
        for k in reply.input_keys() {
            answers.insert(k, roots(&["file:///held"]));
        }
        reply = c
            .retry_tool(
                "list_roots",
                json!({}),
                &caps,
                serde_json::Value::Object(answers.clone()),
                &reply.state(),
            )
            .await;
    }
    let out = reply.tool_json();
    assert_eq!(out["roots"], json!(["file:///held"]), "{out:#}");
    // Both the held post-initialize request and the call's own were answered by the client
    // (the server may read its cache before the held answer lands, so check the wire).
    gw.wait_log(10, "two roots answers from the client", |msgs| {
        msgs.iter()
            .filter(|m| m["result"]["roots"][0]["uri"] == "file:///held")
            .count()
            == 2
    })
    .await;
    gw.stop().await;
}

/// The `roots/list` a legacy server sends from its `initialized` handler is held for the
/// session's next call; when that call's result comes before its round does, the request goes
/// back to the session (the next call puts it to the client) instead of being lost.
#[tokio::test]
async fn roots_held_for_a_call_that_ends_at_once_reach_the_client_on_the_next_call() {
    let gw = Gateway::with(Options {
        server_args: vec!["--roots-on-init".into()],
        // Wide enough that the echo's result always comes before the window closes.
        extra: "[state]\ncoalesce_window = \"2s\"\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let caps = json!({"roots": {}});
    c.send(&c.body("tools/list", json!({}), &caps))
        .await
        .result();
    let init = wait_roots_asked(&gw).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let echo = c.call_tool("echo", json!({"text": "fast"}), &caps).await;
    assert_eq!(echo.tool_json(), json!({"echo": "fast"}));
    let first = answer_roots_until_done(&c, &caps, "file:///given").await;
    assert_eq!(first["roots"], json!(["file:///given"]), "{first:#}");
    gw.wait_log(
        10,
        "the post-initialize roots/list answered by the client",
        |msgs| {
            msgs.iter()
                .any(|m| m["id"] == init && m["result"]["roots"][0]["uri"] == "file:///given")
        },
    )
    .await;
    // What the issue saw: the server's cache of the roots it asked for at initialization.
    let second = answer_roots_until_done(&c, &caps, "file:///later").await;
    assert_eq!(
        second["cachedRoots"],
        json!(["file:///given"]),
        "{second:#}"
    );
    gw.stop().await;
}

/// Waits until the backend has sent its first `roots/list`; its id.
async fn wait_roots_asked(gw: &Gateway) -> serde_json::Value {
    for _ in 0..500 {
        let sent = gw
            .backend_log()
            .into_iter()
            .find(|e| e["dir"] == "out" && e["msg"]["method"] == "roots/list");
        if let Some(sent) = sent {
            return sent["msg"]["id"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the backend never asked for roots: {:#?}", gw.backend_log());
}

/// Calls `list_roots`, answering every roots request of each round with `uri`; its output.
async fn answer_roots_until_done(
    c: &Client,
    caps: &serde_json::Value,
    uri: &str,
) -> serde_json::Value {
    let mut reply = c.call_tool("list_roots", json!({}), caps).await;
    for _ in 0..5 {
        if reply.result()["resultType"] == "complete" {
            return reply.tool_json();
        }
        let answers = reply.input_keys().into_iter().map(|k| (k, roots(&[uri])));
        reply = c
            .retry_tool(
                "list_roots",
                json!({}),
                caps,
                serde_json::Value::Object(answers.collect()),
                &reply.state(),
            )
            .await;
    }
    panic!("too many rounds: {:#}", reply.body);
}

#[tokio::test]
async fn a_backend_that_dies_mid_call_fails_that_call_and_is_replaced() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let r = c.call_tool("crash", json!({}), &json!({})).await;
    assert_eq!(r.error_code(), -31001);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fixture"),
        "{:#}",
        r.body
    );
    let again = c
        .call_tool("echo", json!({"text": "still here"}), &json!({}))
        .await;
    assert_eq!(again.tool_json(), json!({"echo": "still here"}));
    gw.stop().await;
}

#[tokio::test]
async fn a_backend_that_dies_while_parked_fails_the_retry_clearly() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let r = c.call_tool("ask_form", json!({}), &caps).await;
    let key = r.key_for("elicitation/create");
    let pid = gw
        .backend_log()
        .into_iter()
        .find(|e| e["msg"]["params"]["name"] == "ask_form")
        .expect("call logged")["pid"]
        .as_u64()
        .expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let done = c
        .retry_tool(
            "ask_form",
            json!({}),
            &caps,
            json!({ key: accept(json!({"name": "x"})) }),
            &r.state(),
        )
        .await;
    assert_eq!(done.error_code(), -31001);
    assert!(
        done.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed"),
        "{:#}",
        done.body
    );
    assert_eq!(gw.parked(), 0);
    gw.stop().await;
}

#[tokio::test]
async fn past_the_pool_maximum_callers_queue_then_get_backend_busy() {
    let gw = Gateway::with(Options {
        extra: "[limits]\nqueue_wait = \"300ms\"\n".into(),
        backend_extra: "pool_max = 1\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    // One parked interactive call holds the only session.
    let held = c.call_tool("ask_form", json!({}), &caps).await;
    assert_eq!(held.result()["resultType"], "input_required");
    let busy = c.call_tool("ask_form", json!({}), &caps).await;
    assert_eq!(busy.error_code(), -31000);
    assert!(
        busy.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("busy"),
        "{:#}",
        busy.body
    );
    gw.stop().await;
}

/// Backend sessions started so far (each begins with `initialize`).
fn backend_starts(gw: &Gateway) -> usize {
    gw.backend_received()
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count()
}

/// `refused` was turned away at the parked limit, and no backend session was started for it
/// (`before`: the sessions started until then).
fn refused_before_a_start(gw: &Gateway, refused: &Reply, before: usize) {
    assert_eq!(refused.error_code(), -31000, "{:#}", refused.body);
    assert!(refused.error_message().contains("too many calls waiting"));
    assert_eq!(
        backend_starts(gw),
        before,
        "no backend session was started for it"
    );
}

#[tokio::test]
async fn a_principal_at_its_parked_limit_is_refused_before_a_backend_starts() {
    let gw = Gateway::with(Options {
        extra: "[limits]\nmax_parked_per_principal = 1\n".into(),
        ..Default::default()
    })
    .await;
    let alice = gw.client().with_principal("alice");
    let caps = json!({"elicitation": {}});
    let first = alice.call_tool("ask_form", json!({}), &caps).await;
    assert_eq!(first.result()["resultType"], "input_required");
    let before = backend_starts(&gw);
    let refused = alice.call_tool("ask_form", json!({}), &caps).await;
    refused_before_a_start(&gw, &refused, before);
    // Another principal is not affected, and calls that need no input still run.
    let bob = gw.client().with_principal("bob");
    assert_eq!(
        bob.call_tool("ask_form", json!({}), &caps).await.result()["resultType"],
        "input_required"
    );
    let echo = alice
        .call_tool("echo", json!({"text": "hi"}), &json!({}))
        .await;
    assert_eq!(echo.result()["resultType"], "complete");
    gw.stop().await;
}

#[tokio::test]
async fn under_auto_a_call_found_to_be_held_is_refused_at_the_limit_before_a_backend_starts() {
    let gw = Gateway::with(Options {
        extra: "[limits]\nmax_parked_per_principal = 1\n".into(),
        backend_extra: "replay = \"auto\"\nreplay_tools = { ask_form = \"hold\" }\n".into(),
        ..Default::default()
    })
    .await;
    let alice = gw.client().with_principal("alice");
    let caps = json!({"elicitation": {}});
    // Fetches alice's tool annotations (echo is read-only: replayed, never parked).
    let echo = alice.call_tool("echo", json!({"text": "hi"}), &caps).await;
    assert_eq!(echo.result()["resultType"], "complete");
    let parked = alice.call_tool("ask_form", json!({}), &caps).await;
    assert_eq!(parked.result()["resultType"], "input_required");
    let before = backend_starts(&gw);
    // A tool the annotations do not name is held under `auto`; alice is at her limit.
    let refused = alice.call_tool("unlisted", json!({}), &caps).await;
    refused_before_a_start(&gw, &refused, before);
    gw.stop().await;
}

#[tokio::test]
async fn sessions_are_never_shared_across_principals() {
    let gw = Gateway::start().await;
    let alice = gw.client().with_principal("alice");
    let bob = gw.client().with_principal("bob");
    let a = alice
        .call_tool("session_info", json!({}), &json!({}))
        .await
        .tool_json();
    let b = bob
        .call_tool("session_info", json!({}), &json!({}))
        .await
        .tool_json();
    let a2 = alice
        .call_tool("session_info", json!({}), &json!({}))
        .await
        .tool_json();
    assert_ne!(
        a["pid"], b["pid"],
        "different principals, different backend sessions"
    );
    assert_eq!(a["pid"], a2["pid"], "the same principal reuses its session");
    gw.stop().await;
}

#[tokio::test]
async fn the_backend_sees_exactly_the_declared_capabilities() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let info = c
        .call_tool(
            "session_info",
            json!({}),
            &json!({"sampling": {}, "elicitation": {}}),
        )
        .await
        .tool_json();
    assert_eq!(info["protocolVersion"], "2025-11-25");
    assert_eq!(
        info["clientCapabilities"],
        json!({"sampling": {}, "elicitation": {"form": {}}})
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_older_backend_version_is_accepted_and_gets_its_own_shapes() {
    for version in ["2024-11-05", "2025-06-18"] {
        let gw = Gateway::with(Options {
            server_args: vec!["--protocol".into(), version.into()],
            ..Default::default()
        })
        .await;
        let c = gw.client();
        let info = c
            .call_tool("session_info", json!({}), &caps_all())
            .await
            .tool_json();
        assert_eq!(info["protocolVersion"], version);
        if version == "2025-06-18" {
            let r = c
                .call_tool("ask_form", json!({}), &json!({"elicitation": {}}))
                .await;
            let key = r.key_for("elicitation/create");
            let done = c
                .retry_tool(
                    "ask_form",
                    json!({}),
                    &json!({"elicitation": {}}),
                    json!({ key: accept(json!({"name": "old"})) }),
                    &r.state(),
                )
                .await;
            assert_eq!(done.tool_json()["content"]["name"], "old");
        }
        gw.stop().await;
    }
}

#[tokio::test]
async fn prompts_and_resources_run_rounds_too_and_not_found_is_invalid_params() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let r = c
        .send(&c.body(
            "prompts/get",
            json!({"name": "greet", "arguments": {"greeting": "Hi"}}),
            &caps,
        ))
        .await;
    let key = r.key_for("elicitation/create");
    let params = json!({"name": "greet", "arguments": {"greeting": "Hi"}, "inputResponses": { key: accept(json!({"name": "Kim"})) }, "requestState": r.state()});
    let done = c.send(&c.body("prompts/get", params, &caps)).await;
    assert_eq!(done.result()["messages"][0]["content"]["text"], "Hi, Kim");

    let r = c
        .send(&c.body("resources/read", json!({"uri": "fixture://secret"}), &caps))
        .await;
    let key = r.key_for("elicitation/create");
    let params = json!({"uri": "fixture://secret", "inputResponses": { key: accept(json!({"password": "open-sesame"})) }, "requestState": r.state()});
    let done = c.send(&c.body("resources/read", params, &caps)).await;
    assert_eq!(done.result()["contents"][0]["text"], "unlocked");
    assert_eq!(
        done.result()["ttlMs"],
        0,
        "results of retries are never cacheable"
    );

    let missing = c
        .send(&c.body(
            "resources/read",
            json!({"uri": "fixture://nope"}),
            &json!({}),
        ))
        .await;
    assert_eq!(missing.error_code(), -32602);
    gw.stop().await;
}

#[tokio::test]
async fn closing_the_connection_before_any_reply_cancels_the_call_upstream() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let body = c.body(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 20000}}),
        &json!({}),
    );
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), c.send(&body)).await;
    wait_slow_call_cancelled(&gw).await;
    gw.stop().await;
}

#[tokio::test]
async fn shutdown_abandons_parked_calls_so_backends_hear_cancel() {
    let mut gw = Gateway::start().await;
    let c = gw.client();
    let r = c
        .call_tool("ask_form", json!({}), &json!({"elicitation": {}}))
        .await;
    assert_eq!(r.result()["resultType"], "input_required");
    let running = gw.running.take().expect("running");
    tokio::time::timeout(std::time::Duration::from_secs(20), running.shutdown())
        .await
        .expect("shutdown finishes");
    let got = gw.backend_received();
    assert!(
        got.iter().any(|m| m["result"]["action"] == "cancel"),
        "the backend's elicitation was answered with cancel: {got:#?}"
    );
    assert!(got.iter().any(|m| m["method"] == "notifications/cancelled"));
    gw.stop().await;
}

/// Waits until the backend was told `notifications/cancelled` for its `slow` call.
async fn wait_slow_call_cancelled(gw: &Gateway) {
    gw.wait_log(10, "notifications/cancelled for the slow call", |msgs| {
        let call = msgs
            .iter()
            .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow");
        call.is_some_and(|call| {
            msgs.iter().any(|m| {
                m["method"] == "notifications/cancelled" && m["params"]["requestId"] == call["id"]
            })
        })
    })
    .await;
}

#[tokio::test]
async fn a_retry_that_no_longer_declares_a_capability_is_not_asked_for_it() {
    let gw = Gateway::with(Options::one_round_for_a_pair()).await;
    let c = gw.client();
    let r1 = c.call_tool("pair", json!({}), &caps_all()).await;
    let ke = r1.key_for("elicitation/create");
    // The retry declares elicitation only, and answers it.
    let r2 = c
        .retry_tool(
            "pair",
            json!({}),
            &json!({"elicitation": {}}),
            json!({ ke: accept(json!({"name": "Bo"})) }),
            &r1.state(),
        )
        .await;
    let r = r2.result();
    assert_ne!(
        r["resultType"], "input_required",
        "the sampling request is not sent to a retry that did not declare sampling: {r:#}"
    );
    // The backend heard the refusal a client without sampling gives.
    let refused = gw
        .backend_received()
        .into_iter()
        .filter(|m| m.get("method").is_none() && m.get("error").is_some())
        .count();
    assert_eq!(refused, 1, "{:#?}", gw.backend_received());
    gw.stop().await;
}

#[tokio::test]
async fn a_backend_asking_for_more_than_max_input_requests_is_refused_the_rest() {
    let gw = Gateway::with(Options {
        extra: "[limits]\nmax_input_requests = 1\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let r1 = c.call_tool("pair", json!({}), &caps_all()).await;
    assert_eq!(r1.input_keys().len(), 1, "{:#}", r1.body);
    let key = r1.input_keys().remove(0);
    gw.wait_log(
        5,
        "the request over the limit is answered with an error",
        |log| {
            log.iter()
                .any(|m| m.get("method").is_none() && m.get("error").is_some())
        },
    )
    .await;
    let answer = if key.starts_with("elicitation") {
        accept(json!({"name": "Bo"}))
    } else {
        sampled("hi")
    };
    let done = c
        .retry_tool(
            "pair",
            json!({}),
            &caps_all(),
            json!({ key: answer }),
            &r1.state(),
        )
        .await;
    assert_ne!(
        done.result()["resultType"],
        "input_required",
        "{:#}",
        done.body
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_call_that_times_out_leaves_its_session_to_close() {
    let gw = Gateway::with(Options {
        extra: "[limits]\nrequest_timeout = \"500ms\"\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let late = c.call_tool("slow", json!({"ms": 3000}), &json!({})).await;
    assert_eq!(late.error_code(), -31001, "{:#}", late.body);
    // The backend may be stuck: the next call starts a session of its own.
    let next = c
        .call_tool("echo", json!({"text": "fresh"}), &json!({}))
        .await;
    assert_eq!(next.tool_json(), json!({"echo": "fresh"}));
    let initialized = gw
        .backend_received()
        .iter()
        .filter(|m| m["method"] == "initialize")
        .count();
    assert_eq!(initialized, 2, "{:#?}", gw.backend_received());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_waits_for_a_running_call_and_serves_the_retry_of_one_that_parks_late() {
    let gw = Gateway::with(Options {
        backend_extra: "pool_max = 1\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    // The one session is held by an interactive call; the next call waits for it, and parks
    // only after the drain has begun.
    let first = tokio::spawn({
        let (c, caps) = (c.clone(), caps.clone());
        async move { c.call_tool("slow", json!({"ms": 800}), &caps).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let second = tokio::spawn({
        let (c, caps) = (c.clone(), caps.clone());
        async move { c.call_tool("ask_form", json!({}), &caps).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let running = gw.running.as_ref().expect("running");
    let drain = async {
        running.drain(std::time::Duration::from_secs(10)).await;
        started.elapsed()
    };
    let client_side = async {
        let parked = second.await.expect("second call");
        let key = parked.key_for("elicitation/create");
        let done = c
            .retry_tool(
                "ask_form",
                json!({}),
                &caps,
                json!({ key: accept(json!({"name": "Late"})) }),
                &parked.state(),
            )
            .await;
        (done, started.elapsed())
    };
    let (drained_after, (done, retried_after)) = tokio::join!(drain, client_side);
    assert_eq!(done.tool_json()["content"]["name"], "Late");
    assert!(
        drained_after >= retried_after,
        "the drain ended ({drained_after:?}) only after the late call's retry was served ({retried_after:?})"
    );
    let _ = first.await;
    gw.stop().await;
}

#[tokio::test]
async fn log_messages_reach_the_client_only_at_or_above_the_level_it_asked_for() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let levels = |r: &Reply| -> Vec<String> {
        r.notifications
            .iter()
            .filter(|n| n["method"] == "notifications/message")
            .map(|n| n["params"]["level"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    // Over stdio a log message names no request: it goes to the session's interactive call.
    let caps = json!({"elicitation": {}});
    let mut body = c.body(
        "tools/call",
        json!({"name": "log_levels", "arguments": {}}),
        &caps,
    );
    body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("error");
    let r = c.send(&body).await;
    assert_eq!(r.tool_json(), json!({"sent": 8}));
    assert_eq!(levels(&r), ["error", "critical", "alert", "emergency"]);
    // Without a level, no log message at all.
    let quiet = c.call_tool("log_levels", json!({}), &caps).await;
    assert!(levels(&quiet).is_empty(), "{:?}", quiet.notifications);
    // A level that is not one of the eight is refused.
    body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("loud");
    let bad = c.send(&body).await;
    assert_eq!(bad.error_code(), -32602, "{:#}", bad.body);
    gw.stop().await;
}

/// A method the backend does not implement is 404 with -32601, as one the gateway does not
/// know is: the fixture has no completions.
#[tokio::test]
async fn a_method_the_backend_does_not_implement_is_404() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let params = json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "who", "value": "A"}});
    let r = c
        .send(&c.body("completion/complete", params, &json!({})))
        .await;
    assert_eq!(r.error_code(), -32601, "{:#}", r.body);
    assert_eq!(r.status, 404);
    gw.stop().await;
}

/// Numbers pass through as the client wrote them, both ways: an integer past 64 bits, a
/// negative zero, a decimal's trailing zero and an exponent past a double's range reach the
/// backend in the answer unchanged (the exponent's sign spelt out), and come back in its result.
#[tokio::test]
async fn numbers_reach_the_backend_as_the_client_wrote_them() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let first = c.call_tool("ask_form", json!({}), &caps).await;
    let key = first.key_for("elicitation/create");
    let content = r#"{"name":"Ada","acct":18446744073709551617,"z":-0,"f":1.10,"e":1e400}"#;
    let answer = format!(r#"{{"action":"accept","content":{content}}}"#);
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("an answer");
    let done = c
        .retry_tool(
            "ask_form",
            json!({}),
            &caps,
            json!({ key: answer }),
            &first.state(),
        )
        .await;
    let text = done.result()["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned();
    for number in [
        "18446744073709551617",
        "\"z\":-0",
        "\"f\":1.10",
        "\"e\":1e+400",
    ] {
        assert!(text.contains(number), "{number} in {text}");
    }
    gw.stop().await;
}

//! The reverse bridge over raw HTTP, in front of the built-in fixture served as a 2026-07-28
//! server (`legacy-server --http ADDR --modern`): `initialize` answered from its
//! `server/discover`, an `InputRequiredResult` turned into a request to the client, and
//! URL-mode elicitation as 2025-11-25 says it (an `elicitationId`, then
//! `notifications/elicitation/complete`) or, for a client that cannot take it, -32021.

#[path = "interop/harness.rs"]
mod harness;
mod legacy_client;

use harness::{Proc, start_gateway};
use legacy_client::{Legacy, tool_text};
use serde_json::json;
use std::process::{Command, Stdio};

fn start_modern_fixture() -> (Proc, String) {
    let mut server = Proc::spawn(
        "modern fixture",
        Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["legacy-server", "--http", "127.0.0.1:0", "--modern"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = server.announced_url();
    (server, url)
}

fn gateway() -> (Proc, Proc, String) {
    let (server, backend) = start_modern_fixture();
    let (gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"modern\"\nkind = \"http\"\nurl = \"{backend}\"\n"
    ));
    (server, gateway, url)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_round_becomes_a_request_to_the_client() {
    let (_server, _gateway, url) = gateway();
    let mut c = Legacy::new(&url);
    let (status, init) = c.initialize("2025-06-18", json!({"elicitation": {}})).await;
    assert_eq!(status, 200, "{init:#}");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert!(init["result"]["capabilities"].is_object(), "{init:#}");
    assert!(init["result"]["serverInfo"]["name"].is_string(), "{init:#}");
    let (answer, seen) = c
        .call(
            1,
            "tools/call",
            json!({"name": "ask_form", "arguments": {}}),
            |_| json!({"action": "accept", "content": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0]["method"], "elicitation/create");
    assert_eq!(answer["id"], 1);
    assert!(
        answer["result"].get("resultType").is_none(),
        "legacy shape: {answer:#}"
    );
    assert_eq!(tool_text(&answer)["content"]["name"], "Ada", "{answer:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn url_elicitation_carries_an_id_and_its_completion_for_2025_11_25() {
    let (_server, _gateway, url) = gateway();
    let mut c = Legacy::new(&url);
    let caps = json!({"elicitation": {"form": {}, "url": {}}});
    c.initialize("2025-11-25", caps).await;
    let (answer, seen) = c
        .call(
            1,
            "tools/call",
            json!({"name": "ask_url", "arguments": {}}),
            |_| json!({"action": "accept"}),
        )
        .await;
    assert_eq!(seen.len(), 2, "the request, then its completion: {seen:#?}");
    let asked = &seen[0];
    assert_eq!(asked["params"]["mode"], "url", "{asked:#}");
    let elicitation = asked["params"]["elicitationId"]
        .as_str()
        .expect("an elicitationId");
    assert_eq!(seen[1]["method"], "notifications/elicitation/complete");
    assert_eq!(seen[1]["params"]["elicitationId"], elicitation);
    assert_eq!(tool_text(&answer), json!({"url": "accept"}), "{answer:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn url_elicitation_is_a_missing_capability_before_2025_11_25() {
    let (_server, _gateway, url) = gateway();
    let mut c = Legacy::new(&url);
    // 2025-06-18 has form elicitation only, whatever the client says.
    c.initialize("2025-06-18", json!({"elicitation": {"url": {}}}))
        .await;
    let (answer, seen) = c
        .call(
            1,
            "tools/call",
            json!({"name": "ask_url", "arguments": {}}),
            |r| panic!("nothing may be asked: {r}"),
        )
        .await;
    assert!(seen.is_empty());
    assert_eq!(answer["error"]["code"], -32021, "{answer:#}");
    assert_eq!(
        answer["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_response_to_a_request_never_sent_is_refused() {
    let (_server, _gateway, url) = gateway();
    let mut c = Legacy::new(&url);
    c.initialize("2025-11-25", json!({"elicitation": {}})).await;
    let stray = json!({"jsonrpc": "2.0", "id": "mrtr-1", "result": {"action": "accept"}});
    let r = c.post(&stray).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json().await["error"]["code"], -32600);
}

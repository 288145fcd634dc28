//! requestState is attacker-controlled: every forged, altered, replayed, stale, expired or
//! misdirected state gets the same -32602 error and causes nothing upstream, while the real
//! parked call is undisturbed.

mod common;

use common::*;
use serde_json::{Value, json};

const FROZEN: &str = "Invalid requestState: issue the request again without it";

fn assert_frozen(r: &Reply) {
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.error_code(), -32602, "{:#}", r.body);
    assert_eq!(
        r.body["error"]["message"], FROZEN,
        "one message for every failure"
    );
    assert!(
        r.body["error"].get("data").is_none(),
        "no hint of which check failed"
    );
}

struct Parked {
    gw: Gateway,
    client: Client,
    key: String,
    state: String,
}

fn caps() -> Value {
    json!({"elicitation": {}})
}

async fn parked_call(extra: &str) -> Parked {
    parked_with(extra, "").await
}

/// A parked call, with `backend_extra` added to the backend's table.
async fn parked_with(extra: &str, backend_extra: &str) -> Parked {
    let gw = Gateway::with(Options {
        extra: extra.into(),
        backend_extra: format!("pool_max = 64\n{backend_extra}"),
        ..Default::default()
    })
    .await;
    let client = gw.client().with_principal("alice");
    let r = client
        .call_tool("ask_form", json!({"message": "m"}), &caps())
        .await;
    let key = r.key_for("elicitation/create");
    let state = r.state();
    Parked {
        gw,
        client,
        key,
        state,
    }
}

impl Parked {
    fn answer(&self) -> Value {
        json!({ self.key.clone(): accept(json!({"name": "real"})) })
    }

    /// Sends a bad retry and checks the frozen error and that the backend heard nothing.
    async fn refused(&self, client: &Client, args: Value, state: &str) {
        self.refused_on(client, "ask_form", args, state).await;
    }

    /// The same, for a retry presented on `tool`.
    async fn refused_on(&self, client: &Client, tool: &str, args: Value, state: &str) {
        let before = self.gw.backend_received().len();
        let r = client
            .retry_tool(tool, args, &caps(), self.answer(), state)
            .await;
        assert_frozen(&r);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            self.gw.backend_received().len(),
            before,
            "nothing reached the backend"
        );
        assert_eq!(self.gw.parked(), 1, "the parked call is undisturbed");
    }

    /// The genuine retry still completes afterwards.
    async fn completes(self) {
        let done = self
            .client
            .retry_tool(
                "ask_form",
                json!({"message": "m"}),
                &caps(),
                self.answer(),
                &self.state,
            )
            .await;
        assert_eq!(done.tool_json()["content"]["name"], "real");
        self.gw.stop().await;
    }
}

fn flip(state: &str, at: usize) -> String {
    let mut bytes = state.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ascii")
}

#[tokio::test]
async fn a_tampered_state_is_refused() {
    let p = parked_call("").await;
    let mid = p.state.len() / 2;
    p.refused(&p.client, json!({"message": "m"}), &flip(&p.state, mid))
        .await;
    p.refused(
        &p.client,
        json!({"message": "m"}),
        &flip(&p.state, p.state.len() - 1),
    )
    .await;
    p.completes().await;
}

#[tokio::test]
async fn a_truncated_state_is_refused() {
    let p = parked_call("").await;
    p.refused(
        &p.client,
        json!({"message": "m"}),
        &p.state[..p.state.len() - 4],
    )
    .await;
    p.refused(&p.client, json!({"message": "m"}), "v1.").await;
    p.refused(&p.client, json!({"message": "m"}), "").await;
    p.completes().await;
}

#[tokio::test]
async fn a_state_with_an_unknown_key_is_refused() {
    let p = parked_call("").await;
    let (_, payload) = p.state.rsplit_once('.').expect("framed");
    p.refused(
        &p.client,
        json!({"message": "m"}),
        &format!("v1.other-key.{payload}"),
    )
    .await;
    p.completes().await;
}

#[tokio::test]
async fn a_state_from_another_gateway_is_refused() {
    let p = parked_call("").await;
    let other = Gateway::start().await;
    let foreign = other
        .client()
        .with_principal("alice")
        .call_tool("ask_form", json!({"message": "m"}), &caps())
        .await
        .state();
    p.refused(&p.client, json!({"message": "m"}), &foreign)
        .await;
    other.stop().await;
    p.completes().await;
}

#[tokio::test]
async fn another_principal_cannot_use_the_state() {
    let p = parked_call("").await;
    let bob = p.gw.client().with_principal("bob");
    p.refused(&bob, json!({"message": "m"}), &p.state).await;
    let anonymous = p.gw.client();
    p.refused(&anonymous, json!({"message": "m"}), &p.state)
        .await;
    p.completes().await;
}

#[tokio::test]
async fn the_state_is_bound_to_the_tool_and_its_arguments() {
    let p = parked_call("").await;
    p.refused(&p.client, json!({"message": "other"}), &p.state)
        .await;
    p.refused(&p.client, json!({"message": "m", "extra": 1}), &p.state)
        .await;
    // Another tool with the same state.
    p.refused_on(&p.client, "sample", json!({"message": "m"}), &p.state)
        .await;
    p.completes().await;
}

#[tokio::test]
async fn a_state_is_good_for_one_use() {
    let p = parked_call("").await;
    let done = p
        .client
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            p.answer(),
            &p.state,
        )
        .await;
    assert_eq!(done.tool_json()["content"]["name"], "real");
    let before = p.gw.backend_received().len();
    let again = p
        .client
        .retry_tool(
            "ask_form",
            json!({"message": "m"}),
            &caps(),
            p.answer(),
            &p.state,
        )
        .await;
    assert_frozen(&again);
    assert_eq!(
        p.gw.backend_received().len(),
        before,
        "a replay causes nothing upstream"
    );
    p.gw.stop().await;
}

#[tokio::test]
async fn a_state_from_an_earlier_round_is_refused() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let caps = caps_all();
    let r1 = c.call_tool("all_three", json!({}), &caps).await;
    let k1 = r1.key_for("elicitation/create");
    let answer = json!({ k1: accept(json!({"name": "n"})) });
    let r2 = c
        .retry_tool("all_three", json!({}), &caps, answer.clone(), &r1.state())
        .await;
    assert_eq!(r2.result()["resultType"], "input_required");
    let before = gw.backend_received().len();
    let stale = c
        .retry_tool("all_three", json!({}), &caps, answer, &r1.state())
        .await;
    assert_frozen(&stale);
    assert_eq!(gw.backend_received().len(), before);
    // The current round still works.
    let k2 = r2.key_for("sampling/createMessage");
    let r3 = c
        .retry_tool(
            "all_three",
            json!({}),
            &caps,
            json!({ k2: sampled("s") }),
            &r2.state(),
        )
        .await;
    assert_eq!(r3.result()["resultType"], "input_required");
    gw.stop().await;
}

#[tokio::test]
async fn an_expired_state_is_refused() {
    let gw = Gateway::with(Options {
        extra: "[state]\npark_ttl = \"1s\"\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let r = c.call_tool("ask_form", json!({}), &caps()).await;
    let key = r.key_for("elicitation/create");
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    let late = c
        .retry_tool(
            "ask_form",
            json!({}),
            &caps(),
            json!({ key: accept(json!({"name": "x"})) }),
            &r.state(),
        )
        .await;
    assert_frozen(&late);
    gw.stop().await;
}

#[tokio::test]
async fn a_state_that_is_not_a_string_is_refused() {
    let p = parked_call("").await;
    let body = p.client.body("tools/call", json!({"name": "ask_form", "arguments": {"message": "m"}, "requestState": 42, "inputResponses": p.answer()}), &caps());
    let r = p.client.send(&body).await;
    assert_frozen(&r);
    p.completes().await;
}

#[tokio::test]
async fn a_state_is_refused_at_another_backends_endpoint() {
    let p = parked_with(
        "",
        "path = \"/a\"\n[[backend]]\nname = \"other\"\nkind = \"builtin\"\npath = \"/b\"\n",
    )
    .await;
    let at_b = Client::new(&p.gw.url.replace("/a", "/b")).with_principal("alice");
    p.refused(&at_b, json!({"message": "m"}), &p.state).await;
    p.completes().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_racing_for_one_state_get_the_result_or_the_state_error_never_another() {
    let gw = Gateway::start().await;
    let client = gw.client().with_principal("alice");
    for _ in 0..20 {
        let r = client
            .call_tool("ask_form", json!({"message": "m"}), &caps())
            .await;
        let key = r.key_for("elicitation/create");
        let state = r.state();
        let retries = (0..6).map(|_| {
            let (client, key, state) = (client.clone(), key.clone(), state.clone());
            tokio::spawn(async move {
                client
                    .retry_tool(
                        "ask_form",
                        json!({"message": "m"}),
                        &caps(),
                        json!({ key: accept(json!({"name": "n"})) }),
                        &state,
                    )
                    .await
            })
        });
        let mut completed = 0;
        for retry in retries {
            let r = retry.await.expect("retry");
            if r.body.get("error").is_some() {
                assert_frozen(&r);
            } else {
                assert_eq!(r.tool_json()["content"]["name"], "n");
                completed += 1;
            }
        }
        assert_eq!(completed, 1, "exactly one retry completes the call");
    }
    gw.stop().await;
}

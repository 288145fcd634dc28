//! Unit tests of the call state machine (`call`): calls driven through [`Bridge::handle`], as the
//! downstream face drives them, against the built-in legacy server run in-process over in-memory
//! pipes. Nothing holds a real socket or child, so time is paused: coalescing windows, park
//! deadlines and wind-down graces pass at once and in order. Each test shows one transition and
//! is named after it.

use crate::bridge::{Bridge, Reply, Request, invalid_state};
use crate::config::{Config, Transport};
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND};
use crate::metrics::{self, Metrics};
use crate::protocol::meta::RequestMeta;
use crate::seal::{self, Claims};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::Span;

const PARK_TTL: Duration = Duration::from_secs(30);

/// The elicitation answer most tests give.
fn ada() -> Value {
    json!({"action": "accept", "content": {"name": "Ada"}})
}

/// An answer naming Ada to the elicitation `key`.
fn named(key: &str) -> Value {
    json!({key: ada()})
}

/// The sampling answer.
fn sampled() -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": "Hello there"}, "model": "m"})
}

/// The built-in backend with these options, logging every message it sees to `log`.
fn builtin(log: PathBuf, options: mrtr_fixture::Options) -> Transport {
    Transport::Builtin(mrtr_fixture::Options {
        log: Some(log),
        ..options
    })
}

/// An engine in front of one built-in backend, with the metrics it counts into and the
/// backend's message log.
struct Gateway {
    bridge: Arc<Bridge>,
    registry: Registry,
    log: PathBuf,
}

impl Gateway {
    fn new() -> Gateway {
        Gateway::start(mrtr_fixture::Options::default())
    }

    /// In front of a backend that pushes whatever it likes, declared or not, as some real
    /// legacy servers do.
    fn with_backend_ignoring_capabilities() -> Gateway {
        Gateway::start(mrtr_fixture::Options {
            ignore_capabilities: true,
            ..Default::default()
        })
    }

    /// In front of a backend that asks for roots from its `initialized` handler.
    fn with_backend_asking_roots_on_init() -> Gateway {
        Gateway::start(mrtr_fixture::Options {
            roots_on_init: true,
            ..Default::default()
        })
    }

    fn start(backend: mrtr_fixture::Options) -> Gateway {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let log = std::env::temp_dir().join(format!("mrtr-call-{}-{n}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let text = format!(
            "[state]\npark_ttl = \"{}s\"\n[[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
            PARK_TTL.as_secs()
        );
        let mut config = Config::parse(&text, None).expect("config");
        config.backends[0].transport = builtin(log.clone(), backend);
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let bridge = Bridge::with_metrics(Arc::new(config), metrics, &crate::shard::Shards::none());
        Gateway {
            bridge,
            registry,
            log,
        }
    }

    /// Serves one request and returns its outcome, after whatever notifications came first.
    async fn send(&self, req: Request) -> Result<Value, ErrorObject> {
        outcome(&mut self.bridge.handle(0, req, Span::none())).await
    }

    /// The value of one series, e.g. `state_failures_total{reason="stale_round"}`.
    fn metric(&self, series: &str) -> f64 {
        let text = metrics::encode(&self.registry);
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    }

    /// How many retries failed the requestState check `reason`.
    fn state_failures(&self, reason: &str) -> f64 {
        self.metric(&format!("state_failures_total{{reason=\"{reason}\"}}"))
    }

    /// The claims sealed in an `InputRequiredResult`'s state.
    fn claims(&self, result: &Value) -> Claims {
        let state = result["requestState"].as_str().expect("a requestState");
        self.bridge
            .keys
            .open(state)
            .expect("a state this gateway sealed")
    }

    /// The messages the backend received (`in`) or sent (`out`), in order.
    fn backend_log(&self, dir: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["dir"] == dir)
            .map(|e| e["msg"].clone())
            .collect()
    }

    async fn close(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        self.bridge.close(deadline).await;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// One client call: what it asks for, with what it declared, as whom.
struct Call {
    tool: &'static str,
    arguments: Value,
    caps: Value,
    principal: &'static [u8],
}

impl Call {
    fn new(tool: &'static str, arguments: Value, caps: Value) -> Call {
        Call {
            tool,
            arguments,
            caps,
            principal: b"alice",
        }
    }

    /// `ask_form` (one form elicitation), declaring form elicitation.
    fn ask_form() -> Call {
        Call::new("ask_form", json!({}), json!({"elicitation": {}}))
    }

    /// The first request, without a requestState.
    fn first(&self) -> Request {
        let params = json!({"name": self.tool, "arguments": self.arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": self.caps,
        }});
        Request {
            id: None,
            method: "tools/call".into(),
            meta: RequestMeta::from_params(Some(&params)).expect("meta"),
            params: params.as_object().expect("object").clone(),
            principal: seal::digest(self.principal),
            authorization: None,
            param_headers: Default::default(),
        }
    }

    /// A plain request (`tools/list`) with this call's `_meta`.
    fn plain(&self, method: &str) -> Request {
        let mut req = self.first();
        req.method = method.into();
        req.params.retain(|k, _| k == "_meta");
        req
    }

    /// The retry of `round` (an `InputRequiredResult`) carrying `answers` by key.
    fn retry(&self, round: &Value, answers: Value) -> Request {
        let mut req = self.first();
        req.params
            .insert("requestState".into(), round["requestState"].clone());
        req.params.insert("inputResponses".into(), answers);
        req
    }
}

/// Reads replies until the final one.
async fn outcome(rx: &mut mpsc::Receiver<Reply>) -> Result<Value, ErrorObject> {
    loop {
        match rx.recv().await.expect("a final reply") {
            Reply::Notification(_) => {}
            Reply::Done(done) => return done.map(|p| p.into_value().expect("a JSON result")),
        }
    }
}

/// The keys of a round's input requests (sorted, as a JSON object's are).
fn keys(round: &Value) -> Vec<String> {
    assert_eq!(round["resultType"], "input_required", "{round:#}");
    round["inputRequests"]
        .as_object()
        .expect("inputRequests")
        .keys()
        .cloned()
        .collect()
}

/// What the tool reported: its single text block, parsed.
fn tool_output(result: &Value) -> Value {
    assert_eq!(result["resultType"], "complete", "{result:#}");
    let text = result["content"][0]["text"].as_str().expect("a text block");
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The one error every refused requestState gets.
fn assert_frozen(outcome: Result<Value, ErrorObject>) {
    let e = outcome.expect_err("refused");
    assert_eq!(
        (e.code, &e.message),
        (INVALID_PARAMS, &invalid_state().message)
    );
}

/// Lets paused time run in small steps until `done` holds (at most 5 s of it).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(start_paused = true)]
async fn a_call_that_asks_nothing_completes_in_one_reply_and_parks_nothing() {
    let gw = Gateway::new();
    let call = Call::new("echo", json!({"text": "hi"}), json!({"elicitation": {}}));
    let mut rx = gw.bridge.handle(0, call.first(), Span::none());
    let done = outcome(&mut rx).await.expect("a result");
    assert_eq!(tool_output(&done), json!({"echo": "hi"}));
    assert!(done.get("requestState").is_none(), "{done:#}");
    assert!(rx.recv().await.is_none(), "one final reply, then nothing");
    assert_eq!(gw.bridge.parked(), 0);
    assert_eq!(gw.metric("input_requests_total{kind=\"elicitation\"}"), 0.0);
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_push_parks_the_call_and_answers_input_required_with_one_key_and_a_sealed_state() {
    let gw = Gateway::new();
    let call = Call::ask_form();
    let round = gw.send(call.first()).await.expect("a round");
    assert_eq!(keys(&round), ["elicitation-1"]);
    let asked = &round["inputRequests"]["elicitation-1"];
    assert_eq!(asked["method"], "elicitation/create");
    assert_eq!(asked["params"]["message"], "What is your name?");
    let claims = gw.claims(&round);
    assert_eq!(claims.round, 1);
    assert_eq!(claims.outstanding, ["elicitation-1"]);
    assert_eq!(claims.principal, seal::digest(b"alice"));
    assert_eq!(gw.bridge.parked(), 1);
    assert_eq!(gw.metric("input_requests_total{kind=\"elicitation\"}"), 1.0);
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_retry_with_the_answer_completes_with_what_was_answered_and_frees_the_park() {
    let gw = Gateway::new();
    let call = Call::ask_form();
    let round = gw.send(call.first()).await.expect("a round");
    let done = gw
        .send(call.retry(&round, named("elicitation-1")))
        .await
        .expect("a result");
    assert_eq!(tool_output(&done), ada());
    eventually("the park is freed", || gw.bridge.parked() == 0).await;
    assert_eq!(
        gw.metric("retries_total{result=\"resumed\",reason=\"none\"}"),
        1.0
    );
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn two_pushes_that_come_together_form_one_round() {
    let gw = Gateway::new();
    let call = Call::new(
        "pair",
        json!({}),
        json!({"elicitation": {}, "sampling": {}}),
    );
    let round = gw.send(call.first()).await.expect("a round");
    assert_eq!(keys(&round), ["elicitation-1", "sampling-2"]);
    assert_eq!(gw.claims(&round).round, 1);
    let answers = json!({"elicitation-1": ada(), "sampling-2": sampled()});
    let done = gw
        .send(call.retry(&round, answers))
        .await
        .expect("a result");
    let out = tool_output(&done);
    assert_eq!(out["elicit"], ada());
    assert_eq!(out["sample"]["text"], "Hello there");
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_retry_missing_a_key_is_asked_again_for_that_key_in_the_same_park() {
    let gw = Gateway::new();
    let call = Call::new(
        "pair",
        json!({}),
        json!({"elicitation": {}, "sampling": {}}),
    );
    let first = gw.send(call.first()).await.expect("a round");
    assert_eq!(keys(&first), ["elicitation-1", "sampling-2"]);
    let again = gw
        .send(call.retry(&first, named("elicitation-1")))
        .await
        .expect("asked again");
    assert_eq!(keys(&again), ["sampling-2"]);
    assert_ne!(again["requestState"], first["requestState"]);
    let (before, after) = (gw.claims(&first), gw.claims(&again));
    assert_eq!(after.park, before.park, "the same park");
    assert_eq!(
        (after.round, after.outstanding),
        (2, vec!["sampling-2".to_owned()])
    );
    assert_eq!(gw.bridge.parked(), 1);
    assert_eq!(
        gw.metric("retries_total{result=\"asked_again\",reason=\"none\"}"),
        1.0
    );
    let done = gw
        .send(call.retry(&again, json!({"sampling-2": sampled()})))
        .await
        .expect("a result");
    let out = tool_output(&done);
    assert_eq!(out["elicit"], ada(), "the first retry's answer was kept");
    assert_eq!(out["sample"]["model"], "m");
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_second_question_after_the_first_answer_is_a_second_round_and_the_first_state_is_stale() {
    let gw = Gateway::new();
    let call = Call::new("two_step", json!({"tag": "t"}), json!({"elicitation": {}}));
    let first = gw.send(call.first()).await.expect("round 1");
    assert_eq!(
        first["inputRequests"]["elicitation-1"]["params"]["message"],
        "Name for t?"
    );
    let second = gw
        .send(call.retry(&first, named("elicitation-1")))
        .await
        .expect("round 2");
    assert_eq!(keys(&second), ["elicitation-2"]);
    let asked = &second["inputRequests"]["elicitation-2"]["params"]["message"];
    assert_eq!(asked, "Confirm Ada for t?");
    assert_eq!(gw.claims(&second).round, 2);

    assert_frozen(gw.send(call.retry(&first, named("elicitation-1"))).await);
    assert_eq!(gw.state_failures("stale_round"), 1.0);

    let yes = json!({"action": "accept", "content": {"answer": "yes"}});
    let done = gw
        .send(call.retry(&second, json!({"elicitation-2": yes})))
        .await
        .expect("a result");
    assert_eq!(
        tool_output(&done),
        json!({"tag": "t", "name": "Ada", "confirm": "yes"})
    );
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_state_presented_by_another_principal_is_refused_and_leaves_the_park_as_it_was() {
    let gw = Gateway::new();
    let call = Call::ask_form();
    let round = gw.send(call.first()).await.expect("a round");
    let mallory = Call {
        principal: b"mallory",
        ..Call::ask_form()
    };
    assert_frozen(gw.send(mallory.retry(&round, named("elicitation-1"))).await);
    assert_eq!(gw.state_failures("principal"), 1.0);
    assert_eq!(gw.bridge.parked(), 1);
    let done = gw
        .send(call.retry(&round, named("elicitation-1")))
        .await
        .expect("the owner's retry still works");
    assert_eq!(tool_output(&done), ada());
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_state_sent_with_other_arguments_is_refused_and_leaves_the_park_as_it_was() {
    let gw = Gateway::new();
    let call = Call::new(
        "ask_form",
        json!({"message": "Who?"}),
        json!({"elicitation": {}}),
    );
    let round = gw.send(call.first()).await.expect("a round");
    let other = Call::new(
        "ask_form",
        json!({"message": "Who else?"}),
        json!({"elicitation": {}}),
    );
    assert_frozen(gw.send(other.retry(&round, named("elicitation-1"))).await);
    assert_eq!(gw.state_failures("request"), 1.0);
    assert_eq!(gw.bridge.parked(), 1);
    let done = gw
        .send(call.retry(&round, named("elicitation-1")))
        .await
        .expect("the right retry still works");
    assert_eq!(tool_output(&done), ada());
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_input_the_request_did_not_declare_is_refused_upstream_and_never_shown_to_the_client() {
    // Sampling is pushed although only elicitation was declared.
    let gw = Gateway::with_backend_ignoring_capabilities();
    let call = Call::new("all_three", json!({}), json!({"elicitation": {}}));
    let round = gw.send(call.first()).await.expect("a round");
    assert_eq!(keys(&round), ["elicitation-1"]);
    let done = gw
        .send(call.retry(&round, named("elicitation-1")))
        .await
        .expect("a result, not another round");
    assert_eq!(done["isError"], true, "{done:#}");
    let said = tool_output(&done);
    assert!(
        said.as_str().is_some_and(|s| s.contains("sampling")),
        "{said}"
    );
    assert_eq!(gw.metric("input_requests_total{kind=\"sampling\"}"), 0.0);

    let sampling = gw
        .backend_log("out")
        .into_iter()
        .find(|m| m["method"] == "sampling/createMessage")
        .expect("the backend pushed sampling");
    let answer = gw
        .backend_log("in")
        .into_iter()
        .find(|m| m["id"] == sampling["id"] && m.get("method").is_none())
        .expect("the gateway answered it");
    assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND, "{answer:#}");
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_malformed_answer_is_refused_and_the_park_stays_usable() {
    let gw = Gateway::new();
    let call = Call::ask_form();
    let round = gw.send(call.first()).await.expect("a round");
    let e = gw
        .send(call.retry(&round, json!({"elicitation-1": {"action": "maybe"}})))
        .await
        .expect_err("refused");
    assert_eq!(e.code, INVALID_PARAMS);
    assert!(
        e.message.starts_with("inputResponses[\"elicitation-1\"]"),
        "{}",
        e.message
    );
    assert_eq!(
        gw.metric("retries_total{result=\"rejected\",reason=\"invalid_responses\"}"),
        1.0
    );
    assert_eq!(gw.bridge.parked(), 1);
    let done = gw
        .send(call.retry(&round, named("elicitation-1")))
        .await
        .expect("the same state, answered well, still works");
    assert_eq!(tool_output(&done), ada());
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_outcome_reached_while_parked_is_kept_for_the_retry() {
    let gw = Gateway::new();
    // Asks a name, then fails with -32042 (connect an account first) without waiting for it.
    let call = Call::new(
        "url_required",
        json!({"ask_first_ms": 100}),
        json!({"elicitation": {"form": {}, "url": {}}}),
    );
    let first = gw.send(call.first()).await.expect("round 1");
    assert_eq!(keys(&first), ["elicitation-1"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(gw.bridge.parked(), 1, "still waiting for the client");
    let calls = |log: Vec<Value>| log.iter().filter(|m| m["method"] == "tools/call").count();
    assert_eq!(calls(gw.backend_log("in")), 1);

    let second = gw
        .send(call.retry(&first, named("elicitation-1")))
        .await
        .expect("round 2, from the kept -32042");
    assert_eq!(keys(&second), ["elicitation-2"]);
    let asked = &second["inputRequests"]["elicitation-2"]["params"];
    assert_eq!(
        (&asked["mode"], &asked["url"]),
        (&json!("url"), &json!("https://example.com/connect"))
    );

    let done = gw
        .send(call.retry(&second, json!({"elicitation-2": {"action": "accept"}})))
        .await
        .expect("a result");
    assert_eq!(tool_output(&done), json!({"connected": true}));
    assert_eq!(
        calls(gw.backend_log("in")),
        2,
        "issued again once connected"
    );
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_push_pending_when_the_result_comes_goes_back_to_the_session_for_the_next_call() {
    let gw = Gateway::with_backend_asking_roots_on_init();
    let caps = json!({"roots": {}});
    let echo = Call::new("echo", json!({"text": "hi"}), caps.clone());
    // A plain request starts the session; its backend then asks for roots from its
    // `initialized` handler, and the session holds the request for its next call.
    gw.send(echo.plain("tools/list")).await.expect("the tools");
    let asked = || -> Vec<Value> {
        let log = gw.backend_log("out").into_iter();
        log.filter(|m| m["method"] == "roots/list")
            .map(|m| m["id"].clone())
            .collect()
    };
    eventually("the backend asks for roots", || !asked().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The held request reaches a call that asks nothing, whose result comes within the
    // coalescing window.
    let done = gw.send(echo.first()).await.expect("a result");
    assert_eq!(tool_output(&done), json!({"echo": "hi"}));
    // The next call's first round puts it to the client, beside the call's own.
    let call = Call::new("list_roots", json!({}), caps);
    let round = gw.send(call.first()).await.expect("a round");
    let asked_now = keys(&round);
    assert_eq!(
        asked_now.len(),
        2,
        "the held request and the call's own: {round:#}"
    );
    let root = json!({"roots": [{"uri": "file:///r"}]});
    let answers = asked_now.into_iter().map(|k| (k, root.clone())).collect();
    let done = gw.send(call.retry(&round, Value::Object(answers))).await;
    assert_eq!(
        tool_output(&done.expect("a result"))["roots"],
        json!(["file:///r"])
    );
    let init = asked()[0].clone();
    eventually("the post-initialize roots/list is answered", || {
        let answers = gw.backend_log("in");
        answers
            .iter()
            .any(|m| m["id"] == init && m["result"] == root)
    })
    .await;
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn past_park_ttl_the_park_is_abandoned_and_a_late_retry_is_refused() {
    let gw = Gateway::new();
    let call = Call::ask_form();
    let round = gw.send(call.first()).await.expect("a round");
    assert_eq!(gw.bridge.pool(0).open_sessions(), 1);

    tokio::time::sleep(PARK_TTL + Duration::from_millis(1)).await;
    eventually("the call is abandoned and its session let go", || {
        gw.bridge.parked() == 0
            && gw.bridge.in_flight() == 0
            && gw.bridge.pool(0).open_sessions() == 0
    })
    .await;
    assert_eq!(gw.metric("abandoned_parks_total{reason=\"expired\"}"), 1.0);
    // The backend heard the client's refusal of its question, and the call's cancellation.
    let heard = gw.backend_log("in");
    assert!(
        heard.iter().any(|m| m["result"]["action"] == "cancel"),
        "{heard:#?}"
    );
    assert!(
        heard
            .iter()
            .any(|m| m["method"] == "notifications/cancelled"),
        "{heard:#?}"
    );

    assert_frozen(gw.send(call.retry(&round, named("elicitation-1"))).await);
    assert_eq!(gw.state_failures("unknown_park"), 1.0);
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_that_goes_away_mid_call_abandons_it() {
    let gw = Gateway::new();
    let call = Call::new("slow", json!({"ms": 60_000}), json!({}));
    let rx = gw.bridge.handle(0, call.first(), Span::none());
    eventually("the call reaches the backend", || {
        gw.backend_log("in")
            .iter()
            .any(|m| m["method"] == "tools/call")
    })
    .await;
    drop(rx);
    // Well before the backend would have finished: the call is cancelled upstream and its task
    // ends.
    eventually("the call is abandoned", || gw.bridge.in_flight() == 0).await;
    let heard = gw.backend_log("in");
    let call = heard.iter().find(|m| m["method"] == "tools/call");
    let call_id = &call.expect("the call")["id"];
    let cancelled = |m: &Value| {
        m["method"] == "notifications/cancelled" && m["params"]["requestId"] == *call_id
    };
    assert!(heard.iter().any(cancelled), "{heard:#?}");
    gw.close().await;
}

#[tokio::test(start_paused = true)]
async fn an_error_the_backend_returns_passes_through_mapped_as_documented() {
    let gw = Gateway::new();
    for (asked, seen) in [
        (-32002, INVALID_PARAMS),
        (-32050, INTERNAL_ERROR),
        (-32001, -32001),
    ] {
        let args = json!({"code": asked, "message": "as asked"});
        let e = gw
            .send(Call::new("fail", args, json!({})).first())
            .await
            .expect_err("the backend's error");
        assert_eq!(e.code, seen, "code {asked}");
        assert_eq!(e.message, "as asked");
        assert_eq!(e.data, Some(json!({"asked": asked})));
    }
    assert_eq!(gw.bridge.parked(), 0);
    gw.close().await;
}

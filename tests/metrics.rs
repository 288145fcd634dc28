//! Observability end to end: the admin listener (`/metrics`, `/healthz`, `/readyz`), the exact
//! movement of each metric over a scripted run against a real backend child, and W3C trace
//! context reaching the backend in `_meta`.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::Duration;

fn elicit() -> Value {
    json!({"elicitation": {}})
}

/// `after - before` for one series.
fn delta(before: &Scrape, after: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    after.get(name, labels) - before.get(name, labels)
}

/// Alters one character in the middle of the sealed payload, keeping it valid base64url.
fn tamper(state: &str) -> String {
    let mut chars: Vec<char> = state.chars().collect();
    let i = chars.len() - 20;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

/// `ask_form` and a retry that answers nothing, so it is asked again: the input key and the
/// second reply.
async fn asked_again(c: &Client, args: &Value) -> (String, Reply) {
    let r1 = c.call_tool("ask_form", args.clone(), &elicit()).await;
    let key = r1.key_for("elicitation/create");
    let r2 = c
        .retry_tool("ask_form", args.clone(), &elicit(), json!({}), &r1.state())
        .await;
    assert_eq!(r2.input_keys(), vec![key.clone()], "asked again");
    (key, r2)
}

/// The metrics table of docs/operations.md against what `/metrics` declares (`# TYPE name kind`),
/// both ways.
/// A family is declared once it has a series, so this runs after a script that moves them all.
async fn assert_the_docs_name_every_metric_and_only_those(gw: &Gateway) {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    // Code spans that are a bare metric name.
    let documented: std::collections::BTreeSet<&str> = docs
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|code| code.starts_with("mrtr_") || code.starts_with("process_"))
        .filter(|code| code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .filter(|code| !code.ends_with('_'))
        .collect();
    let text = admin_request(gw.admin_addr(), "GET", "/metrics").await.2;
    let exported: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "exported but not in docs/operations.md: {undocumented:?}"
    );
    let unknown: Vec<_> = documented.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "in docs/operations.md but not exported: {unknown:?}"
    );
}

/// A gateway with its admin listener on, otherwise as configured by default.
async fn with_admin() -> Gateway {
    Gateway::with(Options {
        extra: ADMIN_ON.into(),
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn metrics_move_exactly_over_a_scripted_run() {
    let gw = Gateway::with(Options {
        extra: format!("{ADMIN_ON}[state]\npark_ttl = \"1s\"\n"),
        ..Default::default()
    })
    .await;
    let c = gw.client().with_principal("alice");
    let before = gw.scrape().await;
    let fixture = [("backend", "fixture")];

    // 1. A pass-through call: no input asked.
    let echoed = c.call_tool("echo", json!({"text": "hi"}), &json!({})).await;
    assert_eq!(echoed.result()["resultType"], "complete");

    // 2. A two-round call: the first retry answers nothing and is asked again.
    let args = json!({"message": "name?"});
    let (key, r2) = asked_again(&c, &args).await;
    let done = c
        .retry_tool(
            "ask_form",
            args.clone(),
            &elicit(),
            json!({ key.clone(): accept(json!({"name": "Ada"})) }),
            &r2.state(),
        )
        .await;
    assert_eq!(done.tool_json()["action"], "accept");

    // 3. A call that stays parked, gets one tampered retry, and is then abandoned.
    let p = c.call_tool("ask_form", args.clone(), &elicit()).await;
    let pkey = p.key_for("elicitation/create");
    let mid = gw.scrape().await;
    assert_eq!(mid.get("mrtr_parked_calls", &[]), 1.0);
    assert_eq!(
        mid.get(
            "mrtr_upstream_sessions",
            &[("backend", "fixture"), ("state", "interactive")]
        ),
        1.0,
        "the parked call holds its session"
    );
    let forged = c
        .retry_tool(
            "ask_form",
            args.clone(),
            &elicit(),
            json!({ pkey: accept(json!({"name": "Eve"})) }),
            &tamper(&p.state()),
        )
        .await;
    assert_eq!(forged.error_code(), -32602);
    assert!(forged.body["error"].get("data").is_none(), "no hint");

    // The park expires (park_ttl 1s); wait until the call is fully wound down.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let after = loop {
        let s = gw.scrape().await;
        let rounds = delta(&before, &s, "mrtr_call_rounds_count", &[]);
        let holding = s.get(
            "mrtr_upstream_sessions",
            &[("backend", "fixture"), ("state", "interactive")],
        );
        if s.get("mrtr_parked_calls", &[]) == 0.0 && rounds >= 3.0 && holding == 0.0 {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the park was not abandoned in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let d = |name: &str, labels: &[(&str, &str)]| delta(&before, &after, name, labels);
    let req = |outcome: &str| {
        d(
            "mrtr_downstream_requests_total",
            &[("method", "tools/call"), ("outcome", outcome)],
        )
    };
    assert_eq!(req("complete"), 2.0, "echo and the finished ask_form");
    assert_eq!(req("input_required"), 3.0, "two rounds, then the park");
    assert_eq!(req("error"), 1.0, "the tampered retry");
    assert_eq!(req("refused"), 0.0);
    assert_eq!(req("disconnected"), 0.0);

    assert_eq!(
        d("mrtr_input_requests_total", &[("kind", "elicitation")]),
        2.0,
        "one elicitation per call; asking again is not a new request"
    );
    assert_eq!(d("mrtr_input_requests_total", &[("kind", "sampling")]), 0.0);

    let retry = |result: &str, reason: &str| {
        d(
            "mrtr_retries_total",
            &[("result", result), ("reason", reason)],
        )
    };
    assert_eq!(retry("resumed", "none"), 1.0);
    assert_eq!(retry("asked_again", "none"), 1.0);
    assert_eq!(retry("rejected", "invalid_state"), 1.0);
    assert_eq!(retry("rejected", "invalid_responses"), 0.0);
    assert_eq!(retry("forwarded", "none"), 0.0);
    assert_eq!(retry("replayed", "none"), 0.0);

    assert_eq!(
        d("mrtr_state_failures_total", &[("reason", "bad_seal")]),
        1.0
    );
    for other in [
        "malformed",
        "unknown_key",
        "expired",
        "principal",
        "request",
        "owner",
        "unknown_park",
        "stale_round",
    ] {
        assert_eq!(
            d("mrtr_state_failures_total", &[("reason", other)]),
            0.0,
            "{other}"
        );
    }

    assert_eq!(
        d("mrtr_abandoned_parks_total", &[("reason", "expired")]),
        1.0
    );
    assert_eq!(
        d("mrtr_abandoned_parks_total", &[("reason", "shutdown")]),
        0.0
    );
    assert_eq!(after.get("mrtr_parked_calls", &[]), 0.0);

    // Rounds per call: echo 0, ask_form 2, the abandoned call 1.
    assert_eq!(d("mrtr_call_rounds_count", &[]), 3.0);
    assert_eq!(d("mrtr_call_rounds_sum", &[]), 3.0);
    assert_eq!(d("mrtr_call_rounds_bucket", &[("le", "0")]), 1.0);
    assert_eq!(d("mrtr_call_rounds_bucket", &[("le", "1")]), 2.0);
    assert_eq!(d("mrtr_call_rounds_bucket", &[("le", "2")]), 3.0);

    // Each round's park ends once: two of the finished call, one abandoned.
    assert_eq!(d("mrtr_park_duration_seconds_count", &[]), 3.0);
    assert!(d("mrtr_park_duration_seconds_sum", &[]) >= 1.0, "ttl 1s");

    // Backend responses that reached a client: echo and the finished ask_form.
    assert_eq!(
        d("mrtr_upstream_request_duration_seconds_count", &fixture),
        2.0
    );
    // Three leases: echo (no capabilities) and two ask_form calls (elicitation) sharing one
    // session one after the other; two sessions started, none lost.
    assert_eq!(d("mrtr_upstream_queue_wait_seconds_count", &fixture), 3.0);
    assert_eq!(d("mrtr_upstream_session_starts_total", &fixture), 2.0);
    for reason in ["lost", "evicted", "idle"] {
        assert_eq!(
            d(
                "mrtr_upstream_session_ends_total",
                &[("backend", "fixture"), ("reason", reason)]
            ),
            0.0,
            "{reason}"
        );
    }
    let sessions = |state: &str| {
        after.get(
            "mrtr_upstream_sessions",
            &[("backend", "fixture"), ("state", state)],
        )
    };
    // The abandoned call's backend hears `cancel` for its elicitation and then the call's
    // cancellation; if the cancellation wins, the call never answers, and after the grace its
    // session is retired instead of reused. Either way the two numbers agree.
    let retired = d(
        "mrtr_upstream_session_ends_total",
        &[("backend", "fixture"), ("reason", "retired")],
    );
    assert!(retired == 0.0 || retired == 1.0, "{retired}");
    assert_eq!(sessions("idle"), 2.0 - retired);
    assert_eq!(sessions("interactive"), 0.0);
    assert_eq!(sessions("shared"), 0.0);
    assert_eq!(sessions("starting"), 0.0);
    assert_the_docs_name_every_metric_and_only_those(&gw).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_replayed_call_counts_its_rounds_once_when_it_finishes() {
    let gw = Gateway::with(Options {
        extra: ADMIN_ON.into(),
        backend_extra: "pool_max = 64\nreplay = \"replay\"\n".into(),
        ..Default::default()
    })
    .await;
    let c = gw.client();
    let before = gw.scrape().await;
    // Two rounds: each ends its task upstream; each retry runs the call again from its
    // transcript.
    let args = json!({"message": "name?"});
    let (key, r2) = asked_again(&c, &args).await;
    let mid = gw.scrape().await;
    assert_eq!(
        delta(&before, &mid, "mrtr_call_rounds_count", &[]),
        0.0,
        "an unfinished call is not counted"
    );
    // Brought by another principal, the state is refused: a state failure, not a replay.
    let stolen = gw
        .client()
        .with_principal("mallory")
        .retry_tool(
            "ask_form",
            args.clone(),
            &elicit(),
            json!({ key.clone(): accept(json!({"name": "Eve"})) }),
            &r2.state(),
        )
        .await;
    assert_eq!(stolen.error_code(), -32602, "{:#}", stolen.body);
    let done = c
        .retry_tool(
            "ask_form",
            args,
            &elicit(),
            json!({ key: accept(json!({"name": "Ada"})) }),
            &r2.state(),
        )
        .await;
    assert_eq!(done.tool_json()["action"], "accept");
    let after = gw.scrape().await;
    let replayed = [("result", "replayed"), ("reason", "none")];
    assert_eq!(delta(&before, &after, "mrtr_retries_total", &replayed), 2.0);
    let rejected = [("result", "rejected"), ("reason", "invalid_state")];
    assert_eq!(delta(&before, &after, "mrtr_retries_total", &rejected), 1.0);
    let principal = [("reason", "principal")];
    assert_eq!(
        delta(&before, &after, "mrtr_state_failures_total", &principal),
        1.0
    );
    assert_eq!(delta(&before, &after, "mrtr_call_rounds_count", &[]), 1.0);
    assert_eq!(delta(&before, &after, "mrtr_call_rounds_sum", &[]), 2.0);
    gw.stop().await;
}

#[tokio::test]
async fn a_backend_that_dies_counts_as_a_lost_session_and_a_new_start() {
    let gw = with_admin().await;
    let c = gw.client();
    let before = gw.scrape().await;
    let crashed = c.call_tool("crash", json!({}), &json!({})).await;
    assert!(crashed.body.get("error").is_some(), "{:#}", crashed.body);
    let echoed = c
        .call_tool("echo", json!({"text": "again"}), &json!({}))
        .await;
    assert_eq!(echoed.result()["resultType"], "complete");
    let after = gw.scrape().await;
    let d = |name: &str, labels: &[(&str, &str)]| delta(&before, &after, name, labels);
    assert_eq!(
        d(
            "mrtr_upstream_session_ends_total",
            &[("backend", "fixture"), ("reason", "lost")]
        ),
        1.0
    );
    assert_eq!(
        d(
            "mrtr_upstream_session_starts_total",
            &[("backend", "fixture")]
        ),
        2.0,
        "the second call started a replacement"
    );
    assert_eq!(
        d(
            "mrtr_downstream_requests_total",
            &[("method", "tools/call"), ("outcome", "error")]
        ),
        1.0
    );
    gw.stop().await;
}

#[tokio::test]
async fn refusals_at_the_http_face_are_counted_with_a_bounded_method_label() {
    let gw = with_admin().await;
    let c = gw.client();
    let before = gw.scrape().await;
    // An unknown method: the label stays bounded.
    let r = c
        .send(&c.body("x/made-up-method-12345", json!({}), &json!({})))
        .await;
    assert_eq!(r.status, 404);
    // A body whose Mcp-Name header does not match.
    let body = c.body(
        "tools/call",
        json!({"name": "echo", "arguments": {}}),
        &json!({}),
    );
    let bytes = bytes::Bytes::from(serde_json::to_vec(&body).unwrap());
    let headers = [
        ("MCP-Protocol-Version".to_owned(), MODERN.to_owned()),
        ("Mcp-Method".to_owned(), "tools/call".to_owned()),
        ("Mcp-Name".to_owned(), "other".to_owned()),
    ];
    let r = c.post_raw("POST", bytes, &headers).await;
    assert_eq!(r.status, 400);
    let after = gw.scrape().await;
    let d = |method: &str| {
        delta(
            &before,
            &after,
            "mrtr_downstream_requests_total",
            &[("method", method), ("outcome", "refused")],
        )
    };
    assert_eq!(d("other"), 1.0);
    assert_eq!(d("tools/call"), 1.0);
    let text = admin_request(gw.admin_addr(), "GET", "/metrics").await.2;
    assert!(!text.contains("made-up"), "no client text in labels");
    gw.stop().await;
}

#[tokio::test]
async fn health_and_readiness_answer_and_readiness_fails_while_draining() {
    let mut gw = with_admin().await;
    let admin = gw.admin_addr();
    assert_ne!(
        admin,
        gw.running.as_ref().unwrap().local_addr(),
        "its own port"
    );
    assert_eq!(admin_request(admin, "GET", "/healthz").await.0, 200);
    assert_eq!(admin_request(admin, "GET", "/readyz").await.0, 200);
    assert_eq!(admin_request(admin, "GET", "/nope").await.0, 404);
    assert_eq!(admin_request(admin, "POST", "/metrics").await.0, 405);
    let text = admin_request(admin, "GET", "/metrics").await.2;
    let scrape = Scrape::parse(&text);
    for name in [
        "mrtr_parked_calls",
        "mrtr_call_rounds_count",
        "mrtr_park_duration_seconds_count",
    ] {
        assert!(scrape.has(name), "{name} in\n{text}");
    }

    // A slow call keeps the drain going long enough to look at it.
    let c = gw.client();
    let slow =
        tokio::spawn(async move { c.call_tool("slow", json!({"ms": 1500}), &json!({})).await });
    gw.wait_log(10, "the slow call reached the backend", |msgs| {
        msgs.iter()
            .any(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow")
    })
    .await;
    let running = gw.running.take().expect("running");
    let shutdown = tokio::spawn(running.shutdown());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = admin_request(admin, "GET", "/readyz").await;
        if status == 503 {
            assert_eq!(body, "draining\n");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never went 503");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        admin_request(admin, "GET", "/healthz").await.0,
        200,
        "alive while draining"
    );
    let r = slow.await.unwrap();
    assert_eq!(
        r.result()["resultType"],
        "complete",
        "in-flight call finished"
    );
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .expect("shutdown finishes")
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(admin).await.is_err(),
        "admin listener closed after the drain"
    );
    gw.stop().await;
}

/// A line of `/proc/self/<file>` that starts with `key`, its first number after the key.
#[cfg(target_os = "linux")]
fn proc_self(file: &str, key: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/self/{file}")).unwrap();
    let line = text.lines().find(|l| l.starts_with(key)).unwrap();
    line[key.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_process_and_the_version_are_on_metrics() {
    // The gateway runs in this test's process: its /proc entries are this process's.
    let gw = with_admin().await;
    let c = gw.client();
    assert_eq!(
        c.call_tool("echo", json!({"text": "hi"}), &json!({}))
            .await
            .result()["resultType"],
        "complete"
    );
    // CPU time counts in ticks: spend some first, reading it as the collector does not.
    let cpu_ticks = || {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<f64> = after_name
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0.0))
            .collect();
        fields[11] + fields[12] // utime, stime (fields 14 and 15 of the line)
    };
    while cpu_ticks() < 2.0 {
        std::hint::black_box((0..10_000u64).sum::<u64>());
    }
    let spent = cpu_ticks();
    let s = gw.scrape().await;
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    assert_eq!(s.get("mrtr_build_info", &version), 1.0);
    let rss = s.get("process_resident_memory_bytes", &[]);
    let vm_rss = proc_self("status", "VmRSS:") * 1024.0;
    assert!(
        rss > vm_rss / 2.0 && rss < vm_rss * 2.0,
        "resident {rss} against VmRSS {vm_rss}"
    );
    assert!(s.get("process_virtual_memory_bytes", &[]) >= rss);
    // At least what was read before the scrape (ticks are at most 1/100 s apart on Linux).
    let cpu = s.get("process_cpu_seconds_total", &[]);
    assert!(
        cpu >= spent / 1000.0 && cpu > 0.0,
        "{cpu} s after {spent} ticks"
    );
    assert!(s.get("process_threads", &[]) >= 2.0);
    // The listeners, the admin connection and the backend child's pipes at least.
    assert!(s.get("process_open_fds", &[]) >= 4.0);
    assert_eq!(
        s.get("process_max_fds", &[]),
        proc_self("limits", "Max open files")
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = s.get("process_start_time_seconds", &[]);
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "started at {started}, now {now}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn no_admin_listener_unless_configured() {
    let gw = Gateway::start().await;
    assert_eq!(gw.running.as_ref().unwrap().admin_addr(), None);
    gw.stop().await;
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A request body with extra `_meta` keys.
fn with_meta(c: &Client, method: &str, params: Value, caps: &Value, extra: Value) -> Value {
    let mut body = c.body(method, params, caps);
    for (k, v) in extra.as_object().unwrap() {
        body["params"]["_meta"][k] = v.clone();
    }
    body
}

#[tokio::test]
async fn the_clients_traceparent_reaches_the_backend_in_meta() {
    let gw = Gateway::start().await;
    let c = gw.client();
    let trace = json!({"traceparent": TRACEPARENT, "tracestate": "vendor=abc"});

    let call = with_meta(
        &c,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "traced"}}),
        &json!({}),
        trace.clone(),
    );
    assert_eq!(c.send(&call).await.result()["resultType"], "complete");
    let list = with_meta(&c, "tools/list", json!({}), &json!({}), trace.clone());
    assert!(c.send(&list).await.result()["tools"].is_array());

    // An interactive call keeps the trace on its first request upstream.
    let asked = with_meta(
        &c,
        "tools/call",
        json!({"name": "ask_form", "arguments": {}}),
        &elicit(),
        json!({"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}),
    );
    let r = c.send(&asked).await;
    let key = r.key_for("elicitation/create");
    let done = c
        .retry_tool(
            "ask_form",
            json!({}),
            &elicit(),
            json!({ key: accept(json!({"name": "T"})) }),
            &r.state(),
        )
        .await;
    assert_eq!(done.tool_json()["action"], "accept");

    // A malformed traceparent is not handed on, nor its tracestate.
    let bad = with_meta(
        &c,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "untraced"}}),
        &json!({}),
        json!({"traceparent": "00-not-a-trace", "tracestate": "vendor=abc"}),
    );
    assert_eq!(c.send(&bad).await.result()["resultType"], "complete");

    let received = gw.backend_received();
    let find = |pred: &dyn Fn(&Value) -> bool| {
        received
            .iter()
            .find(|m| pred(m))
            .unwrap_or_else(|| panic!("not received: {received:#?}"))
            .clone()
    };
    let traced = find(&|m| m["params"]["arguments"]["text"] == "traced");
    assert_eq!(traced["params"]["_meta"]["traceparent"], TRACEPARENT);
    assert_eq!(traced["params"]["_meta"]["tracestate"], "vendor=abc");
    let listed = find(&|m| m["method"] == "tools/list");
    assert_eq!(listed["params"]["_meta"]["traceparent"], TRACEPARENT);
    let form = find(&|m| m["method"] == "tools/call" && m["params"]["name"] == "ask_form");
    assert_eq!(
        form["params"]["_meta"]["traceparent"],
        "00-11111111111111111111111111111111-2222222222222222-01"
    );
    assert!(form["params"]["_meta"].get("tracestate").is_none());
    let untraced = find(&|m| m["params"]["arguments"]["text"] == "untraced");
    let meta = &untraced["params"]["_meta"];
    assert!(
        meta.get("traceparent").is_none() && meta.get("tracestate").is_none(),
        "{untraced:#}"
    );
    // The era probe is a 2026-07-28 request by design; everything the bridge sends is legacy.
    for m in received.iter().filter(|m| m["method"] != "server/discover") {
        let meta = &m["params"]["_meta"];
        assert!(
            meta.as_object()
                .is_none_or(|o| !o.keys().any(|k| k.starts_with("io.modelcontextprotocol/"))),
            "2026 _meta keys stay at the gateway: {m:#}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn each_state_failure_is_counted_under_the_check_that_failed() {
    let (_, secret) = mrtr_gateway::seal::Key::generate("k1").expect("key");
    let keys = format!("keys = [{{ id = \"k1\", secret = \"{secret}\" }}]\n");
    let gw = Gateway::with(Options {
        extra: format!("{ADMIN_ON}[state]\npark_ttl = \"1s\"\n{keys}"),
        ..Default::default()
    })
    .await;
    // Same key, another replica name: its states open here but name another owner.
    let other = Gateway::with(Options {
        extra: format!("[state]\nowner = \"replica-b\"\n{keys}"),
        ..Default::default()
    })
    .await;
    let alice = gw.client().with_principal("alice");
    let mallory = gw.client().with_principal("mallory");
    let args = json!({"message": "m"});
    let answer = |key: &str| json!({ key: accept(json!({"name": "x"})) });
    let before = gw.scrape().await;

    let r1 = alice.call_tool("ask_form", args.clone(), &elicit()).await;
    let key = r1.key_for("elicitation/create");
    let s1 = r1.state();
    let frozen = |r: &Reply| assert_eq!(r.error_code(), -32602, "{:#}", r.body);

    // malformed, unknown_key, bad_seal
    frozen(
        &alice
            .retry_tool("ask_form", args.clone(), &elicit(), answer(&key), "v1.")
            .await,
    );
    let (_, payload) = s1.rsplit_once('.').unwrap();
    frozen(
        &alice
            .retry_tool(
                "ask_form",
                args.clone(),
                &elicit(),
                answer(&key),
                &format!("v1.k9.{payload}"),
            )
            .await,
    );
    frozen(
        &alice
            .retry_tool(
                "ask_form",
                args.clone(),
                &elicit(),
                answer(&key),
                &tamper(&s1),
            )
            .await,
    );
    // principal, request
    frozen(
        &mallory
            .retry_tool("ask_form", args.clone(), &elicit(), answer(&key), &s1)
            .await,
    );
    frozen(
        &alice
            .retry_tool(
                "ask_form",
                json!({"message": "other"}),
                &elicit(),
                answer(&key),
                &s1,
            )
            .await,
    );
    // owner
    let o = other
        .client()
        .with_principal("alice")
        .call_tool("ask_form", args.clone(), &elicit())
        .await;
    frozen(
        &alice
            .retry_tool(
                "ask_form",
                args.clone(),
                &elicit(),
                answer(&key),
                &o.state(),
            )
            .await,
    );
    // stale_round: the first state after the call moved to round 2
    let r2 = alice
        .retry_tool("ask_form", args.clone(), &elicit(), json!({}), &s1)
        .await;
    frozen(
        &alice
            .retry_tool("ask_form", args.clone(), &elicit(), answer(&key), &s1)
            .await,
    );
    // unknown_park: a state of a call that has finished
    let done = alice
        .retry_tool(
            "ask_form",
            args.clone(),
            &elicit(),
            answer(&key),
            &r2.state(),
        )
        .await;
    assert_eq!(done.tool_json()["action"], "accept");
    frozen(
        &alice
            .retry_tool(
                "ask_form",
                args.clone(),
                &elicit(),
                answer(&key),
                &r2.state(),
            )
            .await,
    );
    // expired: past park_ttl (1s)
    let r3 = alice.call_tool("ask_form", args.clone(), &elicit()).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    frozen(
        &alice
            .retry_tool(
                "ask_form",
                args.clone(),
                &elicit(),
                answer(&key),
                &r3.state(),
            )
            .await,
    );

    let after = gw.scrape().await;
    for reason in [
        "malformed",
        "unknown_key",
        "bad_seal",
        "principal",
        "request",
        "owner",
        "stale_round",
        "unknown_park",
        "expired",
    ] {
        assert_eq!(
            delta(
                &before,
                &after,
                "mrtr_state_failures_total",
                &[("reason", reason)]
            ),
            1.0,
            "{reason}"
        );
    }
    assert_eq!(
        delta(
            &before,
            &after,
            "mrtr_retries_total",
            &[("result", "rejected"), ("reason", "invalid_state")]
        ),
        9.0
    );
    other.stop().await;
    gw.stop().await;
}

/// Counters of events that have not happened yet are exported at 0 from the start, so a rate
/// over them reads 0 rather than nothing.
#[tokio::test]
async fn counters_of_events_that_have_not_happened_are_exported_at_zero() {
    let gw = with_admin().await;
    let text = admin_request(gw.admin_addr(), "GET", "/metrics").await.2;
    for series in [
        r#"mrtr_state_failures_total{reason="bad_seal"} 0"#,
        r#"mrtr_state_failures_total{reason="stale_round"} 0"#,
        r#"mrtr_retries_total{result="resumed",reason="none"} 0"#,
        r#"mrtr_retries_total{result="rejected",reason="invalid_state"} 0"#,
        r#"mrtr_abandoned_parks_total{reason="expired"} 0"#,
        r#"mrtr_input_requests_total{kind="sampling"} 0"#,
    ] {
        assert!(
            text.lines().any(|l| l == series),
            "{series} is exported before anything happened:\n{text}"
        );
    }
    gw.stop().await;
}

/// A backend that cannot be brought up (a child that exits at once, so its `initialize` fails)
/// is counted against its name, and no session start is.
#[tokio::test]
async fn a_backend_that_fails_to_start_is_counted() {
    let dir = scratch("metrics-start-failure");
    let text = format!(
        "{ADMIN_ON}[server]\nlisten = \"127.0.0.1:0\"\n[[backend]]\nname = \"gone\"\ncommand = \"/bin/true\"\n"
    );
    let gw = Gateway::from_config(&text, dir.join("backend.log")).await;
    let gone = [("backend", "gone")];
    let before = gw.scrape().await;
    let r = gw.client().call_tool("echo", json!({}), &json!({})).await;
    assert!(
        r.error_message().contains("`gone` failed to initialize"),
        "{:#}",
        r.body
    );
    let after = gw.scrape().await;
    let d = |name: &str| delta(&before, &after, name, &gone);
    assert_eq!(d("mrtr_upstream_session_start_failures_total"), 1.0);
    assert_eq!(d("mrtr_upstream_session_starts_total"), 0.0);
    gw.stop().await;
}

//! End to end over HTTP backends: a 2026-07-28 client over loopback, the gateway, and the
//! built-in legacy server run as a real child process serving Streamable HTTP
//! (`legacy-server --http`) or 2024-11-05 HTTP+SSE (`legacy-server --sse`). Each test drives one
//! transport behaviour; the fixture's log shows what the backend received, message by message
//! and HTTP request by HTTP request.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The built-in legacy server over HTTP, as a child process; killed on drop.
struct Fixture {
    child: tokio::process::Child,
    url: String,
    log: PathBuf,
}

impl Fixture {
    async fn http(flags: &[&str]) -> Fixture {
        Fixture::start("--http", flags).await
    }

    async fn sse(flags: &[&str]) -> Fixture {
        Fixture::start("--sse", flags).await
    }

    async fn start(mode: &str, flags: &[&str]) -> Fixture {
        let log = scratch("fixture").join("backend.log");
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"));
        cmd.arg("legacy-server")
            .args([mode, "127.0.0.1:0"])
            .args(flags)
            .arg("--log")
            .arg(&log);
        Fixture::listening(cmd, log).await
    }

    /// [`PY_SERVER`] in `mode`; it keeps no log.
    async fn python(mode: &str) -> Fixture {
        let dir = scratch("py-fixture");
        let script = dir.join("server.py");
        std::fs::write(&script, PY_SERVER).expect("write the server");
        let mut cmd = tokio::process::Command::new("python3");
        cmd.arg(&script).arg(mode);
        Fixture::listening(cmd, dir.join("backend.log")).await
    }

    /// Runs `cmd` and waits for its `listening on URL` line.
    async fn listening(mut cmd: tokio::process::Command, log: PathBuf) -> Fixture {
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the fixture");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the fixture says where it listens")
            .expect("read stdout")
            .expect("a line");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .trim()
            .to_owned();
        Fixture { child, url, log }
    }

    fn entries(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// JSON-RPC messages the backend received.
    fn received(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["dir"] == "in")
            .map(|e| e["msg"].clone())
            .collect()
    }

    /// HTTP requests the backend received.
    fn requests(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["dir"] == "http")
            .collect()
    }

    fn count(&self, method: &str) -> usize {
        self.received()
            .iter()
            .filter(|m| m["method"] == method)
            .count()
    }

    /// Makes the backend forget every session.
    async fn expire(&self) {
        let uri: http::Uri = self.url.parse().expect("url");
        let control = format!(
            "http://{}/control/expire",
            uri.authority().expect("authority")
        );
        let reply = Client::new(&control)
            .post_raw("POST", bytes::Bytes::new(), &[])
            .await;
        assert!(reply.status < 300, "expire: {}", reply.status);
    }

    async fn wait_for(&self, what: &str, pred: impl Fn(&Fixture) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !pred(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for: {what}\n{:#?}",
                self.entries()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A Streamable HTTP backend in python3 that does what the built-in one never does, by `mode`:
/// `stateless` gives no session id and answers 404 to the GET (routing none), and asks for a
/// form on the POST stream of every tools/call; `accepted` answers a tools/call with 202.
const PY_SERVER: &str = r#"
import json, queue, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = sys.argv[1]
waiting = {}
lock = threading.Lock()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def empty(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        self.empty(404)

    def do_DELETE(self):
        self.empty(404)

    def event(self, msg):
        self.wfile.write(b"event: message\ndata: " + json.dumps(msg).encode() + b"\n\n")
        self.wfile.flush()

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, id = msg.get("method"), msg.get("id")
        if method is None:
            with lock:
                answer = waiting.pop(id, None)
            if answer:
                answer.put(msg)
            return self.empty(202)
        if id is None:
            return self.empty(202)
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "py", "version": "0"}}
            body = json.dumps({"jsonrpc": "2.0", "id": id, "result": result}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return self.wfile.write(body)
        if mode == "accepted":
            return self.empty(202)
        if mode == "error_page":
            body = b"Traceback: DATABASE_URL=postgres://admin:hunter2@db/prod"
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return self.wfile.write(body)
        answer, ask = queue.Queue(), "ask-%s" % id
        with lock:
            waiting[ask] = answer
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        self.event({"jsonrpc": "2.0", "id": ask, "method": "elicitation/create",
                    "params": {"message": "Who?", "requestedSchema": schema}})
        got = answer.get(timeout=30)
        text = json.dumps(got["result"])
        self.event({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": text}]}})

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening on http://127.0.0.1:%d/mcp" % server.server_port, flush=True)
server.serve_forever()
"#;

/// A gateway with one backend of `kind` at `url`; `extra` goes before the backend table,
/// `backend` into it.
async fn gateway(
    kind: &str,
    url: &str,
    log: &std::path::Path,
    extra: &str,
    backend: &str,
) -> Gateway {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{extra}\n[[backend]]\nname = \"fixture\"\nkind = \"{kind}\"\nurl = \"{url}\"\npool_max = 64\n{backend}"
    );
    Gateway::from_config(&text, log.to_path_buf()).await
}

async fn over_http(fx: &Fixture) -> Gateway {
    over_http_with(fx, "").await
}

/// [`over_http`] with `backend` added to the backend's table.
async fn over_http_with(fx: &Fixture, backend: &str) -> Gateway {
    gateway("http", &fx.url, &fx.log, "", backend).await
}

/// [`over_http`] with calls failing after 10 s, well before a test's own timeout: a lost event
/// that is never brought fails its call rather than hangs the test.
async fn with_a_short_deadline(fx: &Fixture) -> Gateway {
    gateway(
        "http",
        &fx.url,
        &fx.log,
        "[limits]\nrequest_timeout = \"10s\"\n",
        "",
    )
    .await
}

/// One elicitation round trip; returns the tool's JSON answer.
async fn elicit_round_trip(c: &Client) -> Value {
    elicit_round_trip_with(c, || {}).await
}

/// [`elicit_round_trip`], running `while_parked` between the first request and the retry.
async fn elicit_round_trip_with(c: &Client, while_parked: impl FnOnce()) -> Value {
    let caps = json!({"elicitation": {}});
    let first = c
        .call_tool("ask_form", json!({"message": "Who?"}), &caps)
        .await;
    let key = first.key_for("elicitation/create");
    while_parked();
    assert_eq!(
        first.result()["inputRequests"][&key]["params"]["message"],
        "Who?"
    );
    c.answer_ada(json!({"message": "Who?"}), &first)
        .await
        .tool_json()
}

/// The call failed on the backend's side (-31001) with a message that names the backend and
/// says `hint`.
fn assert_backend_failed(reply: &Reply, hint: &str) {
    assert_eq!(reply.error_code(), -31001, "{:#}", reply.body);
    let message = reply.error_message();
    assert!(
        message.matches("fixture").count() == 1 && message.contains(hint),
        "expected the backend named once and {hint:?}: {message}"
    );
}

fn ada() -> Value {
    json!({"action": "accept", "content": {"name": "Ada"}})
}

#[tokio::test]
async fn a_push_on_the_post_stream_becomes_a_round() {
    let fx = Fixture::http(&[]).await;
    // The legacy session's own requests, without the era probe before them.
    let gw = over_http_with(&fx, "protocol = \"legacy\"\n").await;
    assert_eq!(elicit_round_trip(&gw.client()).await, ada());
    let posts = fx.requests();
    let first = posts
        .iter()
        .find(|r| r["method"] == "POST")
        .expect("a POST");
    assert!(
        first["session"].is_null(),
        "initialize carries no session id"
    );
    assert!(
        posts
            .iter()
            .filter(|r| r["method"] == "POST")
            .skip(1)
            .all(|r| r["session"].is_string() && r["protocolVersion"] == "2025-11-25"),
        "later requests carry the session id and version: {posts:#?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn pushes_on_the_standalone_get_stream_become_rounds() {
    let fx = Fixture::http(&["--push-on-get"]).await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    assert_eq!(elicit_round_trip(&c).await, ada());
    let caps = caps_all();
    let first = c.call_tool("all_three", json!({}), &caps).await;
    let mut reply = first;
    let mut rounds = 0;
    while reply.result()["resultType"] == "input_required" {
        rounds += 1;
        let mut answers = serde_json::Map::new();
        for key in reply.input_keys() {
            let method = reply.result()["inputRequests"][&key]["method"].clone();
            let answer = match method.as_str() {
                Some("elicitation/create") => accept(json!({"name": "Grace"})),
                Some("sampling/createMessage") => sampled("sampled text"),
                _ => roots(&["file:///work"]),
            };
            answers.insert(key, answer);
        }
        reply = c
            .retry_tool(
                "all_three",
                json!({}),
                &caps,
                Value::Object(answers),
                &reply.state(),
            )
            .await;
    }
    assert_eq!(rounds, 3);
    let done = reply.tool_json().to_string();
    assert!(
        done.contains("Grace") && done.contains("sampled text") && done.contains("file:///work"),
        "{done}"
    );
    assert!(
        fx.requests().iter().any(|r| r["method"] == "GET"),
        "the gateway opened the standalone stream"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_post_stream_closed_early_is_resumed_with_last_event_id() {
    let fx = Fixture::http(&["--close-post-early"]).await;
    let gw = over_http(&fx).await;
    assert_eq!(elicit_round_trip(&gw.client()).await, ada());
    let resumed: Vec<Value> = fx
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "GET" && r["lastEventId"].is_string())
        .collect();
    assert!(
        !resumed.is_empty(),
        "a GET with Last-Event-ID: {:#?}",
        fx.requests()
    );
    gw.stop().await;
}

/// GETs that picked a stream up again with `Last-Event-ID`.
fn resumed_streams(fx: &Fixture) -> Vec<Value> {
    fx.requests()
        .into_iter()
        .filter(|r| r["method"] == "GET" && r["lastEventId"].is_string())
        .collect()
}

#[tokio::test]
async fn a_parked_call_lets_a_numbered_stream_go_until_its_retry() {
    // The backend numbers its events and never ends a POST stream early: only a gateway that
    // let the stream go has a reason to pick it up with Last-Event-ID.
    let fx = Fixture::http(&["--event-ids"]).await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    let parked = || {
        assert!(
            resumed_streams(&fx).is_empty(),
            "nothing resumed while parked"
        )
    };
    assert_eq!(elicit_round_trip_with(&c, parked).await, ada());
    let resumed = resumed_streams(&fx);
    assert_eq!(resumed.len(), 1, "one pick-up on the retry: {resumed:#?}");
    // The next call starts clean on the same session.
    assert_eq!(elicit_round_trip(&c).await, ada());
    assert_eq!(fx.count("initialize"), 1);
    gw.stop().await;
}

#[tokio::test]
async fn a_result_a_picked_up_stream_missed_comes_with_the_next_pick_up() {
    // The backend keeps the tool's result for replay but sends it on no connection, as an SDK
    // server may do with an event written while a GET takes its stream over. The GET stays open
    // and quiet: only picking the stream up again brings the result, well before the deadline.
    let fx = Fixture::http(&["--resume-gap"]).await;
    let gw = with_a_short_deadline(&fx).await;
    let c = gw.client();
    // The tool works on after the answer, so its result comes after the pick-up.
    let args = json!({"then_ms": 300});
    let first = c
        .call_tool("ask_form", args.clone(), &json!({"elicitation": {}}))
        .await;
    let started = std::time::Instant::now();
    let done = c.answer_ada(args, &first).await;
    assert_eq!(done.tool_json(), ada(), "{:#}", done.body);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the result came only after {:?}",
        started.elapsed()
    );
    let resumed = resumed_streams(&fx);
    assert!(
        resumed.len() >= 2,
        "picked up, then picked up again: {resumed:#?}"
    );
    gw.stop().await;
}

/// For each answer to one of the backend's requests, in the order the backend read them, how
/// many pick-ups (GET with `Last-Event-ID`) it had been sent before.
fn pick_ups_before_each_answer(fx: &Fixture) -> Vec<usize> {
    let mut picked = 0;
    let mut before = Vec::new();
    for e in fx.entries() {
        if e["dir"] == "http" && e["method"] == "GET" && e["lastEventId"].is_string() {
            picked += 1;
        } else if e["dir"] == "in" && e["msg"]["id"] != Value::Null && e["msg"]["method"].is_null()
        {
            before.push(picked);
        }
    }
    before
}

#[tokio::test]
async fn a_let_go_stream_is_picked_up_before_the_answer_goes_out() {
    // The backend drops what it writes for a request while no connection carries its stream,
    // as the Rust SDK's server may. The tool's result, written as soon as the answer is in,
    // reaches the call only if the stream was picked up before the answer went out.
    let fx = Fixture::http(&["--drop-unattached"]).await;
    let gw = with_a_short_deadline(&fx).await;
    let c = gw.client();
    let first = c
        .call_tool("ask_form", json!({}), &json!({"elicitation": {}}))
        .await;
    let done = c.answer_ada(json!({}), &first).await;
    assert_eq!(done.tool_json(), ada(), "{:#}", done.body);
    let picked = pick_ups_before_each_answer(&fx);
    assert!(picked.len() == 1 && picked[0] >= 1, "{picked:?}");
    gw.stop().await;
}

#[tokio::test]
async fn every_answer_of_a_retry_goes_out_after_the_pick_up() {
    let fx = Fixture::http(&["--drop-unattached"]).await;
    let limits = concat!(
        "[state]\ncoalesce_window = \"250ms\"\n",
        "[limits]\nrequest_timeout = \"10s\"\n"
    );
    let gw = gateway("http", &fx.url, &fx.log, limits, "").await;
    let c = gw.client();
    let caps = caps_all();
    let ask_pair = async || {
        let first = c.call_tool("pair", json!({}), &caps).await;
        let ke = first.key_for("elicitation/create");
        let ks = first.key_for("sampling/createMessage");
        (first, ke, ks)
    };

    // Both answers in one retry.
    let (first, ke, ks) = ask_pair().await;
    let both = json!({ ke: accept(json!({"name": "Lin"})), ks: sampled("hi") });
    let done = c
        .retry_tool("pair", json!({}), &caps, both, &first.state())
        .await;
    let out = done.tool_json();
    assert_eq!(out["elicit"]["content"]["name"], "Lin", "{out:#}");
    assert_eq!(out["sample"]["text"], "hi", "{out:#}");

    // One answer, then the other: the retry that answers only some keys picks the stream up
    // first too, and so does the one that finishes the call.
    let (first, ke, ks) = ask_pair().await;
    let one = json!({ ke: accept(json!({"name": "Bo"})) });
    let second = c
        .retry_tool("pair", json!({}), &caps, one, &first.state())
        .await;
    assert_eq!(second.input_keys(), vec![ks.clone()], "{:#}", second.body);
    let other = json!({ ks: sampled("ok") });
    let done = c
        .retry_tool("pair", json!({}), &caps, other, &second.state())
        .await;
    let out = done.tool_json();
    assert_eq!(out["elicit"]["content"]["name"], "Bo", "{out:#}");
    assert_eq!(out["sample"]["text"], "ok", "{out:#}");

    // Answers 1 and 2 went with the first call's retry, 3 and 4 with the second call's two.
    let picked = pick_ups_before_each_answer(&fx);
    assert_eq!(picked.len(), 4, "{picked:?}");
    assert!(
        picked[0] >= 1 && picked[1] >= 1 && picked[2] >= 2 && picked[3] >= 3,
        "an answer went out before its retry's pick-up: {picked:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_picked_up_stream_that_stays_quiet_for_a_long_tool_is_picked_up_again_harmlessly() {
    let fx = Fixture::http(&["--event-ids"]).await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    // Quiet for over two seconds after the pick-up: picked up again twice meanwhile.
    let args = json!({"then_ms": 2500});
    let first = c
        .call_tool("ask_form", args.clone(), &json!({"elicitation": {}}))
        .await;
    let done = c.answer_ada(args, &first).await;
    assert_eq!(done.tool_json(), ada(), "{:#}", done.body);
    let resumed = resumed_streams(&fx);
    assert!(resumed.len() >= 3, "picked up three times: {resumed:#?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_push_the_picked_up_standalone_stream_missed_comes_with_the_next_pick_up() {
    // The backend pushes its requests on the standalone stream and ends that stream after each
    // event, so the gateway picks it up with Last-Event-ID; the first push after a pick-up is
    // kept for replay but sent on no connection, which stays open and quiet.
    let fx = Fixture::http(&["--push-on-get", "--poll-get", "--resume-gap"]).await;
    let gw = with_a_short_deadline(&fx).await;
    let c = gw.client();
    let (args, caps) = (json!({"tag": "t"}), json!({"elicitation": {}}));
    let first = c.call_tool("two_step", args.clone(), &caps).await;
    let key = first.key_for("elicitation/create");
    // The stream that carried the first question is picked up before the answer goes in, so
    // the second question is the one the pick-up misses.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while resumed_streams(&fx).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never picked up: {:#?}",
            fx.requests()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = std::time::Instant::now();
    let answer = json!({ key: accept(json!({"name": "Ada"})) });
    let second = c
        .retry_tool("two_step", args.clone(), &caps, answer, &first.state())
        .await;
    let key = second.key_for("elicitation/create");
    assert_eq!(
        second.result()["inputRequests"][&key]["params"]["message"],
        "Confirm Ada for t?"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the second question came only after {:?}",
        started.elapsed()
    );
    assert!(
        resumed_streams(&fx).len() >= 2,
        "picked up, then picked up again: {:#?}",
        resumed_streams(&fx)
    );
    let answer = json!({ key: accept(json!({"answer": "yes"})) });
    let done = c
        .retry_tool("two_step", args, &caps, answer, &second.state())
        .await;
    assert_eq!(
        done.tool_json(),
        json!({"tag": "t", "name": "Ada", "confirm": "yes"}),
        "{:#}",
        done.body
    );
    gw.stop().await;
}

#[tokio::test]
async fn parked_calls_that_let_their_stream_go_are_counted_until_their_retry() {
    let parked_released = |s: &Scrape| s.get("mrtr_parked_released_streams", &[]);
    for (release, counted) in [("", 1.0), ("release_parked_streams = false\n", 0.0)] {
        let fx = Fixture::http(&["--event-ids"]).await;
        let gw = gateway("http", &fx.url, &fx.log, ADMIN_ON, release).await;
        let c = gw.client();
        let caps = json!({"elicitation": {}});
        let first = c.call_tool("ask_form", json!({}), &caps).await;
        first.key_for("elicitation/create");
        // The stream is let go once the client has its answer: wait for the count to settle.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while parked_released(&gw.scrape().await) != counted {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{release:?}: expected {counted}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(gw.scrape().await.get("mrtr_parked_calls", &[]), 1.0);
        let done = c.answer_ada(json!({}), &first).await;
        assert_eq!(done.tool_json()["action"], "accept");
        let after = gw.scrape().await;
        assert_eq!(parked_released(&after), 0.0, "{release:?}");
        assert_eq!(after.get("mrtr_parked_calls", &[]), 0.0);
        gw.stop().await;
    }
}

#[tokio::test]
async fn a_parked_call_keeps_its_stream_when_told_to() {
    let fx = Fixture::http(&["--event-ids"]).await;
    let gw = over_http_with(&fx, "release_parked_streams = false\n").await;
    assert_eq!(elicit_round_trip(&gw.client()).await, ada());
    assert!(
        resumed_streams(&fx).is_empty(),
        "the stream was held: {:#?}",
        fx.requests()
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_parked_call_abandoned_after_letting_its_stream_go_is_cancelled_upstream() {
    let fx = Fixture::http(&["--event-ids"]).await;
    let gw = gateway("http", &fx.url, &fx.log, "[state]\npark_ttl = \"1s\"\n", "").await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let first = c.call_tool("ask_form", json!({}), &caps).await;
    first.key_for("elicitation/create");
    fx.wait_for("the call cancelled upstream", |fx| {
        fx.count("notifications/cancelled") == 1
    })
    .await;
    // The stream is picked up again to see the backend let go, so the session is reused.
    fx.wait_for("the stream picked up again", |fx| {
        !resumed_streams(fx).is_empty()
    })
    .await;
    fx.wait_for("the abandoned call let go", |_| gw.parked() == 0)
        .await;
    assert_eq!(elicit_round_trip(&c).await, ada());
    assert_eq!(fx.count("initialize"), 1, "the session was reused");
    gw.stop().await;
}

#[tokio::test]
async fn a_session_the_backend_forgot_between_two_calls_is_replaced_transparently() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    let caps = json!({});
    assert_eq!(
        c.call_tool("echo", json!({"text": "one"}), &caps)
            .await
            .status,
        200
    );
    fx.expire().await;
    let second = c.call_tool("echo", json!({"text": "two"}), &caps).await;
    assert!(second.body.get("error").is_none(), "{:#}", second.body);
    assert_eq!(second.result()["resultType"], "complete");
    assert_eq!(fx.count("initialize"), 2, "a new session was initialized");
    // Interactive calls are sent again too.
    fx.expire().await;
    assert_eq!(elicit_round_trip(&c).await, ada());
    gw.stop().await;
}

#[tokio::test]
async fn a_session_lost_while_a_call_is_parked_fails_the_retry_clearly() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    let caps = json!({"elicitation": {}});
    let first = c.call_tool("ask_form", json!({}), &caps).await;
    first.key_for("elicitation/create");
    fx.expire().await;
    let retry = c.answer_ada(json!({}), &first).await;
    assert_backend_failed(&retry, "fixture");
    // And the next call gets a new session.
    assert_eq!(elicit_round_trip(&c).await, ada());
    gw.stop().await;
}

#[tokio::test]
async fn a_backend_refusing_connections_gets_a_clear_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dir = scratch("refused");
    let gw = gateway(
        "http",
        &format!("http://127.0.0.1:{port}/mcp"),
        &dir.join("none.log"),
        "",
        "connect_timeout = \"1s\"\n",
    )
    .await;
    let reply = gw
        .client()
        .call_tool("echo", json!({"text": "x"}), &json!({}))
        .await;
    assert_backend_failed(&reply, "not reachable");
    gw.stop().await;
}

#[tokio::test]
async fn a_response_head_over_the_limit_is_named_and_the_limit_can_be_raised() {
    // A backend whose response heads are about 6 KiB (proxies in front of it add headers).
    let fx = Fixture::http(&["--header-padding", "6000"]).await;
    let strict = over_http(&fx).await;
    let reply = strict
        .client()
        .call_tool("echo", json!({"text": "x"}), &json!({}))
        .await;
    assert_backend_failed(&reply, "larger than `max_response_head_bytes` (4096 bytes)");

    let roomy = over_http_with(&fx, "max_response_head_bytes = 16384\n").await;
    let c = roomy.client();
    let reply = c.call_tool("echo", json!({"text": "x"}), &json!({})).await;
    assert_eq!(reply.status, 200, "{:#}", reply.body);
    assert_eq!(reply.tool_json(), json!({"echo": "x"}));
    // A round whose answer stream has the same large head.
    assert_eq!(elicit_round_trip(&c).await, ada());
    // Stopped last: a stopped gateway removes the fixture's scratch directory.
    roomy.stop().await;
    strict.stop().await;
}

#[tokio::test]
async fn a_backend_too_slow_gets_a_timeout_error() {
    let fx = Fixture::http(&[]).await;
    let gw = gateway(
        "http",
        &fx.url,
        &fx.log,
        "[limits]\nrequest_timeout = \"500ms\"\n",
        "",
    )
    .await;
    let c = gw.client();
    let reply = c.call_tool("slow", json!({"ms": 5000}), &json!({})).await;
    assert_backend_failed(&reply, "in time");
    // The slow call was cancelled upstream, and the backend still serves others.
    fx.wait_for("cancelled", |f| f.count("notifications/cancelled") >= 1)
        .await;
    assert_eq!(
        c.call_tool("echo", json!({"text": "x"}), &json!({}))
            .await
            .status,
        200
    );
    gw.stop().await;
}

#[tokio::test]
async fn batch_responses_from_a_2025_03_26_server_are_accepted() {
    for flags in [
        &["--protocol", "2025-03-26", "--batch-responses"][..],
        &[
            "--protocol",
            "2025-03-26",
            "--batch-responses",
            "--json-response",
        ][..],
    ] {
        let fx = Fixture::http(flags).await;
        // The legacy session's own requests, without the era probe before them.
        let backend = "protocol_version = \"2025-03-26\"\nprotocol = \"legacy\"\n";
        let gw = over_http_with(&fx, backend).await;
        let c = gw.client();
        let echo = c.call_tool("echo", json!({"text": "hi"}), &json!({})).await;
        assert_eq!(echo.result()["resultType"], "complete", "{flags:?}");
        let tools = c.send(&c.body("tools/list", json!({}), &json!({}))).await;
        assert!(
            tools.result()["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty())
        );
        assert!(
            fx.requests()
                .iter()
                .filter(|r| r["method"] == "POST")
                .all(|r| r["protocolVersion"].is_null()),
            "no MCP-Protocol-Version header before 2025-06-18"
        );
        gw.stop().await;
    }
}

#[tokio::test]
async fn bad_answers_fail_only_their_call_and_name_the_backend() {
    let fx = Fixture::http(&[]).await;
    let gw = gateway(
        "http",
        &fx.url,
        &fx.log,
        "[limits]\nmax_line_bytes = 65536\nrequest_timeout = \"5s\"\n",
        "",
    )
    .await;
    let c = gw.client();
    for (tool, args, hint) in [
        ("garbage", json!({}), "not JSON-RPC"),
        ("html", json!({}), "text/html"),
        ("huge_event", json!({"bytes": 200000}), "over 65536 bytes"),
        ("stray_response", json!({}), "without answering"),
    ] {
        let reply = c.call_tool(tool, args, &json!({})).await;
        assert_backend_failed(&reply, hint);
        let echo = c.call_tool("echo", json!({"text": tool}), &json!({})).await;
        assert_eq!(echo.result()["resultType"], "complete", "after {tool}");
    }
    assert_eq!(elicit_round_trip(&c).await, ada());
    gw.stop().await;
}

#[tokio::test]
async fn the_client_credential_reaches_the_backend_only_when_configured() {
    for (policy, expected) in [
        ("", Value::Null),
        ("authorization = \"drop\"\n", Value::Null),
        ("authorization = \"pass\"\n", json!("Bearer alice")),
        (
            "authorization = \"replace\"\nauthorization_value = \"Bearer gateway\"\n",
            json!("Bearer gateway"),
        ),
    ] {
        let fx = Fixture::http(&[]).await;
        let backend = format!("{policy}headers = {{ \"X-Team\" = \"blue\" }}\n");
        let gw = over_http_with(&fx, &backend).await;
        let c = gw.client().with_principal("alice");
        assert_eq!(elicit_round_trip(&c).await, ada());
        assert!(
            fx.requests().iter().all(|r| r["extra"]["x-team"] == "blue"),
            "configured headers go on every request: {:#?}",
            fx.requests()
        );
        let seen: Vec<Value> = fx
            .requests()
            .iter()
            .map(|r| r["authorization"].clone())
            .collect();
        assert!(!seen.is_empty());
        assert!(
            seen.iter().all(|a| *a == expected),
            "policy {policy:?}: backend saw {seen:?}"
        );
        gw.stop().await;
    }
}

#[tokio::test]
async fn an_upstream_session_never_carries_two_principals() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http_with(&fx, "authorization = \"pass\"\n").await;
    let alice = gw.client().with_principal("alice");
    let bob = gw.client().with_principal("bob");
    let (a, b) = tokio::join!(elicit_round_trip(&alice), elicit_round_trip(&bob));
    assert_eq!((a, b), (ada(), ada()));
    for _ in 0..3 {
        alice
            .call_tool("echo", json!({"text": "x"}), &json!({}))
            .await;
        bob.call_tool("echo", json!({"text": "x"}), &json!({}))
            .await;
    }
    let mut by_session: std::collections::HashMap<String, std::collections::HashSet<String>> =
        Default::default();
    for r in fx.requests() {
        if let (Some(s), Some(a)) = (r["session"].as_str(), r["authorization"].as_str()) {
            by_session
                .entry(s.to_owned())
                .or_default()
                .insert(a.to_owned());
        }
    }
    assert!(by_session.len() >= 2, "{by_session:?}");
    assert!(
        by_session.values().all(|creds| creds.len() == 1),
        "one credential per upstream session: {by_session:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn idle_sessions_are_deleted_upstream() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http_with(&fx, "idle_timeout = \"200ms\"\n").await;
    gw.client()
        .call_tool("echo", json!({"text": "x"}), &json!({}))
        .await;
    fx.wait_for("a DELETE", |f| {
        f.requests().iter().any(|r| r["method"] == "DELETE")
    })
    .await;
    gw.stop().await;
}

#[tokio::test]
async fn the_bridge_works_the_same_over_http() {
    let fx = Fixture::http(&[]).await;
    let gw = gateway("http", &fx.url, &fx.log, "[state]\npark_ttl = \"1s\"\n", "").await;
    let c = gw.client();
    // Coalescing: two pushes at once are one round.
    let pair = c.call_tool("pair", json!({}), &caps_all()).await;
    assert_eq!(pair.input_keys().len(), 2, "{:#}", pair.body);
    // -32042 becomes a URL round.
    let caps = json!({"elicitation": {"url": {}}});
    let url = c.call_tool("url_required", json!({}), &caps).await;
    assert_eq!(url.result()["resultType"], "input_required");
    // A push the client did not declare is refused upstream, never shown.
    let undeclared = c.call_tool("sample", json!({}), &json!({})).await;
    assert!(undeclared.body.get("result").is_some() || undeclared.body.get("error").is_some());
    assert_ne!(undeclared.body["result"]["resultType"], "input_required");
    // Expiry: the parked pair is abandoned and the backend hears cancel.
    fx.wait_for("cancelled after park_ttl", |f| {
        f.count("notifications/cancelled") >= 1
    })
    .await;
    gw.stop().await;
}

#[tokio::test]
async fn a_2024_11_05_sse_backend_serves_every_kind_of_push() {
    let fx = Fixture::sse(&[]).await;
    let gw = gateway(
        "sse",
        &fx.url,
        &fx.log,
        "",
        "protocol_version = \"2024-11-05\"\n",
    )
    .await;
    let c = gw.client();
    let caps = json!({"sampling": {}, "roots": {}});
    let first = c.call_tool("sample", json!({}), &caps).await;
    let key = first.key_for("sampling/createMessage");
    let done = c
        .retry_tool(
            "sample",
            json!({}),
            &caps,
            json!({ key: sampled("from the client") }),
            &first.state(),
        )
        .await;
    assert!(done.tool_json().to_string().contains("from the client"));
    let first = c.call_tool("list_roots", json!({}), &caps).await;
    let key = first.key_for("roots/list");
    let done = c
        .retry_tool(
            "list_roots",
            json!({}),
            &caps,
            json!({ key: roots(&["file:///a"]) }),
            &first.state(),
        )
        .await;
    assert!(done.tool_json().to_string().contains("file:///a"));
    // The stream drops: the next call initializes a new session.
    fx.expire().await;
    let mut echo = c.call_tool("echo", json!({"text": "x"}), &json!({})).await;
    if echo.body.get("error").is_some() {
        // The drop may be noticed by this call; the one after runs on a new session.
        echo = c.call_tool("echo", json!({"text": "x"}), &json!({})).await;
    }
    assert_eq!(echo.result()["resultType"], "complete");
    assert!(fx.count("initialize") >= 2);
    gw.stop().await;
}

#[tokio::test]
async fn an_sse_backend_that_never_names_its_endpoint_gets_a_clear_error() {
    let fx = Fixture::sse(&["--no-endpoint"]).await;
    let gw = gateway(
        "sse",
        &fx.url,
        &fx.log,
        "[limits]\nrequest_timeout = \"500ms\"\n",
        "",
    )
    .await;
    let reply = gw
        .client()
        .call_tool("echo", json!({"text": "x"}), &json!({}))
        .await;
    assert_backend_failed(&reply, "endpoint");
    gw.stop().await;
}

#[tokio::test]
async fn without_a_standalone_stream_pushes_on_the_post_stream_still_work() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http_with(&fx, "standalone_stream = false\n").await;
    assert_eq!(elicit_round_trip(&gw.client()).await, ada());
    assert!(
        fx.requests().iter().all(|r| r["method"] != "GET"),
        "no GET stream was opened: {:#?}",
        fx.requests()
    );
    gw.stop().await;
}

#[tokio::test]
async fn progress_reaches_only_its_own_call_when_calls_share_a_session() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    let call = |token: &'static str, steps: u64| {
        let mut body = c.body(
            "tools/call",
            json!({"name": "progress", "arguments": {"steps": steps}}),
            &json!({}),
        );
        body["params"]["_meta"]["progressToken"] = json!(token);
        let c = &c;
        async move { c.send(&body).await }
    };
    // After a first call opens the session, two calls at once share it; each reads its own
    // answer stream.
    assert_eq!(call("tok-0", 1).await.tool_json(), json!({"steps": 1}));
    let (a, b) = tokio::join!(call("tok-a", 3), call("tok-b", 5));
    for (r, token, steps) in [(&a, "tok-a", 3), (&b, "tok-b", 5)] {
        assert_eq!(r.tool_json(), json!({ "steps": steps }));
        assert_eq!(
            r.notifications.len(),
            steps as usize,
            "every step of {token}: {:#?}",
            r.notifications
        );
        for n in &r.notifications {
            assert_eq!(n["method"], "notifications/progress");
            assert_eq!(n["params"]["progressToken"], token);
        }
    }
    assert_eq!(fx.count("initialize"), 1, "one shared session");
    gw.stop().await;
}

#[tokio::test]
async fn a_stateless_backend_refusing_the_get_stream_keeps_its_session_and_asks_on_the_post() {
    let fx = Fixture::python("stateless").await;
    let gw = gateway(
        "http",
        &fx.url,
        &fx.log,
        "[limits]\nrequest_timeout = \"5s\"\n",
        "",
    )
    .await;
    let c = gw.client();
    for round in 0..2 {
        assert_eq!(elicit_round_trip(&c).await, ada(), "round {round}");
    }
    gw.stop().await;
}
#[tokio::test]
async fn a_request_answered_with_202_fails_clearly() {
    let fx = Fixture::python("accepted").await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    let reply = c.call_tool("echo", json!({"text": "x"}), &json!({})).await;
    assert_backend_failed(&reply, "202 Accepted and no response");
    gw.stop().await;
}

#[tokio::test]
async fn a_backend_error_page_is_named_by_its_status_and_kept_from_the_client() {
    let fx = Fixture::python("error_page").await;
    let gw = over_http(&fx).await;
    let c = gw.client();
    let reply = c.call_tool("echo", json!({"text": "x"}), &json!({})).await;
    assert_backend_failed(&reply, "HTTP 500");
    assert!(
        !reply.body.to_string().contains("hunter2"),
        "the page's text stays in the gateway's log: {:#}",
        reply.body
    );
    gw.stop().await;
}

/// A TLS front for a fixture, as a proxy or a service mesh puts one before a backend.
struct TlsFront {
    url: String,
    /// The PEM file of the CA that issued the front's certificate.
    ca: PathBuf,
    /// A client certificate and its key, issued by the same CA.
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// A TLS front for `fx` at `https://localhost:PORT/mcp`: a certificate for `localhost` issued by
/// a CA made here, each connection relayed in plain bytes to the fixture. With
/// `require_client_cert`, only clients showing a certificate from that CA get through.
async fn behind_tls(fx: &Fixture, require_client_cert: bool) -> TlsFront {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use std::sync::Arc;
    use tokio_rustls::rustls::{self, pki_types::PrivateKeyDer};
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let issue = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert, key)
    };
    let (leaf, leaf_key) = issue("localhost");
    let (client, client_key) = issue("mrtr-gateway");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let server = if require_client_cert {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        server.with_client_cert_verifier(verifier)
    } else {
        server.with_no_client_auth()
    }
    .with_single_cert(
        vec![leaf.der().clone(), ca_cert.der().clone()],
        PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let plain: http::Uri = fx.url.parse().unwrap();
    let plain = plain.authority().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, plain) = (acceptor.clone(), plain.clone());
            tokio::spawn(async move {
                // A handshake that fails (or a client given up) just ends this connection.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut backend = tokio::net::TcpStream::connect(&plain).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut backend).await;
            });
        }
    });
    let dir = scratch("tls-front");
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    TlsFront {
        url: format!("https://localhost:{port}/mcp"),
        ca: write("ca.pem", ca_cert.pem()),
        client_cert: write("client.pem", client.pem()),
        client_key: write("client.key", client_key.serialize_pem()),
    }
}

/// `name = "path"` for a backend's table.
fn path_setting(name: &str, path: &std::path::Path) -> String {
    format!("{name} = {:?}\n", path.display().to_string())
}

/// A pass-through call and a whole MRTR round through a gateway in front of `fx` at `url` with
/// `backend` settings: the answers and the round's POSTs cross the same TLS front.
async fn calls_go_through(fx: &Fixture, url: &str, backend: &str) {
    let before = fx.count("tools/call");
    let gw = gateway("http", url, &fx.log, "", backend).await;
    let c = gw.client();
    let echo = c
        .call_tool("echo", json!({"text": "tls"}), &json!({}))
        .await;
    assert_eq!(echo.tool_json(), json!({"echo": "tls"}), "{:#}", echo.body);
    assert_eq!(elicit_round_trip(&c).await, ada());
    assert!(fx.count("tools/call") >= before + 2, "{:#?}", fx.received());
    gw.stop().await;
}

/// A call through a gateway in front of `url` with `backend` settings fails, naming the backend
/// and the certificate the TLS handshake did not accept.
async fn a_call_fails_on_the_certificate(fx: &Fixture, url: &str, backend: &str) {
    let gw = gateway("http", url, &fx.log, "", backend).await;
    let reply = gw
        .client()
        .call_tool("echo", json!({"text": "x"}), &json!({}))
        .await;
    assert_backend_failed(&reply, "");
    assert!(
        reply.error_message().to_lowercase().contains("certificate"),
        "{}",
        reply.error_message()
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_https_backend_is_trusted_through_its_private_ca() {
    let fx = Fixture::http(&[]).await;
    let front = behind_tls(&fx, false).await;
    calls_go_through(&fx, &front.url, &path_setting("ca_file", &front.ca)).await;
    // Without the CA the bundled public roots do not vouch for the front's certificate.
    a_call_fails_on_the_certificate(&fx, &front.url, "").await;
}

#[tokio::test]
async fn an_https_backend_that_asks_for_a_client_certificate_gets_the_configured_one() {
    let fx = Fixture::http(&[]).await;
    let front = behind_tls(&fx, true).await;
    let ca_file = path_setting("ca_file", &front.ca);
    let mutual = ca_file.clone()
        + &path_setting("client_cert_file", &front.client_cert)
        + &path_setting("client_key_file", &front.client_key);
    calls_go_through(&fx, &front.url, &mutual).await;
    // Without a client certificate the front ends the handshake.
    a_call_fails_on_the_certificate(&fx, &front.url, &ca_file).await;
}

/// A backend that dies in the middle of its answer: the client is told what broke, naming the
/// backend once.
#[tokio::test]
async fn a_stream_that_breaks_off_is_told_plainly_naming_the_backend_once() {
    let fx = Fixture::http(&[]).await;
    let gw = over_http(&fx).await;
    let reply = gw.client().call_tool("crash", json!({}), &json!({})).await;
    let message = reply.error_message().to_owned();
    assert_eq!(reply.error_code(), -31001, "{:#}", reply.body);
    assert_eq!(
        message.matches("`fixture`").count(),
        1,
        "the backend named once: {message}"
    );
    assert!(!message.contains("sent the"), "{message}");
    gw.stop().await;
}

//! A Streamable HTTP backend that hangs: the client has its -31001 within `request_timeout`
//! plus the grace (the time to write the error), on a first request and on a retry, whichever
//! of the round's waits the backend leaves unanswered. The backend is the built-in legacy
//! server as a child process with `--stall`: it leaves POSTs that carry no request (answers,
//! cancels) or stream pick-ups open without a response.
//!
//! Each wait is bounded by `request_timeout` plus a margin of half of it: a round that took
//! one full timeout for each wait in turn (the pick-up, the answer, the outcome, the cancel)
//! runs past it, while noise on a busy machine does not reach it.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The gateway's `request_timeout`.
const ROUND: Duration = Duration::from_secs(2);
/// What the client may wait beyond it: the grace is only the time to write the error.
const MARGIN: Duration = Duration::from_secs(1);

/// The built-in legacy server over Streamable HTTP, as a child process; killed on drop.
struct Fixture {
    _child: tokio::process::Child,
    url: String,
    log: PathBuf,
}

impl Fixture {
    async fn http(flags: &[&str]) -> Fixture {
        let log = scratch("hung-fixture").join("backend.log");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["legacy-server", "--http", "127.0.0.1:0"])
            .args(flags)
            .arg("--log")
            .arg(&log)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the fixture");
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).lines().next_line(),
        )
        .await
        .expect("the fixture says where it listens")
        .expect("read stdout")
        .expect("a line");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .trim()
            .to_owned();
        Fixture {
            _child: child,
            url,
            log,
        }
    }

    /// Waits (a bounded while) until the backend has received a message of `method`.
    async fn wait_for(&self, method: &str) {
        let received = || {
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .any(|e| e["dir"] == "in" && e["msg"]["method"] == method)
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !received() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the backend never received `{method}`"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A gateway in front of `fx` whose rounds last [`ROUND`].
async fn gateway(fx: &Fixture) -> Gateway {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[limits]\nrequest_timeout = \"{}s\"\n\
         [[backend]]\nname = \"fixture\"\nkind = \"http\"\nurl = \"{}\"\n",
        ROUND.as_secs(),
        fx.url
    );
    Gateway::from_config(&text, scratch("hung").join("backend.log")).await
}

/// The reply to a request the backend leaves hanging: a -31001 that came within the round.
async fn failed_within_the_round(request: impl Future<Output = Reply>) -> Reply {
    let reply = tokio::time::timeout(ROUND + MARGIN, request)
        .await
        .expect("the client has its error within request_timeout plus the grace");
    assert_eq!(reply.error_code(), -31001, "{:#}", reply.body);
    reply
}

#[tokio::test]
async fn a_hung_tool_fails_its_first_request_within_the_round() {
    // The tool outlives the round, and the backend takes no cancel: the client does not wait
    // for the cancel to be taken.
    let fx = Fixture::http(&["--stall", "answers"]).await;
    let gw = gateway(&fx).await;
    let c = gw.client();
    let reply =
        failed_within_the_round(c.call_tool("slow", json!({"ms": 30_000}), &json!({}))).await;
    assert!(
        reply.error_message().contains("time"),
        "{}",
        reply.error_message()
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_retry_whose_answer_the_backend_never_takes_fails_within_the_round() {
    // The answer's POST, the wait for the outcome and the cancel share the retry's round.
    let fx = Fixture::http(&["--stall", "answers"]).await;
    let gw = gateway(&fx).await;
    let c = gw.client();
    let first = c
        .call_tool("ask_form", json!({}), &json!({"elicitation": {}}))
        .await;
    assert!(!first.state().is_empty(), "{:#}", first.body);
    failed_within_the_round(c.answer_ada(json!({}), &first)).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_retry_whose_stream_is_never_picked_up_again_fails_within_the_round() {
    // The parked call lets its numbered stream go; the backend never answers the pick-up. The
    // pick-up, the answer and the wait for the outcome share the retry's round.
    let fx = Fixture::http(&["--event-ids", "--stall", "resumes"]).await;
    let gw = gateway(&fx).await;
    let c = gw.client();
    let first = c
        .call_tool("ask_form", json!({}), &json!({"elicitation": {}}))
        .await;
    assert!(!first.state().is_empty(), "{:#}", first.body);
    failed_within_the_round(c.answer_ada(json!({}), &first)).await;
    // The cancel went out after the client's error, and before the session closed.
    fx.wait_for("notifications/cancelled").await;
    gw.stop().await;
}

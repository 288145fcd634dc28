//! Parks that expire while new calls and retries run on the same Streamable HTTP backend.
//!
//! Abandoned calls are parked in bursts with a two-second `park_ttl`, so their expiries (each
//! cancels the call upstream, answers the backend's open request and gives the session back)
//! keep overlapping with new calls, retries and plain requests of the same principals: on
//! sessions they shared with the abandoned calls (same capability set) and on sessions they did
//! not (another capability set, another principal). More calls park at once than the pool has
//! sessions, so sessions are also queued for, handed on and closed to make room meanwhile.
//! Every call a client finishes must complete as if nothing else were going on.
//!
//! The backend is the fixture server in this process on a real listener, behaving as a server
//! on the Python SDK can: once with one event store for all its sessions, keyed by request id
//! (a parked call lets its stream go and picks it up at its retry, and must be replayed only
//! its own events), once ending a session when a cancellation reaches a request it has already
//! answered (no call may lose its session to another's abandonment). `RUST_LOG=debug` shows
//! the gateway's side of a failure.

mod common;

use common::*;
use mrtr_fixture::{HttpOptions, Options as FixtureOptions, serve_http};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a call stays parked: long enough for a legitimate retry on a busy machine, short
/// enough that expiries overlap with new calls for most of [`RUN_FOR`].
const PARK_TTL: &str = "2s";
/// How long the workers run.
const RUN_FOR: Duration = Duration::from_secs(8);
/// Principals, each with sessions of its own.
const PRINCIPALS: [&str; 3] = ["alice", "bob", "carol"];
/// Calls each abandoner parks at once, every [`BURST_EVERY`].
const BURST: usize = 6;
const BURST_EVERY: Duration = Duration::from_millis(250);
/// How long a legitimate call may take before it counts as lost: a bound so a lost call fails
/// the test instead of hanging it, not a limit on how fast it answers.
const CALL_BOUND: Duration = Duration::from_secs(30);
/// Failures quoted in full when the test fails.
const QUOTED: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_complete_while_parks_expire_on_a_backend_with_one_event_store() {
    race(HttpOptions {
        shared_event_store: true,
        ..HttpOptions::default()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_complete_while_parks_expire_on_a_backend_ending_sessions_on_late_cancels() {
    race(HttpOptions {
        late_cancel_ends_session: true,
        ..HttpOptions::default()
    })
    .await;
}

/// Runs the workers against the fixture served with `http`; every legitimate call must have
/// completed correctly.
async fn race(http: HttpOptions) {
    trace();
    let backend = Backend::start(http).await;
    let dir = scratch("park-expiry-race");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[state]\npark_ttl = \"{PARK_TTL}\"\n\
         [limits]\nqueue_wait = \"20s\"\n\
         [[backend]]\nname = \"fixture\"\nkind = \"http\"\nurl = \"{}\"\npool_max = 48\n",
        backend.url
    );
    let gw = Gateway::from_config(&config, dir.join("backend.log")).await;
    let tally: Shared = Arc::default();
    let until = Instant::now() + RUN_FOR;
    let mut workers = Vec::new();
    for (i, principal) in PRINCIPALS.iter().enumerate() {
        let client = gw.client().with_principal(principal);
        for caps in [forms(), forms_and_sampling()] {
            let c = client.clone();
            workers.push(tokio::spawn(abandoner(
                c,
                caps.clone(),
                until,
                tally.clone(),
            )));
            // One answers at once, one after a moment: its retry lands among expiries.
            for linger in [0, 100 * (i as u64 + 1)] {
                let (c, caps, tally) = (client.clone(), caps.clone(), tally.clone());
                let linger = Duration::from_millis(linger);
                workers.push(tokio::spawn(finisher(c, caps, linger, until, tally)));
            }
        }
        let caps = json!({});
        workers.push(tokio::spawn(plain_only(client, caps, until, tally.clone())));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let t = std::mem::take(&mut *tally.lock().expect("tally"));
    eprintln!(
        "{} legitimate calls, {} parks abandoned",
        t.calls, t.abandoned
    );
    assert!(t.abandoned > 0 && t.calls > 0, "the workers made no calls");
    assert!(
        t.failures.is_empty(),
        "{} of {} legitimate calls failed ({} parks abandoned); the first:\n{}",
        t.failures.len(),
        t.calls,
        t.abandoned,
        t.failures[..t.failures.len().min(QUOTED)].join("\n")
    );
    gw.stop().await;
}

/// Two capability sets that each key sessions of their own: one asks only for forms, the other
/// for forms and sampling.
fn forms() -> Value {
    json!({"elicitation": {}})
}

fn forms_and_sampling() -> Value {
    json!({"elicitation": {}, "sampling": {}})
}

/// The fixture server over Streamable HTTP on 127.0.0.1:0, in this process; stopped on drop.
struct Backend {
    url: String,
    shutdown: CancellationToken,
}

impl Backend {
    async fn start(http: HttpOptions) -> Backend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        let shutdown = CancellationToken::new();
        let opts = FixtureOptions {
            http,
            ..FixtureOptions::default()
        };
        tokio::spawn(serve_http(listener, opts, shutdown.clone()));
        Backend { url, shutdown }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Logs at `RUST_LOG` (nothing without it) into the test's output.
fn trace() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The legitimate calls made, what went wrong with them, and the parks abandoned.
#[derive(Default)]
struct Tally {
    calls: usize,
    abandoned: usize,
    failures: Vec<String>,
}

type Shared = Arc<Mutex<Tally>>;

/// Counts one legitimate call, bounded by [`CALL_BOUND`], and how it went.
async fn record(tally: &Shared, what: &str, call: impl Future<Output = Result<(), String>>) {
    let outcome = tokio::time::timeout(CALL_BOUND, call)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {CALL_BOUND:?}")));
    let mut t = tally.lock().expect("tally");
    t.calls += 1;
    if let Err(e) = outcome {
        t.failures.push(format!("{what}: {e}"));
    }
}

/// An `ask_form` call answered after `linger`: it must end with the tool's echo of the answer.
async fn ask_and_answer(c: &Client, caps: &Value, linger: Duration) -> Result<(), String> {
    let args = json!({"message": "Who?"});
    let first = c.call_tool("ask_form", args.clone(), caps).await;
    if first.body["result"]["resultType"] != "input_required" {
        return Err(format!("first round: {}", first.body));
    }
    tokio::time::sleep(linger).await;
    let key = first.key_for("elicitation/create");
    let answer = accept(json!({"name": "Ada"}));
    let responses = json!({ key: answer.clone() });
    let done = c
        .retry_tool("ask_form", args, caps, responses, &first.state())
        .await;
    let text = done.body["result"]["content"][0]["text"].as_str();
    let echoed = text.and_then(|t| serde_json::from_str::<Value>(t).ok());
    if done.body["result"]["resultType"] != "complete" || echoed != Some(answer) {
        return Err(format!("retry: {}", done.body));
    }
    Ok(())
}

/// A request with nothing to ask (`tools/list`, or an `echo` call), on the sessions of `caps`.
async fn plain(c: &Client, caps: &Value, n: usize) -> Result<(), String> {
    let text = format!("e{n}");
    let list = n.is_multiple_of(2);
    let reply = if list {
        c.send(&c.body("tools/list", json!({}), caps)).await
    } else {
        c.call_tool("echo", json!({"text": text}), caps).await
    };
    let result = &reply.body["result"];
    let answered = if list {
        result["tools"].is_array()
    } else {
        result["content"][0]["text"].as_str() == Some(&json!({"echo": text}).to_string())
    };
    if !answered {
        return Err(format!("{}", reply.body));
    }
    Ok(())
}

/// Parks calls in bursts and never retries them, until `until`.
async fn abandoner(c: Client, caps: Value, until: Instant, tally: Shared) {
    while Instant::now() < until {
        let args = json!({"message": "Gone?"});
        let burst = (0..BURST).map(|_| c.call_tool("ask_form", args.clone(), &caps));
        for first in futures_util::future::join_all(burst).await {
            let mut t = tally.lock().expect("tally");
            if first.body["result"]["resultType"] == "input_required" {
                t.abandoned += 1;
            } else {
                t.failures
                    .push(format!("a call to abandon: {}", first.body));
            }
        }
        tokio::time::sleep(BURST_EVERY).await;
    }
}

/// Calls answered after `linger`, each followed by a plain request, until `until`.
async fn finisher(c: Client, caps: Value, linger: Duration, until: Instant, tally: Shared) {
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        record(&tally, "ask_form", ask_and_answer(&c, &caps, linger)).await;
        record(&tally, "plain", plain(&c, &caps, n)).await;
    }
}

/// Plain requests only, on sessions of `caps`, until `until`.
async fn plain_only(c: Client, caps: Value, until: Instant, tally: Shared) {
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        record(&tally, "plain without input", plain(&c, &caps, n)).await;
    }
}

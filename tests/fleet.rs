//! Several gateway processes as one fleet on loopback: shared keys, a client that sends every
//! retry to a different replica than the request before it, in hold mode (retries forwarded to
//! the owner) and replay mode (calls run again wherever the retry lands); killing the owner;
//! draining on SIGTERM.

mod common;

use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const FROZEN: &str = "Invalid requestState: issue the request again without it";

/// One gateway process; killed and reaped when dropped, whatever happened.
struct Replica {
    child: Option<Child>,
    base: String,
    /// The admin listener (`/readyz`).
    admin: std::net::SocketAddr,
    dir: PathBuf,
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Replica {
    /// Starts `mrtr-gateway serve` with a hold backend at /hold and a replay backend at
    /// /replay, both the built-in legacy server.
    fn start(id: &str, keys: &str, drain_grace: &str) -> Replica {
        Replica::start_with(id, keys, drain_grace, "kind = \"builtin\"")
    }

    /// The same, with `hold_backend` lines for the /hold backend.
    fn start_with(id: &str, keys: &str, drain_grace: &str, hold_backend: &str) -> Replica {
        let dir = scratch(id);
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                r#"[server]
listen = "127.0.0.1:0"
shutdown_grace = "5s"
[state]
park_ttl = "60s"
[limits]
max_parked_per_principal = 1000
queue_wait = "20s"
[admin]
listen = "127.0.0.1:0"
[fleet]
internal_listen = "127.0.0.1:0"
drain_grace = "{drain_grace}"
forward_connect_timeout = "2s"
forward_timeout = "30s"
[log]
level = "info"
[[backend]]
name = "held"
path = "/hold"
{hold_backend}
pool_max = 128
[[backend]]
name = "replayed"
path = "/replay"
kind = "builtin"
pool_max = 128
replay = "replay"
"#
            ),
        )
        .expect("write config");
        let log = std::fs::File::create(dir.join("stderr.log")).expect("log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("MRTR_STATE_KEYS", keys)
            .env("MRTR_REPLICA_ID", id)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start gateway");
        let stdout = child.stdout.take().expect("stdout");
        let mut replica = Replica {
            child: Some(child),
            base: String::new(),
            admin: ([127, 0, 0, 1], 0).into(),
            dir,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Keeps reading so the pipe never fills.
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("replica {id} did not start: {}", replica.stderr()));
            if let Some(url) = line.strip_prefix("mrtr-gateway listening on ") {
                let url = url.trim();
                replica.base = url[..url.rfind('/').expect("path")].to_owned();
            }
            if let Some(admin) = line.strip_prefix("mrtr-gateway admin on http://") {
                replica.admin = admin.trim().parse().expect("admin address");
                return replica;
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits for the process to exit on its own; its exit code.
    async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let child = self.child.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status.code();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the replica did not exit in time: {}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn shared_keys() -> String {
    let (_, secret) = mrtr_gateway::seal::Key::generate("fleet").expect("key");
    format!("fleet:{secret}")
}

fn fleet(n: usize, drain_grace: &str) -> Vec<Replica> {
    let keys = shared_keys();
    (0..n)
        .map(|i| Replica::start(&format!("r{i}"), &keys, drain_grace))
        .collect()
}

fn caps() -> Value {
    json!({"elicitation": {}})
}

fn message(r: &Reply, key: &str) -> String {
    r.result()["inputRequests"][key]["params"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A `two_step` call midway: the client holds the state of round `round`.
struct Midway {
    i: usize,
    path: &'static str,
    key: String,
    state: String,
}

impl Midway {
    fn client(&self, replica: &Replica) -> Client {
        Client::new(&replica.url(self.path)).with_principal(&format!("p{}", self.i % 5))
    }

    fn args(&self) -> Value {
        json!({"tag": format!("t{}", self.i)})
    }

    /// Round one, on `replica`.
    async fn begin(replica: &Replica, path: &'static str, i: usize) -> Midway {
        let mut m = Midway {
            i,
            path,
            key: String::new(),
            state: String::new(),
        };
        let r = m
            .client(replica)
            .call_tool("two_step", m.args(), &caps())
            .await;
        m.key = r.key_for("elicitation/create");
        assert_eq!(message(&r, &m.key), format!("Name for t{i}?"));
        m.state = r.state();
        m
    }

    /// Answers round one on `replica`; expects round two.
    async fn answer_name(&mut self, replica: &Replica) {
        let answer = json!({ self.key.clone(): accept(json!({"name": format!("n{}", self.i)})) });
        let r = self
            .client(replica)
            .retry_tool("two_step", self.args(), &caps(), answer, &self.state)
            .await;
        self.key = r.key_for("elicitation/create");
        assert_eq!(
            message(&r, &self.key),
            format!("Confirm n{i} for t{i}?", i = self.i)
        );
        self.state = r.state();
    }

    /// Answers round two on `replica`; the reply.
    async fn confirm(&self, replica: &Replica) -> Reply {
        let answer = json!({ self.key.clone(): accept(json!({"answer": "yes"})) });
        self.client(replica)
            .retry_tool("two_step", self.args(), &caps(), answer, &self.state)
            .await
    }

    fn check_done(&self, r: &Reply) {
        assert_eq!(
            r.tool_json(),
            json!({"tag": format!("t{}", self.i), "name": format!("n{}", self.i), "confirm": "yes"}),
            "call {} on {}",
            self.i,
            self.path
        );
    }
}

fn assert_frozen(r: &Reply) {
    assert_eq!(r.error_code(), -32602, "{:#}", r.body);
    assert_eq!(r.body["error"]["message"], FROZEN);
}

/// Runs 200 two-round calls on `path`, 20 at a time; each request goes to the next replica.
async fn two_hundred(replicas: &[Replica], path: &'static str) {
    let n = replicas.len();
    futures_util::stream::iter(0..200)
        .map(|i| async move {
            let mut m = Midway::begin(&replicas[i % n], path, i).await;
            m.answer_name(&replicas[(i + 1) % n]).await;
            let done = m.confirm(&replicas[(i + 2) % n]).await;
            m.check_done(&done);
        })
        .buffer_unordered(20)
        .collect::<Vec<()>>()
        .await;
}

/// `mrtr_retries_total{result}` summed over the fleet, by result.
async fn fleet_retries(replicas: &[Replica]) -> std::collections::BTreeMap<&'static str, f64> {
    let mut total = std::collections::BTreeMap::new();
    for r in replicas {
        let (status, _, body) = admin_request(r.admin, "GET", "/metrics").await;
        assert_eq!(status, 200, "{body}");
        let scrape = Scrape::parse(&body);
        for result in ["resumed", "forwarded", "replayed", "asked_again"] {
            *total.entry(result).or_insert(0.0) += scrape.get(
                "mrtr_retries_total",
                &[("result", result), ("reason", "none")],
            );
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_two_round_calls_complete_across_three_replicas_in_both_modes() {
    let replicas = fleet(3, "1s");
    let count = |resumed: f64, forwarded: f64, replayed: f64| {
        std::collections::BTreeMap::from([
            ("asked_again", 0.0),
            ("forwarded", forwarded),
            ("replayed", replayed),
            ("resumed", resumed),
        ])
    };
    tokio::time::timeout(Duration::from_secs(120), async {
        // Every retry lands on another replica than the call's owner: in hold mode it is
        // forwarded there (counted by the replica it landed on) and resumed by the owner.
        two_hundred(&replicas, "/hold").await;
        assert_eq!(fleet_retries(&replicas).await, count(400.0, 400.0, 0.0));
        // In replay mode the replica it lands on runs the call again from the state.
        two_hundred(&replicas, "/replay").await;
        assert_eq!(fleet_retries(&replicas).await, count(400.0, 400.0, 400.0));
    })
    .await
    .expect("all calls finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_owner_loses_held_calls_cleanly_and_replayed_calls_not_at_all() {
    let mut replicas = fleet(3, "1s");
    let mut held = Vec::new();
    let mut replayed = Vec::new();
    for i in 0..10 {
        held.push(Midway::begin(&replicas[0], "/hold", i).await);
        replayed.push(Midway::begin(&replicas[0], "/replay", i).await);
    }
    replicas[0].kill();
    tokio::time::timeout(Duration::from_secs(60), async {
        for mut m in replayed {
            m.answer_name(&replicas[1]).await;
            let done = m.confirm(&replicas[2]).await;
            m.check_done(&done);
        }
        for m in held {
            let answer = json!({ m.key.clone(): accept(json!({"name": "x"})) });
            let r = m
                .client(&replicas[1])
                .retry_tool("two_step", m.args(), &caps(), answer, &m.state)
                .await;
            assert_frozen(&r);
        }
    })
    .await
    .expect("nothing hangs when the owner is gone");
    assert!(
        replicas[1]
            .stderr()
            .contains("retry for a call parked on another replica failed"),
        "the failed forward is logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_parked_calls_for_the_grace_period_then_exits_zero() {
    let keys = shared_keys();
    // The draining replica runs its /hold backend as child processes.
    let stdio = format!(
        "command = {:?}\nargs = [\"legacy-server\"]",
        env!("CARGO_BIN_EXE_mrtr-gateway")
    );
    let mut replicas = [
        Replica::start_with("r0", &keys, "4s", &stdio),
        Replica::start("r1", &keys, "4s"),
    ];
    let mut parked = Vec::new();
    for i in 0..6 {
        parked.push(Midway::begin(&replicas[0], "/hold", i).await);
    }
    let info = Client::new(&replicas[0].url("/hold"))
        .call_tool("session_info", json!({}), &json!({}))
        .await;
    let child = info.tool_json()["pid"].as_u64().expect("backend pid");
    let ready = |r: &Replica| {
        let addr = r.admin;
        async move { admin_request(addr, "GET", "/readyz").await.0 }
    };
    assert_eq!(ready(&replicas[0]).await, 200);
    replicas[0].terminate();
    // Readiness turns false, and new work is refused, once the drain started.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ready(&replicas[0]).await != 503 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never said 503"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let probe = Client::new(&replicas[0].url("/hold"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = probe
            .call_tool("echo", json!({"text": "hi"}), &caps())
            .await;
        if r.body.get("error").is_some() {
            assert_eq!(r.error_code(), -31000, "{:#}", r.body);
            assert!(
                r.body["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("shutting down"),
                "{:#}",
                r.body
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late = parked.split_off(3);
    // Within the grace: forwarded from the other replica, and directly on the draining one.
    for (n, mut m) in parked.into_iter().enumerate() {
        let (first, second) = if n == 0 {
            (&replicas[0], &replicas[0])
        } else {
            (&replicas[1], &replicas[1])
        };
        m.answer_name(first).await;
        let done = m.confirm(second).await;
        m.check_done(&done);
    }
    let code = replicas[0].exit_code(Duration::from_secs(30)).await;
    assert_eq!(code, Some(0), "{}", replicas[0].stderr());
    // Stopped and reaped by the gateway before it exited: no process, not even a zombie.
    let status = std::fs::read_to_string(format!("/proc/{child}/status")).unwrap_or_default();
    assert!(
        status.is_empty(),
        "the backend child was stopped and reaped: {status}"
    );
    assert!(
        replicas[0].stderr().contains("drain grace over"),
        "{}",
        replicas[0].stderr()
    );
    // After the grace the owner is gone: the clear error, at once.
    for m in late {
        let answer = json!({ m.key.clone(): accept(json!({"name": "x"})) });
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            m.client(&replicas[1])
                .retry_tool("two_step", m.args(), &caps(), answer, &m.state),
        )
        .await
        .expect("no hang");
        assert_frozen(&r);
    }
}

//! Several gateway processes as one fleet on loopback: shared keys, a client that sends every
//! retry to a different replica than the request before it (retries forwarded to the owner);
//! killing the owner.

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
    /// Starts `mrtr-gateway serve` with the built-in legacy server at /hold.
    fn start(id: &str, keys: &str) -> Replica {
        let dir = scratch(id);
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            r#"[server]
listen = "127.0.0.1:0"
shutdown_grace = "5s"
[state]
park_ttl = "60s"
[limits]
max_parked_per_principal = 1000
queue_wait = "20s"
[fleet]
internal_listen = "127.0.0.1:0"
forward_connect_timeout = "2s"
forward_timeout = "30s"
[log]
level = "info"
[[backend]]
name = "held"
path = "/hold"
kind = "builtin"
pool_max = 128
"#,
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

    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }
}

fn shared_keys() -> String {
    let (_, secret) = mrtr_gateway::seal::Key::generate("fleet").expect("key");
    format!("fleet:{secret}")
}

fn fleet(n: usize) -> Vec<Replica> {
    let keys = shared_keys();
    (0..n)
        .map(|i| Replica::start(&format!("r{i}"), &keys))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_two_round_calls_complete_across_three_replicas() {
    let replicas = fleet(3);
    tokio::time::timeout(Duration::from_secs(120), async {
        two_hundred(&replicas, "/hold").await;
    })
    .await
    .expect("all calls finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_owner_loses_held_calls_cleanly() {
    let mut replicas = fleet(3);
    let mut held = Vec::new();
    for i in 0..10 {
        held.push(Midway::begin(&replicas[0], "/hold", i).await);
    }
    replicas[0].kill();
    tokio::time::timeout(Duration::from_secs(60), async {
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

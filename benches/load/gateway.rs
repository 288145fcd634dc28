//! The processes under test: the gateway binary started as a child with a generated config, the
//! fixture legacy server it fronts (a child of the gateway for stdio, a child of this harness for
//! HTTP), the fixture as a 2026-07-28 server it relays to (HTTP only), and what `/proc` says
//! about their memory and CPU.

use crate::rss::rss_kib;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Which transport the gateway uses to reach the fixture backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// `mrtr-gateway legacy-server` as a stdio child of the gateway (one child per session).
    Stdio,
    /// `mrtr-gateway legacy-server --http ADDR`, reached by the gateway with `kind = "http"`.
    Http,
}

/// Settings of one gateway run.
#[derive(Debug, Clone)]
pub struct Settings {
    pub pool_max: usize,
    pub max_parked: usize,
    /// HTTP backend: whether each session keeps its standalone GET stream.
    pub standalone_stream: bool,
    /// `server.worker_threads`; `None` leaves the gateway's default (one per CPU).
    pub worker_threads: Option<usize>,
    /// A 2026-07-28 fixture's URL: served as a second backend at [`MODERN_PATH`] with
    /// `protocol = "2026-07-28"`, so the gateway relays to it.
    pub modern_url: Option<String>,
}

/// The fixture backend's endpoint path on the gateway, and the 2026-07-28 backend's beside it.
pub const LEGACY_PATH: &str = "/mcp";
pub const MODERN_PATH: &str = "/modern";

/// A child process that is killed if the harness lets go of it.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    pub pid: u32,
}

impl Proc {
    pub fn spawn(mut cmd: Command, stderr_to: &Path) -> anyhow::Result<Proc> {
        let log = std::fs::File::create(stderr_to)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let child = cmd.spawn().context("spawn")?;
        let pid = child.id().context("child has no pid")?;
        Ok(Proc { child, pid })
    }

    /// Reads stdout until a line starts with `prefix`; returns the rest of that line. The rest of
    /// stdout is drained in the background so the child never blocks on a full pipe.
    pub async fn announced(&mut self, prefix: &str) -> anyhow::Result<String> {
        let out = self.child.stdout.take().context("stdout taken")?;
        let mut lines = BufReader::new(out).lines();
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.trim().strip_prefix(prefix) {
                    return Ok(rest.trim().to_owned());
                }
            }
            bail!("stdout closed before a line starting with {prefix:?}")
        })
        .await
        .context("timed out waiting for the listening line")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(found)
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()
            .await;
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The fixture legacy server over Streamable HTTP, for `--backend http`.
#[derive(Debug)]
pub struct HttpFixture {
    pub proc: Proc,
    pub url: String,
}

impl HttpFixture {
    /// Starts `legacy-server --http 127.0.0.1:0` (with `--event-ids` if `numbered`) and reads
    /// the URL it announces (the first stdout line holding `http://`).
    pub async fn start(exe: &Path, dir: &Path, numbered: bool) -> anyhow::Result<HttpFixture> {
        // Each parked call holds a session and two connections (its POST stream, the GET stream).
        let mut args = vec!["--max-sessions", "25000"];
        if numbered {
            args.push("--event-ids");
        }
        HttpFixture::spawn(exe, &dir.join("fixture.stderr"), &args).await
    }

    /// Starts the fixture as a 2026-07-28 server (`legacy-server --http 127.0.0.1:0 --modern`):
    /// stateless, what the gateway relays to.
    pub async fn start_modern(exe: &Path, dir: &Path) -> anyhow::Result<HttpFixture> {
        HttpFixture::spawn(exe, &dir.join("modern-fixture.stderr"), &["--modern"]).await
    }

    async fn spawn(exe: &Path, stderr: &Path, args: &[&str]) -> anyhow::Result<HttpFixture> {
        let mut cmd = Command::new(exe);
        cmd.args(["legacy-server", "--http", "127.0.0.1:0"])
            .args(["--max-connections", "50000"])
            .args(args);
        let mut proc = Proc::spawn(cmd, stderr)?;
        let out = proc.child.stdout.take().context("stdout taken")?;
        let mut lines = BufReader::new(out).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(at) = line.find("http://") {
                    let url = line[at..].split_whitespace().next().unwrap_or("").to_owned();
                    return Ok(url);
                }
            }
            bail!("the HTTP fixture printed no URL (is `legacy-server --http` available in this build?)")
        })
        .await
        .context("timed out waiting for the HTTP fixture")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(HttpFixture { proc, url })
    }
}

/// The gateway under test.
#[derive(Debug)]
pub struct Gateway {
    pub proc: Proc,
    pub url: String,
}

impl Gateway {
    pub async fn start(
        exe: &Path,
        dir: &Path,
        backend: BackendKind,
        fixture_url: Option<&str>,
        s: &Settings,
    ) -> anyhow::Result<Gateway> {
        let (id, secret) = {
            let (_, secret) = mrtr_gateway::seal::Key::generate("bench")?;
            ("bench", secret)
        };
        let backend_table = match backend {
            BackendKind::Stdio => format!(
                "kind = \"stdio\"\ncommand = {exe:?}\nargs = [\"legacy-server\"]\n",
                exe = exe.display().to_string()
            ),
            BackendKind::Http => format!(
                "kind = \"http\"\nurl = {:?}\nstandalone_stream = {}\n",
                fixture_url.context("the HTTP backend needs the fixture's URL")?,
                s.standalone_stream,
            ),
        };
        let modern_backend = match &s.modern_url {
            // Several backends: each sets its own path.
            Some(url) => format!(
                "path = {LEGACY_PATH:?}\n\n[[backend]]\nname = \"modern\"\npath = {MODERN_PATH:?}\n\
                 kind = \"http\"\nurl = {url:?}\nprotocol = \"2026-07-28\"\n\
                 pool_max = {pool_max}\nreserved_sessions = 1\nprincipal_sessions = {}\n",
                s.pool_max - 1,
                pool_max = s.pool_max,
            ),
            None => String::new(),
        };
        let (name, workers) = match s.worker_threads {
            Some(n) => (format!("gateway-{n}w"), format!("worker_threads = {n}\n")),
            None => ("gateway".to_owned(), String::new()),
        };
        // Anonymous principal, so one client may hold every parked call (its share of the pool
        // raised to all but the one session kept for calls that need no input); limits raised
        // so the pool and the park registry are what the measurement exercises. Every load client
        // connects from 127.0.0.1: no cap per address. Legacy clients' sessions, all of the one
        // principal, are capped far above the harness's count.
        let config = format!(
            r#"[server]
listen = "127.0.0.1:0"
max_connections = 20000
max_connections_per_address = 20000
shutdown_grace = "5s"
{workers}
[principal]
source = "anonymous"

[state]
keys = [{{ id = "{id}", secret = "{secret}" }}]
park_ttl = "10m"

[limits]
max_parked_per_principal = {max_parked}
max_parked_total = {max_parked}
max_sessions_per_principal = 4096
max_sessions_total = 4096
queue_wait = "30s"

[log]
level = "warn"

[[backend]]
name = "fixture"
{backend_table}pool_max = {pool_max}
reserved_sessions = 1
principal_sessions = {principal_sessions}
idle_timeout = "10m"
{modern_backend}"#,
            max_parked = s.max_parked,
            pool_max = s.pool_max,
            principal_sessions = s.pool_max - 1,
        );
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config)?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve").arg("--config").arg(&path);
        let stderr = dir.join(format!("{name}.stderr"));
        let mut proc = Proc::spawn(cmd, &stderr)?;
        let url = proc
            .announced("mrtr-gateway listening on")
            .await
            .with_context(|| format!("gateway did not start; see {}", stderr.display()))?;
        Ok(Gateway { proc, url })
    }

    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        rss_kib(self.proc.pid)
    }

    /// Resident memory of the gateway's direct children (stdio backends), summed.
    pub fn children_rss_kib(&self) -> (usize, u64) {
        children_of(self.proc.pid)
            .into_iter()
            .filter_map(|pid| rss_kib(pid).ok())
            .fold((0, 0), |(n, sum), kib| (n + 1, sum + kib))
    }
}

/// Pids whose parent is `parent`, from `/proc/*/stat`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                // The command name may hold spaces; fields after the closing paren are plain.
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<u32>()
                        .ok()
                })
                == Some(parent)
        })
        .collect()
}

/// A scratch directory for configs and logs of this run.
pub fn scratch() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("mrtr-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// CPU accounting of a set of processes, summed over their threads from
/// `/proc/PID/task/TID/schedstat`: time on a CPU, and time runnable but waiting for one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sched {
    pub run_ns: u64,
    pub wait_ns: u64,
}

impl Sched {
    pub fn of(pids: &[u32]) -> Sched {
        let mut total = Sched::default();
        for pid in pids {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for t in tasks.filter_map(|e| e.ok()) {
                let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
                    continue;
                };
                let mut f = s.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
                total.run_ns += f.next().unwrap_or(0);
                total.wait_ns += f.next().unwrap_or(0);
            }
        }
        total
    }

    pub fn minus(&self, before: &Sched) -> Sched {
        Sched {
            run_ns: self.run_ns.saturating_sub(before.run_ns),
            wait_ns: self.wait_ns.saturating_sub(before.wait_ns),
        }
    }

    pub fn plus(&self, other: &Sched) -> Sched {
        Sched {
            run_ns: self.run_ns + other.run_ns,
            wait_ns: self.wait_ns + other.wait_ns,
        }
    }

    /// What was spent since `before`, per operation, in microseconds: (on CPU, waiting for CPU).
    pub fn per_op_us(&self, before: &Sched, ops: u64) -> (f64, f64) {
        let ops = ops.max(1) as f64;
        (
            self.run_ns.saturating_sub(before.run_ns) as f64 / ops / 1000.0,
            self.wait_ns.saturating_sub(before.wait_ns) as f64 / ops / 1000.0,
        )
    }
}

/// The gateway's backend children, for CPU accounting.
pub fn children(parent: u32) -> Vec<u32> {
    children_of(parent)
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

//! What the SDK interop tests share: the Python venvs (built by `setup-venvs.sh` on first use),
//! child processes that are always killed and reaped, the gateway binary started on a config,
//! and the modern client script run as one principal.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a child may take to announce where it listens.
const ANNOUNCE: Duration = Duration::from_secs(30);
/// How long one modern client run may take; the script gives up on its own well before.
const CLIENT_RUN: Duration = Duration::from_secs(120);

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding `venv-legacy` and `venv-modern`, built once per test binary.
pub fn venvs() -> PathBuf {
    static READY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            let status = Command::new("bash")
                .arg(root().join("tests/interop/setup-venvs.sh"))
                .status()
                .map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("setup-venvs.sh failed: {status}"));
            }
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root().join("target"));
            Ok(target.join("interop"))
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

pub fn legacy_python() -> PathBuf {
    venvs().join("venv-legacy/bin/python")
}

pub fn legacy_server_script() -> PathBuf {
    root().join("tests/interop/legacy_stdio_server.py")
}

/// A child process that is killed and reaped when dropped, so a failed assertion never leaves
/// one behind. SIGKILL, not SIGTERM: none of these children has state worth a clean exit, and
/// a hung uvicorn can ignore SIGTERM.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a child that ran to its end wrote and how it exited.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc {
            name: name.to_owned(),
            child,
        }
    }

    /// Waits for the `... listening on URL` line on the child's (piped) stdout and returns the
    /// URL. The rest of stdout is drained in the background so the child never blocks on it.
    pub fn announced_url(&mut self) -> String {
        match self.announced_url_or_exit() {
            Ok(url) => url,
            Err(status) => panic!("{} exited ({status}) before listening", self.name),
        }
    }

    /// `announced_url`, but a child that exits before it listens (a port taken, say) is its
    /// exit status rather than a panic, for a caller that can try again.
    pub fn announced_url_or_exit(&mut self) -> Result<String, ExitStatus> {
        let stdout = self
            .child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("{}: stdout is not piped", self.name));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout);
            let mut line = String::new();
            while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_owned());
                    break;
                }
                line.clear();
            }
            let _ = std::io::copy(&mut lines, &mut std::io::sink());
        });
        match rx.recv_timeout(ANNOUNCE) {
            Ok(url) => Ok(url),
            // Either stdout closed, so the child is exiting, or the wait ran out: a short wait
            // for an exit status tells which.
            Err(_) => match self.exit_status(Duration::from_secs(5)) {
                Some(status) => Err(status),
                None => panic!("{} did not announce its URL in {ANNOUNCE:?}", self.name),
            },
        }
    }

    /// The child's exit status if it exits within `within`.
    fn exit_status(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for the child to exit and collects its piped stdout and stderr, read
    /// while it runs so a chatty child cannot fill a pipe and stall.
    pub fn finish(mut self, within: Duration) -> Finished {
        let out = drain(self.child.stdout.take());
        let err = drain(self.child.stderr.take());
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                // Dropping self kills and reaps the child.
                panic!("{} did not finish in {within:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        Finished {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        }
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The gateway binary serving `backend` (a `[[backend]]` table in TOML), with principals taken
/// from the `Authorization` header. Returns the process and its endpoint URL.
pub fn start_gateway(backend: &str) -> (Proc, String) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let config = std::env::temp_dir().join(format!("mrtr-interop-{}-{n}.toml", std::process::id()));
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[principal]\nsource = \"authorization\"\n\n{backend}"
    );
    std::fs::write(&config, text).expect("write config");
    let mut gateway = Proc::spawn(
        "gateway",
        Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = gateway.announced_url();
    // Read before the gateway listens; nothing else needs it.
    let _ = std::fs::remove_file(&config);
    (gateway, url)
}

/// Starts the modern client as a principal of its own (`Authorization: Bearer token-TAG`).
pub fn run_client(url: &str, tag: &str, extra: &[&str]) -> Proc {
    Proc::spawn(
        &format!("client {tag}"),
        Command::new(venvs().join("venv-modern/bin/python"))
            .arg(root().join("tests/interop/modern_client.py"))
            .args([url, "--tag", tag, "--bearer", &bearer(tag)])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

/// The Authorization value `run_client` sends for `tag`.
pub fn bearer_header(tag: &str) -> String {
    format!("Bearer {}", bearer(tag))
}

fn bearer(tag: &str) -> String {
    format!("token-{tag}")
}

/// Waits for a client and asserts that every one of its checks passed.
pub fn assert_client_passed(client: Proc, tag: &str) {
    let out = client.finish(CLIENT_RUN);
    assert!(
        out.status.success(),
        "client {tag} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or("")).expect("summary line");
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert!(summary["passed"].as_u64().unwrap_or(0) >= 4, "{summary}");
}

// The modern peer: `modern_server.py`, a PyPI `mcp==2.3.0` server in the 2026-07-28 style, and
// `modern_driver.py`, the client that calls every one of its tools.

pub fn modern_python() -> PathBuf {
    venvs().join("venv-modern/bin/python")
}

pub fn modern_server_script() -> PathBuf {
    root().join("tests/interop/modern_server.py")
}

/// A `--state-key` for modern servers that must accept each other's states (a pool of stdio
/// children, replicas); without one each process refuses the states another sealed.
pub const MODERN_SHARED_STATE_KEY: &str = "interop-modern-shared-state-key-0123456789";

/// Starts the modern server on stateless Streamable HTTP (a port it picks itself and
/// announces) and returns it with its endpoint URL. Dropping the `Proc` kills it (SIGKILL).
pub fn start_modern_server_http() -> (Proc, String) {
    start_modern_server_http_with(&[])
}

/// `start_modern_server_http` with the server's `extra` flags (`--state-key SECRET`).
pub fn start_modern_server_http_with(extra: &[&str]) -> (Proc, String) {
    let mut server = Proc::spawn(
        "modern server (http)",
        Command::new(modern_python())
            .arg(modern_server_script())
            .args(["http", "--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = server.announced_url();
    (server, url)
}

/// The command line that serves the modern server over stdio: the program, then its
/// arguments.
pub fn modern_server_stdio_command() -> Vec<String> {
    modern_server_stdio_command_with(&[])
}

/// `modern_server_stdio_command` with the server's `extra` flags (`--state-key SECRET`).
pub fn modern_server_stdio_command_with(extra: &[&str]) -> Vec<String> {
    let mut command = vec![
        modern_python().display().to_string(),
        modern_server_script().display().to_string(),
        "stdio".to_owned(),
    ];
    command.extend(extra.iter().map(|a| (*a).to_owned()));
    command
}

/// `command = ...` and `args = [...]` of a `[[backend]]` table that runs the modern server
/// over stdio.
pub fn modern_server_stdio_toml() -> String {
    modern_server_stdio_toml_with(&[])
}

/// `modern_server_stdio_toml` with the server's `extra` flags (`--state-key SECRET`).
pub fn modern_server_stdio_toml_with(extra: &[&str]) -> String {
    let command = modern_server_stdio_command_with(extra);
    let args: Vec<String> = command[1..].iter().map(|a| format!("{a:?}")).collect();
    format!("command = {:?}\nargs = [{}]\n", command[0], args.join(", "))
}

/// Starts the driver against a Streamable HTTP endpoint (the modern server's own, or a
/// gateway's), as a principal of its own (`Authorization: Bearer token-TAG`, as `run_client`).
pub fn run_driver(url: &str, tag: &str) -> Proc {
    run_driver_with(url, tag, &[])
}

/// `run_driver` with the driver's `extra` flags (`--expect-authorization VALUE`).
pub fn run_driver_with(url: &str, tag: &str, extra: &[&str]) -> Proc {
    Proc::spawn(
        &format!("driver {tag}"),
        driver(tag)
            .args([url, "--bearer", &bearer(tag)])
            .args(extra),
    )
}

/// Starts the driver with the modern server as its own stdio child, no gateway between.
pub fn run_driver_stdio(tag: &str) -> Proc {
    run_driver_stdio_with(tag, &[])
}

/// `run_driver_stdio` with the driver's `extra` flags.
pub fn run_driver_stdio_with(tag: &str, extra: &[&str]) -> Proc {
    Proc::spawn(
        &format!("driver {tag} (stdio)"),
        // `--stdio` takes the rest of the command line, so it comes last.
        driver(tag)
            .args(extra)
            .arg("--stdio")
            .args(modern_server_stdio_command()),
    )
}

fn driver(tag: &str) -> Command {
    let mut cmd = Command::new(modern_python());
    cmd.arg(root().join("tests/interop/modern_driver.py"))
        .args(["--tag", tag])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for a driver and asserts that every one of its checks passed. The driver prints the
/// same summary line as the modern client, so the same checks apply.
pub fn assert_driver_passed(driver: Proc, tag: &str) {
    assert_client_passed(driver, tag);
}

/// Starts `faulty_relay.py` in front of `upstream`, breaking what `fault` names, and returns it
/// with its endpoint URL.
pub fn start_faulty_relay(upstream: &str, fault: &str) -> (Proc, String) {
    let mut relay = Proc::spawn(
        &format!("faulty relay ({fault})"),
        Command::new(modern_python())
            .arg(root().join("tests/interop/faulty_relay.py"))
            .args([upstream, fault, "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = relay.announced_url();
    (relay, url)
}

/// Waits for a driver that must fail, asserts that it did, and returns the names of the checks
/// that failed.
pub fn driver_failures(driver: Proc, tag: &str) -> Vec<String> {
    let out = driver.finish(CLIENT_RUN);
    assert!(
        !out.status.success(),
        "driver {tag} passed but should not have:\n{}",
        out.stdout
    );
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or("")).expect("summary line");
    assert_eq!(summary["ok"], false, "{summary}");
    summary["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["check"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A loopback port free a moment ago (another process may take it before it is used).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// `/metrics` of the gateway's admin listener on `port`, with a bounded wait.
pub fn scrape(port: u16) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("admin listener");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let req =
        format!("GET /metrics HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text
}

/// The value of the metrics sample `series` (name and labels, as exposed) in `metrics`; 0
/// when it is absent.
pub fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// The FastMCP legacy server on Streamable HTTP on any free port, with the URL it announced.
pub fn start_fastmcp() -> (Proc, String) {
    let mut server = Proc::spawn(
        "FastMCP streamable-http server",
        Command::new(legacy_python())
            .arg(legacy_server_script())
            .args(["streamable-http", "--host", "127.0.0.1", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = server.announced_url();
    (server, url)
}

/// Asserts that the gateway whose admin listener is on `admin` probed each of `found` (a
/// backend and the era it was found in) once, and never found it in the other era.
pub fn assert_each_probed_once(admin: u16, found: &[(&str, &str)]) {
    let metrics = scrape(admin);
    for (backend, era) in found {
        let other = if *era == "legacy" { "modern" } else { "legacy" };
        for (era, want) in [(*era, 1), (other, 0)] {
            let series = format!(
                "mrtr_backend_era_probes_total{{backend=\"{backend}\",era=\"{era}\"}} {want}"
            );
            assert!(
                metrics.lines().any(|l| l == series),
                "{series} in:\n{metrics}"
            );
        }
    }
}

// The legacy client: `legacy_driver.py`, a PyPI `mcp==1.30.0` `ClientSession` that calls every
// tool of FastMCP (`legacy_stdio_server.py`) or of the built-in fixture server.

/// Starts the legacy driver against `url` (Streamable HTTP, or HTTP+SSE with `--sse` in
/// `extra`) as a principal of its own (`Authorization: Bearer token-TAG`, as `run_client`).
/// `extra` must name the server whose tools it drives (`--server fastmcp|fixture`) and may add
/// `--sse` and `--skip NAME`.
pub fn run_legacy_driver(url: &str, tag: &str, extra: &[&str]) -> Proc {
    Proc::spawn(
        &format!("legacy driver {tag}"),
        Command::new(legacy_python())
            .arg(root().join("tests/interop/legacy_driver.py"))
            .args([url, "--tag", tag, "--bearer", &bearer(tag)])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

/// Waits for a legacy driver, asserts that every one of its checks passed, and returns its
/// summary (the checks passed and skipped, the server's `session_id`, the protocol version).
pub fn assert_legacy_driver_passed(driver: Proc, tag: &str) -> serde_json::Value {
    let out = driver.finish(CLIENT_RUN);
    assert!(
        out.status.success(),
        "legacy driver {tag} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    let summary: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or("")).expect("summary line");
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["failed"], serde_json::json!([]), "{summary}");
    let passed = summary["passed"].as_array().map_or(0, Vec::len);
    assert!(passed >= 4, "{summary}");
    summary
}

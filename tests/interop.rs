//! Interop with real third-party SDKs: a PyPI `mcp==1.30.0` FastMCP stdio server behind the
//! gateway binary, driven by PyPI `mcp==2.3.0` `Client(mode="2026-07-28")`. The venvs are built
//! by `tests/interop/setup-venvs.sh` on first use.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn venvs() -> PathBuf {
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

/// The gateway binary serving the FastMCP server; killed on drop.
struct Gateway {
    child: Child,
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_gateway(venvs: &Path) -> Gateway {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let config = std::env::temp_dir().join(format!("mrtr-interop-{}-{n}.toml", std::process::id()));
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[principal]\nsource = \"authorization\"\n\n[[backend]]\nname = \"fastmcp\"\nkind = \"stdio\"\ncommand = {py:?}\nargs = [{server:?}, \"stdio\"]\npool_max = 8\n",
        py = venvs.join("venv-legacy/bin/python").display().to_string(),
        server = root()
            .join("tests/interop/legacy_stdio_server.py")
            .display()
            .to_string(),
    );
    std::fs::write(&config, text).expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn gateway");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read listening line");
    let url = line
        .split("listening on ")
        .nth(1)
        .map(|u| u.trim().to_owned())
        .unwrap_or_else(|| panic!("no listening line: {line:?}"));
    Gateway { child, url }
}

/// Starts the modern client as a principal of its own.
fn run_client(venvs: &Path, url: &str, tag: &str) -> std::process::Child {
    Command::new(venvs.join("venv-modern/bin/python"))
        .arg(root().join("tests/interop/modern_client.py"))
        .args([url, "--tag", tag, "--bearer", &format!("token-{tag}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn modern client")
}

fn finish(mut child: Child, tag: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("client {tag} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client {tag} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("summary line");
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert!(summary["passed"].as_u64().unwrap_or(0) >= 4, "{summary}");
}

#[test]
fn fastmcp_stdio_server_serves_modern_client_through_gateway() {
    let venvs = venvs();
    let gw = start_gateway(&venvs);
    finish(run_client(&venvs, &gw.url, "alice"), "alice");
}

#[test]
fn two_principals_at_once_each_get_their_own_answers() {
    let venvs = venvs();
    let gw = start_gateway(&venvs);
    let alice = run_client(&venvs, &gw.url, "alice");
    let bob = run_client(&venvs, &gw.url, "bob");
    finish(alice, "alice");
    finish(bob, "bob");
}

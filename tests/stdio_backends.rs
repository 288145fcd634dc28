//! End to end over misbehaving stdio backends: a 2026-07-28 client over loopback, the gateway,
//! and a small python3 MCP server (written by the test into a scratch directory) that does one
//! thing a real server might: log bytes that are not UTF-8, ask for roots outside any call, or
//! answer strictly one line at a time with large messages. Each test drives one behaviour.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A legacy stdio MCP server, strictly synchronous: it reads one line, handles it, writes the
/// answer, and only then reads the next. It appends every message it receives to `$LOG`.
///
/// Tools: `echo` answers how many bytes its arguments are; `big` answers 300 KB of text after
/// `delay_ms`; `hang` never answers, nor reads on; `scalar` answers with a result that is a
/// number.
///
/// Flags: `stderr` logs bytes that are not UTF-8 and a 2 MB line without a newline at start,
/// then a line for every message; `roots=N` asks for roots N times once initialized; `pid`
/// writes its process id to `$PIDFILE` at start.
const SERVER: &str = r#"
import json, os, sys, time

flags = sys.argv[1:]
roots = next((int(f.split("=")[1]) for f in flags if f.startswith("roots=")), 0)
log = open(os.environ["LOG"], "a")

def out(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

def err(data):
    sys.stderr.buffer.write(data)
    sys.stderr.buffer.flush()

def text(id, text):
    out({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})

if "pid" in flags:
    with open(os.environ["PIDFILE"], "w") as f:
        f.write(str(os.getpid()))

if "stderr" in flags:
    err(b"starting \xff\xfe not utf-8\n")
    err(b"x" * 2_000_000)
    err(b"\n")

while True:
    line = sys.stdin.readline()
    if not line:
        break
    msg = json.loads(line)
    log.write(json.dumps(msg) + "\n")
    log.flush()
    method, id = msg.get("method"), msg.get("id")
    if "stderr" in flags:
        err(b"handling \xff " + str(method).encode() + b"\n")
    if method == "initialize":
        out({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "py", "version": "0"}}})
    elif method == "notifications/initialized":
        for i in range(roots):
            out({"jsonrpc": "2.0", "id": f"roots-{i}", "method": "roots/list"})
    elif method == "tools/list":
        schema = {"type": "object"}
        out({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "echo", "inputSchema": schema},
            {"name": "big", "inputSchema": schema}]}})
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        if msg["params"]["name"] == "hang":
            time.sleep(3600)
        if msg["params"]["name"] == "scalar":
            out({"jsonrpc": "2.0", "id": id, "result": 5})
            continue
        if msg["params"]["name"] == "big":
            time.sleep(args.get("delay_ms", 0) / 1000)
            text(id, "y" * 300_000)
        else:
            text(id, json.dumps({"bytes": len(json.dumps(args))}))
    elif method is not None and id is not None:
        out({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no " + method}})
"#;

/// A gateway in front of [`SERVER`] run with `flags`; `extra` goes before the backend table.
async fn gateway(flags: &[&str], extra: &str) -> (Gateway, PathBuf) {
    let dir = scratch("stdio");
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).expect("write the server");
    let log = dir.join("backend.log");
    let mut args = vec![script.display().to_string()];
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{extra}\n[[backend]]\nname = \"py\"\ncommand = \"python3\"\nargs = {args:?}\nenv = {{ LOG = {log:?} }}\npool_max = 4\n",
        log = log.display().to_string(),
    );
    (Gateway::from_config(&text, log.clone()).await, log)
}

/// Every message the server received.
fn received(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test]
async fn a_backend_logging_bytes_that_are_not_utf8_keeps_its_stderr_and_lives() {
    let (gw, _log) = gateway(&["stderr"], "").await;
    let c = gw.client();
    for n in 0..3 {
        let reply = c.call_tool("echo", json!({"n": n}), &json!({})).await;
        assert_eq!(reply.tool_json(), json!({"bytes": 8}), "call {n}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn roots_requests_outside_any_call_beyond_the_limit_are_refused_at_once() {
    let (gw, log) = gateway(
        &["roots=5"],
        "[limits]\nmax_input_requests = 2\nheld_roots_wait = \"60s\"\n",
    )
    .await;
    let c = gw.client();
    let caps = json!({"roots": {}});
    let tools = c.send(&c.body("tools/list", json!({}), &caps)).await;
    assert_eq!(tools.result()["tools"][0]["name"], "echo");
    // Two are held for a call; the other three are answered at once, long before the wait ends.
    let refused = || -> Vec<Value> {
        let mut ids: Vec<Value> = received(&log)
            .into_iter()
            .filter(|m| m.get("error").is_some())
            .map(|m| m["id"].clone())
            .collect();
        ids.sort_by_key(|id| id.to_string());
        ids
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while refused().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        refused(),
        [json!("roots-2"), json!("roots-3"), json!("roots-4")]
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_large_answer_and_a_large_request_at_once_do_not_deadlock_a_synchronous_backend() {
    let (gw, _log) = gateway(&[], "[limits]\nrequest_timeout = \"10s\"\n").await;
    let c = gw.client();
    let list =
        |c: Client| async move { c.send(&c.body("tools/list", json!({}), &json!({}))).await };
    // The session is up before the two calls, so they share it.
    assert_eq!(list(c.clone()).await.result()["tools"][0]["name"], "echo");
    let none = json!({});
    let calls = async {
        // The backend works on the large answer while the large request is written: it writes
        // its answer before it reads on, and the request fills the pipe meanwhile.
        let big = c.call_tool("big", json!({"delay_ms": 300}), &none);
        let large = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let args = json!({"text": "z".repeat(300_000)});
            c.call_tool("echo", args, &none).await
        };
        tokio::join!(big, large)
    };
    let (big, large) = tokio::time::timeout(Duration::from_secs(30), calls)
        .await
        .expect("neither call hangs");
    let text = big.result()["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text.len(), 300_000);
    assert_eq!(large.tool_json(), json!({"bytes": 300_012}));
    assert_eq!(list(c.clone()).await.result()["tools"][1]["name"], "big");
    gw.stop().await;
}

#[tokio::test]
async fn a_backend_that_cannot_start_is_named_without_its_command_line() {
    let dir = scratch("stdio-missing");
    let text = "[server]\nlisten = \"127.0.0.1:0\"\n[[backend]]\nname = \"weather\"\n\
                command = \"/nonexistent/weather-server\"\nargs = [\"--key=abc\"]\n";
    let gw = Gateway::from_config(text, dir.join("backend.log")).await;
    let reply = gw.client().call_tool("echo", json!({}), &json!({})).await;
    let message = reply.error_message().to_owned();
    assert!(
        message.contains("`weather` could not be started"),
        "{message}"
    );
    assert!(
        !message.contains("/nonexistent") && !message.contains("--key"),
        "the command line stays in the gateway's log: {message}"
    );
    gw.stop().await;
}

/// Whether process `pid` still runs (a zombie does not: it has ended, and waits to be reaped).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// A server started through a wrapper (`sh -c`, as `npx` or `uv run` do it) is the wrapper's
/// child, not the gateway's. When its session ends (here its call timed out, and it neither
/// answers nor reads on), the server goes with the wrapper instead of living on as an orphan.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_backend_started_through_a_wrapper_leaves_no_process_behind() {
    let dir = scratch("stdio-wrapped");
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).expect("write the server");
    let log = dir.join("backend.log");
    let pidfile = dir.join("server.pid");
    // Not `exec`: the shell stays, and the server is its child.
    let line = format!("python3 {} pid; echo ended >&2", script.display());
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[limits]\nrequest_timeout = \"1s\"\n[[backend]]\nname = \"wrapped\"\ncommand = \"/bin/sh\"\nargs = [\"-c\", {line:?}]\nenv = {{ LOG = {log:?}, PIDFILE = {pidfile:?} }}\n",
        log = log.display().to_string(),
        pidfile = pidfile.display().to_string(),
    );
    let gw = Gateway::from_config(&text, log).await;
    let reply = gw.client().call_tool("hang", json!({}), &json!({})).await;
    assert!(
        reply.error_message().contains("wrapped"),
        "the call times out: {:#}",
        reply.body
    );
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("the server wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(running(pid), "the server runs while its session does");
    // The session closes its stdin, waits its grace (2 s), then kills.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while running(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !running(pid),
        "the wrapped server {pid} outlived its session"
    );
    gw.stop().await;
}

/// A result that is not an object cannot become a 2026-07-28 result: the client is told so,
/// with the backend's name.
#[tokio::test]
async fn a_result_that_is_not_an_object_fails_the_call_naming_the_backend() {
    let (gw, _log) = gateway(&[], "").await;
    let reply = gw.client().call_tool("scalar", json!({}), &json!({})).await;
    assert_eq!(reply.error_code(), -31001, "{:#}", reply.body);
    assert_eq!(
        reply.error_message(),
        "backend `py` failed: its result is not a JSON object"
    );
    gw.stop().await;
}

//! A backend swapped from legacy to 2026-07-28 under a running gateway. One `auto` HTTP
//! backend on a fixed port: first the legacy FastMCP server (PyPI `mcp`, Streamable HTTP) is
//! there, found legacy and bridged for a 2026-07-28 client; then it is killed and the modern
//! server (`modern_server.py`, PyPI `mcp==2.3.0`) started on the same port. The legacy session
//! the gateway held is lost with the old process, so the gateway probes the backend again,
//! finds it modern (both counted), and relays to it: the modern driver's every tool works.
//! Here the new server keeps sessions for legacy clients, as the SDK does by default, so it
//! answers the old session 404; `interop_era_swap.rs` swaps in a stateless one, which answers
//! it as if it knew it. The port is fixed, so each start is tried again while it is taken.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    Proc, assert_client_passed, assert_driver_passed, bearer_header, free_port, legacy_python,
    legacy_server_script, modern_python, modern_server_script, run_client, run_driver, sample,
    scrape, start_gateway,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How many times a server is started again when its port was taken meanwhile.
const PORT_TRIES: usize = 5;
/// How many calls the gateway may take, after the swap, to find the new server.
const CALLS_TO_FIND_MODERN: usize = 20;

/// The swap as a dual-era server built with the SDK's defaults does it: the new process
/// answers the old legacy session's requests 404 ("Session not found"), so the session is lost.
#[test]
fn a_backend_swapped_to_a_dual_era_server_is_probed_again_and_relayed() {
    swap_under_a_running_gateway(&["--stateful"]);
}

/// Legacy first, then the modern server (with `modern_flags`) on the same port under the
/// same running gateway.
fn swap_under_a_running_gateway(modern_flags: &[&str]) {
    let (legacy, port) = start_legacy_on_a_free_port();
    let admin = free_port();
    let (_gateway, url) = start_gateway(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[backend]]\nname = \"swapped\"\nkind = \"http\"\n\
         url = \"http://127.0.0.1:{port}/mcp\"\nprotocol = \"auto\"\n"
    ));

    // Legacy: found so, and bridged (the client checks every tool of the legacy server).
    assert_client_passed(run_client(&url, "alice", &[]), "alice");
    let before = scrape(admin);
    assert_eq!(sample(&before, &probes("legacy")), 1.0, "{before}");
    assert_eq!(sample(&before, &probes("modern")), 0.0, "{before}");

    // The swap: same port, now a 2026-07-28 server.
    drop(legacy);
    let mut args = modern_server_args(port);
    args.extend(modern_flags.iter().map(|f| (*f).to_owned()));
    let _modern = start_on_port(port, "modern server", &args)
        .unwrap_or_else(|taken| panic!("port {port} stayed taken: {taken}"));

    // The principal whose legacy session the old process held keeps calling; within a
    // bounded number of calls the gateway must notice, probe again and find the new server.
    let mut failed = Vec::new();
    let mut found = None;
    for n in 1..=CALLS_TO_FIND_MODERN {
        if !echo_through(&url, "alice", n) {
            failed.push(n);
        } else if sample(&scrape(admin), &probes("modern")) >= 1.0 {
            found = Some(n);
            break;
        }
    }
    let after = scrape(admin);
    assert!(
        found.is_some(),
        "not found modern in {CALLS_TO_FIND_MODERN} calls (failed: {failed:?}):\n{after}"
    );
    eprintln!("found modern at call {found:?}; calls that failed on the way: {failed:?}");
    assert_eq!(sample(&after, &probes("modern")), 1.0, "{after}");
    let reprobes = "mrtr_backend_era_reprobes_total{backend=\"swapped\"}";
    assert!(sample(&after, reprobes) >= 1.0, "{reprobes} in:\n{after}");

    // Every MRTR tool of the modern server, relayed.
    assert_driver_passed(run_driver(&url, "bob"), "bob");
}

/// The series counting the probes of the backend that found `era`.
fn probes(era: &str) -> String {
    format!("mrtr_backend_era_probes_total{{backend=\"swapped\",era=\"{era}\"}}")
}

/// The legacy FastMCP server on Streamable HTTP on a port that was free, and that port.
fn start_legacy_on_a_free_port() -> (Proc, u16) {
    for _ in 0..PORT_TRIES {
        let port = free_port();
        let args = [
            legacy_server_script().display().to_string(),
            "streamable-http".to_owned(),
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            port.to_string(),
        ];
        let mut command = Command::new(legacy_python());
        command.args(args);
        match start_once("legacy server", &mut command) {
            Ok(server) => return (server, port),
            Err(taken) => eprintln!("port {port} was taken, trying another: {taken}"),
        }
    }
    panic!("no free port for the legacy server in {PORT_TRIES} tries");
}

fn modern_server_args(port: u16) -> Vec<String> {
    vec![
        modern_server_script().display().to_string(),
        "http".to_owned(),
        "--host".to_owned(),
        "127.0.0.1".to_owned(),
        "--port".to_owned(),
        port.to_string(),
    ]
}

/// Starts the modern server on `port`, trying again while the port is still taken (the old
/// process's socket closing, or another process that took it meanwhile).
fn start_on_port(port: u16, name: &str, args: &[String]) -> Result<Proc, String> {
    let mut last = String::new();
    for _ in 0..PORT_TRIES {
        let mut command = Command::new(modern_python());
        command.args(args);
        match start_once(name, &mut command) {
            Ok(server) => return Ok(server),
            Err(taken) => last = taken,
        }
        eprintln!("port {port} is still taken, trying again");
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(last)
}

/// Starts a server that announces its URL; `Err` with its stderr if it exited because its
/// address was in use. Any other early exit fails the test.
fn start_once(name: &str, command: &mut Command) -> Result<Proc, String> {
    let errors = stderr_file(name);
    let file = std::fs::File::create(&errors).expect("stderr file");
    let mut server = Proc::spawn(name, command.stdout(Stdio::piped()).stderr(file));
    let started = server.announced_url_or_exit();
    let text = std::fs::read_to_string(&errors).unwrap_or_default();
    let _ = std::fs::remove_file(&errors);
    match started {
        Ok(_) => Ok(server),
        Err(_) if text.contains("Address already in use") => Err(text),
        Err(status) => panic!("{name} exited ({status}) before listening:\n{text}"),
    }
}

fn stderr_file(name: &str) -> PathBuf {
    let slug: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    std::env::temp_dir().join(format!("mrtr-era-swap-{}-{slug}.err", std::process::id()))
}

/// Calls the modern server's `echo` through the gateway as `tag`; true if its text came back.
/// A call that the gateway fails while it finds the new server is false, not a panic.
fn echo_through(url: &str, tag: &str, n: usize) -> bool {
    let text = format!("swapped-{n}");
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": {
            "name": "echo", "arguments": {"text": text},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "era-swap", "version": "0"},
            },
        },
    })
    .to_string();
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    let mut stream = TcpStream::connect(authority).expect("gateway listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let request = format!(
        "POST /{path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nauthorization: {}\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: echo\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        bearer_header(tag),
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("request");
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .unwrap_or_else(|e| panic!("call {n}: no complete answer ({e}):\n{reply}"));
    let echoed = reply.contains(&format!("\"text\":\"{text}\"")) && !reply.contains("\"error\"");
    if !echoed {
        eprintln!("call {n} after the swap:\n{reply}");
    }
    // Room for the gateway to settle what the call showed before the next one.
    std::thread::sleep(Duration::from_millis(100));
    echoed
}

//! The gateway in front of a real 2026-07-28 server run over stdio: `tests/interop/
//! modern_server.py stdio` (PyPI `mcp==2.3.0`) as a `kind = "stdio"` backend, a pool of two
//! children shared by every principal. What `interop_stdio_relay.rs` leaves out: the backend's
//! own settings for it (`children`, `probe_timeout`), no principal's credential reaching a
//! child, and a client that closes its stream during a call making the child that runs it
//! receive `notifications/cancelled` for exactly that request.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    assert_driver_passed, bearer_header, modern_server_stdio_toml, modern_server_stdio_toml_with,
    run_driver_with, start_gateway,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a bounded wait in these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// The `[[backend]]` table of the modern server over stdio (`server`: its `command` and
/// `args`), in era `protocol`, with two children.
fn modern_stdio_backend(protocol: &str, server: &str) -> String {
    format!(
        "[[backend]]\nname = \"modern\"\nkind = \"stdio\"\n{server}\
         protocol = \"{protocol}\"\nchildren = 2\nprobe_timeout = \"20s\"\n"
    )
}

/// `auto` with its probe's own timeout: found modern, and relayed for two principals at once,
/// each checking every tool. Each sends its credential, and the server must see none: stdio
/// has no place for one, and the gateway must not invent one.
#[test]
fn two_principals_share_a_probed_stdio_backend_and_neither_credential_reaches_it() {
    let (_gateway, url) = start_gateway(&modern_stdio_backend("auto", &modern_server_stdio_toml()));
    let flags = ["--server-over-stdio", "--expect-authorization", "<none>"];
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_driver_with(&url, tag, &flags)))
        .collect();
    for (tag, driver) in drivers {
        assert_driver_passed(driver, tag);
    }
}

/// A client starts a `slow` call on a modern stdio backend, sees its first progress
/// notification, and closes its stream: the child running the call must receive
/// `notifications/cancelled` naming the id under which it got that call (the server's
/// `--cancel-log` shows both), and stop the call.
#[test]
fn a_closed_stream_cancels_the_call_on_its_stdio_child() {
    let dir = std::env::temp_dir().join(format!("mrtr-cancel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let log = dir.join("cancel.log");
    let _ = std::fs::remove_file(&log);
    let server = modern_server_stdio_toml_with(&["--cancel-log", &log.display().to_string()]);
    let (_gateway, url) = start_gateway(&modern_stdio_backend("2026-07-28", &server));

    let key = "closed-stream";
    let stream = start_slow_call(&url, key);
    drop(stream);

    let id = wait_for_line(&log, &format!("started {key} "))
        .trim_start_matches(&format!("started {key} "))
        .to_owned();
    wait_for_line(&log, &format!("notified {id}"));
    wait_for_line(&log, &format!("cancelled {key}"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Posts a `tools/call` of `slow` (60 s, far beyond the test) with a progress token and
/// returns the open connection once its first progress notification arrived on the stream.
fn start_slow_call(url: &str, key: &str) -> BufReader<TcpStream> {
    let (authority, path) = split_url(url);
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {
            "name": "slow", "arguments": {"key": key, "seconds": 60},
            "_meta": {
                "progressToken": "slow-progress",
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "cancel-test", "version": "0"},
            },
        },
    })
    .to_string();
    let mut stream = TcpStream::connect(&authority).expect("gateway listens");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nauthorization: {}\r\n\
         mcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: slow\r\n\
         content-length: {}\r\n\r\n{body}",
        bearer_header("erin"),
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("request");
    let mut reader = BufReader::new(stream);
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => panic!("the gateway ended the stream before any progress:\n{seen}"),
            Ok(_) if line.contains("notifications/progress") => return reader,
            Ok(_) => seen.push_str(&line),
            Err(e) => panic!("no progress notification within {PATIENCE:?} ({e}):\n{seen}"),
        }
    }
}

/// The first line of the file at `path` that starts with `prefix`, waiting for it (bounded).
fn wait_for_line(path: &Path, prefix: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.starts_with(prefix)) {
            return line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no line starting with {prefix:?} in {} within {PATIENCE:?}:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `host:port` and the path of an `http://` URL.
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    (authority.to_owned(), format!("/{path}"))
}

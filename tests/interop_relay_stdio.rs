//! The gateway in front of a real 2026-07-28 server run over stdio: `tests/interop/
//! modern_server.py stdio` (PyPI `mcp==2.3.0`) as a `kind = "stdio"` backend, a pool of two
//! children shared by every principal, driven through the gateway by `tests/interop/
//! modern_driver.py` (`Client(mode="2026-07-28")`). Every tool, the prompt and the resource
//! template must return what the driver's callbacks answered. The server runs without
//! `--state-key`, so each child refuses a state another child sealed: a retry only works if
//! the gateway sends it back to the child that minted its state. With `protocol = "auto"`, a
//! legacy FastMCP stdio server and the modern one side by side are each found in their own
//! era. A client that closes its stream during a call makes the child that runs it receive
//! `notifications/cancelled` for exactly that request.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    assert_client_passed, assert_driver_passed, bearer_header, free_port, legacy_python,
    legacy_server_script, modern_server_stdio_toml, modern_server_stdio_toml_with, run_client,
    run_driver_with, scrape, start_gateway,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a bounded wait in these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// The `[[backend]]` table of the modern server over stdio, in era `protocol`, with two
/// children.
fn modern_stdio_backend(name: &str, protocol: &str, server: &str) -> String {
    format!(
        "[[backend]]\nname = \"{name}\"\npath = \"/{name}\"\nkind = \"stdio\"\n{server}\
         protocol = \"{protocol}\"\nchildren = 2\n"
    )
}

/// The gateway in front of the modern stdio server with `protocol`; two drivers at once, as
/// two principals, each checking every tool. The server must see no credential: stdio has no
/// place for one. Their requests share the two children, and a log message names no request,
/// so one that two requests on its child asked for reaches neither (`--logs-may-drop`); the
/// side-by-side test below, with one driver, expects every log.
fn two_drivers_through_the_gateway(protocol: &str) {
    let backend = modern_stdio_backend("modern", protocol, &modern_server_stdio_toml());
    let (_gateway, url) = start_gateway(&backend);
    let flags = [
        "--server-stdio",
        "--logs-may-drop",
        "--expect-authorization",
        "<none>",
    ];
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_driver_with(&url, tag, &flags)))
        .collect();
    for (tag, driver) in drivers {
        assert_driver_passed(driver, tag);
    }
}

#[test]
fn a_modern_stdio_server_set_to_2026_is_relayed_for_two_principals_at_once() {
    two_drivers_through_the_gateway("2026-07-28");
}

#[test]
fn a_modern_stdio_server_left_on_auto_is_found_and_relayed() {
    two_drivers_through_the_gateway("auto");
}

/// A legacy FastMCP stdio server and the modern stdio server behind one gateway, both on
/// `auto` (one of them by default): the probe finds each one's era (counted per backend), the
/// legacy one is bridged for the modern client and the modern one relayed for the driver.
#[test]
fn auto_finds_a_legacy_and_a_modern_stdio_server_side_by_side() {
    let admin = free_port();
    let legacy = format!(
        "[[backend]]\nname = \"old\"\npath = \"/old\"\nkind = \"stdio\"\ncommand = {py:?}\n\
         args = [{script:?}, \"stdio\"]\npool_max = 8\nprobe_timeout = \"20s\"\n",
        py = legacy_python().display().to_string(),
        script = legacy_server_script().display().to_string(),
    );
    let modern = modern_stdio_backend("new", "auto", &modern_server_stdio_toml());
    let (_gateway, url) = start_gateway(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n{legacy}{modern}"
    ));
    let base = base_url(&url);
    let client = run_client(&format!("{base}/old"), "carol", &[]);
    let flags = ["--server-stdio"];
    let driver = run_driver_with(&format!("{base}/new"), "dave", &flags);
    assert_client_passed(client, "carol");
    assert_driver_passed(driver, "dave");
    let metrics = scrape(admin);
    for (backend, era, want) in [
        ("old", "legacy", 1),
        ("old", "modern", 0),
        ("new", "modern", 1),
        ("new", "legacy", 0),
    ] {
        let series =
            format!("mrtr_backend_era_probes_total{{backend=\"{backend}\",era=\"{era}\"}} {want}");
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in:\n{metrics}"
        );
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
    let (_gateway, url) = start_gateway(&modern_stdio_backend("modern", "2026-07-28", &server));

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

/// `http://host:port` of the gateway's first endpoint URL.
fn base_url(url: &str) -> String {
    format!("http://{}", split_url(url).0)
}

//! A backend upgraded in place under a running gateway: the FastMCP legacy server (PyPI `mcp`
//! 1.x) on a port, behind the gateway on `protocol = "auto"`, is stopped and the 2026-07-28
//! server (PyPI `mcp==2.3.0`, dual-era: it still answers `initialize`) started on the same
//! port. The new server is stateless and serves the gateway's old legacy sessions too, so
//! nothing fails: what tells the gateway is the sessions' standalone streams breaking when the
//! old server went away. It probes the backend again, finds 2026-07-28 and relays to it, and
//! every tool works through the relay. Requests keep being answered across the swap.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    Proc, assert_client_passed, assert_driver_passed, free_port, modern_python,
    modern_server_script, run_client, run_driver, sample, scrape, start_fastmcp, start_gateway,
};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the swap may take to be found: a few calls, each bounded by the gateway's limits.
const FOUND_WITHIN: Duration = Duration::from_secs(60);

#[test]
fn a_backend_swapped_from_legacy_to_2026_is_probed_again_and_relayed_to() {
    let (legacy, backend_url) = start_fastmcp();
    let port = backend_url
        .split(':')
        .nth(2)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse::<u16>().ok())
        .expect("a port in the announced URL");
    let admin = free_port();
    let (_gateway, url) = start_gateway(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[backend]]\nname = \"swapped\"\nkind = \"http\"\nurl = \"{backend_url}\"\n"
    ));
    assert_client_passed(run_client(&url, "before", &[]), "before");
    assert_eq!(probes(admin, "legacy"), 1.0, "found legacy first");

    drop(legacy);
    let _modern = start_modern_on(port);
    // Requests are answered across the swap (on a new legacy session to the dual-era server
    // at first), until the gateway has probed the backend again and found it 2026-07-28.
    let deadline = Instant::now() + FOUND_WITHIN;
    while probes(admin, "modern") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "never probed again and found modern"
        );
        let (status, body) = tools_list(&url);
        assert!(
            status == 200 || body.contains("-31001"),
            "a request across the swap: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(reprobes(admin) >= 1.0, "the legacy verdict was forgotten");
    assert_driver_passed(run_driver(&url, "after"), "after");
    assert_eq!(probes(admin, "modern"), 1.0, "found modern once, and kept");
}

/// The modern server on `port`, the one the legacy server had: retried a few times, as the
/// port may not be free again at once.
fn start_modern_on(port: u16) -> Proc {
    for attempt in 0.. {
        let mut server = Proc::spawn(
            "modern streamable-http server",
            Command::new(modern_python())
                .arg(modern_server_script())
                .args(["http", "--host", "127.0.0.1", "--port", &port.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        );
        let announced =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.announced_url()));
        match announced {
            Ok(_) => return server,
            Err(_) if attempt < 10 => std::thread::sleep(Duration::from_millis(500)),
            Err(e) => std::panic::resume_unwind(e),
        }
    }
    unreachable!()
}

/// A `tools/list` to the gateway, as a 2026-07-28 client sends it: the status and the body.
fn tools_list(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/list\r\nauthorization: Bearer token-before\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let text = exchange(authority, &req);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn exchange(authority: &str, req: &str) -> String {
    let mut s = std::net::TcpStream::connect(authority).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    s.write_all(req.as_bytes()).expect("request");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

fn probes(admin: u16, era: &str) -> f64 {
    let series = format!("mrtr_backend_era_probes_total{{backend=\"swapped\",era=\"{era}\"}}");
    sample(&scrape(admin), &series)
}

fn reprobes(admin: u16) -> f64 {
    let series = "mrtr_backend_era_reprobes_total{backend=\"swapped\"}";
    sample(&scrape(admin), series)
}

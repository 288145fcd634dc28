//! The legacy driver (`tests/interop/legacy_driver.py`, a PyPI `mcp==1.30.0` `ClientSession`)
//! against the real servers directly, nothing between: FastMCP and the built-in fixture server,
//! each over Streamable HTTP and over 2024-11-05 HTTP+SSE. Every check must pass here, so when
//! the same driver fails through the gateway's legacy face, the gateway is what differs.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    Proc, assert_legacy_driver_passed, legacy_python, legacy_server_script, run_legacy_driver,
};
use std::process::{Command, Stdio};

/// The only check FastMCP cannot have: it does not declare `logging`.
const FASTMCP_SKIPS: [&str; 1] = ["logging/setLevel"];

/// FastMCP over HTTP+SSE (the harness's `start_fastmcp` serves Streamable HTTP).
fn start_fastmcp_sse() -> (Proc, String) {
    let mut server = Proc::spawn(
        "FastMCP sse server",
        Command::new(legacy_python())
            .arg(legacy_server_script())
            .args(["sse", "--host", "127.0.0.1", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = server.announced_url();
    (server, url)
}

/// The fixture server on `transport` (`--http` or `--sse`) on any free port, with the URL it
/// announced.
fn start_fixture(transport: &str) -> (Proc, String) {
    let mut server = Proc::spawn(
        &format!("fixture server ({transport})"),
        Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["legacy-server", transport, "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = server.announced_url();
    (server, url)
}

/// Runs the driver against `url` and returns its summary once every check passed.
fn drive(url: &str, tag: &str, extra: &[&str]) -> serde_json::Value {
    assert_legacy_driver_passed(run_legacy_driver(url, tag, extra), tag)
}

fn skipped(summary: &serde_json::Value) -> Vec<&str> {
    summary["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .filter_map(|s| s["check"].as_str())
        .collect()
}

#[test]
fn legacy_driver_passes_against_fastmcp_over_streamable_http() {
    let (_server, url) = harness::start_fastmcp();
    // Two at once: each driver's callbacks answer differently, so a request handed to the
    // other session shows as a wrong result.
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_legacy_driver(&url, tag, &["--server", "fastmcp"])))
        .collect();
    let mut sessions = Vec::new();
    for (tag, driver) in drivers {
        let summary = assert_legacy_driver_passed(driver, tag);
        assert_eq!(skipped(&summary), FASTMCP_SKIPS, "{summary}");
        let session = summary["session_id"].as_str().expect("Mcp-Session-Id");
        assert!(!session.is_empty(), "{summary}");
        sessions.push(session.to_owned());
    }
    assert_ne!(sessions[0], sessions[1]);
}

#[test]
fn legacy_driver_passes_against_fastmcp_over_sse() {
    let (_server, url) = start_fastmcp_sse();
    let summary = drive(&url, "carol", &["--server", "fastmcp", "--sse"]);
    assert_eq!(skipped(&summary), FASTMCP_SKIPS, "{summary}");
}

#[test]
fn legacy_driver_passes_against_the_fixture_over_streamable_http() {
    let (_server, url) = start_fixture("--http");
    let summary = drive(&url, "dave", &["--server", "fixture"]);
    assert_eq!(skipped(&summary), Vec::<&str>::new(), "{summary}");
    assert!(
        summary["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{summary}"
    );
}

#[test]
fn legacy_driver_passes_against_the_fixture_over_sse() {
    let (_server, url) = start_fixture("--sse");
    let summary = drive(&url, "erin", &["--server", "fixture", "--sse"]);
    assert_eq!(skipped(&summary), Vec::<&str>::new(), "{summary}");
}

//! 2024-11-05 HTTP+SSE clients through the gateway's HTTP+SSE face, with a real third-party SDK:
//! the PyPI `mcp==1.30.0` `sse_client` and `ClientSession` (`tests/interop/legacy_driver.py
//! --sse`) in front of a FastMCP server of the same release over Streamable HTTP, and of the
//! built-in fixture server, FastMCP over stdio, and the 2026-07-28 `mcp==2.3.0` server (the
//! reverse bridge) over HTTP and stdio. Every tool must return what the client's callbacks answered
//! (elicitation accepted, declined and cancelled, sampling, roots, calls of several rounds), two
//! principals at once each on their own stream, and 2026-07-28 clients on the backend's own
//! path at the same time.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    assert_client_passed, assert_legacy_driver_passed, legacy_python, legacy_server_script,
    modern_server_stdio_toml, run_client, run_legacy_driver, start_fastmcp, start_gateway,
    start_modern_server_http,
};

/// FastMCP declares no `logging`, so the driver has nothing to set there.
const FASTMCP: [&str; 5] = ["--sse", "--server", "fastmcp", "--skip", "logging/setLevel"];

/// The backend's HTTP+SSE paths.
const PATHS: &str = "sse_path = \"/sse\"\nmessages_path = \"/messages\"\n";

/// The SSE URL beside the lone backend's `/mcp`.
fn sse_url(url: &str) -> String {
    let base = url.strip_suffix("/mcp").expect("the lone backend at /mcp");
    format!("{base}/sse")
}

#[test]
fn sse_clients_reach_fastmcp_over_streamable_http_each_on_its_own_stream() {
    let (_server, backend) = start_fastmcp();
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"fastmcp\"\nkind = \"http\"\nurl = \"{backend}\"\n{PATHS}"
    ));
    let sse = sse_url(&url);
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_legacy_driver(&sse, tag, &FASTMCP)))
        .collect();
    let modern = run_client(&url, "frank", &[]);
    for (tag, driver) in drivers {
        let summary = assert_legacy_driver_passed(driver, tag);
        // The SDK read the stream's sealed id from the `endpoint` event's query.
        let id = summary["session_id"].as_str().unwrap_or_default();
        assert!(id.starts_with("e1."), "{summary}");
    }
    assert_client_passed(modern, "frank");
}

#[test]
fn sse_clients_reach_the_fixture_server() {
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"fixture\"\ncommand = {:?}\nargs = [\"legacy-server\"]\n{PATHS}",
        env!("CARGO_BIN_EXE_mrtr-gateway")
    ));
    assert_legacy_driver_passed(
        run_legacy_driver(&sse_url(&url), "dave", &["--sse", "--server", "fixture"]),
        "dave",
    );
}

#[test]
fn sse_clients_reach_fastmcp_over_stdio() {
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"fastmcp\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n{PATHS}",
        legacy_python().display().to_string(),
        legacy_server_script().display().to_string(),
    ));
    assert_legacy_driver_passed(run_legacy_driver(&sse_url(&url), "erin", &FASTMCP), "erin");
}

#[test]
fn sse_clients_reach_a_modern_server_through_the_reverse_bridge() {
    let (_server, backend) = start_modern_server_http();
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"modern\"\nkind = \"http\"\nurl = \"{backend}\"\n{PATHS}"
    ));
    let modern = ["--sse", "--server", "modern"];
    assert_legacy_driver_passed(run_legacy_driver(&sse_url(&url), "gina", &modern), "gina");
    // And over stdio.
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"modern\"\n{}{PATHS}",
        modern_server_stdio_toml()
    ));
    assert_legacy_driver_passed(run_legacy_driver(&sse_url(&url), "hugo", &modern), "hugo");
}

//! Legacy clients through the gateway's legacy face, with real third-party SDKs: the PyPI
//! `mcp==1.30.0` `ClientSession` over Streamable HTTP (`tests/interop/legacy_driver.py`) in
//! front of a FastMCP server of the same release (over Streamable HTTP and over stdio) and of
//! the built-in fixture server. Every tool must return what the client's callbacks answered,
//! elicitation accepted, declined and cancelled, sampling, roots and calls of several rounds
//! among them; two principals at once get their own sessions; and 2026-07-28 clients keep
//! passing on the same endpoint at the same time.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    assert_client_passed, assert_legacy_driver_passed, legacy_python, legacy_server_script,
    run_client, run_legacy_driver, start_fastmcp, start_gateway,
};

/// FastMCP declares no `logging`, so the driver has nothing to set there.
const FASTMCP: [&str; 4] = ["--server", "fastmcp", "--skip", "logging/setLevel"];

fn fastmcp_http_backend(url: &str) -> String {
    format!("[[backend]]\nname = \"fastmcp\"\nkind = \"http\"\nurl = \"{url}\"\n")
}

#[test]
fn legacy_clients_reach_fastmcp_over_streamable_http_with_sessions_of_their_own() {
    let (_server, backend) = start_fastmcp();
    let (_gateway, url) = start_gateway(&fastmcp_http_backend(&backend));
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_legacy_driver(&url, tag, &FASTMCP)))
        .collect();
    let mut sessions = Vec::new();
    for (tag, driver) in drivers {
        let summary = assert_legacy_driver_passed(driver, tag);
        let sid = summary["session_id"]
            .as_str()
            .expect("a session id")
            .to_owned();
        assert!(sid.starts_with("s1."), "the gateway's own sealed id: {sid}");
        sessions.push(sid);
    }
    assert_ne!(sessions[0], sessions[1]);
}

#[test]
fn legacy_clients_reach_fastmcp_over_stdio() {
    let command = legacy_python();
    let script = legacy_server_script();
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"fastmcp\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
        command.display().to_string(),
        script.display().to_string(),
    ));
    assert_legacy_driver_passed(run_legacy_driver(&url, "carol", &FASTMCP), "carol");
}

#[test]
fn legacy_clients_reach_the_fixture_server() {
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"fixture\"\ncommand = {:?}\nargs = [\"legacy-server\"]\n",
        env!("CARGO_BIN_EXE_mrtr-gateway")
    ));
    assert_legacy_driver_passed(
        run_legacy_driver(&url, "dave", &["--server", "fixture"]),
        "dave",
    );
}

#[test]
fn modern_and_legacy_clients_share_one_endpoint_at_once() {
    let (_server, backend) = start_fastmcp();
    let (_gateway, url) = start_gateway(&fastmcp_http_backend(&backend));
    let legacy = run_legacy_driver(&url, "erin", &FASTMCP);
    let modern = run_client(&url, "frank", &[]);
    assert_legacy_driver_passed(legacy, "erin");
    assert_client_passed(modern, "frank");
}

//! Interop with real third-party SDKs: a PyPI `mcp==1.30.0` FastMCP stdio server behind the
//! gateway binary, driven by PyPI `mcp==2.3.0` `Client(mode="2026-07-28")`. The venvs are built
//! by `tests/interop/setup-venvs.sh` on first use.

#[path = "interop/harness.rs"]
mod harness;

use harness::{Proc, assert_client_passed, legacy_python, legacy_server_script, run_client};

/// The gateway with the FastMCP server as a stdio backend (one child per session).
fn start_gateway() -> (Proc, String) {
    harness::start_gateway(&format!(
        "[[backend]]\nname = \"fastmcp\"\nkind = \"stdio\"\ncommand = {py:?}\nargs = [{server:?}, \"stdio\"]\npool_max = 8\n",
        py = legacy_python().display().to_string(),
        server = legacy_server_script().display().to_string(),
    ))
}

#[test]
fn fastmcp_stdio_server_serves_modern_client_through_gateway() {
    let (_gateway, url) = start_gateway();
    // Over stdio there is no HTTP request, so no credential can reach the backend.
    assert_client_passed(
        run_client(&url, "alice", &["--expect-authorization", "<none>"]),
        "alice",
    );
}

#[test]
fn two_principals_at_once_each_get_their_own_answers() {
    let (_gateway, url) = start_gateway();
    let alice = run_client(&url, "alice", &[]);
    let bob = run_client(&url, "bob", &[]);
    assert_client_passed(alice, "alice");
    assert_client_passed(bob, "bob");
}

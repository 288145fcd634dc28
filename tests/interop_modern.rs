//! The modern peer's own check, no gateway involved: `tests/interop/modern_driver.py` (PyPI
//! `mcp==2.3.0` `Client(mode="2026-07-28")`) drives `tests/interop/modern_server.py` (a PyPI
//! `mcp==2.3.0` server in the 2026-07-28 style) directly, over stateless Streamable HTTP and
//! over stdio. Every tool, the prompt and the resource template must return what the driver's
//! callbacks answered, and the server must refuse a retry with a state it did not mint. The
//! tests that put the gateway between the two rely on this pair; when one of those fails, this
//! file says whether the peers themselves still work.

#[path = "interop/harness.rs"]
mod harness;

use harness::{assert_driver_passed, run_driver, run_driver_stdio, start_modern_server_http};

#[test]
fn modern_driver_passes_against_modern_server_over_http() {
    let (_server, url) = start_modern_server_http();
    assert_driver_passed(run_driver(&url, "alice"), "alice");
}

#[test]
fn two_drivers_at_once_against_modern_server_over_http() {
    let (_server, url) = start_modern_server_http();
    let alice = run_driver(&url, "alice");
    let bob = run_driver(&url, "bob");
    assert_driver_passed(alice, "alice");
    assert_driver_passed(bob, "bob");
}

#[test]
fn modern_driver_passes_against_modern_server_over_stdio() {
    assert_driver_passed(run_driver_stdio("carol"), "carol");
}

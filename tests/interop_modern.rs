//! The modern peer's own check, no gateway involved: `tests/interop/modern_driver.py` (PyPI
//! `mcp==2.3.0` `Client(mode="2026-07-28")`) drives `tests/interop/modern_server.py` (a PyPI
//! `mcp==2.3.0` server in the 2026-07-28 style) directly, over stateless Streamable HTTP and
//! over stdio. Every tool, the prompt and the resource template must return what the driver's
//! callbacks answered, the server must refuse a retry with a state it did not mint, and it must
//! have received the `_meta`, headers and credential the driver sent. The tests that put the
//! gateway between the two rely on this pair; when one of those fails, this file says whether
//! the peers themselves still work.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    MODERN_SHARED_STATE_KEY, assert_driver_passed, bearer_header, driver_failures, run_driver,
    run_driver_stdio_with, run_driver_with, start_faulty_relay, start_modern_server_http,
    start_modern_server_http_with,
};

#[test]
fn modern_driver_passes_against_modern_server_over_http() {
    let (_server, url) = start_modern_server_http();
    let expected = bearer_header("alice");
    let driver = run_driver_with(&url, "alice", &["--expect-authorization", &expected]);
    assert_driver_passed(driver, "alice");
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
    // Over stdio there is no HTTP request, so no credential can reach the server.
    let driver = run_driver_stdio_with("carol", &["--expect-authorization", "<none>"]);
    assert_driver_passed(driver, "carol");
}

/// The pair is only worth testing a relay with if a faulty relay makes it fail: each fault of
/// `faulty_relay.py` between driver and server must fail the checks that depend on it.
#[test]
fn driver_fails_through_a_relay_that_breaks_what_it_must_carry() {
    let (_server, upstream) = start_modern_server_http();
    // The control: the relay without a fault does not itself break anything.
    let (_relay, url) = start_faulty_relay(&upstream, "none");
    assert_driver_passed(run_driver(&url, "none"), "none");
    let cases = [
        ("drop-state", "two_rounds elicitation then sampling"),
        ("alter-state", "two_rounds elicitation then sampling"),
        ("drop-param-headers", "seen"),
        ("drop-client-info", "seen: _meta client info"),
        ("ignore-cancel", "cancel reaches the server"),
    ];
    for (fault, check) in cases {
        let (_relay, url) = start_faulty_relay(&upstream, fault);
        let failed = driver_failures(run_driver(&url, fault), fault);
        assert!(
            failed.iter().any(|f| f == check),
            "{fault}: expected `{check}` among the failed checks {failed:?}"
        );
    }
}

/// States are sealed per process unless the processes share `--state-key`: with each request
/// going to the next of two servers, every retry reaches the other one, which refuses the
/// state unless both were given the same key. A relay to a pool of modern processes depends on
/// which of the two it is given.
#[test]
fn retries_across_two_server_processes_need_a_shared_state_key() {
    let key = ["--state-key", MODERN_SHARED_STATE_KEY];
    let (_a, first) = start_modern_server_http_with(&key);
    let (_b, second) = start_modern_server_http_with(&key);
    let (_relay, url) = start_faulty_relay(&format!("{first},{second}"), "none");
    assert_driver_passed(run_driver(&url, "shared"), "shared");

    let (_c, first) = start_modern_server_http();
    let (_d, second) = start_modern_server_http();
    let (_relay, url) = start_faulty_relay(&format!("{first},{second}"), "none");
    let failed = driver_failures(run_driver(&url, "apart"), "apart");
    assert!(
        failed.iter().any(|f| f == "ask_name accept"),
        "expected `ask_name accept` among the failed checks {failed:?}"
    );
}

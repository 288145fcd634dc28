//! The gateway in front of a real 2026-07-28 server over stdio: `tests/interop/modern_server.py`
//! (PyPI `mcp==2.3.0`) as the gateway's children, driven through the gateway by
//! `tests/interop/modern_driver.py` (`Client(mode="2026-07-28")`). Every tool, the prompt and
//! the resource template return what the driver's callbacks answered. The server seals its
//! `requestState` with a key of its own process, so a retry that reached the other child would
//! be refused: every round must go back to the child that wrote its state. Cancelling a call
//! must reach the child as `notifications/cancelled`, and a listen stream must get its events.
//! With `protocol = "auto"`, a legacy FastMCP stdio server and the modern one side by side are
//! each found in their own era.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    Proc, assert_client_passed, assert_driver_passed, assert_each_probed_once, free_port,
    legacy_python, legacy_server_script, modern_server_stdio_toml, run_client, start_gateway,
};
use std::process::{Command, Stdio};

/// A driver through the gateway to the stdio server, which sees no HTTP headers.
fn run_driver(url: &str, tag: &str) -> Proc {
    let mut cmd = Command::new(harness::modern_python());
    cmd.arg(harness::root().join("tests/interop/modern_driver.py"))
        .args(["--tag", tag, url, "--server-over-stdio"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Proc::spawn(&format!("driver {tag}"), &mut cmd)
}

/// The gateway in front of the stdio server with `protocol` and two children; two drivers at
/// once, as two principals.
fn two_drivers_through_the_gateway(protocol: &str) {
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"modern\"\n{}protocol = \"{protocol}\"\nchildren = 2\n",
        modern_server_stdio_toml()
    ));
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_driver(&url, tag)))
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

/// A legacy FastMCP server and the modern server, both over stdio and both on `auto`: the
/// probe finds each one's era (counted per backend), the legacy one is bridged for the modern
/// client and the modern one relayed for the driver.
#[test]
fn auto_finds_a_legacy_and_a_modern_stdio_server_side_by_side() {
    let admin = free_port();
    let legacy = format!(
        "command = {:?}\nargs = [{:?}, \"stdio\"]\n",
        legacy_python().display().to_string(),
        legacy_server_script().display().to_string()
    );
    let (_gateway, url) = start_gateway(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[backend]]\nname = \"old\"\npath = \"/old\"\n{legacy}\
         [[backend]]\nname = \"new\"\npath = \"/new\"\n{}",
        modern_server_stdio_toml()
    ));
    let authority = url.split('/').nth(2).expect("an authority");
    let base = format!("http://{authority}");
    let client = run_client(&format!("{base}/old"), "carol", &[]);
    let driver = run_driver(&format!("{base}/new"), "dave");
    assert_client_passed(client, "carol");
    assert_driver_passed(driver, "dave");
    assert_each_probed_once(admin, &[("old", "legacy"), ("new", "modern")]);
}

//! The gateway in front of a real 2026-07-28 server: `tests/interop/modern_server.py` (PyPI
//! `mcp==2.3.0`, stateless Streamable HTTP) behind the gateway binary, driven through it by
//! `tests/interop/modern_driver.py` (`Client(mode="2026-07-28")`). Every tool, the prompt and
//! the resource template must return what the driver's callbacks answered, with the server's
//! own `requestState` handed back to it verbatim (it refuses any other), and the server must
//! receive the `_meta`, the 2026 headers and the credential the driver sent. With
//! `protocol = "auto"`, a legacy FastMCP server and the modern one side by side are each found
//! in their own era, and each is served in it.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    assert_client_passed, assert_driver_passed, assert_each_probed_once, bearer_header,
    driver_failures, free_port, run_client, run_driver, run_driver_with, start_fastmcp,
    start_faulty_relay, start_gateway, start_modern_server_http,
};

/// The gateway in front of the modern server with `protocol`, passing each principal's own
/// credential; two drivers at once, each checking every tool and what reached the server.
fn two_drivers_through_the_gateway(protocol: &str) {
    let (_server, backend_url) = start_modern_server_http();
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"modern\"\nkind = \"http\"\nurl = \"{backend_url}\"\n\
         protocol = \"{protocol}\"\nauthorization = \"pass\"\n"
    ));
    let drivers: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| {
            let expected = bearer_header(tag);
            let flags = ["--expect-authorization", expected.as_str()];
            (tag, run_driver_with(&url, tag, &flags))
        })
        .collect();
    for (tag, driver) in drivers {
        assert_driver_passed(driver, tag);
    }
}

#[test]
fn a_modern_server_set_to_2026_is_relayed_for_two_principals_at_once() {
    two_drivers_through_the_gateway("2026-07-28");
}

#[test]
fn a_modern_server_left_on_auto_is_found_and_relayed() {
    two_drivers_through_the_gateway("auto");
}

/// A legacy FastMCP server (Streamable HTTP) and the modern server behind one gateway, both on
/// `auto`: the probe finds each one's era (counted per backend), the legacy one is bridged for
/// the modern client and the modern one relayed for the driver.
#[test]
fn auto_finds_a_legacy_and_a_modern_server_side_by_side() {
    let (_legacy, legacy_url) = start_fastmcp();
    let (_modern, modern_url) = start_modern_server_http();
    let admin = free_port();
    let (_gateway, url) = start_gateway(&format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[backend]]\nname = \"old\"\npath = \"/old\"\nkind = \"http\"\nurl = \"{legacy_url}\"\n\
         [[backend]]\nname = \"new\"\npath = \"/new\"\nkind = \"http\"\nurl = \"{modern_url}\"\n"
    ));
    // The gateway announces its first endpoint: `http://host:port/old`.
    let authority = url.split('/').nth(2).expect("an authority");
    let base = format!("http://{authority}");
    let client = run_client(&format!("{base}/old"), "carol", &[]);
    let driver = run_driver_with(&format!("{base}/new"), "dave", &[]);
    assert_client_passed(client, "carol");
    assert_driver_passed(driver, "dave");
    assert_each_probed_once(admin, &[("old", "legacy"), ("new", "modern")]);
}

/// Three gateways sharing their state keys in front of the modern server, with every request
/// going to the next of them (`faulty_relay.py` without a fault): the driver's requests are
/// sequential, so the three requests of `two_rounds` (the call and its two retries) each reach
/// a different replica, and every retry reaches a replica that did not serve the round before.
/// None has an internal listener, so none could hop: each serves the round it gets since
/// nothing was parked. With a key of its own, a replica refuses the others' states.
#[test]
fn any_replica_serves_any_round_of_a_relayed_call() {
    let (_server, backend_url) = start_modern_server_http();
    let replica = |secret: &str| {
        start_gateway(&format!(
            "[state]\nkeys = [{{ id = \"k1\", secret = \"{secret}\" }}]\n\n\
             [[backend]]\nname = \"modern\"\nkind = \"http\"\nurl = \"{backend_url}\"\n\
             protocol = \"2026-07-28\"\n"
        ))
    };
    let shared = "A".repeat(43);
    let (_a, first) = replica(&shared);
    let (_b, second) = replica(&shared);
    let (_c, third) = replica(&shared);
    let (_relay, url) = start_faulty_relay(&format!("{first},{second},{third}"), "none");
    assert_driver_passed(run_driver(&url, "shared"), "shared");

    let (_d, first) = replica(&shared);
    let (_e, second) = replica(&format!("{}A", "B".repeat(42)));
    let (_relay, url) = start_faulty_relay(&format!("{first},{second}"), "none");
    let failed = driver_failures(run_driver(&url, "apart"), "apart");
    assert!(
        failed.iter().any(|f| f == "ask_name accept"),
        "expected `ask_name accept` among the failed checks {failed:?}"
    );
}

//! Legacy clients on 2026-07-28 backends: the reverse bridge, with real third-party SDKs. PyPI
//! `mcp==1.30.0` `ClientSession` clients (`tests/interop/legacy_driver.py --server modern`)
//! through the gateway to the PyPI `mcp==2.3.0` server `modern_server.py`, over stateless
//! Streamable HTTP and over stdio: each `InputRequiredResult` round reaches the client as real
//! requests and every tool returns what the client's callbacks answered; 2026-07-28 clients run
//! on the same endpoint at the same time. A client that declared no capability for what the
//! backend asks of it gets -32021, as a 2026-07-28 server says it; `notifications/cancelled`
//! cancels upstream.

#[path = "interop/harness.rs"]
mod harness;
mod legacy_client;

use harness::{
    assert_driver_passed, assert_legacy_driver_passed, modern_server_stdio_toml,
    modern_server_stdio_toml_with, run_driver, run_legacy_driver, start_gateway,
    start_modern_server_http,
};
use legacy_client::Legacy;
use serde_json::json;
use std::time::Duration;

const MODERN: [&str; 2] = ["--server", "modern"];

fn http_backend(url: &str) -> String {
    format!("[[backend]]\nname = \"modern\"\nkind = \"http\"\nurl = \"{url}\"\n")
}

#[test]
fn legacy_and_modern_clients_reach_a_modern_server_over_http_at_once() {
    let (_server, backend) = start_modern_server_http();
    let (_gateway, url) = start_gateway(&http_backend(&backend));
    let legacy: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| (tag, run_legacy_driver(&url, tag, &MODERN)))
        .collect();
    let modern = run_driver(&url, "carol");
    for (tag, driver) in legacy {
        assert_legacy_driver_passed(driver, tag);
    }
    assert_driver_passed(modern, "carol");
}

#[test]
fn legacy_clients_reach_a_modern_server_over_stdio() {
    let (_gateway, url) = start_gateway(&format!(
        "[[backend]]\nname = \"modern\"\n{}",
        modern_server_stdio_toml()
    ));
    assert_legacy_driver_passed(run_legacy_driver(&url, "dave", &MODERN), "dave");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_capability_the_client_lacks_is_a_missing_capability_error() {
    let (_server, backend) = start_modern_server_http();
    let (_gateway, url) = start_gateway(&http_backend(&backend));
    let mut c = Legacy::new(&url);
    let (status, init) = c.initialize("2025-11-25", json!({})).await;
    assert_eq!(status, 200, "{init:#}");
    assert_eq!(
        init["result"]["serverInfo"]["name"], "interop-modern",
        "{init:#}"
    );
    let (answer, seen) = c
        .call(
            1,
            "tools/call",
            json!({"name": "ask_name", "arguments": {}}),
            |r| panic!("nothing may be asked of a client without the capability: {r}"),
        )
        .await;
    assert!(seen.is_empty());
    assert_eq!(answer["error"]["code"], -32021, "{answer:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_request_is_cancelled_upstream() {
    let dir = std::env::temp_dir().join(format!("mrtr-reverse-cancel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("cancel.log");
    let server = modern_server_stdio_toml_with(&["--cancel-log", &log.display().to_string()]);
    let (_gateway, url) = start_gateway(&format!("[[backend]]\nname = \"modern\"\n{server}"));
    let mut c = Legacy::new(&url);
    c.initialize("2025-11-25", json!({})).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"key": "k1", "seconds": 60},
                   "_meta": {"progressToken": "p1"}}});
    let mut stream = c.post(&call).await;
    // The progress notification: the call is running upstream.
    let first = stream.next().await.expect("the call's progress");
    assert_eq!(first["method"], "notifications/progress", "{first:#}");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "changed my mind"}});
    assert_eq!(c.post(&cancel).await.status, 202);
    let mut cancelled = false;
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("cancelled k1") {
            cancelled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(cancelled, "the backend saw the call cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn list_changes_and_resource_updates_reach_the_get_stream() {
    let (_server, backend) = start_modern_server_http();
    let (_gateway, url) = start_gateway(&http_backend(&backend));
    let mut c = Legacy::new(&url);
    c.initialize("2025-11-25", json!({})).await;
    let uri = "interop://profile/ada";
    let (subscribed, _) = c
        .call(1, "resources/subscribe", json!({"uri": uri}), |r| {
            panic!("{r}")
        })
        .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed:#}");
    let mut stream = c.send("GET", None, &[]).await;
    assert_eq!(stream.status, 200);
    // The upstream listen opens in the background: change things until it has seen them.
    let changer = c.clone();
    let changing = tokio::spawn(async move {
        for id in 2..40 {
            let call = json!({"name": "changed", "arguments": {"uri": "interop://profile/ada"}});
            changer
                .call(id, "tools/call", call, |r| panic!("{r}"))
                .await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let mut methods = std::collections::BTreeSet::new();
    while methods.len() < 2 {
        let note = stream
            .next()
            .await
            .expect("a notification on the GET stream");
        let method = note["method"].as_str().unwrap_or_default().to_owned();
        assert!(
            note["params"]["_meta"]
                .get("io.modelcontextprotocol/subscriptionId")
                .is_none(),
            "legacy shape: {note:#}"
        );
        if method == "notifications/resources/updated" {
            assert_eq!(note["params"]["uri"], uri, "{note:#}");
        }
        methods.insert(method);
    }
    changing.abort();
    assert_eq!(
        methods.into_iter().collect::<Vec<_>>(),
        [
            "notifications/resources/updated",
            "notifications/tools/list_changed"
        ]
    );
}

//! Interop over HTTP backends with real third-party SDKs: a PyPI `mcp==1.30.0` FastMCP server
//! served over Streamable HTTP and over 2024-11-05 HTTP+SSE (uvicorn, port chosen by the
//! server and announced on stdout), the gateway binary in front of it, and PyPI `mcp==2.3.0`
//! `Client(mode="2026-07-28")` clients. Elicitation, sampling and `list_roots()` (which FastMCP
//! pushes on the standalone GET stream over Streamable HTTP) must each return what the client's
//! callbacks answered; clients of different principals run at once and must never be handed
//! each other's requests; the backend must receive the credential its `authorization` policy
//! says. Given an event store, the server's numbered streams are let go while calls are parked
//! and picked up again with `Last-Event-ID`.

#[path = "interop/harness.rs"]
mod harness;

use harness::{
    Proc, assert_client_passed, bearer_header, legacy_python, legacy_server_script, run_client,
};
use std::process::{Command, Stdio};

/// Starts the FastMCP server on `transport` (`streamable-http` or `sse`), with the script's
/// `extra` flags, and returns it with the URL it announced once uvicorn was serving.
fn start_fastmcp(transport: &str, extra: &[&str]) -> (Proc, String) {
    let mut server = Proc::spawn(
        &format!("FastMCP {transport} server"),
        Command::new(legacy_python())
            .arg(legacy_server_script())
            .args([transport, "--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = server.announced_url();
    (server, url)
}

/// The gateway in front of `backend_url` as a backend of `kind` (`http` or `sse`), with the
/// extra backend settings in `policy`.
fn start_gateway(kind: &str, backend_url: &str, policy: &str) -> (Proc, String) {
    harness::start_gateway(&format!(
        "[[backend]]\nname = \"fastmcp\"\nkind = \"{kind}\"\nurl = \"{backend_url}\"\npool_max = 8\n{policy}"
    ))
}

/// Two principals at once, each passing its own credential through to the backend.
fn two_principals_pass_their_own_credentials(transport: &str, kind: &str) {
    let (_server, backend_url) = start_fastmcp(transport, &[]);
    let (_gateway, url) = start_gateway(kind, &backend_url, "authorization = \"pass\"\n");
    let clients: Vec<_> = ["alice", "bob"]
        .into_iter()
        .map(|tag| {
            let expected = bearer_header(tag);
            (
                tag,
                run_client(&url, tag, &["--expect-authorization", &expected]),
            )
        })
        .collect();
    for (tag, client) in clients {
        assert_client_passed(client, tag);
    }
}

#[test]
fn streamable_http_fastmcp_serves_two_principals_at_once_with_their_own_credentials() {
    two_principals_pass_their_own_credentials("streamable-http", "http");
}

#[test]
fn sse_fastmcp_serves_two_principals_at_once_with_their_own_credentials() {
    two_principals_pass_their_own_credentials("sse", "sse");
}

#[test]
fn streamable_http_backend_never_sees_the_client_credential_by_default() {
    let (_server, backend_url) = start_fastmcp("streamable-http", &[]);
    let (_gateway, url) = start_gateway("http", &backend_url, "");
    assert_client_passed(
        run_client(&url, "carol", &["--expect-authorization", "<none>"]),
        "carol",
    );
}

#[test]
fn sse_backend_gets_the_configured_credential_instead_of_the_clients() {
    let (_server, backend_url) = start_fastmcp("sse", &[]);
    let (_gateway, url) = start_gateway(
        "sse",
        &backend_url,
        "authorization = \"replace\"\nauthorization_value = \"Bearer gateway-credential\"\n",
    );
    assert_client_passed(
        run_client(
            &url,
            "dave",
            &["--expect-authorization", "Bearer gateway-credential"],
        ),
        "dave",
    );
}

/// Given an event store, FastMCP numbers the events of its streams: the gateway lets a parked
/// call's answer stream go (no connection held while the client answers) and picks it up with
/// `Last-Event-ID` on the retry, and every round of every tool still returns what the client
/// answered.
#[test]
fn streamable_http_fastmcp_with_an_event_store_has_parked_streams_let_go_and_resumed() {
    let log =
        std::env::temp_dir().join(format!("mrtr-fastmcp-requests-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let log_arg = log.to_str().expect("a UTF-8 temp path");
    let (_server, backend_url) = start_fastmcp(
        "streamable-http",
        &["--event-store", "--request-log", log_arg],
    );
    let (_gateway, url) = start_gateway("http", &backend_url, "");
    assert_client_passed(
        run_client(&url, "erin", &["--expect-authorization", "<none>"]),
        "erin",
    );
    let requests = std::fs::read_to_string(&log).expect("the server's request log");
    let _ = std::fs::remove_file(&log);
    let resumed = requests
        .lines()
        .filter(|l| l.starts_with("GET ") && !l.ends_with(" -"))
        .count();
    assert!(
        resumed > 0,
        "no GET picked a stream up with Last-Event-ID:\n{requests}"
    );
}

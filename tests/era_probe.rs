//! The era probe's verdict on what a legacy or broken server answers `server/discover` with
//! over HTTP: an error status, an HTML page, a JSON-RPC error for no request of ours, a body
//! that is not JSON-RPC, no answer at all. Each is legacy, and is counted so; only positive
//! evidence of 2026-07-28 is modern (the unit tests in `upstream::era` cover the JSON-RPC
//! answers one by one).
mod common;

use common::*;
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A backend that answers every request with `answer`, or never answers if it is `None`; it
/// reads the request first, so the gateway's write succeeds.
async fn canned(answer: Option<String>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                match answer {
                    Some(a) => {
                        let _ = s.write_all(a.as_bytes()).await;
                    }
                    // Held open, unanswered, until the gateway gives up.
                    None => {
                        let _ = s.read(&mut buf).await;
                    }
                }
            });
        }
    });
    url
}

fn http(status: &str, content_type: &str, body: &str) -> Option<String> {
    Some(format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
}

#[tokio::test]
async fn anything_but_2026_evidence_is_legacy() {
    let no_session = json!({"jsonrpc": "2.0", "id": "server-error",
        "error": {"code": -32600, "message": "Bad Request: Missing session ID"}});
    let cases = [
        (
            "status500",
            http("500 Internal Server Error", "text/plain", "boom"),
        ),
        (
            "status404",
            http("404 Not Found", "text/plain", "Not Found"),
        ),
        (
            "html",
            http("200 OK", "text/html", "<html><body>hello</body></html>"),
        ),
        (
            "nosession",
            http(
                "400 Bad Request",
                "application/json",
                &no_session.to_string(),
            ),
        ),
        (
            "notjsonrpc",
            http("200 OK", "application/json", "{\"hello\": 1}"),
        ),
        ("silent", None),
    ];
    let mut backends = String::new();
    for (name, answer) in cases.clone() {
        let url = canned(answer).await;
        backends += &format!(
            "[[backend]]\nname = \"{name}\"\npath = \"/{name}\"\nkind = \"http\"\nurl = \"{url}\"\nstandalone_stream = false\nprobe_timeout = \"1s\"\n"
        );
    }
    let text = format!(
        "{ADMIN_ON}[server]\nlisten = \"127.0.0.1:0\"\n[limits]\nrequest_timeout = \"1s\"\nqueue_wait = \"1s\"\n{backends}"
    );
    let gw = Gateway::from_config(&text, scratch("era-probe").join("log")).await;
    let authority = gw
        .url
        .parse::<http::Uri>()
        .unwrap()
        .authority()
        .unwrap()
        .to_string();
    for (name, _) in &cases {
        let client = Client::new(&format!("http://{authority}/{name}"));
        let none = json!({});
        let call = client.call_tool("echo", json!({}), &none);
        // Each is then driven as legacy, which these backends cannot serve either.
        let r = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("an answer in time");
        assert_eq!(r.error_code(), -31001, "{name}: {:#}", r.body);
    }
    let m = gw.scrape().await;
    for (name, _) in &cases {
        let count = |era| {
            m.get(
                "mrtr_backend_era_probes_total",
                &[("backend", name), ("era", era)],
            )
        };
        assert_eq!((count("legacy"), count("modern")), (1.0, 0.0), "{name}");
    }
    gw.stop().await;
}

/// A 401 or 403 to the probe says the credential it carried was refused, nothing of the
/// backend's era: the call is served as legacy, no verdict is kept, and the next call probes
/// again (a client with a credential the backend takes may find it 2026-07-28).
#[tokio::test]
async fn a_refused_credential_settles_no_era() {
    let mut backends = String::new();
    let oauth = r#"{"error":"invalid_token"}"#;
    let refusals = [
        ("denied", "401 Unauthorized", "text/plain", "no"),
        ("forbidden", "403 Forbidden", "text/plain", "no"),
        ("oauth", "401 Unauthorized", "application/json", oauth),
    ];
    for (name, status, content_type, body) in refusals {
        let url = canned(http(status, content_type, body)).await;
        backends += &format!(
            "[[backend]]\nname = \"{name}\"\npath = \"/{name}\"\nkind = \"http\"\nurl = \"{url}\"\nstandalone_stream = false\n"
        );
    }
    let text = format!(
        "{ADMIN_ON}[server]\nlisten = \"127.0.0.1:0\"\n[limits]\nrequest_timeout = \"1s\"\nqueue_wait = \"1s\"\n{backends}"
    );
    let gw = Gateway::from_config(&text, scratch("era-denied").join("log")).await;
    let authority = gw
        .url
        .parse::<http::Uri>()
        .unwrap()
        .authority()
        .unwrap()
        .to_string();
    for (name, ..) in refusals {
        let client = Client::new(&format!("http://{authority}/{name}"));
        let none = json!({});
        for _ in 0..2 {
            let call = client.call_tool("echo", json!({}), &none);
            let r = tokio::time::timeout(Duration::from_secs(30), call)
                .await
                .expect("an answer in time");
            assert_eq!(r.error_code(), -31001, "{name}: {:#}", r.body);
        }
    }
    let m = gw.scrape().await;
    for (name, ..) in refusals {
        let probes = m.get(
            "mrtr_backend_era_probes_total",
            &[("backend", name), ("era", "legacy")],
        );
        assert_eq!(probes, 2.0, "{name}: probed again at the second call");
        // No verdict was kept, so none had to be forgotten when `initialize` failed too.
        let reprobes = m.get("mrtr_backend_era_reprobes_total", &[("backend", name)]);
        assert_eq!(reprobes, 0.0, "{name}");
    }
    gw.stop().await;
}

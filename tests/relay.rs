//! The stateless relay to a 2026-07-28 backend, over real sockets, against a backend scripted
//! byte by byte: it records every request it receives (so a test can say what reached it, and
//! that nothing did) and answers as a 2026-07-28 server would, or as a broken one would. The
//! backend's `requestState` goes out sealed and comes back verbatim; a sealed state taken to
//! another principal, backend or request, kept past its expiry, or altered, is refused before
//! anything reaches the backend.
mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the backend read it: its head (lowercased) and its JSON body.
#[derive(Debug, Clone)]
struct Received {
    head: String,
    body: Value,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            (n.trim() == name).then(|| v.trim())
        })
    }
}

/// Set by the `hang` tool's connection once the gateway closed it.
static HANG_CLOSED: AtomicBool = AtomicBool::new(false);

/// The scripted 2026-07-28 backend: one request per connection. Set `legacy`, it refuses
/// everything as a legacy server refuses a request without a session; set `locked`, it
/// refuses a request without `Authorization` with 401, as a server behind authentication does.
struct Modern {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
    legacy: Arc<AtomicBool>,
    locked: Arc<AtomicBool>,
}

impl Modern {
    async fn start() -> Modern {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", l.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let legacy = Arc::new(AtomicBool::new(false));
        let locked = Arc::new(AtomicBool::new(false));
        let (log, old, lock) = (received.clone(), legacy.clone(), locked.clone());
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let (log, old, lock) = (log.clone(), old.clone(), lock.clone());
                tokio::spawn(async move {
                    if let Some(req) = read(&mut s).await {
                        log.lock().unwrap().push(req.clone());
                        if lock.load(Ordering::Relaxed) && req.header("authorization").is_none() {
                            let body = r#"{"error":"invalid_token"}"#;
                            let _ = s
                                .write_all(&respond("401 Unauthorized", "application/json", body))
                                .await;
                        } else if old.load(Ordering::Relaxed) {
                            let _ = s.write_all(&no_session()).await;
                        } else {
                            answer(&req, &mut s).await;
                        }
                    }
                });
            }
        });
        Modern {
            url,
            received,
            legacy,
            locked,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

async fn read(s: &mut TcpStream) -> Option<Received> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Received { head, body })
}

fn respond(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// How a legacy Streamable HTTP server refuses a request that has no session.
fn no_session() -> Vec<u8> {
    let e = json!({"jsonrpc": "2.0", "id": "server-error",
        "error": {"code": -32600, "message": "Bad Request: Missing session ID"}});
    respond("400 Bad Request", "application/json", &e.to_string())
}

fn result(id: &Value, result: Value) -> Vec<u8> {
    let msg = json!({"jsonrpc": "2.0", "id": id, "result": result});
    respond("200 OK", "application/json", &msg.to_string())
}

/// What the scripted backend answers, by method and tool.
async fn answer(req: &Received, s: &mut TcpStream) {
    let id = &req.body["id"];
    let params = &req.body["params"];
    let bytes = match (req.body["method"].as_str(), params["name"].as_str()) {
        (Some("server/discover"), _) => result(
            id,
            json!({"resultType": "complete", "supportedVersions": ["2025-11-25", MODERN],
                "capabilities": {"tools": {}}, "ttlMs": 5000, "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "1"}}}),
        ),
        (Some("tools/call"), Some("ask")) => match params["requestState"].as_str() {
            None => result(
                id,
                json!({"resultType": "input_required", "requestState": "backend-state-1",
                    "inputRequests": {"q": {"method": "elicitation/create", "params": {
                        "mode": "form", "message": "name?", "requestedSchema": {"type": "object",
                        "properties": {"name": {"type": "string"}}}}}}}),
            ),
            Some(state) => {
                let name = &params["inputResponses"]["q"]["content"]["name"];
                result(
                    id,
                    json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                        "content": [{"type": "text", "text": format!("{name}|{state}")}]}),
                )
            }
        },
        (Some("tools/call"), Some("progress")) => {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                "progressToken": params["_meta"]["progressToken"], "progress": 1}});
            let done = json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete",
                "content": [{"type": "text", "text": "done"}]}});
            let body = format!("event: message\ndata: {note}\n\nevent: message\ndata: {done}\n\n");
            respond("200 OK", "text/event-stream", &body)
        }
        (Some("tools/call"), Some("hang")) => {
            // A progress notification, then nothing until the gateway closes the stream.
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                "progressToken": "h", "progress": 1}});
            let ev = format!("event: message\ndata: {note}\n\n");
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{ev}\r\n",
                ev.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let mut b = [0u8; 64];
            while matches!(s.read(&mut b).await, Ok(n) if n > 0) {}
            HANG_CLOSED.store(true, Ordering::SeqCst);
            return;
        }
        (Some("tools/call"), Some("needs_sampling")) => {
            let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32021,
                "message": "sampling required", "data": {"requiredCapabilities": {"sampling": {}}}}});
            respond("400 Bad Request", "application/json", &e.to_string())
        }
        (Some("tools/call"), Some("too_new")) => {
            let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32022,
                "message": "unsupported", "data": {"supported": ["2027-01-01"], "requested": MODERN}}});
            respond("400 Bad Request", "application/json", &e.to_string())
        }
        (Some("tools/call"), Some("bogus")) => result(id, json!({"content": []})),
        _ => {
            let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}});
            respond("404 Not Found", "application/json", &e.to_string())
        }
    };
    let _ = s.write_all(&bytes).await;
}

/// A gateway with `backends` (TOML of `[[backend]]` tables), its admin listener on.
async fn gateway(extra: &str, backends: &str) -> Gateway {
    let text = format!("{ADMIN_ON}[server]\nlisten = \"127.0.0.1:0\"\n{extra}{backends}");
    Gateway::from_config(&text, scratch("relay").join("log")).await
}

fn modern_backend(name: &str, path: &str, url: &str) -> String {
    format!(
        "[[backend]]\nname = \"{name}\"\npath = \"{path}\"\nkind = \"http\"\nurl = \"{url}\"\nprotocol = \"2026-07-28\"\n"
    )
}

/// A client of the gateway's endpoint at `path`.
fn client_at(gw: &Gateway, path: &str) -> Client {
    let uri: http::Uri = gw.url.parse().unwrap();
    Client::new(&format!("http://{}{path}", uri.authority().unwrap()))
}

fn form() -> Value {
    json!({"elicitation": {"form": {}}})
}

/// A call relayed as the client sent it, its state sealed on the way out and the backend's own
/// given back on the retry; no `initialize`, no session.
#[tokio::test]
async fn a_modern_backend_is_relayed_and_its_state_sealed() {
    let backend = Modern::start().await;
    let gw = gateway("", &modern_backend("m", "/mcp", &backend.url)).await;
    let client = client_at(&gw, "/mcp");
    let mut body = client.body(
        "tools/call",
        json!({"name": "ask", "arguments": {"region": "eu"}}),
        &form(),
    );
    body["params"]["_meta"]["traceparent"] =
        json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    body["params"]["_meta"]["com.example/tag"] = json!("kept");
    let headers = [
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "ask"),
        ("Mcp-Param-Region", "eu"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let bytes = bytes::Bytes::from(serde_json::to_vec(&body).unwrap());
    let first = client.post_raw("POST", bytes, &headers).await;
    let r = first.result();
    assert_eq!(r["resultType"], "input_required", "{r:#}");
    assert_eq!(
        r["inputRequests"]["q"]["params"]["message"], "name?",
        "as the backend wrote it"
    );
    let state = first.state();
    assert!(
        !state.contains("backend-state-1"),
        "the backend's state is sealed: {state}"
    );
    let seen = backend.received();
    assert_eq!(seen.len(), 1, "one request, no initialize: {seen:?}");
    let up = &seen[0];
    assert_eq!(up.body["method"], "tools/call");
    assert_eq!(
        up.body["params"]["_meta"], body["params"]["_meta"],
        "the client's _meta as sent"
    );
    assert_eq!(up.body["params"]["arguments"], json!({"region": "eu"}));
    for (name, want) in [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "ask"),
        ("mcp-param-region", "eu"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
    ] {
        assert_eq!(up.header(name), Some(want), "{name} in {}", up.head);
    }
    assert_eq!(up.header("mcp-session-id"), None);

    let args = json!({"region": "eu"});
    let answers = json!({"q": accept(json!({"name": "Ada"}))});
    let done = client
        .retry_tool("ask", args, &form(), answers, &state)
        .await;
    let r = done.result();
    assert_eq!(r["resultType"], "complete", "{r:#}");
    assert_eq!(
        r["content"][0]["text"], "\"Ada\"|backend-state-1",
        "the backend's own state back"
    );
    assert_eq!(
        (r["ttlMs"].clone(), r["cacheScope"].clone()),
        (json!(0), json!("private"))
    );
    let retry = &backend.received()[1];
    assert_eq!(retry.body["params"]["requestState"], "backend-state-1");
    assert_eq!(
        retry.body["params"]["inputResponses"]["q"]["content"]["name"],
        "Ada"
    );
    gw.stop().await;
}

/// A wrapped state is refused with the frozen -32602 for another principal, another backend,
/// another request, after its expiry, and altered; none of those retries reaches a backend.
#[tokio::test]
async fn wrapped_states_are_refused_before_the_backend_sees_them() {
    let backend = Modern::start().await;
    let other = Modern::start().await;
    let backends = format!(
        "{}{}",
        modern_backend("m", "/a", &backend.url),
        modern_backend("n", "/b", &other.url)
    );
    let gw = gateway("[state]\npark_ttl = \"1s\"\n", &backends).await;
    let alice = client_at(&gw, "/a").with_principal("alice");
    let args = json!({"region": "eu"});
    let state = alice.call_tool("ask", args.clone(), &form()).await.state();
    let answers = json!({"q": accept(json!({"name": "Ada"}))});
    let before = gw.scrape().await;
    let sent = backend.count();
    let mut tampered = state.clone().into_bytes();
    let at = tampered.len() - 5;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let cases = [
        (
            "principal",
            client_at(&gw, "/a").with_principal("mallory"),
            args.clone(),
            state.clone(),
        ),
        (
            "request",
            client_at(&gw, "/b").with_principal("alice"),
            args.clone(),
            state.clone(),
        ),
        (
            "request",
            alice.clone(),
            json!({"region": "us"}),
            state.clone(),
        ),
        ("bad_seal", alice.clone(), args.clone(), tampered),
    ];
    for (check, client, args, state) in cases {
        let r = client
            .retry_tool("ask", args, &form(), answers.clone(), &state)
            .await;
        assert_eq!(r.error_code(), -32602, "{check}: {:#}", r.body);
        assert!(
            r.error_message().starts_with("Invalid requestState"),
            "{check}"
        );
    }
    // Expired: past park_ttl (1s), it is refused however right the rest is.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r = alice
        .retry_tool("ask", args, &form(), answers, &state)
        .await;
    assert_eq!(r.error_code(), -32602, "expired: {:#}", r.body);
    assert_eq!(
        backend.count(),
        sent,
        "no refused retry reached the backend"
    );
    assert_eq!(other.count(), 0, "nor the other backend");
    let after = gw.scrape().await;
    let failures = |reason| {
        let labels = [("reason", reason)];
        after.get("mrtr_state_failures_total", &labels)
            - before.get("mrtr_state_failures_total", &labels)
    };
    assert_eq!(failures("principal"), 1.0);
    assert_eq!(failures("request"), 2.0);
    assert_eq!(failures("bad_seal"), 1.0);
    assert_eq!(failures("expired"), 1.0);
    gw.stop().await;
}

/// Progress streams through as SSE; the backend's 2026 errors keep their codes and statuses;
/// an answer that is not a 2026-07-28 result fails that call only, with -31001 naming the
/// backend; `server/discover` reports the backend's capabilities.
#[tokio::test]
async fn answers_pass_through_as_the_backend_wrote_them() {
    let backend = Modern::start().await;
    let gw = gateway("", &modern_backend("m", "/mcp", &backend.url)).await;
    let client = client_at(&gw, "/mcp");
    let mut body = client.body(
        "tools/call",
        json!({"name": "progress", "arguments": {}}),
        &json!({}),
    );
    body["params"]["_meta"]["progressToken"] = json!("p-1");
    let r = client.send(&body).await;
    assert!(r.content_type.starts_with("text/event-stream"), "{r:?}");
    assert_eq!(r.notifications.len(), 1, "{r:?}");
    assert_eq!(r.notifications[0]["params"]["progressToken"], "p-1");
    assert_eq!(r.result()["content"][0]["text"], "done");

    let r = client
        .call_tool("needs_sampling", json!({}), &json!({}))
        .await;
    assert_eq!((r.status, r.error_code()), (400, -32021), "{:#}", r.body);
    assert_eq!(
        r.body["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );

    let r = client.call_tool("too_new", json!({}), &json!({})).await;
    assert_eq!((r.status, r.error_code()), (400, -32022), "{:#}", r.body);
    assert_eq!(r.body["error"]["data"]["supported"], json!(["2027-01-01"]));

    let r = client.call_tool("bogus", json!({}), &json!({})).await;
    assert_eq!(r.error_code(), -31001, "{:#}", r.body);
    assert!(r.error_message().contains("`m`"), "{}", r.error_message());

    let r = client
        .send(&client.body("server/discover", json!({}), &json!({})))
        .await;
    let d = r.result();
    assert_eq!(d["capabilities"], json!({"tools": {}}), "{d:#}");
    assert_eq!(d["supportedVersions"], json!([MODERN]));
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "scripted"
    );
    gw.stop().await;
}

/// `auto` tells a 2026-07-28 backend from a legacy one (the project's fixture over Streamable
/// HTTP) side by side, probing each once, and serves each in its era.
#[tokio::test]
async fn auto_finds_each_backends_era() {
    let modern = Modern::start().await;
    let legacy = LegacyFixture::start().await;
    let backends = format!(
        "[[backend]]\nname = \"new\"\npath = \"/new\"\nkind = \"http\"\nurl = \"{}\"\n\
         [[backend]]\nname = \"old\"\npath = \"/old\"\nkind = \"http\"\nurl = \"{}\"\nstandalone_stream = false\n",
        modern.url, legacy.url
    );
    let gw = gateway("", &backends).await;
    let (new, old) = (client_at(&gw, "/new"), client_at(&gw, "/old"));
    // Concurrent first calls share one probe.
    let caps = form();
    let (a, b) = tokio::join!(
        new.call_tool("ask", json!({}), &caps),
        new.call_tool("ask", json!({}), &caps),
    );
    assert_eq!(a.result()["resultType"], "input_required");
    assert_eq!(b.result()["resultType"], "input_required");
    let r = old
        .call_tool("echo", json!({"text": "hi"}), &json!({}))
        .await;
    assert_eq!(r.result()["resultType"], "complete", "{:#}", r.body);
    let probes = modern
        .received()
        .iter()
        .filter(|r| r.body["method"] == "server/discover")
        .count();
    assert_eq!(probes, 1, "probed once");
    let m = gw.scrape().await;
    let count = |backend, era| {
        m.get(
            "mrtr_backend_era_probes_total",
            &[("backend", backend), ("era", era)],
        )
    };
    assert_eq!(count("new", "modern"), 1.0);
    assert_eq!(count("old", "legacy"), 1.0);
    assert_eq!(count("new", "legacy") + count("old", "modern"), 0.0);
    gw.stop().await;
}

/// A probed era that stops holding is forgotten and probed again, both ways: a backend found
/// modern that starts refusing requests as a legacy server does, then found legacy and failing
/// to initialize, then modern again, is served in each era it shows.
#[tokio::test]
async fn an_era_that_stops_holding_is_probed_again() {
    let backend = Modern::start().await;
    let text = format!(
        "[limits]\nrequest_timeout = \"2s\"\nqueue_wait = \"2s\"\n[[backend]]\nname = \"b\"\nkind = \"http\"\nurl = \"{}\"\nstandalone_stream = false\n",
        backend.url
    );
    let gw = gateway("", &text).await;
    let client = client_at(&gw, "/mcp");
    let caps = form();
    let ask = || client.call_tool("ask", json!({}), &caps);
    assert_eq!(ask().await.result()["resultType"], "input_required");
    backend.legacy.store(true, Ordering::Relaxed);
    // Found modern, refused as legacy: this call fails, and the era is forgotten.
    assert_eq!(ask().await.error_code(), -31001);
    // Probed again: legacy. Its initialize fails, so the era is forgotten again.
    assert_eq!(ask().await.error_code(), -31001);
    backend.legacy.store(false, Ordering::Relaxed);
    assert_eq!(ask().await.result()["resultType"], "input_required");
    let m = gw.scrape().await;
    let probes = |era| {
        m.get(
            "mrtr_backend_era_probes_total",
            &[("backend", "b"), ("era", era)],
        )
    };
    assert_eq!((probes("modern"), probes("legacy")), (2.0, 1.0));
    assert_eq!(
        m.get("mrtr_backend_era_reprobes_total", &[("backend", "b")]),
        2.0
    );
    gw.stop().await;
}

/// A probe the backend refuses for want of a credential tells nothing of its era: it is not
/// kept, and the next call, which brings a credential, probes again and finds it modern.
#[tokio::test]
async fn a_probe_refused_for_its_credential_is_tried_again() {
    let backend = Modern::start().await;
    backend.locked.store(true, Ordering::Relaxed);
    let text = format!(
        "[limits]\nrequest_timeout = \"2s\"\nqueue_wait = \"2s\"\n[[backend]]\nname = \"b\"\nkind = \"http\"\nurl = \"{}\"\nstandalone_stream = false\nauthorization = \"pass\"\n",
        backend.url
    );
    let gw = gateway("", &text).await;
    let caps = form();
    let anonymous = client_at(&gw, "/mcp");
    let refused = anonymous.call_tool("ask", json!({}), &caps).await;
    assert_eq!(refused.error_code(), -31001, "{:#}", refused.body);
    let alice = client_at(&gw, "/mcp").with_principal("alice");
    let asked = alice.call_tool("ask", json!({}), &caps).await;
    assert_eq!(
        asked.result()["resultType"],
        "input_required",
        "{:#}",
        asked.body
    );
    let m = gw.scrape().await;
    let probes = |era| {
        m.get(
            "mrtr_backend_era_probes_total",
            &[("backend", "b"), ("era", era)],
        )
    };
    assert_eq!((probes("legacy"), probes("modern")), (1.0, 1.0));
    gw.stop().await;
}

/// A client that closes its stream closes the backend's: the relay reads the backend only
/// for the client.
#[tokio::test]
async fn a_client_that_leaves_closes_the_backends_stream() {
    use http_body_util::BodyExt;
    let backend = Modern::start().await;
    let gw = gateway("", &modern_backend("m", "/mcp", &backend.url)).await;
    let client = client_at(&gw, "/mcp");
    let body = client.body(
        "tools/call",
        json!({"name": "hang", "arguments": {}}),
        &json!({}),
    );
    let addr = gw
        .url
        .parse::<http::Uri>()
        .unwrap()
        .authority()
        .unwrap()
        .to_string();
    let stream = TcpStream::connect(&addr).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::post("/mcp")
        .header("host", &addr)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "hang")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let mut body = resp.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the progress event in time");
    let first = first.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    assert!(
        !HANG_CLOSED.load(Ordering::SeqCst),
        "the stream is open while the client reads"
    );
    drop((body, sender));
    conn.abort();
    let closed = async {
        while !HANG_CLOSED.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("the backend's stream closed once the client left");
    gw.stop().await;
}

/// `subscriptions/listen` is relayed to a 2026-07-28 backend only: a legacy one has nothing to
/// listen to, and it stays a 404 that starts no session.
#[tokio::test]
async fn a_legacy_backend_has_no_listen() {
    let gw = Gateway::start().await;
    let client = gw.client();
    let r = client
        .send(&client.body("subscriptions/listen", json!({}), &json!({})))
        .await;
    assert_eq!((r.status, r.error_code()), (404, -32601), "{:#}", r.body);
    // The era probe (which found the fixture legacy) is all it heard.
    let methods: Vec<Value> = gw
        .backend_received()
        .into_iter()
        .map(|m| m["method"].clone())
        .collect();
    assert_eq!(methods, [json!("server/discover")], "no session started");
    gw.stop().await;
}

/// The project's legacy server over Streamable HTTP, in a child process.
struct LegacyFixture {
    _child: tokio::process::Child,
    url: String,
}

impl LegacyFixture {
    async fn start() -> LegacyFixture {
        use tokio::io::AsyncBufReadExt;
        let log = scratch("relay-fixture").join("backend.log");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["legacy-server", "--http", "127.0.0.1:0", "--log"])
            .arg(&log)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the fixture");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the fixture says where it listens")
            .expect("read stdout")
            .expect("a line");
        let url = line
            .strip_prefix("listening on ")
            .expect("its address")
            .trim()
            .to_owned();
        LegacyFixture { _child: child, url }
    }
}

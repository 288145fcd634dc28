//! Backends scripted byte by byte, for what the fixture will not do: an error response whose
//! body never comes, a numbered event stream cut off mid-body, an `initialize` answered with a
//! later version than the one asked for, a stream that ends unanswered while its call is parked.
mod common;

use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as read off the wire.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    head: String,
    body: Value,
}

type Handler =
    Arc<dyn Fn(Req, TcpStream) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

async fn read_req(s: &mut TcpStream) -> Option<Req> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let len = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    let method = head.split(' ').next().unwrap_or("").to_owned();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Req { method, head, body })
}

/// A backend: one request per connection (each answer closes or stalls as the handler wants).
async fn backend(handler: Handler) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let h = handler.clone();
            tokio::spawn(async move {
                if let Some(req) = read_req(&mut s).await {
                    h(req, s).await;
                }
            });
        }
    });
    format!("http://{addr}/mcp")
}

fn json_resp(v: &Value, extra: &str) -> Vec<u8> {
    let body = v.to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An empty answer that closes its connection: to a notification or a response.
const ACCEPTED: &[u8] = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
/// No standalone GET stream here.
const NO_STREAM: &[u8] = b"HTTP/1.1 405 No\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// The head and first chunk of an event stream that asks for a name (`elicitation/create`,
/// id `ask-1`); the stream stays open until its last chunk is written, or its connection closed.
fn asking_stream() -> String {
    let ask = json!({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
        "params": {"message": "name?", "requestedSchema": {"type": "object",
        "properties": {"name": {"type": "string"}}}}});
    let ev = format!("event: message\ndata: {ask}\n\n");
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{ev}\r\n",
        ev.len()
    )
}

/// Answers `initialize` with 2025-11-25 and a session id.
async fn answer_initialize(req: &Req, s: &mut TcpStream) {
    let result = json!({"jsonrpc": "2.0", "id": req.body["id"], "result": {
        "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
        "serverInfo": {"name": "x", "version": "0"}}});
    let _ = s
        .write_all(&json_resp(&result, "mcp-session-id: s1\r\n"))
        .await;
}

async fn gw(kind: &str, url: &str) -> Gateway {
    gw_with(kind, url, "").await
}

async fn gw_with(kind: &str, url: &str, backend_lines: &str) -> Gateway {
    let extra = if kind == "http" {
        format!("standalone_stream = false\n{backend_lines}")
    } else {
        backend_lines.to_owned()
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[limits]\nrequest_timeout = \"1s\"\nqueue_wait = \"1s\"\n[[backend]]\nname = \"b\"\nkind = \"{kind}\"\nurl = \"{url}\"\npool_max = 1\n{extra}"
    );
    Gateway::from_config(&text, scratch("backend-faults").join("log")).await
}

/// `notifications/initialized` answered with a 500 whose body never comes: the session's start
/// goes on in bounded time (a notification's failure does not fail it), and its pool slot (the
/// only one) is free for the next call.
#[tokio::test]
async fn a_stalled_error_body_does_not_hold_the_start_or_its_slot() {
    let url = backend(Arc::new(|req: Req, mut s: TcpStream| {
        Box::pin(async move {
            match req.body["method"].as_str() {
                Some("initialize") => {
                    answer_initialize(&req, &mut s).await;
                }
                Some("notifications/initialized") => {
                    let _ = s
                        .write_all(b"HTTP/1.1 500 Oops\r\ncontent-length: 100\r\n\r\n")
                        .await;
                    std::future::pending::<()>().await;
                }
                _ => {
                    let list =
                        json!({"jsonrpc": "2.0", "id": req.body["id"], "result": {"tools": []}});
                    let _ = s.write_all(&json_resp(&list, "")).await;
                }
            }
        })
    }))
    .await;
    let gw = gw("http", &url).await;
    let c = gw.client();
    for _ in 0..2 {
        let r = tokio::time::timeout(
            Duration::from_secs(8),
            c.send(&c.body("tools/list", json!({}), &json!({}))),
        )
        .await
        .expect("answered, not hung on the error body");
        // A notification's failure does not fail the start; the call is served, and the slot
        // is free again for the next one (a stuck start would make it -31000).
        assert_eq!(r.result()["tools"], json!([]), "{:#}", r.body);
    }
    gw.stop().await;
}

/// 2024-11-05 SSE backend whose GET is answered 503 with a body that never comes.
#[tokio::test]
async fn a_stalled_error_body_on_the_sse_get_fails_the_call() {
    let url = backend(Arc::new(|_req: Req, mut s: TcpStream| {
        Box::pin(async move {
            let _ = s
                .write_all(b"HTTP/1.1 503 Busy\r\ncontent-length: 100\r\n\r\n")
                .await;
            std::future::pending::<()>().await;
        })
    }))
    .await;
    let gw = gw("sse", &url).await;
    let c = gw.client();
    let r = tokio::time::timeout(
        Duration::from_secs(8),
        c.send(&c.body("tools/list", json!({}), &json!({}))),
    )
    .await
    .expect("answered, not hung on the error body");
    assert_eq!(r.error_code(), -31001, "{:#}", r.body);
    gw.stop().await;
}

/// A POST stream (chunked, numbered events) cut off without its last chunk: a resumable
/// stream; the answer waits at GET + Last-Event-ID.
#[tokio::test]
async fn a_numbered_stream_cut_off_mid_body_is_resumed() {
    let gets = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // The id the gateway gave the call upstream, for the answer on the picked-up stream.
    let call_id = Arc::new(std::sync::Mutex::new(Value::Null));
    let (g, call) = (gets.clone(), call_id.clone());
    let url = backend(Arc::new(move |req: Req, mut s: TcpStream| {
        let (g, call) = (g.clone(), call.clone());
        Box::pin(async move {
            if req.method == "GET" {
                if req.head.to_ascii_lowercase().contains("last-event-id: e1") {
                    g.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let id = call.lock().unwrap().clone();
                    let ev = format!(
                        "id: e2\nevent: message\ndata: {}\n\n",
                        json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":"resumed"}]}})
                    );
                    let _ = s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{ev}", ev.len()).as_bytes()).await;
                } else {
                    let _ = s.write_all(NO_STREAM).await;
                }
                return;
            }
            match req.body["method"].as_str() {
                Some("initialize") => {
                    answer_initialize(&req, &mut s).await;
                }
                Some("tools/call") => {
                    *call.lock().unwrap() = req.body["id"].clone();
                    // `retry` short: the default of a second is the whole request timeout here.
                    let ev = "id: e1\nretry: 50\ndata: \n\n";
                    let chunk = format!("{:x}\r\n{ev}\r\n", ev.len());
                    let _ = s.write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{chunk}").as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // Cut off: no terminating chunk.
                    drop(s);
                }
                _ => {
                    let _ = s.write_all(ACCEPTED).await;
                }
            }
        })
    }))
    .await;
    let gw = gw("http", &url).await;
    let c = gw.client();
    let r = tokio::time::timeout(
        Duration::from_secs(8),
        c.call_tool("t", json!({}), &json!({})),
    )
    .await
    .expect("answers");
    assert_eq!(r.tool_json(), json!("resumed"));
    assert_eq!(gets.load(std::sync::atomic::Ordering::SeqCst), 1);
    gw.stop().await;
}

/// Asked for 2025-03-26, whose capabilities have no elicitation, a backend answers 2025-11-25.
/// It was never told the client can elicit, so its `elicitation/create` is refused upstream
/// rather than put to the client (who declared elicitation).
#[tokio::test]
async fn capabilities_are_what_the_backend_was_told_when_it_answers_a_later_version() {
    let told = Arc::new(std::sync::Mutex::new(Value::Null));
    let answers = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let (t, a) = (told.clone(), answers.clone());
    let url = backend(Arc::new(move |req: Req, mut s: TcpStream| {
        let (t, a) = (t.clone(), a.clone());
        Box::pin(async move {
            if req.method == "GET" {
                let _ = s.write_all(NO_STREAM).await;
                return;
            }
            match req.body["method"].as_str() {
                Some("initialize") => {
                    *t.lock().unwrap() = req.body["params"].clone();
                    answer_initialize(&req, &mut s).await;
                }
                Some("tools/call") => {
                    let _ = s.write_all(asking_stream().as_bytes()).await;
                    std::future::pending::<()>().await;
                }
                _ => {
                    if req.method == "POST" && req.body.get("method").is_none() {
                        a.lock().unwrap().push(req.body.clone());
                    }
                    let _ = s.write_all(ACCEPTED).await;
                }
            }
        })
    }))
    .await;
    let gw = gw_with("http", &url, "protocol_version = \"2025-03-26\"\n").await;
    let c = gw.client();
    let r = tokio::time::timeout(
        Duration::from_secs(8),
        c.call_tool("t", json!({}), &json!({"elicitation": {}})),
    )
    .await
    .expect("answers");
    assert_eq!(told.lock().unwrap()["protocolVersion"], "2025-03-26");
    assert_eq!(
        told.lock().unwrap()["capabilities"].get("elicitation"),
        None
    );
    // Not asked of the client: the backend, refused, never finishes the call.
    assert_eq!(r.error_code(), -31001, "{:#}", r.body);
    let refusal = {
        let answers = answers.lock().unwrap();
        assert_eq!(answers.len(), 1, "{answers:?}");
        answers[0].clone()
    };
    assert_eq!(refusal["id"], "ask-1");
    assert!(refusal["error"].is_object(), "{refusal:#}");
    gw.stop().await;
}

/// A parked call whose backend stream ends without its answer has failed: its session's slot
/// (the only one) goes back to the pool at once, not when the client returns or the park
/// expires, so the next call is served instead of waiting and being refused as busy.
#[tokio::test]
async fn a_call_that_fails_while_parked_frees_its_slot_at_once() {
    let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = starts.clone();
    let url = backend(Arc::new(move |req: Req, mut s: TcpStream| {
        let n = n.clone();
        Box::pin(async move {
            if req.method != "POST" {
                let _ = s.write_all(NO_STREAM).await;
                return;
            }
            match req.body["method"].as_str() {
                Some("initialize") => {
                    n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    answer_initialize(&req, &mut s).await;
                }
                Some("tools/call") => {
                    // Asks, then, once the call is parked, ends the stream without answering
                    // (and without event ids, so it cannot be picked up again).
                    let _ = s.write_all(asking_stream().as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    let _ = s.write_all(b"0\r\n\r\n").await;
                }
                Some("tools/list") => {
                    let list =
                        json!({"jsonrpc": "2.0", "id": req.body["id"], "result": {"tools": []}});
                    let _ = s.write_all(&json_resp(&list, "")).await;
                }
                _ => {
                    let _ = s.write_all(ACCEPTED).await;
                }
            }
        })
    }))
    .await;
    let gw = gw("http", &url).await;
    let c = gw.client();
    let parked = c
        .call_tool("t", json!({}), &json!({"elicitation": {}}))
        .await;
    assert_eq!(parked.result()["resultType"], "input_required");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = tokio::time::timeout(
        Duration::from_secs(8),
        c.send(&c.body("tools/list", json!({}), &json!({}))),
    )
    .await
    .expect("answers");
    assert_eq!(next.result()["tools"], json!([]), "{:#}", next.body);
    assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), 2);
    // The client, back, learns how its call ended.
    let key = parked.input_keys()[0].clone();
    let retry = c
        .retry_tool(
            "t",
            json!({}),
            &json!({"elicitation": {}}),
            json!({ key: {"action": "accept", "content": {"name": "Ada"}} }),
            &parked.state(),
        )
        .await;
    assert_eq!(retry.error_code(), -31001, "{:#}", retry.body);
    gw.stop().await;
}

//! The built-in legacy server over HTTP, driven by a small hyper client over loopback:
//! Streamable HTTP sessions, where each server push goes, resumption, batches, JSON answers,
//! DELETE and expiry, the 2024-11-05 HTTP+SSE transport, the deliberately broken tools, and
//! the command line.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use mrtr_fixture::{HttpOptions, Options, serve_http, serve_sse};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

/// The server running in this process on 127.0.0.1:0.
struct Fixture {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Fixture {
    async fn start(http: HttpOptions) -> Self {
        Self::start_with(
            Options {
                http,
                ..Options::default()
            },
            false,
        )
        .await
    }

    async fn start_with(opts: Options, sse: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            if sse {
                serve_sse(listener, opts, token).await
            } else {
                serve_http(listener, opts, token).await
            }
        });
        Self {
            addr,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("server stopped in time")
            .expect("server task")
            .expect("server outcome");
    }

    async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> hyper::Response<Incoming> {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("accept", "application/json, text/event-stream");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = req.body(Full::new(Bytes::from(body))).unwrap();
        tokio::time::timeout(WAIT, sender.send_request(req))
            .await
            .expect("answer in time")
            .expect("response")
    }

    /// Initializes a session at `version` declaring every client capability.
    async fn session(&self, version: &str) -> Session {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version,
            "capabilities": {"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "fixture-test", "version": "0"},
        }});
        let resp = self.request("POST", "/mcp", &[], Some(init)).await;
        assert_eq!(resp.status(), 200);
        let id = header(&resp, "mcp-session-id").expect("Mcp-Session-Id on initialize");
        let mut answer = first_message(resp).await;
        if let Value::Array(framed) = &mut answer {
            answer = framed.remove(0);
        }
        assert_eq!(answer["result"]["protocolVersion"], version);
        let session = Session {
            id,
            version: version.to_owned(),
        };
        let resp = self
            .post(
                &session,
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(resp.status(), 202);
        session
    }

    async fn post(&self, session: &Session, body: Value) -> hyper::Response<Incoming> {
        self.request(
            "POST",
            "/mcp",
            &[
                ("mcp-session-id", &session.id),
                ("mcp-protocol-version", &session.version),
            ],
            Some(body),
        )
        .await
    }

    async fn call(&self, session: &Session, id: i64, tool: &str, args: Value) -> Sse {
        let resp = self.post(session, tool_call(id, tool, args)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            header(&resp, "content-type").as_deref(),
            Some("text/event-stream")
        );
        Sse::new(resp)
    }

    /// Answers the server request `request` with `result`; the POST gets 202.
    async fn answer(&self, session: &Session, request: &Value, result: Value) {
        let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
        let resp = self.post(session, reply).await;
        assert_eq!(resp.status(), 202);
    }

    async fn get(
        &self,
        session: &Session,
        last_event_id: Option<&str>,
    ) -> hyper::Response<Incoming> {
        let mut headers = vec![("mcp-session-id", session.id.as_str())];
        if let Some(last) = last_event_id {
            headers.push(("last-event-id", last));
        }
        self.request("GET", "/mcp", &headers, None).await
    }
}

struct Session {
    id: String,
    version: String,
}

fn tool_call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

fn header(resp: &hyper::Response<Incoming>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn elicit_answer() -> Value {
    json!({"action": "accept", "content": {"name": "Ada"}})
}

fn sample_answer() -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"})
}

fn roots_answer() -> Value {
    json!({"roots": [{"uri": "file:///tmp/r", "name": "r"}]})
}

/// The text block of a tool result, parsed.
fn tool_output(response: &Value) -> Value {
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text block in {response}"));
    serde_json::from_str(text).unwrap()
}

async fn body_bytes(resp: hyper::Response<Incoming>) -> Bytes {
    tokio::time::timeout(WAIT, resp.into_body().collect())
        .await
        .expect("body in time")
        .expect("body")
        .to_bytes()
}

/// The single message of a JSON answer, or the first event of an SSE answer.
async fn first_message(resp: hyper::Response<Incoming>) -> Value {
    if header(&resp, "content-type").as_deref() == Some("application/json") {
        serde_json::from_slice(&body_bytes(resp).await).unwrap()
    } else {
        Sse::new(resp).message().await.expect("an event")
    }
}

#[derive(Debug)]
struct Event {
    id: Option<String>,
    event: String,
    data: String,
}

/// Reads an event stream incrementally.
struct Sse {
    body: Incoming,
    buf: Vec<u8>,
    scanned: usize,
    done: bool,
    saw_retry: bool,
    last_id: Option<String>,
}

impl Sse {
    fn new(resp: hyper::Response<Incoming>) -> Self {
        Self {
            body: resp.into_body(),
            buf: Vec::new(),
            scanned: 0,
            done: false,
            saw_retry: false,
            last_id: None,
        }
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(pos) = self.buf[self.scanned..]
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|p| p + self.scanned)
            {
                let block: Vec<u8> = self.buf.drain(..pos + 2).collect();
                self.scanned = 0;
                let block = String::from_utf8(block).unwrap();
                let mut event = Event {
                    id: None,
                    event: "message".to_owned(),
                    data: String::new(),
                };
                let mut has_data = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        event.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event.event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        event.data.push_str(v);
                        has_data = true;
                    } else if line.starts_with("retry: ") {
                        self.saw_retry = true;
                    }
                }
                if event.id.is_some() {
                    self.last_id.clone_from(&event.id);
                }
                if has_data {
                    return Some(event);
                }
                continue;
            }
            self.scanned = self.buf.len().saturating_sub(1);
            if self.done {
                return None;
            }
            match tokio::time::timeout(WAIT, self.body.frame())
                .await
                .expect("event stream progressed in time")
            {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => self.done = true,
            }
        }
    }

    async fn message(&mut self) -> Option<Value> {
        let event = self.next().await?;
        assert_eq!(event.event, "message");
        Some(serde_json::from_str(&event.data).unwrap())
    }

    /// Asserts that the stream ends without further events.
    async fn ends(&mut self) {
        if let Some(event) = self.next().await {
            panic!("expected the stream to end, got {event:?}");
        }
    }
}

#[tokio::test]
async fn sessions_are_created_by_initialize_and_required_afterwards() {
    let fx = Fixture::start(HttpOptions::default()).await;
    let session = fx.session("2025-06-18").await;
    assert!(session.id.len() >= 16);

    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let resp = fx.request("POST", "/mcp", &[], Some(list.clone())).await;
    assert_eq!(resp.status(), 400, "no session id");
    let resp = fx
        .request(
            "POST",
            "/mcp",
            &[("mcp-session-id", "nope")],
            Some(list.clone()),
        )
        .await;
    assert_eq!(resp.status(), 404, "unknown session id");
    let resp = fx
        .request(
            "POST",
            "/mcp",
            &[
                ("mcp-session-id", &session.id),
                ("mcp-protocol-version", "2026-07-28"),
            ],
            Some(list.clone()),
        )
        .await;
    assert_eq!(resp.status(), 400, "not a legacy protocol version");
    let resp = fx.request("GET", "/mcp", &[], None).await;
    assert_eq!(resp.status(), 400, "GET without session id");

    let answer = first_message(fx.post(&session, list).await).await;
    assert_eq!(answer["id"], 1);
    assert!(answer["result"]["tools"].as_array().unwrap().len() >= 10);
    fx.stop().await;
}

#[tokio::test]
async fn expire_forgets_every_session_even_with_a_call_parked() {
    let fx = Fixture::start(HttpOptions::default()).await;
    let a = fx.session("2025-06-18").await;
    let b = fx.session("2025-11-25").await;
    let mut parked = fx.call(&a, 1, "ask_form", json!({})).await;
    let ask = parked.message().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create");

    let resp = fx.request("POST", "/control/expire", &[], None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(first_message(resp).await["expired"], 2);
    parked.ends().await;
    for session in [&a, &b] {
        let resp = fx
            .post(
                session,
                json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
            )
            .await;
        assert_eq!(resp.status(), 404);
        assert_eq!(fx.get(session, None).await.status(), 404);
    }
    // A new session works as before.
    fx.session("2025-06-18").await;
    fx.stop().await;
}

#[tokio::test]
async fn each_push_rides_the_post_stream_of_the_request_it_belongs_to() {
    let fx = Fixture::start(HttpOptions::default()).await;
    let s = fx.session("2025-06-18").await;
    let mut get = Sse::new(fx.get(&s, None).await);
    let mut form = fx.call(&s, 1, "ask_form", json!({})).await;
    let mut sample = fx.call(&s, 2, "sample", json!({"prompt": "p"})).await;

    let ask = form.message().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create");
    let sampling = sample.message().await.unwrap();
    assert_eq!(sampling["method"], "sampling/createMessage");

    fx.answer(&s, &sampling, sample_answer()).await;
    let done = sample.message().await.unwrap();
    assert_eq!(done["id"], 2);
    assert_eq!(tool_output(&done)["text"], "hi");
    sample.ends().await;

    fx.answer(&s, &ask, elicit_answer()).await;
    let done = form.message().await.unwrap();
    assert_eq!(done["id"], 1);
    assert_eq!(tool_output(&done)["content"]["name"], "Ada");
    form.ends().await;

    // Nothing belonged to the GET stream; DELETE ends it.
    let resp = fx
        .request("DELETE", "/mcp", &[("mcp-session-id", &s.id)], None)
        .await;
    assert_eq!(resp.status(), 200);
    get.ends().await;
    fx.stop().await;
}

#[tokio::test]
async fn push_on_get_sends_server_requests_on_the_get_stream() {
    let fx = Fixture::start(HttpOptions {
        push_on_get: true,
        ..HttpOptions::default()
    })
    .await;
    let s = fx.session("2025-11-25").await;
    let mut post = fx.call(&s, 7, "ask_form", json!({})).await;
    // Pushed before any GET is open: it waits for one.
    let mut get = Sse::new(fx.get(&s, None).await);
    assert_eq!(
        fx.get(&s, None).await.status(),
        409,
        "one GET stream per session"
    );
    let ask = get.message().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create");
    fx.answer(&s, &ask, elicit_answer()).await;
    let done = post.message().await.unwrap();
    assert_eq!(done["id"], 7);
    assert_eq!(tool_output(&done)["action"], "accept");
    post.ends().await;
    fx.stop().await;
}

#[tokio::test]
async fn close_post_early_is_resumed_with_last_event_id() {
    let dir = std::env::temp_dir().join(format!("mrtr-fixture-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.jsonl");
    let _ = std::fs::remove_file(&log);
    let fx = Fixture::start_with(
        Options {
            log: Some(log.clone()),
            http: HttpOptions {
                close_post_early: true,
                ..HttpOptions::default()
            },
            ..Options::default()
        },
        false,
    )
    .await;
    let s = fx.session("2025-06-18").await;
    let mut post = fx.call(&s, 3, "all_three", json!({})).await;
    let ask = post.message().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create");
    assert!(post.saw_retry, "retry sent first");
    let last = post.last_id.clone().expect("events carry ids");
    post.ends().await;

    // The answer makes the tool move on while no stream carries its messages.
    fx.answer(&s, &ask, elicit_answer()).await;
    let resp = fx.get(&s, Some(&last)).await;
    assert_eq!(resp.status(), 200);
    let mut resumed = Sse::new(resp);
    let sampling = resumed.message().await.unwrap();
    assert_eq!(sampling["method"], "sampling/createMessage");
    assert_ne!(resumed.last_id.as_deref(), Some(last.as_str()));
    fx.answer(&s, &sampling, sample_answer()).await;
    let roots = resumed.message().await.unwrap();
    assert_eq!(roots["method"], "roots/list");
    fx.answer(&s, &roots, roots_answer()).await;
    let done = resumed.message().await.unwrap();
    assert_eq!(done["id"], 3);
    assert_eq!(tool_output(&done)["roots"][0], "file:///tmp/r");
    resumed.ends().await;

    // Two pushes at once: the stream ends after the first, the second is replayed.
    let mut post = fx.call(&s, 4, "pair", json!({})).await;
    let first = post.message().await.unwrap();
    let last = post.last_id.clone().unwrap();
    post.ends().await;
    let mut resumed = Sse::new(fx.get(&s, Some(&last)).await);
    let second = resumed.message().await.unwrap();
    let mut methods = [first["method"].as_str(), second["method"].as_str()];
    methods.sort_unstable();
    assert_eq!(
        methods,
        [Some("elicitation/create"), Some("sampling/createMessage")]
    );
    for ask in [&first, &second] {
        let answer = if ask["method"] == "elicitation/create" {
            elicit_answer()
        } else {
            sample_answer()
        };
        fx.answer(&s, ask, answer).await;
    }
    let done = resumed.message().await.unwrap();
    assert_eq!(done["id"], 4);
    resumed.ends().await;
    fx.stop().await;

    let text = std::fs::read_to_string(&log).unwrap();
    let resumes: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["dir"] == "http" && v["method"] == "GET")
        .collect();
    assert_eq!(resumes.len(), 2);
    assert_eq!(resumes[1]["lastEventId"], last.as_str());
    assert_eq!(resumes[1]["session"], s.id.as_str());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits until request `id` of session `s` has had its response written (or dropped): until
/// then the server refuses another request with the same id.
async fn until_settled(fx: &Fixture, s: &Session, id: i64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        let resp = fx.post(s, ping).await;
        if resp.status() == 200 {
            assert_eq!(first_message(resp).await["id"], id);
            return;
        }
        assert_eq!(resp.status(), 400, "request {id} still in flight");
        assert!(
            tokio::time::Instant::now() < deadline,
            "request {id} never settled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn drop_unattached_loses_what_is_written_before_a_pick_up_and_carries_what_comes_after() {
    // The server ends each POST stream after its first push, so the stream is let go at a
    // known point; what it writes for the request until a GET picks the stream up is lost.
    let fx = Fixture::start(HttpOptions {
        close_post_early: true,
        drop_unattached: true,
        ..HttpOptions::default()
    })
    .await;
    let s = fx.session("2025-11-25").await;
    let ask_and_let_go = async |id: i64| {
        let mut post = fx.call(&s, id, "ask_form", json!({})).await;
        let ask = post.message().await.unwrap();
        assert_eq!(ask["method"], "elicitation/create");
        let last = post.last_id.clone().expect("events carry ids");
        post.ends().await;
        (ask, last)
    };

    // The answer first: the tool's result is written while no connection carries the stream,
    // and the pick-up finds nothing.
    let (ask, last) = ask_and_let_go(1).await;
    fx.answer(&s, &ask, elicit_answer()).await;
    until_settled(&fx, &s, 1).await;
    let resp = fx.get(&s, Some(&last)).await;
    assert_eq!(resp.status(), 200);
    Sse::new(resp).ends().await;

    // The pick-up first: the result rides the picked-up stream.
    let (ask, last) = ask_and_let_go(2).await;
    let resp = fx.get(&s, Some(&last)).await;
    assert_eq!(resp.status(), 200);
    let mut resumed = Sse::new(resp);
    fx.answer(&s, &ask, elicit_answer()).await;
    let done = resumed.message().await.unwrap();
    assert_eq!(done["id"], 2);
    assert_eq!(tool_output(&done), elicit_answer());
    resumed.ends().await;
    fx.stop().await;
}

#[tokio::test]
async fn batches_are_accepted_and_batch_framing_wraps_every_message() {
    let fx = Fixture::start(HttpOptions::default()).await;
    let s = fx.session("2025-03-26").await;
    let batch = json!([
        tool_call(10, "echo", json!({"text": "a"})),
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        tool_call(11, "echo", json!({"text": "b"})),
    ]);
    let mut sse = Sse::new(fx.post(&s, batch).await);
    let mut ids = vec![
        sse.message().await.unwrap()["id"].as_i64().unwrap(),
        sse.message().await.unwrap()["id"].as_i64().unwrap(),
    ];
    ids.sort_unstable();
    assert_eq!(ids, [10, 11]);
    sse.ends().await;
    let notes = json!([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]);
    assert_eq!(fx.post(&s, notes).await.status(), 202);
    fx.stop().await;

    let fx = Fixture::start(HttpOptions {
        batch_responses: true,
        ..HttpOptions::default()
    })
    .await;
    let s = fx.session("2025-03-26").await;
    let mut sse = fx.call(&s, 1, "echo", json!({"text": "x"})).await;
    let framed = sse.message().await.unwrap();
    assert_eq!(framed[0]["id"], 1);
    assert_eq!(tool_output(&framed[0])["echo"], "x");
    fx.stop().await;
}

#[tokio::test]
async fn json_response_answers_in_one_body_and_pushes_on_get() {
    let fx = Fixture::start(HttpOptions {
        json_response: true,
        ..HttpOptions::default()
    })
    .await;
    let s = fx.session("2025-06-18").await;
    let resp = fx
        .post(&s, tool_call(1, "echo", json!({"text": "j"})))
        .await;
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json")
    );
    let answer: Value = serde_json::from_slice(&body_bytes(resp).await).unwrap();
    assert_eq!(tool_output(&answer)["echo"], "j");

    let mut get = Sse::new(fx.get(&s, None).await);
    let post = fx.post(&s, tool_call(2, "ask_form", json!({})));
    let (resp, ask) = tokio::join!(post, async {
        let ask = get.message().await.unwrap();
        assert_eq!(ask["method"], "elicitation/create");
        fx.answer(&s, &ask, elicit_answer()).await;
        ask
    });
    assert_eq!(ask["params"]["requestedSchema"]["required"][0], "name");
    let answer: Value = serde_json::from_slice(&body_bytes(resp).await).unwrap();
    assert_eq!(answer["id"], 2);
    assert_eq!(tool_output(&answer)["content"]["name"], "Ada");
    fx.stop().await;
}

#[tokio::test]
async fn misbehaving_tools_break_only_their_own_post() {
    let fx = Fixture::start(HttpOptions::default()).await;
    let s = fx.session("2025-06-18").await;

    let resp = fx.post(&s, tool_call(1, "garbage", json!({}))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(&body_bytes(resp).await[..], b"this is not json{");

    let resp = fx.post(&s, tool_call(2, "html", json!({}))).await;
    assert!(
        header(&resp, "content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(String::from_utf8_lossy(&body_bytes(resp).await).contains("<html>"));

    let mut huge = fx
        .call(&s, 3, "huge_event", json!({"bytes": 100_000}))
        .await;
    assert_eq!(huge.next().await.unwrap().data.len(), 100_000);
    let mut huge = fx.call(&s, 4, "huge_event", json!({})).await;
    assert_eq!(huge.next().await.unwrap().data.len(), 8 * 1024 * 1024);

    let mut stray = fx.call(&s, 5, "stray_response", json!({})).await;
    let msg = stray.message().await.unwrap();
    assert!(msg.get("result").is_some());
    assert_ne!(msg["id"], 5);
    stray.ends().await;

    let mut ok = fx.call(&s, 6, "echo", json!({"text": "still here"})).await;
    assert_eq!(
        tool_output(&ok.message().await.unwrap())["echo"],
        "still here"
    );
    fx.stop().await;
}

#[tokio::test]
async fn sse_transport_announces_the_endpoint_and_answers_on_the_stream() {
    let fx = Fixture::start_with(Options::default(), true).await;
    let mut stream = Sse::new(fx.request("GET", "/sse", &[], None).await);
    let endpoint = stream.next().await.unwrap();
    assert_eq!(endpoint.event, "endpoint");
    assert!(endpoint.data.starts_with("/messages?session_id="));

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {"roots": {}},
        "clientInfo": {"name": "t", "version": "0"}}});
    let resp = fx.request("POST", &endpoint.data, &[], Some(init)).await;
    assert_eq!(resp.status(), 202);
    let answer = stream.message().await.unwrap();
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        fx.request("POST", &endpoint.data, &[], Some(note))
            .await
            .status(),
        202
    );
    let call = tool_call(2, "list_roots", json!({}));
    assert_eq!(
        fx.request("POST", &endpoint.data, &[], Some(call))
            .await
            .status(),
        202
    );
    let ask = stream.message().await.unwrap();
    assert_eq!(ask["method"], "roots/list");
    let reply = json!({"jsonrpc": "2.0", "id": ask["id"], "result": roots_answer()});
    assert_eq!(
        fx.request("POST", &endpoint.data, &[], Some(reply))
            .await
            .status(),
        202
    );
    let done = stream.message().await.unwrap();
    assert_eq!(tool_output(&done)["roots"][0], "file:///tmp/r");

    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    let resp = fx
        .request(
            "POST",
            "/messages?session_id=unknown",
            &[],
            Some(ping.clone()),
        )
        .await;
    assert_eq!(resp.status(), 404);

    // Closing the stream ends the session.
    drop(stream);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let resp = fx
            .request("POST", &endpoint.data, &[], Some(ping.clone()))
            .await;
        if resp.status() == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session outlived its stream"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fx.stop().await;

    let fx = Fixture::start_with(
        Options {
            http: HttpOptions {
                no_endpoint: true,
                ..HttpOptions::default()
            },
            ..Options::default()
        },
        true,
    )
    .await;
    let resp = fx.request("GET", "/sse", &[], None).await;
    assert_eq!(resp.status(), 200);
    let mut stream = Sse::new(resp);
    let resp = fx.request("POST", "/control/expire", &[], None).await;
    assert_eq!(first_message(resp).await["expired"], 1);
    stream.ends().await;
    fx.stop().await;
}

#[tokio::test]
async fn binary_prints_its_url_and_logs_every_http_request() {
    let dir = std::env::temp_dir().join(format!("mrtr-fixture-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.jsonl");
    let _ = std::fs::remove_file(&log);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["legacy-server", "--http", "127.0.0.1:0", "--log"])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("listening line in time")
        .unwrap()
        .unwrap();
    let url = line.strip_prefix("listening on http://").expect(&line);
    let addr: SocketAddr = url.strip_suffix("/mcp").expect(url).parse().unwrap();
    let fx = Fixture {
        addr,
        shutdown: CancellationToken::new(),
        task: tokio::spawn(async { Ok(()) }),
    };
    let s = fx.session("2025-11-25").await;
    let resp = fx
        .request(
            "DELETE",
            "/mcp",
            &[("mcp-session-id", &s.id), ("authorization", "Bearer t0k")],
            None,
        )
        .await;
    assert_eq!(resp.status(), 200);

    let text = std::fs::read_to_string(&log).unwrap();
    let http: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["dir"] == "http")
        .collect();
    assert_eq!(http.len(), 3, "{text}");
    assert_eq!(http[0]["method"], "POST");
    assert_eq!(http[0]["session"], Value::Null);
    assert_eq!(http[1]["protocolVersion"], "2025-11-25");
    assert_eq!(http[2]["method"], "DELETE");
    assert_eq!(http[2]["session"], s.id.as_str());
    assert_eq!(http[2]["authorization"], "Bearer t0k");
    assert_eq!(http[2]["lastEventId"], Value::Null);
    assert_eq!(http[2]["pid"], child.id().unwrap());
    assert!(text.contains(r#""dir":"in""#), "message log kept too");

    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn progress_rides_its_request_and_unattributed_pushes_wait_for_get() {
    let fx = Fixture::start_with(
        Options {
            roots_on_init: true,
            ..Options::default()
        },
        false,
    )
    .await;
    let s = fx.session("2025-06-18").await;
    let call = |id: i64, token: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "progress", "arguments": {"steps": 3}, "_meta": {"progressToken": token}}})
    };
    let mut a = Sse::new(fx.post(&s, call(1, "a")).await);
    let mut b = Sse::new(fx.post(&s, call(2, "b")).await);
    for (sse, token, id) in [(&mut a, "a", 1), (&mut b, "b", 2)] {
        let mut seen = 0;
        while let Some(msg) = sse.message().await {
            if msg["method"] == "notifications/progress" {
                assert_eq!(msg["params"]["progressToken"], token);
                seen += 1;
            } else {
                assert_eq!(msg["id"], id);
                assert_eq!(tool_output(&msg)["steps"], 3);
            }
        }
        assert_eq!(
            seen, 3,
            "every progress notification on its own request's stream"
        );
    }
    // The roots/list the server sent on its own after `initialized` waited for a GET.
    let mut get = Sse::new(fx.get(&s, None).await);
    let ask = get.message().await.unwrap();
    assert_eq!(ask["method"], "roots/list");
    fx.answer(&s, &ask, roots_answer()).await;
    let mut sse = fx.call(&s, 3, "list_roots", json!({})).await;
    let ask = sse.message().await.unwrap();
    fx.answer(&s, &ask, roots_answer()).await;
    let done = sse.message().await.unwrap();
    assert_eq!(tool_output(&done)["cachedRoots"][0], "file:///tmp/r");
    fx.stop().await;
}

#[tokio::test]
async fn a_cancelled_request_ends_its_stream_without_a_response() {
    let fx = Fixture::start(HttpOptions::default()).await;
    let s = fx.session("2025-06-18").await;
    let mut get = Sse::new(fx.get(&s, None).await);
    let mut sse = fx.call(&s, 9, "ask_form", json!({})).await;
    assert_eq!(sse.message().await.unwrap()["method"], "elicitation/create");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 9, "reason": "user"}});
    assert_eq!(fx.post(&s, cancel).await.status(), 202);
    sse.ends().await;
    // The server withdraws its own request; that belongs to no live request any more.
    let withdrawn = get.message().await.unwrap();
    assert_eq!(withdrawn["method"], "notifications/cancelled");
    // The id is free again.
    let mut again = fx.call(&s, 9, "echo", json!({"text": "again"})).await;
    assert_eq!(
        tool_output(&again.message().await.unwrap())["echo"],
        "again"
    );
    fx.stop().await;
}

#[tokio::test]
async fn crash_tool_takes_the_http_server_down_with_status_3() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["legacy-server", "--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("listening line in time")
        .unwrap()
        .unwrap();
    let url = line.strip_prefix("listening on http://").expect(&line);
    let fx = Fixture {
        addr: url.strip_suffix("/mcp").expect(url).parse().unwrap(),
        shutdown: CancellationToken::new(),
        task: tokio::spawn(async { Ok(()) }),
    };
    let s = fx.session("2025-06-18").await;
    let resp = fx.post(&s, tool_call(1, "crash", json!({}))).await;
    drop(resp);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("server exited in time")
        .unwrap();
    assert_eq!(status.code(), Some(3));
}

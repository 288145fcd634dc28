//! A minimal legacy (2025-11-25) Streamable HTTP client over real sockets, for the gateway's
//! legacy face: `initialize` and its `Mcp-Session-Id`, POSTs whose answers are read event by
//! event (a request's stream may carry requests to answer before its response), GET and DELETE.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// The capabilities a client that takes every request of a backend declares at `initialize`.
pub fn caps() -> Value {
    json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}})
}

/// A tool result's text, read as JSON where it is (the fixture's tools answer JSON text).
pub fn tool_text(response: &Value) -> Value {
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {response:#}"));
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

/// What such a client answers each request of the backend with: the name Ada, a sample, its
/// one root.
pub fn answers(request: &Value) -> Value {
    match request["method"].as_str() {
        Some("elicitation/create") => json!({"action": "accept", "content": {"name": "Ada"}}),
        Some("sampling/createMessage") => json!({"role": "assistant",
            "content": {"type": "text", "text": "sampled by ada"}, "model": "test-model"}),
        Some("roots/list") => json!({"roots": [{"uri": "file:///ada"}]}),
        other => panic!("unexpected request {other:?}"),
    }
}

/// One legacy client: the gateway's URL, its credential, and its session once initialized.
#[derive(Clone)]
pub struct Legacy {
    pub url: String,
    pub authorization: Option<String>,
    pub session: Option<String>,
}

/// An answer read as it comes: a JSON body, or an event stream.
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    is_stream: bool,
    buffer: String,
    /// The JSON body, once read (not an event stream).
    pub json: Option<Value>,
    /// The id of the last event read, if it had one.
    pub last_event_id: Option<String>,
}

impl Answer {
    /// The next message: the JSON body (once), or the next event of the stream; `None` at the
    /// end.
    pub async fn next(&mut self) -> Option<Value> {
        if !self.is_stream {
            if self.json.is_none() {
                let bytes = tokio::time::timeout(WAIT, (&mut self.body).collect())
                    .await
                    .expect("body in time")
                    .ok()?
                    .to_bytes();
                self.json = Some(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
                return self.json.clone();
            }
            return None;
        }
        let (_, data) = self.event().await?;
        serde_json::from_str(&data).ok()
    }

    /// The next event of an event stream with data: its name (`message` when it has none) and
    /// its data; `None` at the end.
    pub async fn event(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(id) = event.lines().find_map(|l| l.strip_prefix("id:")) {
                    self.last_event_id = Some(id.trim().to_owned());
                }
                let field = |name: &str| -> Vec<String> {
                    event
                        .lines()
                        .filter_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_owned())
                        .collect()
                };
                let data = field("data:");
                if data.is_empty() {
                    continue;
                }
                let name = field("event:").pop().unwrap_or_else(|| "message".into());
                return Some((name, data.join("\n")));
            }
            let frame = tokio::time::timeout(WAIT, self.body.frame())
                .await
                .expect("an event in time")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buffer.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }

    /// The JSON body (not an event stream).
    pub async fn json(mut self) -> Value {
        self.next().await.unwrap_or(Value::Null)
    }
}

impl Legacy {
    pub fn new(url: &str) -> Legacy {
        Legacy {
            url: url.to_owned(),
            authorization: None,
            session: None,
        }
    }

    pub fn with_authorization(mut self, value: &str) -> Legacy {
        self.authorization = Some(value.to_owned());
        self
    }

    /// Sends one HTTP request with the session's headers (and `extra`).
    pub async fn send(&self, method: &str, body: Option<&Value>, extra: &[(&str, &str)]) -> Answer {
        let uri: http::Uri = self.url.parse().expect("url");
        let addr = format!(
            "{}:{}",
            uri.host().expect("host"),
            uri.port_u16().expect("port")
        );
        let stream = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header("host", &addr)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(a) = &self.authorization {
            req = req.header("authorization", a);
        }
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        let bytes = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let req = req.body(Full::new(Bytes::from(bytes))).expect("request");
        let resp = tokio::time::timeout(WAIT, sender.send_request(req))
            .await
            .expect("answered in time")
            .expect("response");
        let headers = resp.headers().clone();
        let is_stream = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        Answer {
            status: resp.status().as_u16(),
            headers,
            body: resp.into_body(),
            is_stream,
            buffer: String::new(),
            json: None,
            last_event_id: None,
        }
    }

    pub async fn post(&self, body: &Value) -> Answer {
        self.send("POST", Some(body), &[]).await
    }

    /// `initialize` at `version` with `capabilities`; keeps the session id it gets (and forgets
    /// any before it). Returns the
    /// whole JSON-RPC answer.
    pub async fn initialize(&mut self, version: &str, capabilities: Value) -> (u16, Value) {
        // A new session starts without the old one's id.
        self.session = None;
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "legacy-test", "version": "1"}}});
        let answer = self.post(&body).await;
        let status = answer.status;
        if let Some(sid) = answer.headers.get("mcp-session-id") {
            self.session = Some(sid.to_str().expect("ascii").to_owned());
        }
        let json = answer.json().await;
        if self.session.is_some() {
            let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let ack = self.post(&done).await;
            assert_eq!(ack.status, 202, "notifications/initialized is accepted");
        }
        (status, json)
    }

    /// A request's answer, with `answer` giving the reply to each request the backend sends on
    /// its stream. Returns the response and the requests seen.
    pub async fn call(
        &self,
        id: u64,
        method: &str,
        params: Value,
        answer: impl Fn(&Value) -> Value,
    ) -> (Value, Vec<Value>) {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut stream = self.post(&body).await;
        assert_eq!(stream.status, 200, "a session's request is answered");
        let mut seen = Vec::new();
        while let Some(msg) = stream.next().await {
            if msg.get("method").is_some() && msg.get("id").is_some() {
                let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": answer(&msg)});
                let ack = self.post(&reply).await;
                assert_eq!(ack.status, 202, "the response to {msg} is accepted");
                seen.push(msg);
            } else if msg.get("method").is_some() {
                seen.push(msg);
            } else {
                return (msg, seen);
            }
        }
        panic!("the answer to {method} ended without a response");
    }
}

//! Test harness: a gateway started in-process on 127.0.0.1:0 in front of real backend child
//! processes (the built-in legacy server, run from this crate's binary), a small 2026-07-28
//! client speaking real HTTP over loopback, and a reader for the backend's message log.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use mrtr_gateway::app::{self, Running};
use mrtr_gateway::config::Config;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub const MODERN: &str = "2026-07-28";

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// A scratch directory unique to this test run.
pub fn scratch(name: &str) -> PathBuf {
    let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("mrtr-test-{}-{}-{n}", std::process::id(), name));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A running gateway with the built-in legacy server as a stdio backend.
pub struct Gateway {
    pub running: Option<Running>,
    pub url: String,
    pub log: PathBuf,
    dir: PathBuf,
}

pub struct Options {
    /// Extra flags for `mrtr-gateway legacy-server`.
    pub server_args: Vec<String>,
    /// TOML inserted before the [[backend]] table (e.g. `[state]` settings).
    pub extra: String,
    /// Lines added to the [[backend]] table.
    pub backend_extra: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            server_args: vec![],
            extra: String::new(),
            backend_extra: "pool_max = 64\n".into(),
        }
    }
}

impl Options {
    /// For calls whose backend sends two requests back to back (`pair`) and expects them in one
    /// round: a coalescing window wide enough that a backend child starved of a CPU by the
    /// tests running beside it still gets its second request in (the default is 10 ms).
    pub fn one_round_for_a_pair() -> Options {
        Options {
            extra: "[state]\ncoalesce_window = \"250ms\"\n".into(),
            ..Default::default()
        }
    }
}

impl Gateway {
    pub async fn start() -> Gateway {
        Gateway::with(Options::default()).await
    }

    pub async fn with(opts: Options) -> Gateway {
        let dir = scratch("gw");
        let log = dir.join("backend.log");
        let mut args = vec!["legacy-server".to_owned()];
        args.extend(opts.server_args);
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{extra}\n[[backend]]\nname = \"fixture\"\ncommand = {cmd:?}\nargs = {args:?}\nenv = {{ MRTR_LEGACY_LOG = {log:?} }}\n{backend_extra}",
            extra = opts.extra,
            cmd = env!("CARGO_BIN_EXE_mrtr-gateway"),
            log = log.display().to_string(),
            backend_extra = opts.backend_extra,
        );
        let config =
            Config::parse(&text, None).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
        let running = app::start(config, mrtr_gateway::shard::Shards::none())
            .await
            .expect("gateway starts");
        let url = running.urls()[0].clone();
        Gateway {
            running: Some(running),
            url,
            log,
            dir,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url)
    }

    pub fn parked(&self) -> usize {
        self.running.as_ref().expect("running").bridge().parked()
    }

    /// Every message the backend children received (dir "in") or sent ("out").
    pub fn backend_log(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Messages the backends received, as JSON-RPC values.
    pub fn backend_received(&self) -> Vec<Value> {
        self.backend_log()
            .into_iter()
            .filter(|e| e["dir"] == "in")
            .map(|e| e["msg"].clone())
            .collect()
    }

    /// Waits until `pred` holds for the backend log, or panics after `secs`.
    pub async fn wait_log(&self, secs: u64, what: &str, pred: impl Fn(&[Value]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            if pred(&self.backend_received()) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for: {what}\nlog: {:#?}",
                    self.backend_received()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What came back from one POST.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub headers: http::HeaderMap,
    /// The final JSON-RPC message (the JSON body, or the last SSE event).
    pub body: Value,
    /// SSE events before the final one.
    pub notifications: Vec<Value>,
}

impl Reply {
    pub fn result(&self) -> &Value {
        assert!(
            self.body.get("error").is_none(),
            "expected a result, got {:#}",
            self.body
        );
        &self.body["result"]
    }

    pub fn error_code(&self) -> i64 {
        self.body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("expected an error, got {:#}", self.body))
    }

    /// The error's message (empty if there is none).
    pub fn error_message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }

    /// The tool result text, parsed as JSON (the built-in server's tools answer JSON text).
    pub fn tool_json(&self) -> Value {
        let r = self.result();
        assert_eq!(r["resultType"], "complete", "{r:#}");
        let text = r["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text content: {r:#}"));
        serde_json::from_str(text).unwrap_or_else(|_| json!(text))
    }

    pub fn state(&self) -> String {
        let r = self.result();
        assert_eq!(r["resultType"], "input_required", "{r:#}");
        r["requestState"].as_str().expect("requestState").to_owned()
    }

    pub fn input_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.result()["inputRequests"]
            .as_object()
            .expect("inputRequests")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// The input key whose request has this method.
    pub fn key_for(&self, method: &str) -> String {
        self.result()["inputRequests"]
            .as_object()
            .expect("inputRequests")
            .iter()
            .find(|(_, v)| v["method"] == method)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| panic!("no {method} in {:#}", self.body))
    }
}

/// A minimal 2026-07-28 Streamable HTTP client over real sockets.
#[derive(Clone)]
pub struct Client {
    pub url: String,
    pub authorization: Option<String>,
    next_id: std::sync::Arc<AtomicU64>,
}

pub fn caps_all() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})
}

impl Client {
    pub fn new(url: &str) -> Client {
        Client {
            url: url.to_owned(),
            authorization: None,
            next_id: std::sync::Arc::new(AtomicU64::new(1)),
        }
    }

    pub fn with_principal(mut self, token: &str) -> Client {
        self.authorization = Some(format!("Bearer {token}"));
        self
    }

    pub fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Builds a request body with the required `_meta`.
    pub fn body(&self, method: &str, mut params: Value, caps: &Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "mrtr-test", "version": "0"},
        });
        json!({"jsonrpc": "2.0", "id": self.id(), "method": method, "params": params})
    }

    /// Posts a body with headers derived from it (the conforming case).
    pub async fn send(&self, body: &Value) -> Reply {
        let mut headers = vec![("MCP-Protocol-Version".to_owned(), MODERN.to_owned())];
        if let Some(m) = body["method"].as_str() {
            headers.push(("Mcp-Method".into(), m.to_owned()));
            let name = body["params"]["name"]
                .as_str()
                .or(body["params"]["uri"].as_str());
            if let (true, Some(n)) = (
                matches!(m, "tools/call" | "prompts/get" | "resources/read"),
                name,
            ) {
                headers.push(("Mcp-Name".into(), n.to_owned()));
            }
        }
        let bytes = serde_json::to_vec(body).expect("serialize");
        self.post_raw("POST", Bytes::from(bytes), &headers).await
    }

    pub async fn call_tool(&self, name: &str, args: Value, caps: &Value) -> Reply {
        self.send(&self.body("tools/call", json!({"name": name, "arguments": args}), caps))
            .await
    }

    /// Retries a tools/call with answers and the state.
    pub async fn retry_tool(
        &self,
        name: &str,
        args: Value,
        caps: &Value,
        responses: Value,
        state: &str,
    ) -> Reply {
        let params = json!({"name": name, "arguments": args, "inputResponses": responses, "requestState": state});
        self.send(&self.body("tools/call", params, caps)).await
    }

    /// Retries `first`, an `ask_form` call with `args` from a client that declared form
    /// elicitation, answering "Ada" to the elicitation it asked.
    pub async fn answer_ada(&self, args: Value, first: &Reply) -> Reply {
        let key = first.key_for("elicitation/create");
        self.retry_tool(
            "ask_form",
            args,
            &json!({"elicitation": {}}),
            json!({ key: accept(json!({"name": "Ada"})) }),
            &first.state(),
        )
        .await
    }

    /// Sends raw bytes with exactly these headers (for validation tests).
    pub async fn post_raw(&self, method: &str, body: Bytes, headers: &[(String, String)]) -> Reply {
        let uri: http::Uri = self.url.parse().expect("url");
        let addr = format!(
            "{}:{}",
            uri.host().expect("host"),
            uri.port_u16().expect("port")
        );
        let stream = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect to gateway");
        let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .expect("http handshake");
        tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(uri.path())
            .header("host", &addr)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(a) = &self.authorization {
            req = req.header("authorization", a);
        }
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(Full::new(body)).expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
            .await
            .expect("gateway answered in time")
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let bytes = tokio::time::timeout(Duration::from_secs(60), resp.into_body().collect())
            .await
            .expect("body in time")
            .expect("body")
            .to_bytes();
        let (body, notifications) = if content_type.starts_with("text/event-stream") {
            let mut events = parse_sse(&bytes);
            let last = events.pop().unwrap_or(Value::Null);
            (last, events)
        } else if bytes.is_empty() {
            (Value::Null, vec![])
        } else {
            (
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes))),
                vec![],
            )
        };
        Reply {
            status,
            content_type,
            headers,
            body,
            notifications,
        }
    }
}

/// The JSON data of each SSE event.
pub fn parse_sse(bytes: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(bytes);
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                None
            } else {
                serde_json::from_str(&data.join("\n")).ok()
            }
        })
        .collect()
}

/// An accepted form elicitation answer.
pub fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

pub fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "test-model"})
}

pub fn roots(uris: &[&str]) -> Value {
    json!({"roots": uris.iter().map(|u| json!({"uri": u})).collect::<Vec<_>>()})
}

impl Gateway {
    /// A gateway from a whole config text (`[server] listen` should be `127.0.0.1:0`); `log` is
    /// the backend's message log.
    pub async fn from_config(text: &str, log: PathBuf) -> Gateway {
        let config =
            Config::parse(text, None).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
        let running = app::start(config, mrtr_gateway::shard::Shards::none())
            .await
            .expect("gateway starts");
        let url = running.urls()[0].clone();
        let dir = log
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| scratch("gw"));
        Gateway {
            running: Some(running),
            url,
            log,
            dir,
        }
    }

    /// Upstream sessions open now on the first backend.
    pub fn open_sessions(&self) -> usize {
        self.running
            .as_ref()
            .expect("running")
            .bridge()
            .pool(0)
            .open_sessions()
    }
}

/// TOML that turns the admin listener on, on a free loopback port.
pub const ADMIN_ON: &str = "[admin]\nlisten = \"127.0.0.1:0\"\n";

impl Gateway {
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        self.running
            .as_ref()
            .expect("running")
            .admin_addr()
            .expect("admin listener configured")
    }

    /// Scrapes `/metrics` from the admin listener.
    pub async fn scrape(&self) -> Scrape {
        let (status, headers, body) = admin_request(self.admin_addr(), "GET", "/metrics").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            headers["content-type"], "text/plain; version=0.0.4; charset=utf-8",
            "Prometheus text format"
        );
        Scrape::parse(&body)
    }
}

/// One plain HTTP/1.1 request to the admin listener: (status, headers, body).
pub async fn admin_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> (u16, http::HeaderMap, String) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to admin");
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("http handshake");
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(30), sender.send_request(req))
        .await
        .expect("admin answered in time")
        .expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// A parsed Prometheus text exposition: every sample by name and label set.
#[derive(Debug, Clone)]
pub struct Scrape {
    samples: Vec<(String, std::collections::BTreeMap<String, String>, f64)>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad sample line: {line}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in: {line}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), Default::default()),
                Some((name, rest)) => {
                    let body = rest
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("bad labels in: {line}"));
                    let labels = body
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|pair| {
                            let (k, v) = pair
                                .split_once("=\"")
                                .unwrap_or_else(|| panic!("bad label in: {line}"));
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            samples.push((name, labels, value));
        }
        Scrape { samples }
    }

    /// The sample with exactly these labels; 0 when the series does not exist yet.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: std::collections::BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && *l == want)
            .map_or(0.0, |(_, _, v)| *v)
    }

    /// Whether any sample of this name exists.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(n, _, _)| n == name)
    }
}

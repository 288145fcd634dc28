//! The baseline: a legacy (2025-11-25) MCP client talking to the fixture backend directly, as any
//! pre-2026 host would: over stdio (requests multiplexed on the one pipe by id), or over legacy
//! Streamable HTTP (`initialize`, then every message a POST carrying `Mcp-Session-Id`; results and
//! the server's own requests come back as JSON or on the POST's SSE stream). The server's
//! requests (elicitation) are handed to the caller to answer.

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

const LEGACY: &str = "2025-11-25";

/// Where incoming messages go: responses to the caller waiting on that id, server requests to
/// the push queue, notifications nowhere.
#[derive(Debug, Clone)]
struct Inbox {
    waiters: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>,
    pushes: mpsc::Sender<Value>,
}

impl Inbox {
    async fn deliver(&self, msg: Value) {
        if msg.get("method").is_some() {
            if msg.get("id").is_some() {
                let _ = self.pushes.send(msg).await;
            }
            return;
        }
        let Some(id) = msg.get("id").and_then(Value::as_u64) else {
            return;
        };
        let waiter = self.waiters.lock().expect("waiters").remove(&id);
        if let Some(tx) = waiter {
            let _ = tx.send(msg);
        }
    }
}

#[derive(Debug)]
enum Out {
    /// Lines for the child's stdin, written by one task.
    Stdio(mpsc::Sender<Vec<u8>>),
    Http(Box<HttpOut>),
}

#[derive(Debug, Clone)]
struct HttpOut {
    client: Client<HttpConnector, Full<Bytes>>,
    url: hyper::Uri,
    session: Option<String>,
}

impl HttpOut {
    async fn post(&self, msg: &Value) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        let mut req = hyper::Request::post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", LEGACY);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let req = req.body(Full::new(Bytes::from(serde_json::to_vec(msg)?)))?;
        Ok(self.client.request(req).await?)
    }
}

/// Reads one POST's response: nothing (202), one JSON message, or an SSE stream of them.
async fn read_response(
    resp: hyper::Response<hyper::body::Incoming>,
    inbox: &Inbox,
) -> anyhow::Result<()> {
    let status = resp.status();
    if status == hyper::StatusCode::ACCEPTED {
        return Ok(());
    }
    if !status.is_success() {
        bail!("HTTP {status}");
    }
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = resp.into_body();
    if !sse {
        let bytes = body.collect().await?.to_bytes();
        inbox.deliver(serde_json::from_slice(&bytes)?).await;
        return Ok(());
    }
    // SSE: events end with a blank line; each event's `data:` lines make one message.
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(end) = find_event_end(&buf) {
            let event: Vec<u8> = buf.drain(..end.1).collect();
            let text = String::from_utf8_lossy(&event[..end.0]);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if !data.is_empty()
                && let Ok(msg) = serde_json::from_str(&data.join("\n"))
            {
                inbox.deliver(msg).await;
            }
        }
    }
    Ok(())
}

/// (end of the event text, end of its terminating blank line).
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[derive(Debug)]
pub struct Legacy {
    child: Option<Child>,
    /// The backend process: the stdio child, or the HTTP fixture.
    pub pid: u32,
    out: Out,
    inbox: Inbox,
    pushes: mpsc::Receiver<Value>,
    next: AtomicU64,
}

impl Legacy {
    /// Spawns `legacy-server` on stdio and runs `initialize` declaring form elicitation.
    pub async fn stdio(exe: &Path) -> anyhow::Result<Legacy> {
        let mut child = Command::new(exe)
            .arg("legacy-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().context("no pid")?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let stdout = child.stdout.take().context("stdout")?;
        let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(4096);
        tokio::spawn(async move {
            while let Some(line) = out_rx.recv().await {
                if stdin.write_all(&line).await.is_err() {
                    return;
                }
            }
        });
        let (mut client, inbox) = Legacy::new(Out::Stdio(out), pid);
        client.child = Some(child);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(msg) = serde_json::from_str::<Value>(&line) {
                    inbox.deliver(msg).await;
                }
            }
        });
        client.initialize().await?;
        Ok(client)
    }

    /// Connects to a legacy Streamable HTTP server (`pid` is its process, for accounting).
    pub async fn http(url: &str, pid: u32) -> anyhow::Result<Legacy> {
        let http = HttpOut {
            client: Client::builder(TokioExecutor::new()).build_http(),
            url: url.parse()?,
            session: None,
        };
        let (mut client, inbox) = Legacy::new(Out::Http(Box::new(http.clone())), pid);
        let init = client.init_message(0);
        // A server may announce its address a moment before it accepts.
        let mut tries = 0;
        let resp = loop {
            match http.post(&init).await {
                Ok(resp) => break resp,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (tx, rx) = oneshot::channel();
        inbox.waiters.lock().expect("waiters").insert(0, tx);
        read_response(resp, &inbox).await?;
        rx.await?.get("result").context("initialize failed")?;
        client.out = Out::Http(Box::new(HttpOut { session, ..http }));
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    fn new(out: Out, pid: u32) -> (Legacy, Inbox) {
        let (push_tx, pushes) = mpsc::channel(1024);
        let inbox = Inbox {
            waiters: Arc::default(),
            pushes: push_tx,
        };
        let client = Legacy {
            child: None,
            pid,
            out,
            inbox: inbox.clone(),
            pushes,
            next: AtomicU64::new(1),
        };
        (client, inbox)
    }

    fn init_message(&self, id: u64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "load-baseline", "version": "0"}
        }})
    }

    async fn initialize(&self) -> anyhow::Result<()> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let rx = self.expect(id);
        self.send(&self.init_message(id)).await?;
        wait(rx).await?.get("result").context("initialize failed")?;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
    }

    fn expect(&self, id: u64) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.inbox.waiters.lock().expect("waiters").insert(id, tx);
        rx
    }

    async fn send(&self, msg: &Value) -> anyhow::Result<()> {
        match &self.out {
            Out::Stdio(tx) => {
                let mut line = serde_json::to_vec(msg)?;
                line.push(b'\n');
                tx.send(line).await.context("backend stdin closed")
            }
            Out::Http(http) => {
                let resp = http.post(msg).await?;
                // Results and pushes may stream on this POST's response; read it aside.
                let inbox = self.inbox.clone();
                tokio::spawn(async move {
                    if let Err(e) = read_response(resp, &inbox).await {
                        eprintln!("baseline: reading a response failed: {e:#}");
                    }
                });
                Ok(())
            }
        }
    }

    /// Sends a request; the receiver yields its response.
    pub async fn start_request(
        &self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<oneshot::Receiver<Value>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let rx = self.expect(id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok(rx)
    }

    pub async fn request(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        wait(self.start_request(method, params).await?).await
    }

    /// The next request the server sent us.
    pub async fn next_push(&mut self) -> anyhow::Result<Value> {
        match tokio::time::timeout(Duration::from_secs(30), self.pushes.recv()).await {
            Ok(Some(v)) => Ok(v),
            Ok(None) => bail!("backend closed"),
            Err(_) => bail!("no server request within 30s"),
        }
    }

    /// Answers a server request.
    pub async fn respond(&self, id: &Value, result: Value) -> anyhow::Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await
    }

    pub async fn stop(mut self) {
        // Closing stdin asks the child to exit.
        self.out = Out::Stdio(mpsc::channel(1).0);
        if let Some(mut child) = self.child.take()
            && tokio::time::timeout(Duration::from_secs(3), child.wait())
                .await
                .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

async fn wait(rx: oneshot::Receiver<Value>) -> anyhow::Result<Value> {
    tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .context("backend did not answer in 30s")?
        .context("backend closed")
}

//! A minimal MCP 2026-07-28 client over HTTP/1.1 keep-alive: one connection per
//! [`Conn`], each request a POST with the headers and `_meta` the gateway checks.

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

pub const MODERN: &str = "2026-07-28";

/// One keep-alive connection to the gateway's endpoint, opened again when the gateway has
/// closed it (it closes a connection left idle past `server.header_timeout`).
#[derive(Debug)]
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    url: String,
    host: String,
    path: String,
}

impl Conn {
    pub async fn open(url: &str) -> anyhow::Result<Conn> {
        let rest = url.strip_prefix("http://").context("http:// URL")?;
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let stream = TcpStream::connect(host).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            sender,
            url: url.to_owned(),
            host: host.to_owned(),
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        })
    }

    /// POSTs a tools/call body; returns the HTTP status and the raw body.
    pub async fn post(&mut self, tool: &str, body: Bytes) -> anyhow::Result<(u16, Bytes)> {
        if self.sender.is_closed() {
            *self = Conn::open(&self.url).await?;
        }
        self.sender.ready().await?;
        let req = hyper::Request::post(&self.path)
            .header("host", &self.host)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(Full::new(body))?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// POSTs and returns the final JSON-RPC message (the JSON body, or the last SSE event).
    pub async fn call(&mut self, tool: &str, body: Bytes) -> anyhow::Result<Value> {
        let (status, body) = self.post(tool, body).await?;
        let msg = final_message(&body)?;
        if status != 200 {
            bail!("HTTP {status}: {msg}");
        }
        Ok(msg)
    }
}

/// The final JSON-RPC message of a response body, JSON or SSE.
pub fn final_message(body: &[u8]) -> anyhow::Result<Value> {
    if let Ok(v) = serde_json::from_slice(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)?;
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .next_back()
        .context("neither JSON nor SSE")?;
    Ok(serde_json::from_str(data.trim())?)
}

/// A tools/call body. `retry` carries `(inputResponses, requestState)`.
pub fn tools_call(
    id: u64,
    tool: &str,
    arguments: Value,
    capabilities: Value,
    retry: Option<(Value, &str)>,
) -> Bytes {
    let mut params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        }
    });
    if let Some((responses, state)) = retry {
        params["inputResponses"] = responses;
        params["requestState"] = json!(state);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    Bytes::from(serde_json::to_vec(&body).expect("serialize"))
}

/// The result of a JSON-RPC response, or its error as an `Err`.
pub fn result(msg: &Value) -> anyhow::Result<&Value> {
    if let Some(e) = msg.get("error") {
        bail!("JSON-RPC error {e}");
    }
    msg.get("result").context("no result")
}

//! The baseline: a legacy (2025-11-25) MCP client talking to the fixture backend directly over
//! stdio, as any pre-2026 host would. Requests are multiplexed on the one pipe by id; the
//! server's own requests (elicitation) are handed to the caller to answer.

use anyhow::{Context, bail};
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

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

#[derive(Debug)]
pub struct Legacy {
    child: Child,
    out: mpsc::Sender<Vec<u8>>,
    waiters: Waiters,
    pushes: mpsc::Receiver<Value>,
    next: AtomicU64,
}

impl Legacy {
    /// Spawns `legacy-server` and runs `initialize` declaring form elicitation.
    pub async fn start(exe: &Path) -> anyhow::Result<Legacy> {
        let mut child = Command::new(exe)
            .arg("legacy-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
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
        let waiters: Waiters = Arc::default();
        let (push_tx, push_rx) = mpsc::channel(1024);
        let w = waiters.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if msg.get("method").is_some() {
                    if msg.get("id").is_some() {
                        let _ = push_tx.send(msg).await;
                    }
                    continue;
                }
                let Some(id) = msg.get("id").and_then(Value::as_u64) else {
                    continue;
                };
                let waiter = w.lock().expect("waiters").remove(&id);
                if let Some(tx) = waiter {
                    let _ = tx.send(msg);
                }
            }
        });
        let client = Legacy {
            child,
            out,
            waiters,
            pushes: push_rx,
            next: AtomicU64::new(1),
        };
        let init = client
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": "load-baseline", "version": "0"}
                }),
            )
            .await?;
        init.get("result").context("initialize failed")?;
        client
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    async fn send(&self, msg: &Value) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(msg)?;
        line.push(b'\n');
        self.out.send(line).await.context("backend stdin closed")
    }

    /// Sends a request; the receiver yields its response.
    pub async fn start_request(
        &self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<oneshot::Receiver<Value>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("waiters").insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        Ok(rx)
    }

    pub async fn request(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let rx = self.start_request(method, params).await?;
        tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .context("backend did not answer in 30s")?
            .context("backend closed")
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
        drop(self.out);
        if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

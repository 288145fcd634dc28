//! What one upstream connection holding an open streamed response costs in resident memory: the
//! floor under the gateway's memory per parked call on an HTTP backend. It opens `N` POSTs through
//! the same client the gateway uses (`upstream::http::client`, default settings) against a
//! local server that answers each with an event stream and never ends it, reads the first event,
//! keeps every response open, and reports the growth of this process's `VmRSS` per connection.
//! The server's side (one small task and socket per connection) runs in this process too, so the
//! figure slightly overstates the client's share.
//!
//!     cargo bench --bench conn_cost -- 2000

#[path = "shared/rss.rs"]
mod rss;

use http_body_util::BodyExt;
use rss::rss_kib;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const STREAM_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
transfer-encoding: chunked\r\n\r\n20\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1}\n\n\r\n";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2000);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(STREAM_HEAD).await;
                std::future::pending::<()>().await;
                drop(sock);
            });
        }
    });
    let cfg = mrtr_gateway::config::Http {
        url: format!("http://{addr}/mcp").parse()?,
        headers: http::HeaderMap::new(),
        authorization: mrtr_gateway::config::Authorization::Drop,
        connect_timeout: Duration::from_secs(5),
        ca: None,
        client_cert: None,
        max_response_head_bytes: mrtr_gateway::config::DEFAULT_RESPONSE_HEAD,
        standalone_stream: false,
        release_parked_streams: false,
    };
    let client =
        mrtr_gateway::upstream::http::client(&cfg, n + 16, &mrtr_gateway::shard::Shards::none());
    let uri: hyper::Uri = format!("http://{addr}/mcp").parse()?;
    let body: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#;
    let none = http::HeaderMap::new();
    let mut open = Vec::with_capacity(n + 16);
    let mut before = 0;
    for i in 0..n + 16 {
        // The first 16 warm up the runtime, the allocator and the client.
        if i == 16 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            before = rss_kib("self")?;
        }
        let req = mrtr_gateway::upstream::http::Request {
            method: &http::Method::POST,
            uri: &uri,
            configured: &none,
            headers: &[],
            json: Some(body),
        };
        let mut resp = client.send(req).await?;
        resp.body_mut().frame().await.transpose()?;
        open.push(resp);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib("self")?;
    println!(
        "{n} open streamed responses: VmRSS {before} KiB -> {after} KiB, {:.1} KiB per connection",
        (after.saturating_sub(before)) as f64 / n as f64
    );
    Ok(())
}

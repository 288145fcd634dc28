//! What a reply may hold per client connection (`limits.max_reply_bytes`): a client that asks
//! for a large result and stops reading keeps the gateway holding that reply until
//! `write_timeout`, so a reply over the limit is never held: its client gets -32603 saying so,
//! whether it reads or not, and the backend's session goes on. Real sockets, the fixture's `big`
//! tool as the backend.
//!
//! What is asserted is the reply each client ends up with, not memory: on loopback the kernel's
//! socket buffers take in much of a reply whatever the gateway holds, and the allocator keeps
//! freed memory, so the process's resident size says little about one connection
//! (`benches/stalled_clients.py` measures it). What the kernel took is let go after
//! `write_timeout`: its socket, listed in `/proc/net/tcp`, goes.

mod common;

use common::{ADMIN_ON, Client, Gateway, MODERN, Options};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The limit these tests configure, well under the fixture's 4 MiB line limit.
const LIMIT: usize = 256 * 1024;

async fn gateway() -> Gateway {
    Gateway::with(Options {
        extra: format!("[limits]\nmax_reply_bytes = {LIMIT}\n{ADMIN_ON}"),
        ..Default::default()
    })
    .await
}

fn big(bytes: usize, notes: u64) -> Value {
    json!({"bytes": bytes, "notes": notes})
}

/// A client that sends one `big` call and then reads nothing, with as small a receive buffer
/// as the kernel allows.
async fn stalled(url: &str, id: u64, bytes: usize) -> TcpStream {
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .parse()
        .expect("socket address");
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket.connect(addr).await.expect("connect to gateway");
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "big", "arguments": big(bytes, 0),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: {MODERN}\r\n\
         mcp-method: tools/call\r\nmcp-name: big\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .expect("send the request");
    stream
}

/// Reads the one response a [`stalled`] client was sent: its JSON body, and the body's length.
async fn read_reply(stream: &mut TcpStream) -> (Value, usize) {
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let read = async {
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .expect("a JSON body with a length")
                    .trim()
                    .parse()
                    .expect("a length");
                if got.len() >= end + 4 + length {
                    return got[end + 4..end + 4 + length].to_vec();
                }
            }
            let n = stream.read(&mut chunk).await.expect("read the reply");
            assert!(n > 0, "the connection closed before the reply was read");
            got.extend_from_slice(&chunk[..n]);
        }
    };
    let body = tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the reply in time");
    (serde_json::from_slice(&body).expect("JSON"), body.len())
}

/// Waits (boundedly) until the gateway has made the reply of `n` calls with `outcome`.
async fn wait_for_replies(gw: &Gateway, outcome: &str, n: f64) {
    let labels = [("method", "tools/call"), ("outcome", outcome)];
    for _ in 0..600 {
        if gw
            .scrape()
            .await
            .get("mrtr_downstream_requests_total", &labels)
            >= n
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the gateway did not make {n} `{outcome}` replies in time");
}

fn assert_too_large(reply: &Value) {
    assert_eq!(reply["error"]["code"], -32603, "{reply:#}");
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too large") && message.contains("limits.max_reply_bytes"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_held_no_reply_over_the_limit() {
    let gw = gateway().await;
    // Four clients ask for four times the limit, one for a reply within it; none reads.
    let mut over = Vec::new();
    for id in 1..=4 {
        over.push(stalled(&gw.url, id, 4 * LIMIT).await);
    }
    let mut within = stalled(&gw.url, 5, LIMIT / 2).await;
    // Every call has ended, its reply made, while no client has read a byte: what each
    // connection holds is that reply.
    wait_for_replies(&gw, "error", 4.0).await;
    wait_for_replies(&gw, "complete", 1.0).await;
    for stream in &mut over {
        let (reply, length) = read_reply(stream).await;
        assert_too_large(&reply);
        assert!(
            length < 1024,
            "held {length} bytes for a reply over the limit"
        );
    }
    let (reply, length) = read_reply(&mut within).await;
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    let result: Value = serde_json::from_str(text).expect("the tool's JSON");
    assert_eq!(result["text"].as_str().map(str::len), Some(LIMIT / 2));
    assert!(length <= LIMIT, "{length}");
    gw.stop().await;
}

#[tokio::test]
async fn a_reply_over_the_limit_ends_the_call_with_a_clear_error() {
    let gw = gateway().await;
    let c = Client::new(&gw.url);
    let caps = json!({});
    let reply = c.call_tool("big", big(LIMIT + 1, 0), &caps).await;
    assert_eq!(reply.status, 200);
    assert_too_large(&reply.body);

    // Notifications first (log messages, which go to a call that could be asked for input):
    // they arrive, and the stream ends with the same error.
    let mut body = c.body(
        "tools/call",
        json!({"name": "big", "arguments": big(2 * LIMIT, 3)}),
        &json!({"elicitation": {}}),
    );
    body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let reply = c.send(&body).await;
    assert!(reply.content_type.starts_with("text/event-stream"));
    assert_eq!(reply.notifications.len(), 3, "{:#?}", reply.notifications);
    assert_too_large(&reply.body);

    // The backend's session was not harmed: a reply within the limit comes whole.
    let reply = c.call_tool("big", big(LIMIT - 1024, 0), &caps).await;
    assert_eq!(
        reply.tool_json()["text"].as_str().map(str::len),
        Some(LIMIT - 1024)
    );
    gw.stop().await;
}

/// Whether the kernel still has a socket of the gateway's (local `port`) to the client at
/// `peer_port`, in any state: `/proc/net/tcp` lists them, ports in hexadecimal.
fn kernel_has_socket(port: u16, peer_port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port_of = |address: &str| u16::from_str_radix(address.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        let (Some(local), Some(remote)) = (fields.next(), fields.next()) else {
            return false;
        };
        port_of(local) == Some(port) && port_of(remote) == Some(peer_port)
    })
}

#[tokio::test]
async fn the_kernel_lets_go_of_a_reply_its_client_stopped_reading_after_write_timeout() {
    // A reply the kernel takes whole leaves the gateway no write to time out: the connection
    // waits for a next request, and closed (an hour here) the kernel would keep the reply for
    // as long as the client neither reads nor closes.
    let gw = Gateway::with(Options {
        extra: format!(
            "write_timeout = \"1s\"\nheader_timeout = \"1h\"\n[limits]\n\
             max_reply_bytes = {LIMIT}\n{ADMIN_ON}"
        ),
        ..Default::default()
    })
    .await;
    let mut stream = stalled(&gw.url, 1, LIMIT / 4).await;
    wait_for_replies(&gw, "complete", 1.0).await;
    let (port, peer_port) = (
        stream.peer_addr().expect("peer").port(),
        stream.local_addr().expect("local").port(),
    );
    let mut held = true;
    for _ in 0..600 {
        held = kernel_has_socket(port, peer_port);
        if !held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !held,
        "the kernel still holds the gateway's side of a connection whose client stopped \
         reading, long after write_timeout"
    );
    // The client, reading at last, gets the end of a connection, not the reply.
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut got))
        .await
        .expect("the end of the connection in time");
    assert!(
        read.is_err() || got.len() < LIMIT / 4,
        "read {} bytes: the whole reply",
        got.len()
    );
    gw.stop().await;
}

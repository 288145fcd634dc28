//! The internal hop's client: a retry whose call is parked on another replica is sent there
//! (the original request and the principal this replica computed, signed; see
//! [`crate::wire::hop`]) and the owner's replies are relayed to the client as they come. It uses
//! the gateway's own HTTP client. Replay-mode states are never forwarded: any replica runs them.

use super::retry::now_ms;
use super::{Bridge, Reply, Request};
use crate::config::parse_host_port;
use crate::shard::Shards;
use crate::upstream::h1;
use crate::wire::hop;
use futures_util::StreamExt;
use http::{HeaderName, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::sync::mpsc;

/// Why a forwarded retry failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("owner address `{0}` is not host:port")]
    BadAddress(String),
    #[error("cannot reach the owner at {addr}: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("the owner did not finish within {0:?}")]
    Timeout(Duration),
    #[error("the owner answered HTTP {0}")]
    Refused(StatusCode),
    #[error("the owner's reply stream broke: {0}")]
    Stream(String),
}

/// Idle connections to other replicas kept for the next hop, per pool of the client.
const IDLE_CONNECTIONS: usize = 16;

/// The client of the internal hop: plain HTTP to the other replicas' internal listeners.
pub(super) fn client(config: &crate::config::Config, shards: &Shards) -> h1::Client {
    h1::Client::new(
        h1::connector(config.fleet.forward_connect_timeout, None, None),
        IDLE_CONNECTIONS,
        crate::config::DEFAULT_RESPONSE_HEAD,
        shards,
    )
}

/// Forwards a retry to the replica that holds its call and relays the replies. On error the
/// caller answers the client; replies already relayed stay relayed.
pub(super) async fn forward(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    owner: &str,
    addr: &str,
    reply: &mpsc::Sender<Reply>,
) -> Result<(), Error> {
    let fleet = &bridge.config.fleet;
    let (host, port) = parse_host_port(addr).ok_or_else(|| Error::BadAddress(addr.to_owned()))?;
    let body = hop::Body {
        backend: bridge.config.backends[backend].path.clone(),
        principal: req.principal,
        method: req.method.clone(),
        params: req.params.clone(),
    };
    let body = serde_json::to_vec(&body).expect("JSON values serialize");
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let uri: http::Uri = format!("http://{host}:{port}{}", hop::PATH)
        .parse()
        .map_err(|_| Error::BadAddress(addr.to_owned()))?;
    let mut headers = vec![(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    )];
    for (name, value) in hop::sign(&bridge.keys, owner, &fleet.replica_id, &body, now_ms()) {
        let value = HeaderValue::from_str(&value).expect("hop header values are ASCII");
        headers.push((HeaderName::from_static(name), value));
    }
    let exchange = relay(bridge, &uri, &headers, &body, addr, reply);
    tokio::select! {
        // The client left: dropping the hop connection tells the owner, which abandons the call.
        _ = reply.closed() => Ok(()),
        outcome = tokio::time::timeout(fleet.forward_timeout, exchange) => {
            outcome.unwrap_or(Err(Error::Timeout(fleet.forward_timeout)))
        }
    }
}

/// Sends the signed request and relays the owner's events until its outcome.
async fn relay(
    bridge: &Bridge,
    uri: &http::Uri,
    headers: &[(HeaderName, HeaderValue)],
    body: &[u8],
    addr: &str,
    reply: &mpsc::Sender<Reply>,
) -> Result<(), Error> {
    let unreachable = |reason: String| Error::Unreachable {
        addr: addr.to_owned(),
        reason,
    };
    let resp = bridge
        .hop
        .send(h1::Request {
            method: &Method::POST,
            uri,
            configured: &http::HeaderMap::new(),
            headers,
            json: Some(body),
        })
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    if resp.status() != StatusCode::OK {
        return Err(Error::Refused(resp.status()));
    }
    // The owner sends the backend's result (at most `max_line_bytes`) with `resultType` and
    // `_meta` added: room for those on top.
    let max_event = bridge
        .config
        .limits
        .max_line_bytes
        .saturating_add(hop::EVENT_SLACK);
    let mut events = crate::sse::decode(resp.into_body().into_data_stream(), max_event);
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| Error::Stream(e.to_string()))?;
        match hop::decode_reply(&event.data) {
            Some(done @ Reply::Done(_)) => {
                let _ = reply.send(done).await;
                return Ok(());
            }
            Some(note) => {
                let _ = reply.send(note).await;
            }
            None => return Err(Error::Stream("an event of unknown shape".into())),
        }
    }
    Err(Error::Stream("ended before the result".into()))
}

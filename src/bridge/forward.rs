//! The internal hop's client: a retry whose call is parked on another replica is sent there
//! (the original request and the principal this replica computed, signed; see
//! [`crate::wire::hop`]) and the owner's replies are relayed to the client as they come; so is a
//! request of a legacy session held by another replica ([`Bridge::forward_session`]), whose
//! answer comes back as the owner's legacy face gave it. It uses the gateway's own HTTP client.
//! Replay-mode states are never forwarded: any replica runs them.

use super::retry::now_ms;
use super::{Bridge, Reply, Request};
use crate::config::parse_host_port;
use crate::protocol::header::MCP_SESSION_ID;
use crate::shard::Shards;
use crate::upstream::h1;
use crate::wire::hop;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
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
    let body = hop::Body {
        backend: bridge.config.backends[backend].path.clone(),
        principal: req.principal,
        method: req.method.clone(),
        params: req.params.clone(),
    };
    let body = serde_json::to_vec(&body).expect("JSON values serialize");
    let uri = uri_of(addr, hop::PATH)?;
    let mut headers = vec![(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    )];
    headers.extend(signed(bridge, owner, hop::PATH, &body));
    let exchange = relay(bridge, &uri, &headers, &body, addr, reply);
    tokio::select! {
        // The client left: dropping the hop connection tells the owner, which abandons the call.
        _ = reply.closed() => Ok(()),
        outcome = tokio::time::timeout(fleet.forward_timeout, exchange) => {
            outcome.unwrap_or(Err(Error::Timeout(fleet.forward_timeout)))
        }
    }
}

/// The owner's internal listener at `path`; the address was read from inside a seal.
fn uri_of(addr: &str, path: &str) -> Result<http::Uri, Error> {
    let (host, port) = parse_host_port(addr).ok_or_else(|| Error::BadAddress(addr.to_owned()))?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    format!("http://{host}:{port}{path}")
        .parse()
        .map_err(|_| Error::BadAddress(addr.to_owned()))
}

/// The hop headers of `body` POSTed to `owner` at `path`, signed now.
fn signed(
    bridge: &Bridge,
    owner: &str,
    path: &str,
    body: &[u8],
) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    let from = &bridge.config.fleet.replica_id;
    hop::sign_at(path, &bridge.keys, owner, from, body, now_ms())
        .into_iter()
        .map(|(name, value)| {
            let value = HeaderValue::from_str(&value).expect("hop header values are ASCII");
            (HeaderName::from_static(name), value)
        })
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

/// A legacy session's answer from its owner, relayed as it comes.
pub struct Relayed {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    /// The body as it arrives (a JSON-RPC message, or an event stream that may last as long
    /// as the session); it ends where the owner's connection does, for whatever reason.
    pub body: BoxStream<'static, Bytes>,
}

impl std::fmt::Debug for Relayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relayed")
            .field("status", &self.status)
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

impl Bridge {
    /// Forwards a request of a legacy session to its owner, replica `owner` at `addr` (both
    /// read from the session id's seal), and returns the owner's answer once it starts. `None`
    /// when the owner cannot be reached in time or does not answer as the session's (logged):
    /// for the client the session is gone.
    pub async fn forward_session(
        &self,
        owner: &str,
        addr: &str,
        request: &hop::Session,
    ) -> Option<Relayed> {
        match self.send_session(owner, addr, request).await {
            Ok(relayed) => Some(relayed),
            Err(e) => {
                tracing::warn!(%owner, "a legacy session's request not forwarded, the session is gone: {e}");
                None
            }
        }
    }

    async fn send_session(
        &self,
        owner: &str,
        addr: &str,
        request: &hop::Session,
    ) -> Result<Relayed, Error> {
        let body = serde_json::to_vec(request).expect("JSON values serialize");
        let uri = uri_of(addr, hop::SESSION_PATH)?;
        let mut headers = vec![(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        )];
        headers.extend(signed(self, owner, hop::SESSION_PATH, &body));
        let configured = http::HeaderMap::new();
        let sent = self.hop.send(h1::Request {
            method: &Method::POST,
            uri: &uri,
            configured: &configured,
            headers: &headers,
            json: Some(&body),
        });
        // Until the answer starts; a GET stream then lasts as long as the session does.
        let wait = self.config.fleet.forward_timeout;
        let resp = tokio::time::timeout(wait, sent)
            .await
            .map_err(|_| Error::Timeout(wait))?
            .map_err(|e| Error::Unreachable {
                addr: addr.to_owned(),
                reason: e.to_string(),
            })?;
        // The owner's legacy face names the session it answered for; the hop's own refusals
        // (a bad MAC, an unknown path on an older replica) do not.
        let named = resp.headers().get(MCP_SESSION_ID);
        if named.is_none_or(|s| s.as_bytes() != request.session.as_bytes()) {
            return Err(Error::Refused(resp.status()));
        }
        let status = resp.status();
        let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
        let body = resp
            .into_body()
            .into_data_stream()
            .take_while(|chunk| std::future::ready(chunk.is_ok()))
            .filter_map(|chunk| std::future::ready(chunk.ok()))
            .boxed();
        Ok(Relayed {
            status,
            content_type,
            body,
        })
    }
}

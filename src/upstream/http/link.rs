//! What the HTTP transports (Streamable HTTP and HTTP+SSE) share: the [`Link`] to one backend
//! session (client, headers, limits, the session task's queue, the stop signal), one exchange
//! with the backend and how it can fail ([`Failure`]), whole JSON bodies, and the helpers that
//! read a response's type and quote an unexpected one.

use crate::jsonrpc::{self, Message};
use crate::upstream::h1::{self, Body, Client};
use crate::upstream::session::{Inbound, Start};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Where a stream's messages go: the session task's queue, or a call reading its own stream.
pub(crate) type Sink = mpsc::Sender<Box<Inbound>>;

/// Inbound queue depth: a full queue slows the backend's streams, never drops.
const INBOUND: usize = 64;
/// How much of an unexpected body is quoted in an error.
const SNIPPET: usize = 160;
/// How long the start of an error response's body is waited for, for the log.
const ERROR_BODY_WAIT: Duration = Duration::from_secs(2);

/// `Accept` of a POST: its answer may be a JSON message or an event stream.
pub(crate) const ACCEPT_ANSWER: HeaderValue =
    HeaderValue::from_static("application/json, text/event-stream");
/// `Accept` of a GET for an event stream.
pub(crate) const ACCEPT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");

/// What the HTTP transports share with the tasks they spawn.
#[derive(Debug)]
pub(crate) struct Link {
    pub backend: String,
    pub client: Client,
    /// Configured headers plus the `Authorization` the backend's policy allows.
    pub headers: HeaderMap,
    pub max_message: usize,
    pub max_depth: usize,
    /// Deadline for response headers and for whole JSON bodies.
    pub timeout: Duration,
    /// Boxed: the queue allocates room for 32 messages up front, for every session.
    pub inbound: Sink,
    /// Cancelled when the session closes: every task of the session stops.
    pub stop: CancellationToken,
    /// Set when the backend seems to have restarted ([`Start::restarted`]).
    pub restarted: Arc<AtomicBool>,
}

/// Why an exchange with the backend failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Could not connect or send: the request may not have reached the backend.
    Connect(String),
    Timeout,
    /// The backend forgot the session (404 on a known session id).
    Gone,
    /// The backend refused the request's credential (401 or 403): it says nothing of what
    /// else the backend would answer.
    Denied(String),
    /// Anything else, said as the call should hear it.
    Other(String),
}

impl Failure {
    /// What happened, said of the backend without naming it: messages to clients name it once
    /// where they are made, and logs carry it as a field.
    pub fn describe(&self) -> String {
        match self {
            Failure::Connect(e) => format!("not reachable: {e}"),
            Failure::Timeout => "did not answer in time".to_owned(),
            Failure::Gone => "forgot the session (HTTP 404)".to_owned(),
            Failure::Denied(e) | Failure::Other(e) => e.clone(),
        }
    }
}

impl Link {
    pub fn new(
        backend: String,
        client: Client,
        headers: HeaderMap,
        start: &Start,
        stop: CancellationToken,
    ) -> (Arc<Link>, mpsc::Receiver<Box<Inbound>>) {
        let (inbound, rx) = mpsc::channel(INBOUND);
        let link = Link {
            backend,
            client,
            headers,
            max_message: start.max_message_bytes,
            max_depth: start.max_json_depth,
            timeout: start.init_timeout,
            inbound,
            stop,
            restarted: start.restarted.clone(),
        };
        (Arc::new(link), rx)
    }

    /// Sends one HTTP request and waits for its response headers.
    pub async fn exchange(
        &self,
        method: Method,
        url: &Uri,
        headers: &[(HeaderName, HeaderValue)],
        json: Option<&[u8]>,
    ) -> Result<http::Response<Body>, Failure> {
        let req = h1::Request {
            method: &method,
            uri: url,
            configured: &self.headers,
            headers,
            json,
        };
        // Boxed: a request's task keeps the room of its largest phase for as long as it lives,
        // and a parked call's lives until the retry.
        match tokio::time::timeout(self.timeout, Box::pin(self.client.send(req))).await {
            Err(_) => Err(Failure::Timeout),
            Ok(Err(h1::Error::Connect(e))) => Err(Failure::Connect(e)),
            Ok(Err(e @ h1::Error::HeadTooLarge(_))) => Err(Failure::Other(e.to_string())),
            Ok(Err(h1::Error::Exchange(e))) => {
                Err(Failure::Other(format!("the HTTP exchange failed: {e}")))
            }
            Ok(Ok(resp)) => Ok(resp),
        }
    }

    /// Reads a whole JSON body (within the size limit and the deadline) as messages.
    pub async fn read_json(&self, body: Body) -> Result<Vec<Message>, Failure> {
        let bytes = match tokio::time::timeout(
            self.timeout,
            Limited::new(body, self.max_message).collect(),
        )
        .await
        {
            Err(_) => return Err(Failure::Timeout),
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Err(Failure::Other(format!(
                    "a response body over {} bytes",
                    self.max_message
                )));
            }
            Ok(Err(e)) => return Err(Failure::Other(format!("reading the body failed: {e}"))),
            Ok(Ok(b)) => b.to_bytes(),
        };
        jsonrpc::parse_many(&bytes, self.max_depth).map_err(|e| {
            // What the backend wrote stays in the log: it may hold what clients must not see.
            tracing::warn!(backend = %self.backend, body = %snippet(&bytes), "a body that is not JSON-RPC");
            Failure::Other(format!("a body that is not JSON-RPC ({e})"))
        })
    }
}

pub(crate) fn content_type(resp: &http::Response<Body>) -> String {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The first bytes of a body, printable, for an error message.
pub(crate) fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SNIPPET)]);
    let mut s: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if bytes.len() > SNIPPET {
        s.push('…');
    }
    format!("{s:?}")
}

/// An unexpected status. The start of its body goes to the log only: an error page may carry
/// stack traces or credentials that clients must not see. The body is waited for briefly (and
/// never past the request timeout): a backend that sends the head and stalls must not hold the
/// call, the session's task or its pool slot.
pub(crate) async fn status_failure(resp: http::Response<Body>, link: &Link) -> Failure {
    let status = resp.status();
    let read = Limited::new(resp.into_body(), link.max_message.min(4096)).collect();
    let body = match tokio::time::timeout(ERROR_BODY_WAIT.min(link.timeout), read).await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => bytes::Bytes::new(),
    };
    tracing::warn!(backend = %link.backend, %status, body = %snippet(&body), "backend answered with an unexpected status");
    let said = format!("HTTP {status}");
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Failure::Denied(said),
        _ => Failure::Other(said),
    }
}

/// A message's JSON text, as a body for the backend.
pub(crate) fn encode(msg: &Value) -> Result<Vec<u8>, String> {
    serde_json::to_vec(msg).map_err(|e| format!("cannot encode a message: {e}"))
}

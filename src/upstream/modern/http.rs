//! One exchange with a 2026-07-28 backend over Streamable HTTP: a POST of a request as the
//! client wrote it, with its 2026 headers, over the backend's pooled connections (the pool's
//! [`http::Client`]), and its answer read as JSON or as an event stream of messages.

use super::{Answer, Messages, Outgoing};
use crate::config::{Authorization, Backend, Http};
use crate::jsonrpc::{self, Message};
use crate::sse::DecodeError;
use crate::upstream::http::{self, ACCEPT_ANSWER, Failure, Link, content_type, status_failure};
use ::http::{Method, StatusCode, Uri, header};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::pin::Pin;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A 2026-07-28 backend reached over Streamable HTTP.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// The exchange the legacy transports use: client, configured headers, limits, deadline.
    link: Link,
    url: Uri,
    authorization: Authorization,
    probe_timeout: Duration,
}

/// The messages of an event stream, read as they come; dropping it closes the stream (and its
/// connection), which is how a 2026-07-28 backend hears that its client went away.
pub(crate) struct Events {
    events: Pin<Box<dyn Stream<Item = Result<crate::sse::Event, DecodeError>> + Send>>,
    max_depth: usize,
    backend: String,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// The next message, `None` at the end of the stream; a broken stream is an error.
    pub async fn next(&mut self) -> Option<Result<Message, String>> {
        loop {
            let event = match self.events.next().await? {
                Ok(event) => event,
                Err(e) => return Some(Err(e.to_string())),
            };
            if event.event != "message" || event.data.is_empty() {
                continue;
            }
            match jsonrpc::parse_many(event.data.as_bytes(), self.max_depth) {
                // A 2026-07-28 server sends one message an event; a batch is not one.
                Ok(mut msgs) if msgs.len() == 1 => return msgs.pop().map(Ok),
                Ok(_) => return Some(Err("an event carrying a batch".into())),
                Err(e) => {
                    tracing::warn!(backend = %self.backend, "an SSE event that is not JSON-RPC: {e}");
                    return Some(Err(format!("an event that is not JSON-RPC ({e})")));
                }
            }
        }
    }
}

impl Endpoint {
    /// The relay's side of `backend`, on the pool's `client`; `request_timeout` bounds the
    /// response head and a JSON body.
    pub fn new(
        backend: &Backend,
        cfg: &Http,
        client: http::Client,
        limits: &crate::config::Limits,
    ) -> Endpoint {
        // The link's queue and stop signal belong to legacy sessions; the relay has neither.
        let (inbound, _) = tokio::sync::mpsc::channel(1);
        let link = Link {
            backend: backend.name.clone(),
            client,
            headers: cfg.headers.clone(),
            max_message: limits.max_line_bytes,
            max_depth: limits.max_json_depth,
            timeout: limits.request_timeout,
            inbound,
            stop: CancellationToken::new(),
            restarted: Default::default(),
        };
        Endpoint {
            link,
            url: cfg.url.clone(),
            authorization: cfg.authorization.clone(),
            probe_timeout: backend.probe_timeout,
        }
    }

    pub fn backend(&self) -> &str {
        &self.link.backend
    }

    pub fn probe_timeout(&self) -> Duration {
        self.probe_timeout
    }

    /// POSTs the request with its 2026 headers and the `Authorization` the backend's policy
    /// gives it (the client's, for `pass`).
    pub async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, Failure> {
        let params = Value::Object(out.params.clone());
        let body = jsonrpc::request_text(out.id, out.method, Some(&params));
        let mut headers = out.headers.clone();
        let credential = match &self.authorization {
            Authorization::Drop => None,
            Authorization::Pass => out.authorization.cloned(),
            Authorization::Replace(value) => Some(value.clone()),
        };
        if let Some(value) = credential {
            headers.push((header::AUTHORIZATION, value));
        }
        headers.push((header::ACCEPT, ACCEPT_ANSWER));
        let link = &self.link;
        let resp = link
            .exchange(Method::POST, &self.url, &headers, Some(&body))
            .await?;
        let status = resp.status();
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            // Whatever its body says (OAuth servers answer JSON that is not JSON-RPC): the
            // credential was refused, which says nothing of the backend's era.
            return Err(Box::pin(status_failure(resp, link)).await);
        }
        match content_type(&resp).as_str() {
            "application/json" => Ok(Answer::Json(
                Box::pin(link.read_json(resp.into_body())).await?,
            )),
            "text/event-stream" if status == StatusCode::OK => {
                Ok(Answer::Stream(Messages::Events(Events {
                    events: Box::pin(http::events(resp.into_body(), link.max_message)),
                    max_depth: link.max_depth,
                    backend: link.backend.clone(),
                })))
            }
            _ if !status.is_success() => Err(Box::pin(status_failure(resp, link)).await),
            // The body is dropped unread, which closes its connection.
            other => Err(Failure::Other(format!(
                "answered with Content-Type `{other}`, not JSON or an event stream"
            ))),
        }
    }
}

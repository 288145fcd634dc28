//! Legacy HTTP+SSE backends (2024-11-05): a GET opens one event stream, whose first `endpoint`
//! event names where to POST; every response, request and notification from the backend then
//! arrives on that one stream. A session is one stream: when it drops, the session ends, and the
//! pool starts (and initializes) a new one for the next call.

use super::Error;
use super::http::{
    ACCEPT_ANSWER, ACCEPT_STREAM, Failure, Link, content_type, deliver, encode, report,
    status_failure,
};
use super::session::{Inbound, Transport};
use http::{Method, StatusCode, Uri, header};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// An HTTP+SSE session.
pub(crate) struct HttpSse {
    link: Arc<Link>,
    endpoint: Uri,
    rx: mpsc::Receiver<Box<Inbound>>,
    tasks: TaskTracker,
}

impl HttpSse {
    /// Opens the event stream and waits (within the link's deadline) for its `endpoint` event.
    pub async fn connect(
        link: Arc<Link>,
        rx: mpsc::Receiver<Box<Inbound>>,
        url: &Uri,
    ) -> Result<HttpSse, Error> {
        let init = |reason: String| Error::Init {
            backend: link.backend.clone(),
            reason,
        };
        let headers = [(header::ACCEPT, ACCEPT_STREAM)];
        let resp = link
            .exchange(Method::GET, url, &headers, None)
            .await
            .map_err(|f| init(f.describe()))?;
        if !resp.status().is_success() {
            return Err(init(status_failure(resp, &link).await.describe()));
        }
        if content_type(&resp) != "text/event-stream" {
            return Err(init(format!(
                "the SSE URL answered Content-Type `{}`, not an event stream",
                content_type(&resp)
            )));
        }
        let mut events = super::http::events(resp.into_body(), link.max_message);
        let first = tokio::time::timeout(link.timeout, async {
            use futures_util::StreamExt;
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| e.to_string())?;
                if event.event == "endpoint" {
                    return Ok(event.data);
                }
            }
            Err("the event stream ended before its `endpoint` event".to_owned())
        })
        .await
        .map_err(|_| init("no `endpoint` event in time".into()))?
        .map_err(init)?;
        let endpoint = resolve(url, first.trim()).map_err(init)?;
        let tasks = TaskTracker::new();
        let pump_link = link.clone();
        tasks.spawn(async move {
            let stop = pump_link.stop.clone();
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                r = pump_events(&pump_link, events) => r,
            };
            let reason = match outcome {
                Ok(()) => "the backend closed its event stream".to_owned(),
                Err(e) => e.to_string(),
            };
            tracing::warn!(backend = %pump_link.backend, "{reason}");
            report(&pump_link.inbound, Inbound::ended(reason)).await;
        });
        Ok(HttpSse {
            link,
            endpoint,
            rx,
            tasks,
        })
    }
}

/// The rest of the one stream: every `message` event becomes inbound messages.
async fn pump_events(
    link: &Link,
    mut events: impl futures_util::Stream<Item = Result<crate::sse::Event, crate::sse::DecodeError>>
    + Unpin,
) -> Result<(), crate::sse::DecodeError> {
    use futures_util::StreamExt;
    while let Some(event) = events.next().await {
        let event = event?;
        if event.event != "message" || event.data.is_empty() {
            continue;
        }
        match crate::jsonrpc::parse_many(event.data.as_bytes(), link.max_depth) {
            Ok(msgs) => {
                if !deliver(&link.inbound, msgs).await {
                    return Ok(());
                }
            }
            Err(e) => {
                tracing::warn!(backend = %link.backend, "backend sent an event that is not JSON-RPC: {e}")
            }
        }
    }
    Ok(())
}

/// The POST endpoint, resolved against the SSE URL. It must stay on the same origin, so a
/// backend cannot send the gateway's configured headers elsewhere.
fn resolve(base: &Uri, endpoint: &str) -> Result<Uri, String> {
    let bad =
        || format!("the `endpoint` event named `{endpoint}`, not a URL on the backend's origin");
    let target: Uri = if endpoint.starts_with('/') {
        let mut parts = base.clone().into_parts();
        parts.path_and_query = Some(endpoint.parse().map_err(|_| bad())?);
        Uri::from_parts(parts).map_err(|_| bad())?
    } else {
        let full: Uri = endpoint.parse().map_err(|_| bad())?;
        if full.scheme() != base.scheme() || full.authority() != base.authority() {
            return Err(bad());
        }
        full
    };
    Ok(target)
}

impl Transport for HttpSse {
    async fn send(&mut self, msg: Value) -> Result<(), String> {
        let id = msg
            .get("method")
            .and(msg.get("id"))
            .and_then(|v| serde_json::from_value::<crate::jsonrpc::Id>(v.clone()).ok());
        let json = encode(&msg)?;
        let headers = [(header::ACCEPT, ACCEPT_ANSWER)];
        let failure = match self
            .link
            .exchange(Method::POST, &self.endpoint, &headers, Some(&json))
            .await
        {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                return Err(Failure::Gone.describe());
            }
            Ok(r) => status_failure(r, &self.link).await,
            Err(f) => f,
        };
        let why = failure.describe();
        tracing::warn!(backend = %self.link.backend, "{why}");
        if let Some(id) = id {
            // Reported from outside: this task is the queue's only reader.
            let link = self.link.clone();
            tokio::spawn(async move {
                report(&link.inbound, Inbound::failed(&id, why)).await;
            });
        }
        Ok(())
    }

    async fn recv(&mut self) -> Inbound {
        super::http::next(&mut self.rx).await
    }

    async fn close(self) {
        self.link.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_resolve_on_the_backends_origin_only() {
        let base: Uri = "http://127.0.0.1:9000/sse".parse().unwrap();
        assert_eq!(
            resolve(&base, "/messages?session_id=abc")
                .unwrap()
                .to_string(),
            "http://127.0.0.1:9000/messages?session_id=abc"
        );
        assert!(resolve(&base, "http://127.0.0.1:9000/m").is_ok());
        assert!(resolve(&base, "http://evil.example/m").is_err());
        assert!(resolve(&base, "https://127.0.0.1:9000/m").is_err());
        assert!(resolve(&base, "not a url").is_err());
    }
}

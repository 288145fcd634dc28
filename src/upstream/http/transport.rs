//! The Streamable HTTP session: [`StreamableHttp`] is the transport the session task owns (it
//! sends `initialize` and one-way messages, reads the session's queue, and DELETEs the session
//! at the end); `Direct` is the calls' own way to the backend, one POST and answer stream per
//! request. Both go through one [`Endpoint`], with the headers every request of the session
//! carries.

use super::endpoint::{Endpoint, Ids, has_session, post_headers, session_headers};
use super::link::{Failure, Link, Sink, encode, status_failure};
use super::request::unless_closed;
use super::resume::{resume, standalone};
use super::streams::{Cursor, next, report};
use crate::config::Http as Config;
use crate::jsonrpc::Id;
use crate::upstream::session::{self, Inbound, Mark, Transport};
use futures_util::future::BoxFuture;
use http::{HeaderValue, Method, StatusCode};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

/// How long closing a session (DELETE) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a message sent in the background (a call's cancel) may take to be taken.
const DETACHED_TIMEOUT: Duration = Duration::from_secs(2);

/// A Streamable HTTP session.
pub(crate) struct StreamableHttp {
    ep: Endpoint,
    rx: mpsc::Receiver<Box<Inbound>>,
    tasks: TaskTracker,
    /// What calls send in the background ([`session::Direct::send_detached`]): let finish
    /// before the session closes.
    detached: TaskTracker,
    /// Whether to keep the standalone GET stream open.
    standalone: bool,
    /// Whether a parked call may let its numbered stream go until its retry.
    release_parked: bool,
}

impl StreamableHttp {
    pub fn new(link: Arc<Link>, rx: mpsc::Receiver<Box<Inbound>>, cfg: &Config) -> StreamableHttp {
        StreamableHttp {
            ep: Endpoint {
                link,
                ids: Arc::new(Mutex::new(Ids::default())),
                url: cfg.url.clone(),
            },
            rx,
            tasks: TaskTracker::new(),
            detached: TaskTracker::new(),
            standalone: cfg.standalone_stream,
            release_parked: cfg.release_parked_streams,
        }
    }
}

/// POSTs a message that opens no answer stream (a response to the backend's request, or a
/// notification). An error means the session is gone; any other refusal is logged, since the
/// backend may be waiting for the message and the call's deadline covers that.
async fn send_one_way(ep: &Endpoint, msg: &Value) -> Result<(), String> {
    let json = encode(msg)?;
    let resp = ep
        .link
        .exchange(Method::POST, &ep.url, &post_headers(&ep.ids), Some(&json))
        .await;
    let failure = match resp {
        Ok(r) if r.status().is_success() => return Ok(()),
        Ok(r) if r.status() == StatusCode::NOT_FOUND && has_session(&ep.ids) => Failure::Gone,
        Ok(r) => status_failure(r, &ep.link).await,
        Err(f) => f,
    };
    let backend = &ep.link.backend;
    if matches!(failure, Failure::Gone) {
        return Err(failure.describe());
    }
    tracing::warn!(%backend, "a message to the backend was not accepted: {}", failure.describe());
    Ok(())
}

/// The calls' own way to the backend: each call POSTs its request and reads the answer stream
/// itself, so a response reaches the call without a detour through the session task.
#[derive(Debug)]
struct Direct {
    ep: Endpoint,
    release_parked: bool,
    /// What calls send in the background, which the session lets finish before it closes.
    detached: TaskTracker,
}

impl session::Direct for Direct {
    fn post(
        &self,
        id: Id,
        method: String,
        msg: Vec<u8>,
        sink: Sink,
        mark: Option<Mark>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(unless_closed(self.ep.clone(), sink, id, method, msg, mark))
    }

    fn resume(
        &self,
        id: Id,
        last: String,
        sink: Sink,
        mark: Mark,
        attached: oneshot::Sender<()>,
    ) -> BoxFuture<'static, ()> {
        let ep = self.ep.clone();
        Box::pin(async move {
            // At once: the call let the stream go itself, the backend asked for no wait.
            let cursor = Cursor {
                last_id: Some(last),
                retry: Duration::ZERO,
                mark: Some(mark),
                ..Cursor::default()
            };
            resume(&ep, &sink, &id, cursor, Some(attached)).await
        })
    }

    fn send(&self, msg: Value) -> BoxFuture<'static, Result<(), String>> {
        let ep = self.ep.clone();
        Box::pin(async move { send_one_way(&ep, &msg).await })
    }

    fn send_detached(&self, msg: Value) {
        let ep = self.ep.clone();
        self.detached.spawn(async move {
            let link = ep.link.clone();
            let sent = tokio::time::timeout(DETACHED_TIMEOUT, send_one_way(&ep, &msg));
            tokio::select! {
                _ = link.stop.cancelled() => {}
                sent = sent => match sent {
                    Ok(Ok(())) => {}
                    // The session is gone: its task hears so, as from a call's own stream.
                    Ok(Err(gone)) => report(&link.inbound, Inbound::ended(gone)).await,
                    Err(_) => {
                        tracing::debug!(backend = %link.backend, "a message sent in the background was not taken in time");
                    }
                },
            }
        });
    }

    fn releases_parked(&self) -> bool {
        self.release_parked
    }

    fn session_queue(&self) -> &Sink {
        &self.ep.link.inbound
    }
}

impl Transport for StreamableHttp {
    fn direct(&self) -> Option<Arc<dyn session::Direct>> {
        Some(Arc::new(Direct {
            ep: self.ep.clone(),
            release_parked: self.release_parked,
            detached: self.detached.clone(),
        }))
    }

    async fn send(&mut self, msg: Value) -> Result<(), String> {
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = msg
            .get("id")
            .and_then(|v| serde_json::from_value::<Id>(v.clone()).ok());
        match (method, id) {
            (Some(method), Some(id)) => self.send_request(id, method, &msg),
            (method, _) => self.send_message(method.as_deref(), &msg).await,
        }
    }

    async fn recv(&mut self) -> Inbound {
        next(&mut self.rx).await
    }

    fn ready(&mut self, version: &str) {
        // The header exists from 2025-06-18 on.
        if version >= "2025-06-18" {
            self.ep.ids.lock().expect("ids lock").version = HeaderValue::from_str(version).ok();
        }
    }

    async fn close(self) {
        let StreamableHttp {
            ep,
            rx,
            tasks,
            detached,
            ..
        } = self;
        // Nothing reads the queue from here on: calls whose streams still carry something for
        // the session hear at once that it cannot be delivered.
        drop(rx);
        // A cancel a call sent just before goes out first (within its own bound), so the
        // backend hears of the cancelled call before the session ends.
        detached.close();
        detached.wait().await;
        ep.link.stop.cancel();
        tasks.close();
        if has_session(&ep.ids) {
            delete_session(&ep).await;
        }
        tasks.wait().await;
    }
}

impl StreamableHttp {
    /// Sends a request from the session task in a task of its own, which ends with the session.
    /// Only `initialize` comes this way: calls send their own (`Direct`).
    fn send_request(&mut self, id: Id, method: String, msg: &Value) -> Result<(), String> {
        let sink = self.ep.link.inbound.clone();
        let stop = self.ep.link.stop.clone();
        let msg = encode(msg)?;
        let request = unless_closed(self.ep.clone(), sink, id, method, msg, None);
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = request => {}
            }
        });
        Ok(())
    }

    /// Sends a response or a notification; once the session is initialized, opens the
    /// standalone stream if the backend's config asks for it.
    async fn send_message(&mut self, method: Option<&str>, msg: &Value) -> Result<(), String> {
        send_one_way(&self.ep, msg).await?;
        if method == Some("notifications/initialized") && self.standalone {
            self.tasks.spawn(standalone(self.ep.clone()));
        }
        Ok(())
    }
}

/// Ends the backend's session (DELETE), waiting at most [`CLOSE_TIMEOUT`]; how it went is only
/// logged.
async fn delete_session(ep: &Endpoint) {
    let link = ep.link.clone();
    let headers = session_headers(&ep.ids);
    let delete = link.exchange(Method::DELETE, &ep.url, &headers, None);
    match tokio::time::timeout(CLOSE_TIMEOUT, delete).await {
        Ok(Ok(r)) => {
            tracing::debug!(backend = %link.backend, status = %r.status(), "session deleted")
        }
        Ok(Err(f)) => {
            tracing::debug!(backend = %link.backend, "DELETE failed: {}", f.describe())
        }
        Err(_) => tracing::debug!(backend = %link.backend, "DELETE timed out"),
    }
}

//! One legacy session, owned by one task. The task writes requests and responses, reads every
//! message the backend sends, and routes it: a response to the call that asked, a progress
//! notification to the call whose token it carries, a server request to the session's one
//! interactive call, and requests outside any call by the rules for them (ping answered, roots
//! from static config or held for the next call, anything else refused).
//!
//! On Streamable HTTP each request has its own answer stream, which the call reads itself
//! (`Direct`); the session task then routes only what is not the call's own answer.
//!
//! The task is generic over a [`Transport`] (stdio lines, Streamable HTTP, HTTP+SSE), so every
//! backend kind shares the handshake, the routing and the shutdown path.
//!
//! This file holds the [`Session`] handle calls use and what a call hears ([`CallEvent`]). The
//! rest, in the order a session lives: [`open`] (the handshake), `task` (the loop that owns the
//! transport), `router` (where each backend message goes), `events` (how a call reads what is
//! routed to it and, on Streamable HTTP, its own answer stream), `transport` (what a backend
//! connection provides).

mod events;
mod open;
pub mod proxy;
mod router;
mod task;
mod transport;

#[cfg(test)]
mod tests;

pub use events::Events;
pub use open::{InitResults, Start};
pub use router::Rules;

pub(crate) use open::{Begin, Pooled};
pub(crate) use transport::{Direct, Inbound, Mark, Transport};

use super::Error;
use crate::jsonrpc::{ErrorObject, Id, Message};
use crate::protocol::caps::Declared;
use events::OwnStream;
use router::rewrite_progress;
use serde_json::{Value, json};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use task::Cmd;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What a call hears from the backend.
#[derive(Debug)]
pub enum CallEvent {
    Notification {
        method: String,
        params: Option<Value>,
    },
    ServerRequest {
        id: Id,
        method: String,
        params: Option<Value>,
        /// For a `roots/list` the session held before handing it to this call: when the
        /// session refuses it if no client has answered it by then. A call that ends before
        /// its client sees the request gives it back with this deadline
        /// ([`Session::hold_roots`]), so passing from call to call never extends it.
        held_until: Option<Instant>,
    },
    /// The call's result as the backend wrote it, or its error.
    Response(Result<crate::jsonrpc::Raw, ErrorObject>),
    /// The session ended before the call finished.
    Closed(String),
    /// The request never reached the backend (its session was gone): safe to send again on a
    /// new session.
    Unsent(String),
}

/// A call in flight on a session.
#[derive(Debug)]
pub struct Call {
    pub id: Id,
    pub events: Events,
}

/// Per-call channel depth: events beyond it wait, which slows the backend reader, never drops.
const CALL_EVENTS: usize = 64;

/// Where the sequence of JSON-RPC ids of requests to backends stands: one sequence for every
/// session of the process, from a random start.
///
/// Not a count per session: a backend may keep what it knows of a request beyond the session
/// that sent it, under the request's id alone. A Streamable HTTP server given one event store
/// for all its sessions keeps each answer stream's events under the id of the request it
/// answers, and a pick-up with `Last-Event-ID` replays whatever any session wrote under that
/// id: with ids counted per session from 1, a parked call picking its stream up at its retry
/// was handed another session's events for the same id (the error of a call abandoned there,
/// or its result) as its own. From one sequence, no two requests of the gateway share an id
/// (until the sequence wraps, after two billion requests), and the random start keeps two
/// gateways (replicas, or one restarted) in front of one backend apart, in practice.
static NEXT_REQUEST_ID: LazyLock<AtomicU64> = LazyLock::new(|| {
    let random = RandomState::new().hash_one(std::process::id());
    AtomicU64::new(random % (1 << 30))
});

/// An id no other call of this gateway to a backend has ([`NEXT_REQUEST_ID`]). `initialize`
/// keeps 0 in every session ([`open`]): it is the session's first request, answered before any
/// call's.
fn request_id() -> Id {
    Id::Number(id_at(NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed)))
}

/// The id at place `n` of the sequence: within 1..=2^31-1, since servers whose SDK reads a
/// request id as a 32-bit integer are still deployed (the Rust SDK's did until September
/// 2025), and an id past that range fails every request to them.
fn id_at(n: u64) -> i64 {
    const RANGE: u64 = i32::MAX as u64;
    1 + (n % RANGE) as i64
}

/// The `notifications/cancelled` that tells the backend call `id` is cancelled.
fn cancellation(id: &Id, reason: &str) -> (&'static str, Option<Value>) {
    let params = json!({"requestId": id, "reason": reason});
    ("notifications/cancelled", Some(params))
}

/// The session task's end of a call's events.
#[derive(Debug, Clone)]
pub(crate) struct EventTx(mpsc::Sender<Box<CallEvent>>);

impl EventTx {
    async fn send(&self, event: CallEvent) -> Result<(), ()> {
        self.0.send(Box::new(event)).await.map_err(|_| ())
    }

    /// Room for one event, once there is; `None` if the call no longer takes any. What a
    /// permit sends is received even if the call closes its end meanwhile.
    async fn reserve(&self) -> Option<mpsc::Permit<'_, Box<CallEvent>>> {
        self.0.reserve().await.ok()
    }

    fn try_send(&self, event: CallEvent) {
        let _ = self.0.try_send(Box::new(event));
    }
}

impl InitInfo {
    /// The `_meta` of a result the gateway builds itself: the backend's `serverInfo`, when
    /// results carry it.
    pub fn result_meta(&self) -> Option<Value> {
        self.server_info.as_ref()?;
        let info = self.result.get("serverInfo")?;
        Some(json!({ crate::protocol::meta::SERVER_INFO: info }))
    }
}

/// Facts fixed by the session's `initialize`.
#[derive(Debug, Clone)]
pub struct InitInfo {
    pub protocol_version: String,
    /// Shared with the backend's other sessions that got the same one ([`InitResults`]).
    pub result: Arc<Value>,
    /// The backend's `serverInfo` as JSON text, which every result to a client carries in its
    /// `_meta`; `None` when it gave none, or when the backend's `server_info` is off.
    pub server_info: Option<Arc<str>>,
    /// The client capabilities this session declared, as far as its version carries them.
    pub declared: Declared,
}

/// A handle to a session task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: u64,
    backend: String,
    cmd: mpsc::Sender<Box<Cmd>>,
    /// How long a caller waits for room in `cmd` before the session counts as stuck.
    cmd_wait: Duration,
    info: InitInfo,
    alive: Arc<AtomicBool>,
    /// Set when calls send their own requests (Streamable HTTP).
    direct: Option<Arc<dyn Direct>>,
}

impl Session {
    pub(crate) fn new(
        id: u64,
        backend: String,
        cmd: mpsc::Sender<Box<Cmd>>,
        cmd_wait: Duration,
        info: InitInfo,
        alive: Arc<AtomicBool>,
        direct: Option<Arc<dyn Direct>>,
    ) -> Session {
        Session {
            inner: Arc::new(Inner {
                id,
                backend,
                cmd,
                cmd_wait,
                info,
                alive,
                direct,
            }),
        }
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub fn backend(&self) -> &str {
        &self.inner.backend
    }

    pub fn info(&self) -> &InitInfo {
        &self.inner.info
    }

    pub fn is_alive(&self) -> bool {
        self.inner.alive.load(Ordering::Acquire) && !self.inner.cmd.is_closed()
    }

    fn closed(&self) -> Error {
        Error::Closed {
            backend: self.inner.backend.clone(),
            reason: "the session has ended".into(),
        }
    }

    /// Hands the session task a command. A task that takes none for `cmd_wait` is stuck: the
    /// session counts as gone (no call lands on it again) and the caller hears so, rather than
    /// waiting outside every deadline.
    async fn command(&self, cmd: Cmd) -> Result<(), Error> {
        // Boxed: a timer is large, and every future that sends a command (a parked call's
        // among them) would otherwise carry room for it.
        let sent = Box::pin(tokio::time::timeout(
            self.inner.cmd_wait,
            self.inner.cmd.send(Box::new(cmd)),
        ));
        match sent.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.closed()),
            Err(_) => {
                self.inner.alive.store(false, Ordering::Release);
                tracing::warn!(backend = %self.inner.backend, session = self.inner.id, "the session task took no command in time; the session is given up");
                Err(Error::Closed {
                    backend: self.inner.backend.clone(),
                    reason: format!(
                        "the session took no request for {}s",
                        self.inner.cmd_wait.as_secs_f64()
                    ),
                })
            }
        }
    }

    /// Sends a request; `interactive` routes the session's server requests to this call.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        interactive: bool,
    ) -> Result<Call, Error> {
        let id = request_id();
        let Some(direct) = &self.inner.direct else {
            let (events, routed) = mpsc::channel(CALL_EVENTS);
            let events = EventTx(events);
            self.command(Cmd::Request {
                id: id.clone(),
                method: method.to_owned(),
                params,
                interactive,
                events,
            })
            .await?;
            let events = Events::routed(routed);
            return Ok(Call { id, events });
        };
        if !self.is_alive() {
            return Err(self.closed());
        }
        let mut params = params;
        let progress = rewrite_progress(&id, params.as_mut());
        // Registered before the request goes out, so the session task (which takes commands
        // before the backend's messages) routes the backend's first push to this call.
        let registered = interactive || progress.is_some();
        let mut routed = None;
        if registered {
            let (events, rx) = mpsc::channel(CALL_EVENTS);
            routed = Some(rx);
            self.command(Cmd::Register {
                id: id.clone(),
                progress: progress.clone(),
                interactive,
                events: EventTx(events),
            })
            .await?;
        }
        let msg = crate::jsonrpc::request_text(&id, method, params.as_ref());
        let (sink, own) = mpsc::channel(CALL_EVENTS);
        let mark = direct.releases_parked().then(Mark::default);
        let pump = direct.post(id.clone(), method.to_owned(), msg, sink, mark.clone());
        let own = OwnStream::new(
            id.clone(),
            progress,
            registered,
            mark,
            pump,
            own,
            self.clone(),
        );
        let events = Events::own(routed, own);
        Ok(Call { id, events })
    }

    /// Answers a server request.
    pub async fn respond(&self, id: Id, outcome: Result<Value, ErrorObject>) -> Result<(), Error> {
        if let Some(direct) = &self.inner.direct {
            let msg = crate::jsonrpc::response(Some(&id), outcome);
            return self.send_direct(direct, msg).await;
        }
        self.command(Cmd::Respond { id, outcome }).await
    }

    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Error> {
        let method = method.to_owned();
        if let Some(direct) = &self.inner.direct {
            let msg = Message::Notification { method, params }.into_value();
            return self.send_direct(direct, msg).await;
        }
        self.command(Cmd::Notify { method, params }).await
    }

    /// Tells the backend that call `id` is cancelled, without waiting for it to take the
    /// message: a client's answer never waits on a backend that may be stuck. On Streamable
    /// HTTP the POST runs in the background, owned by the session ([`Direct::send_detached`]);
    /// elsewhere the message joins the session task's queue, in order behind the answers
    /// already there, unless the queue is full (the task is far behind; a call the backend
    /// does not let go gets its session closed anyway).
    pub fn cancel(&self, id: &Id, reason: &str) {
        let (method, params) = cancellation(id, reason);
        let method = method.to_owned();
        if let Some(direct) = &self.inner.direct {
            if self.is_alive() {
                direct.send_detached(Message::Notification { method, params }.into_value());
            }
            return;
        }
        let queued = self
            .inner
            .cmd
            .try_send(Box::new(Cmd::Notify { method, params }));
        if queued.is_err() {
            tracing::debug!(backend = %self.inner.backend, session = self.inner.id, "the session task takes no command now; the cancel is not sent");
        }
    }

    /// Tells the backend that call `id` is cancelled and returns once it has taken the message,
    /// or `within` has passed: for a caller whose next messages (the call's open requests
    /// answered) must reach the backend after the cancellation, not before it.
    pub async fn cancel_in_order(&self, id: &Id, reason: &str, within: Duration) {
        let (method, params) = cancellation(id, reason);
        let _ = tokio::time::timeout(within, self.notify(method, params)).await;
    }

    /// Sends a one-way message from the caller's own task, when the transport lets calls send
    /// (no hand-over to the session task on the way). A session the backend no longer knows
    /// ends here as it would in the session task.
    async fn send_direct(&self, direct: &Arc<dyn Direct>, msg: Value) -> Result<(), Error> {
        if !self.is_alive() {
            return Err(self.closed());
        }
        match direct.send(msg).await {
            Ok(()) => Ok(()),
            Err(reason) => {
                events::session_ended(self, reason).await;
                Err(self.closed())
            }
        }
    }

    /// Gives the session back a `roots/list` that reached a call which ended before its client
    /// saw it: the session treats it as one outside any call (held for its next call, by
    /// `held_until` if it was held before, or answered), so it is never left unanswered.
    pub async fn hold_roots(&self, id: Id, held_until: Option<Instant>) -> Result<(), Error> {
        self.command(Cmd::HoldRoots { id, held_until }).await
    }

    /// Stops routing events for a call (it finished or was abandoned). Never blocks.
    pub fn forget(&self, id: Id) {
        let _ = self.inner.cmd.try_send(Box::new(Cmd::Forget { id }));
    }
}

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

use super::Error;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, Message};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use futures_util::FutureExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
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

/// What a call hears, in order. Events travel boxed: a channel allocates room for 32 of them up
/// front, and a parked call keeps its channel for as long as it waits.
#[derive(Debug)]
pub struct Events {
    /// What the session task routes to the call; none for a call on its own stream that the
    /// session never hears of (no input and no progress can be routed to it).
    routed: Option<mpsc::Receiver<Box<CallEvent>>>,
    /// The call's own answer stream, when the transport lets calls read it themselves.
    own: Option<Box<OwnStream>>,
}

impl Events {
    fn routed(rx: mpsc::Receiver<Box<CallEvent>>) -> Events {
        Events {
            routed: Some(rx),
            own: None,
        }
    }

    /// The next event; `None` once the session has let go of the call.
    pub async fn recv(&mut self) -> Option<CallEvent> {
        let Some(own) = self.own.as_deref_mut() else {
            return next_from(&mut self.routed).await.map(|e| *e);
        };
        loop {
            tokio::select! {
                biased;
                event = next_from(&mut self.routed), if own.registered => match event {
                    // The session ended, but the call's own stream may still say how it went
                    // (answered, or never seen by the backend and safe to send again): kept
                    // until the stream is over, since a finished request's last word may still
                    // wait in `rx`.
                    Some(event) if matches!(*event, CallEvent::Closed(_)) && own.streaming => {
                        own.closed = Some(*event);
                        own.registered = false;
                    }
                    Some(event) => return Some(*event),
                    None => own.registered = false,
                },
                inbound = next_from(&mut own.rx) => match inbound {
                    Some(inbound) => {
                        // Boxed: the call's future would otherwise keep room for it while
                        // it waits, parked, for anything else.
                        if let Some(event) = Box::pin(own.take(*inbound)).await {
                            return Some(event);
                        }
                    }
                    // The stream is over; the session may still route to the call.
                    None => {
                        own.streaming = false;
                        if own.registered {
                            return next_from(&mut self.routed).await.map(|e| *e);
                        }
                        return own.closed.take();
                    }
                },
                _ = async { own.pump.as_mut().expect("guarded").await }, if own.pump.is_some() => {
                    own.pump = None;
                }
            }
        }
    }

    /// Lets go of the call's answer stream while the call waits for its client, if the backend
    /// numbers its events: the stream can then be picked up again where it stopped, and a
    /// parked call holds no connection meanwhile. Until [`Events::resume`], only the session's
    /// routing reaches the call. True if the stream was let go.
    pub fn release(&mut self) -> bool {
        let Some(own) = self.own.as_deref_mut() else {
            return false;
        };
        let numbered = own
            .mark
            .as_ref()
            .is_some_and(|m| m.lock().expect("mark lock").is_some());
        // Everything the stream delivered must have been taken: what the pump still holds
        // would be lost with it. And the session must still route to the call (it has not
        // ended), or nothing would reach the call until the retry.
        let drained = own.rx.as_ref().is_none_or(|rx| rx.is_empty());
        if own.released || own.pump.is_none() || !own.registered || !numbered || !drained {
            return false;
        }
        own.pump = None;
        // Nothing will come on the stream's channel any more: a parked call keeps none.
        own.rx = None;
        own.released = true;
        true
    }

    /// Picks the answer stream up again after [`Events::release`], from the last event the
    /// call received.
    pub fn resume(&mut self) {
        let Some(own) = self.own.as_deref_mut() else {
            return;
        };
        let (Some(direct), Some(mark)) = (own.session.inner.direct.clone(), own.mark.clone())
        else {
            return;
        };
        if !own.released {
            return;
        }
        let Some(last) = mark.lock().expect("mark lock").clone() else {
            return;
        };
        let (sink, rx) = mpsc::channel(CALL_EVENTS);
        own.rx = Some(rx);
        own.streaming = true;
        own.released = false;
        own.pump = Some(direct.resume(own.id.clone(), last, sink, mark));
    }
}

/// Hands the session task something a call's own stream carried, to be routed; false if the
/// session task no longer takes anything.
async fn to_session(session: &Session, inbound: Inbound) -> bool {
    match &session.inner.direct {
        Some(direct) => direct.session_queue().send(Box::new(inbound)).await.is_ok(),
        None => false,
    }
}

/// A call's own stream said the session is over: it is dead before anyone hears of it (so a
/// call sent again never lands on it), and the session task is told.
async fn session_ended(session: &Session, reason: String) {
    session.inner.alive.store(false, Ordering::Release);
    let unsent = None;
    to_session(session, Inbound::Ended { reason, unsent }).await;
}

impl Drop for OwnStream {
    /// A stream that is still open once the call is done is read to its end, so its connection
    /// can be used again: at once when the rest has already arrived, else in the background
    /// (briefly). The session's end is passed on; anything else it carries is dropped.
    fn drop(&mut self) {
        let (Some(mut pump), Some(mut rx)) = (self.pump.take(), self.rx.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Most streams end right behind their answer: when the rest is already here, the
        // stream is finished now instead of in a task of its own.
        if futures_util::FutureExt::now_or_never(pump.as_mut()).is_some() {
            // The pump was the only sender: what it sent is all in `rx`.
            let mut ended = None;
            while let Ok(inbound) = rx.try_recv() {
                if let Inbound::Ended { reason, .. } = *inbound {
                    ended = Some(reason);
                }
            }
            if let Some(reason) = ended {
                let session = self.session.clone();
                runtime.spawn(async move { session_ended(&session, reason).await });
            }
            return;
        }
        let session = self.session.clone();
        runtime.spawn(async move {
            let drain = async {
                while let Some(inbound) = rx.recv().await {
                    // The session's end still counts: no new call may land on it.
                    if let Inbound::Ended { reason, .. } = *inbound {
                        session_ended(&session, reason).await;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN, futures_util::future::join(pump, drain)).await;
        });
    }
}

/// The next message on a channel the call may not have (no routing channel, or its own stream
/// let go); `None` once it is over, or at once without one.
async fn next_from<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => None,
    }
}

/// How long a finished call's answer stream may take to end on its own.
const DRAIN: Duration = Duration::from_secs(2);

/// A call's own POST and answer stream: the response and the call's progress come straight to
/// the call; the backend's requests and anything else go to the session task to be routed.
struct OwnStream {
    id: Id,
    progress: Option<String>,
    /// Whether the session task routes to this call too (interactive, or with a progress token).
    registered: bool,
    /// The session's word that it ended, kept until the call's own stream has had its say.
    closed: Option<CallEvent>,
    /// Whether the stream may still carry something (`rx` has not reported its end).
    streaming: bool,
    /// The last event id the call received from its stream, when the transport may let a
    /// parked call's stream go.
    mark: Option<Mark>,
    /// The stream was let go while the call is parked ([`Events::release`]).
    released: bool,
    /// Sends the request and reads its answer into `rx`; polled while the call waits for events.
    pump: Option<futures_util::future::BoxFuture<'static, ()>>,
    /// What the pump delivers; `None` while the stream is let go.
    rx: Option<mpsc::Receiver<Box<Inbound>>>,
    session: Session,
}

impl std::fmt::Debug for OwnStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnStream")
            .field("id", &self.id)
            .field("registered", &self.registered)
            .field("pumping", &self.pump.is_some())
            .finish_non_exhaustive()
    }
}

impl OwnStream {
    /// What the call hears of one thing its stream carried, if anything.
    async fn take(&mut self, inbound: Inbound) -> Option<CallEvent> {
        let mine = |id: &Id| *id == self.id;
        match inbound {
            Inbound::Message(Message::Response { id, outcome }) if mine(&id) => {
                self.finish();
                Some(CallEvent::Response(outcome))
            }
            Inbound::Message(Message::Notification { method, params })
                if method == "notifications/message"
                    || (method == "notifications/progress"
                        && self.progress.is_some()
                        && params
                            .as_ref()
                            .and_then(|p| p.get("progressToken"))
                            .and_then(Value::as_str)
                            == self.progress.as_deref()) =>
            {
                Some(CallEvent::Notification { method, params })
            }
            Inbound::Failed { id, reason } if mine(&id) => {
                self.finish();
                Some(CallEvent::Closed(reason))
            }
            Inbound::Ended { reason, unsent } => {
                let event = if unsent.as_ref().is_some_and(mine) {
                    CallEvent::Unsent(reason.clone())
                } else {
                    CallEvent::Closed(reason.clone())
                };
                session_ended(&self.session, reason).await;
                self.finish();
                Some(event)
            }
            other => {
                let Inbound::Message(Message::Request { method, .. }) = &other else {
                    to_session(&self.session, other).await;
                    return None;
                };
                // A request of the backend's is answered through the session: once the session
                // is over, nobody can, and the call would wait for its deadline.
                let method = method.clone();
                if self.session.is_alive() && to_session(&self.session, other).await {
                    return None;
                }
                self.finish();
                Some(CallEvent::Closed(format!(
                    "the backend sent `{method}` after its session ended; it cannot be answered"
                )))
            }
        }
    }

    /// The call has its outcome: the session task stops routing to it.
    fn finish(&mut self) {
        if self.registered {
            self.session.forget(self.id.clone());
            self.registered = false;
        }
    }
}

/// The session task's end of a call's events.
#[derive(Debug, Clone)]
pub(crate) struct EventTx(mpsc::Sender<Box<CallEvent>>);

impl EventTx {
    async fn send(&self, event: CallEvent) -> Result<(), ()> {
        self.0.send(Box::new(event)).await.map_err(|_| ())
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

pub(crate) enum Cmd {
    /// A new call: its id and event channel are made by the caller, so sending it is one hop.
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
        interactive: bool,
        events: EventTx,
    },
    Respond {
        id: Id,
        outcome: Result<Value, ErrorObject>,
    },
    Notify {
        method: String,
        params: Option<Value>,
    },
    /// The call is over for the gateway: stop routing to it.
    Forget { id: Id },
    /// A call that sends its request itself: route the session's requests and its progress to it.
    Register {
        id: Id,
        progress: Option<String>,
        interactive: bool,
        events: EventTx,
    },
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
    /// The next upstream request id of this session.
    next_id: std::sync::atomic::AtomicI64,
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
                next_id: std::sync::atomic::AtomicI64::new(1),
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
        // Ids start at 1: `initialize` was 0.
        let id = Id::Number(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
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
        let events = Events {
            routed,
            own: Some(Box::new(OwnStream {
                id: id.clone(),
                progress,
                registered,
                closed: None,
                streaming: true,
                mark,
                released: false,
                pump: Some(pump),
                rx: Some(own),
                session: self.clone(),
            })),
        };
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
                session_ended(self, reason).await;
                Err(self.closed())
            }
        }
    }

    /// Stops routing events for a call (it finished or was abandoned). Never blocks.
    pub fn forget(&self, id: Id) {
        let _ = self.inner.cmd.try_send(Box::new(Cmd::Forget { id }));
    }
}

/// How the routing task treats requests that belong to no call.
#[derive(Debug, Clone)]
pub struct Rules {
    pub static_roots: Arc<Vec<Value>>,
    pub held_roots_wait: Duration,
}

/// Rewrites a request's progress token to one derived from the upstream id, so notifications
/// route exactly; returns the new token.
fn rewrite_progress(id: &Id, params: Option<&mut Value>) -> Option<String> {
    let meta = params?.get_mut("_meta")?.as_object_mut()?;
    if !meta.contains_key("progressToken") {
        return None;
    }
    let token = format!("mrtr-{id}");
    meta.insert("progressToken".into(), json!(token));
    Some(token)
}

/// Per-call channel depth: events beyond it wait, which slows the backend reader, never drops.
const CALL_EVENTS: usize = 64;

/// The routing state of one session task.
pub(crate) struct Router {
    pub backend: String,
    pub declared: Declared,
    pub rules: Rules,
    calls: HashMap<Id, EventTx>,
    progress: HashMap<String, Id>,
    interactive: Option<Id>,
    held_roots: Vec<(Id, Instant)>,
    /// The most `roots/list` requests held at once (`limits.max_input_requests`).
    max_held_roots: usize,
}

/// What the task must write after routing.
pub(crate) type Outbox = Vec<Value>;

impl Router {
    pub fn new(backend: String, declared: Declared, rules: Rules, max_held_roots: usize) -> Router {
        Router {
            backend,
            declared,
            rules,
            calls: HashMap::new(),
            progress: HashMap::new(),
            interactive: None,
            held_roots: Vec::new(),
            max_held_roots,
        }
    }

    /// Registers a call and returns the message to write for it.
    pub async fn start(
        &mut self,
        id: Id,
        tx: EventTx,
        method: String,
        params: Option<Value>,
        interactive: bool,
    ) -> Value {
        let mut params = params;
        let progress = rewrite_progress(&id, params.as_mut());
        self.register(id.clone(), tx, progress, interactive).await;
        Message::Request { id, method, params }.into_value()
    }

    /// Routes the session's requests (if `interactive`) and the progress of `progress` to a call.
    pub async fn register(
        &mut self,
        id: Id,
        tx: EventTx,
        progress: Option<String>,
        interactive: bool,
    ) {
        if let Some(token) = progress {
            self.progress.insert(token, id.clone());
        }
        if interactive {
            self.interactive = Some(id.clone());
            // Requests held since before this call belong to its first round.
            for (held, _) in std::mem::take(&mut self.held_roots) {
                let _ = tx
                    .send(CallEvent::ServerRequest {
                        id: held,
                        method: "roots/list".into(),
                        params: None,
                    })
                    .await;
            }
        }
        self.calls.insert(id, tx);
    }

    pub fn forget(&mut self, id: &Id) {
        self.calls.remove(id);
        self.progress.retain(|_, v| v != id);
        if self.interactive.as_ref() == Some(id) {
            self.interactive = None;
        }
    }

    /// Routes one message from the backend; returns messages to write back.
    pub async fn route(&mut self, msg: Message) -> Outbox {
        let mut out = Outbox::new();
        match msg {
            Message::Response { id, outcome } => match self.calls.get(&id) {
                Some(tx) => {
                    let _ = tx.send(CallEvent::Response(outcome)).await;
                    self.forget(&id);
                }
                None => {
                    tracing::warn!(backend = %self.backend, %id, "backend answered an id nobody asked; dropped")
                }
            },
            Message::Notification { method, params } => {
                let target = match method.as_str() {
                    "notifications/progress" => params
                        .as_ref()
                        .and_then(|p| p.get("progressToken"))
                        .and_then(Value::as_str)
                        .and_then(|t| self.progress.get(t))
                        .cloned(),
                    "notifications/message" => self.interactive.clone(),
                    _ => None,
                };
                match target.and_then(|id| self.calls.get(&id)) {
                    Some(tx) => {
                        let _ = tx.send(CallEvent::Notification { method, params }).await;
                    }
                    None => {
                        tracing::debug!(backend = %self.backend, %method, "notification outside any call; dropped")
                    }
                }
            }
            Message::Request { id, method, params } => {
                if method == "ping" {
                    out.push(crate::jsonrpc::response(Some(&id), Ok(json!({}))));
                    return out;
                }
                let Some(kind) = Kind::from_method(&method) else {
                    out.push(crate::jsonrpc::response(
                        Some(&id),
                        Err(ErrorObject::new(
                            crate::jsonrpc::METHOD_NOT_FOUND,
                            format!("method `{method}` is not supported"),
                        )),
                    ));
                    return out;
                };
                if let Some(tx) = self.interactive.as_ref().and_then(|c| self.calls.get(c)) {
                    let _ = tx
                        .send(CallEvent::ServerRequest { id, method, params })
                        .await;
                    return out;
                }
                // Outside any call.
                match kind {
                    Kind::Roots if !self.rules.static_roots.is_empty() => {
                        out.push(crate::jsonrpc::response(
                            Some(&id),
                            Ok(json!({"roots": *self.rules.static_roots})),
                        ));
                    }
                    Kind::Roots
                        if self.declared.roots && self.held_roots.len() >= self.max_held_roots =>
                    {
                        tracing::warn!(backend = %self.backend, %id, held = self.held_roots.len(), "roots/list outside a call: already holding the most allowed (limits.max_input_requests); refused");
                        out.push(refuse_held_roots(
                            &id,
                            "too many roots/list requests are waiting for a client request",
                        ));
                    }
                    Kind::Roots if self.declared.roots => {
                        tracing::debug!(backend = %self.backend, %id, "roots/list outside a call: held for the next call");
                        self.held_roots
                            .push((id, Instant::now() + self.rules.held_roots_wait));
                    }
                    _ => {
                        let why = if input::allowed(&self.declared, kind, params.as_ref()) {
                            ErrorObject::new(
                                INTERNAL_ERROR,
                                format!(
                                    "{} outside a client request is not supported",
                                    kind.as_str()
                                ),
                            )
                        } else {
                            input::refused_answer(&self.declared, kind, params.as_ref())
                        };
                        out.push(crate::jsonrpc::response(Some(&id), Err(why)));
                    }
                }
            }
        }
        out
    }

    /// The earliest held request deadline, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held_roots.iter().map(|(_, d)| *d).min()
    }

    /// Answers held requests whose deadline passed.
    pub fn expire_held(&mut self, now: Instant) -> Outbox {
        let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_roots)
            .into_iter()
            .partition(|(_, d)| *d <= now);
        self.held_roots = kept;
        expired
            .into_iter()
            .map(|(id, _)| refuse_held_roots(&id, "no client request arrived to answer roots/list"))
            .collect()
    }

    /// Fails one call whose request the transport could not deliver or got no answer for.
    pub async fn fail(&mut self, id: &Id, reason: String, resend: bool) {
        if let Some(tx) = self.calls.get(id) {
            let event = if resend {
                CallEvent::Unsent(reason)
            } else {
                CallEvent::Closed(reason)
            };
            let _ = tx.send(event).await;
        }
        self.forget(id);
    }

    /// Fails every call: the session is gone.
    pub async fn close_all(&mut self, reason: &str) {
        for (_, tx) in self.calls.drain() {
            let _ = tx.send(CallEvent::Closed(reason.to_owned())).await;
        }
        self.interactive = None;
        self.progress.clear();
    }
}

/// The answer to a `roots/list` request outside any call that no call will answer.
fn refuse_held_roots(id: &Id, why: &str) -> Value {
    crate::jsonrpc::response(Some(id), Err(ErrorObject::new(INTERNAL_ERROR, why)))
}

/// What a transport hands the session task.
#[derive(Debug)]
pub(crate) enum Inbound {
    Message(Message),
    /// One request failed in transit; the session goes on.
    Failed {
        id: Id,
        reason: String,
    },
    /// The connection or the backend's session is over. `unsent` names a request the backend
    /// never saw (its session was already gone), which may be sent again on a new session.
    Ended {
        reason: String,
        unsent: Option<Id>,
    },
}

impl Inbound {
    pub fn failed(id: &Id, reason: impl Into<String>) -> Inbound {
        Inbound::Failed {
            id: id.clone(),
            reason: reason.into(),
        }
    }

    pub fn ended(reason: impl Into<String>) -> Inbound {
        Inbound::Ended {
            reason: reason.into(),
            unsent: None,
        }
    }
}

/// A connection to one legacy session: stdio lines, Streamable HTTP, or HTTP+SSE.
pub(crate) trait Transport: Send + 'static {
    /// Sends one message. An error means the connection is unusable.
    fn send(&mut self, msg: Value) -> impl Future<Output = Result<(), String>> + Send;
    /// The next thing the backend said. Must be cancel-safe: the task selects on it.
    fn recv(&mut self) -> impl Future<Output = Inbound> + Send;
    /// The handshake is over and `version` was negotiated.
    fn ready(&mut self, _version: &str) {}
    /// A way for calls to send their requests and read the answers themselves, if the transport
    /// gives each request its own answer stream.
    fn direct(&self) -> Option<Arc<dyn Direct>> {
        None
    }
    /// Ends the connection politely (close stdin, DELETE the session).
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Where a call's own answer stream got to: the id of the last event it delivered, if the
/// backend numbers its events.
pub(crate) type Mark = Arc<std::sync::Mutex<Option<String>>>;

/// Requests sent by the calls themselves (Streamable HTTP: one POST and answer stream each).
pub(crate) trait Direct: Send + Sync + std::fmt::Debug {
    /// Sends `msg` (a request's JSON text) and delivers everything its answer carries to
    /// `sink`, noting in `mark` the last event delivered, until the answer is complete.
    fn post(
        &self,
        id: Id,
        method: String,
        msg: Vec<u8>,
        sink: mpsc::Sender<Box<Inbound>>,
        mark: Option<Mark>,
    ) -> futures_util::future::BoxFuture<'static, ()>;
    /// Picks up request `id`'s answer stream after event `last`, as [`Direct::post`] reads it.
    fn resume(
        &self,
        id: Id,
        last: String,
        sink: mpsc::Sender<Box<Inbound>>,
        mark: Mark,
    ) -> futures_util::future::BoxFuture<'static, ()>;
    /// Sends a message that opens no answer stream (an answer to the backend, a notification)
    /// straight from the caller. An error means the session is gone.
    fn send(&self, msg: Value) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
    /// Whether a parked call may let its stream go and pick it up again later.
    fn releases_parked(&self) -> bool;
    /// The session task's queue, for what a call's stream carries that is not the call's.
    fn session_queue(&self) -> &mpsc::Sender<Box<Inbound>>;
}

/// The last `initialize` result of one backend's sessions, with its `serverInfo` as text.
/// Sessions of a backend almost always get the same one, and each parked call keeps a session:
/// they share one copy.
#[derive(Debug, Default, Clone)]
pub struct InitResults {
    last: Arc<std::sync::Mutex<Option<Shared>>>,
    /// Whether results carry the backend's `serverInfo` (the backend's `server_info`).
    server_info: bool,
}

type Shared = (Arc<Value>, Option<Arc<str>>);

impl InitResults {
    pub fn new(server_info: bool) -> InitResults {
        InitResults {
            last: Default::default(),
            server_info,
        }
    }

    fn share(&self, result: Value) -> Shared {
        let mut last = self.last.lock().expect("init results lock");
        if let Some(known) = last.as_ref().filter(|(known, _)| **known == result) {
            return known.clone();
        }
        // An `Implementation`: at least a name and a version, both strings.
        let server_info = result
            .get("serverInfo")
            .filter(|info| self.server_info && info["name"].is_string())
            .filter(|info| info["version"].is_string())
            .map(|info| Arc::from(info.to_string()));
        let shared = (Arc::new(result), server_info);
        *last = Some(shared.clone());
        shared
    }
}

static SESSION_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Everything a new session needs to know.
#[derive(Debug, Clone)]
pub struct Start {
    pub backend: String,
    pub protocol_version: &'static str,
    pub declared: Declared,
    pub client_info: Option<Value>,
    pub max_message_bytes: usize,
    pub max_json_depth: usize,
    /// The most `roots/list` requests outside any call held at once (`limits.max_input_requests`).
    pub max_held_roots: usize,
    pub init_timeout: Duration,
    pub rules: Rules,
    /// The client's `Authorization` header, when the backend's policy passes it upstream.
    pub authorization: Option<http::HeaderValue>,
    /// Owns the session task, so shutdown can wait until every session has closed.
    pub tasks: tokio_util::task::TaskTracker,
    pub init_results: InitResults,
}

/// Runs `initialize` over `transport` and starts the task that owns the session; `on_exit` runs
/// once the task has closed the transport (the stdio child is reaped there).
pub(crate) async fn open<T, F>(
    mut transport: T,
    start: Start,
    shutdown: tokio_util::sync::CancellationToken,
    on_exit: F,
) -> Result<Session, Error>
where
    T: Transport,
    F: Future<Output = ()> + Send + 'static,
{
    let init_error = |reason: String| Error::Init {
        backend: start.backend.clone(),
        reason,
    };
    let params = json!({
        "protocolVersion": start.protocol_version,
        "capabilities": start.declared.to_legacy(start.protocol_version),
        "clientInfo": start.client_info.clone().unwrap_or_else(|| json!({"name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION")})),
    });
    let init = Message::Request {
        id: Id::Number(0),
        method: "initialize".into(),
        params: Some(params),
    };
    let handshake = async {
        transport
            .send(init.into_value())
            .await
            .map_err(&init_error)?;
        loop {
            match transport.recv().await {
                Inbound::Message(Message::Response {
                    id: Id::Number(0),
                    outcome,
                }) => {
                    return outcome
                        .map_err(|e| init_error(format!("error {}: {}", e.code, e.message)))?
                        .to_value()
                        .map_err(|e| init_error(e.to_string()));
                }
                Inbound::Message(Message::Request { id, .. }) => {
                    // Requests before the handshake ends (e.g. ping) get an error; none is a call's.
                    let resp = crate::jsonrpc::response(
                        Some(&id),
                        Err(ErrorObject::new(INTERNAL_ERROR, "not initialized")),
                    );
                    transport.send(resp).await.map_err(&init_error)?;
                }
                Inbound::Message(_) => {}
                Inbound::Failed { reason, .. } | Inbound::Ended { reason, .. } => {
                    return Err(init_error(reason));
                }
            }
        }
    };
    let outcome = tokio::time::timeout(start.init_timeout, handshake).await;
    let result = match outcome {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => {
            transport.close().await;
            on_exit.await;
            return Err(e);
        }
        Err(_) => {
            transport.close().await;
            on_exit.await;
            return Err(init_error("no initialize result in time".into()));
        }
    };
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !crate::protocol::is_legacy(&version) {
        transport.close().await;
        on_exit.await;
        return Err(init_error(format!(
            "unsupported protocol version `{version}`"
        )));
    }
    transport.ready(&version);
    let initialized = Message::Notification {
        method: "notifications/initialized".into(),
        params: None,
    };
    if let Err(e) = transport.send(initialized.into_value()).await {
        transport.close().await;
        on_exit.await;
        return Err(init_error(e));
    }

    // What the backend was told (at the version asked for) and what the version it chose can
    // carry: a backend may answer with a later version than the one asked for.
    let declared = start
        .declared
        .at_version(start.protocol_version)
        .at_version(&version);
    let (result, server_info) = start.init_results.share(result);
    let info = InitInfo {
        protocol_version: version,
        result,
        server_info,
        declared,
    };
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let alive = Arc::new(AtomicBool::new(true));
    let id = SESSION_IDS.fetch_add(1, Ordering::Relaxed);
    let direct = transport.direct();
    let session = Session::new(
        id,
        start.backend.clone(),
        cmd_tx,
        start.init_timeout,
        info,
        alive.clone(),
        direct,
    );
    let router = Router::new(
        start.backend.clone(),
        declared,
        start.rules.clone(),
        start.max_held_roots,
    );
    // Chained, not awaited inside a block: the task then holds the running session once, not
    // also a moved-from copy of it (or of its inputs).
    let fut = run(transport, cmd_rx, router, shutdown, alive).then(|transport| async move {
        Box::pin(transport.close()).await;
        on_exit.await;
    });
    start.tasks.spawn(fut);
    Ok(session)
}

/// The session task: commands from calls go out, everything the backend says is routed. A plain
/// function around an `async move` block: an `async fn` would keep each argument twice in its
/// future (as passed and as moved into its body) for as long as the session lives.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would keep its arguments twice"
)]
fn run<T: Transport>(
    mut transport: T,
    mut cmds: mpsc::Receiver<Box<Cmd>>,
    mut router: Router,
    shutdown: tokio_util::sync::CancellationToken,
    alive: Arc<AtomicBool>,
) -> impl Future<Output = T> {
    async move {
        let mut unsent = None;
        let reason = loop {
            let held = router.next_deadline();
            // Biased: commands first, so a call registered before its request went out is known
            // before anything the backend says about it.
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    // Answers and notifications already queued (an abandoned call's cancel) still go out.
                    while let Ok(cmd) = cmds.try_recv() {
                        let msg = match *cmd {
                            Cmd::Respond { id, outcome } => crate::jsonrpc::response(Some(&id), outcome),
                            Cmd::Notify { method, params } => Message::Notification { method, params }.into_value(),
                            Cmd::Request { events, .. } | Cmd::Register { events, .. } => {
                                events.try_send(CallEvent::Closed("the gateway is shutting down".into()));
                                continue;
                            }
                            Cmd::Forget { .. } => continue,
                        };
                        if Box::pin(transport.send(msg)).await.is_err() {
                            break;
                        }
                    }
                    break "the gateway is shutting down".to_owned();
                }
                _ = async { tokio::time::sleep_until(held.expect("guarded")).await }, if held.is_some() => {
                    if let Err(e) = Box::pin(send_all(&mut transport, router.expire_held(Instant::now()))).await {
                        break e;
                    }
                }
                cmd = cmds.recv() => {
                    let Some(cmd) = cmd else { break "the session was closed".to_owned() };
                    let msg = match *cmd {
                        Cmd::Request { id, method, params, interactive, events } => {
                            router.start(id, events, method, params, interactive).await
                        }
                        Cmd::Respond { id, outcome } => crate::jsonrpc::response(Some(&id), outcome),
                        Cmd::Notify { method, params } => Message::Notification { method, params }.into_value(),
                        Cmd::Forget { id } => { router.forget(&id); continue; }
                        Cmd::Register { id, progress, interactive, events } => {
                            router.register(id, events, progress, interactive).await;
                            continue;
                        }
                    };
                    // Boxed so an idle session's task holds only its select, not a send in progress.
                    if let Err(e) = Box::pin(transport.send(msg)).await { break e; }
                }
                inbound = transport.recv() => match inbound {
                    Inbound::Message(msg) => {
                        let out = Box::pin(router.route(msg)).await;
                        if let Err(e) = Box::pin(send_all(&mut transport, out)).await {
                            break e;
                        }
                    }
                    Inbound::Failed { id, reason } => {
                        tracing::warn!(backend = %router.backend, %id, "request failed: {reason}");
                        Box::pin(router.fail(&id, reason, false)).await;
                    }
                    Inbound::Ended { reason, unsent: lost } => {
                        unsent = lost;
                        break reason;
                    }
                }
            }
        };
        tracing::info!(backend = %router.backend, "upstream session ended: {reason}");
        // Dead before any call hears of it, so a call sent again never lands here.
        alive.store(false, Ordering::Release);
        if let Some(id) = unsent {
            router.fail(&id, reason.clone(), true).await;
        }
        // Requests queued behind the end never went out: they may go to a new session.
        cmds.close();
        while let Ok(cmd) = cmds.try_recv() {
            match *cmd {
                Cmd::Request { events, .. } => events.try_send(CallEvent::Unsent(format!(
                    "the session ended before the request was sent: {reason}"
                ))),
                // Its request went out by itself: whether the backend saw it is unknown.
                Cmd::Register { events, .. } => events.try_send(CallEvent::Closed(reason.clone())),
                _ => {}
            }
        }
        router.close_all(&reason).await;
        transport
    }
}

async fn send_all<T: Transport>(transport: &mut T, msgs: Vec<Value>) -> Result<(), String> {
    for msg in msgs {
        transport.send(msg).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::future::BoxFuture;
    use tokio::sync::Mutex;

    /// What a scripted backend streams in answer to a POST of request `id`.
    type Post = Box<dyn Fn(Id, mpsc::Sender<Box<Inbound>>) -> BoxFuture<'static, ()> + Send + Sync>;

    /// A backend whose answer stream to a POST is `post(id, sink)`; nothing else happens.
    struct Scripted {
        queue: mpsc::Sender<Box<Inbound>>,
        post: Post,
    }

    impl std::fmt::Debug for Scripted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Scripted")
        }
    }

    impl Direct for Scripted {
        fn post(
            &self,
            id: Id,
            _method: String,
            _msg: Vec<u8>,
            sink: mpsc::Sender<Box<Inbound>>,
            _mark: Option<Mark>,
        ) -> BoxFuture<'static, ()> {
            (self.post)(id, sink)
        }

        fn resume(
            &self,
            _id: Id,
            _last: String,
            _sink: mpsc::Sender<Box<Inbound>>,
            _mark: Mark,
        ) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }

        fn send(&self, _msg: Value) -> BoxFuture<'static, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }

        fn releases_parked(&self) -> bool {
            false
        }

        fn session_queue(&self) -> &mpsc::Sender<Box<Inbound>> {
            &self.queue
        }
    }

    /// A call's own request that the backend refused as unsent (404), while the session task,
    /// ending for the same reason, tells the call it closed: the refusal lands first, the word
    /// from the session after the request is done.
    fn refused_while_closing(
        cmds: mpsc::Receiver<Box<Cmd>>,
        queue: mpsc::Sender<Box<Inbound>>,
    ) -> Scripted {
        let cmds = Arc::new(Mutex::new(cmds));
        Scripted {
            queue,
            post: Box::new(move |id, sink: mpsc::Sender<Box<Inbound>>| {
                let cmds = cmds.clone();
                Box::pin(async move {
                    let Some(cmd) = cmds.lock().await.recv().await else {
                        panic!("the call registers before it posts");
                    };
                    let Cmd::Register { events, .. } = *cmd else {
                        panic!("expected Register");
                    };
                    let reason = "forgot the session".to_owned();
                    let unsent = Some(id);
                    let _ = sink.send(Box::new(Inbound::Ended { reason, unsent })).await;
                    let _ = events.send(CallEvent::Closed("session ended".into())).await;
                })
            }),
        }
    }

    /// A backend whose answer stream carries a request of its own, for a session task that no
    /// longer takes anything; the stream then stays open, as the backend waits for an answer.
    fn asks_after_the_end(queue: mpsc::Sender<Box<Inbound>>) -> Scripted {
        Scripted {
            queue,
            post: Box::new(|_id, sink: mpsc::Sender<Box<Inbound>>| {
                Box::pin(async move {
                    let ask = Message::Request {
                        id: Id::Number(7),
                        method: "elicitation/create".into(),
                        params: None,
                    };
                    let _ = sink.send(Box::new(Inbound::Message(ask))).await;
                    std::future::pending::<()>().await;
                })
            }),
        }
    }

    /// A session past its handshake with no capability declared, fed by `cmd`.
    fn live_session(
        cmd: mpsc::Sender<Box<Cmd>>,
        cmd_wait: Duration,
        direct: Option<Arc<dyn Direct>>,
    ) -> Session {
        let info = InitInfo {
            protocol_version: "2025-11-25".into(),
            result: Arc::new(json!({})),
            server_info: None,
            declared: Declared::default(),
        };
        let alive = Arc::new(AtomicBool::new(true));
        Session::new(1, "b".into(), cmd, cmd_wait, info, alive, direct)
    }

    #[tokio::test]
    async fn a_request_that_cannot_reach_the_ended_session_fails_its_call_at_once() {
        let (cmd, _cmds) = mpsc::channel(8);
        let (queue, session_side) = mpsc::channel(8);
        drop(session_side);
        let direct = Arc::new(asks_after_the_end(queue));
        let session = live_session(cmd, Duration::from_secs(5), Some(direct));
        let mut call = session
            .request("tools/call", Some(json!({"name": "t"})), true)
            .await
            .expect("request");
        let event = tokio::time::timeout(Duration::from_secs(5), call.events.recv())
            .await
            .expect("the call hears at once");
        let Some(CallEvent::Closed(reason)) = event else {
            panic!("the call fails: {event:?}");
        };
        assert!(reason.contains("elicitation/create"), "{reason}");
    }

    #[tokio::test]
    async fn a_session_task_that_takes_no_command_fails_its_callers_in_time() {
        let (cmd, _stuck) = mpsc::channel(1);
        let session = live_session(cmd, Duration::from_millis(100), None);
        session.notify("n", None).await.expect("room for one");
        let sent =
            tokio::time::timeout(Duration::from_secs(5), session.request("ping", None, false))
                .await
                .expect("the caller is let go");
        let Err(Error::Closed { reason, .. }) = sent else {
            panic!("the request fails: {sent:?}");
        };
        assert!(reason.contains("took no request"), "{reason}");
        assert!(!session.is_alive(), "no call lands on the session again");
    }

    #[test]
    fn sessions_share_an_initialize_result_they_all_got() {
        let results = InitResults::new(true);
        let (a, a_info) = results.share(json!({"serverInfo": {"name": "s", "version": "1"}}));
        let (b, b_info) = results.share(json!({"serverInfo": {"name": "s", "version": "1"}}));
        assert!(Arc::ptr_eq(&a, &b), "one copy for the same result");
        let (a_info, b_info) = (a_info.expect("text"), b_info.expect("text"));
        assert!(
            Arc::ptr_eq(&a_info, &b_info),
            "and of its serverInfo's text"
        );
        assert_eq!(&*a_info, r#"{"name":"s","version":"1"}"#);
        let (c, _) = results.share(json!({"serverInfo": {"name": "s", "version": "2"}}));
        assert_eq!(
            c["serverInfo"]["version"], "2",
            "a new result is kept as it is"
        );
        assert_eq!(
            a["serverInfo"]["version"], "1",
            "an older session keeps its own"
        );
        for not_one in [
            json!("s"),
            json!({"name": "s"}),
            json!({"name": "s", "version": 1}),
        ] {
            let (_, none) = results.share(json!({ "serverInfo": not_one }));
            assert_eq!(none, None, "not an Implementation: {not_one}");
        }
        let off = InitResults::new(false);
        let (_, none) = off.share(json!({"serverInfo": {"name": "s", "version": "1"}}));
        assert_eq!(none, None, "server_info = false: no text");
    }

    #[tokio::test]
    async fn a_refused_request_is_unsent_even_when_the_session_says_closed_first() {
        let (cmd, cmds) = mpsc::channel(8);
        let (queue, _session_side) = mpsc::channel(8);
        let direct = refused_while_closing(cmds, queue);
        let session = live_session(cmd, Duration::from_secs(5), Some(Arc::new(direct)));
        let mut call = session
            .request("tools/call", Some(json!({"name": "t"})), true)
            .await
            .expect("request");
        let event = call.events.recv().await;
        assert!(
            matches!(event, Some(CallEvent::Unsent(_))),
            "the call may be sent again: {event:?}"
        );
        assert!(!session.is_alive(), "no new call lands on the session");
    }
}

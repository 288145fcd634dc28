//! One legacy session, owned by one task. The task writes requests and responses, reads every
//! message the backend sends, and routes it: a response to the call that asked, a progress
//! notification to the call whose token it carries, a server request to the session's one
//! interactive call, and requests outside any call by the rules for them (ping answered, roots
//! from static config or held for the next call, anything else refused).
//!
//! The transport is two halves of JSON messages (`Outbound`, inbound stream), so stdio and later
//! HTTP transports share this routing.

use super::Error;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, Message};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
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
    Response(Result<Value, ErrorObject>),
    /// The session ended before the call finished.
    Closed(String),
}

/// A call in flight on a session.
#[derive(Debug)]
pub struct Call {
    pub id: Id,
    pub events: mpsc::Receiver<CallEvent>,
}

/// Facts fixed by the session's `initialize`.
#[derive(Debug, Clone)]
pub struct InitInfo {
    pub protocol_version: String,
    pub result: Value,
    /// The client capabilities this session declared, as far as its version carries them.
    pub declared: Declared,
}

pub(crate) enum Cmd {
    Request {
        method: String,
        params: Option<Value>,
        interactive: bool,
        reply: oneshot::Sender<Result<Call, Error>>,
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
    cmd: mpsc::Sender<Cmd>,
    info: InitInfo,
    alive: Arc<AtomicBool>,
}

impl Session {
    pub(crate) fn new(
        id: u64,
        backend: String,
        cmd: mpsc::Sender<Cmd>,
        info: InitInfo,
        alive: Arc<AtomicBool>,
    ) -> Session {
        Session {
            inner: Arc::new(Inner {
                id,
                backend,
                cmd,
                info,
                alive,
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

    /// Sends a request; `interactive` routes the session's server requests to this call.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        interactive: bool,
    ) -> Result<Call, Error> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .cmd
            .send(Cmd::Request {
                method: method.to_owned(),
                params,
                interactive,
                reply,
            })
            .await
            .map_err(|_| self.closed())?;
        rx.await.map_err(|_| self.closed())?
    }

    /// Answers a server request.
    pub async fn respond(&self, id: Id, outcome: Result<Value, ErrorObject>) -> Result<(), Error> {
        self.inner
            .cmd
            .send(Cmd::Respond { id, outcome })
            .await
            .map_err(|_| self.closed())
    }

    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Error> {
        self.inner
            .cmd
            .send(Cmd::Notify {
                method: method.to_owned(),
                params,
            })
            .await
            .map_err(|_| self.closed())
    }

    /// Stops routing events for a call (it finished or was abandoned). Never blocks.
    pub fn forget(&self, id: Id) {
        let _ = self.inner.cmd.try_send(Cmd::Forget { id });
    }
}

/// How the routing task treats requests that belong to no call.
#[derive(Debug, Clone)]
pub struct Rules {
    pub static_roots: Arc<Vec<Value>>,
    pub held_roots_wait: Duration,
}

/// Per-call channel depth: events beyond it wait, which slows the backend reader, never drops.
const CALL_EVENTS: usize = 64;

/// The routing state of one session task.
pub(crate) struct Router {
    pub backend: String,
    pub declared: Declared,
    pub rules: Rules,
    next_id: i64,
    calls: HashMap<Id, mpsc::Sender<CallEvent>>,
    progress: HashMap<String, Id>,
    interactive: Option<Id>,
    held_roots: Vec<(Id, Instant)>,
}

/// What the task must write after routing.
pub(crate) type Outbox = Vec<Value>;

impl Router {
    pub fn new(backend: String, declared: Declared, rules: Rules) -> Router {
        Router {
            backend,
            declared,
            rules,
            next_id: 0,
            calls: HashMap::new(),
            progress: HashMap::new(),
            interactive: None,
            held_roots: Vec::new(),
        }
    }

    pub fn next_id(&mut self) -> Id {
        self.next_id += 1;
        Id::Number(self.next_id)
    }

    /// Registers a call and returns the message to write for it.
    pub async fn start(
        &mut self,
        method: String,
        params: Option<Value>,
        interactive: bool,
    ) -> (Call, Value) {
        let id = self.next_id();
        let (tx, rx) = mpsc::channel(CALL_EVENTS);
        let mut params = params;
        // Progress tokens are rewritten to the upstream id so notifications route exactly.
        if let Some(meta) = params
            .as_mut()
            .and_then(|p| p.get_mut("_meta"))
            .and_then(Value::as_object_mut)
            && meta.contains_key("progressToken")
        {
            let token = format!("mrtr-{id}");
            meta.insert("progressToken".into(), json!(token));
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
        self.calls.insert(id.clone(), tx);
        let msg = Message::Request {
            id: id.clone(),
            method,
            params,
        }
        .to_value();
        (Call { id, events: rx }, msg)
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
                    Kind::Roots if self.declared.roots => {
                        tracing::debug!(backend = %self.backend, %id, "roots/list outside a call: held for the next call");
                        self.held_roots
                            .push((id, Instant::now() + self.rules.held_roots_wait));
                    }
                    _ => {
                        let url = input::is_url_elicitation(params.as_ref());
                        let why = if input::allowed(&self.declared, kind, params.as_ref()) {
                            ErrorObject::new(
                                INTERNAL_ERROR,
                                format!(
                                    "{} outside a client request is not supported",
                                    kind.as_str()
                                ),
                            )
                        } else {
                            input::refused_answer(kind, url)
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
            .map(|(id, _)| {
                crate::jsonrpc::response(
                    Some(&id),
                    Err(ErrorObject::new(
                        INTERNAL_ERROR,
                        "no client request arrived to answer roots/list",
                    )),
                )
            })
            .collect()
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

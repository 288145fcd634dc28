//! Where each message from the backend goes, as the session task hands it over: a response to
//! the call that asked, progress to the call whose token it carries, a server request to the
//! session's interactive call. Requests outside any call follow the [`Rules`]: ping answered,
//! roots from static config or held for the next call (until a deadline), anything else
//! refused. The [`Router`] only decides; the task writes what it returns.

use super::{CallEvent, EventTx};
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, Message};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How the routing task treats requests that belong to no call.
#[derive(Debug, Clone)]
pub struct Rules {
    pub static_roots: Arc<Vec<Value>>,
    pub held_roots_wait: Duration,
}

/// Rewrites a request's progress token to one derived from the upstream id, so notifications
/// route exactly; returns the new token.
pub(super) fn rewrite_progress(id: &Id, params: Option<&mut Value>) -> Option<String> {
    let meta = params?.get_mut("_meta")?.as_object_mut()?;
    if !meta.contains_key("progressToken") {
        return None;
    }
    let token = format!("mrtr-{id}");
    meta.insert("progressToken".into(), json!(token));
    Some(token)
}

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
        self.calls.insert(id.clone(), tx);
        if interactive {
            self.interactive = Some(id);
            // Requests held since before this call belong to its first round; they keep their
            // deadline, which the call hands back with them if it ends before its client sees
            // them.
            for (held, until) in std::mem::take(&mut self.held_roots) {
                let routed = self
                    .to_interactive(held, "roots/list".into(), None, Some(until))
                    .await;
                if let Err((held, _)) = routed {
                    self.held_roots.push((held, until));
                }
            }
        }
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
            Message::Response { id, outcome } => self.response(id, outcome).await,
            Message::Notification { method, params } => self.notification(method, params).await,
            Message::Request { id, method, params } => {
                if let Some(answer) = self.request(id, method, params).await {
                    out.push(answer);
                }
            }
        }
        out
    }

    /// A response goes to the call that asked, which is then done.
    async fn response(&mut self, id: Id, outcome: Result<crate::jsonrpc::Raw, ErrorObject>) {
        match self.calls.get(&id) {
            Some(tx) => {
                let _ = tx.send(CallEvent::Response(outcome)).await;
                self.forget(&id);
            }
            None => {
                tracing::warn!(backend = %self.backend, %id, "backend answered an id nobody asked; dropped")
            }
        }
    }

    /// Progress goes to the call whose token it carries, a log message to the interactive
    /// call; anything else is dropped.
    async fn notification(&mut self, method: String, params: Option<Value>) {
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

    /// A request of the backend's goes to the interactive call; the answer to write, if the
    /// gateway answers it itself.
    async fn request(&mut self, id: Id, method: String, params: Option<Value>) -> Option<Value> {
        if method == "ping" {
            return Some(crate::jsonrpc::response(Some(&id), Ok(json!({}))));
        }
        let Some(kind) = Kind::from_method(&method) else {
            return Some(crate::jsonrpc::response(
                Some(&id),
                Err(ErrorObject::new(
                    crate::jsonrpc::METHOD_NOT_FOUND,
                    format!("method `{method}` is not supported"),
                )),
            ));
        };
        match self.to_interactive(id, method, params, None).await {
            Ok(()) => None,
            Err((id, params)) => self.outside_call(id, kind, params, None),
        }
    }

    /// A `roots/list` a call gave back, its client never having seen it (the call ended
    /// first): the interactive call's if one has started since, else as outside any call,
    /// within the deadline it was held to if it was held before. The answer to write, if any.
    pub async fn hold_roots(&mut self, id: Id, held_until: Option<Instant>) -> Option<Value> {
        let method = Kind::Roots.method().to_owned();
        match self.to_interactive(id, method, None, held_until).await {
            Ok(()) => None,
            Err((id, params)) => self.outside_call(id, Kind::Roots, params, held_until),
        }
    }

    /// Hands a server request to the session's interactive call. Its id and params come back
    /// when there is none, or when the call no longer takes events: it has ended, and its
    /// `Forget` is still on the way (a call on its own stream hears its result first).
    async fn to_interactive(
        &self,
        id: Id,
        method: String,
        params: Option<Value>,
        held_until: Option<Instant>,
    ) -> Result<(), (Id, Option<Value>)> {
        let tx = self.interactive.as_ref().and_then(|c| self.calls.get(c));
        let Some(permit) = async { tx?.reserve().await }.await else {
            return Err((id, params));
        };
        permit.send(Box::new(CallEvent::ServerRequest {
            id,
            method,
            params,
            held_until,
        }));
        Ok(())
    }

    /// A request outside any call: roots from static config, held for the next call (within
    /// the limit, until `held_until` or for `held_roots_wait`), or refused.
    fn outside_call(
        &mut self,
        id: Id,
        kind: Kind,
        params: Option<Value>,
        held_until: Option<Instant>,
    ) -> Option<Value> {
        match kind {
            Kind::Roots if !self.rules.static_roots.is_empty() => Some(crate::jsonrpc::response(
                Some(&id),
                Ok(json!({"roots": *self.rules.static_roots})),
            )),
            Kind::Roots if self.declared.roots && self.held_roots.len() >= self.max_held_roots => {
                tracing::warn!(backend = %self.backend, %id, held = self.held_roots.len(), "roots/list outside a call: already holding the most allowed (limits.max_input_requests); refused");
                Some(refuse_held_roots(
                    &id,
                    "too many roots/list requests are waiting for a client request",
                ))
            }
            Kind::Roots if self.declared.roots => {
                tracing::debug!(backend = %self.backend, %id, "roots/list outside a call: held for the next call");
                let until =
                    held_until.unwrap_or_else(|| Instant::now() + self.rules.held_roots_wait);
                self.held_roots.push((id, until));
                None
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
                Some(crate::jsonrpc::response(Some(&id), Err(why)))
            }
        }
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

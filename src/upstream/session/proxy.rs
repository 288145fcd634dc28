//! A legacy client's own session with a legacy backend, proxied: initialized with the client's
//! own `initialize` params, then everything passes both ways. Each client request goes upstream
//! under an id of the gateway's sequence (mapped back on its response, and in the client's
//! cancellations); what the backend says about it comes back on that request's answer stream,
//! and everything else on the session's stream (the client's GET stream).
//!
//! Over Streamable HTTP each request has its own answer stream, so what is related to a request
//! is exactly what the backend wrote on it. Over stdio and HTTP+SSE nothing ties a message to a
//! request but a response's id and a progress token: a server request or a notification goes on
//! the one request in flight, if there is exactly one, else on the session's stream.
//!
//! The backend's requests to the client are noted as they pass, so the client can answer only
//! what was asked, and only so many at once.

use super::open::{Begin, initialized};
use super::transport::{Direct, Inbound, Transport};
use super::{Error, Start, request_id};
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, Message, Raw};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

/// Where messages for the client go: JSON-RPC values, as the client reads them.
pub type Outbound = mpsc::Sender<Value>;

/// Messages waiting for a request's answer stream before the backend's reader waits too, and
/// for the session's stream before more are refused (no client may be reading it).
pub const DEPTH: usize = 64;

/// What a client message to a proxied session was refused for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A response to a request the backend never sent this client (or one already answered).
    Unasked(Id),
    /// The backend's session is over.
    Ended,
}

/// How a proxied session begins: the [`Begin`] for [`crate::upstream::Pool::connect`].
#[derive(Debug)]
pub struct Proxy {
    /// The client's `initialize` params, sent as they are.
    pub params: Value,
    /// Where the session's own messages go (the client's GET stream).
    pub session: Outbound,
    /// The most requests from the backend the client may leave unanswered at once.
    pub max_asked: usize,
}

/// The handle of a proxied session.
#[derive(Debug, Clone)]
pub struct Proxied {
    shared: Arc<Shared>,
    /// The version the backend chose, and its whole `initialize` result.
    pub version: String,
    pub result: Arc<Value>,
}

#[derive(Debug)]
struct Shared {
    backend: String,
    alive: AtomicBool,
    /// Ids of the backend's requests the client has yet to answer.
    asked: Mutex<HashSet<Id>>,
    max_asked: usize,
    /// The client's ids of its requests in flight, and theirs upstream.
    inflight: Mutex<HashMap<Id, Id>>,
    session: Outbound,
    cmds: mpsc::Sender<Cmd>,
    direct: Option<Arc<dyn Direct>>,
    /// The requests that read their own answer streams (Streamable HTTP).
    posts: TaskTracker,
    stop: CancellationToken,
}

enum Cmd {
    Request {
        upstream: Id,
        client: Id,
        msg: Value,
        progress: Option<String>,
        answer: Outbound,
    },
    Send(Value),
}

impl Begin for Proxy {
    type Output = Proxied;

    fn begin<T, F>(
        self,
        transport: T,
        start: Start,
        shutdown: CancellationToken,
        on_exit: F,
    ) -> BoxFuture<'static, Result<Proxied, Error>>
    where
        T: Transport,
        F: Future<Output = ()> + Send + 'static,
    {
        Box::pin(async move {
            let (transport, on_exit, version, result) =
                initialized(transport, &start, self.params, on_exit).await?;
            let (cmds, rx) = mpsc::channel(DEPTH);
            let shared = Arc::new(Shared {
                backend: start.backend.clone(),
                alive: AtomicBool::new(true),
                asked: Mutex::default(),
                max_asked: self.max_asked,
                inflight: Mutex::default(),
                session: self.session,
                cmds,
                direct: transport.direct(),
                posts: TaskTracker::new(),
                stop: shutdown,
            });
            let task = run(transport, rx, shared.clone()).then(|transport| async move {
                Box::pin(transport.close()).await;
                on_exit.await;
            });
            start.tasks.spawn(task);
            Ok(Proxied {
                shared,
                version,
                result: Arc::new(result),
            })
        })
    }
}

impl Proxied {
    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Relaxed)
    }

    /// Resolves once the backend's session is over (closed, or lost).
    pub fn ended(&self) -> WaitForCancellationFutureOwned {
        self.shared.stop.clone().cancelled_owned()
    }

    /// Ends the backend's session (its stdio child stops, or its HTTP session is deleted).
    pub fn close(&self) {
        self.shared.end();
    }

    /// Sends the client's request `id` upstream; what the backend says about it comes on the
    /// returned stream, its response last.
    pub async fn request(
        &self,
        id: Id,
        method: String,
        params: Option<Value>,
    ) -> mpsc::Receiver<Value> {
        let (answer, rx) = mpsc::channel(DEPTH);
        let shared = &self.shared;
        if !self.is_alive() {
            shared.finish(&id, Err(ended()), &answer).await;
            return rx;
        }
        let upstream = request_id();
        shared.lock_inflight().insert(id.clone(), upstream.clone());
        let progress = params
            .as_ref()
            .and_then(|p| p.get("_meta")?.get("progressToken"))
            .map(Value::to_string);
        let msg = Message::Request {
            id: upstream.clone(),
            method: method.clone(),
            params,
        }
        .into_value();
        if let Some(direct) = shared.direct.clone() {
            let bytes = serde_json::to_vec(&msg).expect("a JSON value serializes");
            let post = answer_direct(shared.clone(), direct, upstream, id, method, bytes, answer);
            shared.posts.spawn(post);
            return rx;
        }
        let cmd = Cmd::Request {
            upstream,
            client: id.clone(),
            msg,
            progress,
            answer: answer.clone(),
        };
        if shared.cmds.send(cmd).await.is_err() {
            shared.finish(&id, Err(ended()), &answer).await;
        }
        rx
    }

    /// Passes a notification or a response from the client upstream. A response must answer a
    /// request the backend sent this client; `notifications/cancelled` is told the request's
    /// upstream id; `notifications/initialized` was sent at the handshake already.
    pub async fn send(&self, msg: Message) -> Result<(), Refused> {
        let shared = &self.shared;
        let value = match msg {
            Message::Response { id, outcome } => {
                if !shared.lock_asked().remove(&id) {
                    return Err(Refused::Unasked(id));
                }
                Message::Response { id, outcome }.into_value()
            }
            Message::Notification { method, .. } if method == "notifications/initialized" => {
                return Ok(());
            }
            Message::Notification { method, params } if method == "notifications/cancelled" => {
                let Some(params) = shared.upstream_cancel(params) else {
                    return Ok(());
                };
                Message::Notification {
                    method,
                    params: Some(params),
                }
                .into_value()
            }
            other => other.into_value(),
        };
        if !self.is_alive() {
            return Err(Refused::Ended);
        }
        match &shared.direct {
            Some(direct) => direct.send(value).await.map_err(|_| Refused::Ended),
            None => shared
                .cmds
                .send(Cmd::Send(value))
                .await
                .map_err(|_| Refused::Ended),
        }
    }
}

fn ended() -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, "the backend's session ended")
}

impl Shared {
    fn lock_asked(&self) -> std::sync::MutexGuard<'_, HashSet<Id>> {
        self.asked.lock().expect("asked lock")
    }

    fn lock_inflight(&self) -> std::sync::MutexGuard<'_, HashMap<Id, Id>> {
        self.inflight.lock().expect("inflight lock")
    }

    fn end(&self) {
        self.alive.store(false, Ordering::Relaxed);
        self.stop.cancel();
    }

    /// The params of a client's `notifications/cancelled` as the backend must read them: the
    /// request's upstream id. `None` for a request not in flight (already answered).
    fn upstream_cancel(&self, params: Option<Value>) -> Option<Value> {
        let mut params = params?;
        let client: Id = serde_json::from_value(params.get("requestId")?.clone()).ok()?;
        let upstream = self.lock_inflight().get(&client)?.clone();
        params["requestId"] = json!(upstream);
        Some(params)
    }

    /// The response to the client's request `client`, sent on its stream.
    async fn finish(&self, client: &Id, outcome: Result<Raw, ErrorObject>, answer: &Outbound) {
        self.lock_inflight().remove(client);
        let response = Message::Response {
            id: client.clone(),
            outcome,
        };
        let _ = answer.send(response.into_value()).await;
    }

    /// Sends a message from the backend to the client: on `answer` (the stream of the request
    /// it belongs to) while that is open, else on the session's stream. Returns what to write
    /// upstream instead when a request of the backend cannot be delivered.
    async fn deliver(&self, msg: Message, answer: Option<&Outbound>) -> Option<Value> {
        let asked = match &msg {
            Message::Request { id, .. } => Some(id.clone()),
            _ => None,
        };
        if let Some(id) = &asked {
            let mut pending = self.lock_asked();
            if pending.len() >= self.max_asked {
                return Some(refusal(id, "the client has too many requests unanswered"));
            }
            pending.insert(id.clone());
        }
        let mut value = msg.into_value();
        if let Some(answer) = answer.filter(|a| !a.is_closed()) {
            match answer.send(value).await {
                Ok(()) => return None,
                Err(mpsc::error::SendError(back)) => value = back,
            }
        }
        if self.session.try_send(value).is_ok() {
            return None;
        }
        let id = asked?;
        self.lock_asked().remove(&id);
        tracing::debug!(backend = %self.backend, "a request of the backend found no client stream open");
        Some(refusal(
            &id,
            "the client has no stream open to take this request",
        ))
    }
}

/// The error answer to the backend's request `id`.
fn refusal(id: &Id, why: &str) -> Value {
    crate::jsonrpc::response(Some(id), Err(ErrorObject::new(INTERNAL_ERROR, why)))
}

/// A request of the client over Streamable HTTP: its own POST, and everything on its answer
/// stream to the client's request stream.
async fn answer_direct(
    shared: Arc<Shared>,
    direct: Arc<dyn Direct>,
    upstream: Id,
    client: Id,
    method: String,
    bytes: Vec<u8>,
    answer: Outbound,
) {
    let (sink, mut rx) = mpsc::channel(DEPTH);
    let mut post = direct.post(upstream.clone(), method, bytes, sink, None);
    let mut posting = true;
    let outcome = loop {
        let inbound = tokio::select! {
            () = shared.stop.cancelled() => break Err(ended()),
            () = &mut post, if posting => {
                posting = false;
                continue;
            }
            inbound = rx.recv() => inbound,
        };
        // The sink goes with the POST: nothing more comes once it is done.
        let Some(inbound) = inbound else {
            break Err(failure("the backend's answer ended without a response"));
        };
        match *inbound {
            Inbound::Message(Message::Response { id, outcome }) if id == upstream => {
                break outcome;
            }
            Inbound::Message(msg) => {
                if let Some(reply) = shared.deliver(msg, Some(&answer)).await {
                    let _ = direct.send(reply).await;
                }
            }
            Inbound::Failed { reason, .. } => break Err(failure(&reason)),
            Inbound::Ended { reason, .. } => {
                tracing::info!(backend = %shared.backend, "proxied session ended: {reason}");
                shared.end();
                break Err(ended());
            }
        }
    };
    shared.finish(&client, outcome, &answer).await;
}

fn failure(why: &str) -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, format!("backend error: {why}"))
}

/// A request in flight over a transport without answer streams of its own.
struct Call {
    client: Id,
    answer: Outbound,
    progress: Option<String>,
}

/// The task that owns the transport: writes what the client sends, and routes what the
/// backend says, until the session ends either way.
async fn run<T: Transport>(
    mut transport: T,
    mut cmds: mpsc::Receiver<Cmd>,
    shared: Arc<Shared>,
) -> T {
    let mut calls: HashMap<Id, Call> = HashMap::new();
    loop {
        let write = tokio::select! {
            () = shared.stop.cancelled() => break,
            cmd = cmds.recv() => match cmd {
                None => break,
                Some(Cmd::Request { upstream, client, msg, progress, answer }) => {
                    calls.insert(upstream, Call { client, answer, progress });
                    Some(msg)
                }
                Some(Cmd::Send(value)) => Some(value),
            },
            inbound = transport.recv() => match inbound {
                Inbound::Message(msg) => route(&shared, &mut calls, msg).await,
                Inbound::Failed { id, reason } => {
                    if let Some(call) = calls.remove(&id) {
                        shared.finish(&call.client, Err(failure(&reason)), &call.answer).await;
                    }
                    None
                }
                Inbound::Ended { reason, .. } => {
                    tracing::info!(backend = %shared.backend, "proxied session ended: {reason}");
                    break;
                }
            },
        };
        if let Some(value) = write
            && let Err(why) = transport.send(value).await
        {
            tracing::info!(backend = %shared.backend, "proxied session ended: {why}");
            break;
        }
    }
    shared.end();
    for call in calls.into_values() {
        shared
            .finish(&call.client, Err(ended()), &call.answer)
            .await;
    }
    shared.posts.close();
    shared.posts.wait().await;
    transport
}

/// Where one message from the backend goes, over a transport without answer streams: a
/// response to its request, progress to the request with its token, anything else to the one
/// request in flight or the session's stream. Returns what to write upstream.
async fn route(shared: &Shared, calls: &mut HashMap<Id, Call>, msg: Message) -> Option<Value> {
    if let Message::Response { id, outcome } = msg {
        match calls.remove(&id) {
            Some(call) => shared.finish(&call.client, outcome, &call.answer).await,
            None => {
                tracing::debug!(backend = %shared.backend, %id, "a response to no request in flight")
            }
        }
        return None;
    }
    let token = match &msg {
        Message::Notification { method, params } if method == "notifications/progress" => params
            .as_ref()
            .and_then(|p| p.get("progressToken"))
            .map(Value::to_string),
        _ => None,
    };
    let by_token = token.and_then(|t| calls.values().find(|c| c.progress.as_ref() == Some(&t)));
    let only = (calls.len() == 1).then(|| calls.values().next()).flatten();
    let answer = by_token.or(only).map(|c| c.answer.clone());
    shared.deliver(msg, answer.as_ref()).await
}

//! 2026-07-28 backends over stdio: a small pool of children ([`Children`]) that every
//! principal shares, since the protocol keeps no state between requests. Each child is started
//! as a legacy stdio backend's is (`stdio::launch`) and runs many requests at once, so the
//! gateway gives each request an id of its own on that child and maps what comes back to the
//! client's: the response by its id, `notifications/progress` by a progress token it gives in
//! place of the client's, a subscription's events by their subscription id. A log message
//! carries nothing that ties it to a request, so it reaches one only when that request is the
//! only one on its child that asked for logs (`logLevel`); otherwise it is dropped. A request
//! whose answer is no longer wanted gets `notifications/cancelled`.

use super::Outgoing;
use crate::config::{Backend, Limits, Stdio};
use crate::jsonrpc::{self, Id, Message};
use crate::protocol::{self, meta};
use crate::upstream::http::Failure;
use crate::upstream::stdio::{Launched, UNPARSEABLE_LOGGED, launch, write_lines};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Notifications that wait for a client reading slowly; past them the child's next one for
/// that request is dropped rather than holding up every other request on the child.
const NOTIFICATIONS_QUEUED: usize = 64;

/// How long a child's writer waits on a write that makes no progress before the child is
/// taken for hung and ended.
const WRITE_STALL: Duration = Duration::from_secs(30);

/// The children of one 2026-07-28 stdio backend, started when first needed and again when one
/// has exited.
#[derive(Debug)]
pub(crate) struct Children {
    backend: String,
    cfg: Stdio,
    probe_timeout: Duration,
    max_message: usize,
    max_depth: usize,
    /// One per child; locked while its child is looked at or started, so a child is started
    /// once however many requests need it.
    slots: Vec<tokio::sync::Mutex<Option<Arc<Child>>>>,
    /// The child a new request goes to, in turn.
    next: AtomicUsize,
    shutdown: CancellationToken,
    /// The tasks that reap the children, awaited at shutdown.
    exits: TaskTracker,
}

impl Children {
    pub fn new(
        backend: &Backend,
        cfg: &Stdio,
        limits: &Limits,
        shutdown: CancellationToken,
    ) -> Children {
        Children {
            backend: backend.name.clone(),
            cfg: cfg.clone(),
            probe_timeout: backend.probe_timeout,
            max_message: limits.max_line_bytes,
            max_depth: limits.max_json_depth,
            slots: (0..cfg.children)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
            shutdown,
            exits: TaskTracker::new(),
        }
    }

    pub fn backend(&self) -> &str {
        &self.backend
    }

    pub fn probe_timeout(&self) -> Duration {
        self.probe_timeout
    }

    /// Sends a request to the child it names (a retry's), or to the next one in turn.
    pub async fn send(&self, out: &Outgoing<'_>) -> Result<super::Messages, Failure> {
        let index = match out.child.map(|c| c as usize) {
            Some(c) if c < self.slots.len() => c,
            _ => self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len(),
        };
        let child = {
            let mut slot = self.slots[index].lock().await;
            match slot.as_ref() {
                Some(child) if !child.stop.is_cancelled() => child.clone(),
                _ => slot.insert(self.start(index)?).clone(),
            }
        };
        child.request(out).await.map(super::Messages::Child)
    }

    /// Ends every child, then sends `out` as the first line of a new one in the first slot.
    pub async fn probe(&self, out: &Outgoing<'_>) -> Result<super::Messages, Failure> {
        self.end_all();
        let child = {
            let mut slot = self.slots[0].lock().await;
            slot.insert(self.start(0)?).clone()
        };
        child.request(out).await.map(super::Messages::Child)
    }

    /// Ends every child: their requests fail, and the next request starts a new one.
    pub fn end_all(&self) {
        for slot in &self.slots {
            // A slot being started is left to its starter: it is a new child either way.
            if let Ok(mut slot) = slot.try_lock()
                && let Some(child) = slot.take()
            {
                child.stop.cancel();
            }
        }
    }

    fn start(&self, index: usize) -> Result<Arc<Child>, Failure> {
        let Launched {
            stdin,
            stdout,
            on_exit,
        } = launch(&self.cfg, &self.backend).map_err(|e| Failure::Connect(e.to_string()))?;
        let child = Child::run(
            ChildIo {
                backend: self.backend.clone(),
                index: index as u32,
                write_queue: self.cfg.write_queue,
                max_message: self.max_message,
                max_depth: self.max_depth,
                stop: self.shutdown.child_token(),
            },
            stdout,
            stdin,
        );
        let stop = child.stop.clone();
        self.exits.spawn(async move {
            stop.cancelled().await;
            on_exit.await;
        });
        Ok(child)
    }

    /// Waits until every child has exited (or been killed), once shutdown has ended them.
    pub async fn closed(&self) {
        self.exits.close();
        self.exits.wait().await;
    }
}

/// What a child runs with.
struct ChildIo {
    backend: String,
    index: u32,
    write_queue: usize,
    max_message: usize,
    max_depth: usize,
    /// Cancelled when the child is ended, or has ended by itself.
    stop: CancellationToken,
}

/// One child: lines to its stdin go through a writer task, its stdout is read by a reader
/// task that hands each message to the request it belongs to.
#[derive(Debug)]
struct Child {
    backend: String,
    index: u32,
    out: mpsc::Sender<Vec<u8>>,
    waiting: Mutex<Waiting>,
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct Waiting {
    /// The id the next request gets on this child (it is also its progress token).
    next: i64,
    by_id: HashMap<i64, Waiter>,
    /// Why the child ended, once it has.
    ended: Option<String>,
}

#[derive(Debug)]
struct Waiter {
    client_id: Id,
    /// The client's progress token, given back on the child's progress notifications.
    progress: Option<Value>,
    /// The request set `logLevel`.
    logs: bool,
    listen: bool,
    notifications: mpsc::Sender<Message>,
    response: oneshot::Sender<Message>,
}

impl Child {
    /// Starts the writer and the reader over the child's pipes (any byte streams: tests use
    /// in-memory ones).
    fn run<R, W>(io: ChildIo, stdout: R, stdin: W) -> Arc<Child>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, queue) = mpsc::channel(io.write_queue);
        let child = Arc::new(Child {
            backend: io.backend,
            index: io.index,
            out,
            waiting: Mutex::new(Waiting::default()),
            stop: io.stop,
        });
        let failed = Arc::new(std::sync::OnceLock::new());
        let writer = write_lines(
            stdin,
            queue,
            WRITE_STALL,
            failed.clone(),
            child.stop.clone(),
        );
        let stop = child.stop.clone();
        tokio::spawn(async move {
            // Dropping the writer on stop closes the child's stdin, which asks it to exit.
            tokio::select! {
                () = writer => {}
                () = stop.cancelled() => {}
            }
        });
        let lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(io.max_message));
        let reader = child.clone();
        tokio::spawn(async move {
            let why = tokio::select! {
                why = reader.read(lines, io.max_depth) => why,
                () = reader.stop.cancelled() => failed.get().cloned().unwrap_or_else(|| "ended by the gateway".into()),
            };
            reader.end(why);
        });
        child
    }

    /// Sends one request under an id of this child's, the client's progress token replaced by
    /// that id, and returns where its answer arrives.
    async fn request(self: &Arc<Self>, out: &Outgoing<'_>) -> Result<Replies, Failure> {
        let mut params = out.params.clone();
        let request_meta = params.get_mut("_meta").and_then(Value::as_object_mut);
        let logs = request_meta
            .as_ref()
            .is_some_and(|m| m.contains_key(meta::LOG_LEVEL));
        let (notes_tx, notifications) = mpsc::channel(NOTIFICATIONS_QUEUED);
        let (response_tx, response) = oneshot::channel();
        let id = {
            let mut waiting = self.waiting.lock().expect("child lock");
            if let Some(why) = &waiting.ended {
                return Err(Failure::Other(why.clone()));
            }
            let id = waiting.next;
            waiting.next += 1;
            let progress = request_meta
                .and_then(|m| m.get_mut("progressToken"))
                .map(|token| std::mem::replace(token, id.into()));
            let waiter = Waiter {
                client_id: out.id.clone(),
                progress,
                logs,
                listen: out.method == protocol::LISTEN,
                notifications: notes_tx,
                response: response_tx,
            };
            waiting.by_id.insert(id, waiter);
            id
        };
        // Built before the line is queued: if this future is dropped while the queue is full,
        // its drop forgets the request.
        let replies = Replies {
            child: self.clone(),
            id,
            notifications,
            response,
            done: false,
        };
        let mut line = serde_json::to_vec(&json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": out.method,
            "params": params,
        }))
        .map_err(|e| Failure::Other(e.to_string()))?;
        line.push(b'\n');
        if self.out.send(line).await.is_err() {
            return Err(Failure::Other(self.why_ended()));
        }
        Ok(replies)
    }

    fn why_ended(&self) -> String {
        let waiting = self.waiting.lock().expect("child lock");
        waiting
            .ended
            .clone()
            .unwrap_or_else(|| "the backend's input is closed".into())
    }

    /// Reads the child's messages until its stdout ends; returns why it ended.
    async fn read<R: AsyncRead + Unpin>(
        &self,
        mut lines: FramedRead<R, LinesCodec>,
        max_depth: usize,
    ) -> String {
        let mut unparseable = 0u64;
        loop {
            let line = match lines.next().await {
                Some(Ok(line)) => line,
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    return "the backend sent a line over the size limit".into();
                }
                Some(Err(LinesCodecError::Io(e))) => return format!("read failed: {e}"),
                None => return "the backend exited".into(),
            };
            if line.trim().is_empty() {
                continue;
            }
            match jsonrpc::parse(line.as_bytes(), max_depth) {
                Ok(msg) => self.deliver(msg),
                Err(e) => {
                    unparseable += 1;
                    if unparseable <= UNPARSEABLE_LOGGED {
                        tracing::warn!(backend = %self.backend, "backend sent an unparseable line: {e}");
                    } else {
                        tracing::debug!(backend = %self.backend, "backend sent an unparseable line: {e}");
                    }
                }
            }
        }
    }

    /// Hands a message to the request it belongs to, under the client's ids.
    fn deliver(&self, msg: Message) {
        match msg {
            Message::Response { id, outcome } => {
                let waiter = as_ours(&id).and_then(|id| self.take(id));
                match waiter {
                    Some(w) => {
                        let _ = w.response.send(Message::Response {
                            id: w.client_id,
                            outcome,
                        });
                    }
                    None => {
                        tracing::debug!(backend = %self.backend, %id, "a response for no request waiting; dropped")
                    }
                }
            }
            Message::Notification { method, params } => self.notify(method, params),
            Message::Request { id, method, .. } => {
                // 2026-07-28 servers send no requests: say so, so it does not wait for ever.
                tracing::warn!(backend = %self.backend, %method, "a 2026-07-28 backend sent a request; refused");
                let refusal = jsonrpc::response(
                    Some(&id),
                    Err(jsonrpc::ErrorObject::new(
                        jsonrpc::METHOD_NOT_FOUND,
                        "a 2026-07-28 client takes no requests",
                    )),
                );
                self.send_now(&refusal);
            }
        }
    }

    /// A notification goes to the request it names; a log message to the one request that
    /// asked for logs; anything else is dropped.
    fn notify(&self, method: String, mut params: Option<Value>) {
        let mut waiting = self.waiting.lock().expect("child lock");
        let fields = params.as_mut().and_then(Value::as_object_mut);
        let named = |key: &str, fields: &Option<&mut serde_json::Map<String, Value>>| {
            fields
                .as_ref()
                .and_then(|f| f.get(key))
                .and_then(as_ours_value)
        };
        if method == "notifications/cancelled" {
            // How a stdio server ends a subscription stream: the listen completes.
            if let Some(id) = named("requestId", &fields)
                && waiting.by_id.get(&id).is_some_and(|w| w.listen)
                && let Some(w) = waiting.by_id.remove(&id)
            {
                let done = json!({"resultType": "complete"});
                let outcome = Ok(jsonrpc::Raw::from_value(&done));
                let _ = w.response.send(Message::Response {
                    id: w.client_id,
                    outcome,
                });
            }
            return;
        }
        let subscription = fields
            .as_ref()
            .and_then(|f| f.get("_meta"))
            .and_then(|m| m.get(meta::SUBSCRIPTION_ID))
            .and_then(as_ours_value);
        let target = if method == "notifications/progress" {
            named("progressToken", &fields)
        } else if let Some(id) = subscription {
            Some(id)
        } else if method == "notifications/message" {
            let mut asking = waiting.by_id.iter().filter(|(_, w)| w.logs);
            match (asking.next(), asking.next()) {
                (Some((id, _)), None) => Some(*id),
                _ => None,
            }
        } else {
            None
        };
        let Some(waiter) = target.and_then(|id| waiting.by_id.get(&id)) else {
            tracing::debug!(backend = %self.backend, %method, "a notification for no request waiting; dropped");
            return;
        };
        if let Some(f) = fields {
            if method == "notifications/progress"
                && let Some(token) = &waiter.progress
            {
                f.insert("progressToken".into(), token.clone());
            }
            if subscription.is_some()
                && let Some(Value::Object(m)) = f.get_mut("_meta")
            {
                m.insert(
                    meta::SUBSCRIPTION_ID.into(),
                    serde_json::to_value(&waiter.client_id).unwrap_or(Value::Null),
                );
            }
        }
        if waiter
            .notifications
            .try_send(Message::Notification { method, params })
            .is_err()
        {
            tracing::debug!(backend = %self.backend, "a client reads its notifications too slowly; one dropped");
        }
    }

    fn take(&self, id: i64) -> Option<Waiter> {
        self.waiting.lock().expect("child lock").by_id.remove(&id)
    }

    /// Queues a line if there is room; what cannot wait (a refusal, a cancellation) is not
    /// worth holding up the reader for.
    fn send_now(&self, msg: &Value) {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        if self.out.try_send(line).is_err() {
            tracing::debug!(backend = %self.backend, "the child's input is full; a message to it dropped");
        }
    }

    /// The child is over: every request waiting hears why (its response never comes).
    fn end(&self, why: String) {
        let waiters = {
            let mut waiting = self.waiting.lock().expect("child lock");
            waiting.ended.get_or_insert(why.clone());
            std::mem::take(&mut waiting.by_id)
        };
        if !waiters.is_empty() {
            tracing::warn!(backend = %self.backend, child = self.index, requests = waiters.len(), "{why}");
        }
        drop(waiters);
        self.stop.cancel();
    }
}

/// An id this gateway gave on a child: a number.
fn as_ours(id: &Id) -> Option<i64> {
    match id {
        Id::Number(n) => Some(*n),
        Id::Unsigned(n) => i64::try_from(*n).ok(),
        Id::String(_) => None,
    }
}

fn as_ours_value(v: &Value) -> Option<i64> {
    v.as_i64()
}

/// One request's answer on a child: its notifications, then its response. Dropped before the
/// response, it cancels the request on the child.
#[derive(Debug)]
pub(crate) struct Replies {
    child: Arc<Child>,
    id: i64,
    notifications: mpsc::Receiver<Message>,
    response: oneshot::Receiver<Message>,
    done: bool,
}

impl Replies {
    pub fn child(&self) -> u32 {
        self.child.index
    }

    pub async fn next(&mut self) -> Option<Result<Message, String>> {
        if self.done {
            return None;
        }
        // Notifications first: the reader queued them before the response.
        tokio::select! {
            biased;
            Some(note) = self.notifications.recv() => Some(Ok(note)),
            response = &mut self.response => {
                self.done = true;
                Some(response.map_err(|_| self.child.why_ended()))
            }
        }
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        if self.done || self.child.take(self.id).is_none() {
            return;
        }
        let reason = "the client went away";
        self.child.send_now(&json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": reason},
        }));
    }
}

#[cfg(test)]
mod tests;

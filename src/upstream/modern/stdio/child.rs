//! One 2026-07-28 stdio child: a writer task feeds its stdin, a reader task reads its stdout and
//! hands each message to the request it belongs to, under the client's ids (the response by
//! its id, progress by its token, a subscription's events by their subscription id, a log
//! message to the one request on the child that asked for logs). [`Replies`] is one request's
//! answer; dropped before the response, it sends the child `notifications/cancelled`.

use super::asks_for_logs;
use crate::jsonrpc::{self, Id, Message};
use crate::protocol::{self, meta};
use crate::seal::Digest;
use crate::upstream::http::Failure;
use crate::upstream::modern::Outgoing;
use crate::upstream::stdio::{UNPARSEABLE_LOGGED, write_lines};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Notifications that wait for a client reading slowly; past them the child's next one for
/// that request is dropped rather than holding up every other request on the child.
const NOTIFICATIONS_QUEUED: usize = 64;

/// Cancelled requests that asked for logs a child keeps in mind; past them it keeps one
/// entry that names no principal, and its logs are nobody's until that passes.
const CANCELLED_KEPT: usize = 16;

/// How long a child's writer waits on a write that makes no progress before the child is
/// taken for hung and ended.
const WRITE_STALL: Duration = Duration::from_secs(30);

/// What a child runs with.
pub(super) struct ChildIo {
    pub(super) backend: String,
    pub(super) index: u32,
    pub(super) write_queue: usize,
    pub(super) max_message: usize,
    pub(super) max_depth: usize,
    /// Cancelled when the child is ended, or has ended by itself.
    pub(super) stop: CancellationToken,
    pub(super) freed: Arc<Notify>,
    /// How long a cancelled request's logs may still come.
    pub(super) cancelled_logs: Duration,
    /// Where its reader and writer run: shutdown waits for them.
    pub(super) tasks: TaskTracker,
}

/// One child: lines to its stdin go through a writer task, its stdout is read by a reader
/// task that hands each message to the request it belongs to.
#[derive(Debug)]
pub(super) struct Child {
    backend: String,
    index: u32,
    out: mpsc::Sender<Vec<u8>>,
    waiting: Mutex<Waiting>,
    pub(super) stop: CancellationToken,
    /// Woken when a request that asked for logs leaves this child.
    freed: Arc<Notify>,
    cancelled_logs: Duration,
}

#[derive(Debug, Default)]
struct Waiting {
    /// The id the next request gets on this child (it is also its progress token).
    next: i64,
    by_id: HashMap<i64, Waiter>,
    /// Why the child ended, once it has.
    ended: Option<String>,
    /// Cancelled requests that asked for logs, whose logs may still come: their principal
    /// (`None`: any), and until when. Their logs must never reach another principal.
    cancelled: Vec<(Option<Digest>, tokio::time::Instant)>,
}

impl Waiting {
    /// Whether a log message now may be a cancelled request's of a principal other than
    /// `principal`'s.
    fn foreign_logs(&mut self, principal: Option<&Digest>) -> bool {
        let now = tokio::time::Instant::now();
        self.cancelled.retain(|(_, until)| *until > now);
        self.cancelled
            .iter()
            .any(|(p, _)| p.is_none() || p.as_ref() != principal)
    }

    fn remember_cancelled(&mut self, principal: Option<Digest>, until: tokio::time::Instant) {
        if self.cancelled.len() >= CANCELLED_KEPT {
            let last = self
                .cancelled
                .iter()
                .map(|(_, u)| *u)
                .max()
                .unwrap_or(until);
            self.cancelled = vec![(None, last.max(until))];
        } else {
            self.cancelled.push((principal, until));
        }
    }

    /// The one request that asked for logs, if exactly one did and no other principal's
    /// cancelled request may still be logging.
    fn log_reader(&mut self) -> Option<i64> {
        let mut asking = self.by_id.iter().filter(|(_, w)| w.logs);
        let (id, principal) = match (asking.next(), asking.next()) {
            (Some((id, w)), None) => (*id, w.principal),
            _ => return None,
        };
        (!self.foreign_logs(principal.as_ref())).then_some(id)
    }
}

#[derive(Debug)]
struct Waiter {
    client_id: Id,
    /// The client's progress token, given back on the child's progress notifications.
    progress: Option<Value>,
    /// The request set `logLevel` (a listen's is not counted: it has no logs to get).
    logs: bool,
    principal: Option<Digest>,
    listen: bool,
    notifications: mpsc::Sender<Message>,
    response: oneshot::Sender<Message>,
}

impl Child {
    /// Starts the writer and the reader over the child's pipes (any byte streams: tests use
    /// in-memory ones).
    pub(super) fn run<R, W>(io: ChildIo, stdout: R, stdin: W) -> Arc<Child>
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
            freed: io.freed,
            cancelled_logs: io.cancelled_logs,
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
        io.tasks.spawn(async move {
            // Dropping the writer on stop closes the child's stdin, which asks it to exit.
            tokio::select! {
                () = writer => {}
                () = stop.cancelled() => {}
            }
        });
        let lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(io.max_message));
        let reader = child.clone();
        io.tasks.spawn(async move {
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
    pub(super) async fn request(self: &Arc<Self>, out: &Outgoing<'_>) -> Result<Replies, Failure> {
        let mut params = out.params.clone();
        let request_meta = params.get_mut("_meta").and_then(Value::as_object_mut);
        let logs = asks_for_logs(out);
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
                principal: out.principal.copied(),
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

    /// A notification goes to the request it names ([`Child::target`]), under the client's
    /// token and subscription id; anything else is dropped.
    fn notify(&self, method: String, mut params: Option<Value>) {
        let mut waiting = self.waiting.lock().expect("child lock");
        let fields = params.as_mut().and_then(Value::as_object_mut);
        if method == "notifications/cancelled" {
            if let Some(id) = fields.as_ref().and_then(|f| ours(f.get("requestId"))) {
                end_listen(&mut waiting, id);
            }
            return;
        }
        let Some(target) = fields
            .as_ref()
            .and_then(|f| target(&method, f, &mut waiting))
        else {
            tracing::debug!(backend = %self.backend, %method, "a notification for no request waiting; dropped");
            return;
        };
        let waiter = &waiting.by_id[&target.id];
        if let Some(f) = fields {
            rewrite(f, target.by, waiter);
        }
        if waiter
            .notifications
            .try_send(Message::Notification { method, params })
            .is_err()
        {
            tracing::debug!(backend = %self.backend, "a client reads its notifications too slowly; one dropped");
        }
    }

    /// The request `id`, answered: nothing waits for it any more.
    fn take(&self, id: i64) -> Option<Waiter> {
        self.forget(id, false)
    }

    /// The request `id`, whose answer is no longer wanted: if it asked for logs, the child's
    /// log messages are nobody's for a while, as it may still be finishing it.
    fn cancel(&self, id: i64) -> Option<Waiter> {
        self.forget(id, true)
    }

    fn forget(&self, id: i64, cancelled: bool) -> Option<Waiter> {
        let waiter = {
            let mut waiting = self.waiting.lock().expect("child lock");
            let waiter = waiting.by_id.remove(&id);
            if cancelled && let Some(w) = waiter.as_ref().filter(|w| w.logs) {
                let until = tokio::time::Instant::now() + self.cancelled_logs;
                waiting.remember_cancelled(w.principal, until);
            }
            waiter
        };
        if waiter.as_ref().is_some_and(|w| w.logs) {
            self.freed.notify_waiters();
        }
        waiter
    }

    /// Whether a request of `principal` that asks for logs would get them here: no other
    /// request on this child asks, and no other principal's cancelled one may still log.
    pub(super) fn quiet_for(&self, principal: Option<&Digest>) -> bool {
        let mut waiting = self.waiting.lock().expect("child lock");
        !waiting.by_id.values().any(|w| w.logs) && !waiting.foreign_logs(principal)
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
        self.freed.notify_waiters();
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

/// A request id or progress token this gateway gave on a child, in a notification.
fn ours(v: Option<&Value>) -> Option<i64> {
    v?.as_i64()
}

/// The request a notification belongs to, and how it names it.
struct Target {
    id: i64,
    by: By,
}

enum By {
    Progress,
    Subscription,
    Log,
}

/// Progress goes by its token, to a request whose client gave one (the gateway's own token
/// never leaves); a subscription's event by its id, to a listen; a log message to the one
/// request that may have it ([`Waiting::log_reader`]).
fn target(method: &str, f: &Map<String, Value>, waiting: &mut Waiting) -> Option<Target> {
    let to = |id: i64, by: By, fits: fn(&Waiter) -> bool, waiting: &Waiting| {
        waiting
            .by_id
            .get(&id)
            .filter(|w| fits(w))
            .map(|_| Target { id, by })
    };
    if method == "notifications/progress" {
        let id = ours(f.get("progressToken"))?;
        return to(id, By::Progress, |w| w.progress.is_some(), waiting);
    }
    let subscription = f.get("_meta").and_then(|m| m.get(meta::SUBSCRIPTION_ID));
    if let Some(id) = ours(subscription) {
        return to(id, By::Subscription, |w| w.listen, waiting);
    }
    if method == "notifications/message" {
        let id = waiting.log_reader()?;
        return Some(Target { id, by: By::Log });
    }
    None
}

/// Puts the client's progress token or listen id where the child wrote the gateway's.
fn rewrite(f: &mut Map<String, Value>, by: By, waiter: &Waiter) {
    match by {
        By::Progress => {
            if let Some(token) = &waiter.progress {
                f.insert("progressToken".into(), token.clone());
            }
        }
        By::Subscription => {
            if let Some(Value::Object(m)) = f.get_mut("_meta") {
                let id = serde_json::to_value(&waiter.client_id).unwrap_or(Value::Null);
                m.insert(meta::SUBSCRIPTION_ID.into(), id);
            }
        }
        By::Log => {}
    }
}

/// A stdio server ends a subscription stream with `notifications/cancelled`: the listen
/// completes with its result.
fn end_listen(waiting: &mut Waiting, id: i64) {
    if waiting.by_id.get(&id).is_some_and(|w| w.listen)
        && let Some(w) = waiting.by_id.remove(&id)
    {
        let done = json!({"resultType": "complete"});
        let _ = w.response.send(Message::Response {
            id: w.client_id,
            outcome: Ok(jsonrpc::Raw::from_value(&done)),
        });
    }
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
        if self.done || self.child.cancel(self.id).is_none() {
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

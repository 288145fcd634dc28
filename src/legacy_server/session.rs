//! Per-session state shared by the reader loop and the request handlers, and the machinery
//! for server->client requests: id allocation, the table of pending requests and the
//! per-request context handlers run with.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::AbortHandle;

use super::asks::AskError;
use super::wire::{self, Outgoing, RpcError};
use super::{LATEST_PROTOCOL_VERSION, Options};

/// Locks a std mutex, ignoring poisoning: every critical section here is a handful of map
/// or field operations that leave the data consistent even if a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the client told us in `initialize`, plus state tools keep across calls.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// `Some` once `initialize` has been answered.
    pub protocol_version: Option<String>,
    pub client_capabilities: Value,
    pub client_info: Value,
    pub initialized_notified: bool,
    /// Root URIs fetched because of `--roots-on-init`.
    pub cached_roots: Option<Vec<String>>,
    /// Set once `url_required` has asked for its URL elicitation.
    pub url_connected: bool,
}

/// A client request being handled by its own task.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// Distinguishes successive requests that reuse an id, so a finishing task never
    /// unregisters its successor.
    pub generation: u64,
    pub abort: AbortHandle,
}

type ReplySender = oneshot::Sender<Result<Value, RpcError>>;

#[derive(Debug)]
pub(crate) struct Shared {
    pub opts: Options,
    out: mpsc::UnboundedSender<Outgoing>,
    session: Mutex<Session>,
    /// Server->client requests awaiting the client's answer, by JSON-RPC id.
    pending: Mutex<HashMap<i64, ReplySender>>,
    /// Client->server requests being handled, by the serialized form of their id.
    pub inflight: Mutex<HashMap<String, InFlight>>,
    next_request_id: AtomicI64,
    next_elicitation: AtomicU64,
    /// Set while the session is being torn down, so that handlers dropped by the teardown do
    /// not queue farewell messages.
    closing: AtomicBool,
    /// Signalled by the `crash` tool.
    pub crash: Notify,
}

impl Shared {
    pub(crate) fn new(opts: Options, out: mpsc::UnboundedSender<Outgoing>) -> Self {
        Self {
            opts,
            out,
            session: Mutex::new(Session::default()),
            pending: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            // Like the Python SDK, each session numbers its own requests from 0.
            next_request_id: AtomicI64::new(0),
            next_elicitation: AtomicU64::new(1),
            closing: AtomicBool::new(false),
            crash: Notify::new(),
        }
    }

    /// Queues a message for the writer; silently dropped once the session is closing.
    /// Responses carry their own id; use [`Shared::send_for`] for anything made on behalf of
    /// a client request.
    pub(crate) fn send(&self, msg: Value) {
        self.send_for(None, msg);
    }

    /// Queues a message made while handling the client request `origin` (its JSON-RPC id),
    /// so that transports with one stream per request (Streamable HTTP) can put it on the
    /// right one.
    pub(crate) fn send_for(&self, origin: Option<&Value>, msg: Value) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        // The writer only goes away when the session ends, at which point nobody cares.
        let _ = self.out.send(Outgoing::Message {
            msg,
            origin: origin.cloned(),
        });
    }

    pub(crate) fn shutdown_writer(&self, ack: oneshot::Sender<()>) {
        let _ = self.out.send(Outgoing::Shutdown(ack));
    }

    pub(crate) fn session(&self) -> MutexGuard<'_, Session> {
        lock(&self.session)
    }

    /// The negotiated protocol version (the latest before `initialize`, which no handler
    /// other than `initialize` itself can observe).
    pub(crate) fn version(&self) -> String {
        self.session()
            .protocol_version
            .clone()
            .unwrap_or_else(|| LATEST_PROTOCOL_VERSION.to_owned())
    }

    pub(crate) fn client_capabilities(&self) -> Value {
        self.session().client_capabilities.clone()
    }

    /// A fresh number and elicitation id, unique within this process.
    pub(crate) fn next_elicitation(&self) -> (u64, String) {
        let n = self.next_elicitation.fetch_add(1, Ordering::SeqCst);
        (n, format!("mrtr-legacy-{}-{n}", std::process::id()))
    }

    /// Routes a client's response to the request waiting for it. Returns false if no request
    /// with that id is pending (already answered, abandoned, or never sent).
    pub(crate) fn resolve(&self, id: i64, outcome: Result<Value, RpcError>) -> bool {
        match lock(&self.pending).remove(&id) {
            Some(tx) => {
                // The waiter may have been cancelled in the meantime; nothing to do then.
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Starts tearing the session down: no further messages are queued and every handler
    /// still waiting for the client is released.
    pub(crate) fn begin_close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        lock(&self.pending).clear();
        lock(&self.inflight).clear();
    }

    fn register(&self) -> (i64, oneshot::Receiver<Result<Value, RpcError>>) {
        let id = self.next_request_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        (id, rx)
    }

    fn forget(&self, id: i64) {
        lock(&self.pending).remove(&id);
    }
}

/// The context a single client request is handled in.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    /// The id of the client request being handled; `None` for work the server started on
    /// its own (the `--roots-on-init` fetch).
    origin: Option<Value>,
    progress_token: Option<Value>,
    started: AtomicBool,
}

impl Ctx {
    pub(crate) fn new(
        shared: Arc<Shared>,
        origin: Option<Value>,
        progress_token: Option<Value>,
    ) -> Self {
        Self {
            shared,
            origin,
            progress_token,
            started: AtomicBool::new(false),
        }
    }

    pub(crate) fn version(&self) -> String {
        self.shared.version()
    }

    /// Whether the negotiated revision is `since` or newer (revisions are ISO dates, so they
    /// order lexicographically).
    pub(crate) fn at_least(&self, since: &str) -> bool {
        self.version().as_str() >= since
    }

    pub(crate) fn has_progress_token(&self) -> bool {
        self.progress_token.is_some()
    }

    /// Sends a log message (`notifications/message`) for the request being served.
    pub(crate) fn log(&self, level: &str, text: &str) {
        let params = json!({"level": level, "logger": "fixture", "data": text});
        self.shared.send_for(
            self.origin.as_ref(),
            wire::notification("notifications/message", params),
        );
    }

    /// Sends a progress notification if the client asked for progress.
    pub(crate) fn progress(&self, progress: u64, total: u64, message: &str) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = json!({"progressToken": token, "progress": progress, "total": total});
        // `message` only exists from 2025-03-26 on.
        if self.at_least("2025-03-26") {
            params["message"] = message.into();
        }
        self.shared.send_for(
            self.origin.as_ref(),
            wire::notification("notifications/progress", params),
        );
    }

    /// Announces that work has begun, once per request, so the client sees progress before
    /// the handler blocks on anything.
    pub(crate) fn announce_start(&self) {
        if !self.started.swap(true, Ordering::SeqCst) {
            self.progress(0, 1, "started");
        }
    }

    /// Sends a request to the client and returns a handle to await its answer; dropping the
    /// handle unanswered (e.g. because this request was cancelled) tells the client.
    pub(crate) fn send_request(&self, method: &str, params: Value) -> Outstanding {
        self.announce_start();
        let (id, rx) = self.shared.register();
        self.shared
            .send_for(self.origin.as_ref(), wire::request(id, method, params));
        Outstanding {
            shared: Arc::clone(&self.shared),
            origin: self.origin.clone(),
            id,
            rx,
            settled: false,
        }
    }
}

/// A server->client request that has been sent and not yet answered.
#[derive(Debug)]
pub(crate) struct Outstanding {
    shared: Arc<Shared>,
    origin: Option<Value>,
    id: i64,
    rx: oneshot::Receiver<Result<Value, RpcError>>,
    settled: bool,
}

impl Outstanding {
    /// Waits for the client's answer.
    pub(crate) async fn reply(mut self) -> Result<Value, AskError> {
        let outcome = (&mut self.rx).await;
        self.settled = true;
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(err)) => Err(AskError::Client(err)),
            Err(_) => Err(AskError::Closed),
        }
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        // Only a request the client is still working on is worth cancelling.
        if self.settled || !matches!(self.rx.try_recv(), Err(TryRecvError::Empty)) {
            return;
        }
        // Nobody will read the answer any more: free the slot and let the client stop asking
        // its user, as a well-behaved server would.
        self.shared.forget(self.id);
        self.shared.send_for(
            self.origin.as_ref(),
            wire::notification(
                "notifications/cancelled",
                json!({
                    "requestId": self.id,
                    "reason": "the request that needed this answer was cancelled",
                }),
            ),
        );
    }
}

//! 2026-07-28 backends over stdio: a small pool of children ([`Children`]) that every
//! principal shares, since the protocol keeps no state between requests. Each child is started
//! as a legacy stdio backend's is (`stdio::launch`) and runs many requests at once, so the
//! gateway gives each request an id of its own on that child and maps what comes back to the
//! client's: the response by its id, `notifications/progress` by a progress token it gives in
//! place of the client's, a subscription's events by their subscription id. A log message
//! carries nothing that ties it to a request, so it reaches one only when that request is the
//! only one on its child that asked for logs (`logLevel`), otherwise it is dropped; such
//! requests are therefore spread over the children, one a child, as far as they go. A request
//! whose answer is no longer wanted gets `notifications/cancelled`.

mod child;

pub(crate) use child::Replies;

use super::Outgoing;
use crate::config::{Backend, Limits, Stdio};
use crate::protocol::{self, meta};
use crate::seal::Digest;
use crate::upstream::http::Failure;
use crate::upstream::stdio::{Launched, launch};
use child::{Child, ChildIo};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a child's log messages stay away from other principals after one principal's
/// request that asked for them was cancelled there: a server stops a cancelled request's work
/// within it, and a longer quiet would keep other principals' calls (placed away from the
/// child meanwhile) from a listen of theirs that is there.
const CANCELLED_LOGS: Duration = Duration::from_secs(5);

/// How often a request waiting for a child free of log requests looks again.
const QUIET_POLL: Duration = Duration::from_millis(100);

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
    /// Counts new requests; its hash picks the child one goes to. Not plain turns: clients
    /// that take turns with each other would then each always reach the same child, and a
    /// server that keeps events or state per process would never show one of them its own.
    next: AtomicUsize,
    spread: RandomState,
    /// Woken when a request that asked for logs is done, for those waiting for a quiet child.
    freed: Arc<Notify>,
    queue_wait: Duration,
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
            spread: RandomState::new(),
            freed: Arc::new(Notify::new()),
            queue_wait: limits.queue_wait,
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

    /// Sends a request to the child [`Children::place`] picks.
    pub async fn send(&self, out: &Outgoing<'_>) -> Result<super::Messages, Failure> {
        let index = self.place(out).await;
        let child = {
            let mut slot = self.slots[index].lock().await;
            match slot.as_ref() {
                Some(child) if !child.stop.is_cancelled() => child.clone(),
                _ => slot.insert(self.start(index)?).clone(),
            }
        };
        child.request(out).await.map(super::Messages::Child)
    }

    /// The child a request goes to: a retry's is the one that wrote its state, any other's one
    /// picked at random. A request that asks for logs waits, up to `queue_wait`, until that
    /// child (for a new request, any child) has no other request that asked for them: a log
    /// message carries nothing that ties it to a request, so it reaches one only when that
    /// request is the only one on its child that asked. After the wait it goes on regardless,
    /// and is served, its logs perhaps not.
    async fn place(&self, out: &Outgoing<'_>) -> usize {
        let pinned = out
            .child
            .map(|c| c as usize)
            .filter(|&c| c < self.slots.len());
        if !asks_for_logs(out) {
            return pinned.unwrap_or_else(|| self.random_child());
        }
        let deadline = tokio::time::Instant::now() + self.queue_wait;
        loop {
            // Asked for before looking, so a child that frees up meanwhile is not missed.
            let freed = self.freed.notified();
            let start = self.random_child();
            let quiet = match pinned {
                Some(c) => self.is_quiet(c, out.principal).then_some(c),
                None => (0..self.slots.len())
                    .map(|i| (start + i) % self.slots.len())
                    .find(|&i| self.is_quiet(i, out.principal)),
            };
            if let Some(i) = quiet {
                return i;
            }
            // The end of a cancelled request's quiet wakes nobody: looked at again this often.
            let now = tokio::time::Instant::now();
            let _ = tokio::time::timeout_at(deadline.min(now + QUIET_POLL), freed).await;
            if tokio::time::Instant::now() >= deadline {
                tracing::debug!(backend = %self.backend, "no child free of requests that asked for logs; this one's may be dropped");
                return pinned.unwrap_or(start);
            }
        }
    }

    fn random_child(&self) -> usize {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (self.spread.hash_one(n) % self.slots.len() as u64) as usize
    }

    /// A request of `principal` that asks for logs would get them on child `i` (or it has not
    /// started, or has ended).
    fn is_quiet(&self, i: usize, principal: Option<&Digest>) -> bool {
        match self.slots[i].try_lock() {
            Ok(slot) => slot
                .as_ref()
                .is_none_or(|c| c.stop.is_cancelled() || c.quiet_for(principal)),
            // Being started: the request that starts it may ask for logs.
            Err(_) => false,
        }
    }

    /// Sends `out` as the first line of a new child, in the first slot in place of the one
    /// there (ended). The other children keep their requests until the verdict is legacy.
    pub async fn probe(&self, out: &Outgoing<'_>) -> Result<super::Messages, Failure> {
        let child = {
            let mut slot = self.slots[0].lock().await;
            let child = self.start(0)?;
            if let Some(old) = slot.replace(child.clone()) {
                old.stop.cancel();
            }
            child
        };
        child.request(out).await.map(super::Messages::Child)
    }

    /// Ends every child: their requests fail, and the next request starts a new one.
    pub async fn end_all(&self) {
        for slot in &self.slots {
            if let Some(child) = slot.lock().await.take() {
                child.stop.cancel();
            }
        }
    }

    fn start(&self, index: usize) -> Result<Arc<Child>, Failure> {
        if self.shutdown.is_cancelled() {
            return Err(Failure::Other("the gateway is shutting down".into()));
        }
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
                freed: self.freed.clone(),
                cancelled_logs: CANCELLED_LOGS,
                tasks: self.exits.clone(),
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
/// Whether a request asks for log messages; a listen's `logLevel` is not counted.
fn asks_for_logs(out: &Outgoing<'_>) -> bool {
    out.method != protocol::LISTEN
        && out
            .params
            .get("_meta")
            .is_some_and(|m| m.get(meta::LOG_LEVEL).is_some())
}

#[cfg(test)]
mod tests;

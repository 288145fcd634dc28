//! The session pool of one backend. Sessions are keyed by (principal, capability fingerprint), so
//! no session carries two principals' state and each backend saw exactly the capabilities its
//! client declared. A session runs at most one interactive call; other calls share it. Past the
//! pool maximum, callers wait up to `queue_wait`, then get `Error::Busy`. Idle sessions close.
//!
//! Interactive calls (a parked call is one) are admitted within two shares of the pool, so one
//! principal's parked calls cannot take a backend from everyone else. One principal's hold at
//! most `principal_sessions` sessions: past it, its call waits for one of its own, then gets
//! `Error::PrincipalShare`. All of them together leave `reserved_sessions` to calls that need
//! no input, so those always find a session to share, to start, or to take from an idle one.

use super::Error;
use super::session::{self, Begin, Rules, Session, Start};
use super::{builtin, http, http_sse, stdio};
use crate::config::{Authorization, Backend, Limits, Transport};
use crate::metrics::{PoolMetrics, SessionEnd, SessionState};
use crate::protocol::caps::Declared;
use crate::seal::Digest;
use crate::shard::Shards;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub principal: Digest,
    pub fingerprint: u8,
}

#[derive(Debug)]
struct Slot {
    key: PoolKey,
    session: Session,
    interactive: bool,
    shared: usize,
    idle_since: Instant,
    /// Close when free instead of lending again.
    retired: bool,
}

#[derive(Debug, Default)]
struct Slots {
    live: Vec<Slot>,
    starting: usize,
    /// The principals of the starts in `starting` that are for interactive calls.
    starting_interactive: Vec<Digest>,
}

impl Slots {
    /// Sessions that interactive calls hold or are starting: `principal`'s, and everyone's. A
    /// session that ended is not counted, whoever still leases it: a call sent again because
    /// its session was gone (it holds the old lease meanwhile) is one call, not two.
    fn interactive(&self, principal: &Digest) -> (usize, usize) {
        let held = self
            .live
            .iter()
            .filter(|s| s.interactive && s.session.is_alive());
        let mine = held
            .clone()
            .filter(|s| s.key.principal == *principal)
            .count()
            + self
                .starting_interactive
                .iter()
                .filter(|p| *p == principal)
                .count();
        (mine, held.count() + self.starting_interactive.len())
    }

    /// Counts a start for `want` (its principal too, if its call is interactive).
    fn begin_start(&mut self, want: &Want<'_>) {
        self.starting += 1;
        if want.interactive {
            self.starting_interactive.push(want.key.principal);
        }
    }

    /// Gives back a start counted by [`Slots::begin_start`].
    fn end_start(&mut self, interactive: Option<Digest>) {
        self.starting -= 1;
        let at = interactive.and_then(|p| self.starting_interactive.iter().position(|s| *s == p));
        if let Some(i) = at {
            self.starting_interactive.swap_remove(i);
        }
    }
}

#[derive(Debug)]
pub struct Pool {
    backend: Backend,
    limits: Limits,
    rules: Rules,
    slots: Mutex<Slots>,
    freed: Notify,
    shutdown: CancellationToken,
    /// The keep-alive HTTP client of an `http` or `sse` backend.
    client: Option<http::Client>,
    /// The session tasks (each closes its connection and reaps its child before it ends).
    sessions: tokio_util::task::TaskTracker,
    init_results: super::session::InitResults,
    metrics: PoolMetrics,
    /// A session ended without the pool ending it, or saw its backend restart
    /// ([`Start::restarted`]), since [`Pool::take_lost`] last looked.
    lost: Arc<AtomicBool>,
}

/// A session lent to one call; returned to the pool on drop.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<Pool>,
    session: Session,
    interactive: bool,
    retire: bool,
    /// Given back to the pool already ([`Lease::give_back_retired`]).
    released: bool,
}

impl Lease {
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Closes the session instead of reusing it (its state can no longer be trusted).
    pub fn retire(&mut self) {
        self.retire = true;
    }

    /// Gives the session's slot back now, retired, for a holder that will send nothing more on
    /// it (its call failed while parked, and only the outcome waits for the client). The handle
    /// stays, for what it says of the backend; the pool no longer counts it.
    pub fn give_back_retired(&mut self) {
        if !self.released {
            self.released = true;
            self.pool.release(self.session.id(), self.interactive, true);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            self.pool
                .release(self.session.id(), self.interactive, self.retire);
        }
    }
}

/// What the caller knows about the client, for a session that has to be started.
#[derive(Debug, Clone)]
pub struct Want<'a> {
    pub key: PoolKey,
    pub declared: Declared,
    pub client_info: Option<&'a Value>,
    pub interactive: bool,
    /// The client's `Authorization` header (used only by backends that pass it on).
    pub authorization: Option<&'a ::http::HeaderValue>,
}

impl Pool {
    pub fn new(
        backend: Backend,
        limits: Limits,
        rules: Rules,
        shutdown: CancellationToken,
        metrics: PoolMetrics,
        shards: &Shards,
    ) -> Arc<Pool> {
        let client = match &backend.transport {
            Transport::Http(cfg) | Transport::Sse(cfg) => {
                Some(http::client(cfg, backend.pool_max, shards))
            }
            Transport::Stdio(_) | Transport::Builtin(_) => None,
        };
        let pool = Arc::new(Pool {
            client,
            sessions: tokio_util::task::TaskTracker::new(),
            init_results: super::session::InitResults::new(backend.server_info),
            backend,
            limits,
            rules,
            slots: Mutex::new(Slots::default()),
            freed: Notify::new(),
            shutdown,
            metrics,
            lost: Arc::default(),
        });
        let reaper = Arc::downgrade(&pool);
        let every = (pool.backend.idle_timeout / 4).max(std::time::Duration::from_millis(50));
        let token = pool.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                let Some(pool) = reaper.upgrade() else { return };
                pool.close_idle();
            }
        });
        pool
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Whether a session was lost (the backend forgot it, its connection broke, its child
    /// exited) or saw its backend restart since the last time this was asked; asking clears it. A backend that lost its
    /// sessions may have been restarted as something else.
    pub fn take_lost(&self) -> bool {
        self.lost.swap(false, Ordering::AcqRel)
    }

    /// Counts a session's end.
    fn ended(&self, why: SessionEnd) {
        if why == SessionEnd::Lost {
            self.lost.store(true, Ordering::Release);
        }
        self.metrics.ended(why);
    }

    /// The keep-alive HTTP client of an `http` or `sse` backend: 2026-07-28 requests share
    /// its connections.
    pub fn http_client(&self) -> Option<&http::Client> {
        self.client.as_ref()
    }

    /// Leases a session for `want`, starting one if the pool has room.
    pub async fn acquire(self: &Arc<Self>, want: Want<'_>) -> Result<Lease, Error> {
        let queued = Instant::now();
        let deadline = queued + self.limits.queue_wait;
        loop {
            if self.shutdown.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            let notified = self.freed.notified();
            let refusal = match self.try_take(&want) {
                Taken::Lease(session) => {
                    self.metrics.queue_wait(queued.elapsed());
                    return Ok(Lease {
                        pool: self.clone(),
                        session,
                        interactive: want.interactive,
                        retire: false,
                        released: false,
                    });
                }
                Taken::Start => {
                    self.metrics.queue_wait(queued.elapsed());
                    // Taken at once, in the poll that counted it: the count is given back
                    // however the start ends, even if the caller gives up while it runs.
                    let slot = Starting {
                        pool: self,
                        held: true,
                        interactive: want.interactive.then_some(want.key.principal),
                    };
                    return self.start(&want, slot).await;
                }
                Taken::Wait => Error::Busy(self.backend.name.clone()),
                // Waits too: the pool cannot tell a parked call from a running one, and a
                // running call (a client that declares elicitation makes every call
                // interactive) often ends within `queue_wait`. What waits holds no session.
                Taken::OverShare(held) => Error::PrincipalShare {
                    backend: self.backend.name.clone(),
                    held,
                },
            };
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.metrics.queue_wait(queued.elapsed());
                return Err(refusal);
            }
        }
    }

    fn try_take(&self, want: &Want<'_>) -> Taken {
        let mut slots = self.slots.lock().expect("pool lock");
        slots.live.retain(|s| {
            let keep = s.session.is_alive() || s.interactive || s.shared > 0;
            if !keep {
                self.ended(SessionEnd::Lost);
            }
            keep
        });
        if want.interactive {
            let (mine, all) = slots.interactive(&want.key.principal);
            if mine >= self.backend.principal_sessions {
                return Taken::OverShare(mine);
            }
            if all >= self.backend.pool_max - self.backend.reserved_sessions {
                return Taken::Wait;
            }
        }
        let found = slots.live.iter_mut().find(|s| {
            s.key == want.key
                && !s.retired
                && s.session.is_alive()
                && (!want.interactive || !s.interactive)
        });
        if let Some(slot) = found {
            if want.interactive {
                slot.interactive = true;
            } else {
                slot.shared += 1;
            }
            return Taken::Lease(slot.session.clone());
        }
        if slots.live.len() + slots.starting < self.backend.pool_max {
            slots.begin_start(want);
            return Taken::Start;
        }
        // Full: make room by closing the longest-idle session of another key.
        let idle = slots
            .live
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.interactive && s.shared == 0)
            .min_by_key(|(_, s)| s.idle_since)
            .map(|(i, _)| i);
        if let Some(i) = idle {
            slots.live.swap_remove(i);
            self.ended(SessionEnd::Evicted);
            slots.begin_start(want);
            return Taken::Start;
        }
        Taken::Wait
    }

    async fn start(self: &Arc<Self>, want: &Want<'_>, slot: Starting<'_>) -> Result<Lease, Error> {
        let start = self.start_of(
            want.declared,
            want.client_info.cloned(),
            want.authorization.cloned(),
        );
        let started = self.connect(start, session::Pooled).await;
        let mut slots = self.slots.lock().expect("pool lock");
        slot.give_back(&mut slots);
        match started {
            Ok(session) => {
                self.metrics.started();
                slots.live.push(Slot {
                    key: want.key,
                    session: session.clone(),
                    interactive: want.interactive,
                    shared: usize::from(!want.interactive),
                    idle_since: Instant::now(),
                    retired: false,
                });
                tracing::info!(backend = %self.backend.name, session = session.id(), version = %session.info().protocol_version, "upstream session started");
                Ok(Lease {
                    pool: self.clone(),
                    session,
                    interactive: want.interactive,
                    retire: false,
                    released: false,
                })
            }
            Err(e) => {
                drop(slots);
                self.freed.notify_waiters();
                self.metrics.start_failed();
                // A child that could not be spawned was logged with its command line already.
                if !matches!(e, Error::Spawn { .. }) {
                    tracing::warn!(backend = %self.backend.name, "{e}");
                }
                Err(e)
            }
        }
    }

    /// What a new session of this backend starts from.
    pub(crate) fn start_of(
        &self,
        declared: Declared,
        client_info: Option<Value>,
        authorization: Option<::http::HeaderValue>,
    ) -> Start {
        Start {
            backend: self.backend.name.clone(),
            protocol_version: self.backend.protocol_version,
            declared,
            client_info,
            max_message_bytes: self.limits.max_line_bytes,
            max_json_depth: self.limits.max_json_depth,
            max_held_roots: self.limits.max_input_requests,
            init_timeout: self.limits.request_timeout,
            rules: self.rules.clone(),
            authorization,
            tasks: self.sessions.clone(),
            init_results: self.init_results.clone(),
            restarted: self.lost.clone(),
        }
    }

    /// A new session with the backend, handed to `begin` once `initialize` is through.
    pub(crate) async fn connect<B: Begin>(
        &self,
        start: Start,
        begin: B,
    ) -> Result<B::Output, Error> {
        let shutdown = self.shutdown.child_token();
        match &self.backend.transport {
            Transport::Stdio(cfg) => stdio::spawn(cfg, start, shutdown, begin).await,
            Transport::Builtin(opts) => builtin::spawn(opts, start, shutdown, begin).await,
            Transport::Http(cfg) | Transport::Sse(cfg) => self.start_http(cfg, start, begin).await,
        }
    }

    async fn start_http<B: Begin>(
        &self,
        cfg: &crate::config::Http,
        start: Start,
        begin: B,
    ) -> Result<B::Output, Error> {
        let mut headers = cfg.headers.clone();
        let credential = match &cfg.authorization {
            Authorization::Drop => None,
            Authorization::Pass => start.authorization.clone(),
            Authorization::Replace(value) => Some(value.clone()),
        };
        if let Some(value) = credential {
            headers.insert(::http::header::AUTHORIZATION, value);
        }
        let client = self.client.clone().expect("http backends have a client");
        let (link, rx) = http::Link::new(
            self.backend.name.clone(),
            client,
            headers,
            &start,
            self.shutdown.child_token(),
        );
        let shutdown = self.shutdown.child_token();
        match &self.backend.transport {
            Transport::Sse(_) => {
                let transport = http_sse::HttpSse::connect(link, rx, &cfg.url).await?;
                begin.begin(transport, start, shutdown, async {}).await
            }
            _ => {
                let transport = http::StreamableHttp::new(link, rx, cfg);
                begin.begin(transport, start, shutdown, async {}).await
            }
        }
    }

    fn release(&self, session: u64, interactive: bool, retire: bool) {
        let mut slots = self.slots.lock().expect("pool lock");
        if let Some(i) = slots.live.iter().position(|s| s.session.id() == session) {
            let slot = &mut slots.live[i];
            if interactive {
                slot.interactive = false;
            } else {
                slot.shared = slot.shared.saturating_sub(1);
            }
            slot.idle_since = Instant::now();
            let alive = slot.session.is_alive();
            slot.retired |= retire || !alive;
            if slot.retired && !slot.interactive && slot.shared == 0 {
                // Dropping the last handle closes the session task and its child.
                slots.live.swap_remove(i);
                self.ended(if alive {
                    SessionEnd::Retired
                } else {
                    SessionEnd::Lost
                });
            }
        }
        drop(slots);
        self.freed.notify_waiters();
    }

    fn close_idle(&self) {
        let now = Instant::now();
        let mut slots = self.slots.lock().expect("pool lock");
        let before = slots.live.len();
        slots.live.retain(|s| {
            if s.interactive || s.shared > 0 {
                return true;
            }
            let end = if !s.session.is_alive() {
                SessionEnd::Lost
            } else if s.retired {
                SessionEnd::Retired
            } else if now.duration_since(s.idle_since) >= self.backend.idle_timeout {
                SessionEnd::Idle
            } else {
                return true;
            };
            self.ended(end);
            false
        });
        let closed = before - slots.live.len();
        drop(slots);
        if closed > 0 {
            tracing::debug!(backend = %self.backend.name, closed, "idle upstream sessions closed");
            self.freed.notify_waiters();
        }
    }

    /// Waits until every session task has ended (after shutdown cancelled them).
    pub async fn closed(&self) {
        self.sessions.close();
        self.sessions.wait().await;
    }

    /// Sessions now open (for tests and metrics).
    pub fn open_sessions(&self) -> usize {
        self.slots.lock().expect("pool lock").live.len()
    }

    /// Sessions by what they are doing now, for the `upstream_sessions` gauge.
    pub fn session_states(&self) -> [(SessionState, usize); 4] {
        let slots = self.slots.lock().expect("pool lock");
        let count = |f: &dyn Fn(&Slot) -> bool| slots.live.iter().filter(|s| f(s)).count();
        [
            (SessionState::Starting, slots.starting),
            (
                SessionState::Idle,
                count(&|s| !s.interactive && s.shared == 0),
            ),
            (
                SessionState::Shared,
                count(&|s| !s.interactive && s.shared > 0),
            ),
            (SessionState::Interactive, count(&|s| s.interactive)),
        ]
    }
}

/// A session start counted in `Slots::starting`, given back when the start ends, whether it
/// finishes or its caller's future is dropped while the backend initializes.
struct Starting<'a> {
    pool: &'a Pool,
    held: bool,
    /// The principal of an interactive call's start.
    interactive: Option<Digest>,
}

impl Starting<'_> {
    /// Gives the count back under the lock the caller holds (where the started session is
    /// added), so the pool is never seen over its maximum.
    fn give_back(mut self, slots: &mut Slots) {
        slots.end_start(self.interactive);
        self.held = false;
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let mut slots = self.pool.slots.lock().expect("pool lock");
        slots.end_start(self.interactive);
        drop(slots);
        self.pool.freed.notify_waiters();
    }
}

enum Taken {
    Lease(Session),
    Start,
    Wait,
    /// The principal's interactive calls hold this many sessions, its whole share.
    OverShare(usize),
}

#[cfg(test)]
mod tests;

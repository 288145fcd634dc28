//! Legacy clients' sessions: what an `initialize` on the gateway's face opens. On a legacy
//! backend each session is one backend session of its own (a faithful proxy,
//! `upstream::session::proxy`); on a 2026-07-28 backend it is the reverse bridge's
//! (`bridge::reverse`). Sessions are kept here under a random key; the client holds a sealed
//! `Mcp-Session-Id` naming the key, its principal, this replica and the backend, which is
//! opened once and checked once ([`Bridge::locate`]: here, at its owner, or gone). Sessions are
//! bounded per principal and in total, and end when idle, when the client deletes them, or when
//! their backend session ends.
//!
//! Nothing here knows HTTP: a face hands over the client's messages and reads the streams the
//! session gives back.

use super::Bridge;
use super::reverse::{self, Reverse};
use crate::jsonrpc::{self, ErrorObject, INVALID_REQUEST, Id, Message};
use crate::protocol::caps::Declared;
use crate::protocol::{self, LEGACY};
use crate::seal::{Digest, ParkId, SessionClaims};
use crate::upstream::era::Era;
use crate::upstream::session::proxy::{self, Proxied, Proxy};
use dashmap::DashMap;
use serde_json::{Map, Value};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

pub use proxy::Refused;

/// The sessions of this replica.
#[derive(Debug, Default)]
pub struct Registry {
    live: DashMap<ParkId, Arc<Live>>,
    /// Clients' connections that wait for their session: a face's own state (an HTTP+SSE
    /// stream opened before its `initialize`), kept with the engine it belongs to.
    waiting: DashMap<ParkId, Arc<dyn Any + Send + Sync>>,
    counts: Mutex<Counts>,
    /// Whether the task that ends idle sessions runs.
    sweeping: AtomicBool,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_principal: HashMap<Digest, usize>,
}

/// Where a session's requests go: its own backend session (a legacy backend), or the reverse
/// bridge (a 2026-07-28 backend).
#[derive(Debug)]
enum Link {
    Proxied(Proxied),
    Reverse(Arc<Reverse>),
}

impl Link {
    fn version(&self) -> &str {
        match self {
            Link::Proxied(p) => &p.version,
            Link::Reverse(r) => &r.version,
        }
    }

    fn is_alive(&self) -> bool {
        match self {
            Link::Proxied(p) => p.is_alive(),
            Link::Reverse(r) => r.is_alive(),
        }
    }

    fn ended(&self) -> WaitForCancellationFutureOwned {
        match self {
            Link::Proxied(p) => p.ended(),
            Link::Reverse(r) => r.ended(),
        }
    }

    fn close(&self) {
        match self {
            Link::Proxied(p) => p.close(),
            Link::Reverse(r) => r.close(),
        }
    }
}

/// One legacy client's session.
#[derive(Debug)]
pub struct Live {
    key: ParkId,
    principal: Digest,
    upstream: Link,
    /// The receiving end of the session's own messages, while no GET stream holds it.
    standalone: Mutex<Option<mpsc::Receiver<Value>>>,
    /// Requests in flight and streams open: a busy session is never idle.
    busy: AtomicUsize,
    idle_since: Mutex<Instant>,
    /// What was sent on the session's streams, for a client that resumes one.
    pub streams: super::streams::Streams,
}

/// What an `initialize` opened: the sealed session id, and the result for the client.
#[derive(Debug)]
pub struct Opened {
    pub session_id: String,
    pub result: Value,
}

/// Why a session id names no session here: every such failure looks the same to the client
/// (404, so it initializes again).
#[derive(Debug)]
pub struct Gone;

/// Where a session id's requests are served ([`Bridge::locate`]).
#[derive(Debug)]
pub enum Found {
    /// Held here.
    Here(Arc<Live>),
    /// Held by replica `owner`, whose internal listener is at `addr`: forward it there, once.
    Owner { owner: String, addr: String },
    /// No session this client can use, for whatever reason (404: it initializes again).
    Gone,
}

/// Keeps a session busy while it lives: a request's answer stream, or the GET stream.
#[derive(Debug)]
pub struct Busy(Arc<Live>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.0.idle_since.lock().expect("idle lock") = Instant::now();
        }
    }
}

/// A request's answer stream: what the backend says about it, its response last.
#[derive(Debug)]
pub struct Answer {
    pub rx: mpsc::Receiver<Value>,
    _busy: Busy,
}

/// The session's own stream (the GET stream): the backend's messages that belong to no
/// request. Hands its receiver back to the session when dropped.
#[derive(Debug)]
pub struct Listen {
    rx: Option<mpsc::Receiver<Value>>,
    busy: Busy,
}

impl Listen {
    /// The next message, or `None` once the session is over.
    pub async fn recv(&mut self) -> Option<Value> {
        let rx = self.rx.as_mut()?;
        tokio::select! {
            msg = rx.recv() => msg,
            () = self.busy.0.upstream.ended() => None,
        }
    }
}

impl Drop for Listen {
    fn drop(&mut self) {
        *self.busy.0.standalone.lock().expect("standalone lock") = self.rx.take();
    }
}

impl Live {
    fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// The version the session negotiated.
    pub fn version(&self) -> &str {
        self.upstream.version()
    }

    /// Sends the client's request upstream.
    pub async fn request(
        self: &Arc<Self>,
        id: Id,
        method: String,
        params: Option<Value>,
    ) -> Answer {
        let busy = self.busy();
        let rx = match &self.upstream {
            Link::Proxied(p) => p.request(id, method, params).await,
            Link::Reverse(r) => r.request(id, method, params),
        };
        Answer { rx, _busy: busy }
    }

    /// Passes the client's notification or response upstream.
    pub async fn send(&self, msg: Message) -> Result<(), Refused> {
        match &self.upstream {
            Link::Proxied(p) => p.send(msg).await,
            Link::Reverse(r) => r.send(msg),
        }
    }

    /// The session's own stream; `None` while another stream has it.
    pub fn listen(self: &Arc<Self>) -> Option<Listen> {
        let rx = self.standalone.lock().expect("standalone lock").take()?;
        Some(Listen {
            rx: Some(rx),
            busy: self.busy(),
        })
    }

    fn idle_for(&self, now: Instant) -> Option<Duration> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = *self.idle_since.lock().expect("idle lock");
        Some(now.saturating_duration_since(since))
    }
}

impl Registry {
    fn len(&self) -> usize {
        self.live.len()
    }

    /// Counts one more session for `principal`, unless a limit says no.
    fn reserve(&self, principal: Digest, per_principal: usize, total: usize) -> Result<(), String> {
        let mut counts = self.counts.lock().expect("counts lock");
        if counts.total >= total {
            return Err(format!(
                "too many sessions: this gateway holds {total}, all that limits.max_sessions_total allows; end one (DELETE) or try again later"
            ));
        }
        let held = counts.per_principal.entry(principal).or_default();
        if *held >= per_principal {
            return Err(format!(
                "too many sessions for this principal: it holds {per_principal}, all that limits.max_sessions_per_principal allows; end one (DELETE) or try again later"
            ));
        }
        *held += 1;
        counts.total += 1;
        Ok(())
    }

    fn release(&self, principal: &Digest) {
        let mut counts = self.counts.lock().expect("counts lock");
        counts.total -= 1;
        if let Some(held) = counts.per_principal.get_mut(principal) {
            *held -= 1;
            if *held == 0 {
                counts.per_principal.remove(principal);
            }
        }
    }

    /// Ends the session under `key`, if it still lives: its backend session closes.
    fn end(&self, key: &ParkId) {
        if let Some((_, live)) = self.live.remove(key) {
            self.release(&live.principal);
            live.upstream.close();
        }
    }
}

/// A client's `initialize`, as its face read it.
#[derive(Debug)]
pub struct Initialize {
    pub params: Map<String, Value>,
    pub principal: Digest,
    pub authorization: Option<http::HeaderValue>,
}

impl Bridge {
    /// Opens a legacy client's session with `backend`. The client's version is asked for
    /// upstream if it is a legacy one, else the newest legacy version; the backend's answer,
    /// the version it chose included, is the client's result.
    pub async fn initialize(
        self: &Arc<Self>,
        backend: usize,
        init: Initialize,
    ) -> Result<Opened, ErrorObject> {
        if self.is_draining() {
            return Err(super::shutting_down());
        }
        let limits = &self.config.limits;
        let refused = |why: String| ErrorObject::new(INVALID_REQUEST, why);
        self.sessions_held
            .reserve(
                init.principal,
                limits.max_sessions_per_principal,
                limits.max_sessions_total,
            )
            .map_err(refused)?;
        let principal = init.principal;
        let opened = self.open_session(backend, init).await;
        if opened.is_err() {
            // Reserved above, never registered.
            self.sessions_held.release(&principal);
        }
        opened
    }

    async fn open_session(
        self: &Arc<Self>,
        backend: usize,
        init: Initialize,
    ) -> Result<Opened, ErrorObject> {
        let Initialize {
            mut params,
            principal,
            authorization,
        } = init;
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = asked
            .filter(|v| protocol::is_legacy(v))
            .unwrap_or(LEGACY[0])
            .to_owned();
        params.insert("protocolVersion".into(), Value::from(version.as_str()));
        let capabilities = params.get("capabilities").and_then(Value::as_object);
        let declared = capabilities.map(Declared::from_modern).unwrap_or_default();
        let upstream = self.upstreams[backend].as_ref();
        let era = self.eras[backend].era(upstream, authorization.as_ref(), &self.metrics);
        let (link, result, standalone) = if era.await == Era::Modern {
            let (tx, rx) = mpsc::channel(proxy::DEPTH);
            let client = reverse::Client {
                session: tx,
                principal,
                authorization,
                version,
                capabilities: params.remove("capabilities"),
                client_info: params.remove("clientInfo"),
            };
            let (reverse, result) = Reverse::open(self, backend, client).await?;
            (Link::Reverse(reverse), result, rx)
        } else {
            let (proxied, rx) = self.proxy(backend, params, declared, authorization).await?;
            let result = (*proxied.result).clone();
            (Link::Proxied(proxied), result, rx)
        };
        let key = ParkId::random();
        let claims = SessionClaims {
            session: key,
            owner: self.config.state.owner.clone(),
            owner_addr: self.advertise().map(str::to_owned),
            principal,
            backend: self.config.backends[backend].name.clone(),
            version: link.version().to_owned(),
            capabilities: declared.fingerprint(),
        };
        let ended = link.ended();
        let live = Arc::new(Live {
            key,
            principal,
            upstream: link,
            standalone: Mutex::new(Some(standalone)),
            streams: Default::default(),
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        });
        self.sessions_held.live.insert(key, live);
        self.watch(key, ended);
        tracing::info!(backend = %claims.backend, version = %claims.version, "legacy session opened");
        Ok(Opened {
            session_id: self.keys.seal_session(&claims),
            result,
        })
    }

    /// A backend session of the client's own, initialized with its params; with the receiving
    /// end of the session's own messages.
    async fn proxy(
        &self,
        backend: usize,
        params: Map<String, Value>,
        declared: Declared,
        authorization: Option<http::HeaderValue>,
    ) -> Result<(Proxied, mpsc::Receiver<Value>), ErrorObject> {
        let pool = &self.pools[backend];
        let start = pool.start_of(declared, params.get("clientInfo").cloned(), authorization);
        let (tx, rx) = mpsc::channel(proxy::DEPTH);
        let begin = Proxy {
            params: Value::Object(params),
            session: tx,
            max_asked: self.config.limits.max_input_requests,
        };
        let proxied = pool
            .connect(start, begin)
            .await
            .map_err(|e| super::upstream_error(&e))?;
        Ok((proxied, rx))
    }

    /// Forgets the session once its backend session ends, and starts the sweep of idle
    /// sessions if it is not running yet.
    fn watch(self: &Arc<Self>, key: ParkId, ended: impl Future<Output = ()> + Send + 'static) {
        let bridge = Arc::downgrade(self);
        tokio::spawn(async move {
            ended.await;
            if let Some(bridge) = bridge.upgrade() {
                bridge.sessions_held.end(&key);
            }
        });
        if !self.sessions_held.sweeping.swap(true, Ordering::AcqRel) {
            tokio::spawn(sweep(Arc::downgrade(self), self.config.limits.session_idle));
        }
    }

    /// The session `token` names, if it is one of `principal`'s with `backend` held here; a
    /// session held by another replica is [`Gone`] too (for a request that is not forwarded).
    pub fn session(
        &self,
        backend: usize,
        token: &str,
        principal: &Digest,
    ) -> Result<Arc<Live>, Gone> {
        match self.locate(backend, token, principal) {
            Found::Here(live) => Ok(live),
            Found::Owner { .. } | Found::Gone => Err(Gone),
        }
    }

    /// Where the session `token` names is served, if it is one of `principal`'s with
    /// `backend`: here, or at its owner, another replica this one can reach. The id is opened
    /// once and checked once; every failure is the same [`Found::Gone`].
    pub fn locate(&self, backend: usize, token: &str, principal: &Digest) -> Found {
        let key = match self.held_here(self.keys.open_session(token), backend, principal) {
            Ok(key) => key,
            Err(found) => return found,
        };
        let Some(live) = self.sessions_held.live.get(&key).map(|l| l.clone()) else {
            return Found::Gone;
        };
        if !live.upstream.is_alive() {
            self.sessions_held.end(&key);
            return Found::Gone;
        }
        Found::Here(live)
    }

    /// Where the HTTP+SSE stream `token` names is held, if it is one of `principal`'s with
    /// `backend`: here (under the key returned), or at its owner. Opened once and checked once
    /// like a session id.
    pub fn locate_stream(
        &self,
        backend: usize,
        token: &str,
        principal: &Digest,
    ) -> Result<ParkId, Found> {
        self.held_here(self.keys.open_stream(token), backend, principal)
    }

    /// The one check of an opened session or stream id: `principal`'s, for `backend`, and held
    /// here (its key), or else at its owner, or gone.
    fn held_here(
        &self,
        opened: Result<SessionClaims, crate::seal::Invalid>,
        backend: usize,
        principal: &Digest,
    ) -> Result<ParkId, Found> {
        let Ok(claims) = opened else {
            return Err(Found::Gone);
        };
        let theirs =
            claims.principal == *principal && claims.backend == self.config.backends[backend].name;
        if !theirs {
            return Err(Found::Gone);
        }
        if claims.owner != self.config.state.owner {
            return Err(self.owner_of(claims));
        }
        Ok(claims.session)
    }

    /// The sealed id of an HTTP+SSE stream held here under `key`.
    pub fn stream_id(&self, backend: usize, key: ParkId, principal: Digest) -> String {
        self.keys.seal_stream(&SessionClaims {
            session: key,
            owner: self.config.state.owner.clone(),
            owner_addr: self.advertise().map(str::to_owned),
            principal,
            backend: self.config.backends[backend].name.clone(),
            version: "2024-11-05".into(),
            capabilities: 0,
        })
    }

    /// Another replica's session: its owner, if this replica is part of a fleet and the
    /// sealed address is one the gateway dials (it is only ever read from inside the seal).
    fn owner_of(&self, claims: SessionClaims) -> Found {
        if self.config.fleet.internal_listen.is_none() {
            tracing::info!(owner = %claims.owner, "a legacy session held by another replica, and this one has no internal listener: gone");
            return Found::Gone;
        }
        match claims.owner_addr {
            Some(addr) if crate::config::parse_host_port(&addr).is_some() => Found::Owner {
                owner: claims.owner,
                addr,
            },
            other => {
                tracing::warn!(owner = %claims.owner, addr = ?other, "a legacy session's sealed owner address is unusable: gone");
                Found::Gone
            }
        }
    }

    /// Ends a session at its client's request (DELETE).
    pub fn end_session(&self, live: &Live) {
        self.sessions_held.end(&live.key);
    }

    /// Keeps a face's connection that waits for its session under `key`, until
    /// [`Bridge::forget_waiting`].
    pub fn hold_waiting<T: Any + Send + Sync>(&self, key: ParkId, waiting: Arc<T>) {
        self.sessions_held.waiting.insert(key, waiting);
    }

    /// The connection kept under `key`, if it is a `T`.
    pub fn waiting<T: Any + Send + Sync>(&self, key: &ParkId) -> Option<Arc<T>> {
        let held = self.sessions_held.waiting.get(key)?.clone();
        held.downcast().ok()
    }

    pub fn forget_waiting(&self, key: &ParkId) {
        self.sessions_held.waiting.remove(key);
    }

    /// Legacy client sessions open now.
    pub fn legacy_sessions(&self) -> usize {
        self.sessions_held.len()
    }
}

/// Ends sessions idle for `idle` or longer, checking a few times per `idle`, for as long as
/// the engine lives.
async fn sweep(bridge: Weak<Bridge>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    loop {
        tokio::time::sleep(every).await;
        let Some(bridge) = bridge.upgrade() else {
            return;
        };
        let now = Instant::now();
        let idle_keys: Vec<ParkId> = bridge
            .sessions_held
            .live
            .iter()
            .filter(|e| e.value().idle_for(now).is_some_and(|d| d >= idle))
            .map(|e| *e.key())
            .collect();
        for key in idle_keys {
            tracing::info!("legacy session idle for {idle:?}: ended");
            bridge.sessions_held.end(&key);
        }
    }
}

/// The error a client gets for a response to a request it was never sent.
pub fn unasked(id: &Id) -> ErrorObject {
    ErrorObject::new(
        jsonrpc::INVALID_REQUEST,
        format!("no request of this session with id {id} awaits an answer"),
    )
}

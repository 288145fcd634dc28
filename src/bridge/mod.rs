//! The engine. A client request arrives here validated, and its backend's era picks its path
//! (`Bridge::serve`): to a 2026-07-28 backend it is relayed (`relay`); to a legacy one, plain
//! methods are forwarded on a shared session, and `tools/call`, `prompts/get`,
//! `resources/read` run as calls (`call`) that park when the backend asks for input and resume
//! when the client retries with `requestState`.
//!
//! Every request yields a stream of [`Reply`]: notifications for the current round, then one
//! final outcome. The client's face (`server::mcp`) turns that into JSON or SSE.

mod call;
mod errors;
mod forward;
pub mod park;
mod plain;
mod relay;
mod replay;
mod retry;
mod reverse;
pub mod session;
pub mod streams;
mod tools;

pub(crate) use errors::{backend_error, backend_failed, shutting_down, upstream_error};

use crate::config::{Config, Transport};
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS};
use crate::metrics::Metrics;
use crate::protocol;
use crate::protocol::caps::Declared;
use crate::protocol::meta::RequestMeta;
use crate::protocol::param;
use crate::seal::{self, Digest, KeyRing};
use crate::shard::Shards;
use crate::upstream::era::{self, Era};
use crate::upstream::{self, Pool, PoolKey};
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use crate::wire::Reply;

/// A request that passed the face's checks (`server::mcp`, or `server::internal` for a hop).
#[derive(Debug)]
pub struct Request {
    /// The client's JSON-RPC id; `None` for a forwarded retry. A relayed request goes upstream
    /// under it, so what the backend tags with it (a subscription's events) is the client's.
    pub id: Option<jsonrpc::Id>,
    pub method: String,
    pub params: Map<String, Value>,
    pub meta: RequestMeta,
    pub principal: Digest,
    /// The client's `Authorization` header; reaches a backend only if its policy says `pass`.
    pub authorization: Option<http::HeaderValue>,
    /// The client's `Mcp-Param-*` headers, checked against a `tools/call`'s arguments; never
    /// sent to a backend.
    pub param_headers: param::Headers,
}

/// The one error every requestState failure gets, whatever check failed.
pub fn invalid_state() -> ErrorObject {
    ErrorObject::new(
        INVALID_PARAMS,
        "Invalid requestState: issue the request again without it",
    )
}

/// How long upstream sessions may take to close once the shutdown grace is over: a stdio child
/// gets two seconds after its stdin closes, then is killed.
pub const SESSION_CLOSE: std::time::Duration = std::time::Duration::from_secs(3);

/// Shared state of the engine.
#[derive(Debug)]
pub struct Bridge {
    pub(crate) config: Arc<Config>,
    pub(crate) pools: Vec<Arc<Pool>>,
    /// Each backend's era, fixed by its config or probed once.
    pub(crate) eras: Vec<era::Cache>,
    /// Each Streamable HTTP backend's side of the relay (and of its probe), on its pool's
    /// connections; `None` for backends that are never 2026-07-28.
    pub(crate) upstreams: Vec<Option<upstream::modern::Upstream>>,
    pub(crate) keys: Arc<KeyRing>,
    pub(crate) parks: Arc<park::Registry>,
    pub(crate) tasks: TaskTracker,
    pub(crate) metrics: Arc<Metrics>,
    /// Cancelled first at shutdown: parked calls are abandoned while sessions still run.
    pub(crate) shutdown: CancellationToken,
    /// Cancelled last: upstream sessions and their children stop.
    sessions: CancellationToken,
    /// Set at SIGTERM: new requests are refused, retries of parked calls still served.
    draining: AtomicBool,
    /// Backend tool lists per (backend, principal): the `auto` replay policy and the
    /// `Mcp-Param-*` headers read them.
    pub(crate) tools: tools::Catalogs,
    /// The client of the internal hop, for retries of calls parked on other replicas.
    hop: upstream::h1::Client,
    /// Legacy clients' sessions held by this replica.
    sessions_held: session::Registry,
}

impl Bridge {
    /// An engine whose metrics are registered nowhere.
    pub fn new(config: Arc<Config>) -> Arc<Bridge> {
        Bridge::with_metrics(config, Arc::new(Metrics::unregistered()), &Shards::none())
    }

    /// An engine counting into `metrics`, whose HTTP clients keep a pool for each of `shards`.
    pub fn with_metrics(
        config: Arc<Config>,
        metrics: Arc<Metrics>,
        shards: &Shards,
    ) -> Arc<Bridge> {
        let sessions = CancellationToken::new();
        let rules = upstream::session::Rules {
            static_roots: Arc::new(config.static_roots.clone()),
            held_roots_wait: config.limits.held_roots_wait,
        };
        let pools = config
            .backends
            .iter()
            .map(|b| {
                Pool::new(
                    b.clone(),
                    config.limits.clone(),
                    rules.clone(),
                    sessions.child_token(),
                    metrics.pool(&b.name),
                    shards,
                )
            })
            .collect::<Vec<Arc<Pool>>>();
        let eras = config.backends.iter().map(era::Cache::new).collect();
        let upstreams = relay::upstreams(&config, &pools, &sessions);
        let tools = tools::Catalogs::new(&config.limits);
        Arc::new(Bridge {
            eras,
            upstreams,
            keys: config.state.keys.clone(),
            hop: forward::client(&config, shards),
            config,
            pools,
            parks: Arc::new(park::Registry::default()),
            tasks: TaskTracker::new(),
            metrics,
            shutdown: CancellationToken::new(),
            sessions,
            draining: AtomicBool::new(false),
            tools,
            sessions_held: session::Registry::default(),
        })
    }

    /// Starts draining: from now on only retries (requests carrying a requestState) are
    /// served, so parked calls can finish while new work goes to other replicas.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// True once draining started (readiness should then report not ready).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Where the other replicas reach this one, when it runs as part of a fleet.
    pub(crate) fn advertise(&self) -> Option<&str> {
        self.config.fleet.internal_listen?;
        self.config.fleet.advertise.as_deref()
    }

    /// Stops the engine: parked and running calls are abandoned (backends told), then, once
    /// they are done or `deadline` passed, every upstream session closes, which may take
    /// [`SESSION_CLOSE`] more.
    pub async fn close(&self, deadline: tokio::time::Instant) {
        self.shutdown.cancel();
        self.tasks.close();
        if tokio::time::timeout_at(deadline, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("calls still running after the shutdown grace; closing sessions anyway");
        }
        self.sessions.cancel();
        // Each session writes what it still has, closes its connection and reaps its child
        // (a stdio child gets two seconds after stdin closes, then is killed).
        let closed = futures_util::future::join(
            futures_util::future::join_all(self.pools.iter().map(|p| p.closed())),
            futures_util::future::join_all(self.upstreams.iter().flatten().map(|u| u.closed())),
        );
        let until = deadline.max(tokio::time::Instant::now()) + SESSION_CLOSE;
        if tokio::time::timeout_at(until, closed).await.is_err() {
            tracing::warn!("upstream sessions still closing after the shutdown grace");
        }
    }

    /// Requests being served now, parked calls among them.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Index of the backend serving `path`.
    pub fn route(&self, path: &str) -> Option<usize> {
        self.config.backends.iter().position(|b| b.path == path)
    }

    /// Calls parked now.
    pub fn parked(&self) -> usize {
        self.parks.len()
    }

    pub fn pool(&self, backend: usize) -> &Arc<Pool> {
        &self.pools[backend]
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Brings the gauges that mirror engine state (parked calls, sessions) up to date; called
    /// before each scrape, so nothing has to track them on every change.
    pub fn refresh_gauges(&self) {
        self.metrics.set_parked(self.parked());
        self.metrics.set_legacy_sessions(self.legacy_sessions());
        for pool in &self.pools {
            for (state, n) in pool.session_states() {
                self.metrics.set_sessions(&pool.backend().name, state, n);
            }
        }
    }

    /// Starts serving one request, its work run in `span`; the receiver yields its replies.
    pub fn handle(
        self: &Arc<Self>,
        backend: usize,
        req: Request,
        span: tracing::Span,
    ) -> mpsc::Receiver<Reply> {
        let (tx, rx) = mpsc::channel(16);
        let bridge = self.clone();
        // Chosen here, so the spawned task is the work itself and holds nothing else.
        let task: BoxFuture<'static, ()> =
            if bridge.is_draining() && !req.params.contains_key("requestState") {
                Box::pin(async move {
                    let _ = tx.send(Reply::Done(Err(shutting_down()))).await;
                })
            } else {
                Box::pin(bridge.serve(backend, req, tx))
            };
        self.spawn_work(task, span);
        rx
    }

    /// Serves a request by its backend's era, the one place the path is picked: relayed to a
    /// 2026-07-28 backend, bridged to a legacy one.
    ///
    /// The paths other than a call's are boxed (and the era's probe, in `era::Cache::era`): the
    /// task's future is as large as its largest path, and a parked call's task lives as long as
    /// its park.
    async fn serve(self: Arc<Self>, backend: usize, req: Request, tx: mpsc::Sender<Reply>) {
        let upstream = self.upstreams[backend].as_ref();
        let authorization = req.authorization.as_ref();
        let era = self.eras[backend].era(upstream, authorization, &self.metrics);
        if era.await == Era::Modern {
            return Box::pin(relay::serve(self, backend, req, tx)).await;
        }
        if req.method == protocol::LISTEN {
            let e = ErrorObject::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!("method `{}` is not available", req.method),
            );
            let _ = tx.send(Reply::Done(Err(e))).await;
            return;
        }
        if protocol::is_mrtr_method(&req.method) {
            // A retry takes no session before it reaches its call (or the replica that holds
            // it): its `Mcp-Param-*` headers are checked here, a new call's once it has its
            // session (`issue_new_call`). A retry forwarded from another replica was checked
            // there.
            if req.params.contains_key("requestState")
                && let Err(e) = tools::check_headers(&self, backend, &req, None).await
            {
                let _ = tx.send(Reply::Done(Err(e))).await;
                return;
            }
            return call::serve(self, backend, req, tx, false).await;
        }
        let outcome = Box::pin(self.plain(backend, req)).await;
        let _ = tx.send(Reply::Done(outcome)).await;
    }

    /// Serves a retry forwarded by another replica; it is never forwarded again.
    pub fn handle_hop(self: &Arc<Self>, backend: usize, req: Request) -> mpsc::Receiver<Reply> {
        let (tx, rx) = mpsc::channel(16);
        let work = call::serve(self.clone(), backend, req, tx, true);
        self.spawn_work(work, tracing::Span::current());
        rx
    }

    /// Runs a request's work in its span (the downstream request's), so its logs carry it. It
    /// is a plain task, not an `Inline` one: it hands its replies to the client's connection,
    /// which should run as soon as it is woken, not after this task has polled itself again.
    fn spawn_work(&self, task: BoxFuture<'static, ()>, span: tracing::Span) {
        self.tasks.spawn(task.instrument(span));
    }

    /// Leases a session of `backend` for this request's principal and capability set.
    pub(crate) async fn lease(
        &self,
        backend: usize,
        req: &Request,
        interactive: bool,
    ) -> Result<upstream::Lease, upstream::Error> {
        let declared = Declared::from_modern(&req.meta.capabilities);
        let leased = self.pools[backend]
            .acquire(upstream::pool::Want {
                key: PoolKey {
                    principal: req.principal,
                    fingerprint: declared.fingerprint(),
                },
                declared,
                client_info: req.meta.client_info.as_ref(),
                interactive,
                authorization: req.authorization.as_ref(),
            })
            .await;
        let eras = &self.eras[backend];
        if let Err(e @ upstream::Error::Init { .. }) = &leased {
            // A backend probed as legacy that no longer initializes may have moved on to
            // 2026-07-28: the next call probes it again.
            eras.forget(Era::Legacy, &e.to_string(), &self.metrics);
        } else if matches!(self.config.backends[backend].transport, Transport::Http(_))
            && self.pools[backend].take_lost()
        {
            // So may a Streamable HTTP one that lost a session: a server restarted in another
            // era (a dual-era one among them, which would still answer `initialize`). Not a
            // stdio one: its lost session is a child that died, and a new child of the same
            // command is probed only if it no longer initializes.
            let why = "a session to it was lost";
            eras.forget(Era::Legacy, why, &self.metrics);
        }
        leased
    }

    /// Leases a session and sends the request on it.
    pub(crate) async fn issue(
        &self,
        backend: usize,
        req: &Request,
        interactive: bool,
    ) -> Result<(upstream::Lease, upstream::Call), ErrorObject> {
        self.issue_checked(backend, req, interactive, false).await
    }

    /// Leases a session and sends a client's new call on it, a `tools/call`'s `Mcp-Param-*`
    /// headers checked in between (`tools::check_headers`): a tool list not kept is fetched on
    /// that same session, so a busy backend is waited for once and one that cannot start is
    /// started once.
    pub(crate) async fn issue_new_call(
        &self,
        backend: usize,
        req: &Request,
        interactive: bool,
    ) -> Result<(upstream::Lease, upstream::Call), ErrorObject> {
        self.issue_checked(backend, req, interactive, true).await
    }

    async fn issue_checked(
        &self,
        backend: usize,
        req: &Request,
        interactive: bool,
        check_headers: bool,
    ) -> Result<(upstream::Lease, upstream::Call), ErrorObject> {
        let mut fresh = false;
        loop {
            let lease = self
                .lease(backend, req, interactive)
                .await
                .map_err(|e| upstream_error(&e))?;
            if check_headers {
                tools::check_headers(self, backend, req, Some(lease.session())).await?;
            }
            // Built for each attempt (a second one is rare) rather than copied for it.
            let params = upstream_params(&req.params, &req.meta);
            match lease
                .session()
                .request(&req.method, Some(params), interactive)
                .await
            {
                Ok(call) => return Ok((lease, call)),
                // The session ended between the lease and the request, which never went out.
                Err(_) if !fresh && !lease.session().is_alive() => fresh = true,
                Err(e) => return Err(upstream_error(&e)),
            }
        }
    }

    /// Shapes a backend's outcome as a 2026-07-28 one.
    pub(crate) fn finish(
        &self,
        session: &upstream::Session,
        method: &str,
        retry: bool,
        outcome: Result<jsonrpc::Raw, ErrorObject>,
    ) -> Result<jsonrpc::Payload, ErrorObject> {
        let result = outcome?;
        let backend = session.backend();
        let (ttl, scope);
        let mut set = vec![("resultType", "\"complete\"")];
        if protocol::is_cacheable_method(method) {
            let (t, s) = if retry {
                (0, "private")
            } else {
                (self.config.cache.ttl_ms, self.config.cache.scope)
            };
            (ttl, scope) = (t.to_string(), Value::from(s).to_string());
            set.extend([("ttlMs", ttl.as_str()), ("cacheScope", scope.as_str())]);
        }
        // The backend's result goes out as it wrote it, with these members set, and its
        // serverInfo in `_meta`.
        let text = match &session.info().server_info {
            Some(info) => result.with_members_and_meta(&set, (protocol::meta::SERVER_INFO, info)),
            None => result.with_members(&set),
        }
        .ok_or_else(|| {
            let why = "its result is not a JSON object";
            tracing::warn!(%backend, %method, "{why}");
            backend_failed(backend, "", why)
        })?;
        // The client's connection holds the reply until it is written, however slowly the
        // client reads: past the limit, the call ends here instead.
        let (bytes, limit) = (text.len(), self.config.limits.max_reply_bytes);
        if bytes > limit {
            tracing::warn!(%backend, %method, bytes, limit, "a result over limits.max_reply_bytes");
            return Err(ErrorObject::new(
                jsonrpc::INTERNAL_ERROR,
                format!(
                    "backend `{backend}` returned a result too large to send: {bytes} bytes, \
                     over the limit of {limit} bytes for one reply (limits.max_reply_bytes)"
                ),
            ));
        }
        Ok(jsonrpc::Payload::Text(text))
    }

    /// Digest binding a requestState to its originating request.
    pub fn request_digest(method: &str, params: &Map<String, Value>) -> Digest {
        /// The fields in key order, as a `serde_json` object of them is written (maps are
        /// ordered by key), so the encoding is canonical and stays the one states already
        /// sealed were bound to; an absent field is `null`.
        #[derive(serde::Serialize)]
        struct Salient<'a> {
            arguments: Option<&'a Value>,
            method: &'a str,
            name: Option<&'a Value>,
            uri: Option<&'a Value>,
        }
        seal::digest_json(&Salient {
            arguments: params.get("arguments"),
            method,
            name: params.get("name"),
            uri: params.get("uri"),
        })
    }
}

/// Params for the backend: the client's, without MRTR fields or 2026 `_meta` keys. The progress
/// token, the W3C trace context and keys outside the MCP namespace are carried over in `_meta`.
pub(crate) fn upstream_params(params: &Map<String, Value>, meta: &RequestMeta) -> Value {
    // Copied without what the backend does not get (the client's `_meta` holds its whole
    // capability set).
    let mut p: Map<String, Value> = params
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "inputResponses" | "requestState" | "_meta"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut m = meta.other.clone();
    if let Some(token) = &meta.progress_token {
        m.insert("progressToken".into(), token.clone());
    }
    add_trace(meta, &mut m);
    if !m.is_empty() {
        p.insert("_meta".into(), Value::Object(m));
    }
    Value::Object(p)
}

/// The client's W3C trace context, for the `_meta` of a request the gateway sends the backend
/// on its behalf.
pub(crate) fn add_trace(meta: &RequestMeta, m: &mut Map<String, Value>) {
    if let Some(trace) = &meta.trace {
        m.insert(
            protocol::meta::TRACEPARENT.into(),
            Value::String(trace.traceparent.clone()),
        );
        if let Some(state) = &trace.tracestate {
            m.insert(
                protocol::meta::TRACESTATE.into(),
                Value::String(state.clone()),
            );
        }
    }
}

#[cfg(test)]
mod tests;

//! How a session begins: [`open`] runs `initialize` over a fresh transport (within the
//! backend's deadline, at a legacy version), then hands the transport to the task that owns the
//! session from there on. [`Start`] is everything a new session needs to know; [`InitResults`]
//! lets a backend's sessions share one copy of the `initialize` result they all got.

use super::router::Router;
use super::task::run;
use super::transport::{Inbound, Transport};
use super::{Error, InitInfo, Rules, Session};
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, Message};
use crate::protocol::caps::Declared;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The last `initialize` result of one backend's sessions, with its `serverInfo` as text.
/// Sessions of a backend almost always get the same one, and each parked call keeps a session:
/// they share one copy.
#[derive(Debug, Default, Clone)]
pub struct InitResults {
    last: Arc<std::sync::Mutex<Option<Shared>>>,
    /// Whether results carry the backend's `serverInfo` (the backend's `server_info`).
    server_info: bool,
}

type Shared = (Arc<Value>, Option<Arc<str>>);

impl InitResults {
    pub fn new(server_info: bool) -> InitResults {
        InitResults {
            last: Default::default(),
            server_info,
        }
    }

    pub(super) fn share(&self, result: Value) -> Shared {
        let mut last = self.last.lock().expect("init results lock");
        if let Some(known) = last.as_ref().filter(|(known, _)| **known == result) {
            return known.clone();
        }
        // An `Implementation`: at least a name and a version, both strings.
        let server_info = result
            .get("serverInfo")
            .filter(|info| self.server_info && info["name"].is_string())
            .filter(|info| info["version"].is_string())
            .map(|info| Arc::from(info.to_string()));
        let shared = (Arc::new(result), server_info);
        *last = Some(shared.clone());
        shared
    }
}

static SESSION_IDS: AtomicU64 = AtomicU64::new(1);

/// Everything a new session needs to know.
#[derive(Debug, Clone)]
pub struct Start {
    pub backend: String,
    pub protocol_version: &'static str,
    pub declared: Declared,
    pub client_info: Option<Value>,
    pub max_message_bytes: usize,
    pub max_json_depth: usize,
    /// The most `roots/list` requests outside any call held at once (`limits.max_input_requests`).
    pub max_held_roots: usize,
    pub init_timeout: Duration,
    pub rules: Rules,
    /// The client's `Authorization` header, when the backend's policy passes it upstream.
    pub authorization: Option<http::HeaderValue>,
    /// Owns the session task, so shutdown can wait until every session has closed.
    pub tasks: tokio_util::task::TaskTracker,
    pub init_results: InitResults,
    /// Set when a session sees signs that its backend restarted (its standalone stream broke);
    /// shared by the pool's sessions, read by [`crate::upstream::Pool::take_lost`].
    pub restarted: Arc<AtomicBool>,
}

impl Start {
    /// The `initialize` params of a pooled session: the version and capabilities [`Start`]
    /// names, and the client's info (or the gateway's).
    fn initialize_params(&self) -> Value {
        json!({
            "protocolVersion": self.protocol_version,
            "capabilities": self.declared.to_legacy(self.protocol_version),
            "clientInfo": self.client_info.clone().unwrap_or_else(|| json!({"name": "mrtr-gateway", "version": env!("CARGO_PKG_VERSION")})),
        })
    }

    /// The session could not be initialized, for `reason`.
    fn init_error(&self, reason: String) -> Error {
        Error::Init {
            backend: self.backend.clone(),
            reason,
        }
    }
}

/// What a connected transport becomes once `initialize` is through: a session of the
/// bridge's pool ([`Pooled`]), or a legacy client's own session proxied
/// ([`super::proxy::Proxy`]).
pub(crate) trait Begin: Send + 'static {
    type Output: Send + 'static;
    fn begin<T, F>(
        self,
        transport: T,
        start: Start,
        shutdown: CancellationToken,
        on_exit: F,
    ) -> BoxFuture<'static, Result<Self::Output, Error>>
    where
        T: Transport,
        F: Future<Output = ()> + Send + 'static;
}

/// A session of the bridge's pool, initialized with what [`Start`] declares.
pub(crate) struct Pooled;

impl Begin for Pooled {
    type Output = Session;

    fn begin<T, F>(
        self,
        transport: T,
        start: Start,
        shutdown: CancellationToken,
        on_exit: F,
    ) -> BoxFuture<'static, Result<Session, Error>>
    where
        T: Transport,
        F: Future<Output = ()> + Send + 'static,
    {
        Box::pin(open(transport, start, shutdown, on_exit))
    }
}

/// Runs `initialize` over `transport` and starts the task that owns the session; `on_exit` runs
/// once the task has closed the transport (the stdio child is reaped there).
pub(crate) async fn open<T, F>(
    transport: T,
    start: Start,
    shutdown: CancellationToken,
    on_exit: F,
) -> Result<Session, Error>
where
    T: Transport,
    F: Future<Output = ()> + Send + 'static,
{
    let params = start.initialize_params();
    let (transport, on_exit, version, result) =
        initialized(transport, &start, params, on_exit).await?;
    Ok(launch(transport, start, shutdown, on_exit, version, result))
}

/// `initialize` with `params` over `transport`; on failure the transport is closed and
/// `on_exit` run before the error returns.
pub(super) async fn initialized<T, F>(
    mut transport: T,
    start: &Start,
    params: Value,
    on_exit: F,
) -> Result<(T, F, String, Value), Error>
where
    T: Transport,
    F: Future<Output = ()> + Send + 'static,
{
    match initialize(&mut transport, start, params).await {
        Ok((version, result)) => Ok((transport, on_exit, version, result)),
        Err(e) => {
            transport.close().await;
            on_exit.await;
            Err(e)
        }
    }
}

/// The handshake: `initialize` answered in time at a legacy version, then
/// `notifications/initialized` sent. Returns the version and the result.
async fn initialize<T: Transport>(
    transport: &mut T,
    start: &Start,
    params: Value,
) -> Result<(String, Value), Error> {
    let outcome =
        tokio::time::timeout(start.init_timeout, handshake(transport, start, params)).await;
    let Ok(result) = outcome else {
        return Err(start.init_error("no initialize result in time".into()));
    };
    let result = result?;
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !crate::protocol::is_legacy(&version) {
        return Err(start.init_error(format!("unsupported protocol version `{version}`")));
    }
    transport.ready(&version);
    let initialized = Message::Notification {
        method: "notifications/initialized".into(),
        params: None,
    };
    let sent = transport.send(initialized.into_value()).await;
    sent.map_err(|e| start.init_error(e))?;
    Ok((version, result))
}

/// Sends `initialize` and waits for its result, refusing the backend's requests meanwhile.
async fn handshake<T: Transport>(
    transport: &mut T,
    start: &Start,
    params: Value,
) -> Result<Value, Error> {
    let init_error = |reason: String| start.init_error(reason);
    let init = Message::Request {
        id: Id::Number(0),
        method: "initialize".into(),
        params: Some(params),
    };
    transport
        .send(init.into_value())
        .await
        .map_err(init_error)?;
    loop {
        match transport.recv().await {
            Inbound::Message(Message::Response {
                id: Id::Number(0),
                outcome,
            }) => {
                return outcome
                    .map_err(|e| init_error(format!("error {}: {}", e.code, e.message)))?
                    .to_value()
                    .map_err(|e| init_error(e.to_string()));
            }
            Inbound::Message(Message::Request { id, .. }) => {
                // Requests before the handshake ends (e.g. ping) get an error; none is a call's.
                let resp = crate::jsonrpc::response(
                    Some(&id),
                    Err(ErrorObject::new(INTERNAL_ERROR, "not initialized")),
                );
                transport.send(resp).await.map_err(init_error)?;
            }
            Inbound::Message(_) => {}
            Inbound::Failed { reason, .. } | Inbound::Ended { reason, .. } => {
                return Err(init_error(reason));
            }
        }
    }
}

/// Makes the session's handle and spawns the task that owns it from here on.
fn launch<T, F>(
    transport: T,
    start: Start,
    shutdown: CancellationToken,
    on_exit: F,
    version: String,
    result: Value,
) -> Session
where
    T: Transport,
    F: Future<Output = ()> + Send + 'static,
{
    // What the backend was told (at the version asked for) and what the version it chose can
    // carry: a backend may answer with a later version than the one asked for.
    let declared = start
        .declared
        .at_version(start.protocol_version)
        .at_version(&version);
    let (result, server_info) = start.init_results.share(result);
    let info = InitInfo {
        protocol_version: version,
        result,
        server_info,
        declared,
    };
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let alive = Arc::new(AtomicBool::new(true));
    let id = SESSION_IDS.fetch_add(1, Ordering::Relaxed);
    let direct = transport.direct();
    let session = Session::new(
        id,
        start.backend.clone(),
        cmd_tx,
        start.init_timeout,
        info,
        alive.clone(),
        direct,
    );
    let router = Router::new(
        start.backend.clone(),
        declared,
        start.rules.clone(),
        start.max_held_roots,
    );
    // Chained, not awaited inside a block: the task then holds the running session once, not
    // also a moved-from copy of it (or of its inputs).
    let fut = run(transport, cmd_rx, router, shutdown, alive).then(|transport| async move {
        Box::pin(transport.close()).await;
        on_exit.await;
    });
    start.tasks.spawn(fut);
    session
}

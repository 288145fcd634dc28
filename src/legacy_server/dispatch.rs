//! The reader loop: framing, classification of incoming messages, the lifecycle, per-request
//! tasks, cancellation and method routing.
//!
//! The reader never waits on a handler. `initialize` and `ping` are answered inline (the
//! former must take effect before the next line is read); every other request runs in its own
//! task so that a tool blocked on the client's answer cannot stop that answer from being read.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use super::session::{Ctx, InFlight, Shared, lock};
use super::wire::{
    self, Direction, INVALID_REQUEST, METHOD_NOT_FOUND, MessageLog, PARSE_ERROR, RpcError, Sink,
};
use super::{
    CrashRequested, LATEST_PROTOCOL_VERSION, Options, SUPPORTED_PROTOCOL_VERSIONS, asks, catalog,
    tools,
};

/// How long teardown waits for queued output to drain before giving up on the writer.
const WRITER_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) async fn run<R, S>(input: R, output: S, opts: Options) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    S: Sink,
{
    let log = MessageLog::open_if(opts.log.as_deref())?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut writer = tokio::spawn(wire::write_loop(output, rx, log.clone()));
    let mut conn = Connection {
        shared: Arc::new(Shared::new(opts, tx)),
        tasks: JoinSet::new(),
        log,
        next_generation: 0,
    };

    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    let mut writer_done = false;
    let outcome = loop {
        tokio::select! {
            read = reader.read_until(b'\n', &mut line) => match read {
                Ok(0) => break Ok(()),
                Ok(_) => {
                    conn.on_line(&line);
                    line.clear();
                }
                Err(err) => break Err(err),
            },
            () = conn.shared.crash.notified() => break Err(io::Error::other(CrashRequested)),
            finished = &mut writer => {
                writer_done = true;
                break Err(match finished {
                    Ok(Err(err)) => err,
                    Ok(Ok(())) => io::Error::new(io::ErrorKind::BrokenPipe, "output closed"),
                    Err(join) => io::Error::other(join),
                });
            }
            // Reap finished handlers so the set does not grow for the whole session.
            Some(_) = conn.tasks.join_next(), if !conn.tasks.is_empty() => {}
        }
    };
    conn.shared.begin_close();
    conn.tasks.shutdown().await;
    if !writer_done {
        finish_writer(&conn.shared, writer).await;
    }
    if let Err(err) = &outcome {
        tracing::info!(%err, "legacy session ended");
    }
    outcome
}

/// Lets the writer flush what handlers queued before the end, then shuts the output down.
async fn finish_writer(shared: &Shared, writer: JoinHandle<io::Result<()>>) {
    let (ack, acked) = oneshot::channel();
    shared.shutdown_writer(ack);
    if tokio::time::timeout(WRITER_DRAIN_TIMEOUT, acked)
        .await
        .is_err()
    {
        tracing::warn!("output did not drain; dropping it");
        writer.abort();
    }
    if let Ok(Err(err)) = writer.await {
        tracing::debug!(%err, "writer failed during shutdown");
    }
}

/// Where the response to a request goes: straight to the writer, or into the array that
/// answers the batch it arrived in.
enum Reply {
    Direct,
    Batch(oneshot::Sender<Value>),
}

impl Reply {
    fn deliver(self, shared: &Shared, msg: Value) {
        match self {
            Self::Direct => shared.send(msg),
            Self::Batch(tx) => {
                let _ = tx.send(msg);
            }
        }
    }
}

struct Connection {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    log: Option<Arc<MessageLog>>,
    next_generation: u64,
}

/// Map key for a request id; ids are strings or numbers and `"1"` differs from `1`.
fn id_key(id: &Value) -> String {
    id.to_string()
}

fn invalid(message: &str) -> Value {
    wire::response(Value::Null, Err(RpcError::new(INVALID_REQUEST, message)))
}

impl Connection {
    fn on_line(&mut self, raw: &[u8]) {
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let msg = match serde_json::from_str::<Value>(text) {
            Ok(msg) => msg,
            Err(err) => {
                tracing::warn!(%err, "unparseable line");
                self.record_in(&Value::String(text.to_owned()));
                let error = RpcError::new(PARSE_ERROR, format!("Parse error: {err}"));
                self.shared.send(wire::response(Value::Null, Err(error)));
                return;
            }
        };
        self.record_in(&msg);
        match msg {
            Value::Array(items) => self.on_batch(items),
            msg => self.on_message(msg, Reply::Direct),
        }
    }

    fn record_in(&self, msg: &Value) {
        if let Some(log) = &self.log {
            log.record(Direction::In, msg);
        }
    }

    /// Batches (a 2025-03-26 feature) are answered with one array holding the responses to
    /// their requests, sent once all of them are done; cancelled members are left out.
    fn on_batch(&mut self, items: Vec<Value>) {
        if items.is_empty() {
            self.shared.send(invalid("empty batch"));
            return;
        }
        let mut answers = Vec::with_capacity(items.len());
        for item in items {
            let (tx, rx) = oneshot::channel();
            answers.push(rx);
            self.on_message(item, Reply::Batch(tx));
        }
        let shared = Arc::clone(&self.shared);
        self.tasks.spawn(async move {
            let mut responses = Vec::new();
            for answer in answers {
                if let Ok(response) = answer.await {
                    responses.push(response);
                }
            }
            if !responses.is_empty() {
                shared.send(Value::Array(responses));
            }
        });
    }

    fn on_message(&mut self, msg: Value, reply: Reply) {
        let Value::Object(mut obj) = msg else {
            reply.deliver(&self.shared, invalid("a message must be a JSON object"));
            return;
        };
        let id = obj.remove("id");
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let id = id.filter(is_valid_id).unwrap_or(Value::Null);
            let error = RpcError::new(INVALID_REQUEST, "`jsonrpc` must be \"2.0\"");
            reply.deliver(&self.shared, wire::response(id, Err(error)));
            return;
        }
        let params = obj.remove("params").unwrap_or(Value::Null);
        match (obj.remove("method"), id) {
            (Some(Value::String(method)), None) => self.on_notification(&method, &params),
            (Some(Value::String(method)), Some(id)) if is_valid_id(&id) => {
                self.on_request(id, method, params, reply);
            }
            (Some(_), id) => {
                let id = id.filter(is_valid_id).unwrap_or(Value::Null);
                let error = RpcError::new(INVALID_REQUEST, "bad `method` or `id`");
                reply.deliver(&self.shared, wire::response(id, Err(error)));
            }
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                self.on_response(&id, obj.remove("result"), obj.remove("error"));
            }
            (None, _) => reply.deliver(&self.shared, invalid("neither a request nor a response")),
        }
    }

    fn on_response(&self, id: &Value, result: Option<Value>, error: Option<Value>) {
        let outcome = match error {
            Some(error) => Err(RpcError::from_client(&error)),
            None => Ok(result.unwrap_or(Value::Null)),
        };
        let delivered = id.as_i64().is_some_and(|n| self.shared.resolve(n, outcome));
        if !delivered {
            tracing::warn!(%id, "response to no pending request; ignored");
        }
    }

    fn on_notification(&mut self, method: &str, params: &Value) {
        match method {
            "notifications/initialized" => {
                let first = {
                    let mut session = self.shared.session();
                    if session.protocol_version.is_none() {
                        tracing::warn!("notifications/initialized before initialize; ignored");
                        return;
                    }
                    !std::mem::replace(&mut session.initialized_notified, true)
                };
                if first && self.shared.opts.roots_on_init {
                    self.refresh_cached_roots();
                }
            }
            "notifications/cancelled" => {
                let Some(request_id) = params.get("requestId") else {
                    tracing::warn!("notifications/cancelled without requestId; ignored");
                    return;
                };
                let reason = params.get("reason").and_then(Value::as_str).unwrap_or("");
                match lock(&self.shared.inflight).remove(&id_key(request_id)) {
                    Some(inflight) => {
                        inflight.abort.abort();
                        tracing::info!(%request_id, reason, "request cancelled by the client");
                    }
                    None => tracing::info!(
                        %request_id,
                        reason,
                        "cancellation for a request not in flight; ignored"
                    ),
                }
            }
            "notifications/roots/list_changed" => {
                if self.shared.opts.roots_on_init {
                    self.refresh_cached_roots();
                }
            }
            other => tracing::debug!(method = other, "notification ignored"),
        }
    }

    /// Fetches the client's roots into the session cache reported by `list_roots`.
    fn refresh_cached_roots(&mut self) {
        let ctx = Ctx::new(Arc::clone(&self.shared), None, None);
        self.tasks.spawn(async move {
            match asks::list_roots(&ctx).await {
                Ok(roots) => ctx.shared.session().cached_roots = Some(roots),
                Err(err) => tracing::warn!(%err, "could not fetch roots"),
            }
        });
    }

    fn on_request(&mut self, id: Value, method: String, params: Value, reply: Reply) {
        let initialized = self.shared.session().protocol_version.is_some();
        match method.as_str() {
            "initialize" => {
                let outcome = self.initialize(&params);
                reply.deliver(&self.shared, wire::response(id, outcome));
                return;
            }
            // Ping is allowed at any time, including before initialization.
            "ping" => {
                reply.deliver(&self.shared, wire::response(id, Ok(json!({}))));
                return;
            }
            _ if !initialized => {
                let error = RpcError::new(
                    INVALID_REQUEST,
                    format!("session not initialized: send initialize before {method}"),
                );
                reply.deliver(&self.shared, wire::response(id, Err(error)));
                return;
            }
            _ => {}
        }

        let key = id_key(&id);
        let mut inflight = lock(&self.shared.inflight);
        if inflight.contains_key(&key) {
            drop(inflight);
            let error = RpcError::new(
                INVALID_REQUEST,
                format!("request id {key} is already in use"),
            );
            reply.deliver(&self.shared, wire::response(id, Err(error)));
            return;
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        let progress_token = params.pointer("/_meta/progressToken").cloned();
        let ctx = Ctx::new(Arc::clone(&self.shared), Some(id.clone()), progress_token);
        let task_key = key.clone();
        // The registry lock is held across the spawn so the task cannot finish and
        // unregister itself before it has been registered.
        let abort = self.tasks.spawn(async move {
            let outcome = route(&ctx, &method, &params).await;
            let shared = &ctx.shared;
            {
                let mut inflight = lock(&shared.inflight);
                if inflight
                    .get(&task_key)
                    .is_some_and(|f| f.generation == generation)
                {
                    inflight.remove(&task_key);
                }
            }
            reply.deliver(shared, wire::response(id, outcome));
        });
        inflight.insert(key, InFlight { generation, abort });
    }

    fn initialize(&self, params: &Value) -> Result<Value, RpcError> {
        let mut session = self.shared.session();
        if session.protocol_version.is_some() {
            return Err(RpcError::new(INVALID_REQUEST, "already initialized"));
        }
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                RpcError::invalid_params("initialize needs a `protocolVersion` string")
            })?;
        let version = match &self.shared.opts.protocol {
            Some(pinned) => pinned.clone(),
            None if SUPPORTED_PROTOCOL_VERSIONS.contains(&requested) => requested.to_owned(),
            None => LATEST_PROTOCOL_VERSION.to_owned(),
        };
        session.client_capabilities = params.get("capabilities").cloned().unwrap_or(json!({}));
        session.client_info = params.get("clientInfo").cloned().unwrap_or(Value::Null);
        session.protocol_version = Some(version.clone());
        tracing::info!(requested, negotiated = %version, client = %session.client_info, "initialized");
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {"tools": {}, "prompts": {}, "resources": {}, "logging": {}},
            "serverInfo": {"name": "mrtr-legacy-demo", "version": env!("CARGO_PKG_VERSION")},
            "instructions": "A demo server whose tools ask the client for input, samples and roots while they run.",
        }))
    }
}

fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.is_number()
}

/// Handles every request that runs in its own task.
async fn route(ctx: &Ctx, method: &str, params: &Value) -> Result<Value, RpcError> {
    match method {
        "tools/list" => Ok(tools::list(ctx)),
        "tools/call" => tools::call(ctx, params).await,
        "prompts/list" => Ok(catalog::list_prompts()),
        "prompts/get" => catalog::get_prompt(ctx, params).await,
        "resources/list" => Ok(catalog::list_resources()),
        "resources/templates/list" => Ok(catalog::list_resource_templates()),
        "resources/read" => catalog::read_resource(ctx, params).await,
        "logging/setLevel" => {
            let level = params.get("level").and_then(Value::as_str);
            let level = level
                .ok_or_else(|| RpcError::invalid_params("logging/setLevel needs a `level`"))?;
            tracing::debug!(level, "client set the log level");
            Ok(json!({}))
        }
        _ => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )),
    }
}

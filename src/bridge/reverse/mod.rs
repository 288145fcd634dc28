//! The reverse bridge: a legacy client's session with a 2026-07-28 backend. The backend is
//! stateless, so the session is the gateway's: `initialize` is answered from the backend's
//! `server/discover`, and each request goes upstream on its own with `_meta` built from the
//! session (protocol version, the client's capabilities and info, its log level). An
//! `InputRequiredResult` becomes real requests to the client, on the stream of the request
//! they belong to; once all are answered the request goes upstream again with
//! `inputResponses` and the backend's `requestState`, round after round, until its result is
//! complete. The backend's state never leaves the gateway.
//!
//! What the client may answer is what was asked of it: each request sent to the client has an
//! id of this session's own sequence, and a response to any other id is refused.

mod listen;

use super::relay::exchange;
use super::{Bridge, Reply, Request};
use crate::jsonrpc::{self, ErrorObject, INTERNAL_ERROR, Id, Message};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use crate::protocol::meta::{self, RequestMeta};
use crate::protocol::{MODERN, param};
use crate::seal::Digest;
use crate::upstream::session::proxy::{self, Outbound, Refused};
use listen::Listening;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Rounds one request may take before the gateway gives up on it: a backend that asks for
/// input forever is not served forever.
const MAX_ROUNDS: usize = 32;

/// What a reverse-bridged session knows of its client, and what is in flight.
#[derive(Debug)]
pub struct Reverse {
    bridge: Weak<Bridge>,
    backend: usize,
    principal: Digest,
    authorization: Option<http::HeaderValue>,
    /// The negotiated legacy version.
    pub version: String,
    /// The client's capabilities, as 2026-07-28 says them.
    capabilities: Map<String, Value>,
    client_info: Option<Value>,
    log_level: Mutex<Option<String>>,
    /// The requests sent to the client, by id, and who waits for each answer.
    asked: Mutex<HashMap<Id, oneshot::Sender<Result<Value, ErrorObject>>>>,
    next_ask: AtomicU64,
    /// The client's requests in flight, by its ids: cancelled by `notifications/cancelled`.
    inflight: Mutex<HashMap<Id, CancellationToken>>,
    /// The session's own stream (the client's GET stream): list changes and resource updates.
    session: Outbound,
    /// What the upstream `subscriptions/listen` asks for, and the task that holds it open.
    listen: Mutex<Listening>,
    /// The most input requests one round may ask of the client (`limits.max_input_requests`).
    max_asked: usize,
    /// How long the client may take to answer a request of the backend (`state.park_ttl`, as
    /// long as a parked call waits for its retry).
    answer_wait: std::time::Duration,
    stop: CancellationToken,
}

/// A client's session details the reverse bridge starts from.
#[derive(Debug)]
pub struct Client {
    /// Where the session's own messages go (the client's GET stream).
    pub session: Outbound,
    pub principal: Digest,
    pub authorization: Option<http::HeaderValue>,
    pub version: String,
    /// The `initialize` params' `capabilities` and `clientInfo`.
    pub capabilities: Option<Value>,
    pub client_info: Option<Value>,
}

/// The client's legacy capabilities as 2026-07-28 declares them: roots carry no `listChanged`.
fn modern_capabilities(legacy: Option<Value>) -> Map<String, Value> {
    let mut caps = match legacy {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    if caps.contains_key("roots") {
        caps.insert("roots".into(), json!({}));
    }
    caps
}

impl Reverse {
    /// Opens the session: asks the backend's `server/discover` and answers `initialize` from
    /// it in the legacy shape.
    pub async fn open(
        bridge: &Arc<Bridge>,
        backend: usize,
        client: Client,
    ) -> Result<(Arc<Reverse>, Value), ErrorObject> {
        let reverse = Arc::new(Reverse {
            bridge: Arc::downgrade(bridge),
            backend,
            principal: client.principal,
            authorization: client.authorization,
            version: client.version,
            capabilities: modern_capabilities(client.capabilities),
            client_info: client.client_info,
            log_level: Mutex::default(),
            asked: Mutex::default(),
            next_ask: AtomicU64::new(1),
            inflight: Mutex::default(),
            session: client.session,
            listen: Mutex::default(),
            max_asked: bridge.config.limits.max_input_requests,
            answer_wait: bridge.config.state.park_ttl,
            stop: CancellationToken::new(),
        });
        let id = Id::String("initialize".into());
        let (tx, _rx) = mpsc::channel(16);
        let req = reverse.upstream_request(&id, "server/discover", Map::new())?;
        let (raw, _) = exchange(bridge, backend, &req, None, &tx).await?;
        let discovered = raw
            .to_value()
            .map_err(|e| ErrorObject::new(INTERNAL_ERROR, e.to_string()))?;
        let mut result = Map::new();
        result.insert("protocolVersion".into(), json!(reverse.version));
        for key in ["capabilities", "instructions"] {
            if let Some(v) = discovered.get(key) {
                result.insert(key.into(), v.clone());
            }
        }
        result.entry("capabilities").or_insert_with(|| json!({}));
        // 2026-07-28 says who the server is in the result's `_meta`; a legacy client must be
        // told in `serverInfo`, which it requires.
        let info = discovered
            .get("_meta")
            .and_then(|m| m.get(meta::SERVER_INFO))
            .or_else(|| discovered.get("serverInfo"))
            .filter(|info| info["name"].is_string())
            .cloned()
            .unwrap_or_else(
                || json!({"name": bridge.config.backends[backend].name, "version": "unknown"}),
            );
        result.insert("serverInfo".into(), info);
        let changes = &result["capabilities"];
        let list_changed = |what: &str| changes[what]["listChanged"] == true;
        {
            let mut listen = reverse.lock_listen();
            listen.tools = list_changed("tools");
            listen.prompts = list_changed("prompts");
            listen.resources = list_changed("resources");
        }
        reverse.relisten();
        Ok((reverse, Value::Object(result)))
    }

    pub fn ended(&self) -> WaitForCancellationFutureOwned {
        self.stop.clone().cancelled_owned()
    }

    pub fn is_alive(&self) -> bool {
        !self.stop.is_cancelled()
    }

    pub fn close(&self) {
        self.stop.cancel();
    }

    /// Serves the client's request `id`; everything about it comes on the returned stream, the
    /// response last.
    pub fn request(
        self: &Arc<Self>,
        id: Id,
        method: String,
        params: Option<Value>,
    ) -> mpsc::Receiver<Value> {
        let (answer, rx) = mpsc::channel(proxy::DEPTH);
        let params = match params {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let local = match method.as_str() {
            "ping" => Some(Ok(json!({}))),
            "logging/setLevel" => Some(self.set_level(&params)),
            "resources/subscribe" => Some(self.subscribe(&params, true)),
            "resources/unsubscribe" => Some(self.subscribe(&params, false)),
            _ => None,
        };
        if let Some(outcome) = local {
            let response = jsonrpc::response(Some(&id), outcome);
            let _ = answer.try_send(response);
            return rx;
        }
        let cancel = self.stop.child_token();
        self.lock_inflight().insert(id.clone(), cancel.clone());
        let reverse = self.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                outcome = reverse.rounds(&id, &method, params, &answer) => outcome,
                () = cancel.cancelled() => Err(ErrorObject::new(INTERNAL_ERROR, "cancelled")),
                // The client closed its stream: the request ends, upstream too.
                () = answer.closed() => Err(ErrorObject::new(INTERNAL_ERROR, "the client left")),
            };
            reverse.lock_inflight().remove(&id);
            // Requests to the client this one left unanswered are not answerable any more.
            reverse
                .asked
                .lock()
                .expect("asked lock")
                .retain(|_, waiter| !waiter.is_closed());
            let outcome = outcome.map(complete);
            let _ = answer.send(jsonrpc::response(Some(&id), outcome)).await;
        });
        rx
    }

    /// Takes the client's notification or response.
    pub fn send(&self, msg: Message) -> Result<(), Refused> {
        match msg {
            Message::Response { id, outcome } => {
                let waiter = self.asked.lock().expect("asked lock").remove(&id);
                let Some(waiter) = waiter else {
                    return Err(Refused::Unasked(id));
                };
                let outcome = outcome.and_then(|raw| {
                    raw.to_value()
                        .map_err(|e| ErrorObject::new(INTERNAL_ERROR, e.to_string()))
                });
                let _ = waiter.send(outcome);
                Ok(())
            }
            Message::Notification { method, params } if method == "notifications/cancelled" => {
                let id = params
                    .and_then(|p| serde_json::from_value::<Id>(p.get("requestId")?.clone()).ok());
                if let Some(cancel) = id.and_then(|id| self.lock_inflight().remove(&id)) {
                    cancel.cancel();
                }
                Ok(())
            }
            // Nothing else a legacy client says has a 2026-07-28 counterpart.
            _ => Ok(()),
        }
    }

    fn lock_inflight(&self) -> std::sync::MutexGuard<'_, HashMap<Id, CancellationToken>> {
        self.inflight.lock().expect("inflight lock")
    }

    fn set_level(&self, params: &Map<String, Value>) -> Result<Value, ErrorObject> {
        let level = params.get("level").and_then(Value::as_str);
        let Some(level) = level.filter(|l| meta::severity(l).is_some()) else {
            return Err(ErrorObject::new(
                jsonrpc::INVALID_PARAMS,
                "unknown log level",
            ));
        };
        *self.log_level.lock().expect("level lock") = Some(level.to_owned());
        Ok(json!({}))
    }

    /// The request as a 2026-07-28 client would send it: the client's params, `_meta` with
    /// the session's version, capabilities, info and log level (the client's own members, its
    /// progress token among them, kept).
    fn upstream_request(
        &self,
        id: &Id,
        method: &str,
        mut params: Map<String, Value>,
    ) -> Result<Request, ErrorObject> {
        let mut meta = match params.remove("_meta") {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        meta.insert(meta::PROTOCOL_VERSION.into(), json!(MODERN));
        meta.insert(
            meta::CLIENT_CAPABILITIES.into(),
            Value::Object(self.capabilities.clone()),
        );
        if let Some(info) = &self.client_info {
            meta.insert(meta::CLIENT_INFO.into(), info.clone());
        }
        if let Some(level) = self.log_level.lock().expect("level lock").clone() {
            meta.insert(meta::LOG_LEVEL.into(), json!(level));
        }
        params.insert("_meta".into(), Value::Object(meta));
        let wrapped = Value::Object(params);
        let meta = RequestMeta::from_params(Some(&wrapped))
            .map_err(|e| ErrorObject::new(INTERNAL_ERROR, e.to_string()))?;
        let Value::Object(params) = wrapped else {
            unreachable!("built as an object")
        };
        Ok(Request {
            id: Some(id.clone()),
            method: method.to_owned(),
            params,
            meta,
            principal: self.principal,
            authorization: self.authorization.clone(),
            param_headers: param::Headers::default(),
        })
    }

    /// The rounds of one request, until the backend's result is complete.
    async fn rounds(
        &self,
        id: &Id,
        method: &str,
        params: Map<String, Value>,
        answer: &Outbound,
    ) -> Result<Value, ErrorObject> {
        let bridge = self.bridge.upgrade().ok_or_else(super::shutting_down)?;
        let mut params = params;
        let mut child = None;
        let mut urls = Vec::new();
        for _ in 0..MAX_ROUNDS {
            let req = self.upstream_request(id, method, params.clone())?;
            let (raw, answered_by) = self
                .exchange(&bridge, &req, child, Notes::Answer(answer))
                .await?;
            child = answered_by;
            let result = raw
                .to_value()
                .map_err(|e| ErrorObject::new(INTERNAL_ERROR, e.to_string()))?;
            for elicitation in urls.drain(..) {
                let done = json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                    "params": {"elicitationId": elicitation}});
                let _ = answer.send(done).await;
            }
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(result);
            }
            let (responses, asked_urls) = self.ask(&result, answer).await?;
            urls = asked_urls;
            params.insert("inputResponses".into(), Value::Object(responses));
            match result.get("requestState") {
                Some(state) => params.insert("requestState".into(), state.clone()),
                None => params.remove("requestState"),
            };
        }
        Err(ErrorObject::new(
            INTERNAL_ERROR,
            format!("the backend asked for input more than {MAX_ROUNDS} times in one request"),
        ))
    }

    /// One exchange upstream (a round, or the session's listen), its notifications passed to
    /// the client as they come, to `notes`.
    async fn exchange(
        &self,
        bridge: &Bridge,
        req: &Request,
        child: Option<u32>,
        notes: Notes<'_>,
    ) -> Result<(jsonrpc::Raw, Option<u32>), ErrorObject> {
        let (tx, mut rx) = mpsc::channel(16);
        let exchanged = exchange(bridge, self.backend, req, child, &tx);
        tokio::pin!(exchanged);
        loop {
            tokio::select! {
                outcome = &mut exchanged => {
                    while let Ok(Reply::Notification(note)) = rx.try_recv() {
                        self.pass(&notes, note).await;
                    }
                    return outcome;
                }
                Some(reply) = rx.recv() => {
                    if let Reply::Notification(note) = reply {
                        self.pass(&notes, note).await;
                    }
                }
            }
        }
    }

    /// Passes one notification of the backend to the client.
    async fn pass(&self, notes: &Notes<'_>, note: Value) {
        match notes {
            Notes::Answer(answer) => {
                let _ = answer.send(note).await;
            }
            Notes::Session => {
                if let Some(event) = listen::legacy_event(note) {
                    // Nobody may be reading the session's stream: what does not fit is
                    // dropped, as a legacy server drops what it cannot deliver.
                    let _ = self.session.try_send(event);
                }
            }
        }
    }

    /// A legacy client is never sent a request it did not declare it can take: the request
    /// fails with -32021 naming what it lacks, as a 2026-07-28 server says it.
    fn check_declared(&self, method: &str, params: &Value) -> Result<(), ErrorObject> {
        let Some(kind) = Kind::from_method(method) else {
            return Err(ErrorObject::new(
                INTERNAL_ERROR,
                format!("the backend asked for `{method}`, which no client can be asked for"),
            ));
        };
        let declared = Declared::from_modern(&self.capabilities).at_version(&self.version);
        if input::allowed(&declared, kind, Some(params)) {
            return Ok(());
        }
        let required = match kind {
            Kind::Elicitation if input::is_url_elicitation(Some(params)) => {
                json!({"elicitation": {"url": {}}})
            }
            Kind::Elicitation => json!({"elicitation": {"form": {}}}),
            Kind::Sampling if params.get("tools").is_some_and(|t| !t.is_null()) => {
                json!({"sampling": {"tools": {}}})
            }
            Kind::Sampling => json!({"sampling": {}}),
            Kind::Roots => json!({"roots": {}}),
        };
        Err(ErrorObject::new(
            jsonrpc::MISSING_CLIENT_CAPABILITY,
            format!(
                "the backend needs `{method}`, which this client did not declare at initialize"
            ),
        )
        .with_data(json!({"requiredCapabilities": required})))
    }

    /// Sends each input request to the client as a request of its own and waits for every
    /// answer. Returns the answers by key, and the ids of URL elicitations asked (2025-11-25
    /// clients are told when each completes).
    async fn ask(
        &self,
        result: &Value,
        answer: &Outbound,
    ) -> Result<(Map<String, Value>, Vec<String>), ErrorObject> {
        let Some(requests) = result.get("inputRequests").and_then(Value::as_object) else {
            return Err(ErrorObject::new(
                INTERNAL_ERROR,
                "the backend's input_required result has no inputRequests",
            ));
        };
        if requests.len() > self.max_asked {
            return Err(ErrorObject::new(
                INTERNAL_ERROR,
                format!(
                    "the backend asked for {} inputs at once, more than limits.max_input_requests ({})",
                    requests.len(),
                    self.max_asked
                ),
            ));
        }
        let mut waiting = Vec::new();
        let mut urls = Vec::new();
        for (key, request) in requests {
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            self.check_declared(method, &params)?;
            if method == "elicitation/create"
                && params["mode"] == "url"
                && self.version == "2025-11-25"
            {
                let elicitation = format!("{key}-{}", self.next_ask.load(Ordering::Relaxed));
                params["elicitationId"] = json!(elicitation);
                urls.push(elicitation);
            }
            let id = Id::String(format!(
                "mrtr-{}",
                self.next_ask.fetch_add(1, Ordering::Relaxed)
            ));
            let (tx, rx) = oneshot::channel();
            self.asked
                .lock()
                .expect("asked lock")
                .insert(id.clone(), tx);
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            if answer.send(msg).await.is_err() {
                return Err(ErrorObject::new(INTERNAL_ERROR, "the client left"));
            }
            waiting.push((key.clone(), id, rx));
        }
        let mut responses = Map::new();
        let wait = self.answer_wait;
        for (key, id, rx) in waiting {
            let outcome = tokio::time::timeout(wait, rx).await.map_err(|_| {
                ErrorObject::new(
                    INTERNAL_ERROR,
                    "the client did not answer the backend's request in time (state.park_ttl)",
                )
            })?;
            self.asked.lock().expect("asked lock").remove(&id);
            match outcome {
                Ok(Ok(result)) => {
                    responses.insert(key, result);
                }
                // The client refused what the backend asked: the request fails with its error.
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(ErrorObject::new(INTERNAL_ERROR, "the session ended")),
            }
        }
        Ok((responses, urls))
    }
}

/// Where an upstream exchange's notifications go.
enum Notes<'a> {
    /// The stream of the client's request: each waits for room.
    Answer(&'a Outbound),
    /// The session's own stream (a listen's events).
    Session,
}

/// A complete 2026-07-28 result in the legacy shape: without `resultType`.
fn complete(mut result: Value) -> Value {
    if let Some(m) = result.as_object_mut() {
        m.remove("resultType");
    }
    result
}

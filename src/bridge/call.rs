//! One MRTR-capable call (`tools/call`, `prompts/get`, `resources/read`) from first request to
//! final result. A task owns the call for its whole life: it drives the upstream call, parks
//! when the backend asks for input (coalescing requests that arrive close together into one
//! round), answers the client with an `InputRequiredResult`, and resumes on a valid retry. While
//! parked it keeps listening to the backend, so an outcome reached meanwhile is kept for the
//! retry, and at the park deadline it abandons the call explicitly.

use super::park::{Entry, Handle, Resume};
use super::{Bridge, Reply, Request, invalid_state, upstream_error, upstream_params};
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS, Id};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use crate::protocol::meta::RequestMeta;
use crate::seal::{Claims, Digest};
use crate::upstream::{CallEvent, Lease};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long an abandoned call gets to wind down before its session is closed instead of reused.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// An input request put to the client, waiting for its answer.
#[derive(Debug)]
struct Pending {
    /// The backend's request id; `None` for URL elicitations from a -32042 error.
    upstream: Option<Id>,
    kind: Kind,
    request: Value,
}

/// Why driving stopped.
enum Step {
    Done(Result<Value, ErrorObject>),
    Park,
    ClientGone,
}

struct Task {
    bridge: Arc<Bridge>,
    method: String,
    params: Map<String, Value>,
    principal: Digest,
    digest: Digest,
    meta: RequestMeta,
    declared: Declared,
    lease: Lease,
    call: crate::upstream::Call,
    pending: BTreeMap<String, Pending>,
    next_key: u32,
    round: u32,
    /// The call ended with -32042: once the URL elicitations are answered, issue it again.
    reissue: bool,
    /// An outcome reached while parked, returned on the retry.
    outcome: Option<Result<Value, ErrorObject>>,
}

/// Serves one MRTR-capable request: a fresh call, or a retry of a parked one.
pub(super) async fn serve(
    bridge: Arc<Bridge>,
    backend: usize,
    req: Request,
    reply: mpsc::Sender<Reply>,
) {
    let state = req.params.get("requestState").cloned();
    let responses = req.params.get("inputResponses").cloned();
    match (state, responses) {
        (Some(state), responses) => resume(&bridge, req, state, responses, reply).await,
        (None, Some(_)) => {
            let e = ErrorObject::new(
                INVALID_PARAMS,
                "inputResponses needs the requestState it answers",
            );
            let _ = reply.send(Reply::Done(Err(e))).await;
        }
        (None, None) => start(bridge, backend, req, reply).await,
    }
}

async fn start(bridge: Arc<Bridge>, backend: usize, req: Request, reply: mpsc::Sender<Reply>) {
    let declared = Declared::from_modern(&req.meta.capabilities);
    let interactive = declared.is_interactive();
    let lease = bridge.lease(backend, &req, interactive).await;
    let lease = match lease {
        Ok(l) => l,
        Err(e) => {
            let _ = reply.send(Reply::Done(Err(upstream_error(&e)))).await;
            return;
        }
    };
    let params = upstream_params(&req.params, &req.meta);
    let call = match lease
        .session()
        .request(&req.method, Some(params), interactive)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            let _ = reply.send(Reply::Done(Err(upstream_error(&e)))).await;
            return;
        }
    };
    let session_declared = lease.session().info().declared;
    let task = Task {
        digest: Bridge::request_digest(&req.method, &req.params),
        method: req.method,
        params: req.params,
        principal: req.principal,
        meta: req.meta,
        // What the backend may push is bounded by both this request and what its session carries.
        declared: declared.intersect(&session_declared),
        lease,
        call,
        pending: BTreeMap::new(),
        next_key: 0,
        round: 0,
        reissue: false,
        outcome: None,
        bridge,
    };
    task.run(reply).await;
}

async fn resume(
    bridge: &Arc<Bridge>,
    req: Request,
    state: Value,
    responses: Option<Value>,
    reply: mpsc::Sender<Reply>,
) {
    let refuse = |e: ErrorObject| Reply::Done(Err(e));
    let Some(state) = state.as_str() else {
        let _ = reply.send(refuse(invalid_state())).await;
        return;
    };
    let responses = match responses {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            let _ = reply
                .send(refuse(ErrorObject::new(
                    INVALID_PARAMS,
                    "inputResponses must be an object",
                )))
                .await;
            return;
        }
    };
    let Some((claims, handle)) = check_state(bridge, &req, state) else {
        let _ = reply.send(refuse(invalid_state())).await;
        return;
    };
    let resume = Resume {
        round: claims.round,
        responses,
        declared: Declared::from_modern(&req.meta.capabilities),
        meta: req.meta,
        reply: reply.clone(),
    };
    if handle.resume.send(resume).await.is_err() {
        // The park ended between lookup and hand-over.
        let _ = reply.send(refuse(invalid_state())).await;
    }
}

/// Opens and checks a requestState; every failure looks the same to the client.
fn check_state(bridge: &Bridge, req: &Request, state: &str) -> Option<(Claims, Handle)> {
    let claims = bridge.keys.open(state).ok()?;
    let fresh = claims.expires_at_ms > now_ms();
    let same_principal = claims.principal == req.principal;
    let same_request = claims.request == Bridge::request_digest(&req.method, &req.params);
    let ours = claims.owner == bridge.config.state.owner;
    if !(fresh && same_principal && same_request && ours) {
        return None;
    }
    let handle = bridge.parks.get(&claims.park)?;
    Some((claims, handle))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Task {
    async fn run(mut self, mut reply: mpsc::Sender<Reply>) {
        let mut entry: Option<Entry> = None;
        let (resume_tx, mut resume_rx) = mpsc::channel::<Resume>(4);
        loop {
            let step = self.drive(&reply).await;
            match step {
                Step::Done(outcome) => {
                    let retry = self.round > 0;
                    let _ = reply
                        .send(Reply::Done(self.bridge.finish(
                            &self.method,
                            retry,
                            outcome,
                        )))
                        .await;
                    return;
                }
                Step::ClientGone => {
                    self.abandon("the client closed the request").await;
                    return;
                }
                Step::Park => {}
            }
            // Park (or stay parked) until a valid retry, a deadline, or shutdown.
            if entry.is_none() {
                let limits = &self.bridge.config.limits;
                let handle = Handle {
                    resume: resume_tx.clone(),
                };
                match self.bridge.parks.insert(
                    self.principal,
                    handle,
                    limits.max_parked_per_principal,
                    limits.max_parked_total,
                ) {
                    Ok(e) => entry = Some(e),
                    Err(full) => {
                        let _ = reply.send(Reply::Done(Err(full.to_error()))).await;
                        self.abandon("the gateway could not hold the call").await;
                        return;
                    }
                }
            }
            let park = entry.as_ref().expect("parked").id;
            let deadline = Instant::now() + self.bridge.config.state.park_ttl;
            self.round += 1;
            let _ = reply.send(Reply::Done(Ok(self.input_required(park)))).await;
            tracing::debug!(park = %park, round = self.round, asked = self.pending.len(), "call parked");

            let resumed = loop {
                tokio::select! {
                    _ = self.bridge.shutdown.cancelled() => break None,
                    _ = tokio::time::sleep_until(deadline) => break None,
                    resume = resume_rx.recv() => {
                        let Some(resume) = resume else { break None };
                        if resume.round != self.round {
                            let _ = resume.reply.send(Reply::Done(Err(invalid_state()))).await;
                            continue;
                        }
                        match self.accept(&resume).await {
                            Ok(()) => break Some(resume),
                            Err(e) => {
                                // A malformed answer leaves the park as it was.
                                let _ = resume.reply.send(Reply::Done(Err(e))).await;
                            }
                        }
                    }
                    event = self.call.events.recv(), if self.outcome.is_none() && !self.reissue => {
                        self.while_parked(event).await;
                    }
                }
            };
            let Some(resume) = resumed else {
                tracing::info!(park = %park, round = self.round, "parked call abandoned: no retry before the deadline");
                self.abandon("the client did not retry in time").await;
                return;
            };
            reply = resume.reply;
            self.meta = resume.meta;
            self.declared = self.declared.intersect(&resume.declared);
            if let Some(outcome) = self.outcome.take() {
                let _ = reply
                    .send(Reply::Done(self.bridge.finish(&self.method, true, outcome)))
                    .await;
                return;
            }
            if self.reissue && self.pending.is_empty() {
                self.reissue = false;
                let params = upstream_params(&self.params, &self.meta);
                match self
                    .lease
                    .session()
                    .request(&self.method, Some(params), true)
                    .await
                {
                    Ok(call) => self.call = call,
                    Err(e) => {
                        let _ = reply.send(Reply::Done(Err(upstream_error(&e)))).await;
                        return;
                    }
                }
            }
        }
    }

    /// Follows the upstream call until it finishes or asks for input.
    async fn drive(&mut self, reply: &mpsc::Sender<Reply>) -> Step {
        // Requests that arrived while parked, or answers still missing, go out at once.
        if !self.pending.is_empty() {
            return Step::Park;
        }
        let timeout = tokio::time::sleep(self.bridge.config.limits.request_timeout);
        tokio::pin!(timeout);
        let mut coalesce: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                _ = reply.closed() => return Step::ClientGone,
                _ = async { tokio::time::sleep_until(coalesce.expect("guarded")).await }, if coalesce.is_some() => return Step::Park,
                _ = &mut timeout => {
                    self.cancel_upstream("the call took too long").await;
                    return Step::Done(Err(upstream_error(&crate::upstream::Error::Timeout(self.lease.session().backend().to_owned()))));
                }
                event = self.call.events.recv() => match event {
                    Some(CallEvent::Response(outcome)) => {
                        if let Err(e) = &outcome
                            && e.code == jsonrpc::LEGACY_URL_ELICITATION_REQUIRED
                        {
                            return self.url_required(e);
                        }
                        return Step::Done(outcome);
                    }
                    Some(CallEvent::Closed(reason)) => {
                        return Step::Done(Err(ErrorObject::new(jsonrpc::BACKEND_FAILED, format!("backend `{}` failed during the call: {reason}", self.lease.session().backend()))));
                    }
                    None => {
                        let reason = "session ended";
                        return Step::Done(Err(ErrorObject::new(jsonrpc::BACKEND_FAILED, format!("backend `{}` failed during the call: {reason}", self.lease.session().backend()))));
                    }
                    Some(CallEvent::Notification { method, params }) => {
                        if let Some(note) = self.downstream_notification(method, params) {
                            let _ = reply.send(Reply::Notification(note)).await;
                        }
                    }
                    Some(CallEvent::ServerRequest { id, method, params }) => {
                        if self.ask(id, &method, params).await && coalesce.is_none() {
                            coalesce = Some(Instant::now() + self.bridge.config.state.coalesce_window);
                        }
                    }
                }
            }
        }
    }

    /// Takes one backend request into the next round, or refuses it upstream. True if taken.
    async fn ask(&mut self, id: Id, method: &str, params: Option<Value>) -> bool {
        let Some(kind) = Kind::from_method(method) else {
            let e = ErrorObject::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!("method `{method}` is not supported"),
            );
            let _ = self.lease.session().respond(id, Err(e)).await;
            return false;
        };
        if !input::allowed(&self.declared, kind, params.as_ref()) {
            tracing::info!(
                kind = kind.as_str(),
                "backend asked for input the client did not declare; refused"
            );
            let e = input::refused_answer(kind, input::is_url_elicitation(params.as_ref()));
            let _ = self.lease.session().respond(id, Err(e)).await;
            return false;
        }
        self.next_key += 1;
        let key = format!("{}-{}", kind.as_str(), self.next_key);
        let request = input::to_input_request(kind, params.as_ref());
        self.pending.insert(
            key,
            Pending {
                upstream: Some(id),
                kind,
                request,
            },
        );
        true
    }

    /// A -32042 error: ask for its URL elicitations, then issue the call again.
    fn url_required(&mut self, e: &ErrorObject) -> Step {
        let elicitations: Vec<Value> = e
            .data
            .as_ref()
            .and_then(|d| d.get("elicitations"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if elicitations.is_empty() || !self.declared.elicitation_url {
            let needed = ErrorObject::new(
                jsonrpc::MISSING_CLIENT_CAPABILITY,
                "the backend needs URL-mode elicitation, which this request did not declare",
            )
            .with_data(json!({"requiredCapabilities": {"elicitation": {"url": {}}}}));
            return Step::Done(Err(needed));
        }
        for params in elicitations {
            self.next_key += 1;
            let key = format!("elicitation-{}", self.next_key);
            let request = input::to_input_request(Kind::Elicitation, Some(&params));
            self.pending.insert(
                key,
                Pending {
                    upstream: None,
                    kind: Kind::Elicitation,
                    request,
                },
            );
        }
        self.reissue = true;
        Step::Park
    }

    /// Checks a retry's answers, then writes them upstream. Missing keys stay pending.
    async fn accept(&mut self, resume: &Resume) -> Result<(), ErrorObject> {
        for (key, pending) in &self.pending {
            if let Some(answer) = resume.responses.get(key) {
                input::validate_response(pending.kind, answer).map_err(|why| {
                    ErrorObject::new(INVALID_PARAMS, format!("inputResponses[\"{key}\"]: {why}"))
                })?;
            }
        }
        let answered: Vec<String> = self
            .pending
            .keys()
            .filter(|k| resume.responses.contains_key(*k))
            .cloned()
            .collect();
        for key in answered {
            let pending = self.pending.remove(&key).expect("present");
            if let Some(id) = pending.upstream {
                let answer = input::to_legacy_result(&resume.responses[&key]);
                let _ = self.lease.session().respond(id, Ok(answer)).await;
            }
        }
        Ok(())
    }

    /// Backend activity while the client is away.
    async fn while_parked(&mut self, event: Option<CallEvent>) {
        match event {
            Some(CallEvent::ServerRequest { id, method, params }) => {
                self.ask(id, &method, params).await;
            }
            Some(CallEvent::Response(outcome)) => self.outcome = Some(outcome),
            Some(CallEvent::Closed(reason)) => {
                self.outcome = Some(Err(ErrorObject::new(
                    jsonrpc::BACKEND_FAILED,
                    format!(
                        "backend `{}` failed while the call waited for input: {reason}",
                        self.lease.session().backend()
                    ),
                )));
            }
            None => {
                self.outcome = Some(Err(ErrorObject::new(
                    jsonrpc::BACKEND_FAILED,
                    "backend session ended",
                )))
            }
            Some(CallEvent::Notification { .. }) => {}
        }
    }

    fn input_required(&self, park: crate::seal::ParkId) -> Value {
        let ttl = self.bridge.config.state.park_ttl;
        let claims = Claims {
            park,
            owner: self.bridge.config.state.owner.clone(),
            principal: self.principal,
            request: self.digest,
            round: self.round,
            expires_at_ms: now_ms() + ttl.as_millis() as u64,
            outstanding: self.pending.keys().cloned().collect(),
        };
        input::input_required_result(
            self.pending.iter().map(|(k, p)| (k, &p.request)),
            self.bridge.keys.seal(&claims),
        )
    }

    /// A backend notification as the client should see it, if it should see it at all.
    fn downstream_notification(&self, method: String, params: Option<Value>) -> Option<Value> {
        let mut params = params.unwrap_or_else(|| json!({}));
        match method.as_str() {
            "notifications/progress" => {
                let token = self.meta.progress_token.clone()?;
                params["progressToken"] = token;
            }
            "notifications/message" => {
                self.meta.log_level.as_ref()?;
            }
            _ => return None,
        }
        Some(json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    async fn cancel_upstream(&mut self, reason: &str) {
        let params = json!({"requestId": self.call.id, "reason": reason});
        let _ = self
            .lease
            .session()
            .notify("notifications/cancelled", Some(params))
            .await;
    }

    /// Ends a call the client will not finish: the backend's open requests are answered as the
    /// client never would, the call is cancelled upstream, and the session is released only once
    /// the backend has let go of it.
    async fn abandon(mut self, reason: &str) {
        for (_, pending) in std::mem::take(&mut self.pending) {
            if let Some(id) = pending.upstream {
                let _ = self
                    .lease
                    .session()
                    .respond(id, input::abandoned_answer(pending.kind))
                    .await;
            }
        }
        if self.outcome.is_some() || self.reissue {
            return; // the upstream call already ended
        }
        self.cancel_upstream(reason).await;
        let grace = tokio::time::sleep(CANCEL_GRACE);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                _ = &mut grace => {
                    tracing::info!(backend = %self.lease.session().backend(), "backend kept a cancelled call; its session is closed");
                    self.lease.session().forget(self.call.id.clone());
                    self.lease.retire();
                    return;
                }
                event = self.call.events.recv() => match event {
                    Some(CallEvent::ServerRequest { id, method, .. }) => {
                        let answer = Kind::from_method(&method).map(input::abandoned_answer).unwrap_or_else(|| Err(ErrorObject::new(jsonrpc::METHOD_NOT_FOUND, "not supported")));
                        let _ = self.lease.session().respond(id, answer).await;
                    }
                    Some(CallEvent::Notification { .. }) => {}
                    Some(CallEvent::Response(_)) | Some(CallEvent::Closed(_)) | None => return,
                }
            }
        }
    }
}

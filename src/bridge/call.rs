//! One MRTR-capable call (`tools/call`, `prompts/get`, `resources/read`) from first request to
//! final result. A task owns the call for its whole life: it drives the upstream call, parks
//! when the backend asks for input (coalescing requests that arrive close together into one
//! round), answers the client with an `InputRequiredResult`, and resumes on a valid retry. While
//! parked it keeps listening to the backend, so an outcome reached meanwhile is kept for the
//! retry, and at the park deadline it abandons the call explicitly.

use super::forward;
use super::park::{Door, Entry, Handle, Resume};
use super::replay::{self, Match};
use super::retry::{self, Decision, Retry, now_ms};
use super::{
    Bridge, Reply, Request, backend_error, backend_failed, invalid_state, upstream_error,
    upstream_params,
};
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS, Id, Raw};
use crate::metrics::{AbandonReason, RetryReason, RetryResult, StateFailure};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use crate::protocol::meta::{self, RequestMeta};
use crate::seal::{Claims, Digest, ParkId, Transcript, Turn};
use crate::upstream::{CallEvent, Lease};
use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
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
    /// The input request as the client sees it, kept as JSON text: a parked call holds it for
    /// its whole wait, and the text is a fraction of the size of a `serde_json` value.
    request: Box<str>,
}

impl Pending {
    fn new(upstream: Option<Id>, kind: Kind, request: &Value) -> Pending {
        Pending {
            upstream,
            kind,
            request: request.to_string().into_boxed_str(),
        }
    }

    fn request(&self) -> Value {
        // Written from a `Value` by `new`, so it reads back.
        serde_json::from_str(&self.request).unwrap_or(Value::Null)
    }
}

/// Why driving stopped.
enum Step {
    Done(Result<Raw, ErrorObject>),
    Park,
    ClientGone,
    /// The call cannot go on (its replay no longer matches): tell the client, cancel upstream.
    Refused(ErrorObject),
}

struct Task {
    bridge: Arc<Bridge>,
    method: String,
    params: Params,
    principal: Digest,
    /// The `_meta` of the request being served: the first one's, then each retry's. Empty while
    /// the call is parked.
    meta: RequestMeta,
    declared: Declared,
    lease: Lease,
    call: crate::upstream::Call,
    backend: usize,
    authorization: Option<http::HeaderValue>,
    /// The request was sent again after its first session turned out to be gone.
    resent: bool,
    /// By key, in the order asked (a list: a parked call holds it, and a map's first node is
    /// sized for eleven).
    pending: Vec<(String, Pending)>,
    next_key: u32,
    round: u32,
    /// The call ended with -32042: once the URL elicitations are answered, issue it again.
    reissue: bool,
    /// Input requests refused for being over `max_input_requests`: the first is a warning, the
    /// rest debug lines (a backend that asks in a loop would fill the log).
    over_limit: u32,
    /// An outcome reached while parked, returned on the retry.
    outcome: Option<Result<Raw, ErrorObject>>,
    /// Replay mode: the transcript the backend's pushes are answered from. `None`: held.
    replay: Option<replay::Run>,
    /// Replay mode: this task ends with a round, and the call goes on in the retry's task.
    continues: bool,
    /// When the current upstream request was written.
    sent: Instant,
    /// Time parked since `sent` (rounds already resumed).
    parked_for: Duration,
    /// Since when the call is parked, if it is.
    parked_since: Option<Instant>,
}

/// The client's params: needed again only if the call is sent again.
enum Params {
    /// As parsed, until the call first asks for input (most calls never do).
    Parsed(Map<String, Value>),
    /// From the first round on: a parked call holds them for its whole wait, and text is
    /// smaller. With the digest its requestStates are bound to.
    Text { text: Box<str>, digest: Digest },
}

impl Drop for Task {
    // Every way a call ends (result, error, abandonment) drops its last task exactly once.
    fn drop(&mut self) {
        if !self.continues {
            self.bridge.metrics.call_rounds(self.round);
        }
    }
}

/// What ended a park.
enum Woke {
    Retry(Box<Resume>),
    Abandon(AbandonReason),
}

/// Serves one MRTR-capable request: a fresh call, or a retry of a parked one. The phase is
/// chosen before anything runs and each is its own boxed future, so the task spawned for the
/// request is only that phase: a parked call's task holds its call and nothing more.
pub(super) fn serve(
    bridge: Arc<Bridge>,
    backend: usize,
    req: Request,
    reply: mpsc::Sender<Reply>,
    hop: bool,
) -> BoxFuture<'static, ()> {
    let state = req.params.get("requestState").cloned();
    let responses = req.params.get("inputResponses").cloned();
    match (state, responses) {
        (Some(state), responses) => {
            Box::pin(
                async move { resume(&bridge, backend, req, state, responses, reply, hop).await },
            )
        }
        (None, Some(_)) => Box::pin(async move {
            bridge
                .metrics
                .retry(RetryResult::Rejected, RetryReason::InvalidResponses);
            let e = ErrorObject::new(
                INVALID_PARAMS,
                "inputResponses needs the requestState it answers",
            );
            let _ = reply.send(Reply::Done(Err(e))).await;
        }),
        (None, None) => Box::pin(begin(bridge, backend, req, reply, None)),
    }
}

/// Runs a replay-mode call again from its transcript (`round` and `next_key` from its state).
pub(super) fn rerun(
    bridge: Arc<Bridge>,
    backend: usize,
    req: Request,
    round: u32,
    next_key: u32,
    run: replay::Run,
    reply: mpsc::Sender<Reply>,
) -> impl Future<Output = ()> {
    begin(bridge, backend, req, reply, Some((round, next_key, run)))
}

/// A call from its request: the request is turned into a [`Task`] by a future of its own, freed
/// once the call is under way, so a call's future (kept while it is parked) holds the task and
/// not the request it came from.
fn begin(
    bridge: Arc<Bridge>,
    backend: usize,
    req: Request,
    reply: mpsc::Sender<Reply>,
    rerun: Option<(u32, u32, replay::Run)>,
) -> impl Future<Output = ()> {
    let prepared = Box::pin(prepare(bridge, backend, req, reply, rerun));
    async move {
        if let Some((task, reply)) = prepared.await {
            task.run(reply).await;
        }
    }
}

/// Checks the limits, issues the call upstream and builds its task; `None` once the client has
/// been answered (refused, or the call could not be issued).
async fn prepare(
    bridge: Arc<Bridge>,
    backend: usize,
    req: Request,
    reply: mpsc::Sender<Reply>,
    rerun: Option<(u32, u32, replay::Run)>,
) -> Option<(Box<Task>, mpsc::Sender<Reply>)> {
    let declared = Declared::from_modern(&req.meta.capabilities);
    let interactive = declared.is_interactive();
    // Looked up before the call goes out: a backend that serves one request at a time would
    // not answer a `tools/list` while the call waits for input.
    let (round, next_key, run) = match rerun {
        Some((round, next_key, run)) => (round, next_key, Some(run)),
        None => {
            let replayed = interactive && Box::pin(replay::chosen(&bridge, backend, &req)).await;
            (0, 0, replayed.then(replay::Run::default))
        }
    };
    // A held call that could not park would only be abandoned: refuse it before it takes a
    // backend session (for stdio, a process). Whether it is held (`auto` decides by the tool's
    // annotations) is known only now.
    if interactive && run.is_none() {
        let limits = &bridge.config.limits;
        if let Some(full) = bridge.parks.full(
            &req.principal,
            limits.max_parked_per_principal,
            limits.max_parked_total,
        ) {
            let _ = reply.send(Reply::Done(Err(full.to_error()))).await;
            return None;
        }
    }
    let sent = Instant::now();
    let (lease, call) = match Box::pin(bridge.issue(backend, &req, interactive)).await {
        Ok(issued) => issued,
        Err(e) => {
            let _ = reply.send(Reply::Done(Err(e))).await;
            return None;
        }
    };
    let session_declared = lease.session().info().declared;
    let task = Task {
        method: req.method,
        params: Params::Parsed(req.params),
        principal: req.principal,
        meta: req.meta,
        // What the backend may push is bounded by both this request and what its session carries.
        declared: declared.intersect(&session_declared),
        lease,
        call,
        backend,
        authorization: req.authorization,
        resent: false,
        pending: Vec::new(),
        next_key,
        round,
        reissue: false,
        over_limit: 0,
        outcome: None,
        sent,
        parked_for: Duration::ZERO,
        parked_since: None,
        replay: run,
        continues: false,
        bridge,
    };
    // Boxed: an async fn's by-value `self` is kept twice in its future.
    Some((Box::new(task), reply))
}

async fn resume(
    bridge: &Arc<Bridge>,
    backend: usize,
    req: Request,
    state: Value,
    responses: Option<Value>,
    reply: mpsc::Sender<Reply>,
    hop: bool,
) {
    let refuse = |e: ErrorObject| Reply::Done(Err(e));
    let metrics = &bridge.metrics;
    let Some(state) = state.as_str() else {
        metrics.state_failure(StateFailure::Malformed);
        let _ = reply.send(refuse(invalid_state())).await;
        return;
    };
    let responses = match responses {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            metrics.retry(RetryResult::Rejected, RetryReason::InvalidResponses);
            let _ = reply
                .send(refuse(ErrorObject::new(
                    INVALID_PARAMS,
                    "inputResponses must be an object",
                )))
                .await;
            return;
        }
    };
    let retry = Retry {
        backend,
        principal: &req.principal,
        method: &req.method,
        params: &req.params,
        hop,
    };
    let (claims, handle) = match retry::decide(bridge, &retry, state) {
        Decision::Resume { claims, handle } => (claims, handle),
        Decision::Refuse(failed) => {
            tracing::debug!(check = failed.as_str(), "requestState refused");
            metrics.state_failure(failed);
            let _ = reply.send(refuse(invalid_state())).await;
            return;
        }
        // Calls parked on another replica are served there; replayed calls here.
        Decision::Forward { owner, addr } => {
            metrics.retry(RetryResult::Forwarded, RetryReason::None);
            if let Err(e) = Box::pin(forward::forward(
                bridge, backend, &req, &owner, &addr, &reply,
            ))
            .await
            {
                tracing::warn!(%owner, %addr, "retry for a call parked on another replica failed: {e}");
                let _ = reply.send(refuse(invalid_state())).await;
            }
            return;
        }
        Decision::Replay { claims, transcript } => {
            Box::pin(super::replay::resume(
                bridge.clone(),
                backend,
                req,
                (*claims, transcript),
                responses,
                reply,
            ))
            .await;
            return;
        }
    };
    let span = tracing::Span::current();
    span.record("park", tracing::field::display(claims.park));
    span.record("round", claims.round);
    tracing::debug!("retry handed to its parked call");
    let resume = Resume {
        round: claims.round,
        responses,
        declared: Declared::from_modern(&req.meta.capabilities),
        meta: req.meta,
        reply: reply.clone(),
    };
    if handle.resume.hand_over(Box::new(resume)).is_err() {
        // The call is not waiting for a retry: another retry of this state got in first, or
        // took the call on to its next round (or it has just ended).
        metrics.state_failure(StateFailure::StaleRound);
        let _ = reply.send(refuse(invalid_state())).await;
    }
}

impl Task {
    /// Serves the call's rounds until it ends.
    async fn run(mut self: Box<Self>, mut reply: mpsc::Sender<Reply>) {
        let door: Arc<Door> = Arc::default();
        let mut entry: Option<Entry> = None;
        loop {
            let step = Box::pin(self.drive(&reply)).await;
            match step {
                Step::Done(outcome) => {
                    let _ = reply.send(self.finished(self.round > 0, outcome)).await;
                    crate::wake::behind_woken().await;
                    return;
                }
                Step::ClientGone => {
                    Box::pin(self.abandon("the client closed the request")).await;
                    return;
                }
                Step::Refused(e) => {
                    let _ = reply.send(Reply::Done(Err(e))).await;
                    Box::pin(self.abandon("the call could not be replayed")).await;
                    return;
                }
                Step::Park => {}
            }
            // Replay mode keeps nothing: the transcript goes into the state, the call upstream
            // is cancelled, and the retry runs it again wherever it lands.
            if self.replay.is_some() {
                match self.transcript() {
                    Some(transcript) => {
                        self.round += 1;
                        let state = self.input_required(ParkId::random(), Some(transcript));
                        let _ = reply.send(Reply::Done(Ok(state.into()))).await;
                        self.continues = true;
                        Box::pin(self.abandon("the call is run again on the retry")).await;
                        return;
                    }
                    None => {
                        tracing::info!(
                            round = self.round,
                            "replay transcript over the limit (or a URL elicitation): the call is held instead"
                        );
                        self.replay = None;
                    }
                }
            }
            // A gateway shutting down opens no new round: the client could not retry it here.
            if self.bridge.shutdown.is_cancelled() {
                if entry.is_some() {
                    self.bridge.metrics.abandoned(AbandonReason::Shutdown);
                }
                let _ = reply.send(Reply::Done(Err(super::shutting_down()))).await;
                Box::pin(self.abandon("the gateway is shutting down")).await;
                return;
            }
            // Park (or stay parked) until a valid retry, a deadline, or shutdown.
            if entry.is_none() {
                let limits = &self.bridge.config.limits;
                let handle = Handle {
                    resume: door.clone(),
                    backend: self.backend,
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
                        Box::pin(self.abandon("the gateway could not hold the call")).await;
                        return;
                    }
                }
            }
            let park = entry.as_ref().expect("parked").id;
            let parked_at = Instant::now();
            let deadline = parked_at + self.bridge.config.state.park_ttl;
            self.round += 1;
            self.parked_since = Some(parked_at);
            let asked = self.pending_keys();
            // The call runs in its first request's span, which it answers with round 1; each
            // retry's own span records the park and the round it answers. Recorded again, a
            // field would be written twice in text logs (`round=1 ... round=2`): the call's
            // later events name their round themselves.
            if self.round == 1 {
                let span = tracing::Span::current();
                span.record("park", tracing::field::display(park));
                span.record("round", self.round);
            }
            // Open before the client learns the state it may retry with.
            let mut retry = door.open(self.round);
            let _ = reply
                .send(Reply::Done(Ok(self.input_required(park, None).into())))
                .await;
            // The round is answered: the channel goes now, not when the retry brings a new one.
            drop(reply);
            // So does the request's `_meta` (its capabilities alone are a map node of over half a
            // KiB): nothing reads it while the call is parked, and the retry brings its own.
            self.meta = RequestMeta::default();
            tracing::debug!(park = %park, round = self.round, asked = self.pending.len(), "call parked");
            let released = self.call.events.release().then(|| {
                tracing::debug!(park = %park, "the backend's answer stream is let go until the retry");
                self.bridge.metrics.stream_released()
            });

            let woke = loop {
                tokio::select! {
                    _ = self.bridge.shutdown.cancelled() => break Woke::Abandon(AbandonReason::Shutdown),
                    _ = tokio::time::sleep_until(deadline) => break Woke::Abandon(AbandonReason::Expired),
                    // Guarded: a finished receiver must not be polled again (each way on
                    // below opens the door anew).
                    resume = &mut retry, if !retry.is_terminated() => {
                        // Only a retry takes the door's sender, and it always sends.
                        let Ok(resume) = resume else {
                            retry = door.open(self.round);
                            continue;
                        };
                        // The door lets in only a retry of this round.
                        match Box::pin(self.accept(&resume)).await {
                            Ok(()) => break Woke::Retry(resume),
                            Err(e) => {
                                // A malformed answer leaves the park as it was: open again
                                // before the client hears of it.
                                retry = door.open(self.round);
                                self.bridge.metrics.retry(RetryResult::Rejected, RetryReason::InvalidResponses);
                                let _ = resume.reply.send(Reply::Done(Err(e))).await;
                            }
                        }
                    }
                    event = self.call.events.recv(), if self.outcome.is_none() && !self.reissue => {
                        Box::pin(self.while_parked(event)).await;
                    }
                }
            };
            // Retries that come from now on find no way in; one that got in as the wait ended
            // (it met the deadline or the shutdown) gets the answer of a park that is gone.
            door.close();
            retry.close();
            if let Ok(late) = retry.try_recv() {
                self.bridge.metrics.state_failure(StateFailure::UnknownPark);
                let _ = late.reply.send(Reply::Done(Err(invalid_state()))).await;
            }
            drop(released);
            self.bridge.metrics.park_duration(parked_at.elapsed());
            self.parked_since = None;
            self.parked_for += parked_at.elapsed();
            let resume = match woke {
                Woke::Retry(resume) => {
                    self.call.events.resume();
                    *resume
                }
                Woke::Abandon(reason) => {
                    self.bridge.metrics.abandoned(reason);
                    tracing::info!(park = %park, round = self.round, reason = reason.as_str(), "parked call abandoned");
                    Box::pin(self.abandon(match reason {
                        AbandonReason::Expired => "the client did not retry in time",
                        AbandonReason::Shutdown => "the gateway is shutting down",
                    }))
                    .await;
                    return;
                }
            };
            let all_answered = asked.iter().all(|k| resume.responses.contains_key(k));
            self.bridge.metrics.retry(
                if all_answered {
                    RetryResult::Resumed
                } else {
                    RetryResult::AskedAgain
                },
                RetryReason::None,
            );
            reply = resume.reply;
            self.meta = resume.meta;
            self.declared = self.declared.intersect(&resume.declared);
            Box::pin(self.refuse_undeclared()).await;
            if let Some(outcome) = self.outcome.take() {
                // The backend ended the call while the client was away: as when the client is
                // there, unless it asked for URL elicitation, which makes another round.
                if let Step::Done(outcome) = self.answered(outcome) {
                    let _ = reply.send(self.finished(true, outcome)).await;
                    return;
                }
            }
            if self.reissue && self.pending.is_empty() {
                self.reissue = false;
                let sent = match self.params() {
                    Ok(params) => self
                        .lease
                        .session()
                        .request(
                            &self.method,
                            Some(upstream_params(&params, &self.meta)),
                            true,
                        )
                        .await
                        .map_err(|e| upstream_error(&e)),
                    Err(e) => Err(e),
                };
                match sent {
                    Ok(call) => {
                        self.call = call;
                        self.sent = Instant::now();
                        self.parked_for = Duration::ZERO;
                    }
                    Err(e) => {
                        let _ = reply.send(Reply::Done(Err(e))).await;
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
                    self.lease.retire();
                    return Step::Done(Err(upstream_error(&crate::upstream::Error::Timeout(self.lease.session().backend().to_owned()))));
                }
                event = self.call.events.recv() => match event {
                    Some(CallEvent::Response(outcome)) => {
                        self.bridge.metrics.upstream_duration(self.lease.session().backend(), self.backend_time());
                        return self.answered(outcome);
                    }
                    Some(CallEvent::Unsent(reason)) if (self.round == 0 || self.replay.is_some()) && !self.resent => {
                        // The backend's session was gone before it saw the request: once, on a new
                        // one (a replayed call starts over anyway).
                        tracing::info!(backend = %self.lease.session().backend(), "{reason}; sending the call on a new session");
                        self.resent = true;
                        if let Err(e) = Box::pin(self.issue_again()).await {
                            return Step::Done(Err(e));
                        }
                    }
                    Some(CallEvent::Closed(reason) | CallEvent::Unsent(reason)) => {
                        return Step::Done(Err(backend_failed(self.lease.session().backend(), " during the call", &reason)));
                    }
                    None => {
                        return Step::Done(Err(backend_failed(self.lease.session().backend(), " during the call", "session ended")));
                    }
                    Some(CallEvent::Notification { method, params }) => {
                        if let Some(note) = self.downstream_notification(method, params)
                            && let Err(mpsc::error::TrySendError::Full(_)) = reply.try_send(Reply::Notification(note))
                        {
                            // Waiting for a client that is not reading would stop this call, and
                            // every call on its session, from reading the backend: drop the note.
                            tracing::debug!("client is not reading its stream; notification dropped");
                        }
                    }
                    Some(CallEvent::ServerRequest { id, method, params }) => {
                        let id = match self.answer_from_transcript(id, &method, params.as_ref()).await {
                            Ok(Some(id)) => id,
                            Ok(None) => {
                                if !self.pending.is_empty() && coalesce.is_none() {
                                    coalesce = Some(Instant::now() + self.bridge.config.state.coalesce_window);
                                }
                                continue;
                            }
                            Err(e) => return Step::Refused(e),
                        };
                        if self.ask(id, &method, params).await && coalesce.is_none() {
                            coalesce = Some(Instant::now() + self.bridge.config.state.coalesce_window);
                        }
                    }
                }
            }
        }
    }

    /// The keys of the input requests still waiting for an answer, in the order asked.
    fn pending_keys(&self) -> Vec<String> {
        self.pending.iter().map(|(k, _)| k.clone()).collect()
    }

    /// The client's params (read back from their text once the call has asked for input).
    fn params(&self) -> Result<Map<String, Value>, ErrorObject> {
        match &self.params {
            Params::Parsed(params) => Ok(params.clone()),
            Params::Text { text, .. } => serde_json::from_str(text).map_err(|e| {
                ErrorObject::new(
                    jsonrpc::INTERNAL_ERROR,
                    format!("the call's params could not be read back: {e}"),
                )
            }),
        }
    }

    /// The digest a requestState of this call is bound to. Computed when the call first asks
    /// for input, which is also when its params are put away as text.
    fn request_digest(&mut self) -> Digest {
        let (text, digest) = match &mut self.params {
            Params::Text { digest, .. } => return *digest,
            Params::Parsed(params) => {
                let digest = Bridge::request_digest(&self.method, params);
                (Value::Object(std::mem::take(params)).to_string(), digest)
            }
        };
        self.params = Params::Text {
            text: text.into_boxed_str(),
            digest,
        };
        digest
    }

    /// Sends the call again on a fresh session of the same backend.
    async fn issue_again(&mut self) -> Result<(), ErrorObject> {
        let req = Request {
            method: self.method.clone(),
            params: self.params()?,
            meta: self.meta.clone(),
            principal: self.principal,
            authorization: self.authorization.clone(),
        };
        let interactive = Declared::from_modern(&req.meta.capabilities).is_interactive();
        let (lease, call) = self.bridge.issue(self.backend, &req, interactive).await?;
        self.lease = lease;
        self.call = call;
        Ok(())
    }

    /// Replay mode: answers a push from the transcript, or asks again what is still unanswered.
    /// Gives the id back when the push is new (or there is no transcript), for [`Task::ask`].
    async fn answer_from_transcript(
        &mut self,
        id: Id,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Option<Id>, ErrorObject> {
        let Some(run) = self.replay.as_mut() else {
            return Ok(Some(id));
        };
        let Some(kind) = Kind::from_method(method) else {
            return Ok(Some(id));
        };
        let request = input::to_input_request(kind, params);
        match run.match_push(method, &replay::ask_digest(&request)) {
            Match::New => Ok(Some(id)),
            Match::Answer(answer) => {
                let _ = self
                    .lease
                    .session()
                    .respond(id, Ok(input::to_legacy_result(&answer)))
                    .await;
                Ok(None)
            }
            Match::Ask(_) if !input::allowed(&self.declared, kind, params) => {
                self.refuse_input(id, kind, params).await;
                Ok(None)
            }
            Match::Ask(key) => {
                let pending = Pending::new(Some(id), kind, &request);
                self.pending.push((key, pending));
                Ok(None)
            }
            Match::Mismatch => {
                tracing::warn!(backend = %self.lease.session().backend(), %method, round = self.round, "replayed call: the backend asked for input the transcript does not hold, before using its answers; refused");
                // Answered as a client that walked away would, when the call is abandoned.
                let pending = Pending::new(Some(id), kind, &request);
                self.pending.push(("mismatch".into(), pending));
                Err(replay::mismatch(self.lease.session().backend()))
            }
        }
    }

    /// The transcript to seal for the next round, unless the call must be held: over the
    /// size limit, or waiting on URL elicitations from a -32042 error.
    fn transcript(&self) -> Option<Transcript> {
        let run = self.replay.as_ref()?;
        if self.reissue {
            return None;
        }
        let mut turns: Vec<Turn> = run.answered().cloned().collect();
        for (key, pending) in &self.pending {
            pending.upstream.as_ref()?;
            turns.push(Turn {
                key: key.clone(),
                method: pending.kind.method().to_owned(),
                ask: replay::ask_digest(&pending.request()),
                answer: None,
            });
        }
        let transcript = Transcript {
            backend: self.bridge.config.backends[self.backend].path.clone(),
            next_key: self.next_key,
            turns,
        };
        let size = serde_json::to_vec(&transcript).map(|v| v.len()).ok()?;
        (size <= self.bridge.config.fleet.max_transcript_bytes).then_some(transcript)
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
                round = self.round,
                "backend asked for input the client did not declare; refused"
            );
            self.refuse_input(id, kind, params.as_ref()).await;
            return false;
        }
        let most = self.bridge.config.limits.max_input_requests;
        if self.pending.len() >= most {
            self.over_limit += 1;
            let backend = self.lease.session().backend();
            if self.over_limit == 1 {
                tracing::warn!(%backend, kind = kind.as_str(), round = self.round, "backend asked for more than {most} inputs at once (limits.max_input_requests); refused, as are further ones in this call (logged at debug level)");
            } else {
                tracing::debug!(%backend, kind = kind.as_str(), "backend asked for more than {most} inputs at once; refused");
            }
            let e = ErrorObject::new(
                jsonrpc::INTERNAL_ERROR,
                format!("more than {most} input requests are outstanding for this call"),
            );
            let _ = self.lease.session().respond(id, Err(e)).await;
            return false;
        }
        self.next_key += 1;
        let key = format!("{}-{}", kind.as_str(), self.next_key);
        let request = input::to_input_request(kind, params.as_ref());
        self.bridge.metrics.input_request(kind.into());
        self.pending
            .push((key, Pending::new(Some(id), kind, &request)));
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
        if !self.declared.elicitation_url {
            let needed = ErrorObject::new(
                jsonrpc::MISSING_CLIENT_CAPABILITY,
                "the backend needs URL-mode elicitation, which this request did not declare",
            )
            .with_data(json!({"requiredCapabilities": {"elicitation": {"url": {}}}}));
            return Step::Done(Err(needed));
        }
        if elicitations.is_empty() {
            return Step::Done(Err(backend_failed(
                self.lease.session().backend(),
                "",
                "it asked for URL elicitation (-32042) without saying which",
            )));
        }
        let room = self
            .bridge
            .config
            .limits
            .max_input_requests
            .saturating_sub(self.pending.len());
        for params in elicitations.into_iter().take(room) {
            self.next_key += 1;
            let key = format!("elicitation-{}", self.next_key);
            let request = input::to_input_request(Kind::Elicitation, Some(&params));
            self.bridge.metrics.input_request(Kind::Elicitation.into());
            self.pending
                .push((key, Pending::new(None, Kind::Elicitation, &request)));
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
        let (answered, missing) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(k, _)| resume.responses.contains_key(k));
        self.pending = missing;
        for (key, pending) in answered {
            if let Some(id) = pending.upstream {
                let answer = input::to_legacy_result(&resume.responses[&key]);
                let _ = self.lease.session().respond(id, Ok(answer)).await;
            }
        }
        Ok(())
    }

    /// Answers upstream, with the refusal a client without the capability would give, the input
    /// requests this retry's capabilities no longer allow: a round only asks what its request
    /// declared.
    async fn refuse_undeclared(&mut self) {
        let declared = self.declared;
        let (kept, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, p)| input::allowed(&declared, p.kind, p.request().get("params")));
        self.pending = kept;
        for (key, mut pending) in refused {
            tracing::info!(%key, round = self.round, "the retry no longer declares this input's capability; refused upstream");
            if let Some(id) = pending.upstream.take() {
                let request = pending.request();
                self.refuse_input(id, pending.kind, request.get("params"))
                    .await;
            }
        }
    }

    /// The backend's answer to the call: -32042 asks for URL elicitations (a further round),
    /// anything else ends the call.
    fn answered(&mut self, outcome: Result<Raw, ErrorObject>) -> Step {
        match outcome {
            Err(e) if e.code == jsonrpc::LEGACY_URL_ELICITATION_REQUIRED => self.url_required(&e),
            outcome => Step::Done(outcome.map_err(backend_error)),
        }
    }

    /// The call's last reply: the backend's outcome as a 2026-07-28 one (`retry`: it answers a
    /// retry, so it is not cacheable).
    fn finished(&self, retry: bool, outcome: Result<Raw, ErrorObject>) -> Reply {
        Reply::Done(
            self.bridge
                .finish(self.lease.session(), &self.method, retry, outcome),
        )
    }

    /// Answers a backend's input request as a client without the capability would.
    async fn refuse_input(&mut self, id: Id, kind: Kind, params: Option<&Value>) {
        let e = input::refused_answer(&self.declared, kind, params);
        let _ = self.lease.session().respond(id, Err(e)).await;
    }

    /// Backend activity while the client is away.
    async fn while_parked(&mut self, event: Option<CallEvent>) {
        match event {
            Some(CallEvent::ServerRequest { id, method, params }) => {
                self.ask(id, &method, params).await;
            }
            Some(CallEvent::Response(outcome)) => {
                self.bridge
                    .metrics
                    .upstream_duration(self.lease.session().backend(), self.backend_time());
                self.outcome = Some(outcome);
            }
            Some(CallEvent::Closed(reason) | CallEvent::Unsent(reason)) => {
                self.outcome = Some(Err(backend_failed(
                    self.lease.session().backend(),
                    " while the call waited for input",
                    &reason,
                )));
                // Nothing more goes upstream for this call: its slot is not held until the
                // client comes back (or the park expires), which would keep others waiting.
                self.lease.give_back_retired();
            }
            None => {
                self.outcome = Some(Err(backend_failed(
                    self.lease.session().backend(),
                    " while the call waited for input",
                    "its session ended",
                )));
                self.lease.give_back_retired();
            }
            Some(CallEvent::Notification { .. }) => {}
        }
    }

    /// Time the backend has spent on the current upstream request, leaving out time parked.
    fn backend_time(&self) -> Duration {
        let mut t = self.sent.elapsed().saturating_sub(self.parked_for);
        if let Some(since) = self.parked_since {
            t = t.saturating_sub(since.elapsed());
        }
        t
    }

    fn input_required(&mut self, park: ParkId, replay: Option<Transcript>) -> Value {
        let ttl = self.bridge.config.state.park_ttl;
        let claims = Claims {
            request: self.request_digest(),
            park,
            owner: self.bridge.config.state.owner.clone(),
            principal: self.principal,
            round: self.round,
            expires_at_ms: now_ms() + ttl.as_millis() as u64,
            outstanding: self.pending_keys(),
            // A replayed call has no owner to reach.
            owner_addr: match replay {
                None => self.bridge.advertise().map(str::to_owned),
                Some(_) => None,
            },
            replay,
        };
        let requests: Vec<(&String, Value)> =
            self.pending.iter().map(|(k, p)| (k, p.request())).collect();
        let mut result = input::input_required_result(
            requests.iter().map(|(k, v)| (*k, v)),
            self.bridge.keys.seal(&claims),
        );
        if let Some(meta) = self.lease.session().info().result_meta() {
            result["_meta"] = meta;
        }
        result
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
                // Only at or above the level the request asked for; a level the backend made up
                // is passed on.
                let wanted = self.meta.log_level.as_deref().and_then(meta::severity)?;
                let level = params.get("level").and_then(Value::as_str);
                if level.and_then(meta::severity).is_some_and(|l| l < wanted) {
                    return None;
                }
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
        // A stream let go while parked is picked up again to see the backend let go of the call.
        self.call.events.resume();
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
                    Some(CallEvent::Response(_) | CallEvent::Closed(_) | CallEvent::Unsent(_)) | None => return,
                }
            }
        }
    }
}

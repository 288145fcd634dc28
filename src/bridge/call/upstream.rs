//! The upstream side of a call: following the backend's events until it answers or asks (or
//! the round's deadline passes), what it says while the call is parked, answers written within
//! the deadline, issuing the call again, shaping its outcome, and abandoning it (answering its
//! open requests and cancelling it upstream, without waiting for the cancel to be taken).

use super::{CANCEL_GRACE, Params, Step, Task};
use crate::bridge::{Bridge, Reply, Request, backend_error, backend_failed, upstream_error};
use crate::jsonrpc::{self, ErrorObject, Id, Raw};
use crate::protocol::caps::Declared;
use crate::protocol::input::{self, Kind};
use crate::protocol::meta::{self};
use crate::seal::Digest;
use crate::upstream::CallEvent;
use serde_json::{Map, Value, json};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

impl Task {
    /// Follows the upstream call until it finishes or asks for input.
    pub(super) async fn drive(&mut self, reply: &mpsc::Sender<Reply>) -> Step {
        // The round ran out before the backend was waited on (in its session's start, the
        // stream's pick-up, the answers): what went out upstream is unknown, so it ends here.
        if Instant::now() >= self.deadline {
            return self.timed_out();
        }
        // Requests that arrived while parked, or answers still missing, go out at once.
        if !self.pending.is_empty() {
            return Step::Park;
        }
        let timeout = tokio::time::sleep_until(self.deadline);
        tokio::pin!(timeout);
        let mut coalesce: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                _ = reply.closed() => return Step::ClientGone,
                _ = async { tokio::time::sleep_until(coalesce.expect("guarded")).await }, if coalesce.is_some() => return Step::Park,
                _ = &mut timeout => return self.timed_out(),
                event = self.call.events.recv() => match event {
                    Some(CallEvent::Response(outcome)) => {
                        self.bridge.metrics.upstream_duration(self.lease.session().backend(), self.backend_time());
                        let step = self.answered(outcome);
                        if matches!(step, Step::Done(_)) {
                            // Before the reply: the client's next call may come for them.
                            Box::pin(self.hand_back()).await;
                        }
                        return step;
                    }
                    Some(CallEvent::Unsent(reason)) if (self.round == 0 || self.replay.is_some()) && !self.resent => {
                        // The backend's session was gone before it saw the request: once, on a new
                        // one (a replayed call starts over anyway).
                        tracing::info!(backend = %self.lease.session().backend(), "{reason}; sending the call on a new session");
                        self.resent = true;
                        match tokio::time::timeout_at(self.deadline, Box::pin(self.issue_again())).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => return Step::Done(Err(e)),
                            Err(_) => return self.timed_out(),
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
                    Some(CallEvent::ServerRequest { id, method, params, held_until }) => {
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
                        if self.ask(id, &method, params, held_until).await && coalesce.is_none() {
                            coalesce = Some(Instant::now() + self.bridge.config.state.coalesce_window);
                        }
                    }
                }
            }
        }
    }

    /// Backend activity while the client is away.
    pub(super) async fn while_parked(&mut self, event: Option<CallEvent>) {
        match event {
            Some(CallEvent::ServerRequest {
                id,
                method,
                params,
                held_until,
            }) => {
                self.ask(id, &method, params, held_until).await;
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

    /// The backend's answer to the call: -32042 asks for URL elicitations (a further round),
    /// anything else ends the call.
    pub(super) fn answered(&mut self, outcome: Result<Raw, ErrorObject>) -> Step {
        match outcome {
            Err(e) if e.code == jsonrpc::LEGACY_URL_ELICITATION_REQUIRED => self.url_required(&e),
            outcome => Step::Done(outcome.map_err(backend_error)),
        }
    }

    /// The call's last reply: the backend's outcome as a 2026-07-28 one (`retry`: it answers a
    /// retry, so it is not cacheable).
    pub(super) fn finished(&self, retry: bool, outcome: Result<Raw, ErrorObject>) -> Reply {
        Reply::Done(
            self.bridge
                .finish(self.lease.session(), &self.method, retry, outcome),
        )
    }

    /// Time the backend has spent on the current upstream request, leaving out time parked.
    pub(super) fn backend_time(&self) -> Duration {
        let mut t = self.sent.elapsed().saturating_sub(self.parked_for);
        if let Some(since) = self.parked_since {
            t = t.saturating_sub(since.elapsed());
        }
        t
    }

    /// A backend notification as the client should see it, if it should see it at all.
    pub(super) fn downstream_notification(
        &self,
        method: String,
        params: Option<Value>,
    ) -> Option<Value> {
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

    /// The round ran out of `request_timeout`. The client hears so at once: the call is
    /// cancelled upstream in the background, and its session retired (closed once its other
    /// calls end) in case the backend is stuck.
    fn timed_out(&mut self) -> Step {
        self.cancel_upstream("the call took too long");
        self.lease.retire();
        let timeout = crate::upstream::Error::Timeout(self.lease.session().backend().to_owned());
        Step::Done(Err(upstream_error(&timeout)))
    }

    /// Tells the backend the call is cancelled, without waiting for it to take the message.
    pub(super) fn cancel_upstream(&self, reason: &str) {
        self.lease.session().cancel(&self.call.id, reason);
    }

    /// Answers one of the backend's requests within the task's deadline: an answer the backend
    /// has not taken by then is given up, not waited on for a timeout of its own (in a round,
    /// the round is over and the call with it; while parked, the park).
    pub(super) async fn respond(&mut self, id: Id, outcome: Result<Value, ErrorObject>) {
        let session = self.lease.session();
        if Instant::now() < self.deadline {
            let answered = tokio::time::timeout_at(self.deadline, session.respond(id, outcome));
            if Box::pin(answered).await.is_ok() {
                return;
            }
        }
        tracing::debug!(backend = %session.backend(), round = self.round, "an answer to the backend was given up at the deadline");
    }

    /// Once the backend has answered the call, lets go of the input requests the call leaves
    /// unanswered: those that reached it within `coalesce_window` of its result (its client
    /// never saw them), those that came while it was parked, and those its client left
    /// unanswered. None is left waiting: a `roots/list` goes back to the session, which treats
    /// it as a request outside any call (held for its next call, within the deadline it was
    /// held to if it was held before: the `roots/list` a server sends from its `initialized`
    /// handler is the usual one); anything else is answered as an abandoned call answers it,
    /// the call it came in having ended. Requests still queued for the call go the same way,
    /// and the session routes later ones as outside any call.
    pub(super) async fn hand_back(&mut self) {
        let mut unanswered: Vec<(Id, Option<Kind>, Option<Instant>)> =
            std::mem::take(&mut self.pending)
                .into_iter()
                .filter_map(|(_, p)| Some((p.upstream?, Some(p.kind), p.held_until)))
                .collect();
        for event in self.call.events.close_routed().await {
            if let CallEvent::ServerRequest {
                id,
                method,
                held_until,
                ..
            } = event
            {
                unanswered.push((id, Kind::from_method(&method), held_until));
            }
        }
        if unanswered.is_empty() {
            return;
        }
        tracing::info!(backend = %self.lease.session().backend(), requests = unanswered.len(), round = self.round, "the call ended with input requests its client did not answer: roots/list goes back to the session, others are answered as abandoned");
        let session = self.lease.session();
        for (id, kind, held_until) in unanswered {
            let _ = match kind {
                Some(Kind::Roots) => session.hold_roots(id, held_until).await,
                Some(kind) => session.respond(id, input::abandoned_answer(kind)).await,
                None => session.respond(id, Err(not_supported())).await,
            };
        }
    }

    /// Ends a call the client will not finish: the call is cancelled upstream, the backend's
    /// open requests are answered as the client never would, and the session is released only
    /// once the backend has let go of the call.
    ///
    /// The cancellation goes first, while the call still waits for those answers, and is
    /// waited on (sent in the background, it could reach the backend after them). Sent after
    /// them, it would reach a backend that may be finishing the call with them at that moment,
    /// and a server on the Python SDK then drops the whole session: every other call on it
    /// (those sharing it, the next one to lease it) is told the session is gone (404). The
    /// answers still follow, for a backend that ignores cancellation.
    pub(super) async fn abandon(mut self, reason: &str) {
        // Once the upstream call has ended there is nothing to cancel.
        let ended = self.outcome.is_some() || self.reissue;
        if !ended {
            let session = self.lease.session();
            session
                .cancel_in_order(&self.call.id, reason, CANCEL_GRACE)
                .await;
        }
        for (_, pending) in std::mem::take(&mut self.pending) {
            if let Some(id) = pending.upstream {
                let _ = self
                    .lease
                    .session()
                    .respond(id, input::abandoned_answer(pending.kind))
                    .await;
            }
        }
        if ended {
            return;
        }
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
                        let answer = Kind::from_method(&method).map(input::abandoned_answer).unwrap_or_else(|| Err(not_supported()));
                        let _ = self.lease.session().respond(id, answer).await;
                    }
                    Some(CallEvent::Notification { .. }) => {}
                    Some(CallEvent::Response(_) | CallEvent::Closed(_) | CallEvent::Unsent(_)) | None => return,
                }
            }
        }
    }

    /// Sends the call again on a fresh session of the same backend.
    pub(super) async fn issue_again(&mut self) -> Result<(), ErrorObject> {
        let req = Request {
            // A legacy session numbers its requests itself.
            id: None,
            method: self.method.clone(),
            params: self.params()?,
            meta: self.meta.clone(),
            principal: self.principal,
            authorization: self.authorization.clone(),
            // Checked when the call came in; a backend never sees them.
            param_headers: Default::default(),
        };
        let interactive = Declared::from_modern(&req.meta.capabilities).is_interactive();
        let (lease, call) = self.bridge.issue(self.backend, &req, interactive).await?;
        self.lease = lease;
        self.call = call;
        Ok(())
    }

    /// The client's params (read back from their text once the call has asked for input).
    pub(super) fn params(&self) -> Result<Map<String, Value>, ErrorObject> {
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
    pub(super) fn request_digest(&mut self) -> Digest {
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
}

/// The answer to a backend request of a method no client is asked.
fn not_supported() -> ErrorObject {
    ErrorObject::new(jsonrpc::METHOD_NOT_FOUND, "not supported")
}

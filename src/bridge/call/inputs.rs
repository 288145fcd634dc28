//! The input side of a call: the backend's requests taken into a round (or refused upstream),
//! a retry's answers checked and written upstream, replay transcripts, and the
//! `InputRequiredResult` that puts a round to the client.

use super::{Pending, Step, Task};
use crate::bridge::backend_failed;
use crate::bridge::park::Resume;
use crate::bridge::replay::{self, Match};
use crate::bridge::retry::now_ms;
use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS, Id};
use crate::protocol::input::{self, Kind};
use crate::seal::{Claims, ParkId, Transcript, Turn};
use serde_json::{Value, json};
use tokio::time::Instant;

impl Task {
    /// The keys of the input requests still waiting for an answer, in the order asked.
    pub(super) fn pending_keys(&self) -> Vec<String> {
        self.pending.iter().map(|(k, _)| k.clone()).collect()
    }

    /// Replay mode: answers a push from the transcript, or asks again what is still unanswered.
    /// Gives the id back when the push is new (or there is no transcript), for [`Task::ask`].
    pub(super) async fn answer_from_transcript(
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
                self.respond(id, Ok(input::to_legacy_result(&answer))).await;
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
    pub(super) fn transcript(&self) -> Option<Transcript> {
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
    /// `held_until`: the deadline of a `roots/list` the session held before this call.
    pub(super) async fn ask(
        &mut self,
        id: Id,
        method: &str,
        params: Option<Value>,
        held_until: Option<Instant>,
    ) -> bool {
        let Some(kind) = Kind::from_method(method) else {
            let e = ErrorObject::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!("method `{method}` is not supported"),
            );
            self.respond(id, Err(e)).await;
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
            self.respond(id, Err(e)).await;
            return false;
        }
        self.next_key += 1;
        let key = format!("{}-{}", kind.as_str(), self.next_key);
        let request = input::to_input_request(kind, params.as_ref());
        self.bridge.metrics.input_request(kind.into());
        let mut pending = Pending::new(Some(id), kind, &request);
        pending.held_until = held_until;
        self.pending.push((key, pending));
        true
    }

    /// A -32042 error: ask for its URL elicitations, then issue the call again.
    pub(super) fn url_required(&mut self, e: &ErrorObject) -> Step {
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

    /// Checks a retry's answers, then writes them upstream within the round's deadline. Missing
    /// keys stay pending. The call's answer stream, if the park let it go, is picked up before
    /// the first answer goes out ([`Task::pick_up_stream`]); a malformed retry leaves it let go.
    pub(super) async fn accept(&mut self, resume: &Resume) -> Result<(), ErrorObject> {
        for (key, pending) in &self.pending {
            if let Some(answer) = resume.responses.get(key) {
                input::validate_response(pending.kind, answer).map_err(|why| {
                    ErrorObject::new(INVALID_PARAMS, format!("inputResponses[\"{key}\"]: {why}"))
                })?;
            }
        }
        Box::pin(self.pick_up_stream()).await;
        let (answered, missing) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(k, _)| resume.responses.contains_key(k));
        self.pending = missing;
        for (key, pending) in answered {
            if let Some(id) = pending.upstream {
                let answer = input::to_legacy_result(&resume.responses[&key]);
                self.respond(id, Ok(answer)).await;
            }
        }
        Ok(())
    }

    /// Answers upstream, with the refusal a client without the capability would give, the input
    /// requests this retry's capabilities no longer allow: a round only asks what its request
    /// declared.
    pub(super) async fn refuse_undeclared(&mut self) {
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

    /// Answers a backend's input request as a client without the capability would.
    pub(super) async fn refuse_input(&mut self, id: Id, kind: Kind, params: Option<&Value>) {
        let e = input::refused_answer(&self.declared, kind, params);
        self.respond(id, Err(e)).await;
    }

    pub(super) fn input_required(&mut self, park: ParkId, replay: Option<Transcript>) -> Value {
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
}

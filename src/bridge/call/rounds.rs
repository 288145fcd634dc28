//! A call's rounds: how the task goes from driving the backend to parking, waits parked for
//! its retry (or the deadline, or shutdown), picks up the answer stream it let go before the
//! retry's answers go upstream, and takes the retry in.

use super::{Step, Task, Woke};
use crate::bridge::park::{Door, Entry, Handle, Resume};
use crate::bridge::{Reply, invalid_state, upstream_error, upstream_params};
use crate::jsonrpc::ErrorObject;
use crate::metrics::{AbandonReason, RetryReason, RetryResult, StateFailure};
use crate::protocol::meta::RequestMeta;
use crate::seal::{ParkId, Transcript};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

impl Task {
    /// Serves the call's rounds until it ends: drive the backend until it answers or asks,
    /// then park until the client's retry brings the answers, and again.
    pub(super) async fn run(mut self: Box<Self>, mut reply: mpsc::Sender<Reply>) {
        let door: Arc<Door> = Arc::default();
        let mut entry: Option<Entry> = None;
        loop {
            match Box::pin(self.drive(&reply)).await {
                Step::Park => {}
                Step::Done(outcome) => {
                    let _ = reply.send(self.finished(self.round > 0, outcome)).await;
                    crate::wake::behind_woken().await;
                    return;
                }
                Step::ClientGone => {
                    return Box::pin(self.abandon("the client closed the request")).await;
                }
                Step::Refused(e) => {
                    let _ = reply.send(Reply::Done(Err(e))).await;
                    return Box::pin(self.abandon("the call could not be replayed")).await;
                }
            }
            if let Some(transcript) = self.replay_transcript() {
                return Box::pin(self.replay_round(transcript, reply)).await;
            }
            // A gateway shutting down opens no new round: the client could not retry it here.
            if self.bridge.shutdown.is_cancelled() {
                if entry.is_some() {
                    self.bridge.metrics.abandoned(AbandonReason::Shutdown);
                }
                let _ = reply
                    .send(Reply::Done(Err(crate::bridge::shutting_down())))
                    .await;
                return Box::pin(self.abandon("the gateway is shutting down")).await;
            }
            if entry.is_none() {
                match self.enter_park(&door) {
                    Ok(e) => entry = Some(e),
                    Err(full) => {
                        let _ = reply.send(Reply::Done(Err(full))).await;
                        return Box::pin(self.abandon("the gateway could not hold the call")).await;
                    }
                }
            }
            let park = entry.as_ref().expect("parked").id;
            let resume = match Box::pin(self.park(park, &door, reply)).await {
                Woke::Retry(resume) => *resume,
                Woke::Abandon(reason) => {
                    self.bridge.metrics.abandoned(reason);
                    tracing::info!(park = %park, round = self.round, reason = reason.as_str(), "parked call abandoned");
                    return Box::pin(self.abandon(match reason {
                        AbandonReason::Expired => "the client did not retry in time",
                        AbandonReason::Shutdown => "the gateway is shutting down",
                    }))
                    .await;
                }
            };
            match Box::pin(self.take_retry(resume)).await {
                Some(next) => reply = next,
                None => return,
            }
        }
    }

    /// Replay mode keeps nothing: the transcript goes into the state, the call upstream is
    /// cancelled, and the retry runs it again wherever it lands. `None` for a held call, or
    /// one that must be held from now on (its transcript is over the limit, or it waits on URL
    /// elicitations).
    pub(super) fn replay_transcript(&mut self) -> Option<Transcript> {
        self.replay.as_ref()?;
        let transcript = self.transcript();
        if transcript.is_none() {
            tracing::info!(
                round = self.round,
                "replay transcript over the limit (or a URL elicitation): the call is held instead"
            );
            self.replay = None;
        }
        transcript
    }

    /// Answers a replay-mode round with its transcript sealed in the state, and lets the
    /// upstream call go: the retry's own task goes on with the call.
    pub(super) async fn replay_round(
        mut self: Box<Self>,
        transcript: Transcript,
        reply: mpsc::Sender<Reply>,
    ) {
        self.round += 1;
        let state = self.input_required(ParkId::random(), Some(transcript));
        let _ = reply.send(Reply::Done(Ok(state.into()))).await;
        self.continues = true;
        self.abandon("the call is run again on the retry").await;
    }

    /// Registers the call as parked, within the principal's and the gateway's limits; the
    /// error the client gets when they are reached.
    pub(super) fn enter_park(&self, door: &Arc<Door>) -> Result<Entry, ErrorObject> {
        let limits = &self.bridge.config.limits;
        let handle = Handle {
            resume: door.clone(),
            backend: self.backend,
        };
        self.bridge
            .parks
            .insert(
                self.principal,
                handle,
                limits.max_parked_per_principal,
                limits.max_parked_total,
            )
            .map_err(|full| full.to_error())
    }

    /// One round: the client gets its `InputRequiredResult`, and the call waits, holding as
    /// little as it can, until a valid retry of this round, the park deadline, or shutdown.
    pub(super) async fn park(
        &mut self,
        park: ParkId,
        door: &Arc<Door>,
        reply: mpsc::Sender<Reply>,
    ) -> Woke {
        let parked_at = Instant::now();
        let deadline = parked_at + self.bridge.config.state.park_ttl;
        // What goes upstream while parked (a refusal) is bounded by the park, not the round.
        self.deadline = deadline;
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
        let woke = Box::pin(self.wait(door, &mut retry, deadline)).await;
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
        if let Woke::Retry(resume) = &woke {
            let all_answered = asked.iter().all(|k| resume.responses.contains_key(k));
            self.bridge.metrics.retry(
                if all_answered {
                    RetryResult::Resumed
                } else {
                    RetryResult::AskedAgain
                },
                RetryReason::None,
            );
        }
        woke
    }

    /// Waits, parked, for what ends the park; meanwhile the backend is still listened to.
    pub(super) async fn wait(
        &mut self,
        door: &Arc<Door>,
        retry: &mut oneshot::Receiver<Box<Resume>>,
        deadline: Instant,
    ) -> Woke {
        loop {
            tokio::select! {
                _ = self.bridge.shutdown.cancelled() => return Woke::Abandon(AbandonReason::Shutdown),
                _ = tokio::time::sleep_until(deadline) => return Woke::Abandon(AbandonReason::Expired),
                // Guarded: a finished receiver must not be polled again (each way on
                // below opens the door anew).
                resume = &mut *retry, if !retry.is_terminated() => {
                    // Only a retry takes the door's sender, and it always sends.
                    let Ok(resume) = resume else {
                        *retry = door.open(self.round);
                        continue;
                    };
                    // The door lets in only a retry of this round, whose round starts now.
                    self.deadline = Instant::now() + self.bridge.config.limits.request_timeout;
                    match Box::pin(self.accept(&resume)).await {
                        Ok(()) => return Woke::Retry(resume),
                        Err(e) => {
                            // A malformed answer leaves the park as it was: open again
                            // before the client hears of it.
                            self.deadline = deadline;
                            *retry = door.open(self.round);
                            self.bridge.metrics.retry(RetryResult::Rejected, RetryReason::InvalidResponses);
                            let _ = resume.reply.send(Reply::Done(Err(e))).await;
                        }
                    }
                }
                event = self.call.events.recv(), if self.outcome.is_none() && !self.reissue => {
                    Box::pin(self.while_parked(event)).await;
                }
            }
        }
    }

    /// Picks the call's answer stream up again if the park let it go, and waits until the
    /// backend carries it (or the pick-up gives up, or the round's deadline passes) before
    /// anything more goes upstream for the call. A backend may write the call's result as soon
    /// as it has the client's answers, and one that keeps nothing for a stream no connection
    /// carries would lose it: the call would end "without answering". A call the backend has
    /// already ended has nothing more to hear.
    pub(super) async fn pick_up_stream(&mut self) {
        if self.outcome.is_some() {
            return;
        }
        self.call.events.resume();
        let attached = tokio::time::timeout_at(self.deadline, self.call.events.attached());
        if attached.await.is_err() {
            tracing::debug!(backend = %self.lease.session().backend(), round = self.round, "the stream's pick-up was not taken before the round's deadline; the round is over");
        }
    }

    /// Takes an accepted retry in: its channel, `_meta` and capabilities become the call's. An
    /// outcome reached while parked answers it; a call ended by -32042 whose URL elicitations
    /// are all answered is issued again. The reply channel, if the call goes on.
    pub(super) async fn take_retry(&mut self, resume: Resume) -> Option<mpsc::Sender<Reply>> {
        let reply = resume.reply;
        self.meta = resume.meta;
        self.declared = self.declared.intersect(&resume.declared);
        Box::pin(self.refuse_undeclared()).await;
        if let Some(outcome) = self.outcome.take() {
            // The backend ended the call while the client was away: as when the client is
            // there, unless it asked for URL elicitation, which makes another round.
            if let Step::Done(outcome) = self.answered(outcome) {
                Box::pin(self.hand_back()).await;
                let _ = reply.send(self.finished(true, outcome)).await;
                return None;
            }
        }
        if self.reissue && self.pending.is_empty() {
            self.reissue = false;
            if let Err(e) = Box::pin(self.reissue_call()).await {
                let _ = reply.send(Reply::Done(Err(e))).await;
                return None;
            }
        }
        Some(reply)
    }

    /// Issues the call again on its session, once the URL elicitations it asked for are done.
    pub(super) async fn reissue_call(&mut self) -> Result<(), ErrorObject> {
        let params = self.params()?;
        let call = self
            .lease
            .session()
            .request(
                &self.method,
                Some(upstream_params(&params, &self.meta)),
                true,
            )
            .await
            .map_err(|e| upstream_error(&e))?;
        self.call = call;
        self.sent = Instant::now();
        self.parked_for = Duration::ZERO;
        Ok(())
    }
}

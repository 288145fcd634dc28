//! A retry's way back into its call: the requestState decided on once (`bridge::retry`),
//! then the answers handed to the call parked here, the retry forwarded to its owner, or the
//! call run again from its transcript.

use crate::bridge::forward;
use crate::bridge::park::Resume;
use crate::bridge::replay::{self, Unanswerable};
use crate::bridge::retry::{self, Decision, Retry};
use crate::bridge::{Bridge, Reply, Request, invalid_state};
use crate::jsonrpc::{ErrorObject, INVALID_PARAMS};
use crate::metrics::{RetryReason, RetryResult, StateFailure};
use crate::protocol::caps::Declared;
use crate::seal::{Claims, Transcript};
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Serves a retry: its answers go to the call they belong to, wherever that is.
pub(super) async fn resume(
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
        // A relayed call's state brought to a backend driven as legacy: not its request.
        Decision::Relay { .. } => {
            metrics.state_failure(StateFailure::Request);
            let _ = reply.send(refuse(invalid_state())).await;
            return;
        }
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
            Box::pin(replayed(
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

/// A replay-mode retry: its answers go into the transcript, and the call runs again here.
async fn replayed(
    bridge: Arc<Bridge>,
    backend: usize,
    req: Request,
    (claims, transcript): (Claims, Transcript),
    responses: Map<String, Value>,
    reply: mpsc::Sender<Reply>,
) {
    let metrics = bridge.metrics().clone();
    let turns = match replay::take_answers(transcript.turns, responses) {
        Ok(turns) => turns,
        Err(Unanswerable::Malformed) => {
            metrics.state_failure(StateFailure::Malformed);
            let _ = reply.send(Reply::Done(Err(invalid_state()))).await;
            return;
        }
        Err(Unanswerable::Invalid(e)) => {
            metrics.retry(RetryResult::Rejected, RetryReason::InvalidResponses);
            let _ = reply.send(Reply::Done(Err(e))).await;
            return;
        }
    };
    // Counted once it has passed every check, as a resumed retry is.
    metrics.retry(RetryResult::Replayed, RetryReason::None);
    super::rerun(
        bridge,
        backend,
        req,
        claims.round,
        transcript.next_key,
        replay::Run::new(turns),
        reply,
    )
    .await;
}

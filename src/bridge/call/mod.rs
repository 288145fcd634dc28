//! One MRTR-capable call (`tools/call`, `prompts/get`, `resources/read`) from first request to
//! final result. A task owns the call for its whole life: it drives the upstream call, parks
//! when the backend asks for input (coalescing requests that arrive close together into one
//! round), answers the client with an `InputRequiredResult`, and resumes on a valid retry. While
//! parked it keeps listening to the backend, so an outcome reached meanwhile is kept for the
//! retry, and at the park deadline it abandons the call explicitly.

mod inputs;
mod resume;
mod rounds;
#[cfg(test)]
mod tests;
mod upstream;

use super::park::Resume;
use super::replay::{self};
use super::{Bridge, Reply, Request};
use crate::jsonrpc::{ErrorObject, INVALID_PARAMS, Id, Raw};
use crate::metrics::{AbandonReason, RetryReason, RetryResult};
use crate::protocol::caps::Declared;
use crate::protocol::input::Kind;
use crate::protocol::meta::RequestMeta;
use crate::seal::Digest;
use crate::upstream::Lease;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
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
    /// A `roots/list` the session held before this call: its deadline there, kept in case the
    /// call gives it back (`Task::hand_back`).
    held_until: Option<Instant>,
}

impl Pending {
    fn new(upstream: Option<Id>, kind: Kind, request: &Value) -> Pending {
        Pending {
            upstream,
            kind,
            request: request.to_string().into_boxed_str(),
            held_until: None,
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
    /// When the task's current wait runs out. While the backend works on a round, the round's
    /// deadline: `request_timeout` after the round started (a first request's once it is on
    /// its session, a retry's when it reached the call), shared by the stream's pick-up, the
    /// answers written upstream, a new session for a request the first never saw, and the wait
    /// for the outcome. While the call is parked, the park's.
    deadline: Instant,
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
        (Some(state), responses) => Box::pin(async move {
            resume::resume(&bridge, backend, req, state, responses, reply, hop).await
        }),
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
    let new_call = rerun.is_none();
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
    // A rerun is a retry, whose headers were checked as it came in (`Bridge::handle`).
    let issued = if new_call {
        Box::pin(bridge.issue_new_call(backend, &req, interactive)).await
    } else {
        Box::pin(bridge.issue(backend, &req, interactive)).await
    };
    let (lease, call) = match issued {
        Ok(issued) => issued,
        Err(e) => {
            let _ = reply.send(Reply::Done(Err(e))).await;
            return None;
        }
    };
    let session_declared = lease.session().info().declared;
    // The first round starts once the request is on its session: the wait for a session
    // (`queue_wait`) and a new session's `initialize` are bounded apart, before it.
    let deadline = Instant::now() + bridge.config.limits.request_timeout;
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
        deadline,
        replay: run,
        continues: false,
        bridge,
    };
    // Boxed: an async fn's by-value `self` is kept twice in its future.
    Some((Box::new(task), reply))
}

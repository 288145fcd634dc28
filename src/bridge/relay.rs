//! The stateless relay: a 2026-07-28 client's request to a 2026-07-28 backend. The request goes
//! upstream as the client sent it (its params and `_meta`, the 2026 headers, `traceparent`);
//! the answer comes back as the backend wrote it, notifications first. The one thing the
//! gateway adds is its seal around the backend's `requestState` ([`seal::Relayed`]): a state
//! minted for one principal, backend and request cannot be taken to another, and on the retry
//! it is opened and checked once (`retry::decide`) and the backend's own state sent on. Nothing
//! is parked and nothing is kept, so any replica serves any round.

use super::retry::{self, Decision, Retry};
use super::{Bridge, Reply, Request, backend_failed, invalid_state, upstream_error};
use crate::config::{Config, Protocol, Transport};
use crate::jsonrpc::{self, ErrorObject, Id, Message, Payload};
use crate::metrics::{RetryReason, RetryResult, StateFailure};
use crate::protocol::{self, MODERN, header, meta};
use crate::seal::Relayed;
use crate::upstream::modern::{Answer, Children, Endpoint, Messages, Outgoing, Upstream};
use crate::upstream::{self, Pool, era::Era};
use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Ids for requests that come without the client's (none do from the face): each exchange
/// carries one request, so an id only needs to differ from nothing else on it.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The relay's side of each backend that may be 2026-07-28: a Streamable HTTP one on its
/// pool's HTTP client, a stdio one as children of its own, ended with `sessions`.
pub(super) fn upstreams(
    config: &Config,
    pools: &[Arc<Pool>],
    sessions: &CancellationToken,
) -> Vec<Option<Upstream>> {
    let limits = &config.limits;
    config
        .backends
        .iter()
        .zip(pools)
        .map(|(b, pool)| match (&b.transport, b.protocol) {
            (_, Protocol::Legacy) => None,
            (Transport::Http(cfg), _) => {
                let client = pool.http_client()?.clone();
                Some(Upstream::Http(Endpoint::new(b, cfg, client, limits)))
            }
            (Transport::Stdio(cfg), _) => Some(Upstream::Stdio(Children::new(
                b,
                cfg,
                limits,
                sessions.child_token(),
            ))),
            _ => None,
        })
        .collect()
}

/// Serves one request of a 2026-07-28 client on a 2026-07-28 backend.
pub(super) async fn serve(
    bridge: Arc<Bridge>,
    backend: usize,
    mut req: Request,
    reply: mpsc::Sender<Reply>,
) {
    let mut child = None;
    if let Some(state) = req.params.get("requestState").cloned() {
        match unwrap_state(&bridge, backend, &req, &state) {
            Ok((backend_state, minted_by)) => {
                req.params
                    .insert("requestState".into(), Value::String(backend_state));
                child = minted_by;
            }
            Err(e) => {
                let _ = reply.send(Reply::Done(Err(e))).await;
                return;
            }
        }
    }
    let outcome = tokio::select! {
        outcome = exchange(&bridge, backend, &req, child, &reply) => outcome,
        // The client closed its stream: dropping the exchange cancels the backend's request.
        () = reply.closed() => return,
    };
    let outcome = outcome.and_then(|(result, child)| shape(&bridge, backend, &req, result, child));
    let _ = reply.send(Reply::Done(outcome)).await;
}

/// The backend's own state from a retry's sealed one, and the stdio child that wrote it, after
/// the checks every retry passes (`retry::decide`); a refusal is the one frozen error, counted
/// under the check that failed.
fn unwrap_state(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    state: &Value,
) -> Result<(String, Option<u32>), ErrorObject> {
    let metrics = &bridge.metrics;
    let Some(state) = state.as_str() else {
        metrics.state_failure(StateFailure::Malformed);
        return Err(invalid_state());
    };
    let retry = Retry {
        backend,
        principal: &req.principal,
        method: &req.method,
        params: &req.params,
        hop: false,
    };
    match retry::decide(bridge, &retry, state) {
        Decision::Relay {
            backend_state,
            child,
        } => {
            metrics.retry(RetryResult::Relayed, RetryReason::None);
            Ok((backend_state, child))
        }
        Decision::Refuse(failed) => {
            tracing::debug!(check = failed.as_str(), "requestState refused");
            metrics.state_failure(failed);
            Err(invalid_state())
        }
        // A parked call's state brought to a backend that is relayed to: not its request.
        Decision::Resume { .. } | Decision::Forward { .. } | Decision::Replay { .. } => {
            metrics.state_failure(StateFailure::Request);
            Err(invalid_state())
        }
    }
}

/// Sends the request (a retry to the stdio child that wrote its state) and reads its answer:
/// notifications go to the client as they come; the response is returned with the stdio child
/// that answered. Bounded by `request_timeout` while nothing comes; a stream that carries
/// notifications may run longer, as a legacy call's does.
pub(super) async fn exchange(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    child: Option<u32>,
    reply: &mpsc::Sender<Reply>,
) -> Result<(jsonrpc::Raw, Option<u32>), ErrorObject> {
    let upstream: &Upstream = bridge.upstreams[backend]
        .as_ref()
        .expect("a backend relayed to is a Streamable HTTP or stdio one");
    let name = upstream.backend();
    let id = req.id.clone().unwrap_or_else(|| {
        Id::String(format!("relay-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)))
    });
    let sent = tokio::time::Instant::now();
    let out = Outgoing {
        id: &id,
        method: &req.method,
        params: &req.params,
        headers: headers(req),
        authorization: req.authorization.as_ref(),
        child,
        principal: Some(&req.principal),
    };
    let answer = upstream
        .send(out)
        .await
        .map_err(|f| backend_failed(name, "", &f.describe()))?;
    let mut answered_by = None;
    let response = match answer {
        Answer::Json(msgs) => read_json(bridge, backend, msgs, &id, reply).await?,
        Answer::Stream(stream) => {
            answered_by = stream.child();
            // A listen stream is quiet until something changes, for as long as the client
            // stays; any other stream is bounded as a call is.
            let quiet =
                (req.method != protocol::LISTEN).then_some(bridge.config.limits.request_timeout);
            Box::pin(read_stream(name, stream, &id, reply, quiet)).await?
        }
    };
    bridge.metrics.upstream_duration(name, sent.elapsed());
    match response {
        Ok(raw) => Ok((raw, answered_by)),
        Err(e) => {
            if e.code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION {
                // A backend that stopped speaking 2026-07-28: the next call probes it again.
                let why = "a request refused with -32022";
                bridge.eras[backend].forget(Era::Modern, why, &bridge.metrics);
            }
            // Kept as the backend wrote it: its code picks the client's HTTP status, as the
            // gateway's own errors' codes do.
            Err(e)
        }
    }
}

/// Reads a JSON answer: its notifications go to the client, its response is returned. An
/// error for no request of ours is how a legacy server refuses a request without a session
/// ("Missing session ID"): the backend's era no longer holds.
async fn read_json(
    bridge: &Bridge,
    backend: usize,
    msgs: Vec<Message>,
    id: &Id,
    reply: &mpsc::Sender<Reply>,
) -> Result<Result<jsonrpc::Raw, ErrorObject>, ErrorObject> {
    let name = &bridge.config.backends[backend].name;
    let (mut response, mut refused) = (None, None);
    for msg in msgs {
        match msg {
            Message::Response { id: got, outcome } if &got == id => response = Some(outcome),
            Message::Notification { .. } => {
                let _ = reply.send(Reply::Notification(msg.into_value())).await;
            }
            Message::Response {
                outcome: Err(e), ..
            } => refused = Some(e.message),
            _ => {}
        }
    }
    match (response, refused) {
        (Some(response), _) => Ok(response),
        (None, Some(why)) => {
            bridge.eras[backend].forget(Era::Modern, &why, &bridge.metrics);
            let why = format!("refused the request: {why}");
            Err(backend_failed(name, "", &why))
        }
        (None, None) => Err(backend_failed(name, "", "answered without a response")),
    }
}

/// Reads an event stream to its response, handing notifications to the client.
async fn read_stream(
    backend: &str,
    mut stream: Messages,
    id: &Id,
    reply: &mpsc::Sender<Reply>,
    quiet: Option<std::time::Duration>,
) -> Result<Result<jsonrpc::Raw, ErrorObject>, ErrorObject> {
    let timed_out = || upstream_error(&upstream::Error::Timeout(backend.to_owned()));
    loop {
        let next = match quiet {
            Some(quiet) => tokio::time::timeout(quiet, stream.next())
                .await
                .map_err(|_| timed_out())?,
            None => stream.next().await,
        };
        match next {
            Some(Ok(Message::Response { id: got, outcome })) if &got == id => return Ok(outcome),
            Some(Ok(msg @ Message::Notification { .. })) => {
                // Awaited: this exchange is the only thing reading the backend's stream, so a
                // client that reads slowly slows its own backend stream and nothing else.
                let _ = reply.send(Reply::Notification(msg.into_value())).await;
            }
            Some(Ok(Message::Request { method, .. })) => {
                // 2026-07-28 servers do not send requests; there is nobody to answer it.
                tracing::warn!(%backend, %method, "a 2026-07-28 backend sent a request; ignored");
            }
            Some(Ok(Message::Response { .. })) => {}
            Some(Err(why)) => return Err(backend_failed(backend, "", &why)),
            None => {
                return Err(backend_failed(
                    backend,
                    "",
                    "its event stream ended without a response",
                ));
            }
        }
    }
}

/// The 2026 headers, as a 2026-07-28 client sends them: the version, the method, the name of
/// a named request, every `Mcp-Param-*` the client sent, and its trace context.
fn headers(req: &Request) -> Vec<(HeaderName, HeaderValue)> {
    let mut h = vec![(
        header::MCP_PROTOCOL_VERSION,
        HeaderValue::from_static(MODERN),
    )];
    if let Ok(method) = HeaderValue::from_str(&req.method) {
        h.push((header::MCP_METHOD, method));
    }
    let field = if req.method == "resources/read" {
        "uri"
    } else {
        "name"
    };
    if protocol::is_mrtr_method(&req.method)
        && let Some(name) = req.params.get(field).and_then(Value::as_str)
        && let Ok(value) = HeaderValue::from_str(&header::encode_value(name))
    {
        h.push((header::MCP_NAME, value));
    }
    h.extend(
        req.param_headers
            .iter()
            .map(|(name, value)| (name, value.clone())),
    );
    if let Some(trace) = &req.meta.trace {
        let pairs = [
            (meta::TRACEPARENT, Some(&trace.traceparent)),
            (meta::TRACESTATE, trace.tracestate.as_ref()),
        ];
        for (name, value) in pairs {
            if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                h.push((HeaderName::from_static(name), v));
            }
        }
    }
    h
}

/// The members of a result the relay decides on, read without building the rest of it.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<Cow<'a, str>>,
}

/// The backend's result as the client gets it: a valid 2026-07-28 result, its requestState
/// sealed, the serverInfo rule applied, within the reply limit. A complete result the gateway
/// has nothing to change in passes as the backend wrote it, never built into a tree.
fn shape(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    raw: jsonrpc::Raw,
    child: Option<u32>,
) -> Result<Payload, ErrorObject> {
    let config = &bridge.config.backends[backend];
    let name = &config.name;
    // A derived `Deserialize` takes an array for a struct too: only an object is a result.
    let head = Some(raw.get().trim_start())
        .filter(|text| text.starts_with('{'))
        .and_then(|text| serde_json::from_str::<Head>(text).ok())
        .ok_or_else(|| invalid_result(name, "a result that is not an object"))?;
    let text = match head.result_type.as_deref() {
        Some("complete") if config.server_info && req.method != "server/discover" => {
            raw.get().to_owned()
        }
        Some("complete" | "input_required") => reshape(bridge, backend, req, &raw, child)?,
        Some(_) => return Err(invalid_result(name, "a result of an unknown resultType")),
        None => return Err(invalid_result(name, "a result without resultType")),
    };
    let (bytes, limit) = (text.len(), bridge.config.limits.max_reply_bytes);
    if bytes > limit {
        tracing::warn!(backend = %name, method = %req.method, bytes, limit, "a result over limits.max_reply_bytes");
        return Err(ErrorObject::new(
            jsonrpc::INTERNAL_ERROR,
            format!(
                "backend `{name}` returned a result too large to send: {bytes} bytes, over the \
                 limit of {limit} bytes for one reply (limits.max_reply_bytes)"
            ),
        ));
    }
    Ok(Payload::Text(text))
}

/// A result the gateway changes: an input_required one's requestState sealed, the backend's
/// serverInfo taken out when `server_info = false`, `server/discover`'s versions set.
fn reshape(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    raw: &jsonrpc::Raw,
    child: Option<u32>,
) -> Result<String, ErrorObject> {
    let config = &bridge.config.backends[backend];
    let mut result = raw
        .to_value()
        .map_err(|_| invalid_result(&config.name, "a result that is not JSON"))?;
    let Some(fields) = result.as_object_mut() else {
        return Err(invalid_result(
            &config.name,
            "a result that is not an object",
        ));
    };
    if fields.get("resultType").and_then(Value::as_str) == Some("input_required") {
        seal_state(bridge, backend, req, fields, child)?;
    }
    if !config.server_info
        && let Some(Value::Object(m)) = fields.get_mut("_meta")
    {
        m.remove(meta::SERVER_INFO);
    }
    if req.method == "server/discover" {
        // The client speaks 2026-07-28 to the gateway, whatever else the backend speaks.
        fields.insert("supportedVersions".into(), Value::from(vec![MODERN]));
    }
    Ok(result.to_string())
}

/// An `InputRequiredResult`: its `inputRequests` pass as the backend wrote them; its
/// `requestState`, if it has one, goes out inside the gateway's seal with the stdio child that
/// wrote it.
fn seal_state(
    bridge: &Bridge,
    backend: usize,
    req: &Request,
    fields: &mut Map<String, Value>,
    child: Option<u32>,
) -> Result<(), ErrorObject> {
    let name = &bridge.config.backends[backend].name;
    if !fields.get("inputRequests").is_some_and(Value::is_object) {
        return Err(invalid_result(
            name,
            "an input_required result without inputRequests",
        ));
    }
    let state = match fields.get("requestState") {
        None => return Ok(()),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(invalid_result(name, "a requestState that is not a string")),
    };
    let ttl = bridge.config.state.park_ttl;
    let relayed = Relayed {
        principal: req.principal,
        backend: bridge.config.backends[backend].path.clone(),
        request: Bridge::request_digest(&req.method, &req.params),
        expires_at_ms: retry::now_ms() + ttl.as_millis() as u64,
        state,
        child,
    };
    let sealed = bridge.keys.seal_relayed(&relayed);
    fields.insert("requestState".into(), Value::String(sealed));
    Ok(())
}

/// -31001 for a backend that claims 2026-07-28 and answered something that is not 2026-07-28.
fn invalid_result(backend: &str, what: &str) -> ErrorObject {
    tracing::warn!(%backend, "a 2026-07-28 backend answered {what}");
    backend_failed(
        backend,
        "",
        &format!("it is set to speak {MODERN} and answered {what}"),
    )
}

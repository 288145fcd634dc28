//! One request's POST and everything its answer carries, delivered to its [`Sink`] (the
//! call's own stream, or the session task's queue for `initialize`): a JSON answer read whole,
//! or an event stream pumped until the response goes by (and picked up again if it breaks off
//! first). A 404 on a known session reports the request unsent and the session over.

use super::endpoint::{Endpoint, has_session, post_headers};
use super::link::{Failure, Link, Sink, content_type, status_failure};
use super::resume::resume;
use super::streams::{Cursor, deliver, is_response_to, report};
use crate::jsonrpc::Id;
use crate::protocol::header::MCP_SESSION_ID;
use crate::sse::DecodeError;
use crate::upstream::h1::Body;
use crate::upstream::session::{Inbound, Mark};
use http::{Method, StatusCode};

/// [`request`], unless the session has already closed: then the backend never saw it, and it is
/// reported unsent.
///
/// A call's own request runs to its verdict even if the session closes meanwhile: the backend
/// still answers it, or refuses it (404) as unsent, and the call's deadline bounds the wait.
pub(super) async fn unless_closed(
    ep: Endpoint,
    sink: Sink,
    id: Id,
    method: String,
    msg: Vec<u8>,
    mark: Option<Mark>,
) {
    if ep.link.stop.is_cancelled() {
        let reason = "the session ended before the request was sent".to_owned();
        let unsent = Some(id);
        return report(&sink, Inbound::Ended { reason, unsent }).await;
    }
    request(&ep, &sink, id, &method, msg, mark).await
}

/// A request that failed: logged, and its call told why.
async fn failed(sink: &Sink, link: &Link, method: &str, id: &Id, why: String) {
    tracing::warn!(backend = %link.backend, %method, "{why}");
    report(sink, Inbound::failed(id, why)).await;
}

/// One request's POST and everything its answer carries.
async fn request(
    ep: &Endpoint,
    sink: &Sink,
    id: Id,
    method: &str,
    msg: Vec<u8>,
    mark: Option<Mark>,
) {
    let (link, ids, url) = (&*ep.link, &*ep.ids, &ep.url);
    let known_session = has_session(ids);
    let resp = match link
        .exchange(Method::POST, url, &post_headers(ids), Some(&msg))
        .await
    {
        Ok(r) => r,
        Err(f) => return failed(sink, link, method, &id, f.describe()).await,
    };
    // Sent: the answer stream may stay open for as long as the call is parked.
    drop(msg);
    if method == "initialize"
        && let Some(sid) = resp.headers().get(MCP_SESSION_ID)
    {
        ids.lock().expect("ids lock").session = Some(sid.clone());
    }
    let status = resp.status();
    if status == StatusCode::NOT_FOUND && known_session {
        return report(
            sink,
            Inbound::Ended {
                reason: Failure::Gone.describe(),
                unsent: Some(id),
            },
        )
        .await;
    }
    if status == StatusCode::ACCEPTED {
        // 202 is for notifications and responses: a request must be answered with JSON or an
        // event stream, so this call would wait for nothing.
        let why = "answered a request with 202 Accepted and no response";
        return failed(sink, link, method, &id, why.to_owned()).await;
    }
    if !status.is_success() {
        let f = Box::pin(status_failure(resp, link)).await;
        return failed(sink, link, method, &id, f.describe()).await;
    }
    match content_type(&resp).as_str() {
        "application/json" => json_answer(sink, link, method, &id, resp.into_body()).await,
        "text/event-stream" => stream_answer(ep, sink, method, &id, resp.into_body(), mark).await,
        other => {
            let why = format!("answered with Content-Type `{other}`, not JSON or an event stream");
            failed(sink, link, method, &id, why).await;
        }
    }
}

/// An answer in one JSON body: its messages are delivered, and the call fails if none of them
/// is the response.
async fn json_answer(sink: &Sink, link: &Link, method: &str, id: &Id, body: Body) {
    match Box::pin(link.read_json(body)).await {
        Ok(msgs) => {
            let answered = msgs.iter().any(|m| is_response_to(m, Some(id)));
            if deliver(sink, msgs).await && !answered {
                report(
                    sink,
                    Inbound::failed(id, "answered without a response to the request"),
                )
                .await;
            }
        }
        Err(f) => failed(sink, link, method, id, f.describe()).await,
    }
}

/// An answer on an event stream: pumped until it ends, then picked up again if the response
/// has not gone by.
async fn stream_answer(
    ep: &Endpoint,
    sink: &Sink,
    method: &str,
    id: &Id,
    body: Body,
    mark: Option<Mark>,
) {
    let link = &*ep.link;
    let mut cursor = Cursor {
        mark,
        ..Cursor::default()
    };
    // Boxed, like the other phases: a request's task holds only the phase it is in.
    match Box::pin(link.pump(sink, body, Some(id), &mut cursor, None)).await {
        // A numbered stream that broke off (a proxy's read timeout, a reset) is picked up
        // below like one that ended early.
        Err(DecodeError::Stream(why)) if cursor.last_id.is_some() => {
            tracing::debug!(backend = %link.backend, %method, "the response stream broke off ({why}); resuming it");
        }
        Err(e) => {
            return failed(sink, link, method, id, e.to_string()).await;
        }
        Ok(_) => {}
    }
    if !cursor.answered {
        Box::pin(resume(ep, sink, id, cursor, None)).await;
    }
}

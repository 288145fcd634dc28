//! Streamable HTTP (2025-03-26 .. 2025-11-25) at `/mcp`: sessions by `Mcp-Session-Id`,
//! request POSTs answered over SSE or JSON, the standalone GET stream and its resumption,
//! DELETE, and the deliberately broken answers some tool names get.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};

use super::streams::{self, Opened};
use super::{
    Body, Handled, HttpError, HttpSession, Kind, Posted, Server, classify, header_str,
    json_response, read_posted, sse_response, status_only, typed,
};
use crate::legacy_server::SUPPORTED_PROTOCOL_VERSIONS;

/// Default size of the `huge_event` tool's event.
const HUGE_EVENT_DEFAULT: u64 = 8 * 1024 * 1024;
/// The most `huge_event` will send, whatever it is asked for.
const HUGE_EVENT_MAX: u64 = 256 * 1024 * 1024;

pub(super) async fn handle(server: &Arc<Server>, req: Request<Incoming>) -> Handled {
    if let Some(version) = header_str(req.headers(), "mcp-protocol-version") {
        if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
            return Err(HttpError::UnsupportedVersion(version.to_owned()));
        }
    }
    let session_id = header_str(req.headers(), "mcp-session-id").map(str::to_owned);
    match *req.method() {
        Method::POST => post(server, req, session_id).await,
        Method::GET => {
            let last = header_str(req.headers(), "last-event-id").map(str::to_owned);
            get(server, session_id, last)
        }
        Method::DELETE => {
            let session = existing(server, session_id)?;
            server.end_session(&session);
            Ok(status_only(StatusCode::OK))
        }
        _ => Err(HttpError::MethodNotAllowed),
    }
}

fn existing(server: &Server, session_id: Option<String>) -> Result<Arc<HttpSession>, HttpError> {
    server.session(&session_id.ok_or(HttpError::MissingSession)?)
}

fn with_session(mut resp: Response<Body>, session: &HttpSession) -> Response<Body> {
    if let Ok(value) = header::HeaderValue::from_str(&session.id) {
        resp.headers_mut().insert("mcp-session-id", value);
    }
    resp
}

fn is_initialize(posted: &Posted) -> bool {
    !posted.batch
        && posted.msgs[0].get("method").and_then(Value::as_str) == Some("initialize")
        && posted.msgs[0].get("id").is_some()
}

async fn post(server: &Arc<Server>, req: Request<Incoming>, session_id: Option<String>) -> Handled {
    let posted = read_posted(req, server.opts.http.max_body_bytes).await?;
    let session = match session_id {
        Some(id) => server.session(&id)?,
        None if is_initialize(&posted) => server.create_session()?,
        None => return Err(HttpError::MissingSession),
    };
    if let Some(resp) = misbehave(&posted) {
        return Ok(with_session(resp, &session));
    }

    let mut keys = Vec::new();
    for msg in &posted.msgs {
        match classify(msg) {
            Some(Kind::Request(key)) => keys.push(key),
            Some(Kind::Notification)
                if msg.get("method").and_then(Value::as_str) == Some("notifications/cancelled") =>
            {
                // No response will come for a cancelled request: its stream must not wait.
                if let Some(id) = msg.pointer("/params/requestId") {
                    session.streams().cancel(&streams::id_key(id));
                }
            }
            _ => {}
        }
    }
    if keys.is_empty() {
        session.deliver(posted.msgs).await?;
        return Ok(with_session(status_only(StatusCode::ACCEPTED), &session));
    }
    let opened = session.streams().open_post(&keys);
    let opened = opened?;
    session.deliver(posted.msgs).await?;
    let resp = match opened {
        Opened::Sse(rx) => sse_response(rx, None),
        Opened::Json(done) => {
            let mut responses = done.await.map_err(|_| HttpError::SessionEnded)?;
            if posted.batch || server.opts.http.batch_responses {
                json_response(StatusCode::OK, &Value::Array(responses))
            } else if let Some(response) = responses.pop() {
                json_response(StatusCode::OK, &response)
            } else {
                // The request was cancelled: there is nothing to answer with.
                status_only(StatusCode::ACCEPTED)
            }
        }
    };
    Ok(with_session(resp, &session))
}

fn get(server: &Server, session_id: Option<String>, last_event_id: Option<String>) -> Handled {
    let session = existing(server, session_id)?;
    let opened = match &last_event_id {
        Some(last) => session.streams().resume(last),
        None => session.streams().open_standalone(None),
    };
    Ok(with_session(sse_response(opened?, None), &session))
}

/// Tool names whose calls get a broken answer from the HTTP layer itself, so that a client's
/// handling of bad input can be tested. Only that one POST is affected.
fn misbehave(posted: &Posted) -> Option<Response<Body>> {
    if posted.batch {
        return None;
    }
    let msg = &posted.msgs[0];
    if msg.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let name = msg.pointer("/params/name").and_then(Value::as_str)?;
    match name {
        "garbage" => Some(typed(
            StatusCode::OK,
            "application/json",
            super::full("this is not json{"),
        )),
        "html" => Some(typed(
            StatusCode::OK,
            "text/html; charset=utf-8",
            super::full(
                "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\
                 <body><h1>Bad Gateway</h1></body></html>\n",
            ),
        )),
        "huge_event" => {
            let size = msg
                .pointer("/params/arguments/bytes")
                .and_then(Value::as_u64)
                .unwrap_or(HUGE_EVENT_DEFAULT)
                .min(HUGE_EVENT_MAX);
            Some(huge_event(size))
        }
        "stray_response" => {
            let stray = json!({"jsonrpc": "2.0", "id": "mrtr-stray-response", "result": {}});
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let _ = tx.try_send(streams::encode(None, &stray));
            Some(sse_response(rx, None))
        }
        _ => None,
    }
}

/// An event stream whose first event's data is `size` bytes long, produced in chunks so
/// that it never sits in memory whole.
fn huge_event(size: u64) -> Response<Body> {
    const CHUNK: usize = 64 * 1024;
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    let chunk_len = CHUNK as u64;
    let full_chunks = size / chunk_len;
    let rest = usize::try_from(size % chunk_len).unwrap_or(0);
    let frames = std::iter::once(Bytes::from_static(b"event: message\ndata: "))
        .chain((0..full_chunks).map(move |_| chunk.clone()))
        .chain(std::iter::once(Bytes::from(vec![b'x'; rest])))
        .chain(std::iter::once(Bytes::from_static(b"\n\n")))
        .map(|bytes| Ok::<_, std::convert::Infallible>(Frame::data(bytes)));
    typed(
        StatusCode::OK,
        "text/event-stream",
        StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync(),
    )
}

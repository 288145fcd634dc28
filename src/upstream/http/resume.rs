//! Picking Streamable HTTP streams up again with GET + `Last-Event-ID`: a request's answer
//! stream that ended (or was let go) before its response ([`resume`]), and the standalone GET
//! stream for pushes unrelated to any POST, kept open while the session lives
//! ([`standalone`]). Both pick a quiet stream up again, since a backend may lose an event in
//! the hand-over.

use super::endpoint::{Endpoint, has_session, stream_headers};
use super::link::{Failure, Link, Sink, content_type};
use super::streams::{Cursor, Ending, MAX_BACKOFF, report};
use crate::jsonrpc::Id;
use crate::sse::DecodeError;
use crate::upstream::h1::Body;
use crate::upstream::session::Inbound;
use http::{Method, StatusCode};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

/// How many times in a row one request's stream is resumed with `Last-Event-ID` without
/// progress before giving up: with the waits between them, about 1.3 s, or eight of the
/// backend's `retry` hints when those are longer.
const MAX_RESUMES: u32 = 8;
/// The first wait before resuming again after a pick-up that brought nothing; it doubles.
const RESUME_BACKOFF: Duration = Duration::from_millis(10);
/// How long a picked-up stream may stay quiet before it is picked up again, at first...
const QUIET_FIRST: Duration = Duration::from_millis(500);
/// ...and at most.
const QUIET_MAX: Duration = Duration::from_secs(30);

/// How one pick-up of a request's stream went.
enum PickUp {
    /// The GET failed or was refused: try again, if attempts remain.
    Refused,
    /// The stream ended or broke off; whether it made progress is in the cursor.
    Ended,
    /// The stream carried nothing for the time it was given: a live stream, not a refusal.
    Quiet,
    /// The call has its outcome (or nobody listens): stop.
    Over,
}

/// A request's stream ended before its response: resume it with `Last-Event-ID` if the backend
/// gave event ids (2025-11-25), else fail the call. `attached`, if given, is sent as soon as a
/// pick-up's head is in (the backend carries the stream again), and dropped if none ever is.
///
/// A picked-up stream that stays quiet is picked up again, from the same event, after
/// [`QUIET_FIRST`], then after twice as long each time, up to [`QUIET_MAX`]. Backends may lose an
/// event they write as a GET takes their stream over: the Python SDK stores it, but hands it to
/// no connection, when it comes between the replay and the hand-over to the new connection. Only
/// a new pick-up replays it; without one, the call would wait for its deadline. For a tool that is
/// still running, a quiet pick-up costs a new GET that replays nothing.
pub(super) async fn resume(
    ep: &Endpoint,
    sink: &Sink,
    id: &Id,
    mut cursor: Cursor,
    mut attached: Option<oneshot::Sender<()>>,
) {
    let mut attempts = 0;
    let mut quiet = QUIET_FIRST;
    while !cursor.answered {
        let Some(last) = cursor.last_id.clone().filter(|_| attempts < MAX_RESUMES) else {
            let why = "ended the response stream without answering";
            tracing::warn!(backend = %ep.link.backend, %id, "{why}");
            return report(sink, Inbound::failed(id, why)).await;
        };
        pause(attempts, cursor.retry).await;
        attempts += 1;
        let before = cursor.last_id.clone();
        match pick_up(ep, sink, id, &mut cursor, &last, quiet, &mut attached).await {
            PickUp::Refused => continue,
            PickUp::Over => return,
            PickUp::Quiet => {
                quiet = (quiet * 2).min(QUIET_MAX);
                attempts = 0; // a live stream, not a refusal
            }
            PickUp::Ended => {}
        }
        if cursor.last_id != before {
            attempts = 0; // progress: the stream is alive
        }
    }
}

/// Waits before pick-up number `attempts` (from 0): the backend's `retry` hint, or, when a
/// pick-up has just brought nothing, a short wait that doubles: a backend may refuse a GET for
/// a stream until it has seen the previous one closed. A zero wait is skipped, not slept: the
/// timer would still round it up.
async fn pause(attempts: u32, retry: Duration) {
    let backoff = match attempts {
        0 => Duration::ZERO,
        n => RESUME_BACKOFF * 2u32.pow(n - 1),
    };
    let wait = retry.max(backoff);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

/// One GET for request `id`'s stream after event `last`, pumped until it ends or stays quiet
/// for `quiet`. `attached` is sent once the backend has answered with the stream.
async fn pick_up(
    ep: &Endpoint,
    sink: &Sink,
    id: &Id,
    cursor: &mut Cursor,
    last: &str,
    quiet: Duration,
    attached: &mut Option<oneshot::Sender<()>>,
) -> PickUp {
    let link = &*ep.link;
    let headers = stream_headers(&ep.ids, Some(last));
    let resp = match link.exchange(Method::GET, &ep.url, &headers, None).await {
        Ok(r) => r,
        Err(f) => {
            tracing::debug!(backend = %link.backend, "resuming a stream failed: {}", f.describe());
            return PickUp::Refused;
        }
    };
    if resp.status() == StatusCode::NOT_FOUND {
        // The session is over, and the call with it: one word says both, so whoever reads it
        // (the call or the session task) ends the session before anything else goes out.
        report(sink, Inbound::ended(Failure::Gone.describe())).await;
        return PickUp::Over;
    }
    if !resp.status().is_success() || content_type(&resp) != "text/event-stream" {
        tracing::debug!(backend = %link.backend, status = %resp.status(), "resuming a stream was refused");
        return PickUp::Refused;
    }
    // The backend carries the stream again: what it writes for the request from now on comes
    // here, so the call may send what the backend waits for.
    if let Some(attached) = attached.take() {
        let _ = attached.send(());
    }
    match link
        .pump(sink, resp.into_body(), Some(id), cursor, Some(quiet))
        .await
    {
        Err(DecodeError::Stream(why)) => {
            tracing::debug!(backend = %link.backend, %id, "a picked-up stream broke off ({why}); picking it up again");
            PickUp::Ended
        }
        Err(e) => {
            report(sink, Inbound::failed(id, e.to_string())).await;
            PickUp::Over
        }
        Ok(Ending::Quiet) => {
            tracing::debug!(backend = %link.backend, %id, after = ?quiet, "a picked-up stream went quiet: picking it up again");
            PickUp::Quiet
        }
        Ok(Ending::Unheard) => PickUp::Over,
        Ok(Ending::Closed) => PickUp::Ended,
    }
}

/// What the standalone stream does after one opening.
enum Next {
    /// Open it again at once (after the backend's `retry` hint only).
    Again,
    /// Open it again after the backoff.
    Reopen,
    /// The session is over, or nobody listens.
    Stop,
}

/// The standalone GET stream: pushes unrelated to any POST. Reopened with backoff while the
/// session lives; a backend that offers none (405, or 404 without a session id) is left alone.
///
/// Picked up with `Last-Event-ID` once its events have ids, it can lose an event in the
/// hand-over as a call's stream can (see [`resume`]), so a picked-up stream that stays quiet is
/// picked up again after [`QUIET_FIRST`], doubling to [`QUIET_MAX`] while nothing comes, back to
/// [`QUIET_FIRST`] once it has carried a message (an empty priming event is no message).
pub(super) async fn standalone(ep: Endpoint) {
    let Endpoint { link, ids, url } = ep;
    let mut cursor = Cursor::default();
    let mut backoff = Duration::from_millis(100);
    let mut quiet = QUIET_FIRST;
    loop {
        let picked_up = cursor.last_id.is_some();
        let headers = stream_headers(&ids, cursor.last_id.as_deref());
        let opened = tokio::select! {
            _ = link.stop.cancelled() => return,
            r = link.exchange(Method::GET, &url, &headers, None) => r,
        };
        match opened {
            // Without a session id a 404 cannot mean a forgotten session: a stateless backend
            // routes no GET.
            Ok(resp)
                if resp.status() == StatusCode::METHOD_NOT_ALLOWED
                    || (resp.status() == StatusCode::NOT_FOUND && !has_session(&ids)) =>
            {
                tracing::debug!(backend = %link.backend, status = %resp.status(), "backend offers no standalone stream");
                return;
            }
            Ok(resp) if resp.status() == StatusCode::NOT_FOUND => {
                return report(&link.inbound, Inbound::ended(Failure::Gone.describe())).await;
            }
            Ok(resp)
                if resp.status().is_success() && content_type(&resp) == "text/event-stream" =>
            {
                backoff = Duration::from_millis(100);
                let body = resp.into_body();
                match follow(&link, body, &mut cursor, &mut quiet, picked_up).await {
                    Next::Again => continue,
                    Next::Reopen => {}
                    Next::Stop => return,
                }
            }
            Ok(resp) => {
                tracing::debug!(backend = %link.backend, status = %resp.status(), "standalone stream refused");
            }
            Err(f) => {
                tracing::debug!(backend = %link.backend, "standalone stream: {}", f.describe());
            }
        }
        let wait = backoff.max(cursor.retry.min(MAX_BACKOFF));
        tokio::select! {
            _ = link.stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Reads the opened standalone stream into the session task's queue until it ends (or, when
/// `picked_up`, stays quiet for `quiet`).
async fn follow(
    link: &Link,
    body: Body,
    cursor: &mut Cursor,
    quiet: &mut Duration,
    picked_up: bool,
) -> Next {
    let delivered = cursor.delivered;
    let watch = picked_up.then_some(*quiet);
    let pumped = tokio::select! {
        _ = link.stop.cancelled() => return Next::Stop,
        r = link.pump(&link.inbound, body, None, cursor, watch) => r,
    };
    if cursor.delivered != delivered {
        *quiet = QUIET_FIRST;
    }
    match pumped {
        Ok(Ending::Quiet) => {
            tracing::debug!(backend = %link.backend, after = ?*quiet, "the picked-up standalone stream went quiet: picking it up again");
            *quiet = (*quiet * 2).min(QUIET_MAX);
            // Only the backend's `retry` hint: a quiet stream is no refusal.
            tokio::select! {
                _ = link.stop.cancelled() => return Next::Stop,
                _ = tokio::time::sleep(cursor.retry) => {}
            }
            Next::Again
        }
        Ok(Ending::Unheard) => Next::Stop,
        Ok(Ending::Closed) => Next::Reopen,
        Err(e) => {
            // The backend went away in the middle of the stream: it may be back as something
            // else, which the pool's next lease has probed.
            tracing::warn!(backend = %link.backend, "standalone stream: {e}");
            link.restarted.store(true, Ordering::Release);
            Next::Reopen
        }
    }
}

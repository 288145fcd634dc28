//! Reading an SSE answer: [`Link::pump`] turns a body's events into messages for the session
//! task's queue or a call's own (the [`Sink`]), and notes in a [`Cursor`] where the stream got
//! to (its last event id and `retry`), so it can be picked up again. Shared by both HTTP
//! transports.

use super::link::{Link, Sink};
use crate::jsonrpc::{self, Id, Message};
use crate::sse::{self, DecodeError};
use crate::upstream::h1::Body;
use crate::upstream::session::{Inbound, Mark};
use futures_util::{Stream, StreamExt};
use http::HeaderValue;
use std::time::Duration;
use tokio::sync::mpsc;

/// Longest wait between reconnects of the standalone GET stream, and the cap on a server's
/// `retry` hint.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Link {
    /// Pumps an SSE body into the session task until it ends, recording in `cursor` where the
    /// stream got to (last event id, `retry`) and whether the response to `awaited` went by.
    /// With `quiet`, it also stops when the stream has carried nothing for that long.
    pub async fn pump(
        &self,
        sink: &Sink,
        body: Body,
        awaited: Option<&Id>,
        cursor: &mut Cursor,
        quiet: Option<Duration>,
    ) -> Result<Ending, DecodeError> {
        let mut events = events(body, self.max_message);
        loop {
            let next = match quiet {
                None => events.next().await,
                Some(quiet) => match tokio::time::timeout(quiet, events.next()).await {
                    Ok(next) => next,
                    Err(_) => return Ok(Ending::Quiet),
                },
            };
            let Some(event) = next else {
                return Ok(Ending::Closed);
            };
            let event = event?;
            if let Some(ms) = event.retry_ms {
                cursor.retry = Duration::from_millis(ms).min(MAX_BACKOFF);
            }
            if event.event == "message" && !event.data.is_empty() {
                match jsonrpc::parse_many(event.data.as_bytes(), self.max_depth) {
                    Ok(msgs) => {
                        if msgs.iter().any(|m| is_response_to(m, awaited)) {
                            cursor.answered = true;
                        }
                        cursor.delivered += msgs.len();
                        if !deliver(sink, msgs).await {
                            return Ok(Ending::Unheard);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(backend = %self.backend, "backend sent an SSE event that is not JSON-RPC: {e}")
                    }
                }
            }
            // Noted once delivered: a stream picked up again from here loses nothing.
            if let Some(id) = event.id {
                cursor.passed(id);
            }
        }
    }
}

/// How a pumped stream stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The backend ended it.
    Closed,
    /// It carried nothing for the time it was given.
    Quiet,
    /// Nobody takes what it carries any more.
    Unheard,
}

/// Hands messages to `sink`; false once nobody listens.
pub(crate) async fn deliver(sink: &Sink, msgs: Vec<Message>) -> bool {
    for msg in msgs {
        if sink.send(Box::new(Inbound::Message(msg))).await.is_err() {
            return false;
        }
    }
    true
}

/// Hands one thing the backend said (or a failure) to `sink`, whether or not anyone listens.
pub(crate) async fn report(sink: &Sink, inbound: Inbound) {
    let _ = sink.send(Box::new(inbound)).await;
}

/// Where a stream got to, for resuming it.
#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    pub last_id: Option<String>,
    pub retry: Duration,
    pub answered: bool,
    /// Messages delivered from the stream so far.
    pub delivered: usize,
    /// Shares `last_id` with a call that may let the stream go while parked.
    pub mark: Option<Mark>,
}

impl Cursor {
    /// Notes an event id. One that cannot be sent back as `Last-Event-ID` (a control character)
    /// leaves the stream with no point to be picked up from: neither resumed nor let go.
    pub(super) fn passed(&mut self, id: String) {
        let id = HeaderValue::from_str(&id).is_ok().then_some(id);
        if let Some(mark) = &self.mark {
            mark.lock().expect("mark lock").clone_from(&id);
        }
        self.last_id = id;
    }
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor {
            last_id: None,
            retry: Duration::from_secs(1),
            answered: false,
            delivered: 0,
            mark: None,
        }
    }
}

/// The next inbound event of an HTTP transport (cancel-safe: a channel receive).
pub(crate) async fn next(rx: &mut mpsc::Receiver<Box<Inbound>>) -> Inbound {
    rx.recv()
        .await
        .map_or_else(|| Inbound::ended("the transport stopped"), |i| *i)
}

pub(super) fn is_response_to(msg: &Message, awaited: Option<&Id>) -> bool {
    matches!((msg, awaited), (Message::Response { id, .. }, Some(want)) if id == want)
}

/// The SSE events of a body, each bounded by `max` bytes.
pub(crate) fn events(
    body: Body,
    max: usize,
) -> impl Stream<Item = Result<sse::Event, DecodeError>> + Send + Unpin {
    let bytes = http_body_util::BodyDataStream::new(body);
    sse::decode(bytes, max)
}

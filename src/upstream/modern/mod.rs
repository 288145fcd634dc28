//! 2026-07-28 backends: one exchange a request, no `initialize`, no session, since the
//! protocol keeps no state between requests. Over Streamable HTTP (`http`) a request is a POST
//! on the backend's pooled connections; over stdio (`stdio`) it is a line to one of a small
//! pool of children that every principal shares. Either way the answer is JSON messages or a
//! stream of them, the request's notifications and then its response, under the client's id.
//! The relay (`bridge::relay`) and the era probe (`era`) are the callers.

mod http;
mod stdio;

pub(crate) use http::Endpoint;
pub(crate) use stdio::Children;

use super::http::Failure;
use crate::jsonrpc::{Id, Message};
use crate::seal::Digest;
use ::http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::time::Duration;

/// A 2026-07-28 backend, or one that may be (`protocol = "auto"`).
#[derive(Debug)]
pub(crate) enum Upstream {
    Http(Endpoint),
    Stdio(Children),
}

/// One request as it goes to the backend.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    /// The id the answer comes back under (a stdio child sees one of its own).
    pub id: &'a Id,
    pub method: &'a str,
    pub params: &'a Map<String, Value>,
    /// The 2026 headers (HTTP only).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The client's `Authorization`, for a backend whose policy is `pass` (HTTP only).
    pub authorization: Option<&'a HeaderValue>,
    /// The stdio child a retry goes back to: the one that wrote its state.
    pub child: Option<u32>,
    /// Whose request it is: a stdio child's log messages never reach another principal.
    pub principal: Option<&'a Digest>,
}

/// What a backend answered to one request.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A JSON body (under any status: 2026-07-28 errors come with 4xx), as messages.
    Json(Vec<Message>),
    /// Notifications for the request, then its response, read as they come.
    Stream(Messages),
}

/// The messages of one request's answer stream. Dropping it before the response cancels the
/// request: over HTTP the stream (and its connection) closes, over stdio the child gets
/// `notifications/cancelled`.
#[derive(Debug)]
pub(crate) enum Messages {
    Events(http::Events),
    Child(stdio::Replies),
}

impl Messages {
    /// The next message, `None` at the end of the stream; a broken stream is an error.
    pub async fn next(&mut self) -> Option<Result<Message, String>> {
        match self {
            Messages::Events(events) => events.next().await,
            Messages::Child(replies) => replies.next().await,
        }
    }

    /// The stdio child answering, whose index a relayed state carries.
    pub fn child(&self) -> Option<u32> {
        match self {
            Messages::Events(_) => None,
            Messages::Child(replies) => Some(replies.child()),
        }
    }
}

impl Upstream {
    pub fn backend(&self) -> &str {
        match self {
            Upstream::Http(endpoint) => endpoint.backend(),
            Upstream::Stdio(children) => children.backend(),
        }
    }

    /// How long the probe waits for its answer.
    pub fn probe_timeout(&self) -> Duration {
        match self {
            Upstream::Http(endpoint) => endpoint.probe_timeout(),
            Upstream::Stdio(children) => children.probe_timeout(),
        }
    }

    /// Sends one request and returns the head of its answer.
    pub async fn send(&self, out: Outgoing<'_>) -> Result<Answer, Failure> {
        match self {
            Upstream::Http(endpoint) => endpoint.send(&out).await,
            Upstream::Stdio(children) => children.send(&out).await.map(Answer::Stream),
        }
    }

    /// Sends the era probe. Over stdio it is the first line of a new child, since a stdio
    /// server takes its era from its first message; the children of an era no longer held go.
    pub async fn probe(&self, out: Outgoing<'_>) -> Result<Answer, Failure> {
        match self {
            Upstream::Http(endpoint) => endpoint.send(&out).await,
            Upstream::Stdio(children) => children.probe(&out).await.map(Answer::Stream),
        }
    }

    /// Waits for what the backend still has running to end, once shutdown has ended it.
    pub async fn closed(&self) {
        if let Upstream::Stdio(children) = self {
            children.closed().await;
        }
    }

    /// Told that the probe found the backend legacy: a stdio child that was spoken to in
    /// 2026-07-28 is ended, as the legacy pool starts its own with `initialize`.
    pub async fn found_legacy(&self) {
        if let Upstream::Stdio(children) = self {
            children.end_all().await;
        }
    }
}

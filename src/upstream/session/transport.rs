//! What a backend connection gives the session: a [`Transport`] the session task owns (stdio
//! lines, Streamable HTTP, HTTP+SSE) and, on Streamable HTTP, a [`Direct`] way for calls to
//! send their own requests and read the answers. Both hand over what the backend said as
//! [`Inbound`].

use crate::jsonrpc::{Id, Message};
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// What a transport hands the session task.
#[derive(Debug)]
pub(crate) enum Inbound {
    Message(Message),
    /// One request failed in transit; the session goes on.
    Failed {
        id: Id,
        reason: String,
    },
    /// The connection or the backend's session is over. `unsent` names a request the backend
    /// never saw (its session was already gone), which may be sent again on a new session.
    Ended {
        reason: String,
        unsent: Option<Id>,
    },
}

impl Inbound {
    pub fn failed(id: &Id, reason: impl Into<String>) -> Inbound {
        Inbound::Failed {
            id: id.clone(),
            reason: reason.into(),
        }
    }

    pub fn ended(reason: impl Into<String>) -> Inbound {
        Inbound::Ended {
            reason: reason.into(),
            unsent: None,
        }
    }
}

/// A connection to one legacy session: stdio lines, Streamable HTTP, or HTTP+SSE.
pub(crate) trait Transport: Send + 'static {
    /// Sends one message. An error means the connection is unusable.
    fn send(&mut self, msg: Value) -> impl Future<Output = Result<(), String>> + Send;
    /// The next thing the backend said. Must be cancel-safe: the task selects on it.
    fn recv(&mut self) -> impl Future<Output = Inbound> + Send;
    /// The handshake is over and `version` was negotiated.
    fn ready(&mut self, _version: &str) {}
    /// A way for calls to send their requests and read the answers themselves, if the transport
    /// gives each request its own answer stream.
    fn direct(&self) -> Option<Arc<dyn Direct>> {
        None
    }
    /// Ends the connection politely (close stdin, DELETE the session).
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Where a call's own answer stream got to: the id of the last event it delivered, if the
/// backend numbers its events.
pub(crate) type Mark = Arc<std::sync::Mutex<Option<String>>>;

/// Requests sent by the calls themselves (Streamable HTTP: one POST and answer stream each).
pub(crate) trait Direct: Send + Sync + std::fmt::Debug {
    /// Sends `msg` (a request's JSON text) and delivers everything its answer carries to
    /// `sink`, noting in `mark` the last event delivered, until the answer is complete.
    fn post(
        &self,
        id: Id,
        method: String,
        msg: Vec<u8>,
        sink: mpsc::Sender<Box<Inbound>>,
        mark: Option<Mark>,
    ) -> BoxFuture<'static, ()>;
    /// Picks up request `id`'s answer stream after event `last`, as [`Direct::post`] reads it.
    /// `attached` is sent once the backend has taken the pick-up (its stream's head is in),
    /// and dropped unsent if the pick-up gives up first.
    fn resume(
        &self,
        id: Id,
        last: String,
        sink: mpsc::Sender<Box<Inbound>>,
        mark: Mark,
        attached: oneshot::Sender<()>,
    ) -> BoxFuture<'static, ()>;
    /// Sends a message that opens no answer stream (an answer to the backend, a notification)
    /// straight from the caller. An error means the session is gone.
    fn send(&self, msg: Value) -> BoxFuture<'static, Result<(), String>>;
    /// Sends a one-way message without waiting for the backend to take it: the session owns
    /// the send, which gives up after a short while and stops when the session closes.
    fn send_detached(&self, msg: Value);
    /// Whether a parked call may let its stream go and pick it up again later.
    fn releases_parked(&self) -> bool;
    /// The session task's queue, for what a call's stream carries that is not the call's.
    fn session_queue(&self) -> &mpsc::Sender<Box<Inbound>>;
}

//! How a call reads what it hears: [`Events`], fed by the session task's routing and, when the
//! transport gives each request its own answer stream (Streamable HTTP), by that stream too
//! ([`OwnStream`]). A parked call may let its stream go and pick it up again at its retry
//! ([`Events::release`], [`Events::resume`]), waiting until the backend carries it again
//! before the retry's answers go out ([`Events::attached`]); a finished call's stream is read to
//! its end when it is dropped, so its connection can be used again.

use super::transport::{Inbound, Mark};
use super::{CALL_EVENTS, CallEvent, Session};
use crate::jsonrpc::{Id, Message};
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a finished call's answer stream may take to end on its own.
const DRAIN: Duration = Duration::from_secs(2);

/// What the session task routes to a call.
type Routed = Option<mpsc::Receiver<Box<CallEvent>>>;

/// What a call hears, in order. Events travel boxed: a channel allocates room for 32 of them up
/// front, and a parked call keeps its channel for as long as it waits.
#[derive(Debug)]
pub struct Events {
    /// What the session task routes to the call; none for a call on its own stream that the
    /// session never hears of (no input and no progress can be routed to it).
    routed: Routed,
    /// The call's own answer stream, when the transport lets calls read it themselves.
    own: Option<Box<OwnStream>>,
}

impl Events {
    /// A call whose every event the session task routes.
    pub(super) fn routed(rx: mpsc::Receiver<Box<CallEvent>>) -> Events {
        Events {
            routed: Some(rx),
            own: None,
        }
    }

    /// A call that reads its own answer stream, and hears from the session task through
    /// `routed` if it registered there.
    pub(super) fn own(routed: Routed, own: Box<OwnStream>) -> Events {
        Events {
            routed,
            own: Some(own),
        }
    }

    /// The next event; `None` once the session has let go of the call.
    pub async fn recv(&mut self) -> Option<CallEvent> {
        let Some(own) = self.own.as_deref_mut() else {
            return next_from(&mut self.routed).await.map(|e| *e);
        };
        loop {
            tokio::select! {
                biased;
                event = next_from(&mut self.routed), if own.registered => {
                    if let Some(event) = own.routed(event) {
                        return Some(event);
                    }
                }
                inbound = next_from(&mut own.rx) => match inbound {
                    Some(inbound) => {
                        // Boxed: the call's future would otherwise keep room for it while
                        // it waits, parked, for anything else.
                        if let Some(event) = Box::pin(own.take(*inbound)).await {
                            return Some(event);
                        }
                    }
                    None => return own.stream_over(&mut self.routed).await,
                },
                _ = async { own.pump.as_mut().expect("guarded").await }, if own.pump.is_some() => {
                    own.pump = None;
                }
            }
        }
    }

    /// Stops taking what the session routes to the call, and returns what was already on its
    /// way: from now on the session treats the backend's requests as outside any call, so a
    /// call that ends leaves none of them unanswered in its queue.
    pub async fn close_routed(&mut self) -> Vec<CallEvent> {
        let Some(mut routed) = self.routed.take() else {
            return Vec::new();
        };
        routed.close();
        let mut queued = Vec::new();
        // Read to `None`, not while events are ready: an event the session had room for
        // before the close still lands.
        while let Some(event) = routed.recv().await {
            queued.push(*event);
        }
        queued
    }

    /// Lets go of the call's answer stream while the call waits for its client, if the backend
    /// numbers its events: the stream can then be picked up again where it stopped, and a
    /// parked call holds no connection meanwhile. Until [`Events::resume`], only the session's
    /// routing reaches the call. True if the stream was let go.
    pub fn release(&mut self) -> bool {
        let Some(own) = self.own.as_deref_mut() else {
            return false;
        };
        let numbered = own
            .mark
            .as_ref()
            .is_some_and(|m| m.lock().expect("mark lock").is_some());
        // Everything the stream delivered must have been taken: what the pump still holds
        // would be lost with it. And the session must still route to the call (it has not
        // ended), or nothing would reach the call until the retry.
        let drained = own.rx.as_ref().is_none_or(|rx| rx.is_empty());
        if own.released || own.pump.is_none() || !own.registered || !numbered || !drained {
            return false;
        }
        own.pump = None;
        own.attaching = None;
        // Nothing will come on the stream's channel any more: a parked call keeps none.
        own.rx = None;
        own.released = true;
        true
    }

    /// Picks the answer stream up again after [`Events::release`], from the last event the
    /// call received. The pick-up goes out when the call next waits for events, or at once
    /// with [`Events::attached`].
    pub fn resume(&mut self) {
        let Some(own) = self.own.as_deref_mut() else {
            return;
        };
        let (Some(direct), Some(mark)) = (own.session.inner.direct.clone(), own.mark.clone())
        else {
            return;
        };
        if !own.released {
            return;
        }
        let Some(last) = mark.lock().expect("mark lock").clone() else {
            return;
        };
        let (sink, rx) = mpsc::channel(CALL_EVENTS);
        let (attached, attaching) = oneshot::channel();
        own.rx = Some(rx);
        own.streaming = true;
        own.released = false;
        own.attaching = Some(attaching);
        own.pump = Some(direct.resume(own.id.clone(), last, sink, mark, attached));
    }

    /// Waits until the stream [`Events::resume`] picks up is attached again: the backend has
    /// answered the pick-up with the stream, so whatever it writes for the call from then on
    /// reaches the call. A backend that keeps nothing for a stream while no connection carries
    /// it would lose, say, the result it writes as soon as it has the client's answer. At once
    /// when no pick-up is under way; also over when the pick-up gives up (the call hears why).
    pub async fn attached(&mut self) {
        let Some(own) = self.own.as_deref_mut() else {
            return;
        };
        let Some(mut attaching) = own.attaching.take() else {
            return;
        };
        tokio::select! {
            biased;
            // Polled here, the pump sends the pick-up; what the stream then carries waits in
            // its channel for the call's next `recv`.
            _ = async { own.pump.as_mut().expect("guarded").await }, if own.pump.is_some() => {
                own.pump = None;
            }
            _ = &mut attaching => {}
        }
    }
}

/// Hands the session task something a call's own stream carried, to be routed; false if the
/// session task no longer takes anything.
async fn to_session(session: &Session, inbound: Inbound) -> bool {
    match &session.inner.direct {
        Some(direct) => direct.session_queue().send(Box::new(inbound)).await.is_ok(),
        None => false,
    }
}

/// A call's own stream said the session is over: it is dead before anyone hears of it (so a
/// call sent again never lands on it), and the session task is told.
pub(super) async fn session_ended(session: &Session, reason: String) {
    session.inner.alive.store(false, Ordering::Release);
    let unsent = None;
    to_session(session, Inbound::Ended { reason, unsent }).await;
}

/// The next message on a channel the call may not have (no routing channel, or its own stream
/// let go); `None` once it is over, or at once without one.
async fn next_from<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => None,
    }
}

/// A call's own POST and answer stream: the response and the call's progress come straight to
/// the call; the backend's requests and anything else go to the session task to be routed.
pub(super) struct OwnStream {
    id: Id,
    progress: Option<String>,
    /// Whether the session task routes to this call too (interactive, or with a progress token).
    registered: bool,
    /// The session's word that it ended, kept until the call's own stream has had its say.
    closed: Option<CallEvent>,
    /// Whether the stream may still carry something (`rx` has not reported its end).
    streaming: bool,
    /// The last event id the call received from its stream, when the transport may let a
    /// parked call's stream go.
    mark: Option<Mark>,
    /// The stream was let go while the call is parked ([`Events::release`]).
    released: bool,
    /// Told once a pick-up ([`Events::resume`]) has the stream again; dropped if it gives up.
    attaching: Option<oneshot::Receiver<()>>,
    /// Sends the request and reads its answer into `rx`; polled while the call waits for events.
    pump: Option<BoxFuture<'static, ()>>,
    /// What the pump delivers; `None` while the stream is let go.
    rx: Option<mpsc::Receiver<Box<Inbound>>>,
    session: Session,
}

impl std::fmt::Debug for OwnStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnStream")
            .field("id", &self.id)
            .field("registered", &self.registered)
            .field("pumping", &self.pump.is_some())
            .finish_non_exhaustive()
    }
}

impl OwnStream {
    /// The stream of request `id`, which `pump` sends and reads into `rx`.
    pub(super) fn new(
        id: Id,
        progress: Option<String>,
        registered: bool,
        mark: Option<Mark>,
        pump: BoxFuture<'static, ()>,
        rx: mpsc::Receiver<Box<Inbound>>,
        session: Session,
    ) -> Box<OwnStream> {
        Box::new(OwnStream {
            id,
            progress,
            registered,
            closed: None,
            streaming: true,
            mark,
            released: false,
            attaching: None,
            pump: Some(pump),
            rx: Some(rx),
            session,
        })
    }

    /// What the call hears of one event the session task routed to it, if anything now.
    fn routed(&mut self, event: Option<Box<CallEvent>>) -> Option<CallEvent> {
        match event {
            // The session ended, but the call's own stream may still say how it went
            // (answered, or never seen by the backend and safe to send again): kept until the
            // stream is over, since a finished request's last word may still wait in `rx`.
            Some(event) if matches!(*event, CallEvent::Closed(_)) && self.streaming => {
                self.closed = Some(*event);
                self.registered = false;
                None
            }
            Some(event) => Some(*event),
            None => {
                self.registered = false;
                None
            }
        }
    }

    /// The stream is over; the session may still route to the call.
    async fn stream_over(&mut self, routed: &mut Routed) -> Option<CallEvent> {
        self.streaming = false;
        if self.registered {
            return next_from(routed).await.map(|e| *e);
        }
        self.closed.take()
    }

    /// What the call hears of one thing its stream carried, if anything.
    async fn take(&mut self, inbound: Inbound) -> Option<CallEvent> {
        let mine = |id: &Id| *id == self.id;
        match inbound {
            Inbound::Message(Message::Response { id, outcome }) if mine(&id) => {
                self.finish();
                Some(CallEvent::Response(outcome))
            }
            Inbound::Message(Message::Notification { method, params })
                if self.hears(&method, params.as_ref()) =>
            {
                Some(CallEvent::Notification { method, params })
            }
            Inbound::Failed { id, reason } if mine(&id) => {
                self.finish();
                Some(CallEvent::Closed(reason))
            }
            Inbound::Ended { reason, unsent } => {
                let event = if unsent.as_ref().is_some_and(mine) {
                    CallEvent::Unsent(reason.clone())
                } else {
                    CallEvent::Closed(reason.clone())
                };
                session_ended(&self.session, reason).await;
                self.finish();
                Some(event)
            }
            other => self.pass_on(other).await,
        }
    }

    /// Whether a notification on the call's stream is the call's: a log message, or progress
    /// with the call's token.
    fn hears(&self, method: &str, params: Option<&Value>) -> bool {
        method == "notifications/message"
            || (method == "notifications/progress"
                && self.progress.is_some()
                && params
                    .and_then(|p| p.get("progressToken"))
                    .and_then(Value::as_str)
                    == self.progress.as_deref())
    }

    /// Hands the session task what the stream carried that is not the call's.
    async fn pass_on(&mut self, other: Inbound) -> Option<CallEvent> {
        let Inbound::Message(Message::Request { method, .. }) = &other else {
            to_session(&self.session, other).await;
            return None;
        };
        // A request of the backend's is answered through the session: once the session is
        // over, nobody can, and the call would wait for its deadline.
        let method = method.clone();
        if self.session.is_alive() && to_session(&self.session, other).await {
            return None;
        }
        self.finish();
        Some(CallEvent::Closed(format!(
            "the backend sent `{method}` after its session ended; it cannot be answered"
        )))
    }

    /// The call has its outcome: the session task stops routing to it.
    fn finish(&mut self) {
        if self.registered {
            self.session.forget(self.id.clone());
            self.registered = false;
        }
    }
}

impl Drop for OwnStream {
    /// A stream that is still open once the call is done is read to its end, so its connection
    /// can be used again: at once when the rest has already arrived, else in the background
    /// (briefly). The session's end is passed on; anything else it carries is dropped.
    fn drop(&mut self) {
        let (Some(mut pump), Some(rx)) = (self.pump.take(), self.rx.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Most streams end right behind their answer: when the rest is already here, the
        // stream is finished now instead of in a task of its own.
        if futures_util::FutureExt::now_or_never(pump.as_mut()).is_some() {
            self.finish_now(&runtime, rx);
            return;
        }
        let session = self.session.clone();
        runtime.spawn(drain(session, pump, rx));
    }
}

impl OwnStream {
    /// Passes on the session's end, if the finished stream carried it. The pump was the only
    /// sender: what it sent is all in `rx`.
    fn finish_now(&self, runtime: &tokio::runtime::Handle, mut rx: mpsc::Receiver<Box<Inbound>>) {
        let mut ended = None;
        while let Ok(inbound) = rx.try_recv() {
            if let Inbound::Ended { reason, .. } = *inbound {
                ended = Some(reason);
            }
        }
        if let Some(reason) = ended {
            let session = self.session.clone();
            runtime.spawn(async move { session_ended(&session, reason).await });
        }
    }
}

/// Reads a finished call's stream to its end (for at most [`DRAIN`]), passing on only the
/// session's end.
async fn drain(
    session: Session,
    pump: BoxFuture<'static, ()>,
    mut rx: mpsc::Receiver<Box<Inbound>>,
) {
    let read = async {
        while let Some(inbound) = rx.recv().await {
            // The session's end still counts: no new call may land on it.
            if let Inbound::Ended { reason, .. } = *inbound {
                session_ended(&session, reason).await;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN, futures_util::future::join(pump, read)).await;
}

//! The task that owns one session's transport from the end of the handshake to the close:
//! commands from calls ([`Cmd`]) go out, everything the backend says goes through the
//! [`Router`], held requests expire, and at the end every call still waiting hears why (those
//! whose request never went out may be sent again on a new session).

use super::router::Router;
use super::transport::{Inbound, Transport};
use super::{CallEvent, EventTx};
use crate::jsonrpc::{ErrorObject, Id, Message};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a [`Session`](super::Session) handle asks of its task.
pub(crate) enum Cmd {
    /// A new call: its id and event channel are made by the caller, so sending it is one hop.
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
        interactive: bool,
        events: EventTx,
    },
    Respond {
        id: Id,
        outcome: Result<Value, ErrorObject>,
    },
    Notify {
        method: String,
        params: Option<Value>,
    },
    /// The call is over for the gateway: stop routing to it.
    Forget { id: Id },
    /// A `roots/list` a call gives back unseen by its client ([`Session::hold_roots`]).
    ///
    /// [`Session::hold_roots`]: super::Session::hold_roots
    HoldRoots { id: Id, held_until: Option<Instant> },
    /// A call that sends its request itself: route the session's requests and its progress to it.
    Register {
        id: Id,
        progress: Option<String>,
        interactive: bool,
        events: EventTx,
    },
}

/// Why the session ended, and the request the backend never saw, if one was named.
struct End {
    reason: String,
    unsent: Option<Id>,
}

impl End {
    fn because(reason: impl Into<String>) -> End {
        End {
            reason: reason.into(),
            unsent: None,
        }
    }
}

/// The session task: commands from calls go out, everything the backend says is routed. A plain
/// function around an `async move` block: an `async fn` would keep each argument twice in its
/// future (as passed and as moved into its body) for as long as the session lives.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would keep its arguments twice"
)]
pub(super) fn run<T: Transport>(
    mut transport: T,
    mut cmds: mpsc::Receiver<Box<Cmd>>,
    mut router: Router,
    shutdown: CancellationToken,
    alive: Arc<AtomicBool>,
) -> impl Future<Output = T> {
    async move {
        let end = serve(&mut transport, &mut cmds, &mut router, &shutdown).await;
        tracing::info!(backend = %router.backend, "upstream session ended: {}", end.reason);
        // Dead before any call hears of it, so a call sent again never lands here.
        alive.store(false, Ordering::Release);
        let_calls_go(&mut cmds, &mut router, end).await;
        transport
    }
}

/// Serves the session until it ends.
async fn serve<T: Transport>(
    transport: &mut T,
    cmds: &mut mpsc::Receiver<Box<Cmd>>,
    router: &mut Router,
    shutdown: &CancellationToken,
) -> End {
    loop {
        let held = router.next_deadline();
        // Biased: commands first, so a call registered before its request went out is known
        // before anything the backend says about it.
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                flush(transport, cmds).await;
                return End::because("the gateway is shutting down");
            }
            _ = async { tokio::time::sleep_until(held.expect("guarded")).await }, if held.is_some() => {
                if let Err(e) = Box::pin(send_all(transport, router.expire_held(Instant::now()))).await {
                    return End::because(e);
                }
            }
            cmd = cmds.recv() => {
                let Some(cmd) = cmd else { return End::because("the session was closed") };
                if let Err(e) = command(transport, router, *cmd).await {
                    return End::because(e);
                }
            }
            inbound = transport.recv() => {
                if let Err(end) = hear(transport, router, inbound).await {
                    return end;
                }
            }
        }
    }
}

/// At shutdown: answers and notifications already queued (an abandoned call's cancel) still go
/// out; calls not yet started hear that the gateway is shutting down.
async fn flush<T: Transport>(transport: &mut T, cmds: &mut mpsc::Receiver<Box<Cmd>>) {
    while let Ok(cmd) = cmds.try_recv() {
        let msg = match *cmd {
            Cmd::Respond { id, outcome } => crate::jsonrpc::response(Some(&id), outcome),
            Cmd::Notify { method, params } => Message::Notification { method, params }.into_value(),
            Cmd::Request { events, .. } | Cmd::Register { events, .. } => {
                events.try_send(CallEvent::Closed("the gateway is shutting down".into()));
                continue;
            }
            // The session closes: its held requests go unanswered with it.
            Cmd::Forget { .. } | Cmd::HoldRoots { .. } => continue,
        };
        if Box::pin(transport.send(msg)).await.is_err() {
            break;
        }
    }
}

/// Carries out one command of a call's; an error (the transport's) ends the session.
async fn command<T: Transport>(
    transport: &mut T,
    router: &mut Router,
    cmd: Cmd,
) -> Result<(), String> {
    let msg = match cmd {
        Cmd::Request {
            id,
            method,
            params,
            interactive,
            events,
        } => router.start(id, events, method, params, interactive).await,
        Cmd::Respond { id, outcome } => crate::jsonrpc::response(Some(&id), outcome),
        Cmd::Notify { method, params } => Message::Notification { method, params }.into_value(),
        Cmd::Forget { id } => {
            router.forget(&id);
            return Ok(());
        }
        Cmd::HoldRoots { id, held_until } => match router.hold_roots(id, held_until).await {
            Some(answer) => answer,
            None => return Ok(()),
        },
        Cmd::Register {
            id,
            progress,
            interactive,
            events,
        } => {
            router.register(id, events, progress, interactive).await;
            return Ok(());
        }
    };
    // Boxed so an idle session's task holds only its select, not a send in progress.
    Box::pin(transport.send(msg)).await
}

/// Deals with one thing the transport handed over; the session's end, if it ended.
async fn hear<T: Transport>(
    transport: &mut T,
    router: &mut Router,
    inbound: Inbound,
) -> Result<(), End> {
    match inbound {
        Inbound::Message(msg) => {
            let out = Box::pin(router.route(msg)).await;
            Box::pin(send_all(transport, out))
                .await
                .map_err(End::because)
        }
        Inbound::Failed { id, reason } => {
            tracing::warn!(backend = %router.backend, %id, "request failed: {reason}");
            Box::pin(router.fail(&id, reason, false)).await;
            Ok(())
        }
        Inbound::Ended { reason, unsent } => Err(End { reason, unsent }),
    }
}

/// The session is over: every call still waiting hears why.
async fn let_calls_go(cmds: &mut mpsc::Receiver<Box<Cmd>>, router: &mut Router, end: End) {
    let End { reason, unsent } = end;
    if let Some(id) = unsent {
        router.fail(&id, reason.clone(), true).await;
    }
    // Requests queued behind the end never went out: they may go to a new session.
    cmds.close();
    while let Ok(cmd) = cmds.try_recv() {
        match *cmd {
            Cmd::Request { events, .. } => events.try_send(CallEvent::Unsent(format!(
                "the session ended before the request was sent: {reason}"
            ))),
            // Its request went out by itself: whether the backend saw it is unknown.
            Cmd::Register { events, .. } => events.try_send(CallEvent::Closed(reason.clone())),
            _ => {}
        }
    }
    router.close_all(&reason).await;
}

async fn send_all<T: Transport>(transport: &mut T, msgs: Vec<Value>) -> Result<(), String> {
    for msg in msgs {
        transport.send(msg).await?;
    }
    Ok(())
}

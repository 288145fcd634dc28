//! Unit tests of the session handle and what its calls hear, over scripted transports.

use super::router::{Router, Rules};
use super::task::Cmd;
use super::transport::{Direct, Inbound, Mark};
use super::{CallEvent, Error, EventTx, InitInfo, InitResults, Session};
use crate::jsonrpc::{Id, Message};
use crate::protocol::caps::Declared;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio::sync::{Mutex, mpsc};

/// What a scripted backend streams in answer to a POST of request `id`.
type Post = Box<dyn Fn(Id, mpsc::Sender<Box<Inbound>>) -> BoxFuture<'static, ()> + Send + Sync>;

/// A backend whose answer stream to a POST is `post(id, sink)`; nothing else happens.
struct Scripted {
    queue: mpsc::Sender<Box<Inbound>>,
    post: Post,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripted")
    }
}

impl Direct for Scripted {
    fn post(
        &self,
        id: Id,
        _method: String,
        _msg: Vec<u8>,
        sink: mpsc::Sender<Box<Inbound>>,
        _mark: Option<Mark>,
    ) -> BoxFuture<'static, ()> {
        (self.post)(id, sink)
    }

    fn resume(
        &self,
        _id: Id,
        _last: String,
        _sink: mpsc::Sender<Box<Inbound>>,
        _mark: Mark,
        _attached: tokio::sync::oneshot::Sender<()>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    fn send(&self, _msg: Value) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn send_detached(&self, _msg: Value) {}

    fn releases_parked(&self) -> bool {
        false
    }

    fn session_queue(&self) -> &mpsc::Sender<Box<Inbound>> {
        &self.queue
    }
}

/// A call's own request that the backend refused as unsent (404), while the session task,
/// ending for the same reason, tells the call it closed: the refusal lands first, the word
/// from the session after the request is done.
fn refused_while_closing(
    cmds: mpsc::Receiver<Box<Cmd>>,
    queue: mpsc::Sender<Box<Inbound>>,
) -> Scripted {
    let cmds = Arc::new(Mutex::new(cmds));
    Scripted {
        queue,
        post: Box::new(move |id, sink: mpsc::Sender<Box<Inbound>>| {
            let cmds = cmds.clone();
            Box::pin(async move {
                let Some(cmd) = cmds.lock().await.recv().await else {
                    panic!("the call registers before it posts");
                };
                let Cmd::Register { events, .. } = *cmd else {
                    panic!("expected Register");
                };
                let reason = "forgot the session".to_owned();
                let unsent = Some(id);
                let _ = sink.send(Box::new(Inbound::Ended { reason, unsent })).await;
                let _ = events.send(CallEvent::Closed("session ended".into())).await;
            })
        }),
    }
}

/// A backend whose answer stream carries a request of its own, for a session task that no
/// longer takes anything; the stream then stays open, as the backend waits for an answer.
fn asks_after_the_end(queue: mpsc::Sender<Box<Inbound>>) -> Scripted {
    Scripted {
        queue,
        post: Box::new(|_id, sink: mpsc::Sender<Box<Inbound>>| {
            Box::pin(async move {
                let ask = Message::Request {
                    id: Id::Number(7),
                    method: "elicitation/create".into(),
                    params: None,
                };
                let _ = sink.send(Box::new(Inbound::Message(ask))).await;
                std::future::pending::<()>().await;
            })
        }),
    }
}

/// A session past its handshake with no capability declared, fed by `cmd`.
fn live_session(
    cmd: mpsc::Sender<Box<Cmd>>,
    cmd_wait: Duration,
    direct: Option<Arc<dyn Direct>>,
) -> Session {
    let info = InitInfo {
        protocol_version: "2025-11-25".into(),
        result: Arc::new(json!({})),
        server_info: None,
        declared: Declared::default(),
    };
    let alive = Arc::new(AtomicBool::new(true));
    Session::new(1, "b".into(), cmd, cmd_wait, info, alive, direct)
}

#[tokio::test]
async fn a_request_that_cannot_reach_the_ended_session_fails_its_call_at_once() {
    let (cmd, _cmds) = mpsc::channel(8);
    let (queue, session_side) = mpsc::channel(8);
    drop(session_side);
    let direct = Arc::new(asks_after_the_end(queue));
    let session = live_session(cmd, Duration::from_secs(5), Some(direct));
    let mut call = session
        .request("tools/call", Some(json!({"name": "t"})), true)
        .await
        .expect("request");
    let event = tokio::time::timeout(Duration::from_secs(5), call.events.recv())
        .await
        .expect("the call hears at once");
    let Some(CallEvent::Closed(reason)) = event else {
        panic!("the call fails: {event:?}");
    };
    assert!(reason.contains("elicitation/create"), "{reason}");
}

#[tokio::test]
async fn a_session_task_that_takes_no_command_fails_its_callers_in_time() {
    let (cmd, _stuck) = mpsc::channel(1);
    let session = live_session(cmd, Duration::from_millis(100), None);
    session.notify("n", None).await.expect("room for one");
    let sent = tokio::time::timeout(Duration::from_secs(5), session.request("ping", None, false))
        .await
        .expect("the caller is let go");
    let Err(Error::Closed { reason, .. }) = sent else {
        panic!("the request fails: {sent:?}");
    };
    assert!(reason.contains("took no request"), "{reason}");
    assert!(!session.is_alive(), "no call lands on the session again");
}

#[test]
fn sessions_share_an_initialize_result_they_all_got() {
    let results = InitResults::new(true);
    let (a, a_info) = results.share(json!({"serverInfo": {"name": "s", "version": "1"}}));
    let (b, b_info) = results.share(json!({"serverInfo": {"name": "s", "version": "1"}}));
    assert!(Arc::ptr_eq(&a, &b), "one copy for the same result");
    let (a_info, b_info) = (a_info.expect("text"), b_info.expect("text"));
    assert!(
        Arc::ptr_eq(&a_info, &b_info),
        "and of its serverInfo's text"
    );
    assert_eq!(&*a_info, r#"{"name":"s","version":"1"}"#);
    let (c, _) = results.share(json!({"serverInfo": {"name": "s", "version": "2"}}));
    assert_eq!(
        c["serverInfo"]["version"], "2",
        "a new result is kept as it is"
    );
    assert_eq!(
        a["serverInfo"]["version"], "1",
        "an older session keeps its own"
    );
    for not_one in [
        json!("s"),
        json!({"name": "s"}),
        json!({"name": "s", "version": 1}),
    ] {
        let (_, none) = results.share(json!({ "serverInfo": not_one }));
        assert_eq!(none, None, "not an Implementation: {not_one}");
    }
    let off = InitResults::new(false);
    let (_, none) = off.share(json!({"serverInfo": {"name": "s", "version": "1"}}));
    assert_eq!(none, None, "server_info = false: no text");
}

#[tokio::test]
async fn a_refused_request_is_unsent_even_when_the_session_says_closed_first() {
    let (cmd, cmds) = mpsc::channel(8);
    let (queue, _session_side) = mpsc::channel(8);
    let direct = refused_while_closing(cmds, queue);
    let session = live_session(cmd, Duration::from_secs(5), Some(Arc::new(direct)));
    let mut call = session
        .request("tools/call", Some(json!({"name": "t"})), true)
        .await
        .expect("request");
    let event = call.events.recv().await;
    assert!(
        matches!(event, Some(CallEvent::Unsent(_))),
        "the call may be sent again: {event:?}"
    );
    assert!(!session.is_alive(), "no new call lands on the session");
}

/// A `roots/list` outside any call, held by the session, handed to the next interactive call,
/// which ends before its client sees it and before the session hears the call is over: given
/// back, it is held again with the deadline it had, not a new one, and refused at it.
#[tokio::test(start_paused = true)]
async fn a_held_roots_request_given_back_by_its_call_keeps_its_deadline() {
    let rules = Rules {
        static_roots: Arc::new(Vec::new()),
        held_roots_wait: Duration::from_secs(30),
    };
    let declared = Declared {
        roots: true,
        ..Declared::default()
    };
    let mut router = Router::new("b".into(), declared, rules, 8);
    let asked = Message::Request {
        id: Id::Number(7),
        method: "roots/list".into(),
        params: None,
    };
    assert!(router.route(asked).await.is_empty(), "held, not answered");
    let deadline = router.next_deadline().expect("held until a deadline");
    let (tx, mut rx) = mpsc::channel(8);
    router
        .register(Id::Number(1), EventTx(tx), None, true)
        .await;
    let handed = rx.recv().await.map(|e| *e);
    let Some(CallEvent::ServerRequest { id, held_until, .. }) = handed else {
        panic!("the call gets the held request: {handed:?}");
    };
    assert_eq!((id, held_until), (Id::Number(7), Some(deadline)));
    assert_eq!(router.next_deadline(), None, "the call has it now");
    // The call is gone (its events closed) and has not been forgotten yet.
    drop(rx);
    tokio::time::advance(Duration::from_secs(20)).await;
    let again = router.hold_roots(Id::Number(7), Some(deadline)).await;
    assert_eq!(again, None, "held again, not answered");
    assert_eq!(
        router.next_deadline(),
        Some(deadline),
        "with the deadline it had"
    );
    let refused = router.expire_held(deadline);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["id"], 7);
    assert!(refused[0]["error"]["message"].is_string(), "{refused:?}");
}

#[test]
fn request_ids_stay_positive_32_bit_integers_and_follow_each_other() {
    let range = i32::MAX as u64;
    assert_eq!(super::id_at(0), 1);
    assert_eq!(super::id_at(range - 1), i64::from(i32::MAX));
    assert_eq!(
        super::id_at(range),
        1,
        "the sequence wraps within the range"
    );
    assert_eq!(super::id_at(1 << 40) + 1, super::id_at((1 << 40) + 1));
    let (Id::Number(a), Id::Number(b)) = (super::request_id(), super::request_id()) else {
        panic!("request ids are numbers");
    };
    assert!((1..=i64::from(i32::MAX)).contains(&a), "{a}");
    assert_ne!(a, b);
}

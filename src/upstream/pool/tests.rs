//! The pool's counting: starts given back however they end, and the shares interactive calls
//! are admitted within (a principal's `principal_sessions`, the `reserved_sessions` kept for
//! calls that need no input). Sessions of the built-in server start in process; the `mute`
//! backend (a child that never answers `initialize`) keeps a start running.

use super::*;
use crate::config::Config;
use std::time::Duration;

/// A backend that never answers `initialize`.
const MUTE: &str = "[[backend]]\nname = \"mute\"\ncommand = \"sleep\"\nargs = [\"30\"]\n";

/// The built-in server, with a share of two sessions per principal and one kept.
const SHARED: &str = "[limits]\nqueue_wait = \"5s\"\n[[backend]]\nname = \"b\"\nkind = \"builtin\"\npool_max = 4\nprincipal_sessions = 2\nreserved_sessions = 1\n";

/// A pool of the one backend of `config` (a config's text), and what shuts it down.
fn pool(config: &str) -> (Arc<Pool>, CancellationToken) {
    let config = Config::parse(config, None).expect("config");
    let shutdown = CancellationToken::new();
    let rules = Rules {
        static_roots: Arc::new(Vec::new()),
        held_roots_wait: Duration::from_secs(1),
    };
    let pool = Pool::new(
        config.backends[0].clone(),
        config.limits.clone(),
        rules,
        shutdown.clone(),
        PoolMetrics::default(),
        &Shards::none(),
    );
    (pool, shutdown)
}

/// What a call of `principal` wants: an interactive one from a client that declared
/// elicitation, else one from a client that declared nothing.
fn want(principal: u8, interactive: bool) -> Want<'static> {
    let declared = Declared {
        elicitation_form: interactive,
        ..Declared::default()
    };
    Want {
        key: PoolKey {
            principal: Digest([principal; 32]),
            fingerprint: declared.fingerprint(),
        },
        declared,
        client_info: None,
        interactive,
        authorization: None,
    }
}

const ALICE: u8 = 1;
const BOB: u8 = 2;
const CAROL: u8 = 3;

#[tokio::test]
async fn a_start_abandoned_while_the_backend_initializes_gives_its_slot_back() {
    let (pool, shutdown) = pool(&format!("{MUTE}pool_max = 1\n"));
    let want = want(0, false);
    for attempt in 0..2 {
        let gave_up =
            tokio::time::timeout(Duration::from_millis(200), pool.acquire(want.clone())).await;
        assert!(
            gave_up.is_err(),
            "attempt {attempt}: the start is still running"
        );
        assert_eq!(
            pool.session_states()[0],
            (SessionState::Starting, 0),
            "attempt {attempt}: nothing is starting once the caller gave up"
        );
    }
    assert!(
        matches!(pool.try_take(&want), Taken::Start),
        "the pool's one slot is free to start a session"
    );
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_principals_interactive_calls_hold_at_most_its_share() {
    let (pool, shutdown) = pool(SHARED);
    let first = pool.acquire(want(ALICE, true)).await.expect("a session");
    let _second = pool.acquire(want(ALICE, true)).await.expect("a session");
    // Past its share, Alice's call waits `queue_wait` for one of her own sessions, then is
    // told they are why.
    let asked = Instant::now();
    let refused = pool
        .acquire(want(ALICE, true))
        .await
        .expect_err("her share");
    assert!(
        matches!(&refused, Error::PrincipalShare { held: 2, .. }),
        "{refused}"
    );
    assert_eq!(asked.elapsed(), Duration::from_secs(5));
    // Her calls that need no input, and Bob's interactive one, still get sessions.
    let _plain = pool.acquire(want(ALICE, false)).await.expect("a session");
    let _bob = pool.acquire(want(BOB, true)).await.expect("a session");
    // One of her own sessions freed while she waits is hers.
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire(want(ALICE, true)).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(first);
    waiting.await.expect("joined").expect("her freed session");
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn calls_that_need_no_input_keep_room_interactive_calls_cannot_take() {
    let (pool, shutdown) = pool(SHARED);
    let _alice = pool.acquire(want(ALICE, true)).await.expect("a session");
    let _alice_too = pool.acquire(want(ALICE, true)).await.expect("a session");
    let _bob = pool.acquire(want(BOB, true)).await.expect("a session");
    // Interactive calls hold the three sessions they may: Carol's waits, as for a full pool,
    // and is refused as one (her own calls hold nothing).
    let refused = pool.acquire(want(CAROL, true)).await.expect_err("no room");
    assert!(matches!(&refused, Error::Busy(_)), "{refused}");
    // The fourth session is for calls that need no input, of any principal: taken by one,
    // then, once idle, closed for another's.
    let plain = pool
        .acquire(want(CAROL, false))
        .await
        .expect("the kept one");
    drop(plain);
    let _bobs = pool.acquire(want(BOB, false)).await.expect("the idle one");
    assert_eq!(pool.open_sessions(), 4);
    shutdown.cancel();
}

#[tokio::test]
async fn a_start_for_an_interactive_call_counts_in_its_principals_share() {
    // A share of one session per principal (a quarter of the pool).
    let (pool, shutdown) = pool(&format!(
        "[limits]\nqueue_wait = \"0s\"\n{MUTE}pool_max = 4\n"
    ));
    let starting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire(want(ALICE, true)).await.map(|_| ()) }
    });
    while pool.session_states()[0] != (SessionState::Starting, 1) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = pool
        .acquire(want(ALICE, true))
        .await
        .expect_err("her share");
    assert!(
        matches!(&refused, Error::PrincipalShare { held: 1, .. }),
        "{refused}"
    );
    assert!(matches!(pool.try_take(&want(BOB, true)), Taken::Start));
    // A start given up is out of her share again.
    starting.abort();
    let _ = starting.await;
    assert!(matches!(pool.try_take(&want(ALICE, true)), Taken::Start));
    shutdown.cancel();
}

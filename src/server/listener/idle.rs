//! Room for a new connection on a full listener: the connection idle the longest is closed to
//! take it. The admin listener uses it, so a health probe gets in under a flood: idle
//! connections push each other out, oldest first, while a probe sends its request as soon as it
//! connects and so is busy long before it would be the one idle the longest.
//!
//! A connection is busy from the moment its request head has been read until its response
//! body has been written (a slow scrape of `/metrics` is not cut); otherwise it is idle, which
//! includes a connection still sending its head. A request that arrives on a connection just as
//! it is chosen is cut with it; its client connects again.

use super::super::Body;
use http_body_util::BodyExt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The open connections of one listener, in the order they were accepted.
#[derive(Debug, Clone, Default)]
pub(super) struct Idle(Arc<Mutex<Open>>);

#[derive(Debug, Default)]
struct Open {
    /// Counts events (a connection accepted, a response written): ids and idle stamps.
    clock: u64,
    connections: BTreeMap<u64, Connection>,
}

impl Open {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

#[derive(Debug)]
struct Connection {
    /// Requests being served (HTTP/1.1 serves one at a time).
    busy: usize,
    /// When it last became idle (accepted, or its last response written), on `Open::clock`.
    idle_since: u64,
    /// Cancelled to close it.
    evict: CancellationToken,
}

impl Idle {
    /// Counts a new connection, idle until it has a request.
    pub(super) fn join(&self) -> Member {
        let mut open = self.0.lock().expect("idle connections lock");
        let id = open.tick();
        let evict = CancellationToken::new();
        open.connections.insert(
            id,
            Connection {
                busy: 0,
                idle_since: id,
                evict: evict.clone(),
            },
        );
        Member {
            idle: self.clone(),
            id,
            evict,
        }
    }

    /// Closes the connection that has been idle the longest; false when every one is busy.
    pub(super) fn evict_longest_idle(&self) -> bool {
        let open = self.0.lock().expect("idle connections lock");
        let longest = open
            .connections
            .values()
            .filter(|c| c.busy == 0 && !c.evict.is_cancelled())
            .min_by_key(|c| c.idle_since);
        match longest {
            Some(c) => {
                c.evict.cancel();
                true
            }
            None => false,
        }
    }
}

/// One open connection of an [`Idle`] listener; forgotten on drop.
#[derive(Debug)]
pub(super) struct Member {
    idle: Idle,
    id: u64,
    evict: CancellationToken,
}

impl Member {
    /// Resolves when the connection was chosen to make room.
    pub(super) async fn evicted(&self) {
        self.evict.cancelled().await
    }

    /// Marks the connection busy until the returned guard is dropped.
    pub(super) fn busy(&self) -> Busy {
        let mut open = self.idle.0.lock().expect("idle connections lock");
        if let Some(c) = open.connections.get_mut(&self.id) {
            c.busy += 1;
        }
        Busy {
            idle: self.idle.clone(),
            id: self.id,
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut open = self.idle.0.lock().expect("idle connections lock");
        open.connections.remove(&self.id);
    }
}

/// A request being served on a [`Member`]'s connection.
#[derive(Debug)]
pub(super) struct Busy {
    idle: Idle,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut open = self.idle.0.lock().expect("idle connections lock");
        let now = open.tick();
        if let Some(c) = open.connections.get_mut(&self.id) {
            c.busy -= 1;
            if c.busy == 0 {
                c.idle_since = now;
            }
        }
    }
}

/// `body`, its connection kept busy until hyper has written it all (or dropped it).
pub(super) fn hold(body: Body, busy: Busy) -> Body {
    body.map_frame(move |frame| {
        let _busy = &busy;
        frame
    })
    .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_idle_the_longest_goes_and_a_busy_one_stays() {
        let idle = Idle::default();
        let first = idle.join();
        let second = idle.join();
        let third = idle.join();
        let serving = first.busy();
        assert!(idle.evict_longest_idle());
        assert!(!first.evict.is_cancelled(), "busy: kept");
        assert!(second.evict.is_cancelled(), "idle the longest");
        assert!(!third.evict.is_cancelled());
        drop(serving);
        // The first became idle after the third was accepted.
        assert!(idle.evict_longest_idle());
        assert!(third.evict.is_cancelled());
        assert!(!first.evict.is_cancelled());
        let _serving = first.busy();
        assert!(!idle.evict_longest_idle(), "nothing idle is left");
        drop(second);
        drop(third);
        assert_eq!(idle.0.lock().unwrap().connections.len(), 1);
    }
}

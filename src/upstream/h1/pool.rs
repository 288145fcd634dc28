//! The idle connections of a client, one [`Pool`] per shard: kept for [`IDLE_TIMEOUT`] at most,
//! and checked with [`still_open`] before one is used again.

use super::Io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::Context;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};

/// How long an idle connection stays in the pool.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections of one shard, the most recently used on top.
pub(super) struct Pool {
    pub(super) idle: Mutex<Vec<Idle>>,
    pub(super) max: usize,
}

pub(super) struct Idle {
    io: Io,
    since: Instant,
}

impl Pool {
    /// The most recently used idle connection the backend has not closed.
    pub(super) fn take(&self) -> Option<Io> {
        let mut idle = self.idle.lock().expect("pool lock");
        while let Some(Idle { mut io, since }) = idle.pop() {
            if since.elapsed() >= IDLE_TIMEOUT {
                // The ones below waited longer still.
                idle.clear();
                return None;
            }
            if still_open(&mut io) {
                return Some(io);
            }
        }
        None
    }

    pub(super) fn put(&self, io: Io) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < self.max {
            idle.push(Idle {
                io,
                since: Instant::now(),
            });
        }
    }
}

/// Whether an idle connection is still open: nothing to read, not even its end. (Anything
/// readable on an idle connection is a close, or a backend out of step: either way unusable.)
fn still_open(io: &mut Io) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut byte = [0u8; 1];
    let mut read = ReadBuf::new(&mut byte);
    Pin::new(io).poll_read(&mut cx, &mut read).is_pending()
}

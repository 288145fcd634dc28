//! Shards: the threads that serve client connections. `mrtr-gateway serve` starts
//! `server.worker_threads` of them, each running a single-threaded tokio runtime of its own,
//! and gives each accepted connection to the shard with the fewest open ones. A connection
//! stays on its shard, and so does what its requests spawn (a request's work, the session it
//! starts) and the upstream HTTP connections they use: each shard has its own keep-alive pool
//! (`upstream::http::Client`). A pass-through call never changes threads. On a work-stealing
//! runtime most hand-overs between tasks (request to work, work to upstream connection, and
//! back) woke the other worker thread, often to find nothing to do (benches/FINDINGS.md has the
//! measured difference). Calls that meet across shards (a retry for a call parked by another
//! shard, a session started on another) talk by channel and waker, which work across runtimes.
//!
//! The price is the one of any thread per core design: work that holds a shard's thread for
//! long (parsing a body near `limits.max_body_bytes`, say) delays the other connections on that
//! shard, where a work-stealing runtime would have moved them to an idle thread; the body and
//! depth limits bound it.
//!
//! The shards are a value ([`Shards`]) that the command starting the gateway owns and passes
//! down: to the accept loops, which hand each connection over, and to the HTTP clients, which
//! keep a pool per shard. The accept loops, the admin listener and the drain run on the main
//! thread's runtime. Without shards ([`Shards::none`]: tests that start the gateway inside their
//! own runtime) each connection is a task of the runtime that accepted it.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

thread_local! {
    /// The shard this thread is, if it is one: the set it belongs to (its address) and its
    /// index in that set.
    static INDEX: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
}

/// How long a stopping shard waits for blocking work it spawned (DNS lookups and the like).
const STOP_TIMEOUT: Duration = Duration::from_secs(1);
/// See [`tick`].
const TICK: Duration = Duration::from_secs(1);

/// The shards of a gateway, or none. Cheap to clone: clones share the threads.
#[derive(Debug, Clone, Default)]
pub struct Shards {
    set: Option<Arc<Set>>,
}

#[derive(Debug)]
struct Set {
    shards: Vec<Shard>,
    stop: CancellationToken,
}

#[derive(Debug)]
struct Shard {
    handle: Handle,
    /// Connections open on this shard.
    open: Arc<AtomicUsize>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Shards {
    /// No shards: connections run on the runtime that accepts them.
    pub fn none() -> Shards {
        Shards::default()
    }

    /// Starts `n` shard threads, each with a runtime of its own. Threads already started end
    /// if a later one cannot be.
    pub fn start(n: usize) -> std::io::Result<Shards> {
        let stop = CancellationToken::new();
        let on_error = stop.clone().drop_guard();
        let mut runtimes = Vec::with_capacity(n);
        for _ in 0..n {
            runtimes.push(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            );
        }
        let set = Arc::new(Set {
            shards: runtimes
                .iter()
                .map(|rt| Shard {
                    handle: rt.handle().clone(),
                    open: Arc::new(AtomicUsize::new(0)),
                    thread: Mutex::new(None),
                })
                .collect(),
            stop: stop.clone(),
        });
        let id = Arc::as_ptr(&set) as usize;
        for (index, rt) in runtimes.into_iter().enumerate() {
            let until = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("mrtr-shard-{index}"))
                .spawn(move || {
                    INDEX.with(|i| i.set(Some((id, index))));
                    rt.block_on(async {
                        tokio::select! {
                            _ = until.cancelled() => {}
                            _ = tick() => {}
                        }
                    });
                    // Drops what is still running here (the drain has ended by now).
                    rt.shutdown_timeout(STOP_TIMEOUT);
                })?;
            *set.shards[index].thread.lock().expect("shard lock") = Some(thread);
        }
        on_error.disarm();
        Ok(Shards { set: Some(set) })
    }

    /// Stops the shards and waits for their threads: the tasks still on them are dropped
    /// (which kills any child process they own).
    pub fn stop(&self) {
        let Some(set) = &self.set else { return };
        set.stop.cancel();
        for shard in &set.shards {
            let thread = shard.thread.lock().map(|mut t| t.take()).ok().flatten();
            if let Some(t) = thread {
                let _ = t.join();
            }
        }
    }

    /// How many shards there are (0 without any).
    pub fn count(&self) -> usize {
        self.set.as_ref().map_or(0, |s| s.shards.len())
    }

    /// Which of these shards the current thread is, if any.
    pub fn current(&self) -> Option<usize> {
        let id = Arc::as_ptr(self.set.as_ref()?) as usize;
        INDEX
            .with(Cell::get)
            .and_then(|(set, index)| (set == id).then_some(index))
    }

    /// Runs a client connection, `serve(stream)`: on the shard with the fewest open
    /// connections, or, without shards, on the current runtime. The socket moves to the reactor
    /// of the shard that serves it: left with the accepting runtime's, every readiness event of
    /// the connection would wake the main thread first, only for it to wake the shard.
    pub fn spawn_connection<S, F>(&self, stream: TcpStream, serve: S)
    where
        S: FnOnce(TcpStream) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let Some(set) = self.set.as_ref().filter(|s| !s.shards.is_empty()) else {
            tokio::spawn(serve(stream));
            return;
        };
        let shard = set
            .shards
            .iter()
            .min_by_key(|s| s.open.load(Ordering::Relaxed))
            .expect("at least one shard");
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot hand a connection to a shard: {e}");
                return;
            }
        };
        let open = Open::new(shard.open.clone());
        shard.handle.spawn(async move {
            let _open = open;
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(e) => tracing::warn!("a shard cannot take a connection: {e}"),
            }
        });
    }
}

/// Keeps a timer of the shard due within [`TICK`], so that a timer set later than that (a
/// connection's header-read deadline, set after each reply, seconds away) is never the earliest
/// one: a timer set earlier than every other one the shard's driver knows makes the runtime
/// wake its driver with an eventfd write, and its next poll returns at once for it; two system
/// calls per request on a shard otherwise idle between requests.
async fn tick() {
    loop {
        tokio::time::sleep(TICK).await;
    }
}

/// One open connection, counted on its shard until dropped.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(count: Arc<AtomicUsize>) -> Open {
        count.fetch_add(1, Ordering::Relaxed);
        Open(count)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_knows_its_shard_in_its_own_set_only() {
        let a = Shards::start(2).expect("shards");
        let b = Shards::start(1).expect("shards");
        assert_eq!((a.count(), b.count(), Shards::none().count()), (2, 1, 0));
        let seen = |on: &Shards, index: usize| {
            let (a, b) = (a.clone(), b.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            on.set.as_ref().expect("a set").shards[index]
                .handle
                .spawn(async move {
                    let _ = tx.send((a.current(), b.current(), Shards::none().current()));
                });
            rx.recv_timeout(Duration::from_secs(5))
                .expect("ran on the shard")
        };
        assert_eq!(seen(&a, 1), (Some(1), None, None));
        assert_eq!(seen(&b, 0), (None, Some(0), None));
        assert_eq!((a.current(), b.current()), (None, None));
        a.stop();
        b.stop();
    }
}

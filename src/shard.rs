//! Shards: the threads that serve client connections. `mrtr-gateway serve` starts
//! `server.worker_threads` of them, each running a single-threaded tokio runtime of its own,
//! and gives each accepted connection to the shard with the fewest open ones. A connection
//! stays on its shard, and so does what its requests spawn (a request's work, the session it
//! starts) and the upstream HTTP connections they use: each shard has its own keep-alive pool
//! (`upstream::http::Client`). A pass-through call never changes threads. On a work-stealing
//! runtime most hand-overs between tasks (request to work, work to upstream connection, and
//! back) woke the other worker thread, often to find nothing to do; BENCHMARKS.md has the
//! measured difference. Calls that meet across shards (a retry for a call parked by another
//! shard, a session started on another) talk by channel and waker, which work across runtimes.
//!
//! The price is the one of any thread per core design: work that holds a shard's thread for
//! long (parsing a body near `limits.max_body_bytes`, say) delays the other connections on that
//! shard, where a work-stealing runtime would have moved them to an idle thread; the body and
//! depth limits bound it.
//!
//! The accept loops, the admin listener and the drain run on the main thread's runtime. A
//! process without shards (tests that start the gateway inside their own runtime) serves each
//! connection as a task of the runtime that accepted it.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// The shards of this process, once started.
static SHARDS: OnceLock<Shards> = OnceLock::new();

thread_local! {
    /// The shard this thread is, if it is one.
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// How long a stopping shard waits for blocking work it spawned (DNS lookups and the like).
const STOP_TIMEOUT: Duration = Duration::from_secs(1);
/// See [`tick`].
const TICK: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Shards {
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

/// Starts `n` shards for this process. Fails if they cannot be made, or were made before.
pub fn start(n: usize) -> std::io::Result<()> {
    let stop = CancellationToken::new();
    // Threads already started end if a later one cannot be.
    let on_error = stop.clone().drop_guard();
    let mut shards = Vec::with_capacity(n);
    for index in 0..n {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let until = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mrtr-shard-{index}"))
            .spawn(move || {
                INDEX.with(|i| i.set(Some(index)));
                rt.block_on(async {
                    tokio::select! {
                        _ = until.cancelled() => {}
                        _ = tick() => {}
                    }
                });
                // Drops what is still running here (the drain has ended by now).
                rt.shutdown_timeout(STOP_TIMEOUT);
            })?;
        shards.push(Shard {
            handle,
            open: Arc::new(AtomicUsize::new(0)),
            thread: Mutex::new(Some(thread)),
        });
    }
    on_error.disarm();
    let made = Shards { shards, stop };
    SHARDS.set(made).map_err(|made| {
        made.stop.cancel();
        std::io::Error::other("shards were started already")
    })
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

/// Stops the shards and waits for their threads: the tasks still on them are dropped (which
/// kills any child process they own).
pub fn stop() {
    let Some(shards) = SHARDS.get() else { return };
    shards.stop.cancel();
    for shard in &shards.shards {
        let thread = shard.thread.lock().map(|mut t| t.take()).ok().flatten();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// How many shards this process has (0 without any).
pub fn count() -> usize {
    SHARDS.get().map_or(0, |s| s.shards.len())
}

/// The shard the current thread is, if any.
pub fn current() -> Option<usize> {
    INDEX.with(Cell::get)
}

/// Runs a client connection, `serve(stream)`: on the shard with the fewest open connections,
/// or, in a process without shards, on the current runtime. The socket moves to the reactor of
/// the shard that serves it: left with the accepting runtime's, every readiness event of the
/// connection would wake the main thread first, only for it to wake the shard.
pub fn spawn_connection<S, F>(stream: TcpStream, serve: S)
where
    S: FnOnce(TcpStream) -> F + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let Some(shards) = SHARDS.get().filter(|s| !s.shards.is_empty()) else {
        tokio::spawn(serve(stream));
        return;
    };
    let shard = shards
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

//! The one accept loop behind every listener (the MCP endpoint, the internal hop, the admin
//! port): at most `max_connections` open at once and at most `max_per_address` from one client
//! address ([`addresses`]), HTTP/1.1 with a header deadline, a write deadline the kernel keeps
//! too, a back-off when accepting fails (out of descriptors), and on `stop` each connection
//! finishes the request in flight. The
//! caller gets the connections back to decide how long to wait for them. A full listener
//! leaves new connections in the backlog, or, with `evict_idle` (the admin port), closes the
//! connection idle the longest to take the new one ([`idle`]).
//! Each connection runs on a shard ([`Shards`]) as an [`Inline`](crate::wake::Inline) task:
//! the hand-overs between its halves do not go through the runtime's queue.

mod addresses;
mod idle;

use super::Body;
use crate::metrics::{ListenerMetrics, Shed};
use crate::shard::Shards;
use addresses::{Addresses, Admitted};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use idle::{Idle, Member};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// How a listener serves its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Shown in logs.
    pub name: &'static str,
    pub max_connections: usize,
    /// Connections one client address may have open; one more is closed as soon as it is
    /// accepted. At `max_connections` or above, no cap of its own.
    pub max_per_address: usize,
    /// When all `max_connections` are open, close the one idle the longest to take a new one,
    /// rather than leave the new one waiting in the backlog.
    pub evict_idle: bool,
    /// A client must send its request head within this.
    pub header_read_timeout: Duration,
    /// A write to the client that makes no progress for this long (the client stopped reading)
    /// ends the connection.
    pub write_timeout: Duration,
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("request body over {0} bytes")]
    TooLarge(usize),
    #[error("the request body did not arrive within {0:?}")]
    TimedOut(Duration),
    #[error("could not read the body: {0}")]
    Failed(String),
}

/// Reads a whole request body of at most `max` bytes, which must arrive within `within`.
pub async fn read_body(
    body: Incoming,
    max: usize,
    within: Duration,
) -> Result<bytes::Bytes, BodyError> {
    use http_body_util::BodyExt;
    let collect = http_body_util::Limited::new(body, max).collect();
    match tokio::time::timeout(within, collect).await {
        Err(_) => Err(BodyError::TimedOut(within)),
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge(max)),
        Ok(Err(e)) => Err(BodyError::Failed(e.to_string())),
    }
}

/// Accepts until `stop`, serving each request with `handle(request, peer)`; connections shed
/// to keep the listener open to others are counted in `metrics`. Returns the connections still
/// open (closed to new ones).
pub async fn serve<H, F>(
    listener: TcpListener,
    limits: Limits,
    shards: &Shards,
    metrics: ListenerMetrics,
    stop: CancellationToken,
    handle: H,
) -> TaskTracker
where
    H: Fn(hyper::Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = hyper::Response<Body>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let addresses = (limits.max_per_address < limits.max_connections)
        .then(|| Addresses::new(limits.max_per_address));
    let idle = limits.evict_idle.then(Idle::default);
    let connections = TaskTracker::new();
    loop {
        // Evicting, a connection is accepted even when all are taken: it makes room.
        let ready = if idle.is_some() {
            permits.clone().try_acquire_owned().ok()
        } else {
            match wait_for(&permits, &stop).await {
                Some(permit) => Some(permit),
                None => break,
            }
        };
        let Some((stream, peer)) = accept(&listener, limits.name, &stop).await else {
            break;
        };
        let address = match &addresses {
            None => None,
            Some(addresses) => match addresses.admit(peer.ip()) {
                Some(admitted) => Some(admitted),
                None => {
                    // Closed as it is: the client gets no answer, and costs nothing more.
                    metrics.shed(Shed::AddressCap);
                    tracing::debug!(listener = limits.name, %peer, "over the per-address cap; closed");
                    continue;
                }
            },
        };
        let permit = match ready {
            Some(permit) => permit,
            None => {
                if idle.as_ref().is_some_and(Idle::evict_longest_idle) {
                    metrics.shed(Shed::IdleEvicted);
                }
                // The evicted connection gives its permit back as it closes; with none idle,
                // the first to finish does.
                match wait_for(&permits, &stop).await {
                    Some(permit) => permit,
                    None => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        give_up_unread_after(&stream, limits.write_timeout);
        let held = Held {
            // Counted from here, so the drain cannot miss a connection on its way to a shard.
            _tracked: connections.token(),
            _permit: permit,
            _address: address,
        };
        let member = idle.as_ref().map(Idle::join);
        let (handle, stop) = (handle.clone(), stop.clone());
        shards.spawn_connection(stream, move |stream| {
            crate::wake::Inline::new(connection(stream, peer, limits, held, member, stop, handle))
        });
    }
    drop(listener);
    connections.close();
    connections
}

/// Has the kernel end the connection, and drop what it holds to send on it, once that has
/// waited `after` for the client. `write_timeout` only sees a write of the gateway's that waits:
/// a reply the kernel's send buffer took whole (on Linux it grows to `tcp_wmem`'s maximum, 4 MiB
/// by default) leaves none, and the kernel would keep that reply for a client that stopped
/// reading, after the connection closed too, until the client reads or closes.
#[cfg(target_os = "linux")]
fn give_up_unread_after(stream: &TcpStream, after: Duration) {
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_user_timeout(Some(after)) {
        tracing::debug!("TCP_USER_TIMEOUT not set: {e}");
    }
}

#[cfg(not(target_os = "linux"))]
fn give_up_unread_after(_: &TcpStream, _: Duration) {}

/// A connection permit, or `None` once `stop` is cancelled.
async fn wait_for(
    permits: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        _ = stop.cancelled() => None,
        p = permits.clone().acquire_owned() => Some(p.expect("semaphore is never closed")),
    }
}

/// The next connection, or `None` once `stop` is cancelled.
async fn accept(
    listener: &TcpListener,
    name: &str,
    stop: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            accepted = listener.accept() => match accepted {
                Ok(a) => return Some(a),
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = name, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// What a connection holds until it closes: its place in the drain, its permit, its count
/// against its address.
struct Held {
    _tracked: TaskTrackerToken,
    _permit: OwnedSemaphorePermit,
    _address: Option<Admitted>,
}

/// Serves one connection until it closes, it is evicted (`member`), or `stop`: then the
/// request in flight is finished first.
async fn connection<H, F>(
    stream: TcpStream,
    peer: SocketAddr,
    limits: Limits,
    held: Held,
    member: Option<Member>,
    stop: CancellationToken,
    handle: H,
) where
    H: Fn(hyper::Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = hyper::Response<Body>> + Send + 'static,
{
    let _held = held;
    let member = member.map(Arc::new);
    let serving = member.clone();
    let service = hyper::service::service_fn(move |req| {
        let busy = serving.as_ref().map(|m| m.busy());
        let reply = handle(req, peer);
        async move {
            let response = reply.await;
            Ok::<_, std::convert::Infallible>(match busy {
                None => response,
                Some(busy) => response.map(|body| idle::hold(body, busy)),
            })
        }
    });
    let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
    stream.set_write_timeout(Some(limits.write_timeout));
    let conn = http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(TokioIo::new(Box::pin(stream)), service);
    tokio::pin!(conn);
    let evicted = async {
        match &member {
            Some(m) => m.evicted().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r {
            tracing::debug!(listener = limits.name, %peer, "connection ended: {e}")
        },
        _ = evicted => {
            tracing::debug!(listener = limits.name, %peer, "idle the longest on a full listener; closed");
        }
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

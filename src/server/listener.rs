//! The one accept loop behind every listener (the MCP endpoint, the internal hop, the admin
//! port): at most `max_connections` open at once, HTTP/1.1 with a header deadline, a back-off
//! when accepting fails (out of descriptors), and on `stop` each connection finishes the
//! request in flight. The caller gets the connections back to decide how long to wait for them.
//! Each connection runs on a shard ([`Shards`]) as an [`Inline`](crate::wake::Inline) task:
//! the hand-overs between its halves do not go through the runtime's queue.

use super::Body;
use crate::shard::Shards;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How a listener serves its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Shown in logs.
    pub name: &'static str,
    pub max_connections: usize,
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

/// Accepts until `stop`, serving each request with `handle(request, peer)`. Returns the
/// connections still open (closed to new ones).
pub async fn serve<H, F>(
    listener: TcpListener,
    limits: Limits,
    shards: &Shards,
    stop: CancellationToken,
    handle: H,
) -> TaskTracker
where
    H: Fn(hyper::Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = hyper::Response<Body>> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => break,
            p = permits.clone().acquire_owned() => p.expect("semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(listener = limits.name, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let stop = stop.clone();
        // Counted from here, so the drain cannot miss a connection on its way to a shard.
        let tracked = connections.token();
        shards.spawn_connection(stream, move |stream| {
            crate::wake::Inline::new(async move {
                let _tracked = tracked;
                let _permit = permit;
                let service = hyper::service::service_fn(move |req| {
                    let reply = handle(req, peer);
                    async move { Ok::<_, std::convert::Infallible>(reply.await) }
                });
                let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
                stream.set_write_timeout(Some(limits.write_timeout));
                let conn = http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(limits.header_read_timeout)
                    .serve_connection(TokioIo::new(Box::pin(stream)), service);
                tokio::pin!(conn);
                tokio::select! {
                    r = conn.as_mut() => if let Err(e) = r {
                        tracing::debug!(listener = limits.name, %peer, "connection ended: {e}")
                    },
                    _ = stop.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            })
        });
    }
    drop(listener);
    connections.close();
    connections
}

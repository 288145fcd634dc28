//! The gateway's HTTP/1.1 client for its backends: one exchange at a time per connection,
//! connections kept alive in a small pool per shard.
//!
//! Why not hyper's client: a parked call holds its answer stream open until the client retries,
//! and a hyper client connection costs about 22 KiB however idle (a request queue with room for
//! 32 requests, an 8 KiB header buffer, a read buffer and a task of its own). Here an exchange
//! runs in the caller's own future, and its body reads into the stack: a stream that waits holds
//! its socket and a few words of framing state. The response head is parsed by `httparse`;
//! only the headers the gateway reads are kept from it (no header map of the rest is built).
//! Connecting (TCP, and TLS for `https` URLs) is hyper-rustls's connector.
//!
//! What it speaks: requests with a body of known length; responses framed by `Content-Length`,
//! by chunked transfer coding, or by the connection's end. A connection goes back to the pool
//! only after a complete, unambiguous response on HTTP/1.1 without `Connection: close`, and is
//! checked for a close by the backend before it is used again.
//!
//! Here: [`Client`], its [`Request`] and [`Error`], and the connector. `head` writes the
//! request and reads the response head and its framing, `body` streams the body, and `pool`
//! keeps the idle connections.

mod body;
mod head;
mod pool;
#[cfg(test)]
mod tests;

pub use body::Body;

use crate::shard::Shards;
use bytes::BytesMut;
use head::{encode, read_head};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use pool::Pool;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tower_service::Service;

/// One connection to a backend, plain or TLS. Boxed as a trait object so that a plain one
/// takes the room of a plain one: the TLS state alone is over 1 KiB.
type Io = Box<dyn Wire>;

trait Wire: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Wire for T {}

/// How much one read takes (into the stack; only what arrived is kept).
const READ_CHUNK: usize = 8192;

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No connection: the request did not reach the backend.
    #[error("{0}")]
    Connect(String),
    /// The response head did not fit in `max_response_head_bytes`.
    #[error("its response head is larger than `max_response_head_bytes` ({0} bytes)")]
    HeadTooLarge(usize),
    /// Anything after the connection was made.
    #[error("{0}")]
    Exchange(String),
}

/// How the gateway connects to a backend: TCP within `timeout` and without Nagle's delay, then
/// TLS for `https` URLs, trusting `roots` when given (a private CA), else the bundled Mozilla
/// roots, and showing `cert` to a backend that asks for a client certificate.
pub fn connector(
    timeout: Duration,
    roots: Option<&rustls::RootCertStore>,
    cert: Option<&Arc<rustls::sign::CertifiedKey>>,
) -> HttpsConnector<HttpConnector> {
    use hyper_rustls::ConfigBuilderExt;
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = if roots.is_none() && cert.is_none() {
        builder.with_webpki_roots()
    } else {
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions");
        let tls = match roots {
            Some(roots) => tls.with_root_certificates(roots.clone()),
            None => tls.with_webpki_roots(),
        };
        builder.with_tls_config(match cert {
            Some(cert) => tls.with_client_cert_resolver(Arc::new(
                rustls::sign::SingleCertAndKey::from(cert.clone()),
            )),
            None => tls.with_no_client_auth(),
        })
    };
    builder
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp(timeout))
}

/// The TCP part of [`connector`].
fn tcp(timeout: Duration) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    http
}

/// The client of one backend. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    connector: HttpsConnector<HttpConnector>,
    /// One pool per shard, and a last one for the other threads.
    pools: Box<[Arc<Pool>]>,
    /// The shards whose threads the pools stand for.
    shards: Shards,
    max_head: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("pools", &self.shared.pools.len())
            .field("max_head", &self.shared.max_head)
            .finish()
    }
}

impl Client {
    /// A client connecting with `connector`, keeping at most `max_idle` idle connections per
    /// pool (one pool for each of `shards` and one for other threads), and refusing response
    /// heads longer than `max_head` bytes.
    pub fn new(
        connector: HttpsConnector<HttpConnector>,
        max_idle: usize,
        max_head: usize,
        shards: &Shards,
    ) -> Self {
        let pools = (0..=shards.count())
            .map(|_| {
                Arc::new(Pool {
                    idle: Mutex::new(Vec::new()),
                    max: max_idle,
                })
            })
            .collect();
        Client {
            shared: Arc::new(Shared {
                connector,
                pools,
                shards: shards.clone(),
                max_head,
            }),
        }
    }

    pub fn max_head(&self) -> usize {
        self.shared.max_head
    }

    /// Sends `req` on an idle connection of this thread's pool, or a new one, and reads the
    /// response head. The body streams from the connection as the caller reads it.
    pub async fn send(&self, req: Request<'_>) -> Result<http::Response<Body>, Error> {
        let elsewhere = self.shared.pools.len() - 1;
        let shard = self
            .shared
            .shards
            .current()
            .unwrap_or(elsewhere)
            .min(elsewhere);
        let pool = &self.shared.pools[shard];
        let wire = encode(&req)?;
        let mut io = match pool.take() {
            Some(mut io) => match write(&mut io, &wire).await {
                Ok(()) => io,
                // A kept connection the backend has just closed: nothing was taken in.
                Err(_) => self.fresh(req.uri, &wire).await?,
            },
            None => self.fresh(req.uri, &wire).await?,
        };
        let (head, rest) = read_head(&mut io, self.shared.max_head).await?;
        let (framing, reusable) = head.framing;
        let body = Body {
            io: Some(io),
            home: reusable.then(|| pool.clone()),
            buf: rest,
            framing,
        };
        let mut resp = http::Response::new(body);
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        *resp.headers_mut() = head.headers;
        Ok(resp)
    }

    /// A new connection with the request written on it.
    async fn fresh(&self, uri: &Uri, wire: &[u8]) -> Result<Io, Error> {
        let mut connector = self.shared.connector.clone();
        let connected = async {
            std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
            connector.call(uri.clone()).await
        };
        let stream = connected
            .await
            .map_err(|e| Error::Connect(error_chain(&*e)))?;
        let mut io: Io = match stream {
            MaybeHttpsStream::Http(tcp) => Box::new(TokioIo::new(tcp)),
            tls => Box::new(TokioIo::new(tls)),
        };
        write(&mut io, wire)
            .await
            .map_err(|e| Error::Exchange(format!("sending the request failed: {e}")))?;
        Ok(io)
    }
}

async fn write(io: &mut Io, wire: &[u8]) -> io::Result<()> {
    io.write_all(wire).await?;
    io.flush().await
}

/// A request as [`Client::send`] writes it, straight from its parts.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    /// A backend's configured headers, written first.
    pub configured: &'a HeaderMap,
    /// The request's own headers, written after them.
    pub headers: &'a [(HeaderName, HeaderValue)],
    /// A JSON body, sent with `content-type: application/json`.
    pub json: Option<&'a [u8]>,
}

/// Reads what has arrived (at most [`READ_CHUNK`] bytes) onto the end of `buf`; 0 at the end
/// of the stream. The read goes into the stack, so `buf` grows by what arrived only, and no
/// buffer is zeroed for it.
fn read_into(io: &mut Io, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
    let mut chunk = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
    let mut read = ReadBuf::uninit(&mut chunk);
    ready!(Pin::new(&mut **io).poll_read(cx, &mut read))?;
    buf.extend_from_slice(read.filled());
    Poll::Ready(Ok(read.filled().len()))
}

/// An error with the errors under it, as one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

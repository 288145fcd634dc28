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

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version, header};
use http_body::{Frame, SizeHint};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tower_service::Service;

/// One connection to a backend, plain or TLS. Boxed as a trait object so that a plain one
/// takes the room of a plain one: the TLS state alone is over 1 KiB.
type Io = Box<dyn Wire>;

trait Wire: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Wire for T {}

/// Most header lines a response head may have.
const MAX_HEADERS: usize = 100;
/// Longest chunk-size or trailer line.
const MAX_LINE: usize = 4096;
/// Most trailer lines after the last chunk.
const MAX_TRAILERS: usize = 100;
/// How much one read takes (into the stack; only what arrived is kept).
const READ_CHUNK: usize = 8192;
/// How long an idle connection stays in the pool.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

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
    /// pool, and refusing response heads longer than `max_head` bytes.
    pub fn new(connector: HttpsConnector<HttpConnector>, max_idle: usize, max_head: usize) -> Self {
        let pools = (0..=crate::shard::count())
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
        let shard = crate::shard::current().unwrap_or(elsewhere).min(elsewhere);
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
            .map_err(|e| Error::Connect(super::http::error_chain(&*e)))?;
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

/// The request as it goes on the wire: request line, `Host`, the request's headers,
/// `Content-Type` and `Content-Length` when there is a body (a POST always has a length), and
/// the body.
fn encode(req: &Request<'_>) -> Result<Vec<u8>, Error> {
    let uri = req.uri;
    let host = uri
        .host()
        .ok_or_else(|| Error::Exchange(format!("the URL `{uri}` names no host")))?;
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let body = req.json.unwrap_or_default();
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    if let Some(port) = uri.port() {
        out.push(b':');
        out.extend_from_slice(port.as_str().as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    let own = req.headers.iter().map(|(name, value)| (name, value));
    for (name, value) in req.configured.iter().chain(own) {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if req.json.is_some() {
        out.extend_from_slice(b"content-type: application/json\r\n");
    }
    if req.json.is_some() || req.method == Method::POST {
        out.extend_from_slice(b"content-length: ");
        // Into the request's own buffer (a `Vec` takes any write).
        let _ = std::io::Write::write_fmt(&mut out, format_args!("{}", body.len()));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Ok(out)
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    status: StatusCode,
    version: Version,
    /// The headers the gateway reads ([`READ`]); the others are checked by the parser and
    /// passed over.
    headers: HeaderMap,
    /// How the body ends, and whether the connection may serve another exchange (for a final
    /// response; an informational one has no body).
    framing: (Framing, bool),
    len: usize,
}

/// The response headers the gateway reads, besides those that frame the body.
static READ: [HeaderName; 2] = [
    header::CONTENT_TYPE,
    crate::protocol::header::MCP_SESSION_ID,
];

/// Reads until a final response head is complete (informational ones are skipped). Returns it
/// and what came after it.
async fn read_head(io: &mut Io, max: usize) -> Result<(Head, BytesMut), Error> {
    let mut buf = BytesMut::new();
    loop {
        // Nothing to parse before the first read.
        let parsed = if buf.is_empty() {
            None
        } else {
            parse_head(&buf)?
        };
        if let Some(head) = parsed {
            if head.len > max {
                return Err(Error::HeadTooLarge(max));
            }
            let rest = buf.split_off(head.len);
            if head.status.is_informational() {
                buf = rest;
                continue;
            }
            // What followed the head keeps the head's buffer only until it is read.
            let rest = if rest.is_empty() {
                BytesMut::new()
            } else {
                rest
            };
            return Ok((head, rest));
        }
        if buf.len() >= max {
            return Err(Error::HeadTooLarge(max));
        }
        let n = std::future::poll_fn(|cx| read_into(io, cx, &mut buf))
            .await
            .map_err(|e| Error::Exchange(format!("reading the response failed: {e}")))?;
        if n == 0 {
            return Err(Error::Exchange(
                "the backend closed the connection before its response".into(),
            ));
        }
    }
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

/// Parses a response head at the start of `buf`; `None` while incomplete. (Not async: the
/// header slots live on the stack only while parsing.)
fn parse_head(buf: &[u8]) -> Result<Option<Head>, Error> {
    // Slots the parser fills as it goes: none is written before it is used.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let bad = |what: String| Error::Exchange(format!("a malformed response head ({what})"));
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| bad("no valid status".into()))?;
    let version = match resp.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let lines = &*resp.headers;
    let framing = if status.is_informational() {
        (Framing::Length(0), false)
    } else {
        framing(status, version, lines)?
    };
    let mut headers = HeaderMap::new();
    for h in lines {
        let Some(name) = READ
            .iter()
            .find(|n| n.as_str().eq_ignore_ascii_case(h.name))
        else {
            continue;
        };
        let value =
            HeaderValue::from_bytes(h.value).map_err(|_| bad(format!("value of `{name}`")))?;
        headers.append(name.clone(), value);
    }
    Ok(Some(Head {
        status,
        version,
        headers,
        framing,
        len,
    }))
}

/// How a body ends, and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes are still to come.
    Length(u64),
    Chunked(Chunk),
    /// The connection's end ends the body.
    Eof,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    /// This many bytes of the chunk are still to come.
    Data(u64),
    /// The line end after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines read so far.
    Trailers(usize),
}

/// The framing of a final response's body, and whether its connection may serve another
/// exchange, from its status and header lines.
fn framing(
    status: StatusCode,
    version: Version,
    lines: &[httparse::Header<'_>],
) -> Result<(Framing, bool), Error> {
    let named = |name: HeaderName| {
        lines
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name.as_str()))
    };
    let values = |name: HeaderName| {
        named(name)
            .flat_map(|h| h.value.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
    };
    let mut reusable = version == Version::HTTP_11
        && !values(header::CONNECTION).any(|t| t.eq_ignore_ascii_case(b"close"));
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((Framing::Length(0), reusable));
    }
    let has = |name: HeaderName| named(name).next().is_some();
    if has(header::TRANSFER_ENCODING) {
        // Both framings at once is how requests get smuggled: believe the coding, keep nothing.
        if has(header::CONTENT_LENGTH) {
            reusable = false;
        }
        return Ok(match values(header::TRANSFER_ENCODING).next_back() {
            Some(c) if c.eq_ignore_ascii_case(b"chunked") => {
                (Framing::Chunked(Chunk::Size), reusable)
            }
            _ => (Framing::Eof, false),
        });
    }
    let mut length = None;
    for part in values(header::CONTENT_LENGTH) {
        let n = std::str::from_utf8(part)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| Error::Exchange("an invalid Content-Length".into()))?;
        if length.is_some_and(|l| l != n) {
            return Err(Error::Exchange("conflicting Content-Length values".into()));
        }
        length = Some(n);
    }
    Ok(match length {
        Some(n) => (Framing::Length(n), reusable),
        None => (Framing::Eof, false),
    })
}

/// A response body, read from its connection as it is polled. Dropped with more to come, it
/// closes the connection; once nothing is left to come, it gives the connection back to its pool.
pub struct Body {
    /// None once the body has ended or failed.
    io: Option<Io>,
    /// The pool the connection returns to, if it may serve another exchange.
    home: Option<Arc<Pool>>,
    /// Received and not yet handed out; empty (and unallocated) while the stream waits.
    buf: BytesMut,
    framing: Framing,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("framing", &self.framing)
            .field("buffered", &self.buf.len())
            .finish()
    }
}

/// What the buffered bytes give next.
enum Step {
    Data(Bytes),
    More,
    End,
}

impl Body {
    /// The next piece the buffered bytes make, decoding the framing.
    fn step(&mut self) -> io::Result<Step> {
        loop {
            match self.framing {
                Framing::Done | Framing::Length(0) => return Ok(Step::End),
                Framing::Length(n) => {
                    return Ok(match self.take(n) {
                        Some(b) => {
                            self.framing = Framing::Length(n - b.len() as u64);
                            Step::Data(b)
                        }
                        None => Step::More,
                    });
                }
                Framing::Eof => {
                    return Ok(self.take(u64::MAX).map_or(Step::More, Step::Data));
                }
                Framing::Chunked(Chunk::Size) => {
                    let Some(line) = self.line()? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&line)?;
                    self.framing = Framing::Chunked(if size == 0 {
                        Chunk::Trailers(0)
                    } else {
                        Chunk::Data(size)
                    });
                }
                Framing::Chunked(Chunk::Data(0)) => self.framing = Framing::Chunked(Chunk::DataEnd),
                Framing::Chunked(Chunk::Data(n)) => {
                    return Ok(match self.take(n) {
                        Some(b) => {
                            self.framing = Framing::Chunked(Chunk::Data(n - b.len() as u64));
                            Step::Data(b)
                        }
                        None => Step::More,
                    });
                }
                Framing::Chunked(Chunk::DataEnd) => {
                    let Some(line) = self.line()? else {
                        return Ok(Step::More);
                    };
                    if !line.is_empty() {
                        return Err(invalid("a chunk longer than its size"));
                    }
                    self.framing = Framing::Chunked(Chunk::Size);
                }
                Framing::Chunked(Chunk::Trailers(k)) => {
                    let Some(line) = self.line()? else {
                        return Ok(Step::More);
                    };
                    if line.is_empty() {
                        self.framing = Framing::Done;
                        return Ok(Step::End);
                    }
                    if k >= MAX_TRAILERS {
                        return Err(invalid("too many trailer lines"));
                    }
                    self.framing = Framing::Chunked(Chunk::Trailers(k + 1));
                }
            }
        }
    }

    /// Up to `max` buffered bytes, if any.
    fn take(&mut self, max: u64) -> Option<Bytes> {
        if self.buf.is_empty() {
            return None;
        }
        let n = usize::try_from(max).map_or(self.buf.len(), |m| m.min(self.buf.len()));
        let piece = self.buf.split_to(n).freeze();
        self.release_if_empty();
        Some(piece)
    }

    /// The next buffered line without its line end, if a whole one is there.
    fn line(&mut self) -> io::Result<Option<BytesMut>> {
        let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
            if self.buf.len() > MAX_LINE {
                return Err(invalid("an over-long chunk line"));
            }
            return Ok(None);
        };
        if end > MAX_LINE {
            return Err(invalid("an over-long chunk line"));
        }
        let mut line = self.buf.split_to(end + 1);
        line.truncate(end);
        if line.last() == Some(&b'\r') {
            line.truncate(end - 1);
        }
        self.release_if_empty();
        Ok(Some(line))
    }

    /// An empty buffer lets go of its allocation, which what was handed out may still share.
    fn release_if_empty(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }

    /// The body ended: the connection goes back to its pool if it may.
    fn finish(&mut self) {
        self.framing = Framing::Done;
        let io = self.io.take();
        if let (Some(io), Some(home)) = (io, self.home.take())
            && self.buf.is_empty()
        {
            home.put(io);
        }
        self.buf = BytesMut::new();
    }

    /// The body failed: the connection is closed.
    fn fail(&mut self) {
        self.framing = Framing::Done;
        self.io = None;
        self.home = None;
        self.buf = BytesMut::new();
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{what} in a chunked body"),
    )
}

/// A chunk-size line: hex digits, then optional extensions after `;`, which are ignored.
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(invalid("an invalid chunk size"));
    }
    let text = std::str::from_utf8(digits).map_err(|_| invalid("an invalid chunk size"))?;
    u64::from_str_radix(text, 16).map_err(|_| invalid("an invalid chunk size"))
}

impl Drop for Body {
    /// A body with nothing left to come gives its connection back even if the caller never
    /// polled it to its end (a 202 to an answer is dropped unread); any other is closed.
    fn drop(&mut self) {
        if http_body::Body::is_end_stream(self) {
            self.finish();
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            match this.step() {
                Ok(Step::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                Ok(Step::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Step::More) => {}
                Err(e) => {
                    this.fail();
                    return Poll::Ready(Some(Err(e)));
                }
            }
            let Some(io) = this.io.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(read_into(io, cx, &mut this.buf)) {
                Ok(0) => {
                    if this.framing == Framing::Eof {
                        this.fail();
                        return Poll::Ready(None);
                    }
                    this.fail();
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the backend closed the connection in the middle of a response body",
                    ))));
                }
                Ok(_) => {}
                Err(e) => {
                    this.fail();
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.framing, Framing::Done | Framing::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(n) => SizeHint::with_exact(n),
            Framing::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// Idle connections of one shard, the most recently used on top.
struct Pool {
    idle: Mutex<Vec<Idle>>,
    max: usize,
}

struct Idle {
    io: Io,
    since: Instant,
}

impl Pool {
    /// The most recently used idle connection the backend has not closed.
    fn take(&self) -> Option<Io> {
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

    fn put(&self, io: Io) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    fn client() -> Client {
        Client::new(connector(Duration::from_secs(5), None, None), 4, 1024)
    }

    /// A backend that answers each connection's requests with `answers`, in order, written in
    /// pieces of `piece` bytes; it reports each request it read.
    async fn backend(
        answers: Vec<&'static [u8]>,
        piece: usize,
    ) -> (Uri, tokio::sync::mpsc::UnboundedReceiver<String>) {
        backend_on(answers, piece, None).await
    }

    /// [`backend`], over TLS with `tls` if given (its URL is then `https://localhost:PORT`).
    async fn backend_on(
        answers: Vec<&'static [u8]>,
        piece: usize,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> (Uri, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let uri = match &tls {
            Some(_) => format!("https://localhost:{}/mcp?x=1", addr.port()),
            None => format!("http://{addr}/mcp?x=1"),
        };
        tokio::spawn(async move {
            loop {
                let (s, _) = listener.accept().await.unwrap();
                let answers = answers.clone();
                let tx = tx.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        // A handshake the client refuses ends the connection here.
                        Some(tls) => {
                            if let Ok(s) = tls.accept(s).await {
                                serve(s, answers, piece, tx).await
                            }
                        }
                        None => serve(s, answers, piece, tx).await,
                    }
                });
            }
        });
        (uri.parse().unwrap(), rx)
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        mut s: S,
        answers: Vec<&'static [u8]>,
        piece: usize,
        tx: tokio::sync::mpsc::UnboundedSender<String>,
    ) {
        for answer in answers {
            let mut req = Vec::new();
            let mut byte = [0u8; 1];
            // Head, then the body its Content-Length announces.
            while !req.ends_with(b"\r\n\r\n") {
                if s.read(&mut byte).await.unwrap_or(0) == 0 {
                    return;
                }
                req.push(byte[0]);
            }
            let text = String::from_utf8(req).unwrap();
            let len = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.parse::<usize>().unwrap());
            let mut body = vec![0u8; len];
            s.read_exact(&mut body).await.unwrap();
            tx.send(text + std::str::from_utf8(&body).unwrap()).unwrap();
            for p in answer.chunks(piece) {
                s.write_all(p).await.unwrap();
                s.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// A POST of a JSON `body` that accepts an event stream.
    struct Post {
        uri: Uri,
        configured: HeaderMap,
        headers: Vec<(HeaderName, HeaderValue)>,
        body: &'static str,
    }

    impl Post {
        fn req(&self) -> Request<'_> {
            Request {
                method: &Method::POST,
                uri: &self.uri,
                configured: &self.configured,
                headers: &self.headers,
                json: Some(self.body.as_bytes()),
            }
        }
    }

    fn post(uri: &Uri, body: &'static str) -> Post {
        Post {
            uri: uri.clone(),
            configured: HeaderMap::new(),
            headers: vec![(
                header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            )],
            body,
        }
    }

    async fn text(resp: http::Response<Body>) -> Result<String, io::Error> {
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8(bytes.to_vec()).unwrap())
    }

    proptest::proptest! {
        #[test]
        fn any_head_bytes_are_refused_or_read_never_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)
        ) {
            let _ = parse_head(&bytes);
        }

        #[test]
        fn a_head_is_read_once_it_has_all_arrived(
            status in 200u16..600,
            length in 0u64..(1 << 40),
            session in "[!-~]{1,64}",
            padding in "[ -~]{0,200}",
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let head = format!(
                "HTTP/1.1 {status} Whatever\r\nx-padding: {padding}\r\ncontent-length: {length}\r\nMcp-Session-Id: {session}\r\n\r\n"
            );
            let bytes = head.as_bytes();
            let partial = &bytes[..cut.index(bytes.len())];
            proptest::prop_assert!(matches!(parse_head(partial), Ok(None)));
            let read = parse_head(bytes).expect("a valid head").expect("complete");
            proptest::prop_assert_eq!(read.status.as_u16(), status);
            proptest::prop_assert_eq!(read.len, bytes.len());
            proptest::prop_assert_eq!(
                read.headers[crate::protocol::header::MCP_SESSION_ID].as_bytes(),
                session.as_bytes()
            );
        }
    }

    #[tokio::test]
    async fn chunked_and_sized_bodies_arrive_whole_and_the_connection_is_kept() {
        let chunked: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: t\r\n\r\n";
        let sized: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n{ }\n";
        for piece in [1, 7, 4096] {
            let (uri, mut seen) = backend(vec![chunked, sized], piece).await;
            let c = client();
            let resp = c.send(post(&uri, "{\"a\":1}").req()).await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(resp.headers()["content-type"], "text/event-stream");
            assert_eq!(text(resp).await.unwrap(), "hello, world");
            let req = seen.recv().await.unwrap();
            assert!(
                req.starts_with("POST /mcp?x=1 HTTP/1.1\r\nhost: 127.0.0.1:"),
                "{req}"
            );
            assert!(req.contains("accept: text/event-stream\r\n"), "{req}");
            assert!(req.ends_with("content-length: 7\r\n\r\n{\"a\":1}"), "{req}");
            // The second exchange goes on the same connection: the backend serves both there.
            let resp = c.send(post(&uri, "{}").req()).await.unwrap();
            assert_eq!(text(resp).await.unwrap(), "{ }\n");
            assert!(seen.recv().await.is_some());
        }
    }

    /// A self-signed certificate for `localhost`: an acceptor that serves it, and a client that
    /// trusts it as its private CA.
    fn tls_pair() -> (tokio_rustls::TlsAcceptor, Client) {
        use tokio_rustls::rustls::pki_types::PrivateKeyDer;
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(signing_key.serialize_der().into()),
        )
        .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        (
            tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            Client::new(
                connector(Duration::from_secs(5), Some(&roots), None),
                4,
                1024,
            ),
        )
    }

    #[tokio::test]
    async fn over_tls_bodies_arrive_whole_and_the_connection_is_kept() {
        let chunked: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
        let empty: &[u8] = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
        let sized: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n{ }\n";
        for piece in [1, 4096] {
            let (acceptor, c) = tls_pair();
            let (uri, mut seen) =
                backend_on(vec![chunked, empty, sized], piece, Some(acceptor)).await;
            let resp = c.send(post(&uri, "{\"a\":1}").req()).await.unwrap();
            assert_eq!(resp.headers()["content-type"], "text/event-stream");
            assert_eq!(text(resp).await.unwrap(), "hello, world");
            let req = seen.recv().await.unwrap();
            assert!(
                req.starts_with("POST /mcp?x=1 HTTP/1.1\r\nhost: localhost:"),
                "{req}"
            );
            assert!(req.ends_with("content-length: 7\r\n\r\n{\"a\":1}"), "{req}");
            // An empty answer (as a backend gives the gateway's answers to its requests) gives
            // its connection back unread.
            let resp = c.send(post(&uri, "{}").req()).await.unwrap();
            assert_eq!(resp.status(), StatusCode::ACCEPTED);
            drop(resp);
            // All three exchanges go on one connection: only the first serves `sized` third.
            let resp = c.send(post(&uri, "{}").req()).await.unwrap();
            assert_eq!(text(resp).await.unwrap(), "{ }\n");
            assert_eq!(seen.recv().await.map(|_| ()), Some(()));
            assert_eq!(idle(&c), 1, "piece {piece}");
        }
    }

    #[tokio::test]
    async fn a_backend_certificate_no_root_vouches_for_is_refused() {
        let (acceptor, _) = tls_pair();
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (uri, _seen) = backend_on(vec![ok], 4096, Some(acceptor)).await;
        // The gateway's connector trusts the bundled public roots, which did not sign it.
        match client()
            .send(post(&uri, "{}").req())
            .await
            .map(|r| r.status())
        {
            Err(Error::Connect(e)) => {
                assert!(e.to_lowercase().contains("certificate"), "{e}")
            }
            other => panic!("expected the certificate refused, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_body_until_close_ends_with_the_connection_and_is_not_kept() {
        let (uri, _seen) = backend(vec![b"HTTP/1.1 200 OK\r\n\r\nall of it"], 3).await;
        let c = client();
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        let body = tokio::time::timeout(Duration::from_secs(5), async {
            // The backend's task ends after its one answer, closing the connection.
            text(resp).await
        });
        assert_eq!(body.await.unwrap().unwrap(), "all of it");
        assert!(
            c.shared
                .pools
                .iter()
                .all(|p| p.idle.lock().unwrap().is_empty())
        );
    }

    fn idle(c: &Client) -> usize {
        c.shared
            .pools
            .iter()
            .map(|p| p.idle.lock().unwrap().len())
            .sum()
    }

    #[tokio::test]
    async fn only_a_whole_unambiguous_keep_alive_response_gives_its_connection_back() {
        let kept: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let not_kept: [&'static [u8]; 3] = [
            b"HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        ];
        for answer in not_kept {
            let (uri, _seen) = backend(vec![answer], 4096).await;
            let c = client();
            let resp = c.send(post(&uri, "{}").req()).await.unwrap();
            assert_eq!(text(resp).await.unwrap(), "ok");
            assert_eq!(idle(&c), 0, "{}", String::from_utf8_lossy(answer));
        }
        let (uri, _seen) = backend(vec![kept], 4096).await;
        let c = client();
        let resp = c.send(post(&uri, "{}").req()).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), "ok");
        assert_eq!(idle(&c), 1);
    }

    #[tokio::test]
    async fn an_empty_body_gives_its_connection_back_unread() {
        let accepted: &[u8] = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
        let (uri, mut seen) = backend(vec![accepted, accepted], 4096).await;
        let c = client();
        for _ in 0..2 {
            let resp = c.send(post(&uri, "{}").req()).await.unwrap();
            assert_eq!(resp.status(), StatusCode::ACCEPTED);
            drop(resp);
            assert_eq!(idle(&c), 1);
            assert!(seen.recv().await.is_some());
        }
    }

    #[tokio::test]
    async fn a_closed_kept_connection_is_replaced_before_use() {
        // Each connection answers once, then the backend closes it.
        let sized: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (uri, _seen) = backend(vec![sized], 4096).await;
        let c = client();
        for _ in 0..3 {
            let resp = c.send(post(&uri, "{}").req()).await.unwrap();
            assert_eq!(text(resp).await.unwrap(), "ok");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn a_head_keeps_the_headers_read_and_frames_by_names_in_any_case() {
        let wire: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
            Cache-Control: no-cache\r\nMCP-Session-Id: s1\r\n\
            Transfer-Encoding: gzip, Chunked\r\nDate: x\r\n\r\nrest";
        let head = parse_head(wire).unwrap().unwrap();
        assert_eq!(head.len, wire.len() - "rest".len());
        let kept: Vec<_> = head
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            kept,
            [
                ("content-type", "text/event-stream"),
                ("mcp-session-id", "s1")
            ]
        );
        assert_eq!(head.framing, (Framing::Chunked(Chunk::Size), true));
        let sized =
            parse_head(b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 7\r\nConnection: Close\r\n\r\n");
        assert_eq!(sized.unwrap().unwrap().framing, (Framing::Length(7), false));
        let partial = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: a");
        assert!(partial.unwrap().is_none());
    }

    #[tokio::test]
    async fn bad_responses_fail_with_a_reason() {
        let cases: [(&'static [u8], &str); 6] = [
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                "invalid chunk size",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n",
                "longer than its size",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
                "middle of a response body",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nabc",
                "conflicting Content-Length",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
                "invalid Content-Length",
            ),
            (b"HTTP/1.1 2000 OK\r\n\r\n", "malformed response head"),
        ];
        for (answer, why) in cases {
            let (uri, _seen) = backend(vec![answer], 4096).await;
            let outcome = match client().send(post(&uri, "{}").req()).await {
                Ok(resp) => text(resp).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let err = outcome.expect_err(why);
            assert!(err.contains(why), "{err} should say {why}");
        }
    }

    #[tokio::test]
    async fn a_head_over_the_limit_is_refused() {
        let mut long = b"HTTP/1.1 200 OK\r\nx-pad: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 2000));
        long.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
        let long: &'static [u8] = long.leak();
        // Whole in one read, or a byte at a time until the limit is reached.
        for piece in [4096, 1] {
            let (uri, _seen) = backend(vec![long], piece).await;
            assert_eq!(
                client().send(post(&uri, "{}").req()).await.unwrap_err(),
                Error::HeadTooLarge(1024)
            );
        }
    }

    #[tokio::test]
    async fn no_listener_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        assert!(matches!(
            client().send(post(&uri, "{}").req()).await,
            Err(Error::Connect(_))
        ));
    }

    #[test]
    fn chunk_sizes_are_hex_with_optional_extensions() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"A ; name=value").unwrap(), 10);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        for bad in [&b""[..], b"g", b"-1", b"1 2", b"1234567890abcdef0"] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }
}

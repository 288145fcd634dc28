//! A response body as the caller reads it: [`Body`] decodes the framing the head announced
//! (a length, chunked transfer coding, or the connection's end) from reads into the stack, and
//! hands the connection back to its pool once nothing is left to come.

use super::head::{Chunk, Framing};
use super::pool::Pool;
use super::{Io, read_into};
use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

/// Longest chunk-size or trailer line.
const MAX_LINE: usize = 4096;
/// Most trailer lines after the last chunk.
const MAX_TRAILERS: usize = 100;

/// A response body, read from its connection as it is polled. Dropped with more to come, it
/// closes the connection; once nothing is left to come, it gives the connection back to its pool.
pub struct Body {
    /// None once the body has ended or failed.
    pub(super) io: Option<Io>,
    /// The pool the connection returns to, if it may serve another exchange.
    pub(super) home: Option<Arc<Pool>>,
    /// Received and not yet handed out; empty (and unallocated) while the stream waits.
    pub(super) buf: BytesMut,
    pub(super) framing: Framing,
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
pub(super) fn chunk_size(line: &[u8]) -> io::Result<u64> {
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

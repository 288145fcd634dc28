//! The exchange's head on the wire: the request as [`encode`] writes it, and the response head
//! as [`read_head`] reads and [`parse_head`] parses it, down to the [`Framing`] that tells the
//! body where it ends and whether the connection may serve another exchange.

use super::{Error, Io, Request, read_into};
use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version, header};
use std::mem::MaybeUninit;

/// Most header lines a response head may have.
const MAX_HEADERS: usize = 100;

/// The request as it goes on the wire: request line, `Host`, the request's headers,
/// `Content-Type` and `Content-Length` when there is a body (a POST always has a length), and
/// the body.
pub(super) fn encode(req: &Request<'_>) -> Result<Vec<u8>, Error> {
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
pub(super) struct Head {
    pub(super) status: StatusCode,
    pub(super) version: Version,
    /// The headers the gateway reads ([`READ`]); the others are checked by the parser and
    /// passed over.
    pub(super) headers: HeaderMap,
    /// How the body ends, and whether the connection may serve another exchange (for a final
    /// response; an informational one has no body).
    pub(super) framing: (Framing, bool),
    pub(super) len: usize,
}

/// The response headers the gateway reads, besides those that frame the body.
static READ: [HeaderName; 2] = [
    header::CONTENT_TYPE,
    crate::protocol::header::MCP_SESSION_ID,
];

/// Reads until a final response head is complete (informational ones are skipped). Returns it
/// and what came after it.
pub(super) async fn read_head(io: &mut Io, max: usize) -> Result<(Head, BytesMut), Error> {
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

/// Parses a response head at the start of `buf`; `None` while incomplete. (Not async: the
/// header slots live on the stack only while parsing.)
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, Error> {
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
pub(super) enum Framing {
    /// This many bytes are still to come.
    Length(u64),
    Chunked(Chunk),
    /// The connection's end ends the body.
    Eof,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
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

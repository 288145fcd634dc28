//! Server-Sent Events: encoding for the gateway's response streams, and decoding (with a size
//! limit) of the streams legacy HTTP backends send. Parsing is `sse-stream`'s; this module adds
//! the bound that keeps one endless event from growing a buffer without limit.

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use serde_json::Value;

/// One SSE event: `event: NAME`, one `data:` line, blank line.
pub fn encode(event: &str, data: &Value) -> String {
    encode_text(event, &data.to_string())
}

/// One SSE event with an `id:` line, which a client may resume after with `Last-Event-ID`.
pub fn encode_with_id(event: &str, id: &str, data: &Value) -> String {
    format!("id: {id}\n{}", encode(event, data))
}

/// One event of JSON text, which may span lines (a backend's result as it wrote it): one `data`
/// line for each, which a reader joins with line feeds, whitespace to JSON.
pub fn encode_text(event: &str, data: &str) -> String {
    let mut out = String::with_capacity(data.len() + event.len() + 16);
    out.push_str("event: ");
    out.push_str(event);
    out.push('\n');
    for line in data.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// One decoded event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// `message` when the stream named none.
    pub event: String,
    pub data: String,
    pub id: Option<String>,
    pub retry_ms: Option<u64>,
}

/// Why a stream of events stopped early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the backend sent an SSE event over {0} bytes")]
    TooLarge(usize),
    /// The body broke off (the connection closed or failed), or what came does not parse.
    #[error("the event stream failed: {0}")]
    Stream(String),
}

/// Decodes SSE from a byte stream. An event longer than `max_event` bytes ends the stream with
/// [`DecodeError::TooLarge`]; comments and events without data or metadata are skipped.
pub fn decode<S, E>(
    bytes: S,
    max_event: usize,
) -> impl Stream<Item = Result<Event, DecodeError>> + Send + Unpin
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut bound = Bound::new(max_event);
    let capped = bytes
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(move |chunk| std::future::ready(bound.feed(chunk)));
    sse_stream::SseByteStream::new(capped)
        .map(move |item| match item {
            Ok(sse) => Ok(Event {
                event: sse.event.unwrap_or_else(|| "message".to_owned()),
                data: sse.data.unwrap_or_default(),
                id: sse.id,
                retry_ms: sse.retry,
            }),
            Err(e) => Err(match too_large(&e) {
                Some(limit) => DecodeError::TooLarge(limit),
                None => DecodeError::Stream(match e {
                    // The body's own error says what broke.
                    sse_stream::Error::Body(inner) => inner.to_string(),
                    other => other.to_string(),
                }),
            }),
        })
        .filter(|item| {
            std::future::ready(match item {
                Ok(ev) => !ev.data.is_empty() || ev.id.is_some() || ev.retry_ms.is_some(),
                Err(_) => true,
            })
        })
}

/// Counts bytes since the last blank line (the end of an event). Lines end with `\n` (a `\r`
/// before it is ignored); streams that end lines with a bare `\r` are not bounded per event and
/// so hit the limit, which errs on the side of memory.
struct Bound {
    max: usize,
    in_event: usize,
    line_empty: bool,
}

#[derive(Debug)]
struct TooLarge(usize);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an SSE event over {} bytes", self.0)
    }
}

impl std::error::Error for TooLarge {}

impl Bound {
    fn new(max: usize) -> Bound {
        Bound {
            max,
            in_event: 0,
            line_empty: true,
        }
    }

    fn feed(&mut self, chunk: Bytes) -> Result<Bytes, std::io::Error> {
        let mut rest = &chunk[..];
        loop {
            let end = memchr::memchr(b'\n', rest);
            let line = &rest[..end.unwrap_or(rest.len())];
            let counted = line.len() - memchr::memchr_iter(b'\r', line).count();
            if counted > 0 {
                self.line_empty = false;
                self.in_event += counted;
                if self.in_event > self.max {
                    return Err(std::io::Error::other(TooLarge(self.max)));
                }
            }
            let Some(end) = end else {
                return Ok(chunk);
            };
            if self.line_empty {
                self.in_event = 0;
            }
            self.line_empty = true;
            rest = &rest[end + 1..];
        }
    }
}

fn too_large(e: &sse_stream::Error) -> Option<usize> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(t) = err.downcast_ref::<TooLarge>() {
            return Some(t.0);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(t) = io.get_ref().and_then(|i| i.downcast_ref::<TooLarge>())
        {
            return Some(t.0);
        }
        source = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(
        parts: &[&str],
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin + 'static {
        let owned: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Bytes::from(p.to_string())))
            .collect();
        futures_util::stream::iter(owned)
    }

    async fn collect(parts: &[&str], max: usize) -> Vec<Result<Event, DecodeError>> {
        decode(chunks(parts), max).collect().await
    }

    #[test]
    fn newlines_in_data_stay_escaped() {
        let ev = encode("message", &serde_json::json!({"t": "a\nb"}));
        assert_eq!(ev, "event: message\ndata: {\"t\":\"a\\nb\"}\n\n");
    }

    #[tokio::test]
    async fn json_text_over_several_lines_is_one_event_of_the_same_json() {
        let text = "{\r\n  \"content\": [\n    {\"t\": \"a\\nb\"}\r  ],\n\n  \"n\": 1\n}";
        let ev = encode_text("message", text);
        assert!(ev.starts_with("event: message\ndata: {\n"), "{ev:?}");
        let got = collect(&[&ev], 1024).await;
        let [Ok(event)] = &got[..] else {
            panic!("{got:?}")
        };
        let back: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"content": [{"t": "a\nb"}], "n": 1})
        );
    }

    #[tokio::test]
    async fn events_split_across_chunks_decode_with_ids_and_retry() {
        let got = collect(
            &[
                "retry: 250\n\nid: 7\nevent: mess",
                "age\ndata: {\"a\"",
                ":1}\r\n\r\n",
                "data: x\n\n",
            ],
            1024,
        )
        .await;
        let got: Vec<Event> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got[0].retry_ms, Some(250));
        assert_eq!(got[1].id.as_deref(), Some("7"));
        assert_eq!(got[1].event, "message");
        assert_eq!(got[1].data, "{\"a\":1}");
        assert_eq!(got[2].data, "x");
        assert_eq!(got.len(), 3);
    }

    #[tokio::test]
    async fn an_event_over_the_limit_ends_the_stream_with_an_error() {
        let big = format!("data: {}\n\n", "y".repeat(100));
        let got = collect(&["data: ok\n\n", &big, "data: after\n\n"], 64).await;
        assert_eq!(got[0].as_ref().unwrap().data, "ok");
        assert_eq!(got[1], Err(DecodeError::TooLarge(64)));
        assert_eq!(got.len(), 2);
    }

    /// The rule `Bound` keeps, a byte at a time: bytes other than `\r` since the last blank
    /// line, and whether that count passed the limit at the end of each chunk.
    fn counted_a_byte_at_a_time(max: usize, chunks: &[Vec<u8>]) -> Vec<bool> {
        let (mut in_event, mut line_empty) = (0, true);
        let mut ok = Vec::new();
        for chunk in chunks {
            for &b in chunk {
                match b {
                    b'\n' => {
                        if line_empty {
                            in_event = 0;
                        }
                        line_empty = true;
                    }
                    b'\r' => {}
                    _ => {
                        line_empty = false;
                        in_event += 1;
                    }
                }
                if in_event > max {
                    ok.push(false);
                    return ok;
                }
            }
            ok.push(true);
        }
        ok
    }

    #[test]
    fn the_bound_counts_as_a_byte_at_a_time_across_any_split() {
        // A fixed pseudo-random walk over text of `x`, `\r` and `\n`, cut at random places.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..2000 {
            let max = 1 + next(12) as usize;
            let text: Vec<u8> = (0..next(60))
                .map(|_| [b'x', b'x', b'x', b'\r', b'\n'][next(5) as usize])
                .collect();
            let mut chunks = Vec::new();
            let mut rest = &text[..];
            while !rest.is_empty() {
                let at = 1 + next(rest.len() as u64) as usize;
                chunks.push(rest[..at].to_vec());
                rest = &rest[at..];
            }
            let mut bound = Bound::new(max);
            let mut got = Vec::new();
            for chunk in &chunks {
                let ok = bound.feed(Bytes::from(chunk.clone())).is_ok();
                got.push(ok);
                if !ok {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&text);
            assert_eq!(
                got,
                counted_a_byte_at_a_time(max, &chunks),
                "{text:?} {max}"
            );
        }
    }

    #[tokio::test]
    async fn many_small_events_never_hit_the_limit() {
        let parts: Vec<String> = (0..100).map(|i| format!("data: {i}\n\n")).collect();
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let got = collect(&refs, 16).await;
        assert_eq!(got.len(), 100);
        assert!(got.iter().all(Result::is_ok));
    }
}

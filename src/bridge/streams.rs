//! A legacy session's streams, kept so a client can resume one: each stream (a request's
//! answer, or the session's own, number 0) is numbered in its session, and the events sent on
//! it are kept as they went out: the last [`KEPT_EVENTS`] of each of the last [`KEPT_STREAMS`]
//! streams, at most [`KEPT_BYTES`] in all (the oldest streams' events go first). A request's
//! answer whose client went away before its response is kept too, still receiving, for a
//! resumption to pick up. Event ids are `<stream>-<number>`; how an event is written (SSE) is
//! the face's.

use bytes::Bytes;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Events kept of each stream.
pub const KEPT_EVENTS: usize = 64;
/// Streams kept of each session (the session's own stream always).
pub const KEPT_STREAMS: usize = 16;
/// Bytes of events kept of each session: a large result may not be resumable.
pub const KEPT_BYTES: usize = 1 << 20;

/// The stream number of the session's own stream (the GET stream).
pub const STANDALONE: u64 = 0;

/// A session's streams.
#[derive(Debug, Default)]
pub struct Streams {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    streams: BTreeMap<u64, Kept>,
    /// Bytes of all the events kept.
    bytes: usize,
}

#[derive(Debug, Default)]
struct Kept {
    /// The number the next event gets.
    next: u64,
    sent: VecDeque<(u64, Bytes)>,
    /// A request's answer still receiving, which its client let go of.
    detached: Option<mpsc::Receiver<Value>>,
}

/// Where a resumption starts: the events sent after the one it names, and the answer's
/// receiver if it still runs detached.
#[derive(Debug)]
pub struct Resumed {
    pub stream: u64,
    pub missed: Vec<Bytes>,
    pub detached: Option<mpsc::Receiver<Value>>,
}

/// Reads `<stream>-<number>`.
pub fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (stream, number) = id.split_once('-')?;
    Some((stream.parse().ok()?, number.parse().ok()?))
}

impl Inner {
    /// Forgets the oldest events (of the oldest streams first) until the budget holds.
    fn trim(&mut self) {
        while self.bytes > KEPT_BYTES {
            let oldest = self.streams.values_mut().find(|k| !k.sent.is_empty());
            let Some((_, event)) = oldest.and_then(|k| k.sent.pop_front()) else {
                return;
            };
            self.bytes -= event.len();
        }
    }

    fn forget(&mut self, stream: u64) {
        if let Some(kept) = self.streams.remove(&stream) {
            self.bytes -= kept.sent.iter().map(|(_, e)| e.len()).sum::<usize>();
        }
    }
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("streams lock")
    }

    /// A new request's stream; the oldest beyond [`KEPT_STREAMS`] is forgotten.
    pub fn open(&self) -> u64 {
        let mut inner = self.lock();
        inner.next += 1;
        let stream = inner.next;
        inner.streams.insert(stream, Kept::default());
        while inner.streams.len() > KEPT_STREAMS {
            let oldest = inner.streams.keys().find(|s| **s != STANDALONE).copied();
            match oldest {
                Some(s) => inner.forget(s),
                None => break,
            }
        }
        stream
    }

    /// The next event of `stream`, written by `encode` under the id it is given; kept, and
    /// returned to be sent.
    pub fn sent(&self, stream: u64, encode: impl FnOnce(&str) -> Bytes) -> Bytes {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let kept = inner.streams.entry(stream).or_default();
        let number = kept.next;
        kept.next += 1;
        let event = encode(&format!("{stream}-{number}"));
        kept.sent.push_back((number, event.clone()));
        inner.bytes += event.len();
        if kept.sent.len() > KEPT_EVENTS
            && let Some((_, dropped)) = kept.sent.pop_front()
        {
            inner.bytes -= dropped.len();
        }
        inner.trim();
        event
    }

    /// Keeps a request's answer that its client let go of before the response.
    pub fn detach(&self, stream: u64, rx: mpsc::Receiver<Value>) {
        if let Some(kept) = self.lock().streams.get_mut(&stream) {
            kept.detached = Some(rx);
        }
    }

    /// Resumes after the event `id`, if its stream is still kept.
    pub fn resume(&self, id: &str) -> Option<Resumed> {
        let (stream, after) = parse_id(id)?;
        let mut inner = self.lock();
        let kept = inner.streams.get_mut(&stream)?;
        let missed = kept
            .sent
            .iter()
            .filter(|(n, _)| *n > after)
            .map(|(_, event)| event.clone())
            .collect();
        Some(Resumed {
            stream,
            missed,
            detached: kept.detached.take(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> impl FnOnce(&str) -> Bytes + '_ {
        move |id| Bytes::from(format!("{id}:{text}"))
    }

    #[test]
    fn what_was_sent_after_an_event_is_given_again() {
        let s = Streams::default();
        let a = s.open();
        let first = s.sent(a, event("one"));
        assert_eq!(first, Bytes::from(format!("{a}-0:one")));
        s.sent(a, event("two"));
        s.sent(a, event("three"));
        let r = s.resume(&format!("{a}-0")).unwrap();
        assert_eq!(r.stream, a);
        let missed: Vec<Bytes> = vec![format!("{a}-1:two").into(), format!("{a}-2:three").into()];
        assert_eq!(r.missed, missed);
        assert!(s.resume("x").is_none());
        assert!(s.resume("99-0").is_none());
    }

    #[test]
    fn streams_events_and_bytes_are_bounded() {
        let s = Streams::default();
        let first = s.open();
        for _ in 0..KEPT_STREAMS {
            s.open();
        }
        assert!(
            s.resume(&format!("{first}-0")).is_none(),
            "the oldest is forgotten"
        );
        let last = s.open();
        for _ in 0..(KEPT_EVENTS + 10) {
            s.sent(last, event("x"));
        }
        let r = s.resume(&format!("{last}-0")).unwrap();
        assert_eq!(r.missed.len(), KEPT_EVENTS);
        assert_eq!(
            r.missed[0],
            Bytes::from(format!("{last}-10:x")),
            "the first ones are gone"
        );
        // Two events of more than half the budget: only the later is kept.
        let big = "b".repeat(KEPT_BYTES / 2 + 1);
        let other = s.open();
        s.sent(other, event(&big));
        s.sent(other, event(&big));
        let kept = s.lock().bytes;
        assert!(kept <= KEPT_BYTES, "{kept}");
        let r = s.resume(&format!("{other}-0")).unwrap();
        assert_eq!(r.missed.len(), 1);
        assert!(s.resume(&format!("{last}-0")).unwrap().missed.is_empty());
    }

    #[test]
    fn a_detached_answer_is_handed_to_one_resumption() {
        let s = Streams::default();
        let a = s.open();
        s.sent(a, event("progress"));
        let (tx, rx) = mpsc::channel(1);
        s.detach(a, rx);
        let id = format!("{a}-0");
        assert!(s.resume(&id).unwrap().detached.is_some());
        drop(tx);
        assert!(s.resume(&id).unwrap().detached.is_none());
    }
}

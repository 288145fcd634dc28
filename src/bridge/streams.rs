//! A legacy session's streams, kept so a client can resume one: each stream (a request's
//! answer, or the session's own, number 0) is numbered in its session, and what was sent on it
//! is kept, the last [`KEPT_EVENTS`] messages of the last [`KEPT_STREAMS`] streams. A request's
//! answer whose client went away before its response is kept too, still receiving, for a
//! resumption to pick up. Event ids are `<stream>-<number>`; what they mean on the wire (SSE
//! `id:` and `Last-Event-ID`) is the face's.

use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Messages kept of each stream.
pub const KEPT_EVENTS: usize = 64;
/// Streams kept of each session (the session's own stream always).
pub const KEPT_STREAMS: usize = 16;

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
}

#[derive(Debug, Default)]
struct Kept {
    /// The number the next message gets.
    next: u64,
    sent: VecDeque<(u64, Value)>,
    /// A request's answer still receiving, which its client let go of.
    detached: Option<mpsc::Receiver<Value>>,
}

/// Where a resumption starts: what was sent after the event it names, and the answer's
/// receiver if it still runs detached.
#[derive(Debug)]
pub struct Resumed {
    pub stream: u64,
    pub missed: Vec<(u64, Value)>,
    pub detached: Option<mpsc::Receiver<Value>>,
}

/// Reads `<stream>-<number>`.
pub fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (stream, number) = id.split_once('-')?;
    Some((stream.parse().ok()?, number.parse().ok()?))
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
                Some(s) => inner.streams.remove(&s),
                None => break,
            };
        }
        stream
    }

    /// Notes `msg` as sent on `stream`; returns its event id.
    pub fn sent(&self, stream: u64, msg: &Value) -> String {
        let mut inner = self.lock();
        let kept = inner.streams.entry(stream).or_default();
        let number = kept.next;
        kept.next += 1;
        kept.sent.push_back((number, msg.clone()));
        if kept.sent.len() > KEPT_EVENTS {
            kept.sent.pop_front();
        }
        format!("{stream}-{number}")
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
            .cloned()
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
    use serde_json::json;

    #[test]
    fn what_was_sent_after_an_event_is_given_again() {
        let s = Streams::default();
        let a = s.open();
        let first = s.sent(a, &json!(1));
        s.sent(a, &json!(2));
        s.sent(a, &json!(3));
        let r = s.resume(&first).unwrap();
        assert_eq!(r.stream, a);
        assert_eq!(r.missed, vec![(1, json!(2)), (2, json!(3))]);
        assert!(s.resume("x").is_none());
        assert!(s.resume("99-0").is_none());
    }

    #[test]
    fn streams_and_events_are_bounded() {
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
        for n in 0..(KEPT_EVENTS as u64 + 10) {
            s.sent(last, &json!(n));
        }
        let r = s.resume(&format!("{last}-0")).unwrap();
        assert_eq!(r.missed.len(), KEPT_EVENTS);
    }

    #[test]
    fn a_detached_answer_is_handed_to_one_resumption() {
        let s = Streams::default();
        let a = s.open();
        let id = s.sent(a, &json!("progress"));
        let (tx, rx) = mpsc::channel(1);
        s.detach(a, rx);
        let r = s.resume(&id).unwrap();
        assert!(r.detached.is_some());
        drop(tx);
        assert!(s.resume(&id).unwrap().detached.is_none());
    }
}

//! The outgoing side of one HTTP session: which connection each message the legacy core
//! sends goes out on (the SSE stream or JSON body of the POST that carried the request, or
//! the standalone GET stream), what waits while no connection carries a stream, and the
//! replay buffer that lets a client resume with `Last-Event-ID`.
//!
//! Everything here is synchronous and runs under the session's mutex; connections receive
//! ready-encoded SSE bytes through bounded channels and are cut off (not waited for) when
//! they fall behind.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// Identifies a logical stream within a session. 0 is the standalone GET stream.
pub(super) type StreamNo = u64;

const STANDALONE: StreamNo = 0;

/// Map key for a JSON-RPC id, as the legacy core keys its requests: `"1"` differs from `1`.
pub(super) fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The switches that shape where messages go and how they are framed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// Requests are answered with one JSON body; everything else goes on the GET stream.
    pub json_response: bool,
    /// Server requests always go on the GET stream.
    pub push_on_get: bool,
    /// Events carry ids and are kept for replay, so a client can resume a stream with a GET.
    pub resumable: bool,
    /// A POST stream ends after its first server request and the client must resume it.
    pub close_early: bool,
    /// A resumed stream's first event after the pick-up is kept for replay but not sent.
    pub resume_gap: bool,
    /// The standalone stream ends after each event it carries, to be picked up again.
    pub poll_get: bool,
    /// Every SSE data line holds a JSON array.
    pub batch: bool,
    /// Bound of each backlog, of the replay buffer and of each connection's channel.
    pub limit: usize,
}

/// What a POST with requests is answered from.
#[derive(Debug)]
pub(super) enum Opened {
    Sse(mpsc::Receiver<Bytes>),
    Json(oneshot::Receiver<Vec<Value>>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum StreamError {
    #[error("request id {0} is already in flight in this session")]
    DuplicateId(String),
    #[error("a stream is already open for this session")]
    Busy,
    #[error("malformed Last-Event-ID")]
    BadEventId,
}

#[derive(Debug)]
struct Event {
    seq: u64,
    stream: StreamNo,
    bytes: Bytes,
}

#[derive(Debug)]
enum Kind {
    Standalone,
    /// Answers a POST over SSE; `resumed` once a GET has taken it over.
    Sse {
        resumed: bool,
    },
    /// Answers a POST with one JSON body once every response is in.
    Json {
        collected: Vec<Value>,
        done: Option<oneshot::Sender<Vec<Value>>>,
    },
}

#[derive(Debug)]
struct Stream {
    kind: Kind,
    /// Requests whose responses this stream still has to carry.
    pending: HashSet<String>,
    carrier: Option<mpsc::Sender<Bytes>>,
    /// The next event is kept for replay but not sent (`Policy::resume_gap`).
    gap: bool,
}

impl Stream {
    fn carried(&self) -> bool {
        self.carrier.as_ref().is_some_and(|tx| !tx.is_closed())
    }
}

#[derive(Debug)]
pub(super) struct Streams {
    policy: Policy,
    streams: HashMap<StreamNo, Stream>,
    /// Which stream answers each request in flight, by id key.
    routes: HashMap<String, StreamNo>,
    /// Standalone-stream events not yet written to any GET.
    backlog: VecDeque<Event>,
    /// Recent events of every stream, for `Last-Event-ID` (resumable mode only).
    replay: VecDeque<Event>,
    /// Connections that missed an event in a resume gap: held open, and sent nothing more.
    limbo: VecDeque<mpsc::Sender<Bytes>>,
    next_stream: StreamNo,
    next_seq: u64,
}

impl Streams {
    pub(super) fn new(policy: Policy) -> Self {
        let standalone = Stream {
            kind: Kind::Standalone,
            pending: HashSet::new(),
            carrier: None,
            gap: false,
        };
        Self {
            policy,
            streams: HashMap::from([(STANDALONE, standalone)]),
            routes: HashMap::new(),
            backlog: VecDeque::new(),
            replay: VecDeque::new(),
            limbo: VecDeque::new(),
            next_stream: STANDALONE + 1,
            next_seq: 1,
        }
    }

    fn channel(&self) -> (mpsc::Sender<Bytes>, mpsc::Receiver<Bytes>) {
        // Room for a full replay plus the retry line.
        mpsc::channel(self.policy.limit.max(1) + 2)
    }

    /// Opens the stream (or JSON body) that answers a POST carrying the requests `keys`.
    pub(super) fn open_post(&mut self, keys: &[String]) -> Result<Opened, StreamError> {
        if let Some(dup) = keys.iter().find(|k| self.routes.contains_key(*k)) {
            return Err(StreamError::DuplicateId(dup.clone()));
        }
        let no = self.next_stream;
        self.next_stream += 1;
        for key in keys {
            self.routes.insert(key.clone(), no);
        }
        let pending = keys.iter().cloned().collect();
        if self.policy.json_response {
            let (done, rx) = oneshot::channel();
            let kind = Kind::Json {
                collected: Vec::new(),
                done: Some(done),
            };
            self.streams.insert(
                no,
                Stream {
                    kind,
                    pending,
                    carrier: None,
                    gap: false,
                },
            );
            return Ok(Opened::Json(rx));
        }
        let (tx, rx) = self.channel();
        if self.policy.resumable {
            let _ = tx.try_send(Bytes::from_static(b"retry: 100\n\n"));
        }
        self.streams.insert(
            no,
            Stream {
                kind: Kind::Sse { resumed: false },
                pending,
                carrier: Some(tx),
                gap: false,
            },
        );
        Ok(Opened::Sse(rx))
    }

    /// Opens the standalone GET stream, starting with `first` (the 2024-11-05 `endpoint`
    /// event) and then whatever queued while no GET was open.
    pub(super) fn open_standalone(
        &mut self,
        first: Option<Bytes>,
    ) -> Result<mpsc::Receiver<Bytes>, StreamError> {
        if self.standalone().carried() {
            return Err(StreamError::Busy);
        }
        let (tx, rx) = self.channel();
        if self.policy.resumable {
            let _ = tx.try_send(Bytes::from_static(b"retry: 100\n\n"));
        }
        if let Some(first) = first {
            let _ = tx.try_send(first);
        }
        let queued = !self.backlog.is_empty();
        for event in self.backlog.drain(..) {
            let _ = tx.try_send(event.bytes);
        }
        // Polled: a GET that carried something ends with it.
        if !(queued && self.policy.poll_get) {
            self.standalone_mut().carrier = Some(tx);
        }
        Ok(rx)
    }

    /// A GET with `Last-Event-ID`: replays what the stream that event belonged to sent after
    /// it, then carries the rest of that stream (ending with its last response).
    pub(super) fn resume(
        &mut self,
        last_event_id: &str,
    ) -> Result<mpsc::Receiver<Bytes>, StreamError> {
        let (no, after) = parse_event_id(last_event_id).ok_or(StreamError::BadEventId)?;
        if self.streams.get(&no).is_some_and(Stream::carried) {
            return Err(StreamError::Busy);
        }
        let mut events: BTreeMap<u64, Bytes> = self
            .replay
            .iter()
            .filter(|e| e.stream == no && e.seq > after)
            .map(|e| (e.seq, e.bytes.clone()))
            .collect();
        if no == STANDALONE {
            for event in self.backlog.drain(..) {
                if event.seq > after {
                    events.insert(event.seq, event.bytes);
                }
            }
        }
        let (tx, rx) = self.channel();
        let _ = tx.try_send(Bytes::from_static(b"retry: 100\n\n"));
        let polled = no == STANDALONE && self.policy.poll_get && !events.is_empty();
        for bytes in events.into_values() {
            let _ = tx.try_send(bytes);
        }
        // A stream that already finished, or a polled one that replayed something, is only
        // replayed; dropping `tx` ends the GET.
        if let Some(stream) = self.streams.get_mut(&no).filter(|_| !polled) {
            if let Kind::Sse { resumed } = &mut stream.kind {
                *resumed = true;
            }
            stream.carrier = Some(tx);
            stream.gap = self.policy.resume_gap;
        }
        Ok(rx)
    }

    /// The client cancelled request `key`: no response will come, so its stream must not
    /// wait for one.
    pub(super) fn cancel(&mut self, key: &str) {
        if let Some(no) = self.routes.remove(key) {
            self.settle(no, key);
        }
    }

    /// Ends every stream and JSON body of the session.
    pub(super) fn close_all(&mut self) {
        self.streams.retain(|&no, _| no == STANDALONE);
        self.standalone_mut().carrier = None;
        self.routes.clear();
        self.backlog.clear();
        self.replay.clear();
        self.limbo.clear();
    }

    /// Puts one message from the legacy core on the connection it belongs to.
    pub(super) fn route(&mut self, msg: Value, origin: Option<&Value>) {
        let has_method = msg.get("method").is_some();
        let response_key = match (&msg, has_method) {
            (Value::Object(obj), false) => obj.get("id").map(id_key),
            _ => None,
        };
        let server_request = has_method && msg.get("id").is_some();
        let target = match &response_key {
            Some(key) => self.routes.get(key).copied(),
            None if self.policy.json_response || (server_request && self.policy.push_on_get) => {
                None
            }
            None => origin.and_then(|id| self.routes.get(&id_key(id)).copied()),
        }
        .filter(|no| self.streams.contains_key(no))
        .unwrap_or(STANDALONE);

        if let Some(Kind::Json { collected, .. }) =
            self.streams.get_mut(&target).map(|s| &mut s.kind)
        {
            collected.push(msg);
        } else {
            self.emit(target, &msg, server_request);
        }
        if let Some(key) = response_key {
            if self.routes.get(&key) == Some(&target) {
                self.routes.remove(&key);
                self.settle(target, &key);
            }
        }
    }

    fn emit(&mut self, no: StreamNo, msg: &Value, server_request: bool) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let data = if self.policy.batch {
            Value::Array(vec![msg.clone()])
        } else {
            msg.clone()
        };
        let id = self.policy.resumable.then(|| format!("{no}-{seq}"));
        let bytes = encode(id.as_deref(), &data);
        if self.policy.resumable {
            push_bounded(
                &mut self.replay,
                Event {
                    seq,
                    stream: no,
                    bytes: bytes.clone(),
                },
                self.policy.limit,
                "replay buffer",
            );
        }
        let resumable = self.policy.resumable;
        let Some(stream) = self.streams.get_mut(&no) else {
            return;
        };
        if std::mem::take(&mut stream.gap) && stream.carried() {
            // As a server that lost the event would: the connection stays open and quiet.
            tracing::debug!(stream = no, "event kept for replay only (resume gap)");
            if let Some(tx) = stream.carrier.take() {
                if self.limbo.len() >= self.policy.limit.max(1) {
                    self.limbo.pop_front();
                }
                self.limbo.push_back(tx);
            }
            return;
        }
        let sent = match &stream.carrier {
            Some(tx) => tx.try_send(bytes.clone()).is_ok(),
            None => false,
        };
        if !sent {
            // Gone or not reading: cut it off; a GET can pick the stream up again.
            stream.carrier = None;
            if no == STANDALONE {
                push_bounded(
                    &mut self.backlog,
                    Event {
                        seq,
                        stream: no,
                        bytes,
                    },
                    self.policy.limit,
                    "GET stream backlog",
                );
            } else if !resumable {
                tracing::debug!(stream = no, "message for a closed POST stream dropped");
            }
            return;
        }
        if self.policy.close_early
            && server_request
            && matches!(stream.kind, Kind::Sse { resumed: false })
        {
            // End the POST stream so the client has to resume it with a GET.
            stream.carrier = None;
        }
        if self.policy.poll_get && matches!(stream.kind, Kind::Standalone) {
            // Polled: the client comes back for the next event with `Last-Event-ID`.
            stream.carrier = None;
        }
    }

    /// Request `key` of stream `no` got its response (or was cancelled); a stream with
    /// nothing left to answer ends.
    fn settle(&mut self, no: StreamNo, key: &str) {
        let Some(stream) = self.streams.get_mut(&no) else {
            return;
        };
        stream.pending.remove(key);
        if no == STANDALONE || !stream.pending.is_empty() {
            return;
        }
        if let Some(mut stream) = self.streams.remove(&no) {
            if let Kind::Json { collected, done } = &mut stream.kind {
                if let Some(done) = done.take() {
                    let _ = done.send(std::mem::take(collected));
                }
            }
        }
    }

    fn standalone(&self) -> &Stream {
        &self.streams[&STANDALONE]
    }

    fn standalone_mut(&mut self) -> &mut Stream {
        self.streams
            .get_mut(&STANDALONE)
            .expect("the standalone stream is never removed")
    }
}

fn push_bounded(queue: &mut VecDeque<Event>, event: Event, limit: usize, what: &str) {
    if queue.len() >= limit.max(1) {
        tracing::warn!(limit, "{what} full; dropping its oldest event");
        queue.pop_front();
    }
    queue.push_back(event);
}

fn parse_event_id(id: &str) -> Option<(StreamNo, u64)> {
    let (no, seq) = id.trim().split_once('-')?;
    Some((no.parse().ok()?, seq.parse().ok()?))
}

/// One `message` event, with an `id:` line when resumable.
pub(super) fn encode(id: Option<&str>, data: &Value) -> Bytes {
    let event = crate::sse::encode("message", data);
    match id {
        Some(id) => Bytes::from(format!("id: {id}\n{event}")),
        None => Bytes::from(event),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> Policy {
        Policy {
            json_response: false,
            push_on_get: false,
            resumable: false,
            close_early: false,
            resume_gap: false,
            poll_get: false,
            batch: false,
            limit: 8,
        }
    }

    fn drain(rx: &mut mpsc::Receiver<Bytes>) -> String {
        let mut out = String::new();
        while let Ok(b) = rx.try_recv() {
            out.push_str(std::str::from_utf8(&b).unwrap());
        }
        out
    }

    fn open_sse(s: &mut Streams, keys: &[&str]) -> mpsc::Receiver<Bytes> {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        match s.open_post(&keys).unwrap() {
            Opened::Sse(rx) => rx,
            Opened::Json(_) => panic!("expected SSE"),
        }
    }

    #[test]
    fn messages_follow_the_request_they_were_made_for() {
        let mut s = Streams::new(policy());
        let mut a = open_sse(&mut s, &["1"]);
        let mut b = open_sse(&mut s, &["2"]);
        s.route(
            json!({"jsonrpc":"2.0","id":0,"method":"elicitation/create"}),
            Some(&json!(2)),
        );
        s.route(
            json!({"jsonrpc":"2.0","method":"notifications/progress"}),
            Some(&json!(1)),
        );
        s.route(
            json!({"jsonrpc":"2.0","method":"notifications/message"}),
            None,
        );
        s.route(json!({"jsonrpc":"2.0","id":1,"result":{}}), None);
        let a_text = drain(&mut a);
        assert!(a_text.contains("notifications/progress") && a_text.contains("\"id\":1"));
        assert!(!a_text.contains("elicitation"));
        assert!(a.is_closed() || a.try_recv().is_err());
        assert!(drain(&mut b).contains("elicitation/create"));
        // The unattributed message waits for a GET.
        let mut get = s.open_standalone(None).unwrap();
        assert!(drain(&mut get).contains("notifications/message"));
        assert_eq!(s.open_standalone(None).unwrap_err(), StreamError::Busy);
    }

    #[test]
    fn a_post_stream_ends_with_its_last_response() {
        let mut s = Streams::new(policy());
        let mut rx = open_sse(&mut s, &["1", "\"x\""]);
        s.route(json!({"jsonrpc":"2.0","id":1,"result":{}}), None);
        assert!(!drain(&mut rx).is_empty());
        assert!(!rx.is_closed());
        s.route(json!({"jsonrpc":"2.0","id":"x","result":{}}), None);
        drain(&mut rx);
        assert!(rx.is_closed());
    }

    #[test]
    fn close_post_early_resumes_on_get_with_the_rest() {
        let mut s = Streams::new(Policy {
            resumable: true,
            close_early: true,
            ..policy()
        });
        let mut post = open_sse(&mut s, &["1"]);
        s.route(
            json!({"jsonrpc":"2.0","id":0,"method":"elicitation/create"}),
            Some(&json!(1)),
        );
        let text = drain(&mut post);
        assert!(text.starts_with("retry: 100\n\n"));
        let last = text
            .lines()
            .find_map(|l| l.strip_prefix("id: "))
            .unwrap()
            .to_owned();
        assert!(
            post.is_closed(),
            "POST stream ends after the first server request"
        );
        s.route(json!({"jsonrpc":"2.0","id":1,"result":{"done":true}}), None);
        let mut get = s.resume(&last).unwrap();
        let text = drain(&mut get);
        assert!(text.contains("\"done\":true"));
        assert!(!text.contains("elicitation"));
        assert!(get.is_closed());
    }

    #[test]
    fn a_polled_standalone_stream_ends_after_what_it_carries() {
        let mut s = Streams::new(Policy {
            resumable: true,
            push_on_get: true,
            poll_get: true,
            ..policy()
        });
        let ask = |s: &mut Streams, id: u32| {
            s.route(json!({"jsonrpc":"2.0","id":id,"method":"roots/list"}), None)
        };
        // Nothing queued: the GET stays open until something comes, then ends.
        let mut get = s.open_standalone(None).unwrap();
        assert!(!get.is_closed());
        ask(&mut s, 1);
        let text = drain(&mut get);
        assert!(text.contains("\"id\":1") && get.is_closed());
        let last = text
            .lines()
            .find_map(|l| l.strip_prefix("id: "))
            .unwrap()
            .to_owned();
        // Queued while no GET was open: the pick-up replays it and ends.
        ask(&mut s, 2);
        let mut get = s.resume(&last).unwrap();
        assert!(drain(&mut get).contains("\"id\":2") && get.is_closed());
    }

    #[test]
    fn json_response_collects_and_pushes_go_to_get() {
        let mut s = Streams::new(Policy {
            json_response: true,
            ..policy()
        });
        let Opened::Json(mut body) = s.open_post(&["7".to_owned()]).unwrap() else {
            panic!("expected JSON");
        };
        s.route(
            json!({"jsonrpc":"2.0","id":0,"method":"sampling/createMessage"}),
            Some(&json!(7)),
        );
        assert!(body.try_recv().is_err());
        s.route(json!({"jsonrpc":"2.0","id":7,"result":{}}), None);
        assert_eq!(body.try_recv().unwrap().len(), 1);
        let mut get = s.open_standalone(None).unwrap();
        assert!(drain(&mut get).contains("sampling/createMessage"));
    }

    #[test]
    fn backlog_is_bounded() {
        let mut s = Streams::new(policy());
        for n in 0..20 {
            s.route(json!({"jsonrpc":"2.0","method":"n","params":{"n":n}}), None);
        }
        let mut get = s.open_standalone(None).unwrap();
        let text = drain(&mut get);
        assert_eq!(text.matches("event: message").count(), 8);
        assert!(text.contains("\"n\":19") && !text.contains("\"n\":11}"));
    }

    #[test]
    fn duplicate_ids_and_bad_event_ids_are_refused() {
        let mut s = Streams::new(policy());
        let _rx = open_sse(&mut s, &["1"]);
        assert!(matches!(
            s.open_post(&["1".to_owned()]),
            Err(StreamError::DuplicateId(_))
        ));
        assert_eq!(s.resume("nonsense").unwrap_err(), StreamError::BadEventId);
    }
}

//! Every metric the gateway exports, typed, in one [`Metrics`]. The Prometheus `Registry` is made
//! by the wiring (`app`) and passed to [`Metrics::new`]; nothing here is global.
//!
//! Labels are bounded: enums below, or a configured backend name. Never ids, principals,
//! arguments or tool names, so a client cannot grow the number of series.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

/// Defines a label value enum whose encoding is its snake_case name.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

label_enum! {
    /// A downstream method; anything the gateway does not know is `other`.
    Method {
        ToolsCall => "tools/call",
        ToolsList => "tools/list",
        PromptsGet => "prompts/get",
        PromptsList => "prompts/list",
        ResourcesRead => "resources/read",
        ResourcesList => "resources/list",
        ResourceTemplatesList => "resources/templates/list",
        CompletionComplete => "completion/complete",
        ServerDiscover => "server/discover",
        Other => "other",
    }
}

impl Method {
    pub fn from_name(name: &str) -> Method {
        Method::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == name && *m != Method::Other)
            .unwrap_or(Method::Other)
    }
}

label_enum! {
    /// How a downstream request ended.
    Outcome {
        /// A complete result.
        Complete => "complete",
        /// An `InputRequiredResult`: the call is parked.
        InputRequired => "input_required",
        /// A JSON-RPC error from the engine or the backend.
        Error => "error",
        /// Refused at the HTTP face (4xx) before reaching the engine.
        Refused => "refused",
        /// The client went away before the outcome was sent.
        Disconnected => "disconnected",
    }
}

label_enum! {
    /// The kind of an input request put to a client.
    InputKind {
        Elicitation => "elicitation",
        Sampling => "sampling",
        Roots => "roots",
    }
}

impl From<crate::protocol::input::Kind> for InputKind {
    fn from(k: crate::protocol::input::Kind) -> InputKind {
        use crate::protocol::input::Kind;
        match k {
            Kind::Elicitation => InputKind::Elicitation,
            Kind::Sampling => InputKind::Sampling,
            Kind::Roots => InputKind::Roots,
        }
    }
}

label_enum! {
    /// What became of a retry (a request carrying `requestState` or `inputResponses`).
    RetryResult {
        /// Every input asked in the round was answered; the call went on.
        Resumed => "resumed",
        /// Some answers were missing; the client was asked again for them.
        AskedAgain => "asked_again",
        /// Sent to the replica that owns the park.
        Forwarded => "forwarded",
        /// Re-run from a sealed transcript.
        Replayed => "replayed",
        Rejected => "rejected",
    }
}

label_enum! {
    /// Why a retry was rejected; `none` for retries that were not.
    RetryReason {
        None => "none",
        /// The requestState failed verification (see `mrtr_state_failures_total`).
        InvalidState => "invalid_state",
        /// `inputResponses` was missing its state, not an object, or an answer had the wrong shape.
        InvalidResponses => "invalid_responses",
    }
}

label_enum! {
    /// Which requestState check failed. Counted only; the client always gets one frozen error.
    StateFailure {
        Malformed => "malformed",
        UnknownKey => "unknown_key",
        BadSeal => "bad_seal",
        Expired => "expired",
        Principal => "principal",
        Request => "request",
        Owner => "owner",
        UnknownPark => "unknown_park",
        StaleRound => "stale_round",
    }
}

impl From<crate::seal::Reason> for StateFailure {
    fn from(r: crate::seal::Reason) -> StateFailure {
        match r {
            crate::seal::Reason::Malformed => StateFailure::Malformed,
            crate::seal::Reason::UnknownKey => StateFailure::UnknownKey,
            crate::seal::Reason::Tampered => StateFailure::BadSeal,
        }
    }
}

label_enum! {
    /// Why a parked call was given up.
    AbandonReason {
        /// `park_ttl` passed without a valid retry.
        Expired => "expired",
        /// The gateway is shutting down.
        Shutdown => "shutdown",
    }
}

label_enum! {
    /// What an upstream session is doing now.
    SessionState {
        /// `initialize` still running.
        Starting => "starting",
        /// Open and unused.
        Idle => "idle",
        /// Serving plain (non-interactive) requests.
        Shared => "shared",
        /// Running (or holding, while parked) an interactive call.
        Interactive => "interactive",
    }
}

label_enum! {
    /// Why an upstream session ended.
    SessionEnd {
        /// Unused for `idle_timeout`.
        Idle => "idle",
        /// Closed by the gateway because its state could no longer be trusted.
        Retired => "retired",
        /// Closed to make room for a session of another key.
        Evicted => "evicted",
        /// Ended without the gateway asking: the child exited or broke the protocol.
        Lost => "lost",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: Method,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: InputKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RetryLabels {
    pub result: RetryResult,
    pub reason: RetryReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FailureLabels {
    pub reason: StateFailure,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct AbandonLabels {
    pub reason: AbandonReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SessionLabels {
    pub backend: String,
    pub state: SessionState,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SessionEndLabels {
    pub backend: String,
    pub reason: SessionEnd,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets for latencies, 1 ms to about 65 s.
fn seconds() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 17,
    ))
}

/// Buckets for how long a client takes to answer, 100 ms to about 27 min.
fn park_seconds() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.1, 2.0, 15,
    ))
}

/// Every metric of the gateway.
#[derive(Debug)]
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    upstream_duration: HistogramFamily<BackendLabels>,
    parked: Gauge,
    released_streams: Gauge,
    park_duration: Histogram,
    rounds: Histogram,
    input_requests: Family<KindLabels, Counter>,
    retries: Family<RetryLabels, Counter>,
    abandoned: Family<AbandonLabels, Counter>,
    sessions: Family<SessionLabels, Gauge>,
    session_starts: Family<BackendLabels, Counter>,
    session_start_failures: Family<BackendLabels, Counter>,
    session_ends: Family<SessionEndLabels, Counter>,
    queue_wait: HistogramFamily<BackendLabels>,
    state_failures: Family<FailureLabels, Counter>,
}

impl Metrics {
    /// Creates every metric and registers it in `registry` (names get the registry's prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            requests: Family::default(),
            upstream_duration: Family::new_with_constructor(seconds),
            parked: Gauge::default(),
            released_streams: Gauge::default(),
            park_duration: park_seconds(),
            rounds: Histogram::new([0.0, 1.0, 2.0, 3.0, 5.0, 10.0]),
            input_requests: Family::default(),
            retries: Family::default(),
            abandoned: Family::default(),
            sessions: Family::default(),
            session_starts: Family::default(),
            session_start_failures: Family::default(),
            session_ends: Family::default(),
            queue_wait: Family::new_with_constructor(seconds),
            state_failures: Family::default(),
        };
        registry.register(
            "downstream_requests",
            "Client requests by method and outcome",
            m.requests.clone(),
        );
        registry.register_with_unit(
            "upstream_request_duration",
            "Backend time per request, from writing it upstream to its response, not counting time parked",
            Unit::Seconds,
            m.upstream_duration.clone(),
        );
        registry.register(
            "build",
            "The gateway's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        registry.register("parked_calls", "Calls parked now", m.parked.clone());
        registry.register(
            "parked_released_streams",
            "Parked calls that let their backend's answer stream go until the retry (Streamable HTTP backends that number their events); other parked calls on HTTP backends each hold a connection",
            m.released_streams.clone(),
        );
        registry.register_with_unit(
            "park_duration",
            "How long each round stayed parked, until a retry took it or it was abandoned",
            Unit::Seconds,
            m.park_duration.clone(),
        );
        registry.register(
            "call_rounds",
            "Input rounds per finished call (0: passed through)",
            m.rounds.clone(),
        );
        registry.register(
            "input_requests",
            "Input requests put to clients, by kind",
            m.input_requests.clone(),
        );
        registry.register(
            "retries",
            "Retries by result, and by reason when rejected",
            m.retries.clone(),
        );
        registry.register(
            "abandoned_parks",
            "Parked calls given up, by reason",
            m.abandoned.clone(),
        );
        registry.register(
            "upstream_sessions",
            "Upstream sessions now, by backend and state",
            m.sessions.clone(),
        );
        registry.register(
            "upstream_session_starts",
            "Upstream sessions started and initialized",
            m.session_starts.clone(),
        );
        registry.register(
            "upstream_session_start_failures",
            "Upstream sessions that could not be started: the backend could not be spawned or reached, or its initialize failed",
            m.session_start_failures.clone(),
        );
        registry.register(
            "upstream_session_ends",
            "Upstream sessions ended, by reason; `lost` means the backend went away by itself",
            m.session_ends.clone(),
        );
        registry.register_with_unit(
            "upstream_queue_wait",
            "Time waiting for a free session of the backend",
            Unit::Seconds,
            m.queue_wait.clone(),
        );
        registry.register(
            "state_failures",
            "requestState verification failures, by the check that failed",
            m.state_failures.clone(),
        );
        // Every series of these counters exists from the start, at 0: a query over one that has
        // not moved yet gets 0, not nothing.
        for &kind in InputKind::ALL {
            m.input_requests.get_or_create_owned(&KindLabels { kind });
        }
        for &reason in StateFailure::ALL {
            m.state_failures
                .get_or_create_owned(&FailureLabels { reason });
        }
        for &reason in AbandonReason::ALL {
            m.abandoned.get_or_create_owned(&AbandonLabels { reason });
        }
        let rejected = [RetryReason::InvalidState, RetryReason::InvalidResponses];
        let retries = RetryResult::ALL
            .iter()
            .filter(|r| **r != RetryResult::Rejected)
            .map(|&result| (result, RetryReason::None))
            .chain(rejected.map(|reason| (RetryResult::Rejected, reason)));
        for (result, reason) in retries {
            m.retries
                .get_or_create_owned(&RetryLabels { result, reason });
        }
        m
    }

    /// Metrics registered nowhere, for an engine built without wiring (tests, embedding).
    pub fn unregistered() -> Metrics {
        Metrics::new(&mut Registry::default())
    }

    pub fn request(&self, method: Method, outcome: Outcome) {
        self.requests
            .get_or_create(&RequestLabels { method, outcome })
            .inc();
    }

    pub fn upstream_duration(&self, backend: &str, took: Duration) {
        self.upstream_duration
            .get_or_create(&BackendLabels {
                backend: backend.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn park_duration(&self, took: Duration) {
        self.park_duration.observe(took.as_secs_f64());
    }

    pub fn call_rounds(&self, rounds: u32) {
        self.rounds.observe(f64::from(rounds));
    }

    pub fn input_request(&self, kind: InputKind) {
        self.input_requests
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    pub fn retry(&self, result: RetryResult, reason: RetryReason) {
        self.retries
            .get_or_create(&RetryLabels { result, reason })
            .inc();
    }

    /// A rejected retry whose requestState failed `check`.
    pub fn state_failure(&self, check: StateFailure) {
        self.state_failures
            .get_or_create(&FailureLabels { reason: check })
            .inc();
        self.retry(RetryResult::Rejected, RetryReason::InvalidState);
    }

    pub fn abandoned(&self, reason: AbandonReason) {
        self.abandoned
            .get_or_create(&AbandonLabels { reason })
            .inc();
    }

    /// Counts a parked call whose answer stream was let go, until the guard is dropped.
    pub fn stream_released(&self) -> ReleasedStream {
        self.released_streams.inc();
        ReleasedStream(self.released_streams.clone())
    }

    /// Sets the gauges that are read from the engine's state when scraped.
    pub fn set_parked(&self, parked: usize) {
        self.parked.set(i64::try_from(parked).unwrap_or(i64::MAX));
    }

    pub fn set_sessions(&self, backend: &str, state: SessionState, n: usize) {
        self.sessions
            .get_or_create(&SessionLabels {
                backend: backend.to_owned(),
                state,
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The handles one backend's pool updates, resolved once so the pool does no label lookups.
    pub fn pool(&self, backend: &str) -> PoolMetrics {
        let b = || BackendLabels {
            backend: backend.to_owned(),
        };
        let end = |reason| {
            self.session_ends.get_or_create_owned(&SessionEndLabels {
                backend: backend.to_owned(),
                reason,
            })
        };
        PoolMetrics {
            starts: self.session_starts.get_or_create_owned(&b()),
            start_failures: self.session_start_failures.get_or_create_owned(&b()),
            idle: end(SessionEnd::Idle),
            retired: end(SessionEnd::Retired),
            evicted: end(SessionEnd::Evicted),
            lost: end(SessionEnd::Lost),
            queue_wait: self.queue_wait.get_or_create_owned(&b()),
        }
    }
}

/// One backend's pool metrics (cheap clones of registered series).
#[derive(Debug, Clone)]
pub struct PoolMetrics {
    starts: Counter,
    start_failures: Counter,
    idle: Counter,
    retired: Counter,
    evicted: Counter,
    lost: Counter,
    queue_wait: Histogram,
}

impl Default for PoolMetrics {
    /// Series registered nowhere.
    fn default() -> PoolMetrics {
        PoolMetrics {
            starts: Counter::default(),
            start_failures: Counter::default(),
            idle: Counter::default(),
            retired: Counter::default(),
            evicted: Counter::default(),
            lost: Counter::default(),
            queue_wait: seconds(),
        }
    }
}

impl PoolMetrics {
    pub fn started(&self) {
        self.starts.inc();
    }

    pub fn start_failed(&self) {
        self.start_failures.inc();
    }

    pub fn ended(&self, why: SessionEnd) {
        match why {
            SessionEnd::Idle => &self.idle,
            SessionEnd::Retired => &self.retired,
            SessionEnd::Evicted => &self.evicted,
            SessionEnd::Lost => &self.lost,
        }
        .inc();
    }

    pub fn queue_wait(&self, waited: Duration) {
        self.queue_wait.observe(waited.as_secs_f64());
    }
}

/// Encodes the registry in the Prometheus text format (version 0.0.4).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
    out
}

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One parked call counted in `mrtr_parked_released_streams`, for as long as it lives.
#[derive(Debug)]
pub struct ReleasedStream(Gauge);

impl Drop for ReleasedStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The process's own CPU time, memory, file descriptors and threads, read from `/proc` at each
/// scrape, under the unprefixed `process_*` names Prometheus clients share. A value `/proc` does
/// not give is left out; elsewhere than Linux there are none.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = ProcessSample::read() else {
            return Ok(());
        };
        let mut put = |name: &str, help: &str, unit: Option<Unit>, metric: &dyn EncodeMetric| {
            let described =
                encoder.encode_descriptor(name, help, unit.as_ref(), metric.metric_type())?;
            metric.encode(described)
        };
        put(
            "process_cpu",
            "User and system CPU time spent",
            Some(Unit::Seconds),
            &ConstCounter::new(p.cpu_seconds),
        )?;
        put(
            "process_resident_memory",
            "Resident memory size",
            Some(Unit::Bytes),
            &ConstGauge::new(p.resident_bytes),
        )?;
        put(
            "process_virtual_memory",
            "Virtual memory size",
            Some(Unit::Bytes),
            &ConstGauge::new(p.virtual_bytes),
        )?;
        put(
            "process_threads",
            "OS threads in the process",
            None,
            &ConstGauge::new(p.threads),
        )?;
        if let Some(start) = p.start_time {
            put(
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(Unit::Seconds),
                &ConstGauge::new(start),
            )?;
        }
        if let Some(open) = p.open_fds {
            put(
                "process_open_fds",
                "Open file descriptors",
                None,
                &ConstGauge::new(open),
            )?;
        }
        if let Some(max) = p.max_fds {
            put(
                "process_max_fds",
                "Most file descriptors the process may open (its soft limit)",
                None,
                &ConstGauge::new(max),
            )?;
        }
        Ok(())
    }
}

/// One reading of `/proc/self`.
#[derive(Debug)]
struct ProcessSample {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    threads: i64,
    start_time: Option<f64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

impl ProcessSample {
    #[cfg(target_os = "linux")]
    fn read() -> Option<ProcessSample> {
        use procfs::process::{LimitValue, Process};
        let me = Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let ticks = procfs::ticks_per_second() as f64;
        Some(ProcessSample {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            resident_bytes: stat.rss * procfs::page_size(),
            virtual_bytes: stat.vsize,
            threads: stat.num_threads,
            start_time: procfs::boot_time_secs()
                .ok()
                .map(|boot| boot as f64 + stat.starttime as f64 / ticks),
            open_fds: me.fd_count().ok().map(|n| n as u64),
            max_fds: me
                .limits()
                .ok()
                .and_then(|l| match l.max_open_files.soft_limit {
                    LimitValue::Value(n) => Some(n),
                    LimitValue::Unlimited => None,
                }),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn read() -> Option<ProcessSample> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_map_to_a_bounded_set() {
        assert_eq!(Method::from_name("tools/call"), Method::ToolsCall);
        assert_eq!(Method::from_name("server/discover"), Method::ServerDiscover);
        assert_eq!(Method::from_name("x/evil-unbounded-123"), Method::Other);
        assert_eq!(Method::from_name("other"), Method::Other);
    }

    #[test]
    fn labels_encode_as_snake_case_text() {
        let mut registry = Registry::with_prefix("mrtr");
        let m = Metrics::new(&mut registry);
        m.request(Method::ToolsCall, Outcome::InputRequired);
        m.state_failure(StateFailure::StaleRound);
        m.pool("fixture").ended(SessionEnd::Lost);
        let text = encode(&registry);
        assert!(
            text.contains(
                r#"mrtr_downstream_requests_total{method="tools/call",outcome="input_required"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"mrtr_state_failures_total{reason="stale_round"} 1"#));
        assert!(text.contains(r#"mrtr_retries_total{result="rejected",reason="invalid_state"} 1"#));
        assert!(
            text.contains(r#"mrtr_upstream_session_ends_total{backend="fixture",reason="lost"} 1"#)
        );
        assert!(text.contains("# TYPE mrtr_upstream_queue_wait_seconds histogram"));
    }
}

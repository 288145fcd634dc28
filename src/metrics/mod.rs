//! Every metric the gateway exports, typed, in one [`Metrics`]. The Prometheus `Registry` is made
//! by the wiring (`app`) and passed to [`Metrics::new`]; nothing here is global.
//!
//! Labels are bounded: enums (in `labels`), or a configured backend name. Never ids, principals,
//! arguments or tool names, so a client cannot grow the number of series.
//!
//! Here: [`Metrics`], one backend's [`PoolMetrics`], and the text encoding. `labels` holds the
//! label enums and label sets, `process` the `process_*` metrics read from `/proc`.

mod labels;
mod process;
#[cfg(test)]
mod tests;

pub use labels::{
    AbandonLabels, AbandonReason, BackendLabels, Era, EraLabels, FailureLabels, InputKind,
    KindLabels, Listener, Method, Outcome, RequestLabels, RetryLabels, RetryReason, RetryResult,
    SessionEnd, SessionEndLabels, SessionLabels, SessionState, Shed, ShedLabels, StateFailure,
};
pub use process::ProcessCollector;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

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
    legacy_sessions: Gauge,
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
    era_probes: Family<EraLabels, Counter>,
    era_reprobes: Family<BackendLabels, Counter>,
    connections_shed: Family<ShedLabels, Counter>,
}

impl Metrics {
    /// Creates every metric and registers it in `registry` (names get the registry's prefix).
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            requests: Family::default(),
            upstream_duration: Family::new_with_constructor(seconds),
            parked: Gauge::default(),
            legacy_sessions: Gauge::default(),
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
            era_probes: Family::default(),
            era_reprobes: Family::default(),
            connections_shed: Family::default(),
        };
        m.register(registry);
        m.start_at_zero();
        m
    }

    /// Registers every metric in `registry`, in the order the scrape lists them.
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "downstream_requests",
            "Client requests by method and outcome",
            self.requests.clone(),
        );
        registry.register_with_unit(
            "upstream_request_duration",
            "Backend time per request, from writing it upstream to its response, not counting time parked",
            Unit::Seconds,
            self.upstream_duration.clone(),
        );
        registry.register(
            "build",
            "The gateway's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        registry.register("parked_calls", "Calls parked now", self.parked.clone());
        registry.register(
            "legacy_sessions",
            "Legacy clients' sessions held by this replica now",
            self.legacy_sessions.clone(),
        );
        registry.register(
            "parked_released_streams",
            "Parked calls that let their backend's answer stream go until the retry (Streamable HTTP backends that number their events); other parked calls on HTTP backends each hold a connection",
            self.released_streams.clone(),
        );
        registry.register_with_unit(
            "park_duration",
            "How long each round stayed parked, until a retry took it or it was abandoned",
            Unit::Seconds,
            self.park_duration.clone(),
        );
        registry.register(
            "call_rounds",
            "Input rounds per finished call (0: passed through)",
            self.rounds.clone(),
        );
        registry.register(
            "input_requests",
            "Input requests put to clients, by kind",
            self.input_requests.clone(),
        );
        registry.register(
            "retries",
            "Retries by result, and by reason when rejected",
            self.retries.clone(),
        );
        registry.register(
            "abandoned_parks",
            "Parked calls given up, by reason",
            self.abandoned.clone(),
        );
        registry.register(
            "upstream_sessions",
            "Upstream sessions now, by backend and state",
            self.sessions.clone(),
        );
        registry.register(
            "upstream_session_starts",
            "Upstream sessions started and initialized",
            self.session_starts.clone(),
        );
        registry.register(
            "upstream_session_start_failures",
            "Upstream sessions that could not be started: the backend could not be spawned or reached, or its initialize failed",
            self.session_start_failures.clone(),
        );
        registry.register(
            "upstream_session_ends",
            "Upstream sessions ended, by reason; `lost` means the backend went away by itself",
            self.session_ends.clone(),
        );
        registry.register_with_unit(
            "upstream_queue_wait",
            "Time waiting for a free session of the backend",
            Unit::Seconds,
            self.queue_wait.clone(),
        );
        registry.register(
            "state_failures",
            "requestState verification failures, by the check that failed",
            self.state_failures.clone(),
        );
        registry.register(
            "backend_era_probes",
            "Era probes of `protocol = \"auto\"` backends (server/discover), by the era found",
            self.era_probes.clone(),
        );
        registry.register(
            "backend_era_reprobes",
            "Probed eras forgotten because they stopped holding; the next call probes again",
            self.era_reprobes.clone(),
        );
        registry.register(
            "connections_shed",
            "Client connections the gateway closed to keep a listener open to others, by listener and reason",
            self.connections_shed.clone(),
        );
    }

    /// Every series of these counters exists from the start, at 0: a query over one that has
    /// not moved yet gets 0, not nothing.
    fn start_at_zero(&self) {
        for &kind in InputKind::ALL {
            self.input_requests
                .get_or_create_owned(&KindLabels { kind });
        }
        for &reason in StateFailure::ALL {
            self.state_failures
                .get_or_create_owned(&FailureLabels { reason });
        }
        for &reason in AbandonReason::ALL {
            self.abandoned
                .get_or_create_owned(&AbandonLabels { reason });
        }
        let rejected = [RetryReason::InvalidState, RetryReason::InvalidResponses];
        let retries = RetryResult::ALL
            .iter()
            .filter(|r| **r != RetryResult::Rejected)
            .map(|&result| (result, RetryReason::None))
            .chain(rejected.map(|reason| (RetryResult::Rejected, reason)));
        for (result, reason) in retries {
            self.retries
                .get_or_create_owned(&RetryLabels { result, reason });
        }
        let shed = [
            (Listener::Mcp, Shed::AddressCap),
            (Listener::Internal, Shed::AddressCap),
            (Listener::Admin, Shed::IdleEvicted),
        ];
        for (listener, reason) in shed {
            self.connections_shed
                .get_or_create_owned(&ShedLabels { listener, reason });
        }
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

    /// A backend probed, and the era it turned out to speak.
    pub fn era_probe(&self, backend: &str, era: Era) {
        let backend = backend.to_owned();
        self.era_probes
            .get_or_create(&EraLabels { backend, era })
            .inc();
    }

    /// A probed era that stopped holding, forgotten.
    pub fn era_reprobe(&self, backend: &str) {
        let backend = backend.to_owned();
        self.era_reprobes
            .get_or_create(&BackendLabels { backend })
            .inc();
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
    pub fn set_legacy_sessions(&self, sessions: usize) {
        self.legacy_sessions
            .set(i64::try_from(sessions).unwrap_or(i64::MAX));
    }

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

    /// What one listener's accept loop counts.
    pub fn listener(&self, listener: Listener) -> ListenerMetrics {
        ListenerMetrics {
            listener,
            shed: self.connections_shed.clone(),
        }
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
        // The era counters start at zero too, so a rate over them reads 0 until a probe.
        for era in Era::ALL {
            let (backend, era) = (backend.to_owned(), *era);
            self.era_probes
                .get_or_create_owned(&EraLabels { backend, era });
        }
        self.era_reprobes.get_or_create_owned(&b());
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

/// One listener's metrics (a cheap clone of a registered family).
#[derive(Debug, Clone)]
pub struct ListenerMetrics {
    listener: Listener,
    shed: Family<ShedLabels, Counter>,
}

impl ListenerMetrics {
    /// A connection closed by the gateway to keep the listener open to others.
    pub fn shed(&self, reason: Shed) {
        self.shed
            .get_or_create(&ShedLabels {
                listener: self.listener,
                reason,
            })
            .inc();
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

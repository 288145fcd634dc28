//! Loopback load harness. It starts the release gateway binary as a child process in front of the
//! fixture legacy server and measures, in one run:
//!
//! - (a) a pass-through `tools/call echo`: open-loop at a fixed rate over N keep-alive HTTP/1.1
//!   connections through the gateway, and the same rate from a legacy client talking to the
//!   fixture directly; latency p50/p99 and throughput of both, and what the gateway adds;
//! - (b) one MRTR round: time from sending the retry to receiving the reply, against the
//!   backend's own time from receiving the answer to a pushed request to sending its result;
//!   and, where `perf` may trace the gateway, the same round split inside the gateway from its
//!   own system calls (`split.rs`);
//! - for an HTTP backend, (a) and (b) of the direct client again through a byte relay
//!   (`relay.rs`): what one more process on the path costs before any work;
//! - for an HTTP backend, (a) and (b) again on the relay path (`modern_path.rs`): the gateway
//!   relaying to the fixture as a 2026-07-28 server, against a 2026-07-28 client to it directly;
//! - for an HTTP backend, legacy clients (a session each) on the gateway's legacy face against
//!   the same clients to the fixture directly and through the byte relay (`legacy_face.rs`):
//!   the pass-through of (a), and a call with one elicitation round answered over POST;
//! - (c) gateway memory (VmRSS of the gateway process only) per parked call;
//! - (d) the most parked calls held: park up to `max_parked_total`, then show further calls are
//!   refused and memory stays where it was.
//!
//! `benches/run.sh` runs it through `cargo bench --bench load` and writes BENCHMARKS.md from its
//! results and criterion's. It is not part of `cargo test`.

mod gateway;
mod legacy;
mod legacy_face;
mod modern;
mod modern_path;
mod relay;
mod report;
#[path = "../shared/rss.rs"]
mod rss;
mod split;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use gateway::{BackendKind, Gateway, HttpFixture, Sched, Settings};
use hdrhistogram::Histogram;
use legacy::Legacy;
use modern::Conn;
use modern_path::ModernPath;
use relay::Relay;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Parser)]
#[command(about = "Loopback load harness for mrtr-gateway")]
struct Args {
    /// How the gateway reaches the fixture backend. `http` needs `legacy-server --http` and the
    /// gateway's `kind = "http"` backends.
    #[arg(long, value_enum, default_value = "stdio")]
    backend: BackendKind,
    /// Requests per second for the pass-through comparison (a).
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Keep-alive connections (and, for the baseline, concurrent callers on the one pipe).
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Seconds of warm-up before each slice of (a).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds recorded for each side of (a), over all slices.
    #[arg(long, default_value_t = 15.0)]
    duration: f64,
    /// The direct and the gateway side alternate this many times, in (a) and (b); the sides take
    /// their turns in reverse order every other time, so an even count balances them.
    #[arg(long, default_value_t = 6)]
    slices: usize,
    /// MRTR rounds timed for (b), through the gateway and directly.
    #[arg(long, default_value_t = 400)]
    rounds: usize,
    /// Parked-call counts at which gateway memory is read (c); the last one is also
    /// `max_parked_total` for (d). Default: 100,400 for stdio, 1000,10000 for http.
    #[arg(long, value_delimiter = ',')]
    park: Vec<usize>,
    /// HTTP backend: no standalone GET stream per session, so a parked call holds one upstream
    /// connection instead of two (10,000 parked calls then fit in 20,000 descriptors).
    #[arg(long)]
    no_standalone_stream: bool,
    /// HTTP backend: the fixture numbers its events (`legacy-server --event-ids`) for (a), (b)
    /// and the first (c), so parked calls let their streams go and a retry picks one up.
    #[arg(long)]
    event_ids: bool,
    /// Also measure (a) and (b) through a second gateway with `server.worker_threads = N`, in
    /// the same alternation as the first (which keeps its default, one worker per CPU).
    #[arg(long)]
    also_workers: Option<usize>,
    /// Calls attempted past `max_parked_total` in (d).
    #[arg(long, default_value_t = 40)]
    beyond: usize,
    /// Where the JSON results go.
    #[arg(long, default_value = "target/bench-load.json")]
    out: PathBuf,
    /// Measure nothing: write the report from the results of an earlier run (its `--out` file).
    #[arg(long)]
    render: Option<PathBuf>,
    /// Write the Markdown report here (with criterion's estimates from `--criterion-dir`).
    #[arg(long)]
    report: Option<PathBuf>,
    #[arg(long, default_value = "target/criterion")]
    criterion_dir: PathBuf,
    /// The command line recorded in the report.
    #[arg(long, default_value = "benches/run.sh")]
    command: String,
    /// The gateway binary (default: the one cargo built with this harness).
    #[arg(long, default_value = env!("CARGO_BIN_EXE_mrtr-gateway"))]
    gateway: PathBuf,
    /// Measure only the legacy clients' rows (`--backend http`): the fixture, a byte relay and a
    /// gateway in front of it; prints their figures and rows, and writes no file.
    #[arg(long)]
    legacy_face_only: bool,
    /// Run as the byte relay in front of this address instead (the harness starts it so).
    #[arg(long, hide = true)]
    relay_to: Option<SocketAddr>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            count: h.len(),
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Load {
    /// Calls made, warm-up included.
    pub sent: u64,
    pub latency: Latency,
    pub throughput_rps: f64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// The p50 of each slice on its own, in the order run (empty in results from before it was
    /// recorded).
    #[serde(default)]
    pub p50_by_slice_us: Vec<f64>,
}

/// CPU spent per operation, in microseconds: on a CPU, and runnable but waiting for one.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Cpu {
    pub gateway_run_us: f64,
    pub gateway_wait_us: f64,
    pub backend_run_us: f64,
    pub backend_wait_us: f64,
}

impl Cpu {
    fn between(gw: (&Sched, &Sched), backend: (&Sched, &Sched), ops: u64) -> Cpu {
        let (gateway_run_us, gateway_wait_us) = gw.1.per_op_us(gw.0, ops);
        let (backend_run_us, backend_wait_us) = backend.1.per_op_us(backend.0, ops);
        Cpu {
            gateway_run_us,
            gateway_wait_us,
            backend_run_us,
            backend_wait_us,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryPoint {
    pub parked: usize,
    pub gateway_rss_kib: u64,
    pub per_call_kib: f64,
    pub children: usize,
    pub children_rss_kib: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limit {
    pub max_parked_total: usize,
    pub held: usize,
    pub attempted_beyond: usize,
    pub refused_beyond: usize,
    pub rss_at_limit_kib: u64,
    pub rss_after_refusals_kib: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// When the load run started (UTC) and the commit it measured.
    pub date: String,
    pub commit: String,
    pub backend: String,
    pub loadavg_before: String,
    pub loadavg_after: String,
    pub rate: f64,
    pub connections: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub direct: Load,
    pub gateway: Load,
    pub direct_cpu: Cpu,
    pub gateway_cpu: Cpu,
    pub rounds: usize,
    pub slices: usize,
    pub resume_direct_cpu: Cpu,
    pub resume_gateway_cpu: Cpu,
    pub resume_gateway: Latency,
    pub resume_direct: Latency,
    pub baseline_rss_kib: u64,
    pub memory: Vec<MemoryPoint>,
    pub limit: Limit,
    /// (c) again with a backend that numbers its events, so parked calls let their streams go
    /// (HTTP backend only; empty in results from before it was measured).
    #[serde(default)]
    pub released_baseline_rss_kib: u64,
    #[serde(default)]
    pub memory_released: Vec<MemoryPoint>,
    /// (a) and (b) of the direct client again, through a byte relay in the gateway's place (HTTP
    /// backend only; its CPU is counted as the gateway's).
    #[serde(default)]
    pub relay: Option<Relayed>,
    /// (b) split inside the gateway from its own system calls ([`split`]), or why it was not.
    #[serde(default)]
    pub resume_split: Option<split::Split>,
    #[serde(default)]
    pub resume_split_missing: Option<String>,
    /// (a) and (b) through a second gateway with a set number of worker threads
    /// (`--also-workers`), measured in the same alternation.
    #[serde(default)]
    pub threads: Option<Threads>,
    /// (a) and (b) on the relay path, to a 2026-07-28 backend (HTTP backend only; absent in
    /// results from before it was measured).
    #[serde(default)]
    pub modern: Option<ModernPath>,
    /// Legacy clients on the gateway's legacy face against the same clients directly (HTTP
    /// backend only; absent in results from before it was measured).
    #[serde(default)]
    pub legacy_face: Option<legacy_face::LegacyFace>,
}

/// The gateway's figures with `server.worker_threads` set (`--also-workers`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Threads {
    pub worker_threads: usize,
    pub load: Load,
    pub cpu: Cpu,
    pub resume: Latency,
    pub resume_cpu: Cpu,
    pub resume_split: Option<split::Split>,
}

/// The direct client's figures through a byte relay: the floor under what any proxy adds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Relayed {
    pub load: Load,
    pub cpu: Cpu,
    pub resume: Latency,
    pub resume_cpu: Cpu,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("histogram bounds")
}

/// One caller in an open-loop run: it owns one connection (or one slot on a shared pipe).
trait Caller: Send + 'static {
    fn call(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// One side's turn in a slice of (a) or (b).
#[derive(Debug, Clone, Copy)]
enum Turn {
    Direct,
    Relay,
    Gateway,
    Threaded,
    /// A 2026-07-28 client to the 2026-07-28 fixture, and the same through the gateway's relay.
    ModernDirect,
    ModernGateway,
}

/// The order of the sides' turns in slice `k`, reversed every other slice: a load on the machine
/// that rises or falls during the run then weighs on each side alike, where a fixed order would
/// give it to whichever side comes later in every slice.
fn turns(k: usize) -> [Turn; 6] {
    let mut order = [
        Turn::Direct,
        Turn::Relay,
        Turn::Gateway,
        Turn::Threaded,
        Turn::ModernDirect,
        Turn::ModernGateway,
    ];
    if k % 2 == 1 {
        order.reverse();
    }
    order
}

/// What one open-loop slice recorded.
struct Slice {
    hist: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
    sent: u64,
    secs: f64,
}

/// Drives `callers` open-loop at `rate` in total and hands them back. Each caller has its own
/// fixed schedule, offset from the others. Latency runs from the send, or from the scheduled time
/// when the caller was still busy with the previous request then (so queueing is counted and a
/// slow server cannot hide behind fewer sends), but never includes the timer's own lateness
/// (1 ms granularity).
async fn open_loop<C: Caller>(
    callers: Vec<C>,
    rate: f64,
    warmup: Duration,
    measure: Duration,
) -> (Slice, Vec<C>) {
    let n = callers.len();
    let interval = Duration::from_secs_f64(n as f64 / rate);
    let start = Instant::now() + Duration::from_millis(50);
    let from = start + warmup;
    let end = from + measure;
    let tasks: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            tokio::spawn(async move {
                let mut hist = histogram();
                let (mut errors, mut first_error, mut last) = (0u64, None, from);
                let mut prev_done = start;
                let mut sent = 0u64;
                for k in 0u64.. {
                    let scheduled = start + interval.mul_f64(k as f64 + i as f64 / n as f64);
                    if scheduled >= end {
                        break;
                    }
                    let busy = prev_done > scheduled;
                    if !busy {
                        tokio::time::sleep_until(scheduled).await;
                    }
                    let begin = if busy { scheduled } else { Instant::now() };
                    let r = c.call().await;
                    sent += 1;
                    let done = Instant::now();
                    prev_done = done;
                    if scheduled < from {
                        continue;
                    }
                    last = last.max(done);
                    match r {
                        Ok(()) => hist.saturating_record((done - begin).as_nanos() as u64),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| format!("{e:#}"));
                        }
                    }
                }
                (hist, errors, first_error, last, sent, c)
            })
        })
        .collect();
    let mut slice = Slice {
        hist: histogram(),
        errors: 0,
        first_error: None,
        sent: 0,
        secs: 0.0,
    };
    let mut last = from;
    let mut callers = Vec::with_capacity(n);
    for t in tasks {
        let (h, e, fe, l, sent, c) = t.await.expect("caller task");
        slice.sent += sent;
        slice.hist.add(&h).expect("same bounds");
        slice.errors += e;
        if slice.first_error.is_none() {
            slice.first_error = fe;
        }
        last = last.max(l);
        callers.push(c);
    }
    slice.secs = (last - from).as_secs_f64().max(measure.as_secs_f64());
    (slice, callers)
}

/// One side of an interleaved comparison, summed over its slices.
struct Side {
    slices: Slice,
    /// The p50 of each slice's latencies, in µs.
    by_slice: Vec<f64>,
    gateway: Sched,
    backend: Sched,
    ops: u64,
}

impl Side {
    fn new() -> Side {
        Side {
            slices: Slice {
                hist: histogram(),
                errors: 0,
                first_error: None,
                sent: 0,
                secs: 0.0,
            },
            by_slice: Vec::new(),
            gateway: Sched::default(),
            backend: Sched::default(),
            ops: 0,
        }
    }

    /// Adds a slice's latencies and the CPU its processes used meanwhile.
    fn add(&mut self, hist: &Histogram<u64>, secs: f64, ops: u64, gateway: Sched, backend: Sched) {
        self.slices.hist.add(hist).expect("same bounds");
        if !hist.is_empty() {
            self.by_slice.push(Latency::of(hist).p50_us);
        }
        self.slices.secs += secs;
        self.ops += ops;
        self.gateway = self.gateway.plus(&gateway);
        self.backend = self.backend.plus(&backend);
    }

    fn add_slice(&mut self, s: Slice, gateway: Sched, backend: Sched) {
        self.add(&s.hist, s.secs, s.sent, gateway, backend);
        self.slices.sent += s.sent;
        self.slices.errors += s.errors;
        if self.slices.first_error.is_none() {
            self.slices.first_error = s.first_error;
        }
    }

    /// Times `n` rounds of (b) for this side, with the CPU its processes used meanwhile.
    async fn rounds(
        &mut self,
        gateway: &[u32],
        backend: impl Fn() -> Vec<u32>,
        n: usize,
        rounds: impl Future<Output = anyhow::Result<Histogram<u64>>>,
    ) -> anyhow::Result<()> {
        let (h, g, b) = metered(gateway, backend, rounds).await;
        self.add(&h?, 0.0, n as u64, g, b);
        Ok(())
    }

    /// Runs one open-loop slice of (a) for this side; its callers come back for the next one.
    async fn load_slice<C: Caller>(
        &mut self,
        callers: Vec<C>,
        gateway: &[u32],
        backend: impl Fn() -> Vec<u32>,
        pace: (f64, Duration, Duration),
    ) -> Vec<C> {
        let (rate, warmup, time) = pace;
        let ((s, c), g, b) =
            metered(gateway, backend, open_loop(callers, rate, warmup, time)).await;
        self.add_slice(s, g, b);
        c
    }

    fn load(&self) -> Load {
        Load {
            sent: self.slices.sent,
            throughput_rps: self.slices.hist.len() as f64 / self.slices.secs.max(f64::MIN_POSITIVE),
            latency: Latency::of(&self.slices.hist),
            errors: self.slices.errors,
            first_error: self.slices.first_error.clone(),
            p50_by_slice_us: self.by_slice.clone(),
        }
    }

    fn cpu(&self) -> Cpu {
        let none = Sched::default();
        Cpu::between((&none, &self.gateway), (&none, &self.backend), self.ops)
    }
}

/// Measures the CPU that `gateway` and `backend` processes use while `f` runs.
async fn metered<T>(
    gateway: &[u32],
    backend: impl Fn() -> Vec<u32>,
    f: impl Future<Output = T>,
) -> (T, Sched, Sched) {
    let (g0, b0) = (Sched::of(gateway), Sched::of(&backend()));
    let out = f.await;
    let (g1, b1) = (Sched::of(gateway), Sched::of(&backend()));
    (out, g1.minus(&g0), b1.minus(&b0))
}

/// A 2026-07-28 client's `echo` on one connection: to the gateway, or on the relay path also
/// to the 2026-07-28 fixture directly.
struct GatewayEcho {
    conn: Conn,
    body: Bytes,
}

impl Caller for GatewayEcho {
    async fn call(&mut self) -> anyhow::Result<()> {
        let msg = self.conn.call("echo", self.body.clone()).await?;
        let r = modern::result(&msg)?;
        if r["resultType"] != "complete" {
            bail!("unexpected result {r}");
        }
        Ok(())
    }
}

struct DirectEcho {
    backend: Arc<Legacy>,
}

impl Caller for DirectEcho {
    async fn call(&mut self) -> anyhow::Result<()> {
        let msg = self.backend.request("tools/call", echo_params()).await?;
        let r = msg.get("result").context("echo failed")?;
        if r.get("isError") == Some(&json!(true)) {
            bail!("echo failed: {r}");
        }
        Ok(())
    }
}

fn echo_params() -> Value {
    json!({"name": "echo", "arguments": {"text": "hello"}})
}

fn elicitation_caps() -> Value {
    json!({"elicitation": {}})
}

fn accept() -> Value {
    json!({"action": "accept", "content": {"name": "Ada"}})
}

/// (b) against a 2026-07-28 endpoint: the gateway (where the first call parks, or on the relay
/// path is relayed), or the 2026-07-28 fixture directly. The timed part is the retry.
async fn gateway_rounds(url: &str, rounds: usize) -> anyhow::Result<Histogram<u64>> {
    let mut conn = Conn::open(url).await?;
    let mut hist = histogram();
    for i in 0..rounds as u64 {
        let first = modern::tools_call(2 * i, "ask_form", json!({}), elicitation_caps(), None);
        let msg = conn.call("ask_form", first).await?;
        let r = modern::result(&msg)?;
        let state = r["requestState"].as_str().context("no requestState")?;
        let key = r["inputRequests"]
            .as_object()
            .and_then(|m| m.keys().next())
            .context("no inputRequests")?;
        let retry = modern::tools_call(
            2 * i + 1,
            "ask_form",
            json!({}),
            elicitation_caps(),
            Some((json!({ key: accept() }), state)),
        );
        let t0 = Instant::now();
        let msg = conn.call("ask_form", retry).await?;
        let dt = t0.elapsed();
        let r = modern::result(&msg)?;
        if r["resultType"] != "complete" {
            bail!("retry did not complete: {r}");
        }
        hist.saturating_record(dt.as_nanos() as u64);
    }
    Ok(hist)
}

/// (b) directly: the timed part runs from writing the answer to a pushed elicitation to reading
/// the tool's result.
async fn direct_rounds(backend: &mut Legacy, rounds: usize) -> anyhow::Result<Histogram<u64>> {
    let mut hist = histogram();
    for _ in 0..rounds {
        let rx = backend
            .start_request("tools/call", json!({"name": "ask_form", "arguments": {}}))
            .await?;
        let push = backend.next_push().await?;
        if push["method"] != "elicitation/create" {
            bail!("unexpected push {push}");
        }
        let t0 = Instant::now();
        backend.respond(&push["id"], accept()).await?;
        let msg = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .context("no result")??;
        let dt = t0.elapsed();
        msg.get("result").context("ask_form failed")?;
        hist.saturating_record(dt.as_nanos() as u64);
    }
    Ok(hist)
}

/// Parks `count` ask_form calls over `conns` connections. Returns (parked, refused with -31000).
async fn park(url: &str, count: usize, conns: usize) -> anyhow::Result<(usize, usize)> {
    let conns = conns.min(count.max(1));
    let mut tasks = Vec::new();
    for c in 0..conns {
        let share = count / conns + usize::from(c < count % conns);
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(&url).await?;
            let (mut parked, mut refused) = (0usize, 0usize);
            for i in 0..share {
                let body =
                    modern::tools_call(i as u64, "ask_form", json!({}), elicitation_caps(), None);
                let msg = conn.call("ask_form", body).await?;
                if msg["result"]["resultType"] == "input_required" {
                    parked += 1;
                } else if msg["error"]["code"] == -31000 {
                    refused += 1;
                } else {
                    bail!("unexpected answer while parking: {msg}");
                }
            }
            anyhow::Ok((parked, refused))
        }));
    }
    let mut total = (0, 0);
    for t in tasks {
        let (p, r) = t.await??;
        total.0 += p;
        total.1 += r;
    }
    Ok(total)
}

fn progress(what: &str, l: &Latency) {
    eprintln!(
        "{what}: p50 {:.0} µs, p99 {:.0} µs over {} calls",
        l.p50_us, l.p99_us, l.count
    );
}

/// Waits for the allocator and the runtime to settle before a memory reading.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(800)).await;
}

async fn run(args: &Args) -> anyhow::Result<Results> {
    let dir = gateway::scratch()?;
    let exe = &args.gateway;
    let park_counts = if args.park.is_empty() {
        match args.backend {
            BackendKind::Stdio => vec![100, 400],
            BackendKind::Http => vec![1000, 10_000],
        }
    } else {
        args.park.clone()
    };
    let max_parked = *park_counts.iter().max().context("--park is empty")?;
    let fixture = match args.backend {
        BackendKind::Stdio => None,
        BackendKind::Http => Some(HttpFixture::start(exe, &dir, args.event_ids).await?),
    };
    let fixture_url = fixture.as_ref().map(|f| f.url.as_str());
    // HTTP backend: the fixture again as a 2026-07-28 server, the gateway's second backend.
    let modern = match args.backend {
        BackendKind::Stdio => None,
        BackendKind::Http => Some(HttpFixture::start_modern(exe, &dir).await?),
    };
    let warmup = Duration::from_secs_f64(args.warmup);
    let measure = Duration::from_secs_f64(args.duration);

    // The baseline (a legacy client straight to the fixture) and the gateway run side by side,
    // measured in alternating slices so that both see the same machine: it is shared, and other
    // work on it comes and goes.
    let loadavg_before = gateway::loadavg();
    let date = report::output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let commit = report::output("git", &["rev-parse", "--short", "HEAD"]);
    let mut backend = match &fixture {
        None => Legacy::stdio(exe).await?,
        Some(f) => Legacy::http(&f.url, f.proc.pid).await?,
    };
    let settings = Settings {
        pool_max: max_parked + args.beyond + 8,
        max_parked,
        standalone_stream: !args.no_standalone_stream,
        worker_threads: None,
        modern_url: modern.as_ref().map(|m| m.url.clone()),
    };
    let gw = Gateway::start(exe, &dir, args.backend, fixture_url, &settings).await?;
    eprintln!("gateway at {} (pid {})", gw.url, gw.proc.pid);
    // With --also-workers: a second gateway, the same but for its worker threads. It takes part
    // in (a) and (b) only, so its pool stays small.
    let threaded = match args.also_workers {
        Some(n) => {
            let s = Settings {
                pool_max: args.connections + 8,
                worker_threads: Some(n),
                modern_url: None,
                ..settings.clone()
            };
            let g = Gateway::start(exe, &dir, args.backend, fixture_url, &s).await?;
            eprintln!(
                "gateway with {n} worker threads at {} (pid {})",
                g.url, g.proc.pid
            );
            Some((n, g))
        }
        None => None,
    };
    // HTTP backend: a second direct client, through a byte relay in the gateway's place.
    let relay = match &fixture {
        Some(f) => Some(Relay::start(&dir, &f.url).await?),
        None => None,
    };
    let mut relayed = match (&relay, &fixture) {
        (Some(r), Some(f)) => Some(Legacy::http(&r.url, f.proc.pid).await?),
        _ => None,
    };
    let relay_pid: Vec<u32> = relay.iter().map(|r| r.proc.pid).collect();
    let gw_pid = [gw.proc.pid];
    let threaded_pid: Vec<u32> = threaded.iter().map(|(_, g)| g.proc.pid).collect();
    let direct_pid = [backend.pid];
    // The backend's processes behind a gateway: its stdio children, or the HTTP fixture.
    let fixture_pid = fixture.as_ref().map(|f| f.proc.pid);
    let backend_of = |gateway: u32| match fixture_pid {
        Some(pid) => vec![pid],
        None => gateway::children(gateway),
    };
    let gw_backend = || backend_of(gw.proc.pid);
    let slices = args.slices.max(1);
    // The relay path: its endpoints (the fixture's, the gateway's) and its process.
    let modern_urls = match &modern {
        Some(m) => Some((m.url.clone(), modern_path::endpoint(&gw.url)?)),
        None => None,
    };
    let modern_pid: Vec<u32> = modern.iter().map(|m| m.proc.pid).collect();
    let modern_backend = || modern_pid.clone();
    let mut on_modern = modern_path::Sides::new();

    // (b): rounds in alternating chunks.
    eprintln!("(b) {} rounds each way, in {slices} slices", args.rounds);
    let (mut resume_direct, mut resume_gateway) = (Side::new(), Side::new());
    let (mut resume_relay, mut resume_threaded) = (Side::new(), Side::new());
    for k in 0..slices {
        let n = args.rounds / slices + usize::from(k < args.rounds % slices);
        let direct_backend = || direct_pid.to_vec();
        for turn in turns(k) {
            match turn {
                Turn::Direct => {
                    let rounds = direct_rounds(&mut backend, n);
                    resume_direct.rounds(&[], direct_backend, n, rounds).await?;
                }
                Turn::Relay => {
                    if let Some(relayed) = relayed.as_mut() {
                        let rounds = direct_rounds(relayed, n);
                        resume_relay
                            .rounds(&relay_pid, direct_backend, n, rounds)
                            .await?;
                    }
                }
                Turn::Gateway => {
                    let rounds = gateway_rounds(&gw.url, n);
                    resume_gateway
                        .rounds(&gw_pid, gw_backend, n, rounds)
                        .await?;
                }
                Turn::Threaded => {
                    if let Some((_, t)) = &threaded {
                        let rounds = gateway_rounds(&t.url, n);
                        let backend = || backend_of(t.proc.pid);
                        resume_threaded
                            .rounds(&threaded_pid, backend, n, rounds)
                            .await?;
                    }
                }
                Turn::ModernDirect => {
                    if let Some((direct, _)) = &modern_urls {
                        let rounds = gateway_rounds(direct, n);
                        let side = &mut on_modern.resume_direct;
                        side.rounds(&[], modern_backend, n, rounds).await?;
                    }
                }
                Turn::ModernGateway => {
                    if let Some((_, through)) = &modern_urls {
                        let rounds = gateway_rounds(through, n);
                        let side = &mut on_modern.resume_gateway;
                        side.rounds(&gw_pid, modern_backend, n, rounds).await?;
                    }
                }
            }
        }
    }
    progress("(b) direct", &Latency::of(&resume_direct.slices.hist));
    progress("(b) gateway", &Latency::of(&resume_gateway.slices.hist));
    eprintln!("(b) {} more rounds, traced with perf", args.rounds);
    let (resume_split, resume_split_missing) = match split_rounds(&gw, &dir, args.rounds).await {
        Ok(s) => (Some(s), None),
        Err(why) => {
            eprintln!("(b) not split inside the gateway: {why}");
            (None, Some(why))
        }
    };
    let threaded_split = match &threaded {
        Some((n, t)) => {
            eprintln!(
                "(b) {} more rounds with {n} worker threads, traced",
                args.rounds
            );
            split_rounds(t, &dir, args.rounds)
                .await
                .inspect_err(|why| eprintln!("(b) with {n} worker threads not split: {why}"))
                .ok()
        }
        None => None,
    };

    // (a): open-loop slices, alternating.
    eprintln!(
        "(a) {} req/s, {}s recorded each way, in {slices} slices",
        args.rate, args.duration
    );
    let shared = Arc::new(backend);
    let shared_relayed = relayed.map(Arc::new);
    let callers_of = |backend: &Arc<Legacy>| -> Vec<DirectEcho> {
        (0..args.connections)
            .map(|_| DirectEcho {
                backend: backend.clone(),
            })
            .collect()
    };
    let mut direct_callers = callers_of(&shared);
    let mut relay_callers = shared_relayed.as_ref().map(callers_of);
    async fn echo_callers(url: &str, n: usize) -> anyhow::Result<Vec<GatewayEcho>> {
        let mut callers = Vec::new();
        for _ in 0..n {
            callers.push(GatewayEcho {
                conn: Conn::open(url).await?,
                body: modern::tools_call(1, "echo", json!({"text": "hello"}), json!({}), None),
            });
        }
        Ok(callers)
    }
    let mut gw_callers = echo_callers(&gw.url, args.connections).await?;
    let mut threaded_callers = match &threaded {
        Some((_, t)) => Some(echo_callers(&t.url, args.connections).await?),
        None => None,
    };
    let (mut modern_direct_callers, mut modern_gw_callers) = match &modern_urls {
        Some((direct, through)) => (
            Some(echo_callers(direct, args.connections).await?),
            Some(echo_callers(through, args.connections).await?),
        ),
        None => (None, None),
    };
    let slice_time = measure / slices as u32;
    let (mut direct, mut through) = (Side::new(), Side::new());
    let (mut via_relay, mut via_threaded) = (Side::new(), Side::new());
    let pace = (args.rate, warmup, slice_time);
    for k in 0..slices {
        let direct_backend = || direct_pid.to_vec();
        for turn in turns(k) {
            match turn {
                Turn::Direct => {
                    direct_callers = direct
                        .load_slice(direct_callers, &[], direct_backend, pace)
                        .await;
                }
                Turn::Relay => {
                    if let Some(callers) = relay_callers.take() {
                        let callers = via_relay
                            .load_slice(callers, &relay_pid, direct_backend, pace)
                            .await;
                        relay_callers = Some(callers);
                    }
                }
                Turn::Gateway => {
                    gw_callers = through
                        .load_slice(gw_callers, &gw_pid, gw_backend, pace)
                        .await;
                }
                Turn::Threaded => {
                    if let (Some(callers), Some((_, t))) = (threaded_callers.take(), &threaded) {
                        let backend = || backend_of(t.proc.pid);
                        let callers = via_threaded
                            .load_slice(callers, &threaded_pid, backend, pace)
                            .await;
                        threaded_callers = Some(callers);
                    }
                }
                Turn::ModernDirect => {
                    if let Some(callers) = modern_direct_callers.take() {
                        let side = &mut on_modern.direct;
                        let callers = side.load_slice(callers, &[], modern_backend, pace).await;
                        modern_direct_callers = Some(callers);
                    }
                }
                Turn::ModernGateway => {
                    if let Some(callers) = modern_gw_callers.take() {
                        let side = &mut on_modern.gateway;
                        let callers = side
                            .load_slice(callers, &gw_pid, modern_backend, pace)
                            .await;
                        modern_gw_callers = Some(callers);
                    }
                }
            }
        }
    }
    let (direct_load, through_load) = (direct.load(), through.load());
    progress("(a) direct", &direct_load.latency);
    progress("(a) gateway", &through_load.latency);
    drop(direct_callers);
    drop(gw_callers);
    drop(relay_callers);
    drop(threaded_callers);
    drop(modern_direct_callers);
    drop(modern_gw_callers);
    let modern_figures = modern.map(|m| (on_modern.figures(), m));
    if let Some((figures, _)) = &modern_figures {
        progress("(a) 2026-07-28 backend directly", &figures.direct.latency);
        progress(
            "(a) 2026-07-28 backend via the relay",
            &figures.gateway.latency,
        );
        progress("(b) 2026-07-28 backend directly", &figures.resume_direct);
        progress(
            "(b) 2026-07-28 backend via the relay",
            &figures.resume_gateway,
        );
    }
    let threads = match threaded {
        Some((worker_threads, t)) => {
            let figures = Threads {
                worker_threads,
                load: via_threaded.load(),
                cpu: via_threaded.cpu(),
                resume: Latency::of(&resume_threaded.slices.hist),
                resume_cpu: resume_threaded.cpu(),
                resume_split: threaded_split,
            };
            progress("(a) gateway, set worker threads", &figures.load.latency);
            progress("(b) gateway, set worker threads", &figures.resume);
            t.proc.stop(Duration::from_secs(5)).await;
            Some(figures)
        }
        None => None,
    };
    let relayed = relay.as_ref().map(|_| Relayed {
        load: via_relay.load(),
        cpu: via_relay.cpu(),
        resume: Latency::of(&resume_relay.slices.hist),
        resume_cpu: resume_relay.cpu(),
    });
    if let Some(r) = &relayed {
        progress("(a) relay", &r.load.latency);
        progress("(b) relay", &r.resume);
    }
    // Legacy clients, in an alternation of their own, while the byte relay is still up.
    let legacy_face = match &fixture {
        Some(f) => {
            let setup = legacy_face::Setup {
                relay: relay.as_ref(),
                ..legacy_face::Setup::of(args, exe, &dir, f)
            };
            Some(legacy_face::measure(&setup).await?)
        }
        None => None,
    };
    for shared in [Some(shared), shared_relayed].into_iter().flatten() {
        let backend =
            Arc::try_unwrap(shared).map_err(|_| anyhow::anyhow!("baseline still shared"))?;
        backend.stop().await;
    }
    if let Some(relay) = relay {
        relay.proc.stop(Duration::from_secs(5)).await;
    }
    let modern = match modern_figures {
        Some((figures, fixture)) => {
            fixture.proc.stop(Duration::from_secs(5)).await;
            Some(figures)
        }
        None => None,
    };

    // (c) and (d): memory per parked call, then the limit.
    settle().await;
    let baseline_rss_kib = gw.rss_kib()?;
    let memory = parked_memory(&gw, baseline_rss_kib, &park_counts).await?;
    let parked = memory.last().map_or(0, |m| m.parked);
    eprintln!(
        "(d) {} more past max_parked_total = {max_parked}",
        args.beyond
    );
    let rss_at_limit_kib = gw.rss_kib()?;
    let (more, refused) = park(&gw.url, args.beyond, 8).await?;
    settle().await;
    let limit = Limit {
        max_parked_total: max_parked,
        held: parked + more,
        attempted_beyond: args.beyond,
        refused_beyond: refused,
        rss_at_limit_kib,
        rss_after_refusals_kib: gw.rss_kib()?,
    };
    gw.proc.stop(Duration::from_secs(20)).await;
    if let Some(f) = fixture {
        f.proc.stop(Duration::from_secs(5)).await;
    }

    // (c) again, against a backend that numbers its events: parked calls let their streams go.
    let (released_baseline_rss_kib, memory_released) = match args.backend {
        BackendKind::Stdio => (0, Vec::new()),
        BackendKind::Http => {
            let fixture = HttpFixture::start(exe, &dir, true).await?;
            let settings = Settings {
                modern_url: None,
                ..settings
            };
            let gw = Gateway::start(exe, &dir, args.backend, Some(&fixture.url), &settings).await?;
            eprintln!(
                "(c) with event ids: gateway at {} (pid {})",
                gw.url, gw.proc.pid
            );
            gateway_rounds(&gw.url, 20).await?;
            settle().await;
            let baseline = gw.rss_kib()?;
            let memory = parked_memory(&gw, baseline, &park_counts).await?;
            gw.proc.stop(Duration::from_secs(20)).await;
            fixture.proc.stop(Duration::from_secs(5)).await;
            (baseline, memory)
        }
    };
    let loadavg_after = gateway::loadavg();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Results {
        date,
        commit,
        backend: format!("{:?}", args.backend).to_lowercase(),
        loadavg_before,
        loadavg_after,
        direct_cpu: direct.cpu(),
        gateway_cpu: through.cpu(),
        resume_direct_cpu: resume_direct.cpu(),
        resume_gateway_cpu: resume_gateway.cpu(),
        rate: args.rate,
        connections: args.connections,
        warmup_s: args.warmup,
        duration_s: args.duration,
        direct: direct_load,
        gateway: through_load,
        rounds: args.rounds,
        slices,
        resume_gateway: Latency::of(&resume_gateway.slices.hist),
        resume_direct: Latency::of(&resume_direct.slices.hist),
        baseline_rss_kib,
        memory,
        limit,
        released_baseline_rss_kib,
        memory_released,
        relay: relayed,
        resume_split,
        resume_split_missing,
        threads,
        modern,
        legacy_face,
    })
}

/// `rounds` more rounds of (b) through `gw` while `perf` splits them inside it ([`split`]).
async fn split_rounds(
    gw: &Gateway,
    dir: &std::path::Path,
    rounds: usize,
) -> Result<split::Split, String> {
    let traced = async {
        gateway_rounds(&gw.url, rounds).await?;
        Ok(())
    };
    let s = split::measure(gw.proc.pid, dir, traced).await?;
    progress("(b) inside the gateway, its own part", &s.gateway);
    Ok(s)
}

/// (c): parks `ask_form` calls on `gw` up to each count and reads its RSS against `baseline`.
async fn parked_memory(
    gw: &Gateway,
    baseline: u64,
    counts: &[usize],
) -> anyhow::Result<Vec<MemoryPoint>> {
    let mut memory = Vec::new();
    let mut parked = 0;
    for &count in counts {
        eprintln!("(c) parking up to {count}");
        let (p, r) = park(&gw.url, count - parked, 32).await?;
        if r > 0 {
            bail!("{r} calls refused below max_parked_total");
        }
        parked += p;
        settle().await;
        let rss = gw.rss_kib()?;
        let (children, children_rss_kib) = gw.children_rss_kib();
        memory.push(MemoryPoint {
            parked,
            gateway_rss_kib: rss,
            per_call_kib: (rss.saturating_sub(baseline)) as f64 / parked as f64,
            children,
            children_rss_kib,
        });
    }
    Ok(memory)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The relay (see `relay.rs`) on one thread; the load client on two workers, so that a
    // response's handling does not queue behind another's.
    if let Some(target) = args.relay_to {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(relay::serve(target));
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(harness(args))
}

async fn harness(args: Args) -> anyhow::Result<()> {
    if args.legacy_face_only {
        // The figures as JSON, and the report's rows for them.
        let figures = legacy_face::alone(&args).await?;
        println!("{}", serde_json::to_string_pretty(&figures)?);
        println!("\n{}", report::legacy_face::alone(&figures, args.rate));
        return Ok(());
    }
    let results = match &args.render {
        Some(path) => serde_json::from_slice(&std::fs::read(path)?)
            .with_context(|| format!("read results from {}", path.display()))?,
        None => run(&args).await?,
    };
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&results)?)?;
    println!("{}", serde_json::to_string_pretty(&results)?);
    if let Some(path) = &args.report {
        let md = report::markdown(&results, &args.criterion_dir, &args.command);
        std::fs::write(path, md).with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

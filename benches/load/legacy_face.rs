//! Legacy clients on the gateway's legacy face: a 2025-11-25 Streamable HTTP client
//! ([`crate::legacy::Legacy`]) against the fixture directly, through the byte relay, and
//! through a gateway in front of that same fixture, which proxies each client's session to a
//! backend session of its own. It runs after (a) in the full run (HTTP backend only), or alone
//! (`--legacy-face-only`), in an alternation of its own:
//!
//! - the pass-through `echo`: open loop at the rate of (a), one simulated client per
//!   connection, each `initialize`d once (then `notifications/initialized`) and calling over
//!   its own session, with the CPU each process spends per call;
//! - one `ask_form` call with its elicitation round: the request POSTed, the pushed
//!   `elicitation/create` read off that POST's event stream, the answer POSTed, the result read.
//!   The whole call is timed, and its last stretch (answer POSTed → result read) apart.
//!
//! The gateway here is a process of its own, configured as the main one: the legacy sessions
//! it holds end with it, so they weigh on nothing measured after.

use crate::gateway::{BackendKind, Gateway, HttpFixture, Settings};
use crate::legacy::Legacy;
use crate::relay::Relay;
use crate::{Args, Caller, Cpu, Latency, Load, Side, accept, echo_params, histogram, progress};
use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// One route's figures: legacy clients to the fixture directly, through the relay, or through
/// the gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Route {
    /// The pass-through `echo`, one session per simulated client.
    pub load: Load,
    pub cpu: Cpu,
    /// An `ask_form` call with one elicitation round: request POSTed → result read.
    pub call: Latency,
    /// Its last stretch: the answer POSTed → the result read.
    pub answer: Latency,
    pub call_cpu: Cpu,
}

/// The legacy clients' figures (HTTP backend only).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LegacyFace {
    /// Simulated clients in the open loop, each with its own session.
    pub clients: usize,
    /// `ask_form` calls timed on each route.
    pub rounds: usize,
    pub direct: Route,
    pub relay: Option<Route>,
    pub gateway: Route,
}

/// What the case runs against, and at what pace.
#[derive(Debug)]
pub struct Setup<'a> {
    pub exe: &'a Path,
    pub dir: &'a Path,
    pub fixture: &'a HttpFixture,
    pub relay: Option<&'a Relay>,
    /// Whether the gateway keeps a standalone GET stream per backend session.
    pub standalone_stream: bool,
    pub clients: usize,
    pub rate: f64,
    pub warmup: Duration,
    /// Recorded per route over all slices.
    pub measure: Duration,
    pub slices: usize,
    pub rounds: usize,
}

impl<'a> Setup<'a> {
    pub fn of(args: &Args, exe: &'a Path, dir: &'a Path, fixture: &'a HttpFixture) -> Setup<'a> {
        Setup {
            exe,
            dir,
            fixture,
            relay: None,
            standalone_stream: !args.no_standalone_stream,
            clients: args.connections,
            rate: args.rate,
            warmup: Duration::from_secs_f64(args.warmup),
            measure: Duration::from_secs_f64(args.duration),
            slices: args.slices.max(1),
            rounds: args.rounds,
        }
    }
}

/// A simulated legacy client calling `echo` over its own session.
struct Echo(Legacy);

impl Caller for Echo {
    async fn call(&mut self) -> anyhow::Result<()> {
        let msg = self.0.request("tools/call", echo_params()).await?;
        let r = msg.get("result").context("echo failed")?;
        if r.get("isError") == Some(&json!(true)) {
            bail!("echo failed: {r}");
        }
        Ok(())
    }
}

/// One route's clients and what they recorded so far.
struct Runner {
    name: &'static str,
    /// The process between the clients and the backend (the gateway, the relay), if any.
    proxy: Vec<u32>,
    callers: Vec<Echo>,
    /// The client of the `ask_form` calls: one more session.
    asker: Legacy,
    load: Side,
    calls: Side,
    answers: Histogram<u64>,
}

impl Runner {
    async fn open(
        name: &'static str,
        url: &str,
        proxy: Option<u32>,
        backend: u32,
        clients: usize,
    ) -> anyhow::Result<Runner> {
        let mut callers = Vec::with_capacity(clients);
        for _ in 0..clients {
            let client = Legacy::http(url, backend)
                .await
                .with_context(|| format!("{name}: a client's initialize"))?;
            callers.push(Echo(client));
        }
        let mut asker = Legacy::http(url, backend).await?;
        // Untimed: the answer's POST opens the client's second connection here.
        asker_calls(&mut asker, 2, &mut histogram()).await?;
        Ok(Runner {
            name,
            proxy: proxy.into_iter().collect(),
            callers,
            asker,
            load: Side::new(),
            calls: Side::new(),
            answers: histogram(),
        })
    }

    async fn ask(&mut self, n: usize, backend: &[u32]) -> anyhow::Result<()> {
        let calls = asker_calls(&mut self.asker, n, &mut self.answers);
        self.calls
            .rounds(&self.proxy, || backend.to_vec(), n, calls)
            .await
            .with_context(|| format!("{}: ask_form", self.name))
    }

    async fn load_slice(&mut self, backend: &[u32], pace: (f64, Duration, Duration)) {
        let callers = std::mem::take(&mut self.callers);
        let side = &mut self.load;
        self.callers = side
            .load_slice(callers, &self.proxy, || backend.to_vec(), pace)
            .await;
    }

    fn route(&self) -> Route {
        Route {
            load: self.load.load(),
            cpu: self.load.cpu(),
            call: Latency::of(&self.calls.slices.hist),
            answer: Latency::of(&self.answers),
            call_cpu: self.calls.cpu(),
        }
    }
}

/// `n` sequential `ask_form` calls, each answered over POST: the whole calls' latencies, and
/// each answer's (POSTed → result read) added to `answers`.
async fn asker_calls(
    client: &mut Legacy,
    n: usize,
    answers: &mut Histogram<u64>,
) -> anyhow::Result<Histogram<u64>> {
    let mut calls = histogram();
    for _ in 0..n {
        let t0 = Instant::now();
        let rx = client
            .start_request("tools/call", json!({"name": "ask_form", "arguments": {}}))
            .await?;
        let push = client.next_push().await?;
        if push["method"] != "elicitation/create" {
            bail!("unexpected server request {push}");
        }
        let t1 = Instant::now();
        client.respond(&push["id"], accept()).await?;
        let msg = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .context("no result in 30s")??;
        let done = Instant::now();
        let r = msg.get("result").context("ask_form failed")?;
        if r.get("isError") == Some(&json!(true)) {
            bail!("ask_form failed: {r}");
        }
        calls.saturating_record((done - t0).as_nanos() as u64);
        answers.saturating_record((done - t1).as_nanos() as u64);
    }
    Ok(calls)
}

/// The routes' turns in slice `k`, reversed every other slice (as in the main alternation).
fn order(k: usize, routes: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..routes).collect();
    if k % 2 == 1 {
        order.reverse();
    }
    order
}

/// Runs the case: a gateway of its own in front of `s.fixture`, the three routes' clients,
/// the `ask_form` calls, then the open-loop slices.
pub async fn measure(s: &Setup<'_>) -> anyhow::Result<LegacyFace> {
    let settings = Settings {
        pool_max: s.clients + 8,
        max_parked: 16,
        standalone_stream: s.standalone_stream,
        worker_threads: None,
        modern_url: None,
    };
    let gw = Gateway::start(
        s.exe,
        s.dir,
        BackendKind::Http,
        Some(&s.fixture.url),
        &settings,
    )
    .await?;
    eprintln!(
        "legacy clients: gateway at {} (pid {})",
        gw.url, gw.proc.pid
    );
    let measured = measure_through(s, &gw).await;
    gw.proc.stop(Duration::from_secs(5)).await;
    measured
}

async fn measure_through(s: &Setup<'_>, gw: &Gateway) -> anyhow::Result<LegacyFace> {
    let backend = [s.fixture.proc.pid];
    let (url, pid) = (&s.fixture.url, backend[0]);
    let mut routes = vec![Runner::open("direct", url, None, pid, s.clients).await?];
    if let Some(r) = s.relay {
        routes.push(Runner::open("relay", &r.url, Some(r.proc.pid), pid, s.clients).await?);
    }
    let through = Some(gw.proc.pid);
    routes.push(Runner::open("gateway", &gw.url, through, pid, s.clients).await?);

    eprintln!(
        "legacy clients: {} ask_form calls each way, in {} slices",
        s.rounds, s.slices
    );
    for k in 0..s.slices {
        let n = s.rounds / s.slices + usize::from(k < s.rounds % s.slices);
        for i in order(k, routes.len()) {
            routes[i].ask(n, &backend).await?;
        }
    }
    eprintln!(
        "legacy clients: echo at {} req/s over {} clients, {}s recorded each way",
        s.rate,
        s.clients,
        s.measure.as_secs_f64()
    );
    let pace = (s.rate, s.warmup, s.measure / s.slices as u32);
    for k in 0..s.slices {
        for i in order(k, routes.len()) {
            routes[i].load_slice(&backend, pace).await;
        }
    }

    let gateway = routes.pop().context("no gateway route")?.route();
    let relay = match s.relay {
        Some(_) => Some(routes.pop().context("no relay route")?.route()),
        None => None,
    };
    let direct = routes.pop().context("no direct route")?.route();
    progress("(legacy) echo directly", &direct.load.latency);
    progress("(legacy) echo via the gateway", &gateway.load.latency);
    progress("(legacy) ask_form directly", &direct.call);
    progress("(legacy) ask_form via the gateway", &gateway.call);
    Ok(LegacyFace {
        clients: s.clients,
        rounds: s.rounds,
        direct,
        relay,
        gateway,
    })
}

/// `--legacy-face-only`: the fixture over HTTP, a byte relay in front of it, and the case
/// measured alone; nothing is written.
pub async fn alone(args: &Args) -> anyhow::Result<LegacyFace> {
    if args.backend != BackendKind::Http {
        bail!("--legacy-face-only needs --backend http");
    }
    let dir = crate::gateway::scratch()?;
    let fixture = HttpFixture::start(&args.gateway, &dir, args.event_ids).await?;
    let relay = Relay::start(&dir, &fixture.url).await?;
    let setup = Setup {
        relay: Some(&relay),
        ..Setup::of(args, &args.gateway, &dir, &fixture)
    };
    let measured = measure(&setup).await;
    relay.proc.stop(Duration::from_secs(5)).await;
    fixture.proc.stop(Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

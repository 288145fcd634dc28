//! BENCHMARKS.md: the figures against their targets, the figures behind them, memory,
//! criterion's micro-benchmark estimates, the machine and the method, in brief.

pub mod legacy_face;

use crate::{Load, Results};
use serde_json::Value;
use std::fmt::Write;
use std::path::Path;

/// Micro-benchmarks reported, as criterion names them (group/function) with a description.
const MICRO: [(&str, &str); 7] = [
    ("seal/seal", "seal a requestState (one outstanding key)"),
    ("seal/open", "open and check a requestState"),
    (
        "jsonrpc_parse/tools_call_small",
        "`jsonrpc::parse` of a small tools/call (~300 B)",
    ),
    (
        "jsonrpc_parse/tools_call_10KiB",
        "`jsonrpc::parse` of a tools/call with 10 KiB arguments",
    ),
    (
        "input_required/build",
        "build and serialize an InputRequiredResult (state already sealed)",
    ),
    (
        "input_required/translate_seal_build",
        "translate the push, seal, build, serialize: one round's CPU",
    ),
    (
        "sse_decode/64_events_1KiB_chunks",
        "decode 64 SSE events (1 KiB chunks) and parse each as JSON-RPC",
    ),
];

/// Criterion's median estimate for `name`, in nanoseconds.
fn criterion_median_ns(dir: &Path, name: &str) -> Option<f64> {
    let path = dir.join(name).join("new").join("estimates.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn duration(ns: f64) -> String {
    if ns < 0.0 {
        // A difference of two percentiles can come out below zero when the machine is noisy.
        return format!("−{}", duration(-ns));
    }
    if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.2} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

fn us(v: f64) -> String {
    duration(v * 1000.0)
}

/// The project's targets on this machine: added latency of a pass-through call at p50 and p99 and
/// of a resume round at p50 (µs), gateway memory per parked call (KiB), parked calls held.
const ADDED_P50_US: f64 = 150.0;
const ADDED_P99_US: f64 = 1000.0;
const ROUND_P50_US: f64 = 200.0;
const PER_PARKED_KIB: f64 = 16.0;
const PARKED_HELD: usize = 10_000;

/// The gateway's p50 less the direct client's, slice by slice, or `None` for results from before
/// slices were recorded.
fn slice_by_slice(gateway: &Load, direct: &Load) -> Option<String> {
    let (g, d) = (&gateway.p50_by_slice_us, &direct.p50_by_slice_us);
    if g.is_empty() || g.len() != d.len() {
        return None;
    }
    let each: Vec<String> = g
        .iter()
        .zip(d)
        .map(|(g, d)| format!("{:.0}", g - d))
        .collect();
    Some(format!("{} µs", each.join(", ")))
}

/// A target met, for the table.
fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

pub fn output(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

fn proc_field(file: &str, key: &str) -> String {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// This process's nice value (field 19 of `/proc/self/stat`).
fn niceness() -> String {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().nth(16)?.to_owned()))
        .unwrap_or_else(|| "unknown".into())
}

/// How idle CPUs wait, as the kernel reports it: the cpuidle driver and, under `haltpoll`, how
/// long an idle CPU polls before it halts (0: it halts at once).
fn idle_driver() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let Some(driver) = read("/sys/devices/system/cpu/cpuidle/current_driver") else {
        return String::new();
    };
    match read("/sys/module/haltpoll/parameters/guest_halt_poll_ns") {
        Some(ns) if driver == "haltpoll" => {
            format!("; idle driver `haltpoll`, `guest_halt_poll_ns` = {ns}")
        }
        _ => format!("; idle driver `{driver}`"),
    }
}

/// The whole report, in the order a reader wants it: what was run, the figures against their
/// targets, the figures behind them, memory, the micro-benchmarks, the machine and the method.
/// Why each figure is what it is stays in `benches/FINDINGS.md`, written by hand.
pub fn markdown(r: &Results, criterion: &Path, command: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Benchmarks\n\nWritten by `{command}` on {} at commit `{}`, backend kind `{}`; it \
         takes five to ten minutes on this machine. What bounds each figure, the profiles behind \
         them and the changes that moved them are in [benches/FINDINGS.md](benches/FINDINGS.md).\n",
        r.date, r.commit, r.backend
    );
    targets(&mut s, r);
    pass_through_detail(&mut s, r);
    resume_detail(&mut s, r);
    cpu_detail(&mut s, r);
    memory(&mut s, r, criterion);
    micro(&mut s, criterion);
    machine(&mut s, r);
    method(&mut s, r, command);
    s
}

/// One row per target: (a) latency added and throughput, (b) the resume round, (c) memory per
/// parked call at each count, (d) parked calls held.
fn targets(s: &mut String, r: &Results) {
    let stdio = r.backend == "stdio";
    let add_p50 = r.gateway.latency.p50_us - r.direct.latency.p50_us;
    let add_p99 = r.gateway.latency.p99_us - r.direct.latency.p99_us;
    let sustained = r.gateway.throughput_rps >= 0.98 * r.rate && r.gateway.errors == 0;
    let _ = writeln!(
        s,
        "## Figures against targets\n\n| figure | value | target | met? |\n|---|---|---|---|"
    );
    let _ = writeln!(
        s,
        "| (a) pass-through tools/call at {:.0} req/s, latency added by the gateway, p50 | {} | ≤ 150 µs | {} |",
        r.rate,
        us(add_p50),
        met(add_p50 <= ADDED_P50_US)
    );
    let _ = writeln!(
        s,
        "| (a) the same, p99 | {} | ≤ 1 ms | {} |",
        us(add_p99),
        met(add_p99 <= ADDED_P99_US)
    );
    let _ = writeln!(
        s,
        "| (a) throughput through the gateway | {:.0} req/s, {} errors | {:.0} req/s sustained | {} |",
        r.gateway.throughput_rps,
        r.gateway.errors,
        r.rate,
        met(sustained)
    );
    relay_pass_through(s, r);
    if let Some(f) = &r.legacy_face {
        legacy_face::pass_through(s, f, r.rate);
    }
    match &r.resume_split {
        Some(split) => {
            let _ = writeln!(
                s,
                "| (b) one MRTR resume round inside the gateway (retry read → reply written, less the backend's part), p50 | {} | ≤ 200 µs | {} |",
                us(split.gateway.p50_us),
                met(split.gateway.p50_us <= ROUND_P50_US)
            );
        }
        None => {
            let resume_p50 = r.resume_gateway.p50_us - r.resume_direct.p50_us;
            let _ = writeln!(
                s,
                "| (b) one MRTR resume round, added beyond the backend's own time (client side; not split inside the gateway: {}), p50 | {} | ≤ 200 µs | {} |",
                r.resume_split_missing.as_deref().unwrap_or("not measured"),
                us(resume_p50),
                met(resume_p50 <= ROUND_P50_US)
            );
        }
    }
    relay_round(s, r);
    if let Some(f) = &r.legacy_face {
        legacy_face::elicitation(s, f);
    }
    for m in &r.memory {
        let (target, ok) = if stdio {
            ("≤ 16 KiB (set for HTTP backends)", "see FINDINGS.md")
        } else {
            ("≤ 16 KiB", met(m.per_call_kib <= PER_PARKED_KIB))
        };
        let _ = writeln!(
            s,
            "| (c) gateway memory per parked call, {} parked, answer stream held ({} backend) | {:.1} KiB | {target} | {ok} |",
            m.parked, r.backend, m.per_call_kib
        );
    }
    for m in &r.memory_released {
        let _ = writeln!(
            s,
            "| (c) the same, {} parked, stream let go (the backend numbers its events) | {:.1} KiB | ≤ 16 KiB | {} |",
            m.parked,
            m.per_call_kib,
            met(m.per_call_kib <= PER_PARKED_KIB)
        );
    }
    if stdio {
        let _ = writeln!(
            s,
            "| (c) at 1,000 and 10,000 parked calls | pending: needs the HTTP backend | ≤ 16 KiB | pending |"
        );
    }
    let l = &r.limit;
    let _ = writeln!(
        s,
        "| (d) parked calls held at once, memory bounded | {} held (`max_parked_total` = {}); {}/{} further calls refused with -31000 | 10,000 | {} |",
        l.held,
        l.max_parked_total,
        l.refused_beyond,
        l.attempted_beyond,
        if l.held >= PARKED_HELD {
            "yes"
        } else if stdio {
            "not with stdio (one child per parked call); pending HTTP backend"
        } else {
            "**no**"
        }
    );
}

/// (a) on the relay path, beside the legacy path's rows: the latency the gateway adds relaying to
/// a 2026-07-28 backend, and its CPU per call against the legacy path's.
fn relay_pass_through(s: &mut String, r: &Results) {
    let Some(m) = &r.modern else {
        return;
    };
    let add_p50 = m.gateway.latency.p50_us - m.direct.latency.p50_us;
    let add_p99 = m.gateway.latency.p99_us - m.direct.latency.p99_us;
    let _ = writeln!(
        s,
        "| (a) relay: the same call to a 2026-07-28 backend, latency added by the gateway, p50 | {} | ≤ 150 µs | {} |",
        us(add_p50),
        met(add_p50 <= ADDED_P50_US)
    );
    // Tails of two short runs side by side: the direct one can have the larger outlier.
    let (p99, p99_met) = if add_p99 < 0.0 {
        let text = format!(
            "none seen: the direct client's p99 ({}) was above the gateway's ({})",
            us(m.direct.latency.p99_us),
            us(m.gateway.latency.p99_us)
        );
        (text, "—".to_owned())
    } else {
        (us(add_p99), met(add_p99 <= ADDED_P99_US).to_owned())
    };
    let _ = writeln!(
        s,
        "| (a) relay: the same, p99 | {p99} | ≤ 1 ms | {p99_met} |"
    );
    let _ = writeln!(
        s,
        "| (a) gateway CPU per pass-through call (on a CPU): relayed to the 2026-07-28 backend / bridged to the legacy one | {} / {}; {:.0} req/s, {} errors relayed | none set | — |",
        us(m.gateway_cpu.gateway_run_us),
        us(r.gateway_cpu.gateway_run_us),
        m.gateway.throughput_rps,
        m.gateway.errors
    );
}

/// (b) on the relay path: one relayed MRTR round, added beyond the backend's own time.
fn relay_round(s: &mut String, r: &Results) {
    let Some(m) = &r.modern else {
        return;
    };
    let added = m.resume_gateway.p50_us - m.resume_direct.p50_us;
    let _ = writeln!(
        s,
        "| (b) relay: one relayed MRTR round (retry sent → reply received, less the same retry sent to the 2026-07-28 backend directly), p50 | {} | ≤ 200 µs | {} |",
        us(added),
        met(added <= ROUND_P50_US)
    );
}

/// (a) in detail: each side's own percentiles, the slices, and the sides measured beside it.
fn pass_through_detail(s: &mut String, r: &Results) {
    let _ = writeln!(s, "\n## Detail\n\n| (a) pass-through | value |\n|---|---|");
    if let Some(each) = slice_by_slice(&r.gateway, &r.direct) {
        let _ = writeln!(
            s,
            "| added p50 slice by slice (each gateway slice less the direct slice beside it), in the order run | {each} |"
        );
    }
    let _ = writeln!(
        s,
        "| through the gateway: p50 / p99 / max | {} / {} / {} |",
        us(r.gateway.latency.p50_us),
        us(r.gateway.latency.p99_us),
        us(r.gateway.latency.max_us)
    );
    let _ = writeln!(
        s,
        "| legacy client to the backend directly: p50 / p99 / max; throughput | {} / {} / {}; {:.0} req/s, {} errors |",
        us(r.direct.latency.p50_us),
        us(r.direct.latency.p99_us),
        us(r.direct.latency.max_us),
        r.direct.throughput_rps,
        r.direct.errors
    );
    if let Some(relay) = &r.relay {
        let _ = writeln!(
            s,
            "| the direct client through a byte relay (the floor for any proxy here): p50 / p99; added p50 / p99 | {} / {}; {} / {} |",
            us(relay.load.latency.p50_us),
            us(relay.load.latency.p99_us),
            us(relay.load.latency.p50_us - r.direct.latency.p50_us),
            us(relay.load.latency.p99_us - r.direct.latency.p99_us)
        );
    }
    if let Some(m) = &r.modern {
        let _ = writeln!(
            s,
            "| relay path: through the gateway p50 / p99; a 2026-07-28 client to the 2026-07-28 backend directly p50 / p99; added p50 slice by slice | {} / {}; {} / {}; {} |",
            us(m.gateway.latency.p50_us),
            us(m.gateway.latency.p99_us),
            us(m.direct.latency.p50_us),
            us(m.direct.latency.p99_us),
            slice_by_slice(&m.gateway, &m.direct).unwrap_or_else(|| "not recorded".into())
        );
    }
    if let Some(t) = &r.threads {
        let _ = writeln!(
            s,
            "| the gateway with `worker_threads = {}`, same alternation: p50 / p99; added p50 / p99 | {} / {}; {} / {} |",
            t.worker_threads,
            us(t.load.latency.p50_us),
            us(t.load.latency.p99_us),
            us(t.load.latency.p50_us - r.direct.latency.p50_us),
            us(t.load.latency.p99_us - r.direct.latency.p99_us)
        );
    }
    if let Some(f) = &r.legacy_face {
        legacy_face::pass_through_detail(s, f);
    }
}

/// (b) in detail: the round split inside the gateway, end to end, and the sides beside it.
fn resume_detail(s: &mut String, r: &Results) {
    let _ = writeln!(s, "\n| (b) resume round | value |\n|---|---|");
    if let Some(split) = &r.resume_split {
        let _ = writeln!(
            s,
            "| inside the gateway p99; retry read → reply written p50 / p99; the backend's part (answer written → result read) p50 / p99 | {}; {} / {}; {} / {} |",
            us(split.gateway.p99_us),
            us(split.total.p50_us),
            us(split.total.p99_us),
            us(split.backend.p50_us),
            us(split.backend.p99_us)
        );
    }
    let _ = writeln!(
        s,
        "| end to end as the client sees it: retry sent → reply received, less the backend directly, p50 / p99 | {} / {} |",
        us(r.resume_gateway.p50_us - r.resume_direct.p50_us),
        us(r.resume_gateway.p99_us - r.resume_direct.p99_us)
    );
    let _ = writeln!(
        s,
        "| retry sent → reply received via the gateway, p50 / p99 | {} / {} |",
        us(r.resume_gateway.p50_us),
        us(r.resume_gateway.p99_us)
    );
    let _ = writeln!(
        s,
        "| answer written → result read, backend directly, p50 / p99 | {} / {} |",
        us(r.resume_direct.p50_us),
        us(r.resume_direct.p99_us)
    );
    if let Some(relay) = &r.relay {
        let _ = writeln!(
            s,
            "| through a byte relay instead: answer written → result read, added p50 / p99 | {} / {} |",
            us(relay.resume.p50_us - r.resume_direct.p50_us),
            us(relay.resume.p99_us - r.resume_direct.p99_us)
        );
    }
    if let Some(t) = &r.threads {
        let inside = t
            .resume_split
            .as_ref()
            .map_or("not split".to_owned(), |sp| {
                format!("{} / {}", us(sp.gateway.p50_us), us(sp.gateway.p99_us))
            });
        let _ = writeln!(
            s,
            "| the gateway with `worker_threads = {}`: inside the gateway p50 / p99; end to end, added p50 / p99 | {inside}; {} / {} |",
            t.worker_threads,
            us(t.resume.p50_us - r.resume_direct.p50_us),
            us(t.resume.p99_us - r.resume_direct.p99_us)
        );
    }
    if let Some(f) = &r.legacy_face {
        legacy_face::elicitation_detail(s, f);
    }
}

/// CPU per call from schedstat: time on a CPU and time runnable but waiting for one.
fn cpu_detail(s: &mut String, r: &Results) {
    let pair = |run: f64, wait: f64| format!("{} / {}", us(run), us(wait));
    let _ = writeln!(
        s,
        "\n| CPU per call: on a CPU / waiting for one | (a) pass-through call | (b) MRTR call (first request + retry) |\n|---|---|---|"
    );
    let _ = writeln!(
        s,
        "| the gateway | {} | {} |",
        pair(r.gateway_cpu.gateway_run_us, r.gateway_cpu.gateway_wait_us),
        pair(
            r.resume_gateway_cpu.gateway_run_us,
            r.resume_gateway_cpu.gateway_wait_us
        )
    );
    if let Some(t) = &r.threads {
        let _ = writeln!(
            s,
            "| the gateway with `worker_threads = {}` | {} | {} |",
            t.worker_threads,
            pair(t.cpu.gateway_run_us, t.cpu.gateway_wait_us),
            pair(t.resume_cpu.gateway_run_us, t.resume_cpu.gateway_wait_us)
        );
    }
    if let Some(m) = &r.modern {
        let _ = writeln!(
            s,
            "| the gateway, relaying to the 2026-07-28 backend (call + retry in (b)) | {} | {} |",
            pair(m.gateway_cpu.gateway_run_us, m.gateway_cpu.gateway_wait_us),
            pair(
                m.resume_gateway_cpu.gateway_run_us,
                m.resume_gateway_cpu.gateway_wait_us
            )
        );
    }
    if let Some(f) = &r.legacy_face {
        legacy_face::cpu(s, f);
    }
    if let Some(relay) = &r.relay {
        let _ = writeln!(
            s,
            "| the byte relay | {} | |",
            pair(relay.cpu.gateway_run_us, relay.cpu.gateway_wait_us)
        );
    }
    let _ = writeln!(
        s,
        "| the backend, on a CPU: via the gateway / directly | {} / {} | |",
        us(r.gateway_cpu.backend_run_us),
        us(r.direct_cpu.backend_run_us)
    );
}

/// (c) and (d) in memory: RSS at each count, with the answer streams held and let go.
fn memory(s: &mut String, r: &Results, criterion: &Path) {
    let stdio = r.backend == "stdio";
    let _ = write!(
        s,
        "\n## Memory\n\nGateway RSS with no parked call (after warm-up): {} KiB",
        r.baseline_rss_kib
    );
    if !r.memory_released.is_empty() {
        let _ = write!(
            s,
            "; {} KiB on the second gateway, in front of a backend that numbers its events \
             (`legacy-server --event-ids`)",
            r.released_baseline_rss_kib
        );
    }
    let l = &r.limit;
    let _ = writeln!(
        s,
        ". At `max_parked_total` = {}: RSS {} KiB, and {} KiB after the {} refused calls.",
        l.max_parked_total, l.rss_at_limit_kib, l.rss_after_refusals_kib, l.refused_beyond
    );
    // Written by `benches/run.sh` next to criterion's directory.
    let conn_cost = criterion
        .parent()
        .and_then(|t| std::fs::read_to_string(t.join("conn-cost.txt")).ok());
    if let Some(line) = conn_cost
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        let _ = writeln!(
            s,
            "One upstream connection holding an open streamed response, the gateway's HTTP \
             client alone (`cargo bench --bench conn_cost -- 2000`): {line}."
        );
    }
    let _ = writeln!(
        s,
        "\n| parked | answer streams | gateway RSS | per parked call |{}\n|---|---|---|---|{}",
        if stdio {
            " backend children | children RSS (sum) |"
        } else {
            ""
        },
        if stdio { "---|---|" } else { "" }
    );
    for m in &r.memory {
        let children = if stdio {
            format!(
                " {} | {} KiB ({:.0} KiB each) |",
                m.children,
                m.children_rss_kib,
                m.children_rss_kib as f64 / m.children.max(1) as f64
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | held | {} KiB | {:.1} KiB |{children}",
            m.parked, m.gateway_rss_kib, m.per_call_kib
        );
    }
    for m in &r.memory_released {
        let _ = writeln!(
            s,
            "| {} | let go | {} KiB | {:.1} KiB |",
            m.parked, m.gateway_rss_kib, m.per_call_kib
        );
    }
}

/// Criterion's medians, one row per benchmark.
fn micro(s: &mut String, criterion: &Path) {
    let _ = writeln!(
        s,
        "\n## Micro-benchmarks (criterion, median)\n\n| benchmark | what | median |\n|---|---|---|"
    );
    for (name, what) in MICRO {
        let v = criterion_median_ns(criterion, name).map_or("not run".into(), duration);
        let _ = writeln!(s, "| `{name}` | {what} | {v} |");
    }
}

/// The machine, read when the report is written (the run and the report are one command).
fn machine(s: &mut String, r: &Results) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let vm = if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" hypervisor")) {
        format!(
            "; a virtual machine (the CPU reports the `hypervisor` flag{})",
            idle_driver()
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "\n## Machine\n\n- {}, {cpus} logical CPUs (`nproc`), {} of memory, shared by the load \
         client, the gateway and the backend{vm}\n- kernel {}; {}; release profile (thin LTO, one \
         codegen unit); niceness of the benchmark processes {}\n- load average (1, 5, 15 min) {} \
         at the start of the load run, {} at the end",
        proc_field("/proc/cpuinfo", "model name"),
        proc_field("/proc/meminfo", "MemTotal"),
        output("uname", &["-r"]),
        output("rustc", &["--version"]),
        niceness(),
        r.loadavg_before,
        r.loadavg_after,
    );
}

/// How the figures were taken, in brief; the whole method is in FINDINGS.md.
fn method(s: &mut String, r: &Results, command: &str) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let baseline = if r.backend == "stdio" {
        format!(
            "the fixture's stdio (one child, {} callers multiplexed by id)",
            r.connections
        )
    } else {
        format!(
            "the fixture's Streamable HTTP (one session, {} callers on pooled keep-alive connections)",
            r.connections
        )
    };
    let _ = writeln!(
        s,
        "\n## Method\n\n\
`{command}` builds the release binary, runs the criterion micro-benchmarks (`benches/micro.rs`), \
the connection cost (`benches/conn_cost.rs`) and the load harness (`benches/load/`), which writes \
this file. Everything runs on 127.0.0.1 and shares the {cpus} CPUs: the load client (tokio, two \
workers), the gateway (the release binary, generated config) and the fixture backend \
(`mrtr-gateway legacy-server`, one thread).\n\n\
- The sides (the legacy client directly, through a byte relay, through the gateway, through the \
gateway with one shard) take turns in {} slices, in reverse order every other slice; CPU comes \
from `/proc/PID/task/*/schedstat`.\n\
- (a) Open loop at {:.0} req/s over {} keep-alive connections, {} s warm-up per slice, {} s \
recorded per side, latency from the scheduled send (`hdrhistogram`). The baseline is a legacy \
2025-11-25 client on {baseline}; \"added\" is the gateway's percentile less the direct one.\n\
- (b) {} sequential `ask_form` rounds each way: retry sent → result received through the \
gateway, answer written → result read directly; then {} more while `perf` traces the gateway's \
`recvfrom`, `writev` and `sendto` to split out its own part.\n\
- (c) The gateway's `VmRSS` before and after parking `ask_form` calls up to each count, per call \
= the difference / parked; with the HTTP backend again on a second gateway in front of a fixture \
started with `--event-ids`, whose streams parked calls let go.\n\
- (d) With `max_parked_total` at the last count, {} more calls must be refused with -31000.\n{}{}\n\
The whole method, step by step: [benches/FINDINGS.md](benches/FINDINGS.md#how-the-harness-measures).",
        r.slices,
        r.rate,
        r.connections,
        r.warmup_s,
        r.duration_s,
        r.rounds,
        r.rounds,
        r.limit.attempted_beyond,
        relay_method(r),
        r.legacy_face
            .as_ref()
            .map(legacy_face::method)
            .unwrap_or_default(),
    );
}

/// The relay rows' method, when they were measured.
fn relay_method(r: &Results) -> &'static str {
    if r.modern.is_none() {
        return "";
    }
    "- Relay rows: the fixture again as a stateless 2026-07-28 server (`legacy-server --http \
ADDR --modern`), the gateway's second backend with `protocol = \"2026-07-28\"`; a 2026-07-28 \
client (the same one on both sides) calls it directly and through the gateway in two more turns \
of the same alternation, at the same rate and payload; (b) times the retry of its `ask_form` \
round, whose state the gateway seals and unwraps instead of parking the call.\n"
}

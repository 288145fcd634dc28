//! BENCHMARKS.md: the figures against their targets, criterion's micro-benchmark estimates, the
//! machine, the method, and what bounds each figure.

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

/// A target met, for the reading.
fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "missed" }
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

pub fn markdown(r: &Results, criterion: &Path, command: &str) -> String {
    let mut s = String::new();
    let (date, commit) = (&r.date, &r.commit);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = proc_field("/proc/cpuinfo", "model name");
    let mem = proc_field("/proc/meminfo", "MemTotal");
    let kernel = output("uname", &["-r"]);
    let rustc = output("rustc", &["--version"]);
    let nice = niceness();

    let add_p50 = r.gateway.latency.p50_us - r.direct.latency.p50_us;
    let add_p99 = r.gateway.latency.p99_us - r.direct.latency.p99_us;
    let sustained = r.gateway.throughput_rps >= 0.98 * r.rate && r.gateway.errors == 0;
    let resume_p50 = r.resume_gateway.p50_us - r.resume_direct.p50_us;
    let resume_p99 = r.resume_gateway.p99_us - r.resume_direct.p99_us;
    let stdio = r.backend == "stdio";
    let last = r.memory.last();

    let _ = writeln!(
        s,
        "# Benchmarks\n\nWritten by `{command}` on {date} at commit `{commit}`, backend kind \
         `{}`. Run it again to refresh this file; it takes five to ten minutes on this machine.\n",
        r.backend
    );
    let _ = writeln!(
        s,
        "## Machine\n\n- CPU: {cpu}, {cpus} logical CPUs (`nproc`), shared with the load client \
         and the backend\n- memory: {mem}\n- kernel {kernel}; {rustc}; release profile (thin LTO, \
         one codegen unit)\n- load average (1, 5, 15 min) {} at the start of the load run, {} at \
         the end: how busy the machine was (it may be shared with other work; the suite's own \
         build and micro-benchmarks, just before, count in the first figure)\n- niceness of the benchmark \
         processes: {nice}{vm}\n",
        r.loadavg_before,
        r.loadavg_after,
        vm = if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" hypervisor")) {
            format!(
                "\n- a virtual machine (the CPU reports the `hypervisor` flag{}): waking an \
                 idle virtual CPU goes through the hypervisor, so what one more process on the \
                 path costs depends on the host (the byte relay below measures it)",
                idle_driver()
            )
        } else {
            String::new()
        }
    );

    let _ = writeln!(s, "## Figures against targets\n");
    let _ = writeln!(s, "| figure | value | target | met? |\n|---|---|---|---|");
    let _ = writeln!(
        s,
        "| (a) pass-through tools/call, latency added by the gateway, p50 | {} | ≤ 150 µs | {} |",
        us(add_p50),
        met(add_p50 <= ADDED_P50_US)
    );
    let _ = writeln!(
        s,
        "| (a) pass-through tools/call, latency added by the gateway, p99 | {} | ≤ 1 ms | {} |",
        us(add_p99),
        met(add_p99 <= ADDED_P99_US)
    );
    if let Some(each) = slice_by_slice(&r.gateway, &r.direct) {
        let _ = writeln!(
            s,
            "| (a) added p50 slice by slice (each gateway slice less the direct slice beside it), in the order run | {each} | | |"
        );
    }
    let _ = writeln!(
        s,
        "| (a) throughput through the gateway at {:.0} req/s offered | {:.0} req/s, {} errors | {:.0} req/s sustained | {} |",
        r.rate,
        r.gateway.throughput_rps,
        r.gateway.errors,
        r.rate,
        met(sustained)
    );
    let _ = writeln!(
        s,
        "| (a) through the gateway: p50 / p99 / max | {} / {} / {} | | |",
        us(r.gateway.latency.p50_us),
        us(r.gateway.latency.p99_us),
        us(r.gateway.latency.max_us)
    );
    let _ = writeln!(
        s,
        "| (a) legacy client to the backend directly: p50 / p99 / max, throughput | {} / {} / {}, {:.0} req/s, {} errors | | |",
        us(r.direct.latency.p50_us),
        us(r.direct.latency.p99_us),
        us(r.direct.latency.max_us),
        r.direct.throughput_rps,
        r.direct.errors
    );
    if let Some(relay) = &r.relay {
        let _ = writeln!(
            s,
            "| (a) the direct client through a byte relay (the floor for any proxy here): p50 / p99, added p50 / p99 | {} / {}, {} / {} | | |",
            us(relay.load.latency.p50_us),
            us(relay.load.latency.p99_us),
            us(relay.load.latency.p50_us - r.direct.latency.p50_us),
            us(relay.load.latency.p99_us - r.direct.latency.p99_us)
        );
    }
    if let Some(t) = &r.threads {
        let _ = writeln!(
            s,
            "| (a) the gateway with `worker_threads = {}`, same alternation: p50 / p99, added p50 / p99 | {} / {}, {} / {} | | |",
            t.worker_threads,
            us(t.load.latency.p50_us),
            us(t.load.latency.p99_us),
            us(t.load.latency.p50_us - r.direct.latency.p50_us),
            us(t.load.latency.p99_us - r.direct.latency.p99_us)
        );
    }
    match &r.resume_split {
        Some(split) => {
            let _ = writeln!(
                s,
                "| (b) one MRTR resume round inside the gateway: retry read → reply written, less the backend's part, p50 | {} | ≤ 200 µs | {} |",
                us(split.gateway.p50_us),
                met(split.gateway.p50_us <= ROUND_P50_US)
            );
            let _ = writeln!(
                s,
                "| (b) the same, p99; retry read → reply written p50 / p99; the backend's part (answer written → result read) p50 / p99 | {}; {} / {}; {} / {} | | |",
                us(split.gateway.p99_us),
                us(split.total.p50_us),
                us(split.total.p99_us),
                us(split.backend.p50_us),
                us(split.backend.p99_us)
            );
            let _ = writeln!(
                s,
                "| (b) end to end as the client sees it: retry sent → reply received, less the backend directly, p50 / p99 | {} / {} | | |",
                us(resume_p50),
                us(resume_p99)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| (b) one MRTR resume round, added beyond the backend's own time (client side; not split inside the gateway: {}), p50 | {} | ≤ 200 µs | {} |",
                r.resume_split_missing.as_deref().unwrap_or("not measured"),
                us(resume_p50),
                met(resume_p50 <= ROUND_P50_US)
            );
            let _ = writeln!(s, "| (b) the same, p99 | {} | | |", us(resume_p99));
        }
    }
    let _ = writeln!(
        s,
        "| (b) retry sent → reply received via the gateway, p50 / p99 | {} / {} | | |",
        us(r.resume_gateway.p50_us),
        us(r.resume_gateway.p99_us)
    );
    let _ = writeln!(
        s,
        "| (b) answer written → result read, backend directly, p50 / p99 | {} / {} | | |",
        us(r.resume_direct.p50_us),
        us(r.resume_direct.p99_us)
    );
    if let Some(relay) = &r.relay {
        let _ = writeln!(
            s,
            "| (b) end to end through a byte relay instead: answer written → result read, added p50 / p99 | {} / {} | | |",
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
            "| (b) the gateway with `worker_threads = {}`: inside the gateway, its own part p50 / p99; end to end, added p50 / p99 | {inside}; {} / {} | | |",
            t.worker_threads,
            us(t.resume.p50_us - r.resume_direct.p50_us),
            us(t.resume.p99_us - r.resume_direct.p99_us)
        );
    }
    let _ = writeln!(
        s,
        "| (a) CPU per pass-through call: gateway on CPU / waiting for a CPU | {} / {} | | |",
        us(r.gateway_cpu.gateway_run_us),
        us(r.gateway_cpu.gateway_wait_us)
    );
    let _ = writeln!(
        s,
        "| (a) CPU per call of the backend: via the gateway / directly | {} / {} | | |",
        us(r.gateway_cpu.backend_run_us),
        us(r.direct_cpu.backend_run_us)
    );
    let _ = writeln!(
        s,
        "| (b) CPU per MRTR call (first request + retry): gateway on CPU / waiting for a CPU | {} / {} | | |",
        us(r.resume_gateway_cpu.gateway_run_us),
        us(r.resume_gateway_cpu.gateway_wait_us)
    );
    if let Some(relay) = &r.relay {
        let _ = writeln!(
            s,
            "| (a) CPU per call of the byte relay: on CPU / waiting for a CPU | {} / {} | | |",
            us(relay.cpu.gateway_run_us),
            us(relay.cpu.gateway_wait_us)
        );
    }
    if let Some(t) = &r.threads {
        let _ = writeln!(
            s,
            "| CPU per call of the gateway with `worker_threads = {}`: (a) on CPU / waiting; (b) on CPU / waiting | {} / {}; {} / {} | | |",
            t.worker_threads,
            us(t.cpu.gateway_run_us),
            us(t.cpu.gateway_wait_us),
            us(t.resume_cpu.gateway_run_us),
            us(t.resume_cpu.gateway_wait_us)
        );
    }
    for m in &r.memory {
        let (target, ok) = if stdio {
            ("≤ 16 KiB (set for HTTP backends)", "see reading")
        } else {
            ("≤ 16 KiB", met(m.per_call_kib <= PER_PARKED_KIB))
        };
        let _ = writeln!(
            s,
            "| (c) gateway memory per parked call at {} parked ({} backend; gateway RSS only) | {:.1} KiB | {target} | {ok} |",
            m.parked, r.backend, m.per_call_kib
        );
    }
    for m in &r.memory_released {
        let _ = writeln!(
            s,
            "| (c) the same, backend numbers its events (streams let go while parked) | {:.1} KiB at {} parked | ≤ 16 KiB | {} |",
            m.per_call_kib,
            m.parked,
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
        "| (d) parked calls held at once, memory bounded | {} held (`max_parked_total` = {}); {}/{} further calls refused with -31000; RSS {} KiB at the limit, {} KiB after the refusals | 10,000 | {} |",
        l.held,
        l.max_parked_total,
        l.refused_beyond,
        l.attempted_beyond,
        l.rss_at_limit_kib,
        l.rss_after_refusals_kib,
        if l.held >= PARKED_HELD {
            "yes"
        } else if stdio {
            "not with stdio (one child per parked call); pending HTTP backend"
        } else {
            "**no**"
        }
    );

    let _ = writeln!(
        s,
        "\n## Micro-benchmarks (criterion, median)\n\n| benchmark | what | median |\n|---|---|---|"
    );
    for (name, what) in MICRO {
        let v = criterion_median_ns(criterion, name).map_or("not run".into(), duration);
        let _ = writeln!(s, "| `{name}` | {what} | {v} |");
    }

    let _ = writeln!(
        s,
        "\n## Memory detail\n\nGateway RSS with no parked call (after warm-up): {} KiB.\n",
        r.baseline_rss_kib
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
client alone (`cargo bench --bench conn_cost -- 2000`, its local test server in the same \
process): {line}.\n"
        );
    }
    let _ = writeln!(
        s,
        "| parked | gateway RSS | per parked call | backend children | children RSS (sum) |\n|---|---|---|---|---|"
    );
    for m in &r.memory {
        let _ = writeln!(
            s,
            "| {} | {} KiB | {:.1} KiB | {} | {} KiB ({:.0} KiB each) |",
            m.parked,
            m.gateway_rss_kib,
            m.per_call_kib,
            m.children,
            m.children_rss_kib,
            m.children_rss_kib as f64 / m.children.max(1) as f64
        );
    }
    if !r.memory_released.is_empty() {
        let _ = writeln!(
            s,
            "\nWith a backend that numbers its events (`legacy-server --event-ids`), on a second \
gateway (RSS {} KiB before parking):\n\n| parked | gateway RSS | per parked call |\n|---|---|---|",
            r.released_baseline_rss_kib
        );
        for m in &r.memory_released {
            let _ = writeln!(
                s,
                "| {} | {} KiB | {:.1} KiB |",
                m.parked, m.gateway_rss_kib, m.per_call_kib
            );
        }
    }

    let _ = writeln!(
        s,
        "\n## Method\n\n\
- One command: `{command}`. It builds the release binary, runs the criterion micro-benchmarks \
(`cargo bench --bench micro`, short warm-up and measurement), the connection cost \
(`cargo bench --bench conn_cost`) and the load harness (`cargo bench --bench load`, \
`benches/load/`), which writes this file.\n\
- Everything runs on 127.0.0.1 on this machine: the load client (a tokio runtime with two \
workers), the gateway (release binary started as a child with a generated config, address read \
from its `listening on` line) and the fixture backend (`mrtr-gateway legacy-server`, on one thread, as the SDK servers it \
stands for serve). They share \
the {cpus} CPUs, so every figure includes contention between them.\n\
- The baseline and the gateway are measured in the same run, alternating in {slices} slices \
each for (a) and for (b), so both sides see the same machine (it is shared, and the load of \
others comes and goes). The sides take their turns in reverse order every other slice (direct, \
relay, gateway, then the other way round), so a load that rises or falls during the run weighs \
on each side alike. CPU figures come from `/proc/PID/task/*/schedstat` of the gateway and of \
the backend processes over each side's slices: time on a CPU, and time runnable but waiting for \
one.\n\
- (a) Open loop at {rate:.0} req/s in total over {conns} HTTP/1.1 keep-alive connections, each \
with its own fixed schedule; {warm} s warm-up before each slice, {dur} s recorded per side in \
all. Latency is recorded \
with `hdrhistogram` from the send, or from the scheduled time when the connection was still busy \
with the previous request (queueing counts; the timer's 1 ms granularity does not). The baseline \
is a legacy 2025-11-25 client on {baseline}, at the same rate. The gateway serves the same tool \
from clients that declared no input capability, so the calls share one backend session, as the \
direct client's do. \"Added\" is the gateway's percentile \
minus the direct percentile.\n\
- (b) {rounds} sequential rounds each way, in alternating chunks. Through the gateway: call `ask_form` (parks, answers \
with an InputRequiredResult), then time from sending the retry with `inputResponses` and \
`requestState` to receiving the complete result; this covers the HTTP exchange, opening the \
state, writing the answer upstream, the backend finishing the tool, and the reply. Directly: call \
`ask_form`, receive the `elicitation/create` push, time from writing the answer to reading the \
tool's result: the backend's own time for a pushed request's answer. \"Added\" is the \
difference of the two percentiles. Then {rounds} more rounds through the gateway while `perf` \
traces its `recvfrom`, `writev` and `sendto` calls (`benches/load/split.rs`; needs `perf` and permission to \
trace): per retry, from reading it off the client's connection to writing the answer upstream, \
plus from reading the tool's result to writing the reply: the gateway's own part of the round, \
as the target defines it (retry received to reply written, beyond the backend's own time, which \
is the stretch from answer written to result read). It leaves out the client's HTTP exchange \
with the gateway, which the end-to-end figure also counts.\n\
- Byte relay (HTTP backend): a process that only copies bytes between a client's connection and \
the fixture (`benches/load/relay.rs`, on one thread: the leanest relay, with no hand-over between threads), in the gateway's \
place. The direct client's (a) and (b) are run through it too, in the same alternation: it shows \
what one more process on the path costs on this machine before any proxy does any work.\n\
- (c) After (a) and (b), with the gateway idle (`pool_max` and `max_parked_*` raised, \
anonymous principal), its `VmRSS` from `/proc/PID/status` is read, `ask_form` calls are parked \
over 32 connections up to each count, and after 0.8 s to settle RSS is read again: per call = \
(RSS − RSS before) / parked. Only the gateway process is counted; with stdio backends each \
parked call also holds one child process, listed separately. With the HTTP backend, (c) is then \
repeated on a second gateway (20 MRTR rounds as warm-up) in front of a fixture started with \
`--event-ids`, whose streams can be resumed, so parked calls let them go.\n\
- (d) With `max_parked_total` at the last count, {beyond} more calls are attempted; they must be \
refused (-31000); RSS is read again after them.\n",
        rate = r.rate,
        conns = r.connections,
        warm = r.warmup_s,
        dur = r.duration_s,
        rounds = r.rounds,
        slices = r.slices,
        baseline = if stdio {
            format!(
                "the fixture's stdio (one child, `initialize`d once, {} callers multiplexed by id)",
                r.connections
            )
        } else {
            format!(
                "the fixture's Streamable HTTP (one session, {} callers on pooled keep-alive connections)",
                r.connections
            )
        },
        beyond = r.limit.attempted_beyond,
    );

    let _ = writeln!(
        s,
        "## Reading\n\nWhat bounds each figure, in this run's numbers. The profiles behind these \
readings, and each change that moved a figure with what it moved, are in \
[benches/FINDINGS.md](benches/FINDINGS.md).\n"
    );
    let g = &r.gateway_cpu;
    let _ = write!(
        s,
        "- (a) The gateway added {} at p50 (target 150 µs: {}) and {} at p99 (target 1 ms: {}). \
Its part of a call is reading and checking the client's request (`jsonrpc::parse` is {} for a \
small body), {}, and writing the reply. Per call it spent {} on a CPU, and its threads {} runnable \
but waiting for one; the backend spent {} per call (directly: {}).{}{}",
        us(add_p50),
        verdict(add_p50 <= ADDED_P50_US),
        us(add_p99),
        verdict(add_p99 <= ADDED_P99_US),
        criterion_median_ns(criterion, "jsonrpc_parse/tools_call_small")
            .map_or("(not measured)".into(), duration),
        if stdio {
            "one exchange with a backend child over its stdin and stdout, through the task of \
the child's session"
        } else {
            "one HTTP exchange with the backend over a pooled keep-alive connection, all on the \
shard thread that serves the client's connection"
        },
        us(g.gateway_run_us),
        us(g.gateway_wait_us),
        us(g.backend_run_us),
        us(r.direct_cpu.backend_run_us),
        r.relay.as_ref().map_or(String::new(), |rl| format!(
            " A byte relay in the gateway's place, copying bytes and doing nothing else, added {} \
at p50 and {} at p99, with {} of CPU per call and {} waiting for one: that much is one more \
process on the path on this machine, before any work. Beyond it the gateway added {} at p50.",
            us(rl.load.latency.p50_us - r.direct.latency.p50_us),
            us(rl.load.latency.p99_us - r.direct.latency.p99_us),
            us(rl.cpu.gateway_run_us),
            us(rl.cpu.gateway_wait_us),
            us(r.gateway.latency.p50_us - rl.load.latency.p50_us)
        )),
        if r.gateway.latency.p99_us < r.direct.latency.p99_us {
            " In this run the direct client's p99 was the higher one (its slices met more of the \
machine's stalls), so the p99 the gateway adds comes out negative: the tails of one run say more \
about the machine than about either side."
        } else {
            ""
        },
    );
    if stdio {
        let _ = writeln!(
            s,
            " What bounds it: every hop on the way (the client's connection to the gateway, the \
session's task, the child's pipes, and back) waits for one of two virtual CPUs shared by the \
load client, the gateway, the child and other work, and the child itself spent more CPU per call \
through the gateway than for the direct client (above). This run has no byte relay to tell the \
gateway's own part from the extra hop; `benches/run.sh`, with the HTTP backend, has one."
        );
    } else {
        let _ = writeln!(
            s,
            " What bounds it: two more wake-ups of a process per call (the request arrives at a \
sleeping shard, and so does the backend's answer), the gateway's CPU time, and the wait for a \
CPU, on two virtual CPUs shared by the load client, the gateway, the backend and other work. \
About half of the gateway's CPU time is in the kernel (context switches and wake-ups, then \
loopback TCP; it makes the same system calls per call as the relay), and nearly all of its own \
instructions fall on the call's path, spread over hyper's server, `serde_json`, its HTTP client \
and its own code, no one part large (profiled on two hosts, not rerun here: see FINDINGS.md). The p99 is the \
wait for a CPU at its worst: it moves with the machine's load (load average above) more than \
with the gateway."
        );
    }
    if let Some(t) = &r.threads {
        let _ = writeln!(
            s,
            "- (a) and (b) with `worker_threads = {n}`: a second gateway, the same but with one \
shard, took its turn in the same alternation. Its CPU per pass-through call was {} (against {} \
with the default), and its threads waited {} for a CPU (against {}): one shard's thread, busier, \
is more often awake already when a request arrives. It added {} at p50 to a pass-through \
call (the default: {}){}. Inside the gateway its resume round took {} at p50 (the default: {}).",
            us(t.cpu.gateway_run_us),
            us(g.gateway_run_us),
            us(t.cpu.gateway_wait_us),
            us(g.gateway_wait_us),
            us(t.load.latency.p50_us - r.direct.latency.p50_us),
            us(add_p50),
            if t.load.latency.p50_us - r.direct.latency.p50_us > add_p50 + 10.0 {
                ": requests that arrive together wait for the one thread in turn"
            } else {
                ""
            },
            t.resume_split
                .as_ref()
                .map_or("(not split)".to_owned(), |sp| us(sp.gateway.p50_us)),
            r.resume_split
                .as_ref()
                .map_or("(not split)".to_owned(), |sp| us(sp.gateway.p50_us)),
            n = t.worker_threads,
        );
    }
    let open =
        criterion_median_ns(criterion, "seal/open").map_or("(not measured)".into(), duration);
    let round_cpu = criterion_median_ns(criterion, "input_required/translate_seal_build")
        .map_or("(not measured)".into(), duration);
    let inside = match &r.resume_split {
        Some(sp) => format!(
            "Inside the gateway a resume round took {} of its own at p50 ({} from reading the \
retry to writing the answer upstream, {} from reading the tool's result to writing the reply), \
against 200 µs: {}. ",
            us(sp.gateway.p50_us),
            us(sp.inbound.p50_us),
            us(sp.outbound.p50_us),
            verdict(sp.gateway.p50_us <= ROUND_P50_US)
        ),
        None => format!(
            "The round was not split inside the gateway in this run ({}), so its target is read \
end to end, beyond the backend's own time: {} at p50, against 200 µs: {}. ",
            r.resume_split_missing.as_deref().unwrap_or("not measured"),
            us(resume_p50),
            verdict(resume_p50 <= ROUND_P50_US)
        ),
    };
    let relay = match &r.relay {
        Some(rl) => format!(
            "; a byte relay in the gateway's place adds {} of that",
            us(rl.resume.p50_us - r.resume_direct.p50_us)
        ),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "- (b) {inside}The round reads and checks the retry, opens the state ({open}), hands the \
answers to the parked call's task, which {}, and hands the result, when it arrives, to the \
client's connection. Its JSON and crypto work is a few microseconds (one whole round of \
translate, seal, build and serialize is {round_cpu} in criterion, which runs hot); what bounds \
it is the rest: hand-overs between tasks, waking a shard thread that has gone to sleep between \
sequential rounds, on cold caches, and the system calls themselves. The gateway's CPU per MRTR \
call (both requests) was {}, and its threads waited {} for a CPU. End to end the client sees {} \
more than the direct client at p50, which also counts the client's own HTTP exchange with the \
gateway{relay}.",
        if stdio {
            "writes them to the backend child's stdin through its session's task"
        } else {
            "POSTs them upstream over a pooled keep-alive connection (the tool's result comes on \
the call's still-open POST stream)"
        },
        us(r.resume_gateway_cpu.gateway_run_us),
        us(r.resume_gateway_cpu.gateway_wait_us),
        us(resume_p50),
    );
    if let Some(m) = last {
        if stdio {
            let _ = writeln!(
                s,
                "- (c) With stdio backends a parked call holds a whole upstream session: the child \
process, its three pipes, the session task with its 8 KiB read buffers (stdout frames and the \
stderr reader) and routing state, the call's task and channels, and the park entry. The \
gateway's share was {:.1} KiB per call at {} parked; each child also uses about {:.0} KiB of its \
own (its own process, not counted). The 16 KiB target is set for HTTP backends, where a parked \
call holds no process (`benches/run.sh`, which uses the HTTP fixture). There were {} children for \
{} parked calls: the rest are idle sessions, most of them started at once by the first \
concurrent pass-through calls of (a) (the pool starts a session for each caller that finds none \
free, up to `pool_max`, rather than letting them share the one being started).",
                m.per_call_kib,
                m.parked,
                m.children_rss_kib as f64 / m.children.max(1) as f64,
                m.children,
                m.parked
            );
        } else {
            let _ = writeln!(
                s,
                "- (c) Holding its answer stream, a parked call cost the gateway {:.1} KiB at {} \
parked, against 16 KiB: {}. It holds an upstream session but no process: the session task and \
its routing state, the Streamable HTTP transport, the call's task with its channels, the pending \
input requests, the park entry, and the call's still-open POST event stream with its connection \
(the gateway's own HTTP/1.1 client, which reads the stream into a buffer on the call's stack; \
\"Memory detail\" measures one such connection). The stream and its connection are the \
largest single piece: when the backend numbers its events (SSE `id:`), the gateway lets the \
stream go as it parks the call and picks it up with `Last-Event-ID` on the retry, and a parked \
call cost {}; what is left then is spread over three tokio channels, the session's and the \
call's tasks, and the call's own state. Without `--no-standalone-stream` each \
session also keeps its standalone GET stream: a second connection per parked call.",
                m.per_call_kib,
                m.parked,
                verdict(m.per_call_kib <= PER_PARKED_KIB),
                r.memory_released.last().map_or_else(
                    || "(not measured in this run)".to_owned(),
                    |l| format!("{:.1} KiB at {} parked", l.per_call_kib, l.parked)
                ),
            );
        }
    }
    let _ = writeln!(
        s,
        "- (d) Parked calls are bounded by `max_parked_total` (and per principal by \
`max_parked_per_principal`). A held interactive call is checked before it takes a backend \
session, and again when it parks; a refused call gets -31000. Here the {} refused calls moved \
the gateway's RSS by {:+} KiB ({:+.1} KiB each: allocator slack, not held parks). \
{bound}",
        l.refused_beyond,
        l.rss_after_refusals_kib as i64 - l.rss_at_limit_kib as i64,
        (l.rss_after_refusals_kib as f64 - l.rss_at_limit_kib as f64)
            / l.refused_beyond.max(1) as f64,
        bound = if stdio {
            "With stdio, `pool_max` children bound it first: 10,000 parked calls would be 10,000 \
processes; `benches/run.sh` measures 10,000 on the HTTP fixture."
        } else {
            "Memory per call stayed flat from the first count to the last, so it is bounded by \
the count. The ceiling on this machine is descriptors: the container allows 20,000 open files per \
process, and each parked call holds one upstream connection (two with the standalone GET \
stream), so a gateway holds about 19,000 parked calls here (about 9,500 with the GET stream). \
A backend that numbers its events lifts that ceiling: its parked calls hold no connection."
        },
    );
    s
}

//! BENCHMARKS.md: the figures against their targets, criterion's micro-benchmark estimates, the
//! machine, the method, and what bounds each figure.

use crate::Results;
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
         the end: the machine is shared, and other work competed for the CPUs throughout\n- \
         niceness of the benchmark processes: {nice}\n",
        r.loadavg_before, r.loadavg_after
    );

    let _ = writeln!(s, "## Figures against targets\n");
    let _ = writeln!(s, "| figure | value | target | met? |\n|---|---|---|---|");
    let _ = writeln!(
        s,
        "| (a) pass-through tools/call, latency added by the gateway, p50 | {} | ≤ 150 µs | {} |",
        us(add_p50),
        met(add_p50 <= 150.0)
    );
    let _ = writeln!(
        s,
        "| (a) pass-through tools/call, latency added by the gateway, p99 | {} | ≤ 1 ms | {} |",
        us(add_p99),
        met(add_p99 <= 1000.0)
    );
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
                met(split.gateway.p50_us <= 200.0)
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
                met(resume_p50 <= 200.0)
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
            ("≤ 16 KiB", met(m.per_call_kib <= 16.0))
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
            met(m.per_call_kib <= 16.0)
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
        "| (d) parked calls held at once, memory bounded | {} held (`max_parked_total` = {}); {}/{} further calls refused with -32000; RSS {} KiB at the limit, {} KiB after the refusals | 10,000 | {} |",
        l.held,
        l.max_parked_total,
        l.refused_beyond,
        l.attempted_beyond,
        l.rss_at_limit_kib,
        l.rss_after_refusals_kib,
        if l.held >= 10_000 {
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
others comes and goes). CPU figures come from `/proc/PID/task/*/schedstat` of the gateway and of \
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
as the issue defines it (retry received to reply written, beyond the backend's own time, which \
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
refused (-32000); RSS is read again after them.\n",
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

    let _ = writeln!(s, "## Reading\n");
    let g = &r.gateway_cpu;
    let _ = writeln!(
        s,
        "- (a) Per pass-through call the gateway spent {} on a CPU, and its threads spent {} \
runnable but waiting for one; the backend spent {} per call (directly: {}). On a Streamable HTTP \
backend the call's own task POSTs the request and reads the answer (no session task on the way), \
so the gateway's part is: read and check the client's request (`jsonrpc::parse` is {} for a \
small body), one HTTP exchange with the backend over a pooled keep-alive connection, which the \
call's task writes and reads itself (the gateway's own HTTP/1.1 client, `src/upstream/h1.rs`; \
hyper's client, used before, ran each connection as a task of its own, one more hand-over each \
way), and write the reply. \
All of it happens on one thread: the gateway serves client connections on shards \
(`src/shard.rs`), one single-threaded runtime per worker thread, and a connection stays on its \
shard with its requests' work and the upstream connections they use (each shard keeps its own \
keep-alive pool). Its socket, too, moves to the shard's reactor when the shard takes it: left \
with the accepting runtime's, every request's readiness woke the main thread, which woke the \
shard (1,216 context switches of the main thread over 1,000 sequential calls, now none; \
`requests_on_a_shard_do_not_wake_the_main_thread` checks it). Over five alternating pairs of \
short runs this took the gateway's CPU per call from a mean of 176 to 168 µs and its wait for a \
CPU from 120 to 105 µs; what it adds at p50 (a mean of 199 against 192 µs, single runs from 167 \
to 232 µs) did not move beyond the noise. On tokio's work-stealing runtime, which the gateway used before, most of \
those hand-overs woke the other worker thread, often to find nothing to do. In four alternating \
pairs of short harness runs (`--duration 6 --slices 3 --rounds 300 --park 200`, the build before \
against the build with shards, one run at a time) what the gateway adds at p50 went from between \
184 and 233 µs to between 145 and 168 µs, lower in all four pairs; the byte relay, measured in the same runs, \
added 86 to 121 µs against 68 to 100 µs, so beyond the relay the gateway went from between \
85 and 112 µs to between 56 and 78 µs. Its CPU per call did not move beyond the noise (127 to 152 µs against 133 to \
167 µs). Client connections are `Inline` tasks (`src/wake.rs`): a task that wakes itself while \
it runs (the halves of a hyper connection hand the request, its body and the reply to each other \
that way) is polled again at once instead of going back through the runtime's queue; on the \
work-stealing runtime, in nine alternating pairs, that took the gateway's CPU per pass-through \
call from a median of 164 µs to 144 µs and what it adds at p50 from 221 µs to 185 µs. Each \
request's work is a plain task (see (b)). Running each request's \
work in the task of its client's connection until its first reply moved neither that figure nor \
the CPU per call beyond the noise in four alternating rounds, and was not kept. \
A `perf` profile of the gateway at 2,000 req/s puts a little under half of its CPU (44%) in the kernel: context \
switches and wake-ups first (a shard that has gone to sleep is woken when a request arrives from \
the client and again when the backend answers), then loopback TCP; the rest is spread thin \
over hyper's server, `serde_json` and the gateway's own code, with \
`malloc`, `free` and `memmove` on top at about 14% of the gateway's samples. A pass-through call \
makes 157 heap allocations in the gateway (`heaptrack`, 1,100 sequential calls), most of them \
the `serde_json` trees of the request and of the backend's answer; moving results and params \
into the messages built from them instead of copying them, and hashing the request's digest as \
it is written, took that from 186, with no effect on latency beyond the noise in three \
alternating pairs. Counted in instructions (`valgrind --tool=callgrind`, 1,000 sequential calls \
on this fixture, a count that does not depend on the machine's load), a pass-through call took \
164.8k instructions in the gateway's own process; hashing the request (for the requestState \
it may never need) and writing its params out as text only when the call first asks for \
input, and hashing the anonymous principal once, took that to 150.6k; closing a finished \
call's answer stream in place when it has already ended, instead of in a task of its own with \
a timer, to 145.0k; building the params sent upstream for each attempt to send them instead \
of copying them for it, to 144.1k. In two alternating pairs of short runs, before and after \
the first three of these, the CPU per call went from 106 and 116 µs to 106 and 105 µs, within \
the noise of such runs. Measured again later at 144.9k, it went to 141.1k by giving a routing \
channel only to calls their session can route to, and to 121.3k with the gateway's own HTTP/1.1 \
client in place of hyper's (no connection task to hand the request and the answer to). \
Counted again with another client (`echo` with arguments, 1,000 calls after 50 of warm-up), \
160.4k; reading into the stack without zeroing a buffer first, and giving a response head a \
buffer of what arrived instead of one of its limit (4 KiB, which took `malloc` off its fast \
path), took it to 144.9k. The binary allocates with mimalloc instead of glibc's allocator, \
which spent about a quarter of those instructions: that took them to 119.4k, and in three \
alternating pairs of short runs (`--duration 6 --slices 3 --rounds 300 --park 1000,10000`) the \
CPU per call from 142.6, 131.1 and 141.3 µs to 125.5, 126.1 and 137.5 µs, lower in each pair, \
and what the gateway adds at p50 from 177.5, 166.8 and 169.5 µs to 146.4, 173.6 and 163.8 µs; \
a parked call holds about 0.6 KiB more with it (13.9 against 13.3 KiB at 10,000 parked). \
Counted on this harness's own kind of call (a client that declares no input capability, `echo` \
with arguments), 109.3k; writing text logs without terminal colour codes when they do not go to \
a terminal (the harness's gateway logs to a pipe, and each request's span had its fields \
coloured as it was made), copying into the upstream params only what the backend gets, checking \
the nesting limit on the parsed tree instead of scanning every byte first, and making the \
session's header names once took it to 100.5k, with no change in CPU per call or added p50 \
beyond the noise of two alternating pairs of short runs; passing a backend's result on as the \
text it wrote (read in one pass with the result kept raw, its nesting still checked, \
`resultType` set on the text, the reply written around it) instead of building a tree of it \
and writing that out again, to 91.1k; in four alternating pairs of short runs that lowered the \
CPU per call in three (a mean of 127.8 against 134.0 µs), while what the gateway adds at p50 \
did not move beyond the noise (means of 158.1 and 155.6 µs); formatting the fields of text \
logs that go to no terminal without the colour wrappers the default formatter puts around each \
field name (the same text), to 90.1k; writing each upstream request straight from its parts \
(no request header map built, filled and dropped), looking the client's headers up by names \
made once, and parsing no response head before the first read, to 86.6k; keeping from a \
backend's response head only the headers the gateway reads, writing a request's own headers \
from a short list and the request itself as text from its parts, checking a message's UTF-8 \
once as a whole, and gathering text log fields on the stack, to 78.2k. A timer due within a \
second on each shard keeps tokio from waking its own driver (an eventfd write and an empty \
`epoll_wait`) each time a connection's header-read deadline is set after a reply: two system \
calls fewer per request on an idle shard. A finished call's task yields once after handing its \
reply over, so the client's connection writes the reply before the call's own end (its session \
given back, its state dropped, its span closed) runs; in three alternating pairs of short runs \
what the gateway adds beyond the byte relay at p50 went from a mean of 38.1 to 32.7 µs. \
Counted again at 78.1k, finding the line ends of a backend's events with `memchr` instead of \
looking at each byte, and allocating with mimalloc 2 instead of 3 (3 serves Rust's aligned \
requests of sizes that are not powers of two by over-allocating into a larger size class, so \
that their own free lists stay empty: about 15 slow allocations per call), took it to 76.6k; \
in three alternating pairs of short runs mimalloc 2 against 3 left what the gateway adds at p50 \
within the noise (128, 149 and 127 µs against 148, 119 and 146 µs) and its p99 no worse, and a \
parked call holds the same or less (13.6 against 14.5 KiB at 1,000 parked, 13.7 at 10,000). \
The fixture serves from one thread, as the Python and TypeScript SDK servers it stands for do; \
on tokio's work-stealing runtime it used before, each request also woke an idle worker, which \
took CPU time from the gateway and the client on the same two CPUs: in three alternating pairs \
of short runs the fixture's CPU per call went from 102 to 106 µs to 71 to 75 µs, the gateway's \
wait for a CPU per call from 82 to 88 µs to 66 to 69 µs, and what the gateway adds at p50 from \
171, 169 and 150 µs to 143, 147 and 153 µs (the direct client's own p50 fell by 15 to 28 µs). \
The byte relay runs on one thread too: on two work-stealing workers, as before, its floor was \
15 to 30 µs higher at p50 (86, 104 and 105 µs against 73, 71 and 90 µs in three alternating \
pairs), which made the figure beyond it look smaller than it is. Split at its system calls \
(callgrind dumping its counts before each `epoll_wait`, `send` and `writev`, at 78.9k), a \
call's instructions fall 41.8k between the client's request becoming readable and the request \
going upstream, 27.5k between the backend's answer becoming readable and the reply, and 7.7k \
after the two writes: nearly all of the gateway's work is on the call's path, so only doing \
less of it shortens the call. Where \
the time goes on the path itself: \
the gateway's system calls traced at 2,000 req/s (`perf record` of `recvfrom`, `sendto` and \
`writev`, 7,360 calls, on the build before the result pass-through) put 31 µs at p50 (42 µs at p90) between reading a request and writing \
it upstream, and 24 µs (37 µs) between reading the backend's answer and writing the reply, \
about 55 µs of the gateway's own work in each call, much as the figure beyond the byte relay \
below; the fixture wrote two thirds of its answers in two writes (the head, then the event), \
which wakes the gateway, as the direct client, once more. \
{} The added latency is those two extra wake-ups on a virtual machine plus the gateway's CPU \
time, plus waiting for a CPU: the client, the gateway (two shards) and the backend share \
two CPUs with other work (load average above). The p99 is that wait at its worst.{}{}",
        us(g.gateway_run_us),
        us(g.gateway_wait_us),
        us(g.backend_run_us),
        us(r.direct_cpu.backend_run_us),
        criterion_median_ns(criterion, "jsonrpc_parse/tools_call_small")
            .map_or("(not measured)".into(), duration),
        if g.gateway_run_us <= 150.0 {
            "The gateway's own CPU per call fits within the 150 µs budget."
        } else {
            "The gateway's own CPU per call alone exceeds the 150 µs budget."
        },
        r.relay.as_ref().map_or(String::new(), |rl| format!(
            " A byte relay in the gateway's place, doing no work but copying, added {} at p50 \
and {} at p99 with {} of CPU per call: what the extra process on the path costs by itself. \
Beyond the relay, the gateway's own work added {} at p50; the relay's figure moves with the \
machine's speed from run to run (on one thread, between 83 and 107 µs at p50 in the full runs of \
2026-12-06 and 71 to 100 µs in short ones; on two workers, as before, 78 to 147 µs), and the \
gateway's moves with it.",
            us(rl.load.latency.p50_us - r.direct.latency.p50_us),
            us(rl.load.latency.p99_us - r.direct.latency.p99_us),
            us(rl.cpu.gateway_run_us),
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
            if sp.gateway.p50_us <= 200.0 {
                "met"
            } else {
                "missed"
            }
        ),
        None => String::new(),
    };
    let holds = if r.resume_split.is_some() {
        "That stretch holds"
    } else {
        "A resume round inside the gateway holds"
    };
    let relay = match &r.relay {
        Some(rl) => format!(
            " A byte relay in the gateway's place adds {} end to end at p50: that much is the \
extra process on the path, before any work.",
            us(rl.resume.p50_us - r.resume_direct.p50_us)
        ),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "- (b) {inside}{holds}: reading and checking the retry, opening the state \
({open}), handing the answers to the parked call's task, which checks them and POSTs them \
upstream itself over a pooled keep-alive connection (writing and reading it in its own task), \
then, when the result arrives on the call's \
still-open POST stream, handing the reply back to the client's connection. The JSON work is a \
few microseconds (one whole round of translate, seal, build and serialize is {round_cpu}); the \
rest is hand-overs between tasks, waking the shard's thread where it has gone to sleep on this \
virtual machine, and the system calls themselves (on loopback, a write delivers to the peer's socket and wakes the \
peer in the writer's time). End to end the client sees {} more than the direct client at p50: \
that also counts the client's own HTTP exchange with the gateway, two more wake-ups of a \
process.{relay} The gateway's CPU per MRTR call (both requests) was {}, and its threads waited \
{} for a CPU; a `perf` profile of sequential rounds shows context switches and wake-ups at the \
top, `malloc` next. Timestamps placed along the retry path in a one-off build (not shipped), \
medians of 1,000 sequential rounds on one worker thread: reading the body about 40 µs, parsing \
it 16 µs, header and principal checks 9 µs, the spawned phase's first poll 40 µs, checking the \
state 17 µs, the hand-over to the parked call 9 µs, building the answer and handing it to \
hyper 13 µs (measured before the `Inline` tasks of (a)). In the nine pairs of (a), `Inline` \
tasks for the connections and for each request's work shortened the stretch from reading the \
retry to writing the answer upstream (median 125 µs against 138 µs) and lengthened the one from \
the tool's result to the reply (97 µs against 63 µs): a task that polls itself again goes before \
the task it has just woken, which is the next step of the reply. So each request's work, which \
hands the reply to the client's connection, and hyper's upstream connections (the gateway's \
client then), which handed the backend's answer to the request's work, were plain tasks again. In alternating rounds of short \
runs (`--duration 6 --slices 3 --rounds 300 --park 200`), a plain task for each request's work \
took the reply half from a median of 100 µs to 78 µs against the build with all three \
`Inline` (shorter in all seven rounds), and the round from 228 µs to 207 µs; plain upstream \
connections as well took the round to a median of 200 µs against 205 µs with the first change \
alone (lower in six rounds of eight). Shards (see (a)) keep a retry on one thread when it comes \
on the connection of the call's first request, as here; in the four pairs of (a) the round took \
139 to 190 µs against 162 to 231 µs, within the noise of sequential rounds. \
Criterion measures the same work several times faster: it runs hot, while between \
sequential rounds the machine idles (the first request of each call waits out the default 10 ms \
coalescing window), so every retry starts on cold caches and a halted virtual CPU. Handing a retry \
to the parked call without spawning a task for it (or running a request's work in the task of \
its client's connection), and a timer that keeps the runtime's next wake-up near (so registering a request's timeouts wakes no \
parked thread) each moved this figure by less than the noise between runs, and were not kept. \
The backend takes each answer with an empty 202: until the gateway's client gave an empty \
body's connection back to its pool at once, unread, every answer opened a new connection to the \
backend. In two alternating pairs of short runs (`--duration 3 --slices 2 --rounds 300 --park \
100`), giving it back took the round inside the gateway from 268 and 274 µs to 132 and 161 µs \
at p50, and the backend's CPU per MRTR call from 529 to 331 µs in the first pair. With a backend that numbers its events, the stream is picked up \
by a GET sent alongside the answer (not timed here).",
        us(resume_p50),
        us(r.resume_gateway_cpu.gateway_run_us),
        us(r.resume_gateway_cpu.gateway_wait_us)
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
                "- (c) With an HTTP backend a parked call holds an upstream session but no process: \
the session task and its routing state, the Streamable HTTP transport, the call's task with its \
channels, the park entry and, unless the backend numbers its events, the call's still-open POST \
event stream and its connection. Holding the stream, the gateway held {:.1} KiB per call at {} \
parked, against 16 KiB: {}. The connection is the gateway's own HTTP/1.1 client's \
(`src/upstream/h1.rs`): the call's task reads its answer stream itself, into a buffer on the \
stack, so a stream that waits keeps its socket, its framing state and the SSE decoder's state. \
The conn_cost figure under \"Memory detail\" is one such connection, counted with its test \
server's side and with the buffer its response head was read into, which holds what arrived \
with the head (that program reads no further; a parked call's stream lets the buffer go once \
those bytes are read; it measured 6.7 KiB while that buffer was the whole 4 KiB head limit). \
With hyper's pooled client, which the gateway used before, that connection cost about \
22 KiB by itself (its request queue allocates room for 32 requests up front, about 9 KiB; its \
header write buffer is 8 KiB; its read buffer was fixed at 4 KiB; plus the connection's task), \
and a parked call holding its stream 31.6 KiB at 10,000 parked; no setting of hyper's brought \
it within 16 KiB (hyper's own `client::conn::http1` with a 1 KiB read buffer still cost 15.4 \
KiB per connection, measured with 2,000 of them in a one-off program). In short runs at 10,000 \
parked, the gateway's own client took it to 15.2 KiB, and boxing the exchange (connect, write, \
read the head), which a call's request task otherwise keeps room for while the call is parked, \
to 13.4 KiB (`heaptrack` of 1,000 parked calls showed the request task at 3.4 KiB). \
When the backend numbers its events (SSE `id:`, so the stream can be resumed), the gateway lets \
the stream go as it parks the call and picks it up with `Last-Event-ID` on the retry: {} \
(second table), against the same 16 KiB. What is left, by `heaptrack` of 1,000 parked calls \
with their streams let go: three tokio channels (about 0.8 KiB each: a channel's shared state \
is aligned to 128 bytes and it allocates room for 32 messages up front; one is the call's, for \
what its session routes to it, and two the session's, for its commands and for what its link \
receives), the session's task (about 1.4 KiB), the call's future (about 1.4 KiB), the call's \
task (0.6 KiB), the session's transport and link, the pending input requests and the park \
entry. Steps that got it here: boxing each phase of a call, boxing the \
messages of the call's channels and fixing the upstream read buffer at 4 KiB (71.4 to about 51 \
KiB); copying the backend's session id out of the connection's read buffer (the header shared \
it, keeping 4 KiB alive per session) and dropping a round's reply channel once it is answered \
(about 7 KiB); one shared copy of the `initialize` result for a backend's sessions (about 2 \
KiB); letting a numbered stream go while parked (its hyper connection then, about 22 KiB); and keeping the \
call's task once instead of twice in its future, the pending input requests and the client's \
params as JSON text instead of `serde_json` values, and spawning a request's phase as the task \
itself instead of inside two wrappers that each kept a copy of the request (about 8 KiB); \
dropping, with the stream it let go, the channel the stream delivered into (at 1,000 \
parked, 15.9 and 15.5 KiB against 14.9 and 14.7 KiB in two alternating pairs of short runs); \
keeping the inputs of a call's future and of a session's task once each (an `async fn` keeps \
its arguments for its whole life besides the copies its body moves them into): about 2 KiB, \
in two alternating pairs of short runs at 1,000 and 10,000 parked 35.4 and 35.1 KiB against 33.3 \
and 33.1 holding the stream, 15.0 and 12.9 against 13.0 and 10.9 with it let go; letting the \
request's `_meta` go while parked (its capabilities were a `serde_json` map node of over half a \
KiB; the retry brings its own): about 0.65 KiB; and handing a retry to its parked call through \
a one-shot hand-over opened for each wait instead of a channel kept for the call's life: about \
0.9 KiB (the same pairs: 32.5 against 31.6 KiB holding the stream at 10,000 parked, 10.3 \
against 9.4 with it let go). \
Without `--no-standalone-stream` each session also keeps its standalone GET stream: a \
second connection per parked call.",
                m.per_call_kib,
                m.parked,
                if m.per_call_kib <= 16.0 {
                    "met"
                } else {
                    "missed"
                },
                r.memory_released.last().map_or_else(
                    || "not measured in this run".to_owned(),
                    |l| format!("{:.1} KiB per call at {} parked", l.per_call_kib, l.parked)
                ),
            );
        }
    }
    let _ = writeln!(
        s,
        "- (d) Parked calls are bounded by `max_parked_total` (and per principal by \
`max_parked_per_principal`). A held interactive call is checked before it takes a backend \
session, and again when it parks; a refused call gets -32000. Here the {} refused calls moved \
the gateway's RSS by {:+} KiB ({:+.1} KiB each: allocator slack, not held parks). \
{bound}\n\n\
The `perf` profiles and `strace` sequences above come from the gateway process on this \
machine while the harness ran (`perf record -p PID`, or `perf record -a` read for the gateway's threads); they are not rerun by `{command}` (the \
traced split of (b) is: the harness records it itself).{vm}",
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
        vm = if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" hypervisor")) {
            " The CPU reports the `hypervisor` flag: this is a virtual machine, where waking an \
idle virtual CPU is costly, which weighs on every hop above."
        } else {
            ""
        },
    );
    s
}

//! The legacy clients' rows of BENCHMARKS.md ([`crate::legacy_face`]): beside the other rows
//! of each table, what the gateway's legacy face adds to a 2025-11-25 client's pass-through
//! call and to its call with one elicitation round, and the CPU per call; or, run alone, the
//! same rows under their tables' headings.

use super::{ADDED_P50_US, ADDED_P99_US, met, slice_by_slice, us};
use crate::Latency;
use crate::legacy_face::LegacyFace;
use std::fmt::Write;

/// Added percentiles, through less direct, as text and whether the target is met; a tail
/// the direct side had larger is said so (two short runs side by side).
fn added_p99(through: &Latency, direct: &Latency) -> (String, String) {
    let added = through.p99_us - direct.p99_us;
    if added < 0.0 {
        let text = format!(
            "none seen: the direct clients' p99 ({}) was above the gateway's ({})",
            us(direct.p99_us),
            us(through.p99_us)
        );
        return (text, "—".to_owned());
    }
    (us(added), met(added <= ADDED_P99_US).to_owned())
}

/// Rows of the table of figures against targets: (a) added at p50 and p99, and CPU per call.
pub fn pass_through(s: &mut String, f: &LegacyFace, rate: f64) {
    let (g, d) = (&f.gateway, &f.direct);
    let add_p50 = g.load.latency.p50_us - d.load.latency.p50_us;
    let _ = writeln!(
        s,
        "| (a) legacy clients: the same call at {rate:.0} req/s from 2025-11-25 clients ({} sessions) through the gateway's legacy face, latency added against the same clients to the backend directly, p50 | {} | ≤ 150 µs | {} |",
        f.clients,
        us(add_p50),
        met(add_p50 <= ADDED_P50_US)
    );
    let (p99, p99_met) = added_p99(&g.load.latency, &d.load.latency);
    let _ = writeln!(
        s,
        "| (a) legacy clients: the same, p99 | {p99} | ≤ 1 ms | {p99_met} |"
    );
    let _ = writeln!(
        s,
        "| (a) legacy clients: CPU per pass-through call (on a CPU), the gateway / the backend behind it / the backend directly | {} / {} / {}; {:.0} req/s, {} errors through the gateway | none set | — |",
        us(g.cpu.gateway_run_us),
        us(g.cpu.backend_run_us),
        us(d.cpu.backend_run_us),
        g.load.throughput_rps,
        g.load.errors
    );
}

/// The row of one legacy call with its elicitation round, in the same table.
pub fn elicitation(s: &mut String, f: &LegacyFace) {
    let (g, d) = (&f.gateway, &f.direct);
    let _ = writeln!(
        s,
        "| (b) legacy clients: one `ask_form` call with its elicitation round (answered over POST), request POSTed → result read, latency added by the gateway p50 / p99; gateway CPU per call (on a CPU) | {} / {}; {} | none set | — |",
        us(g.call.p50_us - d.call.p50_us),
        us(g.call.p99_us - d.call.p99_us),
        us(g.call_cpu.gateway_run_us)
    );
}

/// Rows of the (a) detail table: each route's own percentiles.
pub fn pass_through_detail(s: &mut String, f: &LegacyFace) {
    let (g, d) = (&f.gateway.load, &f.direct.load);
    let _ = writeln!(
        s,
        "| legacy clients ({} sessions): through the gateway p50 / p99 / max; directly p50 / p99 / max; added p50 slice by slice | {} / {} / {}; {} / {} / {}; {} |",
        f.clients,
        us(g.latency.p50_us),
        us(g.latency.p99_us),
        us(g.latency.max_us),
        us(d.latency.p50_us),
        us(d.latency.p99_us),
        us(d.latency.max_us),
        slice_by_slice(g, d).unwrap_or_else(|| "not recorded".into())
    );
    if let Some(r) = &f.relay {
        let _ = writeln!(
            s,
            "| legacy clients through a byte relay: p50 / p99; added p50 / p99 | {} / {}; {} / {} |",
            us(r.load.latency.p50_us),
            us(r.load.latency.p99_us),
            us(r.load.latency.p50_us - d.latency.p50_us),
            us(r.load.latency.p99_us - d.latency.p99_us)
        );
    }
}

/// Rows of the (b) detail table: the `ask_form` call each way, and its answer's stretch.
pub fn elicitation_detail(s: &mut String, f: &LegacyFace) {
    let (g, d) = (&f.gateway, &f.direct);
    let _ = writeln!(
        s,
        "| legacy clients' `ask_form` call, request POSTed → result read ({} each way): via the gateway p50 / p99; directly p50 / p99 | {} / {}; {} / {} |",
        f.rounds,
        us(g.call.p50_us),
        us(g.call.p99_us),
        us(d.call.p50_us),
        us(d.call.p99_us)
    );
    let _ = writeln!(
        s,
        "| its last stretch, answer POSTed → result read: via the gateway p50 / p99; directly p50 / p99; added p50 / p99 | {} / {}; {} / {}; {} / {} |",
        us(g.answer.p50_us),
        us(g.answer.p99_us),
        us(d.answer.p50_us),
        us(d.answer.p99_us),
        us(g.answer.p50_us - d.answer.p50_us),
        us(g.answer.p99_us - d.answer.p99_us)
    );
    if let Some(r) = &f.relay {
        let _ = writeln!(
            s,
            "| legacy clients' `ask_form` call through a byte relay instead: added p50 / p99 | {} / {} |",
            us(r.call.p50_us - d.call.p50_us),
            us(r.call.p99_us - d.call.p99_us)
        );
    }
}

/// Rows of the CPU table: the gateway's legacy face, and the relay in front of legacy clients.
pub fn cpu(s: &mut String, f: &LegacyFace) {
    let pair = |run: f64, wait: f64| format!("{} / {}", us(run), us(wait));
    let g = &f.gateway;
    let _ = writeln!(
        s,
        "| the gateway's legacy face, a legacy client's session proxied (one `ask_form` call with its round in (b)) | {} | {} |",
        pair(g.cpu.gateway_run_us, g.cpu.gateway_wait_us),
        pair(g.call_cpu.gateway_run_us, g.call_cpu.gateway_wait_us)
    );
    if let Some(r) = &f.relay {
        let _ = writeln!(
            s,
            "| the byte relay, legacy clients (one `ask_form` call in (b)) | {} | {} |",
            pair(r.cpu.gateway_run_us, r.cpu.gateway_wait_us),
            pair(r.call_cpu.gateway_run_us, r.call_cpu.gateway_wait_us)
        );
    }
}

/// The method of these rows, for BENCHMARKS.md's list.
pub fn method(f: &LegacyFace) -> String {
    format!(
        "- Legacy clients rows: {} 2025-11-25 Streamable HTTP clients, each `initialize`d once \
(then `notifications/initialized`) with a session of its own, call `echo` in the open loop of \
(a), at the same rate, to the fixture directly, through the byte relay and through a gateway of \
their own (configured as the first) whose legacy face proxies each session to a backend session, \
in an alternation of their own after (a), and before that {} sequential `ask_form` calls each \
way, the pushed `elicitation/create` read off the call's event stream and answered over POST, \
timed from the request POSTed to the result read.\n",
        f.clients, f.rounds
    )
}

/// Everything above under its tables' headings, for a run of this case alone.
pub fn alone(f: &LegacyFace, rate: f64) -> String {
    let mut s = String::from("| figure | value | target | met? |\n|---|---|---|---|\n");
    pass_through(&mut s, f, rate);
    elicitation(&mut s, f);
    s.push_str("\n| (a) pass-through | value |\n|---|---|\n");
    pass_through_detail(&mut s, f);
    s.push_str("\n| (b) resume round | value |\n|---|---|\n");
    elicitation_detail(&mut s, f);
    s.push_str(
        "\n| CPU per call: on a CPU / waiting for one | (a) pass-through call | (b) MRTR call (first request + retry) |\n|---|---|---|\n",
    );
    cpu(&mut s, f);
    s
}

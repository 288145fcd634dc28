//! (b) as the gateway itself sees it: from reading a retry off the client's connection to writing
//! the reply on it, split at the backend's part (from writing the answer upstream to reading the
//! tool's result). Read from the gateway's own system calls with `perf` tracepoints
//! (`recvfrom`, and `writev` and `sendto`: hyper's server writes a reply with the first, the
//! gateway's upstream client a request with the second), so nothing in the gateway is changed to measure it; the rounds are
//! extra ones, after the timed (b), since tracing adds its own small cost to every call.
//!
//! Needs `perf` and permission to trace the gateway (root, or `perf_event_paranoid` ≤ 1);
//! without them the split is reported as not measured.

use crate::{Latency, histogram};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// Per resumed round, in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Split {
    /// Retry read → answer written upstream, plus result read → reply written: the gateway's
    /// own part of the round.
    pub gateway: Latency,
    /// Retry read → answer written upstream.
    pub inbound: Latency,
    /// Result read → reply written.
    pub outbound: Latency,
    /// Answer written → result read: the backend's part, as the gateway sees it.
    pub backend: Latency,
    /// Retry read → reply written.
    pub total: Latency,
}

/// Runs `rounds` (sequential MRTR calls on one client connection) while `perf` traces `pid`,
/// then splits each retry. `Err` says why it could not be measured.
pub async fn measure<F: Future<Output = anyhow::Result<()>>>(
    pid: u32,
    dir: &Path,
    rounds: F,
) -> Result<Split, String> {
    let data = dir.join("split.perf.data");
    let mut perf = Command::new("perf")
        // A large buffer: a lost chunk of events would split rounds at the wrong places.
        .args(["record", "-q", "-m", "1024"])
        .args(["-e", "syscalls:sys_enter_recvfrom"])
        .args(["-e", "syscalls:sys_exit_recvfrom"])
        .args(["-e", "syscalls:sys_enter_writev"])
        .args(["-e", "syscalls:sys_enter_sendto"])
        .arg("-p")
        .arg(pid.to_string())
        .arg("-o")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("`perf` could not be started ({e})"))?;
    // perf says nothing once it is attached; give it a moment.
    tokio::time::sleep(Duration::from_millis(700)).await;
    if let Ok(Some(status)) = perf.try_wait() {
        let mut err = String::new();
        if let Some(mut e) = perf.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = e.read_to_string(&mut err).await;
        }
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("`perf record` exited ({status}): {first}"));
    }
    let ran = rounds.await;
    let _ = Command::new("kill")
        .args(["-INT", &perf.id().unwrap_or(0).to_string()])
        .status()
        .await;
    let _ = tokio::time::timeout(Duration::from_secs(30), perf.wait()).await;
    ran.map_err(|e| format!("the traced rounds failed: {e:#}"))?;
    let script = Command::new("perf")
        .args(["script", "-F", "tid,time,event,trace", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("`perf script` failed: {e}"))?;
    let _ = std::fs::remove_file(&data);
    split(&String::from_utf8_lossy(&script.stdout)).map_err(|e| format!("{e:#}"))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Io {
    /// Bytes read from a descriptor.
    Read { fd: u64, n: i64 },
    /// A write of a message to a descriptor.
    Write { fd: u64 },
}

/// Parses `perf script -F tid,time,event,trace` output into time-ordered reads and writes.
fn events(script: &str) -> Vec<(f64, Io)> {
    let mut out = Vec::new();
    let mut reading: HashMap<u64, u64> = HashMap::new();
    for line in script.lines() {
        let mut words = line.split_whitespace();
        let (Some(tid), Some(time), Some(event)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let (Ok(tid), Ok(time)) = (
            tid.parse::<u64>(),
            time.trim_end_matches(':').parse::<f64>(),
        ) else {
            continue;
        };
        let rest: Vec<&str> = words.collect();
        let fd = || {
            rest.windows(2).find(|w| w[0] == "fd:").and_then(|w| {
                u64::from_str_radix(w[1].trim_end_matches(',').trim_start_matches("0x"), 16).ok()
            })
        };
        match event.trim_end_matches(':') {
            "syscalls:sys_enter_recvfrom" => {
                if let Some(fd) = fd() {
                    reading.insert(tid, fd);
                }
            }
            "syscalls:sys_exit_recvfrom" => {
                let n = rest.first().and_then(|v| {
                    u64::from_str_radix(v.trim_start_matches("0x"), 16)
                        .ok()
                        .map(|n| n as i64)
                });
                if let (Some(fd), Some(n)) = (reading.remove(&tid), n) {
                    out.push((time, Io::Read { fd, n }));
                }
            }
            "syscalls:sys_enter_writev" | "syscalls:sys_enter_sendto" => {
                if let Some(fd) = fd() {
                    out.push((time, Io::Write { fd }));
                }
            }
            _ => {}
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Splits each retry of a sequential run of MRTR calls (first request, retry, ...). The
/// client's connection is the descriptor most written to: each request's reply goes there,
/// while upstream messages spread over the pool's connections.
fn split(script: &str) -> anyhow::Result<Split> {
    let ev = events(script);
    let mut writes: HashMap<u64, usize> = HashMap::new();
    for (_, io) in &ev {
        if let Io::Write { fd } = io {
            *writes.entry(*fd).or_default() += 1;
        }
    }
    let client = writes
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(fd, _)| *fd)
        .context("perf recorded no writes by the gateway")?;
    // Each request on the client's connection: its first read, and what happened until its
    // reply was written.
    struct Span {
        read_at: f64,
        size: i64,
        answer_written: Option<f64>,
        result_read: Option<f64>,
        reply: f64,
    }
    let mut spans = Vec::new();
    let mut i = 0;
    while i < ev.len() {
        let (read_at, io) = ev[i];
        i += 1;
        let Io::Read { fd, n: size } = io else {
            continue;
        };
        if fd != client || size <= 0 {
            continue;
        }
        let (mut answer_written, mut result_read) = (None, None);
        while i < ev.len() {
            let (t, io) = ev[i];
            i += 1;
            match io {
                Io::Write { fd } if fd == client => {
                    spans.push(Span {
                        read_at,
                        size,
                        answer_written,
                        result_read,
                        reply: t,
                    });
                    break;
                }
                Io::Write { .. } => {
                    answer_written.get_or_insert(t);
                }
                Io::Read { fd, n } if fd != client && n > 0 => result_read = Some(t),
                Io::Read { .. } => {}
            }
        }
    }
    // A retry carries its requestState and answers: it is the larger of the two requests of a
    // call, whatever else happened in between.
    let (smallest, largest) = spans.iter().fold((i64::MAX, 0), |(lo, hi), s| {
        (lo.min(s.size), hi.max(s.size))
    });
    let retry_size = smallest + (largest - smallest) / 2;
    let (mut gateway, mut backend, mut total) = (histogram(), histogram(), histogram());
    let (mut inbound, mut outbound) = (histogram(), histogram());
    for span in spans.iter().filter(|s| s.size > retry_size) {
        let (Some(a), Some(r)) = (span.answer_written, span.result_read) else {
            continue;
        };
        let (t0, w) = (span.read_at, span.reply);
        let ns = |s: f64| (s * 1e9).max(0.0) as u64;
        gateway.saturating_record(ns((a - t0) + (w - r)));
        inbound.saturating_record(ns(a - t0));
        outbound.saturating_record(ns(w - r));
        backend.saturating_record(ns(r - a));
        total.saturating_record(ns(w - t0));
    }
    if total.is_empty() {
        bail!("no resumed round found in the trace");
    }
    Ok(Split {
        gateway: Latency::of(&gateway),
        inbound: Latency::of(&inbound),
        outbound: Latency::of(&outbound),
        backend: Latency::of(&backend),
        total: Latency::of(&total),
    })
}

//! Resident memory of a process, read from `/proc`; shared by the bench programs.

use anyhow::Context;

/// `VmRSS` of a process (a pid, or `"self"`), in KiB.
pub fn rss_kib(pid: impl std::fmt::Display) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

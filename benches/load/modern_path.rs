//! The relay path: the gateway in front of a 2026-07-28 backend (the fixture started with
//! `--modern`, served as a second backend with `protocol = "2026-07-28"`), against a 2026-07-28
//! client talking to that backend directly. Measured as the legacy path is, in the same
//! alternation: (a) the pass-through `echo`, open loop, with the CPU each process spends per
//! call; (b) one MRTR round, the retry timed, which the gateway relays (its state unwrapped
//! from the gateway's seal, the backend's own state forwarded) rather than resumes from a park.
//!
//! Both sides use one client, [`crate::modern::Conn`], so the difference between them is the
//! gateway alone.

use crate::gateway::{LEGACY_PATH, MODERN_PATH};
use crate::{Cpu, Latency, Load, Side};
use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The relay path's figures (HTTP backend only).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModernPath {
    /// (a) a 2026-07-28 client straight to the 2026-07-28 fixture, and through the gateway.
    pub direct: Load,
    pub gateway: Load,
    pub direct_cpu: Cpu,
    pub gateway_cpu: Cpu,
    /// (b) the retry of an `ask_form` round: sent → result received, each way.
    pub resume_direct: Latency,
    pub resume_gateway: Latency,
    pub resume_direct_cpu: Cpu,
    pub resume_gateway_cpu: Cpu,
}

/// The four sides the relay path adds to the alternation, summed over their slices.
pub struct Sides {
    pub direct: Side,
    pub gateway: Side,
    pub resume_direct: Side,
    pub resume_gateway: Side,
}

impl Sides {
    pub fn new() -> Sides {
        Sides {
            direct: Side::new(),
            gateway: Side::new(),
            resume_direct: Side::new(),
            resume_gateway: Side::new(),
        }
    }

    pub fn figures(&self) -> ModernPath {
        ModernPath {
            direct: self.direct.load(),
            gateway: self.gateway.load(),
            direct_cpu: self.direct.cpu(),
            gateway_cpu: self.gateway.cpu(),
            resume_direct: Latency::of(&self.resume_direct.slices.hist),
            resume_gateway: Latency::of(&self.resume_gateway.slices.hist),
            resume_direct_cpu: self.resume_direct.cpu(),
            resume_gateway_cpu: self.resume_gateway.cpu(),
        }
    }
}

/// The gateway's endpoint for the 2026-07-28 backend, from the one it announced first (the
/// legacy backend's).
pub fn endpoint(gateway_url: &str) -> anyhow::Result<String> {
    let base = gateway_url
        .strip_suffix(LEGACY_PATH)
        .with_context(|| format!("gateway URL {gateway_url} does not end in {LEGACY_PATH}"))?;
    Ok(format!("{base}{MODERN_PATH}"))
}

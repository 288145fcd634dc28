//! A retry: a request that carries a `requestState`. Its state is opened once and checked once,
//! here, and the outcome is one [`Decision`]: resume the call parked here, forward the retry to
//! the replica that holds its call, run a replay-mode call again here, relay it to a 2026-07-28
//! backend with the backend's own state, or refuse it with the one frozen error. The checks run in one order for every mode, so a state that fails several is
//! counted under the first.

use super::Bridge;
use super::park::Handle;
use crate::config::parse_host_port;
use crate::metrics::StateFailure;
use crate::seal::{Claims, KeyRing, Transcript};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a retry is served.
#[derive(Debug)]
pub(super) enum Decision {
    /// The call is parked here: hand it the answers.
    Resume { claims: Box<Claims>, handle: Handle },
    /// The call is parked on another replica: send the retry there over the internal hop.
    Forward { owner: String, addr: String },
    /// Replay mode: run the call again here, from its transcript.
    Replay {
        claims: Box<Claims>,
        transcript: Transcript,
    },
    /// A relayed call's state: send the retry to the 2026-07-28 backend with its own state
    /// (to the stdio child that wrote it, if one did).
    Relay {
        backend_state: String,
        child: Option<u32>,
    },
    /// Refused with the frozen error, counted under the check that failed.
    Refuse(StateFailure),
}

/// A retry of `method` with `params`, for `backend`, from `principal`.
pub(super) struct Retry<'a> {
    pub backend: usize,
    pub principal: &'a crate::seal::Digest,
    pub method: &'a str,
    pub params: &'a serde_json::Map<String, serde_json::Value>,
    /// Forwarded by another replica already: never forwarded again.
    pub hop: bool,
}

/// Opens `state` and decides where the retry is served.
pub(super) fn decide(bridge: &Bridge, retry: &Retry<'_>, state: &str) -> Decision {
    match check(bridge, retry, state) {
        Ok(decision) => decision,
        Err(failed) => Decision::Refuse(failed),
    }
}

fn check(bridge: &Bridge, retry: &Retry<'_>, state: &str) -> Result<Decision, StateFailure> {
    if KeyRing::is_relayed(state) {
        return check_relayed(bridge, retry, state);
    }
    let mut claims = bridge
        .keys
        .open(state)
        .map_err(|e| StateFailure::from(e.0))?;
    let here = claims.owner == bridge.config.state.owner;
    if claims.replay.is_none() && !here {
        reachable_owner(bridge, &claims, retry.hop)?;
    }
    if claims.replay.is_some() && retry.hop {
        tracing::warn!(
            "a forwarded retry carries a replay state, which is never forwarded: refused"
        );
        return Err(StateFailure::Owner);
    }
    if &claims.principal != retry.principal {
        return Err(StateFailure::Principal);
    }
    if claims.request != Bridge::request_digest(retry.method, retry.params) {
        return Err(StateFailure::Request);
    }
    if claims.expires_at_ms <= now_ms() {
        return Err(StateFailure::Expired);
    }
    if let Some(transcript) = claims.replay.take() {
        // Another backend's transcript: not the request it was sealed for.
        if transcript.backend != bridge.config.backends[retry.backend].path {
            return Err(StateFailure::Request);
        }
        return Ok(Decision::Replay {
            claims: Box::new(claims),
            transcript,
        });
    }
    if !here {
        return forward_to(claims);
    }
    let handle = bridge
        .parks
        .get(&claims.park)
        .ok_or(StateFailure::UnknownPark)?;
    // The call is parked on another backend's endpoint: not the request it was issued for.
    if handle.backend != retry.backend {
        return Err(StateFailure::Request);
    }
    Ok(Decision::Resume {
        claims: Box::new(claims),
        handle,
    })
}

/// A relayed call's state, checked in the order a parked call's is: principal, request,
/// expiry, backend. Nothing is parked, so any replica serves it and it is never forwarded.
fn check_relayed(
    bridge: &Bridge,
    retry: &Retry<'_>,
    state: &str,
) -> Result<Decision, StateFailure> {
    let relayed = bridge
        .keys
        .open_relayed(state)
        .map_err(|e| StateFailure::from(e.0))?;
    if &relayed.principal != retry.principal {
        return Err(StateFailure::Principal);
    }
    if relayed.request != Bridge::request_digest(retry.method, retry.params) {
        return Err(StateFailure::Request);
    }
    if relayed.expires_at_ms <= now_ms() {
        return Err(StateFailure::Expired);
    }
    // Minted for another backend's endpoint: not the request it was issued for.
    if relayed.backend != bridge.config.backends[retry.backend].path {
        return Err(StateFailure::Request);
    }
    Ok(Decision::Relay {
        backend_state: relayed.state,
        child: relayed.child,
    })
}

/// A call held by another replica can be reached from here: this retry was not forwarded
/// already, and this replica has an internal listener of its own (replicas without one are
/// not part of a fleet).
fn reachable_owner(bridge: &Bridge, claims: &Claims, hop: bool) -> Result<(), StateFailure> {
    if hop {
        tracing::warn!(owner = %claims.owner, "a forwarded retry names another replica as owner: refused, a request is forwarded at most once");
        return Err(StateFailure::Owner);
    }
    if bridge.config.fleet.internal_listen.is_none() {
        tracing::info!(owner = %claims.owner, "retry for a call parked on another replica, and this one has no internal listener: refused");
        return Err(StateFailure::Owner);
    }
    Ok(())
}

/// The owner's sealed address, if it is one the gateway dials.
fn forward_to(claims: Claims) -> Result<Decision, StateFailure> {
    match claims.owner_addr {
        Some(addr) if parse_host_port(&addr).is_some() => Ok(Decision::Forward {
            owner: claims.owner,
            addr,
        }),
        other => {
            tracing::warn!(owner = %claims.owner, addr = ?other, "the owner's sealed address is unusable: refused");
            Err(StateFailure::Owner)
        }
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

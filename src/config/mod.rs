//! Configuration: the TOML file (`raw`) checked once into a [`Config`] with every default filled
//! in and every value in range. Code past this point never sees a loose option.
//!
//! This file holds the validated types the rest of the gateway reads. The way there:
//! [`raw`] (the file as written) -> `validate` (one function per section) -> [`Config`];
//! `backend`, `http_backend` and `tls` check the `[[backend]]` tables, `env` the `MRTR_*`
//! overrides and the key ring, `address` the `host:port` form, `host` whether the stdio
//! backends' programs are there to run (for `serve` and `check`), and `describe` prints the
//! result for `check`. Configuration sits below everything else and imports nothing from above
//! it.

mod address;
mod backend;
mod check;
mod describe;
mod env;
mod host;
mod http_backend;
mod legacy_sse;
pub mod raw;
mod tls;
mod validate;

#[cfg(test)]
mod tests;

pub use address::parse_host_port;
pub use backend::{
    Backend, DEFAULT_PROBE_TIMEOUT, DEFAULT_STDERR_LINE, DEFAULT_WRITE_QUEUE, Policy, Protocol,
    Replay, Stdio, Transport,
};
pub use env::{ADVERTISE_ENV, KEYS_ENV, REPLICA_ID_ENV};
pub use http_backend::{Authorization, DEFAULT_RESPONSE_HEAD, Http};
pub use legacy_sse::LegacySse;
pub use tls::{Ca, ClientCert};

use crate::seal::KeyRing;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The deepest nesting `serde_json` parses.
pub const MAX_JSON_DEPTH: usize = 127;

/// A config that failed validation; `field` names the offending setting.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub server: Server,
    pub principal: PrincipalSource,
    pub state: State,
    pub limits: Limits,
    pub static_roots: Vec<serde_json::Value>,
    pub cache: Cache,
    pub log: Log,
    pub admin: Admin,
    pub fleet: Fleet,
    pub backends: Vec<Backend>,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    /// Exact `Origin` values allowed; empty means loopback origins only; `*` allows any.
    pub allowed_origins: Vec<String>,
    pub max_connections: usize,
    /// Connections one client address may have open at once (MCP and internal listeners); at
    /// `max_connections`, no cap of its own.
    pub max_connections_per_address: usize,
    pub shutdown_grace: Duration,
    /// How long a client connection may take to send a request head, and so how long an idle
    /// keep-alive connection stays open (MCP and internal listeners).
    pub header_timeout: Duration,
    /// How long a request body may take to arrive once its head has.
    pub body_timeout: Duration,
    /// How long a write to a client may make no progress (the client stopped reading) before
    /// the connection is closed.
    pub write_timeout: Duration,
    /// Threads that serve client connections (`crate::shard`): one per CPU the process may use
    /// unless set.
    pub worker_threads: usize,
}

/// Where the principal (the party a parked call belongs to) comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalSource {
    /// Digest of the `Authorization` header (absent header: the anonymous principal).
    Authorization,
    /// Digest of a named header set by a trusted front proxy.
    Header(http::HeaderName),
    /// Everyone is the same principal.
    Anonymous,
}

#[derive(Debug, Clone)]
pub struct State {
    pub keys: Arc<KeyRing>,
    /// True when no key was configured and an ephemeral one was made.
    pub ephemeral: bool,
    pub park_ttl: Duration,
    pub coalesce_window: Duration,
    pub owner: String,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_json_depth: usize,
    pub max_line_bytes: usize,
    /// The largest backend result (as sent, its members set) or notification event a client
    /// connection holds: a larger result ends its call with -32603, a notification is dropped.
    pub max_reply_bytes: usize,
    pub max_parked_per_principal: usize,
    pub max_parked_total: usize,
    /// Input requests a backend may have outstanding in one call; also the `roots/list`
    /// requests outside any call held per session.
    pub max_input_requests: usize,
    pub queue_wait: Duration,
    pub request_timeout: Duration,
    pub held_roots_wait: Duration,
    /// Backend tool lists kept (for the `auto` replay policy and `Mcp-Param-*` headers), one
    /// per (backend, principal); past it the cache starts again.
    pub max_tool_catalogs: usize,
    /// Tools kept of one backend tool list; the rest are treated as unknown.
    pub max_tools_per_catalog: usize,
    /// Legacy client sessions one principal may hold, and the gateway in all.
    pub max_sessions_per_principal: usize,
    pub max_sessions_total: usize,
    /// How long a legacy client session lives with no request and no open stream.
    pub session_idle: Duration,
}

#[derive(Debug, Clone)]
pub struct Cache {
    pub ttl_ms: u64,
    pub scope: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct Log {
    pub format: LogFormat,
    pub level: String,
}

/// The admin listener: `/metrics`, `/healthz`, `/readyz`.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `None`: no admin listener.
    pub listen: Option<SocketAddr>,
    /// When all are taken, the connection idle the longest is closed to take a new one.
    pub max_connections: usize,
    /// How long a request head may take, and so how long an idle connection stays.
    pub header_timeout: Duration,
}

/// `[fleet]`: this replica's identity and how it cooperates with the others.
#[derive(Debug, Clone)]
pub struct Fleet {
    /// This replica's name, sealed into every requestState (also `state.owner`).
    pub replica_id: String,
    /// `host:port` where the other replicas reach `internal_listen`. Resolved from the bound
    /// address at start when not configured.
    pub advertise: Option<String>,
    /// The internal listener for retries forwarded by other replicas; `None`: single replica.
    pub internal_listen: Option<SocketAddr>,
    /// After SIGTERM, how long retries for parked calls are still served.
    pub drain_grace: Duration,
    /// Deadline for a whole forwarded retry, connect to last byte.
    pub forward_timeout: Duration,
    pub forward_connect_timeout: Duration,
    /// How old (or how far in the future) a forwarded request's timestamp may be.
    pub max_clock_skew: Duration,
    /// Largest replay transcript (JSON bytes) sealed into a requestState; larger calls are held.
    pub max_transcript_bytes: usize,
}

//! The config file as written: serde types that mirror the TOML, unknown fields refused.
//! Nothing here is trusted; `super::Config::from_raw` checks it all.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    #[serde(default)]
    pub server: Server,
    #[serde(default)]
    pub principal: Principal,
    #[serde(default)]
    pub state: State,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub roots: Roots,
    #[serde(default)]
    pub cache: Cache,
    #[serde(default)]
    pub log: Log,
    #[serde(default)]
    pub admin: Admin,
    #[serde(default)]
    pub fleet: Fleet,
    #[serde(default, rename = "backend")]
    pub backends: Vec<Backend>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub listen: Option<String>,
    pub path: Option<String>,
    pub allowed_origins: Option<Vec<String>>,
    pub max_connections: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub shutdown_grace: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub header_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub body_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub write_timeout: Option<Duration>,
    pub worker_threads: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    pub source: Option<String>,
    pub header: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
    #[serde(default, with = "humantime_serde")]
    pub park_ttl: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub coalesce_window: Option<Duration>,
    pub owner: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub id: String,
    pub secret: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_body_bytes: Option<usize>,
    pub max_json_depth: Option<usize>,
    pub max_line_bytes: Option<usize>,
    pub max_parked_per_principal: Option<usize>,
    pub max_parked_total: Option<usize>,
    pub max_input_requests: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub queue_wait: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub held_roots_wait: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roots {
    #[serde(default, rename = "static")]
    pub fixed: Vec<Root>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Root {
    pub uri: String,
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    #[serde(default, with = "humantime_serde")]
    pub ttl: Option<Duration>,
    pub scope: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    pub format: Option<String>,
    pub level: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    pub listen: Option<String>,
    pub max_connections: Option<usize>,
}

/// `[fleet]`: running as one of several replicas.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    pub replica_id: Option<String>,
    pub advertise: Option<String>,
    pub internal_listen: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub drain_grace: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub forward_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub forward_connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub max_clock_skew: Option<Duration>,
    pub max_transcript_bytes: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    pub name: String,
    pub kind: Option<String>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub max_stderr_line_bytes: Option<usize>,
    pub write_queue: Option<usize>,
    pub pool_max: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub idle_timeout: Option<Duration>,
    pub protocol_version: Option<String>,
    pub server_info: Option<bool>,
    pub path: Option<String>,
    /// For `kind = "http"` and `"sse"`.
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub authorization: Option<String>,
    pub authorization_value: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    pub ca_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    pub max_response_head_bytes: Option<usize>,
    pub standalone_stream: Option<bool>,
    pub release_parked_streams: Option<bool>,
    /// For `kind = "builtin"`: flags of the built-in legacy server.
    pub builtin_protocol: Option<String>,
    #[serde(default)]
    pub builtin_roots_on_init: bool,
    /// How a call waiting for input survives between rounds: "hold", "replay" or "auto".
    pub replay: Option<String>,
    /// Per-tool overrides of `replay`.
    #[serde(default)]
    pub replay_tools: BTreeMap<String, String>,
}

//! The config file as written: serde types that mirror the TOML, unknown fields refused.
//! Nothing here is trusted; `super::Config::from_raw` checks it all. Each field says what the
//! setting means and its default; the checks and ranges live with the validated types.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The whole file. Every section may be left out; `[[backend]]` must appear at least once.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    /// `[server]`: the client-facing MCP listener.
    #[serde(default)]
    pub server: Server,
    /// `[principal]`: whose a parked call is.
    #[serde(default)]
    pub principal: Principal,
    /// `[state]`: requestState keys and how long parked calls live.
    #[serde(default)]
    pub state: State,
    /// `[limits]`: bounds on bodies, nesting, lines, parked calls and waits.
    #[serde(default)]
    pub limits: Limits,
    /// `[roots]`: answers for `roots/list` requests outside any client call.
    #[serde(default)]
    pub roots: Roots,
    /// `[cache]`: the caching hint on cacheable complete results.
    #[serde(default)]
    pub cache: Cache,
    /// `[log]`: log format and level.
    #[serde(default)]
    pub log: Log,
    /// `[admin]`: the `/metrics`, `/healthz` and `/readyz` listener.
    #[serde(default)]
    pub admin: Admin,
    /// `[fleet]`: this replica among several.
    #[serde(default)]
    pub fleet: Fleet,
    /// `[[backend]]`: the legacy servers served, one table each.
    #[serde(default, rename = "backend")]
    pub backends: Vec<Backend>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// Address of the MCP endpoint (default `127.0.0.1:8080`).
    pub listen: Option<String>,
    /// Endpoint path of a lone backend that names none (default `/mcp`).
    pub path: Option<String>,
    /// Exact `Origin` values allowed; empty or absent: loopback origins only; `*`: any.
    pub allowed_origins: Option<Vec<String>>,
    /// Client connections open at once (default 1024).
    pub max_connections: Option<usize>,
    /// Client connections one address may have open at once on this listener (default a
    /// sixteenth of `max_connections`, at least 4); `max_connections` lifts the cap. The
    /// internal listener has no per-address cap.
    pub max_connections_per_address: Option<usize>,
    /// After the drain, time left for running calls and connections (default 10 s).
    #[serde(default, with = "humantime_serde")]
    pub shutdown_grace: Option<Duration>,
    /// How long a request head may take, and an idle keep-alive connection stay (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub header_timeout: Option<Duration>,
    /// How long a request body may take once its head has arrived (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub body_timeout: Option<Duration>,
    /// How long a write to a client may make no progress (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub write_timeout: Option<Duration>,
    /// Threads serving client connections (default: one per CPU the process may use).
    pub worker_threads: Option<usize>,
}

/// `[principal]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    /// `"authorization"` (default), `"header"` or `"anonymous"`.
    pub source: Option<String>,
    /// The header a trusted proxy sets, for `source = "header"`.
    pub header: Option<String>,
}

/// `[state]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// requestState keys, the first seals and all open; `MRTR_STATE_KEYS` overrides them.
    /// None at all: an ephemeral key per process.
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
    /// How long a parked call waits for the client's retry (default 2 min).
    #[serde(default, with = "humantime_serde")]
    pub park_ttl: Option<Duration>,
    /// Server requests this close together share one round (default 10 ms).
    #[serde(default, with = "humantime_serde")]
    pub coalesce_window: Option<Duration>,
    /// Older name of `fleet.replica_id`; set one of the two.
    pub owner: Option<String>,
}

/// One `[[state.keys]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The key's id, written in front of every requestState it seals (`v1.<id>.`).
    pub id: String,
    /// The key itself: 32 bytes, base64url.
    pub secret: String,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// A client request body (default 1 MiB).
    pub max_body_bytes: Option<usize>,
    /// Nesting of client bodies and backend messages (default 64, at most 127).
    pub max_json_depth: Option<usize>,
    /// One message from a backend: a stdio line, an SSE event, a JSON body (default 4 MiB).
    pub max_line_bytes: Option<usize>,
    /// A backend's result as sent to the client, and a notification's event: a client that
    /// stops reading keeps it in memory until written (default `max_line_bytes` + 64 KiB,
    /// the largest result a backend can send; 64 KiB to 1 GiB).
    pub max_reply_bytes: Option<usize>,
    /// Parked calls one principal may hold (default 64).
    pub max_parked_per_principal: Option<usize>,
    /// Parked calls in the whole gateway (default 10,000).
    pub max_parked_total: Option<usize>,
    /// Input requests one call may have outstanding; `roots/list` held per session (default 32).
    pub max_input_requests: Option<usize>,
    /// Wait for a free backend session before "backend busy" (default 5 s).
    #[serde(default, with = "humantime_serde")]
    pub queue_wait: Option<Duration>,
    /// Backend time per round, per `initialize`, per HTTP response head (default 60 s).
    #[serde(default, with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
    /// How long a `roots/list` outside any call waits for one (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub held_roots_wait: Option<Duration>,
    /// Backend tool lists kept, one per (backend, principal) (default 4096).
    pub max_tool_catalogs: Option<usize>,
    /// Tools kept of one such list (default 1024).
    pub max_tools_per_catalog: Option<usize>,
    /// Legacy client sessions one principal may hold (default 16).
    pub max_sessions_per_principal: Option<usize>,
    /// Legacy client sessions in the whole gateway (default 1000).
    pub max_sessions_total: Option<usize>,
    /// A legacy client session with no request and no open stream ends after this (default
    /// 10 min).
    #[serde(default, with = "humantime_serde")]
    pub session_idle: Option<Duration>,
}

/// `[roots]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roots {
    /// `static`: the roots answered to a `roots/list` outside any call (`file://` URIs).
    #[serde(default, rename = "static")]
    pub fixed: Vec<Root>,
}

/// One static root.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// A name shown to the backend.
    pub name: Option<String>,
}

/// `[cache]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    /// `ttlMs` on cacheable complete results (default 0).
    #[serde(default, with = "humantime_serde")]
    pub ttl: Option<Duration>,
    /// `cacheScope`: `"private"` (default) or `"public"`.
    pub scope: Option<String>,
}

/// `[log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// `"text"` (default) or `"json"`; logs go to stderr.
    pub format: Option<String>,
    /// A level or `RUST_LOG`-style directives (default `"info"`).
    pub level: Option<String>,
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// Address of the admin listener; absent: none.
    pub listen: Option<String>,
    /// Admin connections open at once (default 16); when all are taken, the one idle the
    /// longest is closed to take a new one.
    pub max_connections: Option<usize>,
    /// How long an admin request head may take, and an idle admin connection stay (default
    /// 5 s).
    #[serde(default, with = "humantime_serde")]
    pub header_timeout: Option<Duration>,
}

/// `[fleet]`: running as one of several replicas.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// This replica's name, sealed into every requestState (default `local`);
    /// `MRTR_REPLICA_ID` overrides it.
    pub replica_id: Option<String>,
    /// `host:port` the others reach `internal_listen` at (default: the bound address);
    /// `MRTR_ADVERTISE` overrides it.
    pub advertise: Option<String>,
    /// Where other replicas forward retries of calls parked here; absent: a single replica.
    pub internal_listen: Option<String>,
    /// After SIGTERM, how long retries of parked calls are still served (default 20 s).
    #[serde(default, with = "humantime_serde")]
    pub drain_grace: Option<Duration>,
    /// A whole forwarded retry, connect to last byte (default 70 s).
    #[serde(default, with = "humantime_serde")]
    pub forward_timeout: Option<Duration>,
    /// Connecting to the replica a call is parked on (default 2 s).
    #[serde(default, with = "humantime_serde")]
    pub forward_connect_timeout: Option<Duration>,
    /// How far a forwarded request's timestamp may be from this replica's clock (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub max_clock_skew: Option<Duration>,
    /// The largest replay transcript sealed into a requestState (default 16 KiB).
    pub max_transcript_bytes: Option<usize>,
}

/// One `[[backend]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Shown in logs, metrics and errors.
    pub name: String,
    /// `"stdio"` (default), `"http"`, `"sse"` or `"builtin"`.
    pub kind: Option<String>,
    /// For `kind = "stdio"`: the program to run.
    pub command: Option<String>,
    /// For `kind = "stdio"`: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// For `kind = "stdio"`: variables added to its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// For `kind = "stdio"`: its working directory.
    pub cwd: Option<PathBuf>,
    /// For `kind = "stdio"`: the longest stderr line logged (default 16 KiB).
    pub max_stderr_line_bytes: Option<usize>,
    /// For `kind = "stdio"`: lines waiting for the child's stdin (default 32).
    pub write_queue: Option<usize>,
    /// For `kind = "stdio"`: the children a 2026-07-28 backend runs, shared by all principals
    /// (default 2).
    pub children: Option<usize>,
    /// Backend sessions at most (default 16); a parked call holds one.
    pub pool_max: Option<usize>,
    /// Sessions one principal's calls that may ask for input (parked ones among them) hold at
    /// most (default a quarter of `pool_max`, at least 1).
    pub principal_sessions: Option<usize>,
    /// Sessions calls that may ask for input never take, kept for calls that need none
    /// (default an eighth of `pool_max`, at least 1; 0 with `pool_max = 1`).
    pub reserved_sessions: Option<usize>,
    /// An idle session is closed after this (default 5 min).
    #[serde(default, with = "humantime_serde")]
    pub idle_timeout: Option<Duration>,
    /// The version `initialize` asks for (default the newest legacy one).
    pub protocol_version: Option<String>,
    /// The backend's era: `"auto"` (default: probed with `server/discover` on `kind = "http"`
    /// and `"stdio"`, legacy on the other kinds), `"legacy"` or `"2026-07-28"` (`kind = "http"`
    /// and `"stdio"`).
    pub protocol: Option<String>,
    /// How long `protocol = "auto"`'s probe waits for an answer before it takes the backend
    /// for legacy (default 10 s).
    #[serde(default, with = "humantime_serde")]
    pub probe_timeout: Option<Duration>,
    /// Whether results carry the backend's `serverInfo` in `_meta` (default true).
    pub server_info: Option<bool>,
    /// The endpoint path; required when there is more than one backend.
    pub path: Option<String>,
    /// Where 2024-11-05 HTTP+SSE clients open their stream (GET); with `messages_path`.
    pub sse_path: Option<String>,
    /// Where 2024-11-05 HTTP+SSE clients POST their messages; with `sse_path`.
    pub messages_path: Option<String>,
    /// For `kind = "http"` and `"sse"`: the backend's endpoint (for `sse`, its SSE stream).
    pub url: Option<String>,
    /// For `kind = "http"` and `"sse"`: headers sent on every request to the backend.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// For `kind = "http"` and `"sse"`: `"drop"` (default), `"pass"` or `"replace"`.
    pub authorization: Option<String>,
    /// For `authorization = "replace"`: the credential sent.
    pub authorization_value: Option<String>,
    /// For `kind = "http"` and `"sse"`: TCP and TLS connect (default 5 s).
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    /// For an `https` url: PEM CA certificates trusted instead of the bundled roots.
    pub ca_file: Option<PathBuf>,
    /// For an `https` url: the gateway's PEM certificate chain (mutual TLS).
    pub client_cert_file: Option<PathBuf>,
    /// For an `https` url: the PEM private key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
    /// For `kind = "http"` and `"sse"`: the longest response head (default 4 KiB).
    pub max_response_head_bytes: Option<usize>,
    /// For `kind = "http"`: a GET stream per session for pushes (default true).
    pub standalone_stream: Option<bool>,
    /// For `kind = "http"`: let a parked call's resumable stream go until the retry
    /// (default true).
    pub release_parked_streams: Option<bool>,
    /// For `kind = "builtin"`: answer `initialize` with this version (default: the one asked
    /// for, if the built-in server speaks it).
    pub builtin_protocol: Option<String>,
    /// For `kind = "builtin"`: ask `roots/list` right after initialization.
    #[serde(default)]
    pub builtin_roots_on_init: bool,
    /// How a call waiting for input survives between rounds: "hold", "replay" or "auto".
    pub replay: Option<String>,
    /// Per-tool overrides of `replay`.
    #[serde(default)]
    pub replay_tools: BTreeMap<String, String>,
}

//! Raw -> [`Config`]: reading the file, then one function per section, each filling in its
//! defaults and refusing what is out of range, then the listeners against each other. Sections
//! are checked in the order they are read below, so the first error a file has is the one
//! reported. The `[[backend]]` tables are checked in `backend`; whether their programs can run
//! on this machine, in `host`.

use super::check::{in_range, mcp_path, positive};
use super::env::{self, ADVERTISE_ENV, KEYS_ENV};
use super::{
    Admin, Cache, Config, ConfigError, Fleet, Limits, Log, LogFormat, MAX_JSON_DEPTH,
    PrincipalSource, Server, State, backend, bad, parse_host_port, raw,
};
use crate::wire::hop;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Most worker threads a config may ask for.
const MAX_WORKER_THREADS: usize = 256;

/// The largest `limits.max_reply_bytes`: a reply each client connection may hold.
const MAX_REPLY_BYTES: usize = 1 << 30;

impl Config {
    /// Reads, parses and validates a config file. Whether its backends' programs can run on
    /// this machine is [`Config::check_host`], which `serve` and `check` run next.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad("config", format!("cannot read {}: {e}", path.display())))?;
        let mut raw = read_raw(&text)?;
        env::override_fleet(&mut raw.fleet);
        Config::from_raw(raw, env::var(KEYS_ENV).as_deref())
    }

    /// Parses and validates config text; `env_keys` is the value of [`KEYS_ENV`], if set.
    pub fn parse(text: &str, env_keys: Option<&str>) -> Result<Config, ConfigError> {
        Config::from_raw(read_raw(text)?, env_keys)
    }

    /// Validates a parsed config, section by section; `env_keys` as for [`Config::parse`].
    pub fn from_raw(raw: raw::Raw, env_keys: Option<&str>) -> Result<Config, ConfigError> {
        let listen = listen(&raw.server)?;
        let default_path = default_path(&raw.server)?;
        let server = server(&raw.server, listen)?;
        let principal = principal(&raw.principal)?;
        let mut state = state(&raw.state, env_keys)?;
        let fleet = fleet(&raw.fleet, raw.state.owner.as_deref())?;
        // A requestState names the replica that sealed it.
        state.owner = fleet.replica_id.clone();
        let limits = limits(&raw.limits)?;
        let static_roots = static_roots(&raw.roots)?;
        let cache = cache(&raw.cache)?;
        let log = log(&raw.log)?;
        let admin = admin(&raw.admin)?;
        distinct_listeners(&server, &admin, &fleet)?;
        let backends = backend::validate_all(raw.backends, &default_path, &principal)?;
        Ok(Config {
            server,
            principal,
            state,
            limits,
            static_roots,
            cache,
            log,
            admin,
            fleet,
            backends,
        })
    }
}

/// The TOML text as the raw config. An error names the line it is on and shows it (shortened),
/// so a value of the wrong type (`max_connections = -1`) points at its key.
fn read_raw(text: &str) -> Result<raw::Raw, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let Some(span) = e.span() else {
            return bad("config", e.message());
        };
        let before = text.get(..span.start).unwrap_or_default();
        let line_no = before.matches('\n').count() + 1;
        let line = text.lines().nth(line_no - 1).unwrap_or_default().trim();
        let shown: String = line.chars().take(80).collect();
        let more = if shown.len() < line.len() { "..." } else { "" };
        bad(
            format!("config, line {line_no}"),
            format!("`{shown}{more}`: {}", e.message()),
        )
    })
}

/// `server.listen`: the address of the MCP listener.
fn listen(raw: &raw::Server) -> Result<SocketAddr, ConfigError> {
    let listen = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
    listen.parse().map_err(|_| {
        bad(
            "server.listen",
            format!("`{listen}` is not an address like 127.0.0.1:8080"),
        )
    })
}

/// `server.path`: where a lone backend is served unless it names its own path.
fn default_path(raw: &raw::Server) -> Result<String, ConfigError> {
    let path = raw.path.clone().unwrap_or_else(|| "/mcp".into());
    mcp_path("server.path", &path)?;
    Ok(path)
}

/// The rest of `[server]`: origins, connections and the client-side deadlines.
fn server(raw: &raw::Server, listen: SocketAddr) -> Result<Server, ConfigError> {
    let max_connections = positive("server.max_connections", raw.max_connections, 1024)?;
    Ok(Server {
        listen,
        allowed_origins: raw.allowed_origins.clone().unwrap_or_default(),
        max_connections,
        max_connections_per_address: per_address(raw.max_connections_per_address, max_connections)?,
        shutdown_grace: in_range(
            "server.shutdown_grace",
            raw.shutdown_grace,
            Duration::from_secs(10),
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        header_timeout: client_timeout("server.header_timeout", raw.header_timeout)?,
        body_timeout: client_timeout("server.body_timeout", raw.body_timeout)?,
        write_timeout: client_timeout("server.write_timeout", raw.write_timeout)?,
        worker_threads: worker_threads(raw.worker_threads)?,
    })
}

/// `server.max_connections_per_address`: 1 to `max_connections` (which lifts the cap). The
/// default, a sixteenth of `max_connections` but at least 4, leaves one address well short of
/// the whole listener; 0 is refused rather than read as "no cap".
fn per_address(value: Option<usize>, max_connections: usize) -> Result<usize, ConfigError> {
    let field = "server.max_connections_per_address";
    match value {
        None => Ok((max_connections / 16).max(4).min(max_connections)),
        Some(0) => Err(bad(
            field,
            "must be greater than 0 (server.max_connections lifts the cap)",
        )),
        Some(n) if n > max_connections => Err(bad(
            field,
            format!("at most server.max_connections ({max_connections}), which lifts the cap"),
        )),
        Some(n) => Ok(n),
    }
}

/// A client-side deadline: 30 s unless set, 1 s to 1 h.
fn client_timeout(field: &str, value: Option<Duration>) -> Result<Duration, ConfigError> {
    in_range(
        field,
        value,
        Duration::from_secs(30),
        Duration::from_secs(1),
        Duration::from_secs(3600),
    )
}

/// `server.worker_threads`, or the CPUs this process may use (its affinity and cgroup quota).
fn worker_threads(value: Option<usize>) -> Result<usize, ConfigError> {
    let field = "server.worker_threads";
    match value {
        None => Ok(std::thread::available_parallelism().map_or(1, usize::from)),
        Some(n) if n > MAX_WORKER_THREADS => {
            Err(bad(field, format!("must be at most {MAX_WORKER_THREADS}")))
        }
        Some(n) => positive(field, Some(n), 1),
    }
}

/// `[principal]`: whose a parked call is.
fn principal(raw: &raw::Principal) -> Result<PrincipalSource, ConfigError> {
    match raw.source.as_deref().unwrap_or("authorization") {
        "authorization" => Ok(PrincipalSource::Authorization),
        "anonymous" => Ok(PrincipalSource::Anonymous),
        "header" => {
            let name = raw
                .header
                .as_deref()
                .ok_or_else(|| bad("principal.header", "required when source = \"header\""))?;
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad("principal.header", format!("`{name}` is not a header name")))?;
            Ok(PrincipalSource::Header(name))
        }
        other => Err(bad(
            "principal.source",
            format!("`{other}`: expected \"authorization\", \"header\" or \"anonymous\""),
        )),
    }
}

/// `[state]`: the key ring and how long parked calls live. The owner is left empty for
/// `[fleet]` to name.
fn state(raw: &raw::State, env_keys: Option<&str>) -> Result<State, ConfigError> {
    let (keys, ephemeral) = env::key_ring(&raw.keys, env_keys)?;
    Ok(State {
        keys: Arc::new(keys),
        ephemeral,
        park_ttl: in_range(
            "state.park_ttl",
            raw.park_ttl,
            Duration::from_secs(120),
            Duration::from_secs(1),
            Duration::from_secs(86_400),
        )?,
        coalesce_window: in_range(
            "state.coalesce_window",
            raw.coalesce_window,
            Duration::from_millis(10),
            Duration::ZERO,
            Duration::from_secs(5),
        )?,
        owner: String::new(),
    })
}

/// `[limits]`: the bounds on bodies, nesting, lines, parked calls, waits and tool lists.
fn limits(raw: &raw::Limits) -> Result<Limits, ConfigError> {
    let max_line_bytes = positive("limits.max_line_bytes", raw.max_line_bytes, 4 << 20)?;
    // By default a reply may be the largest result a backend can send: its largest message,
    // and the members the gateway sets on it.
    let largest_result = max_line_bytes.saturating_add(hop::EVENT_SLACK);
    let limits = Limits {
        max_body_bytes: positive("limits.max_body_bytes", raw.max_body_bytes, 1 << 20)?,
        max_json_depth: positive("limits.max_json_depth", raw.max_json_depth, 64)?,
        max_line_bytes,
        max_reply_bytes: in_range(
            "limits.max_reply_bytes",
            raw.max_reply_bytes,
            largest_result.min(MAX_REPLY_BYTES),
            64 << 10,
            MAX_REPLY_BYTES,
        )?,
        max_parked_per_principal: positive(
            "limits.max_parked_per_principal",
            raw.max_parked_per_principal,
            64,
        )?,
        max_parked_total: positive("limits.max_parked_total", raw.max_parked_total, 10_000)?,
        max_input_requests: in_range(
            "limits.max_input_requests",
            raw.max_input_requests,
            32,
            1,
            1024,
        )?,
        queue_wait: in_range(
            "limits.queue_wait",
            raw.queue_wait,
            Duration::from_secs(5),
            Duration::ZERO,
            Duration::from_secs(600),
        )?,
        request_timeout: in_range(
            "limits.request_timeout",
            raw.request_timeout,
            Duration::from_secs(60),
            Duration::from_millis(10),
            Duration::from_secs(3600),
        )?,
        held_roots_wait: in_range(
            "limits.held_roots_wait",
            raw.held_roots_wait,
            Duration::from_secs(30),
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        max_tool_catalogs: in_range(
            "limits.max_tool_catalogs",
            raw.max_tool_catalogs,
            4096,
            1,
            1 << 20,
        )?,
        max_tools_per_catalog: in_range(
            "limits.max_tools_per_catalog",
            raw.max_tools_per_catalog,
            1024,
            1,
            1 << 16,
        )?,
        max_sessions_per_principal: in_range(
            "limits.max_sessions_per_principal",
            raw.max_sessions_per_principal,
            16,
            1,
            1 << 20,
        )?,
        max_sessions_total: in_range(
            "limits.max_sessions_total",
            raw.max_sessions_total,
            1000,
            1,
            1 << 20,
        )?,
        session_idle: in_range(
            "limits.session_idle",
            raw.session_idle,
            Duration::from_secs(600),
            Duration::from_secs(1),
            Duration::from_secs(24 * 3600),
        )?,
    };
    if limits.max_json_depth > MAX_JSON_DEPTH {
        return Err(bad(
            "limits.max_json_depth",
            format!("at most {MAX_JSON_DEPTH} (the JSON parser's own ceiling)"),
        ));
    }
    Ok(limits)
}

/// `[[roots.static]]` as the `roots/list` entries they answer with.
fn static_roots(raw: &raw::Roots) -> Result<Vec<serde_json::Value>, ConfigError> {
    let mut roots = Vec::new();
    for (i, root) in raw.fixed.iter().enumerate() {
        if !root.uri.starts_with("file://") {
            return Err(bad(
                format!("roots.static[{i}].uri"),
                "roots must be file:// URIs",
            ));
        }
        let mut v = serde_json::json!({"uri": root.uri});
        if let Some(name) = &root.name {
            v["name"] = serde_json::json!(name);
        }
        roots.push(v);
    }
    Ok(roots)
}

/// `[cache]`: the caching hint on list results.
fn cache(raw: &raw::Cache) -> Result<Cache, ConfigError> {
    Ok(Cache {
        ttl_ms: u64::try_from(raw.ttl.unwrap_or(Duration::ZERO).as_millis())
            .map_err(|_| bad("cache.ttl", "too large"))?,
        scope: match raw.scope.as_deref().unwrap_or("private") {
            "private" => "private",
            "public" => "public",
            other => {
                return Err(bad(
                    "cache.scope",
                    format!("`{other}`: expected \"private\" or \"public\""),
                ));
            }
        },
    })
}

/// `[log]`: the format and the level.
fn log(raw: &raw::Log) -> Result<Log, ConfigError> {
    Ok(Log {
        format: match raw.format.as_deref().unwrap_or("text") {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(bad(
                    "log.format",
                    format!("`{other}`: expected \"text\" or \"json\""),
                ));
            }
        },
        level: match &raw.level {
            None => "info".into(),
            Some(level) => log_level(level)?,
        },
    })
}

/// `[log] level`: a level, or directives as `RUST_LOG` takes them, each with a level
/// (`mrtr_gateway=debug,hyper=warn`). A bare word that is not a level would read as a target
/// enabled at every level, and the gateway would log nothing of its own: a misspelt level is
/// refused instead.
fn log_level(level: &str) -> Result<String, ConfigError> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let refuse = |why: String| {
        bad(
            "log.level",
            format!(
                "`{level}`: {why} (expected a level such as \"info\", or directives such as \"mrtr_gateway=debug,warn\")"
            ),
        )
    };
    for directive in level.split(',').map(str::trim) {
        let has_level =
            directive.contains('=') || LEVELS.contains(&directive.to_ascii_lowercase().as_str());
        if !has_level {
            return Err(refuse(format!("`{directive}` is not a level")));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(level)
        .map_err(|e| refuse(e.to_string()))?;
    Ok(level.to_owned())
}

/// `[admin]`: the listener for metrics and health, off unless given an address.
fn admin(raw: &raw::Admin) -> Result<Admin, ConfigError> {
    let listen = match raw.listen.as_deref() {
        None => None,
        Some(a) => Some(a.parse().map_err(|_| {
            bad(
                "admin.listen",
                format!("`{a}` is not an address like 127.0.0.1:9090"),
            )
        })?),
    };
    Ok(Admin {
        listen,
        max_connections: positive("admin.max_connections", raw.max_connections, 16)?,
        // Short: probes and scrapers send their request as soon as they connect.
        header_timeout: in_range(
            "admin.header_timeout",
            raw.header_timeout,
            Duration::from_secs(5),
            Duration::from_secs(1),
            Duration::from_secs(60),
        )?,
    })
}

/// The MCP, admin and internal listeners each need an address of their own: two on one port
/// would fail to bind, or (with address reuse) split one listener's connections with the other.
/// Port 0 asks for a free port, a different one for each.
fn distinct_listeners(server: &Server, admin: &Admin, fleet: &Fleet) -> Result<(), ConfigError> {
    let listeners = [
        ("server.listen", Some(server.listen)),
        ("admin.listen", admin.listen),
        ("fleet.internal_listen", fleet.internal_listen),
    ];
    let listeners: Vec<(&str, SocketAddr)> = listeners
        .into_iter()
        .filter_map(|(field, addr)| Some((field, addr?)))
        .collect();
    for (i, (field, addr)) in listeners.iter().enumerate() {
        if let Some((earlier, taken)) = listeners[..i].iter().find(|(_, a)| overlap(*a, *addr)) {
            return Err(bad(
                *field,
                format!(
                    "`{addr}` clashes with {earlier} (`{taken}`): one port on the same address, or on every address (0.0.0.0, ::); give each listener an address of its own"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether two listeners would claim the same socket: one port (not 0), and the same address
/// or an unspecified one (`0.0.0.0`, `::`), which takes the port on every address.
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// Validates `[fleet]`; `state_owner` is the older name of `replica_id`.
fn fleet(raw: &raw::Fleet, state_owner: Option<&str>) -> Result<Fleet, ConfigError> {
    let replica_id = replica_id(raw.replica_id.as_deref(), state_owner)?;
    let internal_listen = internal_listen(raw.internal_listen.as_deref())?;
    let advertise = advertise(raw.advertise.as_deref(), internal_listen)?;
    let max_transcript_bytes = max_transcript_bytes(raw.max_transcript_bytes)?;
    Ok(Fleet {
        replica_id,
        advertise,
        internal_listen,
        drain_grace: in_range(
            "fleet.drain_grace",
            raw.drain_grace,
            Duration::from_secs(20),
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        forward_timeout: in_range(
            "fleet.forward_timeout",
            raw.forward_timeout,
            Duration::from_secs(70),
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )?,
        forward_connect_timeout: in_range(
            "fleet.forward_connect_timeout",
            raw.forward_connect_timeout,
            Duration::from_secs(2),
            Duration::from_millis(10),
            Duration::from_secs(60),
        )?,
        max_clock_skew: in_range(
            "fleet.max_clock_skew",
            raw.max_clock_skew,
            Duration::from_secs(30),
            Duration::from_secs(1),
            Duration::from_secs(600),
        )?,
        max_transcript_bytes,
    })
}

/// This replica's name: `fleet.replica_id` or `state.owner` (they may not differ), else
/// `local`.
fn replica_id(configured: Option<&str>, state_owner: Option<&str>) -> Result<String, ConfigError> {
    let replica_id = match (configured, state_owner) {
        (Some(id), Some(owner)) if id != owner => {
            return Err(bad(
                "fleet.replica_id",
                format!("`{id}` differs from state.owner `{owner}`; set only one of them"),
            ));
        }
        (Some(id), _) | (None, Some(id)) => id.to_owned(),
        (None, None) => "local".to_owned(),
    };
    let id_ok = !replica_id.is_empty()
        && replica_id.len() <= 253
        && replica_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !id_ok {
        return Err(bad(
            "fleet.replica_id",
            format!("`{replica_id}`: use 1 to 253 letters, digits, `-`, `_` and `.`"),
        ));
    }
    Ok(replica_id)
}

/// `fleet.internal_listen`: where forwarded retries arrive; none for a single replica.
fn internal_listen(text: Option<&str>) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let addr = text.parse::<SocketAddr>().map_err(|_| {
        bad(
            "fleet.internal_listen",
            format!("`{text}` is not an address like 0.0.0.0:8081"),
        )
    })?;
    Ok(Some(addr))
}

/// `fleet.advertise`: a plain `host:port`, only beside an internal listener, and required when
/// that listener's address is one the others cannot dial.
fn advertise(
    text: Option<&str>,
    internal_listen: Option<SocketAddr>,
) -> Result<Option<String>, ConfigError> {
    if let Some(text) = text {
        if internal_listen.is_none() {
            return Err(bad(
                "fleet.advertise",
                "needs fleet.internal_listen (nothing would answer there)",
            ));
        }
        parse_host_port(text).ok_or_else(|| {
            bad(
                "fleet.advertise",
                format!("`{text}` is not host:port (a name or IP address, and a port)"),
            )
        })?;
        return Ok(Some(text.to_owned()));
    }
    if let Some(listen) = internal_listen
        && listen.ip().is_unspecified()
    {
        return Err(bad(
            "fleet.advertise",
            format!(
                "required when internal_listen is {listen}: the others need an address they can reach (set it or {ADVERTISE_ENV})"
            ),
        ));
    }
    Ok(None)
}

/// `fleet.max_transcript_bytes`: no larger than a requestState can carry.
fn max_transcript_bytes(value: Option<usize>) -> Result<usize, ConfigError> {
    let max = positive("fleet.max_transcript_bytes", value, 16 * 1024)?;
    if max > crate::seal::MAX_TRANSCRIPT {
        return Err(bad(
            "fleet.max_transcript_bytes",
            format!("at most {}", crate::seal::MAX_TRANSCRIPT),
        ));
    }
    Ok(max)
}

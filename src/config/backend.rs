//! The `[[backend]]` tables: what each backend is (its name, path, transport, pool and replay
//! policy) and the checks that get it there. A setting is refused where it does not belong to
//! the backend's kind, so a typo in `kind` never leaves settings silently unused. The settings
//! of an HTTP backend are checked in `http_backend`.

use super::check::{in_range, mcp_path, positive};
use super::http_backend::{self, Http};
use super::legacy_sse::{self, LegacySse};
use super::{ConfigError, PrincipalSource, bad, raw};
// The built-in legacy server is named through this one path, in `Transport` and
// `builtin_options`.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Default of `max_stderr_line_bytes`.
pub const DEFAULT_STDERR_LINE: usize = 16 * 1024;
/// Default of `write_queue`.
pub const DEFAULT_WRITE_QUEUE: usize = 32;
/// Default of `probe_timeout`: long enough for a server started through `npx` or `uv run` to
/// answer its first line; a legacy server that ignores the probe costs its first call this.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Backend {
    pub name: String,
    pub path: String,
    /// Where 2024-11-05 HTTP+SSE clients reach it too, if anywhere.
    pub legacy_sse: Option<LegacySse>,
    pub transport: Transport,
    pub pool_max: usize,
    /// Sessions one principal's interactive calls (parked ones among them) may hold.
    pub principal_sessions: usize,
    /// Sessions interactive calls never take, so a call that needs no input always finds one.
    pub reserved_sessions: usize,
    pub idle_timeout: Duration,
    /// The version asked for in `initialize`; the server may answer an older one.
    pub protocol_version: &'static str,
    /// The era the backend is driven in, or how it is found out.
    pub protocol: Protocol,
    /// How long `Protocol::Auto`'s probe waits for an answer.
    pub probe_timeout: Duration,
    pub replay: Replay,
    /// Whether results carry the backend's `serverInfo` in `_meta`
    /// (`io.modelcontextprotocol/serverInfo`), `server/discover`'s too.
    pub server_info: bool,
}

#[derive(Debug, Clone)]
pub enum Transport {
    Stdio(Stdio),
    /// The built-in legacy server, run inside this process over in-memory pipes.
    Builtin(mrtr_fixture::Options),
    /// Streamable HTTP (2025-03-26 .. 2025-11-25).
    Http(Http),
    /// HTTP+SSE (2024-11-05): `url` is the SSE endpoint.
    Sse(Http),
}

#[derive(Debug, Clone)]
pub struct Stdio {
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// The longest stderr line logged; the rest of a longer line is dropped.
    pub max_stderr_line_bytes: usize,
    /// Lines waiting to be written to the child's stdin; past them a session waits.
    pub write_queue: usize,
    /// The children a 2026-07-28 backend runs, shared by every principal.
    pub children: usize,
}

/// A backend's `protocol`: the era it speaks, or `Auto` to find out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Probed with `server/discover` before first use (`kind = "http"` and `"stdio"`); legacy
    /// on the other kinds, which are legacy transports or the built-in legacy server.
    Auto,
    /// Driven as a legacy server: `initialize`, sessions, the bridge.
    Legacy,
    /// A 2026-07-28 server: requests are relayed as the client sent them.
    Modern,
}

impl Protocol {
    pub fn as_str(&self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::Legacy => "legacy",
            Protocol::Modern => crate::protocol::MODERN,
        }
    }
}

/// The `kind` of a `[[backend]]`: which transport reaches it, and so which settings it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http,
    Sse,
    Builtin,
}

impl Kind {
    /// `kind`, `stdio` unless set.
    fn parse(field: &dyn Fn(&str) -> String, text: Option<&str>) -> Result<Kind, ConfigError> {
        match text.unwrap_or("stdio") {
            "stdio" => Ok(Kind::Stdio),
            "http" => Ok(Kind::Http),
            "sse" => Ok(Kind::Sse),
            "builtin" => Ok(Kind::Builtin),
            other => Err(bad(
                field("kind"),
                format!("`{other}`: expected \"stdio\", \"http\", \"sse\" or \"builtin\""),
            )),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Stdio => "stdio",
            Kind::Http => "http",
            Kind::Sse => "sse",
            Kind::Builtin => "builtin",
        })
    }
}

/// How a call waiting for input lives between rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The call stays parked on the replica that started it; retries elsewhere are forwarded.
    Hold,
    /// Nothing is kept: the answers so far are sealed into requestState and the call is run
    /// again, on any replica, at every retry.
    Replay,
    /// Replay tools the backend annotates `readOnlyHint` or `idempotentHint`; hold the rest.
    Auto,
}

impl Policy {
    fn parse(field: &str, text: &str) -> Result<Policy, ConfigError> {
        match text {
            "hold" => Ok(Policy::Hold),
            "replay" => Ok(Policy::Replay),
            "auto" => Ok(Policy::Auto),
            other => Err(bad(
                field,
                format!("`{other}`: expected \"hold\", \"replay\" or \"auto\""),
            )),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Policy::Hold => "hold",
            Policy::Replay => "replay",
            Policy::Auto => "auto",
        }
    }
}

/// A backend's replay policy: a default and per-tool overrides.
#[derive(Debug, Clone)]
pub struct Replay {
    pub default: Policy,
    pub tools: BTreeMap<String, Policy>,
}

impl Replay {
    /// The policy for one request: tools by name; prompts and resources have no annotations,
    /// so `auto` holds them.
    pub fn for_request(&self, method: &str, tool: Option<&str>) -> Policy {
        match (method, tool) {
            ("tools/call", Some(name)) => self.tools.get(name).copied().unwrap_or(self.default),
            _ if self.default == Policy::Auto => Policy::Hold,
            _ => self.default,
        }
    }
}

/// Validates every `[[backend]]`, in order; a lone backend serves `default_path` unless it
/// names its own.
pub(super) fn validate_all(
    raw: Vec<raw::Backend>,
    default_path: &str,
    principal: &PrincipalSource,
) -> Result<Vec<Backend>, ConfigError> {
    if raw.is_empty() {
        return Err(bad("backend", "at least one [[backend]] is required"));
    }
    let lone_path = (raw.len() == 1).then_some(default_path);
    let mut backends: Vec<Backend> = Vec::new();
    for (i, b) in raw.into_iter().enumerate() {
        let field = |f: &str| format!("backend[{i}].{f}");
        let backend = validate(&field, b, lone_path, principal, &backends)?;
        backends.push(backend);
    }
    Ok(backends)
}

/// Validates one backend against itself and the ones before it (`others`).
fn validate(
    field: &dyn Fn(&str) -> String,
    b: raw::Backend,
    lone_path: Option<&str>,
    principal: &PrincipalSource,
    others: &[Backend],
) -> Result<Backend, ConfigError> {
    check_name(field, &b.name)?;
    let path = path(field, b.path.as_deref(), lone_path)?;
    check_unique(field, &path, &b.name, others)?;
    let legacy_sse = legacy_sse::validate(
        field,
        b.sse_path.clone(),
        b.messages_path.clone(),
        &path,
        others,
    )?;
    // First: a misspelt kind would otherwise be blamed on the settings of the kind meant.
    let kind = Kind::parse(field, b.kind.as_deref())?;
    check_stdio_only(field, kind, &b)?;
    let builtin = builtin_options(field, kind, &b)?;
    check_http_only(field, kind, &b)?;
    let transport = transport(field, kind, &b, builtin, principal)?;
    let protocol_version = protocol_version(field, b.protocol_version.as_deref())?;
    let protocol = protocol(field, kind, b.protocol.as_deref())?;
    let replay = replay(field, &b)?;
    let pool_max = positive(&field("pool_max"), b.pool_max, 16)?;
    let (principal_sessions, reserved_sessions) = shares(field, &b, pool_max)?;
    Ok(Backend {
        replay,
        pool_max,
        principal_sessions,
        reserved_sessions,
        idle_timeout: in_range(
            &field("idle_timeout"),
            b.idle_timeout,
            Duration::from_secs(300),
            Duration::from_millis(100),
            Duration::from_secs(86_400),
        )?,
        protocol_version,
        protocol,
        probe_timeout: in_range(
            &field("probe_timeout"),
            b.probe_timeout,
            DEFAULT_PROBE_TIMEOUT,
            Duration::from_millis(100),
            Duration::from_secs(600),
        )?,
        server_info: b.server_info.unwrap_or(true),
        name: b.name,
        path,
        legacy_sse,
        transport,
    })
}

/// How the pool is shared: `reserved_sessions` (below `pool_max`, so calls that need no input
/// always have a session to take), then `principal_sessions` (from 1 to what interactive calls
/// may hold in all). The defaults, an eighth and a quarter of the pool, fit any `pool_max`.
fn shares(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
    pool_max: usize,
) -> Result<(usize, usize), ConfigError> {
    let reserved = match b.reserved_sessions {
        None => (pool_max / 8).max(1).min(pool_max - 1),
        Some(n) if n < pool_max => n,
        Some(_) => {
            return Err(bad(
                field("reserved_sessions"),
                format!("must be less than `pool_max` ({pool_max})"),
            ));
        }
    };
    let interactive = pool_max - reserved;
    let principal = match b.principal_sessions {
        None => (pool_max / 4).clamp(1, interactive),
        Some(n) if (1..=interactive).contains(&n) => n,
        Some(_) => {
            return Err(bad(
                field("principal_sessions"),
                format!(
                    "must be between 1 and `pool_max` less `reserved_sessions` ({interactive})"
                ),
            ));
        }
    };
    Ok((principal, reserved))
}

/// A name usable in logs, metrics and the describe output.
fn check_name(field: &dyn Fn(&str) -> String, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(bad(field("name"), "use letters, digits, `-` and `_`"));
    }
    Ok(())
}

/// The path the backend is served at; only a lone backend may leave it out.
fn path(
    field: &dyn Fn(&str) -> String,
    path: Option<&str>,
    lone_path: Option<&str>,
) -> Result<String, ConfigError> {
    let path = match (path, lone_path) {
        (Some(p), _) => p.to_owned(),
        (None, Some(default)) => default.to_owned(),
        (None, None) => {
            return Err(bad(
                field("path"),
                "required when there is more than one backend",
            ));
        }
    };
    mcp_path(&field("path"), &path)?;
    Ok(path)
}

/// No two backends share a path (any of their faces') or a name.
fn check_unique(
    field: &dyn Fn(&str) -> String,
    path: &str,
    name: &str,
    others: &[Backend],
) -> Result<(), ConfigError> {
    if others.iter().any(|o| o.serves(path)) {
        return Err(bad(
            field("path"),
            format!("`{path}` is used by another backend"),
        ));
    }
    if others.iter().any(|o| o.name == name) {
        return Err(bad(
            field("name"),
            format!("`{name}` is used by another backend"),
        ));
    }
    Ok(())
}

/// The child process settings are refused on a backend that runs no child.
fn check_stdio_only(
    field: &dyn Fn(&str) -> String,
    kind: Kind,
    b: &raw::Backend,
) -> Result<(), ConfigError> {
    let set = b.command.is_some()
        || !b.args.is_empty()
        || !b.env.is_empty()
        || b.cwd.is_some()
        || b.max_stderr_line_bytes.is_some()
        || b.write_queue.is_some()
        || b.children.is_some();
    if kind != Kind::Stdio && set {
        return Err(bad(
            field("command"),
            format!(
                "`command`, `args`, `env`, `cwd`, `max_stderr_line_bytes`, `write_queue` and `children` are for stdio backends, not `{kind}`"
            ),
        ));
    }
    Ok(())
}

/// The options the built-in legacy server runs with: its settings are refused on another kind
/// of backend, and its protocol must be one it speaks.
fn builtin_options(
    field: &dyn Fn(&str) -> String,
    kind: Kind,
    b: &raw::Backend,
) -> Result<mrtr_fixture::Options, ConfigError> {
    if kind != Kind::Builtin && (b.builtin_protocol.is_some() || b.builtin_roots_on_init) {
        return Err(bad(
            field("builtin_protocol"),
            format!(
                "`builtin_protocol` and `builtin_roots_on_init` are for builtin backends, not `{kind}`"
            ),
        ));
    }
    let supported = mrtr_fixture::SUPPORTED_PROTOCOL_VERSIONS;
    if let Some(v) = &b.builtin_protocol
        && !supported.contains(&v.as_str())
    {
        return Err(bad(
            field("builtin_protocol"),
            format!("`{v}`: expected one of {}", supported.join(", ")),
        ));
    }
    Ok(mrtr_fixture::Options {
        protocol: b.builtin_protocol.clone(),
        roots_on_init: b.builtin_roots_on_init,
        ..Default::default()
    })
}

/// The HTTP settings are refused on a backend not reached over HTTP, and the stream settings
/// on any but an `http` one.
fn check_http_only(
    field: &dyn Fn(&str) -> String,
    kind: Kind,
    b: &raw::Backend,
) -> Result<(), ConfigError> {
    if matches!(kind, Kind::Http | Kind::Sse) {
        return Ok(());
    }
    let set = b.url.is_some()
        || !b.headers.is_empty()
        || b.authorization.is_some()
        || b.authorization_value.is_some()
        || b.connect_timeout.is_some()
        || b.ca_file.is_some()
        || b.client_cert_file.is_some()
        || b.client_key_file.is_some()
        || b.max_response_head_bytes.is_some();
    if set {
        return Err(bad(
            field("url"),
            format!(
                "`url`, `headers`, `authorization`, `connect_timeout`, `ca_file`, `client_cert_file`, `client_key_file` and `max_response_head_bytes` are for http and sse backends, not `{kind}`"
            ),
        ));
    }
    if let Some(name) = stream_setting(b) {
        return Err(bad(
            field(name),
            format!("only for http backends, not `{kind}`"),
        ));
    }
    Ok(())
}

/// The first of the settings only a Streamable HTTP backend has that is set.
fn stream_setting(b: &raw::Backend) -> Option<&'static str> {
    [
        ("standalone_stream", b.standalone_stream.is_some()),
        ("release_parked_streams", b.release_parked_streams.is_some()),
    ]
    .into_iter()
    .find_map(|(name, set)| set.then_some(name))
}

/// How the backend is reached, by `kind`.
fn transport(
    field: &dyn Fn(&str) -> String,
    kind: Kind,
    b: &raw::Backend,
    builtin: mrtr_fixture::Options,
    principal: &PrincipalSource,
) -> Result<Transport, ConfigError> {
    match kind {
        Kind::Stdio => Ok(Transport::Stdio(stdio(field, b)?)),
        Kind::Builtin => Ok(Transport::Builtin(builtin)),
        Kind::Http => Ok(Transport::Http(http_backend::validate(
            field, b, principal,
        )?)),
        Kind::Sse => {
            if let Some(name) = stream_setting(b) {
                return Err(bad(
                    field(name),
                    "only for http backends (an sse backend has one stream)",
                ));
            }
            Ok(Transport::Sse(http_backend::validate(field, b, principal)?))
        }
    }
}

/// The child process of a stdio backend.
fn stdio(field: &dyn Fn(&str) -> String, b: &raw::Backend) -> Result<Stdio, ConfigError> {
    Ok(Stdio {
        command: b
            .command
            .clone()
            .filter(|c| !c.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| bad(field("command"), "required for a stdio backend"))?,
        args: b.args.clone(),
        env: b.env.clone(),
        cwd: b.cwd.clone(),
        max_stderr_line_bytes: in_range(
            &field("max_stderr_line_bytes"),
            b.max_stderr_line_bytes,
            DEFAULT_STDERR_LINE,
            256,
            1 << 20,
        )?,
        write_queue: in_range(
            &field("write_queue"),
            b.write_queue,
            DEFAULT_WRITE_QUEUE,
            1,
            4096,
        )?,
        children: in_range(&field("children"), b.children, 2, 1, 64)?,
    })
}

/// The version asked for in `initialize`: one of the legacy revisions, the newest unless set.
fn protocol_version(
    field: &dyn Fn(&str) -> String,
    version: Option<&str>,
) -> Result<&'static str, ConfigError> {
    let legacy = crate::protocol::LEGACY;
    match version {
        None => Ok(legacy[0]),
        Some(v) if v == crate::protocol::MODERN => Err(bad(
            field("protocol_version"),
            format!(
                "`{v}` has no `initialize` to ask it in: `protocol_version` is the legacy \
                 version the gateway initializes with; for a 2026-07-28 backend set \
                 `protocol = \"{v}\"` (or leave `protocol = \"auto\"` to probe it)"
            ),
        )),
        Some(v) => legacy.iter().copied().find(|l| *l == v).ok_or_else(|| {
            bad(
                field("protocol_version"),
                format!("`{v}`: expected one of {legacy:?}"),
            )
        }),
    }
}

/// `protocol`, `auto` unless set. Streamable HTTP and stdio backends can be 2026-07-28:
/// HTTP+SSE is a legacy transport, and the built-in server is a legacy one.
fn protocol(
    field: &dyn Fn(&str) -> String,
    kind: Kind,
    text: Option<&str>,
) -> Result<Protocol, ConfigError> {
    let protocol = match text.unwrap_or("auto") {
        "auto" => Protocol::Auto,
        "legacy" => Protocol::Legacy,
        v if v == crate::protocol::MODERN => Protocol::Modern,
        other => {
            return Err(bad(
                field("protocol"),
                format!(
                    "`{other}`: expected \"auto\", \"legacy\" or \"{}\"",
                    crate::protocol::MODERN
                ),
            ));
        }
    };
    if protocol == Protocol::Modern && !matches!(kind, Kind::Http | Kind::Stdio) {
        return Err(bad(
            field("protocol"),
            format!(
                "`{}` is for `kind = \"http\"` and `\"stdio\"` backends: a `{kind}` backend \
                 is driven as legacy (set `protocol = \"legacy\"` or leave it out)",
                crate::protocol::MODERN
            ),
        ));
    }
    Ok(protocol)
}

/// `replay` and its per-tool overrides in `replay_tools`.
fn replay(field: &dyn Fn(&str) -> String, b: &raw::Backend) -> Result<Replay, ConfigError> {
    let mut replay = Replay {
        default: match &b.replay {
            None => Policy::Hold,
            Some(p) => Policy::parse(&field("replay"), p)?,
        },
        tools: BTreeMap::new(),
    };
    for (tool, p) in &b.replay_tools {
        replay.tools.insert(
            tool.clone(),
            Policy::parse(&field(&format!("replay_tools.{tool}")), p)?,
        );
    }
    Ok(replay)
}

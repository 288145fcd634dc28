//! Configuration: the TOML file (`raw`) checked once into a [`Config`] with every default filled
//! in and every value in range. Code past this point never sees a loose option.

pub mod raw;

use crate::seal::{Key, KeyRing};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Environment variable that overrides `state.keys`: `id:secret[,id:secret...]`, first seals.
pub const KEYS_ENV: &str = "MRTR_STATE_KEYS";
/// Environment variable that overrides `fleet.replica_id` (e.g. the pod name).
pub const REPLICA_ID_ENV: &str = "MRTR_REPLICA_ID";
/// Environment variable that overrides `fleet.advertise` (e.g. `$(POD_IP):8081`).
pub const ADVERTISE_ENV: &str = "MRTR_ADVERTISE";

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

/// The admin listener: `/metrics`, `/healthz`, `/readyz`.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `None`: no admin listener.
    pub listen: Option<SocketAddr>,
    pub max_connections: usize,
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

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    /// Exact `Origin` values allowed; empty means loopback origins only; `*` allows any.
    pub allowed_origins: Vec<String>,
    pub max_connections: usize,
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
    pub max_parked_per_principal: usize,
    pub max_parked_total: usize,
    /// Input requests a backend may have outstanding in one call; also the `roots/list`
    /// requests outside any call held per session.
    pub max_input_requests: usize,
    pub queue_wait: Duration,
    pub request_timeout: Duration,
    pub held_roots_wait: Duration,
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

#[derive(Debug, Clone)]
pub struct Backend {
    pub name: String,
    pub path: String,
    pub transport: Transport,
    pub pool_max: usize,
    pub idle_timeout: Duration,
    /// The version asked for in `initialize`; the server may answer an older one.
    pub protocol_version: &'static str,
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

/// An HTTP backend (`kind = "http"` or `"sse"`).
#[derive(Debug, Clone)]
pub struct Http {
    pub url: http::Uri,
    /// Sent on every request to the backend.
    pub headers: http::HeaderMap,
    pub authorization: Authorization,
    pub connect_timeout: Duration,
    /// Roots trusted for an `https` backend instead of the bundled public ones (`ca_file`).
    pub ca: Option<Ca>,
    /// The certificate the gateway shows an `https` backend that asks for one (mutual TLS).
    pub client_cert: Option<ClientCert>,
    /// The longest response head (status line and headers) accepted from the backend. The
    /// head's buffer holds what has arrived, no more, and is let go once the head and what
    /// came with it have been read.
    pub max_response_head_bytes: usize,
    /// Streamable HTTP: keep a GET stream open per session for pushes unrelated to a POST.
    pub standalone_stream: bool,
    /// Streamable HTTP: a parked call whose answer stream carries event ids lets it go until
    /// the retry, and picks it up again with `Last-Event-ID`.
    pub release_parked_streams: bool,
}

impl Http {
    /// The URL, what reaches the backend in `Authorization`, and the CA trusted for `https`.
    fn describe(&self) -> String {
        let ca = match (&self.ca, self.url.scheme_str()) {
            (Some(ca), _) => format!(", trusting {ca:?}"),
            (None, Some("https")) => ", trusting the bundled roots".to_owned(),
            (None, _) => String::new(),
        };
        let cert = match &self.client_cert {
            Some(cert) => format!(", showing {cert:?}"),
            None => String::new(),
        };
        format!(
            "{} (authorization {:?}{ca}{cert})",
            self.url, self.authorization
        )
    }
}

/// A private certificate authority for an `https` backend: the certificates of `ca_file`,
/// read and checked when the config is loaded.
#[derive(Clone)]
pub struct Ca {
    pub path: PathBuf,
    pub roots: Arc<rustls::RootCertStore>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.roots.len();
        let s = if n == 1 { "" } else { "s" };
        write!(f, "{} ({n} root{s})", self.path.display())
    }
}

/// The PEM certificates of `path`, at least one.
fn pem_certificates(
    field: &str,
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, ConfigError> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let name = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(
                field,
                format!("{name}: {}", pem_error(e, "not PEM certificates")),
            )
        })?;
    if certs.is_empty() {
        return Err(bad(field, format!("{name}: no PEM certificate in it")));
    }
    Ok(certs)
}

/// Reads the PEM certificates of `path` as the roots a backend's certificate must chain to.
fn ca_file(field: &str, path: &Path) -> Result<Ca, ConfigError> {
    let name = path.display();
    let certs = pem_certificates(field, path)?;
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| bad(field, format!("{name}: certificate {}: {e}", i + 1)))?;
    }
    Ok(Ca {
        path: path.to_path_buf(),
        roots: Arc::new(roots),
    })
}

/// The gateway's own certificate for an `https` backend that asks for one (mutual TLS): the
/// chain of `client_cert_file` (the gateway's certificate first) with the private key of
/// `client_key_file`, read and checked to belong together when the config is loaded.
#[derive(Clone)]
pub struct ClientCert {
    pub path: PathBuf,
    pub key: Arc<rustls::sign::CertifiedKey>,
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

fn client_cert(
    field: &dyn Fn(&str) -> String,
    cert: &Path,
    key: &Path,
) -> Result<ClientCert, ConfigError> {
    use rustls::pki_types::{PrivateKeyDer, pem::PemObject};
    let key_field = field("client_key_file");
    let chain = pem_certificates(&field("client_cert_file"), cert)?;
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        let reason = match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no PEM private key in it".to_owned(),
            other => pem_error(other, "not a PEM private key"),
        };
        bad(&key_field, format!("{}: {reason}", key.display()))
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        rustls::sign::CertifiedKey::from_der(chain, private, &provider).map_err(|e| {
            bad(
                &key_field,
                format!(
                    "{} does not go with the certificate of {}: {e}",
                    key.display(),
                    cert.display()
                ),
            )
        })?;
    Ok(ClientCert {
        path: cert.to_path_buf(),
        key: Arc::new(certified),
    })
}

/// Why a PEM file could not be read; `not` says what it failed to be.
fn pem_error(e: rustls::pki_types::pem::Error, not: &str) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => format!("cannot read it: {e}"),
        other => format!("{not}: {other:?}"),
    }
}

/// What reaches the backend in its `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub enum Authorization {
    /// Nothing: the client's credential stays at the gateway (the default).
    Drop,
    /// The client's own header (needs `principal.source = "authorization"`, so a session never
    /// carries two credentials).
    Pass,
    /// A configured credential, whatever the client sent.
    Replace(http::HeaderValue),
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Authorization::Drop => "drop",
            Authorization::Pass => "pass",
            Authorization::Replace(_) => "replace (configured credential)",
        })
    }
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
}

/// Default of `max_stderr_line_bytes`.
pub const DEFAULT_STDERR_LINE: usize = 16 * 1024;
/// Default of `write_queue`.
pub const DEFAULT_WRITE_QUEUE: usize = 32;

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

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad("config", format!("cannot read {}: {e}", path.display())))?;
        let mut raw = read_raw(&text)?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if let Some(id) = env(REPLICA_ID_ENV) {
            raw.fleet.replica_id = Some(id);
        }
        if let Some(addr) = env(ADVERTISE_ENV) {
            raw.fleet.advertise = Some(addr);
        }
        Config::from_raw(raw, env(KEYS_ENV).as_deref())
    }

    /// Parses and validates config text; `env_keys` is the value of [`KEYS_ENV`], if set.
    pub fn parse(text: &str, env_keys: Option<&str>) -> Result<Config, ConfigError> {
        Config::from_raw(read_raw(text)?, env_keys)
    }

    pub fn from_raw(raw: raw::Raw, env_keys: Option<&str>) -> Result<Config, ConfigError> {
        let listen = raw.server.listen.as_deref().unwrap_or("127.0.0.1:8080");
        let listen: SocketAddr = listen.parse().map_err(|_| {
            bad(
                "server.listen",
                format!("`{listen}` is not an address like 127.0.0.1:8080"),
            )
        })?;
        let default_path = raw.server.path.clone().unwrap_or_else(|| "/mcp".into());
        check_path("server.path", &default_path)?;
        let server = Server {
            listen,
            allowed_origins: raw.server.allowed_origins.unwrap_or_default(),
            max_connections: positive("server.max_connections", raw.server.max_connections, 1024)?,
            shutdown_grace: in_range(
                "server.shutdown_grace",
                raw.server.shutdown_grace,
                Duration::from_secs(10),
                Duration::ZERO,
                Duration::from_secs(3600),
            )?,
            header_timeout: client_timeout("server.header_timeout", raw.server.header_timeout)?,
            body_timeout: client_timeout("server.body_timeout", raw.server.body_timeout)?,
            write_timeout: client_timeout("server.write_timeout", raw.server.write_timeout)?,
            worker_threads: worker_threads(raw.server.worker_threads)?,
        };

        let principal = match raw.principal.source.as_deref().unwrap_or("authorization") {
            "authorization" => PrincipalSource::Authorization,
            "anonymous" => PrincipalSource::Anonymous,
            "header" => {
                let name =
                    raw.principal.header.as_deref().ok_or_else(|| {
                        bad("principal.header", "required when source = \"header\"")
                    })?;
                PrincipalSource::Header(http::HeaderName::from_bytes(name.as_bytes()).map_err(
                    |_| bad("principal.header", format!("`{name}` is not a header name")),
                )?)
            }
            other => {
                return Err(bad(
                    "principal.source",
                    format!("`{other}`: expected \"authorization\", \"header\" or \"anonymous\""),
                ));
            }
        };

        let (keys, ephemeral) = key_ring(&raw.state.keys, env_keys)?;
        let mut state = State {
            keys: Arc::new(keys),
            ephemeral,
            park_ttl: in_range(
                "state.park_ttl",
                raw.state.park_ttl,
                Duration::from_secs(120),
                Duration::from_secs(1),
                Duration::from_secs(86_400),
            )?,
            coalesce_window: in_range(
                "state.coalesce_window",
                raw.state.coalesce_window,
                Duration::from_millis(10),
                Duration::ZERO,
                Duration::from_secs(5),
            )?,
            owner: String::new(),
        };
        let fleet = fleet(&raw.fleet, raw.state.owner.as_deref())?;
        state.owner = fleet.replica_id.clone();

        let limits = Limits {
            max_body_bytes: positive("limits.max_body_bytes", raw.limits.max_body_bytes, 1 << 20)?,
            max_json_depth: positive("limits.max_json_depth", raw.limits.max_json_depth, 64)?,
            max_line_bytes: positive("limits.max_line_bytes", raw.limits.max_line_bytes, 4 << 20)?,
            max_parked_per_principal: positive(
                "limits.max_parked_per_principal",
                raw.limits.max_parked_per_principal,
                64,
            )?,
            max_parked_total: positive(
                "limits.max_parked_total",
                raw.limits.max_parked_total,
                10_000,
            )?,
            max_input_requests: in_range(
                "limits.max_input_requests",
                raw.limits.max_input_requests,
                32,
                1,
                1024,
            )?,
            queue_wait: in_range(
                "limits.queue_wait",
                raw.limits.queue_wait,
                Duration::from_secs(5),
                Duration::ZERO,
                Duration::from_secs(600),
            )?,
            request_timeout: in_range(
                "limits.request_timeout",
                raw.limits.request_timeout,
                Duration::from_secs(60),
                Duration::from_millis(10),
                Duration::from_secs(3600),
            )?,
            held_roots_wait: in_range(
                "limits.held_roots_wait",
                raw.limits.held_roots_wait,
                Duration::from_secs(30),
                Duration::ZERO,
                Duration::from_secs(3600),
            )?,
        };
        if limits.max_json_depth > MAX_JSON_DEPTH {
            return Err(bad(
                "limits.max_json_depth",
                format!("at most {MAX_JSON_DEPTH} (the JSON parser's own ceiling)"),
            ));
        }

        let mut static_roots = Vec::new();
        for (i, root) in raw.roots.fixed.iter().enumerate() {
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
            static_roots.push(v);
        }

        let cache = Cache {
            ttl_ms: u64::try_from(raw.cache.ttl.unwrap_or(Duration::ZERO).as_millis())
                .map_err(|_| bad("cache.ttl", "too large"))?,
            scope: match raw.cache.scope.as_deref().unwrap_or("private") {
                "private" => "private",
                "public" => "public",
                other => {
                    return Err(bad(
                        "cache.scope",
                        format!("`{other}`: expected \"private\" or \"public\""),
                    ));
                }
            },
        };

        let log = Log {
            format: match raw.log.format.as_deref().unwrap_or("text") {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(bad(
                        "log.format",
                        format!("`{other}`: expected \"text\" or \"json\""),
                    ));
                }
            },
            level: match raw.log.level {
                None => "info".into(),
                Some(level) => log_level(&level)?,
            },
        };

        let admin = Admin {
            listen: match raw.admin.listen.as_deref() {
                None => None,
                Some(a) => Some(a.parse().map_err(|_| {
                    bad(
                        "admin.listen",
                        format!("`{a}` is not an address like 127.0.0.1:9090"),
                    )
                })?),
            },
            max_connections: positive("admin.max_connections", raw.admin.max_connections, 16)?,
        };

        if raw.backends.is_empty() {
            return Err(bad("backend", "at least one [[backend]] is required"));
        }
        let single = raw.backends.len() == 1;
        let mut backends: Vec<Backend> = Vec::new();
        for (i, b) in raw.backends.into_iter().enumerate() {
            let field = |f: &str| format!("backend[{i}].{f}");
            if b.name.is_empty()
                || !b
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(bad(field("name"), "use letters, digits, `-` and `_`"));
            }
            let path = match (b.path.clone(), single) {
                (Some(p), _) => p,
                (None, true) => default_path.clone(),
                (None, false) => {
                    return Err(bad(
                        field("path"),
                        "required when there is more than one backend",
                    ));
                }
            };
            check_path(&field("path"), &path)?;
            if backends.iter().any(|o| o.path == path) {
                return Err(bad(
                    field("path"),
                    format!("`{path}` is used by another backend"),
                ));
            }
            if backends.iter().any(|o| o.name == b.name) {
                return Err(bad(
                    field("name"),
                    format!("`{}` is used by another backend", b.name),
                ));
            }
            let kind = b.kind.as_deref().unwrap_or("stdio");
            if kind != "stdio"
                && (b.command.is_some()
                    || !b.args.is_empty()
                    || !b.env.is_empty()
                    || b.cwd.is_some()
                    || b.max_stderr_line_bytes.is_some()
                    || b.write_queue.is_some())
            {
                return Err(bad(
                    field("command"),
                    format!(
                        "`command`, `args`, `env`, `cwd`, `max_stderr_line_bytes` and `write_queue` are for stdio backends, not `{kind}`"
                    ),
                ));
            }
            if kind != "builtin" && (b.builtin_protocol.is_some() || b.builtin_roots_on_init) {
                return Err(bad(
                    field("builtin_protocol"),
                    format!(
                        "`builtin_protocol` and `builtin_roots_on_init` are for builtin backends, not `{kind}`"
                    ),
                ));
            }
            if let Some(v) = &b.builtin_protocol
                && !mrtr_fixture::SUPPORTED_PROTOCOL_VERSIONS.contains(&v.as_str())
            {
                return Err(bad(
                    field("builtin_protocol"),
                    format!(
                        "`{v}`: expected one of {}",
                        mrtr_fixture::SUPPORTED_PROTOCOL_VERSIONS.join(", ")
                    ),
                ));
            }
            if !matches!(kind, "http" | "sse")
                && (b.url.is_some()
                    || !b.headers.is_empty()
                    || b.authorization.is_some()
                    || b.authorization_value.is_some()
                    || b.connect_timeout.is_some()
                    || b.ca_file.is_some()
                    || b.client_cert_file.is_some()
                    || b.client_key_file.is_some()
                    || b.max_response_head_bytes.is_some())
            {
                return Err(bad(
                    field("url"),
                    format!(
                        "`url`, `headers`, `authorization`, `connect_timeout`, `ca_file`, `client_cert_file`, `client_key_file` and `max_response_head_bytes` are for http and sse backends, not `{kind}`"
                    ),
                ));
            }
            if !matches!(kind, "http" | "sse")
                && let Some(name) = [
                    ("standalone_stream", b.standalone_stream.is_some()),
                    ("release_parked_streams", b.release_parked_streams.is_some()),
                ]
                .into_iter()
                .find_map(|(name, set)| set.then_some(name))
            {
                return Err(bad(
                    field(name),
                    format!("only for http backends, not `{kind}`"),
                ));
            }
            let transport = match kind {
                "stdio" => Transport::Stdio(Stdio {
                    command: b
                        .command
                        .filter(|c| !c.is_empty())
                        .map(PathBuf::from)
                        .ok_or_else(|| bad(field("command"), "required for a stdio backend"))?,
                    args: b.args,
                    env: b.env,
                    cwd: b.cwd,
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
                }),
                "builtin" => Transport::Builtin(mrtr_fixture::Options {
                    protocol: b.builtin_protocol,
                    roots_on_init: b.builtin_roots_on_init,
                    ..Default::default()
                }),
                "http" | "sse" => {
                    for (name, set) in [
                        ("standalone_stream", b.standalone_stream.is_some()),
                        ("release_parked_streams", b.release_parked_streams.is_some()),
                    ] {
                        if kind == "sse" && set {
                            return Err(bad(
                                field(name),
                                "only for http backends (an sse backend has one stream)",
                            ));
                        }
                    }
                    let http = http_backend(&field, &b, &principal)?;
                    if kind == "http" {
                        Transport::Http(http)
                    } else {
                        Transport::Sse(http)
                    }
                }
                other => {
                    return Err(bad(
                        field("kind"),
                        format!("`{other}`: expected \"stdio\", \"http\", \"sse\" or \"builtin\""),
                    ));
                }
            };
            let protocol_version = match b.protocol_version.as_deref() {
                None => crate::protocol::LEGACY[0],
                Some(v) => crate::protocol::LEGACY
                    .iter()
                    .copied()
                    .find(|l| *l == v)
                    .ok_or_else(|| {
                        bad(
                            field("protocol_version"),
                            format!("`{v}`: expected one of {:?}", crate::protocol::LEGACY),
                        )
                    })?,
            };
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
            backends.push(Backend {
                replay,
                name: b.name,
                path,
                transport,
                pool_max: positive(&field("pool_max"), b.pool_max, 16)?,
                idle_timeout: in_range(
                    &field("idle_timeout"),
                    b.idle_timeout,
                    Duration::from_secs(300),
                    Duration::from_millis(100),
                    Duration::from_secs(86_400),
                )?,
                protocol_version,
                server_info: b.server_info.unwrap_or(true),
            });
        }

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

    /// The resolved settings, for `check`; secrets are never printed.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "listen            {}", self.server.listen);
        let _ = writeln!(s, "worker threads    {}", self.server.worker_threads);
        let _ = writeln!(
            s,
            "client timeouts   head {:?}, body {:?}, write {:?}",
            self.server.header_timeout, self.server.body_timeout, self.server.write_timeout
        );
        let _ = writeln!(
            s,
            "allowed origins   {}",
            if self.server.allowed_origins.is_empty() {
                "loopback only".to_owned()
            } else {
                self.server.allowed_origins.join(", ")
            }
        );
        let _ = writeln!(
            s,
            "admin             {}",
            self.admin
                .listen
                .map_or_else(|| "off".to_owned(), |a| a.to_string())
        );
        let _ = writeln!(s, "principal         {:?}", self.principal);
        let _ = writeln!(
            s,
            "sealing key       {}{}",
            self.state.keys.sealing_key_id(),
            if self.state.ephemeral {
                " (ephemeral: retries fail after a restart)"
            } else {
                ""
            }
        );
        let _ = writeln!(s, "replica           {}", self.fleet.replica_id);
        match (&self.fleet.internal_listen, &self.fleet.advertise) {
            (Some(listen), advertise) => {
                let _ = writeln!(
                    s,
                    "internal listen   {listen} (advertised as {})",
                    advertise.as_deref().unwrap_or("the bound address")
                );
                let _ = writeln!(
                    s,
                    "forward timeout   {:?}{}",
                    self.fleet.forward_timeout,
                    if self.fleet.forward_timeout <= self.limits.request_timeout {
                        " (not above limits.request_timeout: a forwarded round that runs that \
                         long fails)"
                    } else {
                        ""
                    }
                );
            }
            (None, _) => {
                let _ = writeln!(s, "internal listen   none (single replica)");
            }
        }
        let _ = writeln!(s, "drain grace       {:?}", self.fleet.drain_grace);
        let _ = writeln!(s, "park ttl          {:?}", self.state.park_ttl);
        let _ = writeln!(s, "coalesce window   {:?}", self.state.coalesce_window);
        let _ = writeln!(s, "limits            {:?}", self.limits);
        let _ = writeln!(s, "static roots      {}", self.static_roots.len());
        let _ = writeln!(
            s,
            "cache             ttlMs={} scope={}",
            self.cache.ttl_ms, self.cache.scope
        );
        for b in &self.backends {
            let target = match &b.transport {
                Transport::Stdio(t) => {
                    format!("stdio {} {}", t.command.display(), t.args.join(" "))
                }
                Transport::Builtin(_) => "built-in legacy server".to_owned(),
                Transport::Http(h) => format!("http {}", h.describe()),
                Transport::Sse(h) => format!("sse {}", h.describe()),
            };
            let _ = writeln!(
                s,
                "backend {:<9} {} -> {target} (pool {}, idle {:?}, asks {}, {}{})",
                b.name,
                b.path,
                b.pool_max,
                b.idle_timeout,
                b.protocol_version,
                b.replay.default.as_str(),
                if b.server_info {
                    ""
                } else {
                    ", serverInfo not passed on"
                }
            );
        }
        s
    }
}

/// Validates `[fleet]`; `state_owner` is the older name of `replica_id`.
fn fleet(raw: &raw::Fleet, state_owner: Option<&str>) -> Result<Fleet, ConfigError> {
    let replica_id = match (raw.replica_id.as_deref(), state_owner) {
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
    let internal_listen = match raw.internal_listen.as_deref() {
        None => None,
        Some(text) => Some(text.parse::<SocketAddr>().map_err(|_| {
            bad(
                "fleet.internal_listen",
                format!("`{text}` is not an address like 0.0.0.0:8081"),
            )
        })?),
    };
    let advertise = match raw.advertise.as_deref() {
        None => None,
        Some(text) => {
            if internal_listen.is_none() {
                return Err(bad(
                    "fleet.advertise",
                    "needs fleet.internal_listen (nothing would answer there)",
                ));
            }
            crate::fleet::parse_host_port(text).ok_or_else(|| {
                bad(
                    "fleet.advertise",
                    format!("`{text}` is not host:port (a name or IP address, and a port)"),
                )
            })?;
            Some(text.to_owned())
        }
    };
    if let Some(listen) = internal_listen
        && advertise.is_none()
        && listen.ip().is_unspecified()
    {
        return Err(bad(
            "fleet.advertise",
            format!(
                "required when internal_listen is {listen}: the others need an address they can reach (set it or {ADVERTISE_ENV})"
            ),
        ));
    }
    let max_transcript_bytes = positive(
        "fleet.max_transcript_bytes",
        raw.max_transcript_bytes,
        16 * 1024,
    )?;
    if max_transcript_bytes > crate::seal::MAX_TRANSCRIPT {
        return Err(bad(
            "fleet.max_transcript_bytes",
            format!("at most {}", crate::seal::MAX_TRANSCRIPT),
        ));
    }
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

/// Validates the settings of an `http` or `sse` backend.
fn http_backend(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
    principal: &PrincipalSource,
) -> Result<Http, ConfigError> {
    let text = b
        .url
        .as_deref()
        .ok_or_else(|| bad(field("url"), "required for an http or sse backend"))?;
    let url: http::Uri = text
        .parse()
        .map_err(|_| bad(field("url"), format!("`{text}` is not a URL")))?;
    if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
        return Err(bad(
            field("url"),
            format!("`{text}`: expected an http:// or https:// URL with a host"),
        ));
    }
    // Not echoed: it holds a credential.
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(bad(
            field("url"),
            "a user or password in the URL is not sent to the backend: give the credential with \
             `authorization = \"replace\"` and `authorization_value`",
        ));
    }
    let mut headers = http::HeaderMap::new();
    for (name, value) in &b.headers {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(field("headers"), format!("`{name}` is not a header name")))?;
        if is_managed_header(&header) {
            return Err(bad(
                field("headers"),
                format!("`{name}` is set by the gateway (use `authorization` for credentials)"),
            ));
        }
        let value = http::HeaderValue::from_str(value).map_err(|_| {
            bad(
                field("headers"),
                format!("the value of `{name}` is not a valid header value"),
            )
        })?;
        headers.insert(header, value);
    }
    let authorization = match (
        b.authorization.as_deref().unwrap_or("drop"),
        &b.authorization_value,
    ) {
        ("drop", None) => Authorization::Drop,
        ("pass", None) => {
            if *principal != PrincipalSource::Authorization {
                return Err(bad(
                    field("authorization"),
                    "\"pass\" needs principal.source = \"authorization\", so one upstream session never carries two credentials",
                ));
            }
            Authorization::Pass
        }
        ("replace", Some(v)) => Authorization::Replace(
            http::HeaderValue::from_str(v)
                .map_err(|_| bad(field("authorization_value"), "not a valid header value"))?,
        ),
        ("replace", None) => {
            return Err(bad(
                field("authorization_value"),
                "required when authorization = \"replace\"",
            ));
        }
        ("drop" | "pass", Some(_)) => {
            return Err(bad(
                field("authorization_value"),
                "only used with authorization = \"replace\"",
            ));
        }
        (other, _) => {
            return Err(bad(
                field("authorization"),
                format!("`{other}`: expected \"drop\", \"pass\" or \"replace\""),
            ));
        }
    };
    let ca = match (&b.ca_file, url.scheme_str()) {
        (None, _) => None,
        (Some(path), Some("https")) => Some(ca_file(&field("ca_file"), path)?),
        (Some(_), _) => return Err(bad(field("ca_file"), "only used with an https:// url")),
    };
    let client_cert = match (&b.client_cert_file, &b.client_key_file) {
        (None, None) => None,
        (Some(_), _) | (_, Some(_)) if url.scheme_str() != Some("https") => {
            return Err(bad(
                field("client_cert_file"),
                "only used with an https:// url",
            ));
        }
        (Some(cert), Some(key)) => Some(client_cert(field, cert, key)?),
        (Some(_), None) => {
            return Err(bad(
                field("client_key_file"),
                "required with client_cert_file",
            ));
        }
        (None, Some(_)) => {
            return Err(bad(
                field("client_cert_file"),
                "required with client_key_file",
            ));
        }
    };
    Ok(Http {
        url,
        headers,
        authorization,
        connect_timeout: in_range(
            &field("connect_timeout"),
            b.connect_timeout,
            Duration::from_secs(5),
            Duration::from_millis(10),
            Duration::from_secs(300),
        )?,
        ca,
        client_cert,
        max_response_head_bytes: in_range(
            &field("max_response_head_bytes"),
            b.max_response_head_bytes,
            DEFAULT_RESPONSE_HEAD,
            1024,
            1 << 20,
        )?,
        standalone_stream: b.standalone_stream.unwrap_or(true),
        release_parked_streams: b.release_parked_streams.unwrap_or(true),
    })
}

/// Headers the HTTP transports set themselves.
fn is_managed_header(name: &http::HeaderName) -> bool {
    [
        "authorization",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "content-type",
        "accept",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
    ]
    .contains(&name.as_str())
}

fn check_path(field: &str, path: &str) -> Result<(), ConfigError> {
    if !path.starts_with('/') || path.contains(char::is_whitespace) {
        return Err(bad(
            field,
            format!("`{path}` must start with `/` and hold no spaces"),
        ));
    }
    Ok(())
}

fn positive(field: &str, value: Option<usize>, default: usize) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(0) => Err(bad(field, "must be greater than 0")),
        Some(v) => Ok(v),
    }
}

/// `max_response_head_bytes` unless configured: room for the response heads of common servers
/// and proxies.
pub const DEFAULT_RESPONSE_HEAD: usize = 4096;

/// Most worker threads a config may ask for.
const MAX_WORKER_THREADS: usize = 256;

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

/// A value (a duration, a byte count) from `min` to `max`, or `default`.
fn in_range<T: PartialOrd + Copy + std::fmt::Debug>(
    field: &str,
    value: Option<T>,
    default: T,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(bad(field, format!("must be between {min:?} and {max:?}")));
    }
    Ok(v)
}

/// The deepest nesting `serde_json` parses.
pub const MAX_JSON_DEPTH: usize = 127;

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

fn key_ring(
    entries: &[raw::KeyEntry],
    env_keys: Option<&str>,
) -> Result<(KeyRing, bool), ConfigError> {
    let mut keys = Vec::new();
    match env_keys.filter(|s| !s.trim().is_empty()) {
        Some(list) => {
            for item in list.split(',') {
                let (id, secret) = item
                    .trim()
                    .split_once(':')
                    .ok_or_else(|| bad(KEYS_ENV, "expected id:secret[,id:secret...]"))?;
                keys.push(Key::from_base64(id, secret).map_err(|e| bad(KEYS_ENV, e.to_string()))?);
            }
        }
        None => {
            for (i, k) in entries.iter().enumerate() {
                keys.push(
                    Key::from_base64(&k.id, &k.secret)
                        .map_err(|e| bad(format!("state.keys[{i}]"), e.to_string()))?,
                );
            }
        }
    }
    if keys.is_empty() {
        return Ok((KeyRing::ephemeral(), true));
    }
    KeyRing::new(keys)
        .map(|r| (r, false))
        .map_err(|e| bad("state.keys", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[[backend]]\nname = \"b\"\ncommand = \"server\"\n";

    #[test]
    fn a_minimal_config_gets_safe_defaults() {
        let c = Config::parse(MINIMAL, None).unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.backends[0].path, "/mcp");
        assert_eq!(c.limits.max_body_bytes, 1 << 20);
        assert!(c.state.ephemeral);
        assert_eq!(c.principal, PrincipalSource::Authorization);
        assert_eq!(c.admin.listen, None, "no admin listener unless asked for");
        assert_eq!(c.server.header_timeout, Duration::from_secs(30));
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(c.server.worker_threads, cpus, "one worker per usable CPU");
        let one = Config::parse(&format!("[server]\nworker_threads = 1\n{MINIMAL}"), None);
        assert_eq!(one.unwrap().server.worker_threads, 1);
        let c = Config::parse(
            &format!("[admin]\nlisten = \"127.0.0.1:9090\"\n{MINIMAL}"),
            None,
        )
        .unwrap();
        assert_eq!(c.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert!(
            c.backends[0].server_info,
            "results carry serverInfo unless told not to"
        );
        assert!(!c.describe().contains("serverInfo"));
        let off = Config::parse(&format!("{MINIMAL}server_info = false\n"), None).unwrap();
        assert!(!off.backends[0].server_info);
        assert!(off.describe().contains("serverInfo not passed on"));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("[server]\nlisten = \"nope\"\n", "server.listen"),
            ("[limits]\nmax_body_bytes = 0\n", "limits.max_body_bytes"),
            ("[principal]\nsource = \"header\"\n", "principal.header"),
            ("[state]\npark_ttl = \"0s\"\n", "state.park_ttl"),
            ("[admin]\nlisten = \"9090\"\n", "admin.listen"),
            ("[server]\nworker_threads = 0\n", "server.worker_threads"),
            (
                "[server]\nheader_timeout = \"0s\"\n",
                "server.header_timeout",
            ),
            (
                "[server]\nworker_threads = 100000\n",
                "server.worker_threads",
            ),
            (
                "[state]\nkeys = [{ id = \"k\", secret = \"short\" }]\n",
                "state.keys[0]",
            ),
            // A misspelt level would turn every log of the gateway off.
            ("[log]\nlevel = \"verbose\"\n", "log.level"),
            ("[log]\nlevel = \"info,hyper\"\n", "log.level"),
            ("[log]\nlevel = \"mrtr_gateway=loud\"\n", "log.level"),
        ];
        for (text, field) in cases {
            let err = Config::parse(&format!("{text}{MINIMAL}"), None).unwrap_err();
            assert_eq!(err.field, field, "{text}: {err}");
        }
        for level in ["debug", "WARN", "mrtr_gateway=debug,warn", "off"] {
            let c = Config::parse(&format!("[log]\nlevel = \"{level}\"\n{MINIMAL}"), None);
            assert_eq!(c.expect(level).log.level, level);
        }
        let err = Config::parse("", None).unwrap_err();
        assert_eq!(err.field, "backend");
        let err = Config::parse("[server]\nlisten2 = 1\n", None).unwrap_err();
        assert!(err.reason.contains("listen2"), "{err}");
        let err = Config::parse(&format!("[admin]\nport = 1\n{MINIMAL}"), None).unwrap_err();
        assert!(err.reason.contains("port"), "{err}");
    }

    #[test]
    fn http_backends_are_checked_field_by_field() {
        let http = |extra: &str| {
            Config::parse(
                &format!("[[backend]]\nname = \"h\"\nkind = \"http\"\n{extra}"),
                None,
            )
        };
        let ok =
            http("url = \"https://mcp.internal:8443/mcp\"\nheaders = { \"X-Team\" = \"a\" }\n")
                .unwrap();
        let Transport::Http(h) = &ok.backends[0].transport else {
            panic!("an http backend")
        };
        assert_eq!(h.authorization, Authorization::Drop);
        assert_eq!(h.connect_timeout, Duration::from_secs(5));
        assert_eq!(h.max_response_head_bytes, 4096);
        assert_eq!(h.headers["x-team"], "a");
        let cases = [
            ("", "backend[0].url"),
            ("url = \"ftp://x/y\"\n", "backend[0].url"),
            (
                "url = \"http://x/mcp\"\ncommand = \"srv\"\n",
                "backend[0].command",
            ),
            (
                "url = \"http://x/mcp\"\nheaders = { \"Mcp-Session-Id\" = \"s\" }\n",
                "backend[0].headers",
            ),
            (
                "url = \"http://x/mcp\"\nauthorization = \"replace\"\n",
                "backend[0].authorization_value",
            ),
            (
                "url = \"http://x/mcp\"\nauthorization = \"forward\"\n",
                "backend[0].authorization",
            ),
            (
                "url = \"http://x/mcp\"\nconnect_timeout = \"0s\"\n",
                "backend[0].connect_timeout",
            ),
            (
                "url = \"http://x/mcp\"\nmax_response_head_bytes = 512\n",
                "backend[0].max_response_head_bytes",
            ),
            (
                "url = \"http://x/mcp\"\nmax_response_head_bytes = 2097152\n",
                "backend[0].max_response_head_bytes",
            ),
            (
                "url = \"http://x/mcp\"\nidle_timeout = \"0s\"\n",
                "backend[0].idle_timeout",
            ),
        ];
        for (extra, field) in cases {
            assert_eq!(http(extra).unwrap_err().field, field, "{extra}");
        }
        // A credential in the URL would not be sent, and is not repeated back.
        let err = http("url = \"http://user:pa55@x/mcp\"\n").unwrap_err();
        assert_eq!(err.field, "backend[0].url");
        assert!(!err.to_string().contains("pa55"), "{err}");
        let err = Config::parse(
            "[principal]\nsource = \"anonymous\"\n[[backend]]\nname = \"h\"\nkind = \"sse\"\nurl = \"http://x/sse\"\nauthorization = \"pass\"\n",
            None,
        )
        .unwrap_err();
        assert_eq!(err.field, "backend[0].authorization");
        let err = Config::parse(
            "[[backend]]\nname = \"s\"\ncommand = \"srv\"\nurl = \"http://x/mcp\"\n",
            None,
        )
        .unwrap_err();
        assert_eq!(err.field, "backend[0].url");
    }

    #[test]
    fn a_private_ca_file_is_read_and_checked_with_the_config() {
        let dir = std::env::temp_dir().join(format!("mrtr-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pem = |name: &str| {
            rcgen::generate_simple_self_signed(vec![name.to_owned()])
                .unwrap()
                .cert
                .pem()
        };
        let write = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text).unwrap();
            path
        };
        let two = write("two.pem", &(pem("a.internal") + &pem("b.internal")));
        let none = write("none.pem", "no certificate here\n");
        let garbled = write(
            "garbled.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let parse = |url: &str, kind: &str, ca: &std::path::Path| {
            Config::parse(
                &format!(
                    "[[backend]]\nname = \"h\"\nkind = \"{kind}\"\nurl = \"{url}\"\nca_file = {:?}\n",
                    ca.display().to_string()
                ),
                None,
            )
        };
        let ok = parse("https://mcp.internal/mcp", "http", &two).unwrap();
        let Transport::Http(h) = &ok.backends[0].transport else {
            panic!("an http backend")
        };
        assert_eq!(h.ca.as_ref().map(|ca| ca.roots.len()), Some(2));
        let described = ok.describe();
        assert!(
            described.contains(&format!("trusting {} (2 roots)", two.display())),
            "{described}"
        );
        let public = Config::parse(
            "[[backend]]\nname = \"h\"\nkind = \"http\"\nurl = \"https://x/mcp\"\n",
            None,
        )
        .unwrap();
        assert!(public.describe().contains("trusting the bundled roots"));
        let ok = parse("https://mcp.internal/sse", "sse", &two).unwrap();
        assert!(matches!(&ok.backends[0].transport, Transport::Sse(h) if h.ca.is_some()));
        let cases = [
            (dir.join("missing.pem"), "https://x/mcp", "cannot read it"),
            (none, "https://x/mcp", "no PEM certificate"),
            (garbled, "https://x/mcp", "certificate 1"),
            (two.clone(), "http://x/mcp", "https:// url"),
        ];
        for (path, url, says) in cases {
            let err = parse(url, "http", &path).unwrap_err();
            assert_eq!(err.field, "backend[0].ca_file", "{path:?}");
            assert!(err.to_string().contains(says), "{path:?}: {err}");
        }
        // Not for a backend that is not reached over HTTP.
        let err = Config::parse(
            &format!(
                "[[backend]]\nname = \"s\"\ncommand = \"srv\"\nca_file = {:?}\n",
                two.display().to_string()
            ),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("ca_file"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_client_certificate_and_its_key_are_read_and_matched_with_the_config() {
        let dir = std::env::temp_dir().join(format!("mrtr-client-cert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text).unwrap();
            path
        };
        let made = rcgen::generate_simple_self_signed(vec!["gateway".to_owned()]).unwrap();
        let cert = write("client.pem", &made.cert.pem());
        let key = write("client.key", &made.signing_key.serialize_pem());
        let other = write(
            "other.key",
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
        );
        let nothing = write("nothing.key", "no key here\n");
        let parse = |url: &str, cert: Option<&std::path::Path>, key: Option<&std::path::Path>| {
            let mut text = format!("[[backend]]\nname = \"h\"\nkind = \"http\"\nurl = \"{url}\"\n");
            for (name, path) in [("client_cert_file", cert), ("client_key_file", key)] {
                if let Some(path) = path {
                    text += &format!("{name} = {:?}\n", path.display().to_string());
                }
            }
            Config::parse(&text, None)
        };
        let ok = parse("https://mcp.internal/mcp", Some(&cert), Some(&key)).unwrap();
        let Transport::Http(h) = &ok.backends[0].transport else {
            panic!("an http backend")
        };
        assert_eq!(h.client_cert.as_ref().map(|c| c.key.cert.len()), Some(1));
        let described = ok.describe();
        assert!(
            described.contains(&format!("showing {}", cert.display())),
            "{described}"
        );
        let cases = [
            (
                "https://x/mcp",
                Some(&cert),
                None,
                "backend[0].client_key_file",
                "required",
            ),
            (
                "https://x/mcp",
                None,
                Some(&key),
                "backend[0].client_cert_file",
                "required",
            ),
            (
                "http://x/mcp",
                Some(&cert),
                Some(&key),
                "backend[0].client_cert_file",
                "https://",
            ),
            (
                "https://x/mcp",
                Some(&cert),
                Some(&other),
                "backend[0].client_key_file",
                "does not go with",
            ),
            (
                "https://x/mcp",
                Some(&cert),
                Some(&nothing),
                "backend[0].client_key_file",
                "no PEM private key",
            ),
            (
                "https://x/mcp",
                Some(&key),
                Some(&key),
                "backend[0].client_cert_file",
                "no PEM certificate",
            ),
        ];
        for (url, cert, key, field, says) in cases {
            let err = parse(url, cert.map(|p| p.as_path()), key.map(|p| p.as_path())).unwrap_err();
            assert_eq!(err.field, field, "{url} {cert:?} {key:?}: {err}");
            assert!(err.to_string().contains(says), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stdio_limits_have_defaults_bounds_and_belong_to_stdio_backends() {
        let parse = |extra: &str| {
            Config::parse(
                &format!("[[backend]]\nname = \"s\"\ncommand = \"srv\"\n{extra}"),
                None,
            )
        };
        let stdio = |c: &Config| match &c.backends[0].transport {
            Transport::Stdio(t) => (t.max_stderr_line_bytes, t.write_queue),
            other => panic!("a stdio backend, not {other:?}"),
        };
        assert_eq!(stdio(&parse("").unwrap()), (16 * 1024, 32));
        let set = parse("max_stderr_line_bytes = 1024\nwrite_queue = 4\n").unwrap();
        assert_eq!(stdio(&set), (1024, 4));
        for (extra, field) in [
            (
                "max_stderr_line_bytes = 10\n",
                "backend[0].max_stderr_line_bytes",
            ),
            (
                "max_stderr_line_bytes = 2097152\n",
                "backend[0].max_stderr_line_bytes",
            ),
            ("write_queue = 0\n", "backend[0].write_queue"),
            ("write_queue = 5000\n", "backend[0].write_queue"),
            // Streams are an http backend's.
            (
                "standalone_stream = false\n",
                "backend[0].standalone_stream",
            ),
            (
                "release_parked_streams = false\n",
                "backend[0].release_parked_streams",
            ),
        ] {
            assert_eq!(parse(extra).unwrap_err().field, field, "{extra}");
        }
        let err = Config::parse(
            "[[backend]]\nname = \"h\"\nkind = \"http\"\nurl = \"http://x/mcp\"\nwrite_queue = 8\n",
            None,
        )
        .unwrap_err();
        assert_eq!(err.field, "backend[0].command");
        assert!(err.reason.contains("write_queue"), "{err}");
    }

    #[test]
    fn builtin_settings_are_checked_and_only_for_builtin_backends() {
        let parse =
            |extra: &str| Config::parse(&format!("[[backend]]\nname = \"b\"\n{extra}"), None);
        let ok = parse(
            "kind = \"builtin\"\nbuiltin_protocol = \"2025-06-18\"\nbuiltin_roots_on_init = true\n",
        )
        .unwrap();
        let Transport::Builtin(o) = &ok.backends[0].transport else {
            panic!("a builtin backend")
        };
        assert_eq!(o.protocol.as_deref(), Some("2025-06-18"));
        assert!(o.roots_on_init);
        for extra in [
            "kind = \"builtin\"\nbuiltin_protocol = \"bogus\"\n",
            "command = \"srv\"\nbuiltin_protocol = \"2025-06-18\"\n",
            "command = \"srv\"\nbuiltin_roots_on_init = true\n",
        ] {
            assert_eq!(
                parse(extra).unwrap_err().field,
                "backend[0].builtin_protocol",
                "{extra}"
            );
        }
    }

    #[test]
    fn fleet_settings_are_checked_and_state_owner_still_names_the_replica() {
        let c = Config::parse(&format!("[state]\nowner = \"a\"\n{MINIMAL}"), None).unwrap();
        assert_eq!(c.fleet.replica_id, "a");
        assert_eq!(c.state.owner, "a");
        assert!(c.fleet.internal_listen.is_none());
        assert_eq!(c.backends[0].replay.default, Policy::Hold);
        let c = Config::parse(
            "[fleet]\nreplica_id = \"pod-1\"\ninternal_listen = \"0.0.0.0:8081\"\nadvertise = \"10.0.0.7:8081\"\n[[backend]]\nname = \"b\"\ncommand = \"s\"\nreplay = \"auto\"\nreplay_tools = { pay = \"hold\", get = \"replay\" }\n",
            None,
        )
        .unwrap();
        assert_eq!(c.state.owner, "pod-1");
        assert_eq!(c.fleet.advertise.as_deref(), Some("10.0.0.7:8081"));
        assert!(c.describe().contains("forward timeout   70s\n"));
        let short = Config::parse(
            "[fleet]\ninternal_listen = \"127.0.0.1:8081\"\nforward_timeout = \"30s\"\n[[backend]]\nname = \"b\"\ncommand = \"s\"\n",
            None,
        )
        .unwrap();
        assert!(
            short
                .describe()
                .contains("forward timeout   30s (not above limits.request_timeout")
        );
        let r = &c.backends[0].replay;
        assert_eq!(r.for_request("tools/call", Some("pay")), Policy::Hold);
        assert_eq!(r.for_request("tools/call", Some("get")), Policy::Replay);
        assert_eq!(r.for_request("tools/call", Some("other")), Policy::Auto);
        assert_eq!(r.for_request("prompts/get", Some("greet")), Policy::Hold);
        let cases = [
            ("[fleet]\nreplica_id = \"a b\"\n", "fleet.replica_id"),
            (
                "[state]\nowner = \"a\"\n[fleet]\nreplica_id = \"b\"\n",
                "fleet.replica_id",
            ),
            (
                "[fleet]\ninternal_listen = \"x\"\n",
                "fleet.internal_listen",
            ),
            (
                "[fleet]\ninternal_listen = \"0.0.0.0:1\"\n",
                "fleet.advertise",
            ),
            ("[fleet]\nadvertise = \"h:1\"\n", "fleet.advertise"),
            (
                "[fleet]\ninternal_listen = \"127.0.0.1:1\"\nadvertise = \"h:99999\"\n",
                "fleet.advertise",
            ),
            (
                "[fleet]\nforward_timeout = \"1ms\"\n",
                "fleet.forward_timeout",
            ),
            (
                "[fleet]\nmax_transcript_bytes = 0\n",
                "fleet.max_transcript_bytes",
            ),
            ("[fleet]\ndrain = \"1s\"\n", "config, line 2"),
        ];
        for (text, field) in cases {
            let err = Config::parse(&format!("{text}{MINIMAL}"), None).unwrap_err();
            assert_eq!(err.field, field, "{text}: {err}");
        }
        let err = Config::parse(&format!("{MINIMAL}replay = \"sometimes\"\n"), None).unwrap_err();
        assert_eq!(err.field, "backend[0].replay");
        let err =
            Config::parse(&format!("{MINIMAL}replay_tools = {{ t = \"x\" }}\n"), None).unwrap_err();
        assert_eq!(err.field, "backend[0].replay_tools.t");
    }

    #[test]
    fn environment_keys_override_the_file() {
        let (_, secret) = Key::generate("envk").unwrap();
        let c = Config::parse(MINIMAL, Some(&format!("envk:{secret}"))).unwrap();
        assert!(!c.state.ephemeral);
        assert_eq!(c.state.keys.sealing_key_id(), "envk");
    }
}

//! The resolved settings as text, for `check`: what the gateway will do once every default is
//! filled in. Each value is printed as an operator reads it (durations as a config file writes
//! them, sizes with their unit, lists comma-separated), never as Rust debug output. Secrets are
//! never printed, only where a credential comes from.

use super::{Backend, Config, Http, LogFormat, PrincipalSource, Protocol, Stdio, Transport};
use std::fmt::{Display, Write};
use std::time::Duration;

impl Config {
    /// The resolved settings, for `check`; secrets are never printed.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        self.describe_server(&mut s);
        self.describe_fleet(&mut s);
        self.describe_state(&mut s);
        self.describe_limits(&mut s);
        for b in &self.backends {
            describe_backend(&mut s, b);
        }
        s
    }

    /// The client-facing listener, the admin listener, the principal, the sealing key and the
    /// logs.
    fn describe_server(&self, s: &mut String) {
        let server = &self.server;
        line(s, "listen", server.listen);
        line(s, "worker threads", server.worker_threads);
        line(
            s,
            "connections",
            format!(
                "{} at most, {} per address, shutdown grace {}",
                server.max_connections,
                server.max_connections_per_address,
                duration(server.shutdown_grace)
            ),
        );
        line(
            s,
            "client timeouts",
            format!(
                "head {}, body {}, write {}",
                duration(server.header_timeout),
                duration(server.body_timeout),
                duration(server.write_timeout)
            ),
        );
        line(
            s,
            "allowed origins",
            if server.allowed_origins.is_empty() {
                "loopback only".to_owned()
            } else {
                server.allowed_origins.join(", ")
            },
        );
        line(
            s,
            "admin",
            self.admin.listen.map_or_else(
                || "off".to_owned(),
                |a| format!("{a} ({} connections at most)", self.admin.max_connections),
            ),
        );
        line(s, "principal", principal(&self.principal));
        line(
            s,
            "sealing key",
            format!(
                "{}{}",
                self.state.keys.sealing_key_id(),
                if self.state.ephemeral {
                    " (ephemeral: retries fail after a restart)"
                } else {
                    ""
                }
            ),
        );
        let format = match self.log.format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        };
        line(s, "log", format!("{format}, level {}", self.log.level));
    }

    /// This replica and, with an internal listener, how retries reach it from the others.
    fn describe_fleet(&self, s: &mut String) {
        let fleet = &self.fleet;
        line(s, "replica", &fleet.replica_id);
        match (&fleet.internal_listen, &fleet.advertise) {
            (Some(listen), advertise) => {
                line(
                    s,
                    "internal listen",
                    format!(
                        "{listen} (advertised as {})",
                        advertise.as_deref().unwrap_or("the bound address")
                    ),
                );
                line(
                    s,
                    "forward timeout",
                    format!(
                        "{}{}",
                        duration(fleet.forward_timeout),
                        if fleet.forward_timeout <= self.limits.request_timeout {
                            " (not above limits.request_timeout: a forwarded round that runs \
                             that long fails)"
                        } else {
                            ""
                        }
                    ),
                );
                line(
                    s,
                    "forward connect",
                    format!(
                        "{}, clock skew up to {}",
                        duration(fleet.forward_connect_timeout),
                        duration(fleet.max_clock_skew)
                    ),
                );
            }
            (None, _) => line(s, "internal listen", "none (single replica)"),
        }
        line(s, "drain grace", duration(fleet.drain_grace));
        line(
            s,
            "transcripts",
            format!("{} at most", bytes(fleet.max_transcript_bytes)),
        );
    }

    /// How long parked calls live, the static roots and the cache hint.
    fn describe_state(&self, s: &mut String) {
        line(s, "park ttl", duration(self.state.park_ttl));
        line(s, "coalesce window", duration(self.state.coalesce_window));
        line(s, "static roots", self.static_roots.len());
        line(
            s,
            "cache",
            format!("ttlMs={} scope={}", self.cache.ttl_ms, self.cache.scope),
        );
    }

    /// `[limits]`, one line per thing bounded.
    fn describe_limits(&self, s: &mut String) {
        let limits = &self.limits;
        line(
            s,
            "request bodies",
            format!(
                "{} at most, JSON depth {}",
                bytes(limits.max_body_bytes),
                limits.max_json_depth
            ),
        );
        line(
            s,
            "backend messages",
            format!("{} at most", bytes(limits.max_line_bytes)),
        );
        line(
            s,
            "replies",
            format!("{} at most", bytes(limits.max_reply_bytes)),
        );
        line(
            s,
            "parked calls",
            format!(
                "{} per principal, {} in all",
                limits.max_parked_per_principal, limits.max_parked_total
            ),
        );
        line(
            s,
            "input requests",
            format!("{} per call", limits.max_input_requests),
        );
        line(
            s,
            "waits",
            format!(
                "queue {}, backend round {}, held roots {}",
                duration(limits.queue_wait),
                duration(limits.request_timeout),
                duration(limits.held_roots_wait)
            ),
        );
        line(
            s,
            "legacy sessions",
            format!(
                "{} per principal, {} in all, idle {}",
                limits.max_sessions_per_principal,
                limits.max_sessions_total,
                duration(limits.session_idle)
            ),
        );
        line(
            s,
            "tool lists",
            format!(
                "{} kept, {} tools each",
                limits.max_tool_catalogs, limits.max_tools_per_catalog
            ),
        );
    }
}

/// One setting: its label in a column, then its value.
fn line(s: &mut String, label: &str, value: impl Display) {
    let _ = writeln!(s, "{label:<18}{value}");
}

/// Whose a parked call is.
fn principal(source: &PrincipalSource) -> String {
    match source {
        PrincipalSource::Authorization => {
            "a digest of the Authorization header (none: anonymous)".to_owned()
        }
        PrincipalSource::Header(name) => format!("a digest of the {} header", name.as_str()),
        PrincipalSource::Anonymous => "anonymous (everyone is one principal)".to_owned(),
    }
}

/// A duration as a config file writes it (`30s`, `250ms`, `500us`): in the largest of those
/// units that shows it exactly, so the value printed is the value used.
pub(super) fn duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if nanos.is_multiple_of(per) {
            return format!("{}{unit}", nanos / per);
        }
    }
    format!("{nanos}ns")
}

/// A byte count with its unit (`1 MiB`, `16 KiB`, `300 bytes`): in the largest binary unit
/// that shows it exactly.
pub(super) fn bytes(n: usize) -> String {
    for (unit, per) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= per && n.is_multiple_of(per) {
            return format!("{} {unit}", n / per);
        }
    }
    format!("{n} bytes")
}

/// One line per backend: its path, how it is reached, its pool and what it is asked.
fn describe_backend(s: &mut String, b: &Backend) {
    let target = match &b.transport {
        Transport::Stdio(t) => format!("stdio {}", t.describe()),
        Transport::Builtin(_) => "built-in legacy server".to_owned(),
        Transport::Http(h) => format!("http {}", h.describe()),
        Transport::Sse(h) => format!("sse {}", h.describe()),
    };
    let overrides: Vec<String> = b
        .replay
        .tools
        .iter()
        .map(|(tool, policy)| format!("{tool}: {}", policy.as_str()))
        .collect();
    let policy = if overrides.is_empty() {
        b.replay.default.as_str().to_owned()
    } else {
        format!("{} ({})", b.replay.default.as_str(), overrides.join(", "))
    };
    let _ = writeln!(
        s,
        "backend {:<9} {} -> {target} (pool {}: {} per principal for calls that may ask for input, {} kept for calls that need none; idle {}, {}, policy {policy}{})",
        b.name,
        paths(b),
        b.pool_max,
        b.principal_sessions,
        b.reserved_sessions,
        duration(b.idle_timeout),
        era(b),
        if b.server_info {
            ""
        } else {
            ", serverInfo not passed on"
        }
    );
}

/// Where clients reach a backend: its path, and its HTTP+SSE face's paths if it has one.
fn paths(b: &Backend) -> String {
    match &b.legacy_sse {
        None => b.path.clone(),
        Some(sse) => format!(
            "{} (HTTP+SSE: GET {}, POST {})",
            b.path, sse.sse_path, sse.messages_path
        ),
    }
}

/// What the gateway speaks to a backend: the legacy version it asks for, and on Streamable
/// HTTP and stdio the era setting (the other kinds are legacy whatever it says).
fn era(b: &Backend) -> String {
    let children = match &b.transport {
        Transport::Stdio(s) => format!(" over {} children", s.children),
        _ => String::new(),
    };
    match (&b.transport, b.protocol) {
        (Transport::Http(_) | Transport::Stdio(_), Protocol::Modern) => {
            format!("relays {}{children}", b.protocol.as_str())
        }
        (Transport::Http(_) | Transport::Stdio(_), Protocol::Auto) => format!(
            "probes server/discover (waits {}), else asks {}",
            duration(b.probe_timeout),
            b.protocol_version
        ),
        _ => format!("asks {}", b.protocol_version),
    }
}

impl Stdio {
    /// The program, then its arguments, working directory and the names (never the values) of
    /// the variables added to its environment.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.args.is_empty() {
            parts.push(format!("args {}", self.args.join(", ")));
        }
        if let Some(cwd) = &self.cwd {
            parts.push(format!("cwd {}", cwd.display()));
        }
        if !self.env.is_empty() {
            let names: Vec<&str> = self.env.keys().map(String::as_str).collect();
            parts.push(format!("env {} set", names.join(", ")));
        }
        if parts.is_empty() {
            self.command.display().to_string()
        } else {
            format!("{} ({})", self.command.display(), parts.join("; "))
        }
    }
}

impl Http {
    /// The URL, what reaches the backend in `Authorization`, and the CA trusted for `https`.
    fn describe(&self) -> String {
        let ca = match (&self.ca, self.url.scheme_str()) {
            (Some(ca), _) => format!(", trusting {ca}"),
            (None, Some("https")) => ", trusting the bundled roots".to_owned(),
            (None, _) => String::new(),
        };
        let cert = match &self.client_cert {
            Some(cert) => format!(", showing {cert}"),
            None => String::new(),
        };
        format!(
            "{} (authorization {}, connect timeout {}{ca}{cert})",
            self.url,
            self.authorization,
            duration(self.connect_timeout)
        )
    }
}

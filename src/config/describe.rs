//! The resolved settings as text, for `check`: what the gateway will do once every default is
//! filled in. Secrets are never printed, only where a credential comes from.

use super::{Backend, Config, Http, Transport};
use std::fmt::Write;

impl Config {
    /// The resolved settings, for `check`; secrets are never printed.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        self.describe_server(&mut s);
        self.describe_fleet(&mut s);
        self.describe_state_and_limits(&mut s);
        for b in &self.backends {
            describe_backend(&mut s, b);
        }
        s
    }

    /// The client-facing listener, the admin listener, the principal and the sealing key.
    fn describe_server(&self, s: &mut String) {
        let _ = writeln!(s, "listen            {}", self.server.listen);
        let _ = writeln!(s, "worker threads    {}", self.server.worker_threads);
        let _ = writeln!(
            s,
            "connections       {} at once, {} per address",
            self.server.max_connections, self.server.max_connections_per_address
        );
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
    }

    /// This replica and, with an internal listener, how retries reach it from the others.
    fn describe_fleet(&self, s: &mut String) {
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
    }

    /// How long parked calls live, the limits, the static roots and the cache hint.
    fn describe_state_and_limits(&self, s: &mut String) {
        let _ = writeln!(s, "park ttl          {:?}", self.state.park_ttl);
        let _ = writeln!(s, "coalesce window   {:?}", self.state.coalesce_window);
        let _ = writeln!(s, "limits            {:?}", self.limits);
        let _ = writeln!(s, "static roots      {}", self.static_roots.len());
        let _ = writeln!(
            s,
            "cache             ttlMs={} scope={}",
            self.cache.ttl_ms, self.cache.scope
        );
    }
}

/// One line per backend: its path, how it is reached, its pool and what it is asked.
fn describe_backend(s: &mut String, b: &Backend) {
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

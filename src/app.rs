//! Wiring: a validated config becomes the engine and a listener; the accept loop serves
//! connections (bounded by `server.max_connections`) until shutdown, then drains: connections
//! finish their in-flight requests, calls are abandoned explicitly, sessions and children stop.

use crate::bridge::Bridge;
use crate::config::{Config, LogFormat};
use crate::metrics::{Listener, Metrics};
use crate::server::admin::{self, Admin};
use crate::server::{internal, listener, mcp};
use crate::shard::Shards;
use anyhow::Context;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running gateway.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    bridge: Arc<Bridge>,
    stop: CancellationToken,
    done: JoinHandle<()>,
    /// The internal listener for retries forwarded by other replicas, when configured.
    internal: Option<(SocketAddr, JoinHandle<()>)>,
    admin: Option<AdminTask>,
}

/// The admin listener's task; it outlives the drain so `/readyz` can say 503 throughout.
#[derive(Debug)]
struct AdminTask {
    addr: SocketAddr,
    stop: CancellationToken,
    done: JoinHandle<()>,
}

impl Running {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn bridge(&self) -> &Arc<Bridge> {
        &self.bridge
    }

    /// Address of the admin listener, if `[admin] listen` is set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|a| a.addr)
    }

    /// The internal listener's address, when this replica has one.
    pub fn internal_addr(&self) -> Option<SocketAddr> {
        self.internal.as_ref().map(|(addr, _)| *addr)
    }

    /// URL of each backend's endpoint.
    pub fn urls(&self) -> Vec<String> {
        self.bridge
            .config
            .backends
            .iter()
            .map(|b| format!("http://{}{}", self.addr, b.path))
            .collect()
    }

    /// Stops accepting, drains, and returns when everything has stopped.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.done.await;
        if let Some((_, internal)) = self.internal {
            let _ = internal.await;
        }
        if let Some(admin) = self.admin {
            admin.stop.cancel();
            let _ = admin.done.await;
        }
    }

    /// Drains: new requests are refused while retries of parked calls are still served,
    /// until no request is in flight (parked calls included) or `grace` has passed. A call
    /// already running when the drain starts may still park; its retry is served too. Shut
    /// down afterwards.
    pub async fn drain(&self, grace: std::time::Duration) {
        self.bridge.start_draining();
        let in_flight = self.bridge.in_flight();
        if in_flight > 0 {
            tracing::info!(
                in_flight,
                parked = self.bridge.parked(),
                "draining: finishing calls and serving retries of parked ones for up to {grace:?}"
            );
        }
        let emptied = async {
            while self.bridge.in_flight() > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        if tokio::time::timeout(grace, emptied).await.is_err() {
            tracing::info!(
                parked = self.bridge.parked(),
                "drain grace over; abandoning the calls still parked"
            );
        }
    }

    /// Runs until SIGINT or SIGTERM, drains for `fleet.drain_grace` (a second signal cuts it
    /// short), then shuts down. SIGHUP is logged and ignored throughout.
    pub async fn until_signal(self) {
        // Before the first await: the accept loop shares this thread, so no request is served
        // before the handlers are in place.
        let mut signals = Signals::new();
        signals.stop().await;
        tracing::info!("shutdown signal received; draining");
        let grace = self.bridge.config.fleet.drain_grace;
        tokio::select! {
            _ = self.drain(grace) => {}
            _ = signals.stop() => tracing::info!("second signal: shutting down now"),
        }
        self.shutdown().await;
    }
}

/// Binds the listeners and starts serving, connections on `shards`.
pub async fn start(mut config: Config, shards: Shards) -> anyhow::Result<Running> {
    if config.state.ephemeral {
        tracing::warn!(
            "no requestState keys configured: using a random per-process key. Parked calls cannot be resumed after a restart or by another replica; set [state] keys or {} (see `mrtr-gateway keygen`)",
            crate::config::KEYS_ENV
        );
    }
    let listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    let admin_listener = match config.admin.listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen on {a} (admin)"))?,
        ),
        None => None,
    };
    let internal = match config.fleet.internal_listen {
        None => None,
        Some(at) => {
            let l = TcpListener::bind(at)
                .await
                .with_context(|| format!("cannot listen on {at} (fleet.internal_listen)"))?;
            let bound = l.local_addr()?;
            // Validation made sure an unspecified address comes with an explicit advertise.
            config
                .fleet
                .advertise
                .get_or_insert_with(|| bound.to_string());
            Some((l, bound))
        }
    };
    let grace = config.server.shutdown_grace;
    let max_connections = config.server.max_connections;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(crate::metrics::ProcessCollector));
    let metrics = Arc::new(Metrics::new(registry.sub_registry_with_prefix("mrtr")));
    let bridge = Bridge::with_metrics(Arc::new(config), metrics, &shards);
    let stop = CancellationToken::new();
    let admin = match admin_listener {
        Some(listener) => {
            let addr = listener.local_addr()?;
            let state = Arc::new(Admin {
                registry: Arc::new(registry),
                bridge: bridge.clone(),
                draining: stop.clone(),
            });
            let admin_stop = CancellationToken::new();
            let done = tokio::spawn(admin::serve(
                listener,
                state,
                admin_stop.clone(),
                shards.clone(),
            ));
            tracing::info!(%addr, "admin listening (/metrics, /healthz, /readyz)");
            Some(AdminTask {
                addr,
                stop: admin_stop,
                done,
            })
        }
        None => None,
    };
    let internal = internal.map(|(l, bound)| {
        tracing::info!(
            replica = %bridge.config.fleet.replica_id,
            advertise = ?bridge.config.fleet.advertise,
            "internal listener on {bound}"
        );
        (
            bound,
            tokio::spawn(internal::serve(
                l,
                bridge.clone(),
                shards.clone(),
                stop.clone(),
            )),
        )
    });
    let done = tokio::spawn(accept_loop(
        listener,
        bridge.clone(),
        shards,
        stop.clone(),
        max_connections,
        grace,
    ));
    Ok(Running {
        addr,
        bridge,
        stop,
        done,
        admin,
        internal,
    })
}

async fn accept_loop(
    listener: TcpListener,
    bridge: Arc<Bridge>,
    shards: Shards,
    stop: CancellationToken,
    max_connections: usize,
    grace: std::time::Duration,
) {
    let limits = listener::Limits {
        name: "mcp",
        max_connections,
        max_per_address: bridge.config.server.max_connections_per_address,
        evict_idle: false,
        header_read_timeout: bridge.config.server.header_timeout,
        write_timeout: bridge.config.server.write_timeout,
    };
    let engine = bridge.clone();
    let metrics = bridge.metrics.listener(Listener::Mcp);
    let connections = listener::serve(listener, limits, &shards, metrics, stop, move |req, _| {
        mcp::serve(engine.clone(), req)
    })
    .await;
    // One deadline for the calls and the connections: they finish side by side.
    let deadline = tokio::time::Instant::now() + grace;
    bridge.close(deadline).await;
    let until = deadline.max(tokio::time::Instant::now()) + crate::bridge::SESSION_CLOSE;
    if tokio::time::timeout_at(until, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace");
    }
}

/// The signals a served gateway answers, handled from the moment they are made. SIGHUP is
/// among them so that it does not kill the process (its default action): a closed terminal or
/// a reload sent by habit would otherwise end every parked call without a drain, and orphan
/// stdio children that do not exit at once.
#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            interrupt: signal(SignalKind::interrupt()).expect("SIGINT handler"),
            hangup: signal(SignalKind::hangup()).expect("SIGHUP handler"),
        }
    }

    /// Returns at the next SIGTERM or SIGINT.
    async fn stop(&mut self) {
        loop {
            tokio::select! {
                _ = self.term.recv() => return,
                _ = self.interrupt.recv() => return,
                _ = self.hangup.recv() => {
                    tracing::info!("SIGHUP received: reload is not supported yet; ignored");
                }
            }
        }
    }
}

/// Without Unix signals, Ctrl-C is the one way to stop.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> Signals {
        Signals
    }

    async fn stop(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Logs to stderr; `RUST_LOG` wins over the configured level. Text logs are coloured only on a
/// terminal: a file or a log collector gets plain lines.
pub fn init_tracing(format: LogFormat, level: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let terminal = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text if terminal => builder.try_init(),
        LogFormat::Text => builder.fmt_fields(PlainFields).try_init(),
    };
}

/// Text log fields as `name=value` (the message without its name), as the default formatter
/// writes them, but without its colour wrappers: those format every field name through a
/// style even when colour is off, and each request's span has its fields formatted as it is
/// made.
struct PlainFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for PlainFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut staged = Staged {
            out: &mut writer,
            buf: [0; STAGED],
            len: 0,
        };
        let mut visitor = PlainVisitor {
            writer: &mut staged,
            separator: "",
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result.and_then(|()| staged.flush())
    }
}

/// How much of a record's fields is gathered before it is written on.
const STAGED: usize = 256;

/// Text gathered on the stack and written on in pieces of up to [`STAGED`] bytes: a span's
/// fields go into a string of their own, which would otherwise grow again at each field.
struct Staged<'a, 'w> {
    out: &'a mut tracing_subscriber::fmt::format::Writer<'w>,
    buf: [u8; STAGED],
    len: usize,
}

impl Staged<'_, '_> {
    fn flush(&mut self) -> std::fmt::Result {
        let len = std::mem::take(&mut self.len);
        // Whole strings only were put in.
        let text = std::str::from_utf8(&self.buf[..len]).map_err(|_| std::fmt::Error)?;
        self.out.write_str(text)
    }
}

impl std::fmt::Write for Staged<'_, '_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.len + s.len() > STAGED {
            self.flush()?;
            if s.len() > STAGED {
                return self.out.write_str(s);
            }
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

struct PlainVisitor<'a> {
    writer: &'a mut dyn std::fmt::Write,
    separator: &'static str,
    result: std::fmt::Result,
}

impl tracing::field::Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let separator = std::mem::replace(&mut self.separator, " ");
        // The fixed parts written as they are: only the value needs the formatting machinery.
        let w = &mut *self.writer;
        self.result = w.write_str(separator).and_then(|()| {
            if name != "message" {
                w.write_str(name.strip_prefix("r#").unwrap_or(name))?;
                w.write_char('=')?;
            }
            write!(w, "{value:?}")
        });
    }
}

/// What a test's log subscriber writes, kept in memory for the test to read.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct LogSink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl LogSink {
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("log lock").clone()).expect("UTF-8 logs")
    }
}

#[cfg(test)]
impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a text subscriber writes for one event inside a span, without timestamps.
    fn logged(plain: bool) -> String {
        let out = LogSink::default();
        let sink = out.clone();
        let writer = move || sink.clone();
        let builder = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(writer);
        let emit = || {
            let span = tracing::info_span!(
                "request",
                method = %"tools/call",
                id = 7,
                r#type = "quoted",
                park = tracing::field::Empty,
            );
            span.record("park", 3_u64);
            span.in_scope(|| tracing::warn!(ok = true, ratio = 0.5, "a \"message\" {}", 1));
            // Fields longer than what is gathered before it is written on, and across it.
            let long = "é".repeat(100);
            tracing::warn!(first = %long, second = %long, third = %long);
        };
        if plain {
            tracing::subscriber::with_default(builder.fmt_fields(PlainFields).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        out.text()
    }

    #[test]
    fn plain_fields_read_as_the_default_formatter_without_colour() {
        let plain = logged(true);
        assert_eq!(plain, logged(false));
        assert!(
            plain.contains(
                "request{method=tools/call id=7 type=\"quoted\" park=3}: \
                 mrtr_gateway::app::tests: a \"message\" 1 ok=true ratio=0.5"
            ),
            "{plain}"
        );
        let long = "é".repeat(100);
        assert!(
            plain.contains(&format!("first={long} second={long} third={long}")),
            "{plain}"
        );
    }
}

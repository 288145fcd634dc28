//! The gateway's built-in legacy MCP server.
//!
//! A small, self-contained MCP server that speaks the pre-2026 protocol revisions
//! (2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25) over newline-delimited JSON-RPC on
//! stdio, over Streamable HTTP (`--http ADDR`, path `/mcp`) and over the 2024-11-05 HTTP+SSE
//! transport (`--sse ADDR`). The `demo` command runs the gateway in front of it
//! (`mrtr-gateway legacy-server`), and the end-to-end tests use it as their fixture backend,
//! so it deliberately behaves like a real legacy server: while a `tools/call` (or
//! `prompts/get`, `resources/read`) is running it sends its own requests to the client
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`) and blocks until they are
//! answered. Over HTTP each message goes on the stream of the request it was made for, and
//! switches reproduce what real servers do differently (JSON answers, pushes on the GET
//! stream, streams cut short for resumption, batch framing); `POST /control/expire` forgets
//! every session and a few tool names get deliberately broken answers.
//!
//! What lives where:
//! - `wire`: JSON-RPC message shapes, error codes, the writer task and the message log.
//! - `session`: per-session state, the pending server->client requests and their correlation.
//! - `dispatch`: the reader loop, lifecycle, concurrency, cancellation and method routing.
//! - `asks`: the server->client requests, gated by negotiated version and client capabilities.
//! - `tools`, `catalog`: the tools, prompts and resources this server offers.
//! - `http`: the HTTP transports, one core session per HTTP session.
//!
//! Only JSON-RPC lines are written to the output stream; diagnostics go through `tracing`,
//! whose subscriber (installed by the binary) writes to stderr.

mod asks;
mod catalog;
mod dispatch;
mod http;
mod session;
mod tools;
mod wire;

#[cfg(test)]
mod tests;

use std::io::{self, Write};
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

pub use self::http::{serve_http, serve_sse};

/// Protocol revisions this server can speak, oldest first.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 4] =
    ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The revision offered when the client asks for one this server does not know.
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";

/// Options of the built-in legacy MCP server (`mrtr-gateway legacy-server`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Answer `initialize` with this protocol version whatever the client asks (default: echo
    /// the client's version if it is one of the four supported, else 2025-11-25).
    #[arg(long = "protocol")]
    pub protocol: Option<String>,
    /// Send `roots/list` right after `notifications/initialized` (the answer is cached and
    /// reported by the `list_roots` tool as `cachedRoots`).
    #[arg(long)]
    pub roots_on_init: bool,
    /// Append every JSON-RPC message received and sent, one JSON object per line
    /// `{"dir":"in"|"out","msg":<message>,"pid":<process id>}`, to this file; over HTTP also
    /// one `{"dir":"http","method","path","session","authorization","protocolVersion",
    /// "lastEventId","pid"}` line per request received.
    #[arg(long, env = "MRTR_LEGACY_LOG")]
    pub log: Option<std::path::PathBuf>,
    /// Push elicitation, sampling and roots requests even when the client did not declare the
    /// capability, as some real legacy servers do (the gateway must refuse them upstream).
    #[arg(long)]
    pub ignore_capabilities: bool,
    #[command(flatten)]
    pub http: HttpOptions,
}

/// How the legacy server behaves over HTTP.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpOptions {
    /// Serve Streamable HTTP at `http://ADDR/mcp` instead of stdio.
    #[arg(long = "http", value_name = "ADDR", conflicts_with = "sse")]
    pub streamable: Option<SocketAddr>,
    /// Serve the 2024-11-05 HTTP+SSE transport (`GET /sse`, `POST /messages`) instead of stdio.
    #[arg(long = "sse", value_name = "ADDR")]
    pub sse: Option<SocketAddr>,
    /// Answer each request POST with one application/json body; server requests and
    /// notifications then go on the GET stream.
    #[arg(long)]
    pub json_response: bool,
    /// Send every server request on the standalone GET stream, never on a POST stream.
    #[arg(long)]
    pub push_on_get: bool,
    /// Give events ids, end each POST stream right after its first server request and let
    /// the client resume with `GET` + `Last-Event-ID`.
    #[arg(long)]
    pub close_post_early: bool,
    /// Give events ids and keep them, so a client can resume a stream with `GET` +
    /// `Last-Event-ID` (implied by `--close-post-early`).
    #[arg(long)]
    pub event_ids: bool,
    /// A stream picked up with `Last-Event-ID` misses the first event written to it after the
    /// pick-up: kept for replay, sent on no connection, as an SDK server may lose an event
    /// written between its replay and the hand-over to the new connection. Implies
    /// `--event-ids`.
    #[arg(long)]
    pub resume_gap: bool,
    /// End the standalone GET stream after each event it carries, as a server that has its
    /// clients poll for pushes does: the client picks it up again with `Last-Event-ID`.
    /// Implies `--event-ids`.
    #[arg(long)]
    pub poll_get: bool,
    /// Frame every JSON body and SSE data line as a JSON array (2025-03-26 batch style).
    #[arg(long)]
    pub batch_responses: bool,
    /// Pad every response head with an `X-Padding` header of this many bytes (a server behind
    /// proxies that add large headers).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub header_padding: usize,
    /// HTTP+SSE: never send the `endpoint` event.
    #[arg(long)]
    pub no_endpoint: bool,
    /// Most sessions alive at once.
    #[arg(long, default_value_t = 1000)]
    pub max_sessions: usize,
    /// Most simultaneous connections.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Bound of each session's GET backlog, replay buffer and per-connection queue.
    #[arg(long, default_value_t = 1000)]
    pub max_queued_events: usize,
    /// Largest POST body accepted.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            streamable: None,
            sse: None,
            json_response: false,
            push_on_get: false,
            close_post_early: false,
            event_ids: false,
            resume_gap: false,
            poll_get: false,
            batch_responses: false,
            header_padding: 0,
            no_endpoint: false,
            max_sessions: 1000,
            max_connections: 256,
            max_queued_events: 1000,
            max_body_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Serve one session on any byte streams (tests use `tokio::io::duplex`).
///
/// Returns `Ok(())` once `input` reaches end of file; work still in flight at that point is
/// abandoned. Returns an error if the message log cannot be opened, if reading or writing
/// fails, or if the `crash` tool was called (recognise that case with [`is_crash_request`]);
/// in every case the output is shut down before returning.
pub async fn serve<R, W>(input: R, output: W, opts: Options) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    dispatch::run(input, wire::Lines(output), opts).await
}

/// Runs the server as `mrtr-gateway legacy-server` does: on stdio, or with `--http` / `--sse`
/// on a TCP listener, printing one `listening on URL` line to stdout once bound and serving
/// until SIGTERM or SIGINT.
///
/// When the `crash` tool is called the process exits with status 3 straight away.
pub async fn run(opts: Options) -> io::Result<()> {
    let (addr, sse, path) = match (opts.http.streamable, opts.http.sse) {
        (Some(addr), _) => (addr, false, "mcp"),
        (None, Some(addr)) => (addr, true, "sse"),
        (None, None) => return run_stdio(opts).await,
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "listening on http://{local}/{path}")?;
        stdout.flush()?;
    }
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        on_signal.cancel();
    });
    let outcome = if sse {
        serve_sse(listener, opts, shutdown).await
    } else {
        serve_http(listener, opts, shutdown).await
    };
    match outcome {
        Err(err) if is_crash_request(&err) => {
            tracing::warn!("crash tool called; exiting with status 3");
            std::process::exit(3)
        }
        other => other,
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(err) => {
                tracing::warn!(%err, "no SIGTERM handler; stopping on SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Serve on this process's stdin/stdout; returns when stdin closes.
///
/// When the `crash` tool is called the process exits with status 3 straight away, which is
/// what the gateway's crash handling is exercised against.
pub async fn run_stdio(opts: Options) -> io::Result<()> {
    match serve(tokio::io::stdin(), tokio::io::stdout(), opts).await {
        Err(err) if is_crash_request(&err) => {
            tracing::warn!("crash tool called; exiting with status 3");
            std::process::exit(3)
        }
        other => other,
    }
}

/// Whether an error returned by [`serve`] means the `crash` tool was called.
pub fn is_crash_request(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<CrashRequested>())
}

/// Carried inside the `io::Error` that [`serve`] returns after the `crash` tool ran.
#[derive(Debug, thiserror::Error)]
#[error("the crash tool was called")]
struct CrashRequested;

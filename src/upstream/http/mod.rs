//! Legacy Streamable HTTP backends (2025-03-26 .. 2025-11-25), and the HTTP plumbing the
//! 2024-11-05 HTTP+SSE transport (`http_sse`) shares.
//!
//! Every message to the backend is a POST. A request's answer comes back as JSON or as an SSE
//! stream that may carry the backend's own requests and notifications before the response. The
//! call that sent the request reads that stream itself (`Direct`): its response and progress
//! reach it without a detour, and the backend's requests go to the session task to be routed,
//! so a long tool call never blocks the session. The backend's answers to our answers (202) are
//! awaited in line, in order. One more task keeps the standalone GET stream open for pushes
//! unrelated to a POST. A stream that ends early after giving event ids is resumed with GET +
//! `Last-Event-ID`. A 404 on a known session means the backend forgot it: the request that saw it
//! is reported as never delivered (so a new call can go to a new session), and the session ends.
//!
//! Here: the client each backend gets. The rest: `link` (what the HTTP transports share: one
//! exchange with the backend, its failures, bodies), `streams` (reading an event stream into
//! the session's or a call's queue, and where it got to), `transport` (the Streamable HTTP
//! session the session task owns, and the calls' own way to the backend), `request` (one
//! request's POST and its answer), `resume` (picking streams up again with `Last-Event-ID`, and
//! the standalone GET stream).

mod endpoint;
mod link;
mod request;
mod resume;
mod streams;
mod transport;

#[cfg(test)]
mod tests;

pub use super::h1::{Client, Request};

pub(crate) use link::{
    ACCEPT_ANSWER, ACCEPT_STREAM, Failure, Link, content_type, encode, status_failure,
};
pub(crate) use streams::{deliver, events, next, report};
pub(crate) use transport::StreamableHttp;

use super::h1;
use crate::config::Http as Config;
use crate::shard::Shards;

/// Builds the client for one backend: keep-alive pools of at most `pool_max` idle connections,
/// connect timeout, TLS for `https` URLs with the bundled Mozilla roots or the backend's own CA,
/// and the gateway's client certificate where one is configured; a pool for each of `shards`.
pub fn client(cfg: &Config, pool_max: usize, shards: &Shards) -> Client {
    // One TLS configuration (and root store) for all the pools.
    Client::new(
        h1::connector(
            cfg.connect_timeout,
            cfg.ca.as_ref().map(|ca| &*ca.roots),
            cfg.client_cert.as_ref().map(|c| &c.key),
        ),
        pool_max,
        cfg.max_response_head_bytes,
        shards,
    )
}

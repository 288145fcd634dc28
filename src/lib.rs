//! mrtr-gateway makes an unmodified legacy MCP server (2024-11-05 .. 2025-11-25) a correct
//! MCP 2026-07-28 server.
//!
//! A request flows through the crate like this:
//!
//! ```text
//! client --POST /mcp--> server::mcp  (size, depth, shape, headers/body, _meta, Origin, principal)
//!                          |
//!                          v
//!                       bridge   --lease-->  upstream::Pool[(backend, principal, capability set)]
//!                          |                    | one task owns each legacy session
//!                          |                    | (a stdio child, an HTTP session)
//!                          |<---- events -------+ final response | server request | notification
//!   server requests  -->  park: registry[park id] = the task holding the suspended call
//! client <-- InputRequiredResult { inputRequests,
//!                requestState = seal(park, owner, principal, request, round, expiry) }
//! client --retry { inputResponses, requestState }--> bridge::retry: open the seal, check it
//!                          once, then hand the answers to the parked task (or forward the retry
//!                          to the owner replica, or run a replay-mode call again from its
//!                          transcript); the task writes each answer upstream as the response to
//!                          the server's request, then: another round, or the final result
//!                          { resultType: "complete" }
//! ```
//!
//! Modules, from the top down: [`server`] (everything that accepts a connection: the accept
//! loop, the MCP face, the internal hop's face, the admin endpoints, and every response shape),
//! [`bridge`] (the engine: calls, parking, retries, replay, forwarding to the owner replica),
//! [`upstream`] (legacy sessions, the pool, the transports and the gateway's HTTP/1.1 client),
//! then [`config`] (TOML -> validated `Config`), [`wire`] (the client's replies, the hop's
//! format), [`jsonrpc`] (message model and limits), [`sse`], [`protocol`] (MCP era knowledge),
//! [`seal`] (the only crypto) and [`metrics`] (typed Prometheus metrics). None of these imports
//! one above it. Beside them: [`app`] (wiring, drain and shutdown), [`cli`], [`probe`] (the
//! `health` command), [`shard`] (the threads that serve connections, each with a runtime of its
//! own) and [`wake`] (tasks polled again when they wake themselves). The built-in legacy server
//! used by `demo`, the `builtin` transport and the tests is the `mrtr_fixture` crate
//! (`fixtures/legacy-server`).
//!
//! ARCHITECTURE.md, at the repository's root, follows a call and a retry function by function
//! and says who owns each resource.
#![forbid(unsafe_code)]

pub mod app;
pub mod bridge;
pub mod cli;
pub mod config;
pub mod jsonrpc;
pub mod metrics;
pub mod probe;
pub mod protocol;
pub mod seal;
pub mod server;
pub mod shard;
pub mod sse;
pub mod upstream;
pub mod wake;
pub mod wire;

//! mrtr-gateway makes an unmodified legacy MCP server (2024-11-05 .. 2025-11-25) a correct
//! MCP 2026-07-28 server.
//!
//! A request flows through the crate like this:
//!
//! ```text
//! client --POST /mcp--> server::mcp        (size, depth, shape, headers vs body, _meta, Origin, principal)
//!                          |
//!                          v
//!                       bridge   --lease-->  upstream::Pool[(backend, principal, capability set)]
//!                          |                    | one task owns each legacy session (stdio child)
//!                          |<---- events -------+ final response | server request | notification
//!   server requests  -->  park: registry[park id] = the task holding the suspended call
//! client <-- InputRequiredResult { inputRequests, requestState = seal(park, principal, request, round, expiry) }
//! client --retry { inputResponses, requestState }--> open seal, check, hand answers to the park task
//!                          task writes each answer upstream as the response to the server's request,
//!                          then: another round, or the final result { resultType: "complete" }
//! ```
//!
//! Modules, from the top down: [`server`] (everything that accepts a connection: the accept
//! loop, the MCP face, the internal hop's face, the admin endpoints, and every response shape),
//! [`bridge`] (the engine: calls, parking, retries, replay, forwarding to the owner replica),
//! [`upstream`] (legacy sessions and the pool), then [`config`] (TOML -> validated `Config`),
//! [`wire`] (the client's replies, the hop's format), [`jsonrpc`] (message model and limits),
//! [`sse`], [`protocol`] (MCP era knowledge), [`seal`] (the only crypto), [`metrics`] (typed
//! Prometheus metrics), [`shard`] (the threads
//! that serve connections, each with a runtime of its own), [`wake`] (tasks polled again when
//! they wake themselves), [`app`] (wiring, drain and shutdown), [`cli`], and [`probe`] (the
//! `health` command). The built-in legacy server used by `demo`, the `builtin` transport and the
//! tests is the `mrtr_fixture` crate (`fixtures/legacy-server`).
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

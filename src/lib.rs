//! mrtr-gateway: makes an unmodified legacy MCP server (2024-11-05 .. 2025-11-25) look like a
//! correct MCP 2026-07-28 server.
#![forbid(unsafe_code)]

pub mod legacy_server;
pub mod seal;

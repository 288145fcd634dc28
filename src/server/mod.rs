//! Everything that accepts a connection: the one accept loop ([`listener`]), the MCP face
//! ([`mcp`]; legacy clients' in [`legacy`], and [`legacy_sse`] for 2024-11-05 HTTP+SSE), the
//! internal hop's face ([`internal`]) and the admin endpoints ([`admin`]). Faces parse and
//! validate, then hand a typed request to the engine ([`crate::bridge`]); every response they
//! send is built in [`respond`].

pub mod admin;
pub mod internal;
pub mod legacy;
pub mod legacy_sse;
pub mod listener;
pub mod mcp;
pub mod request;
pub mod respond;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use std::convert::Infallible;

/// The body of every response the listeners send.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

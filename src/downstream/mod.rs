//! Faces toward clients. `http` is the 2026-07-28 Streamable HTTP face.

pub mod http;

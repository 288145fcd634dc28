//! Connections to backends: 2026-07-28 ones through one exchange a request (`modern`), the era
//! of each found out by `era`; legacy ones through sessions. Each upstream session is owned by
//! one task (`session`), talked to through a [`Session`] handle, over a transport: `stdio` (a
//! child process), `builtin` (the built-in legacy server, in process), `http` (Streamable
//! HTTP) or `http_sse` (2024-11-05 HTTP+SSE); [`pool`] leases sessions keyed by (principal,
//! capability set) with at most one interactive call per session.

mod builtin;
pub mod era;
pub(crate) mod h1;
pub mod http;
mod http_sse;
pub(crate) mod modern;
pub mod pool;
pub mod session;
pub mod stdio;

pub use pool::{Lease, Pool, PoolKey};
pub use session::{Call, CallEvent, Session};

/// What went wrong on the upstream side.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("backend `{0}` is busy: no session became free in time")]
    Busy(String),
    /// Refused for the principal's own calls, not for others': they hold its whole share.
    #[error(
        "backend `{backend}` is busy with this principal's own calls: its calls that may ask for input, parked ones among them, hold {held} of the backend's sessions, all that `principal_sessions` allows it; answer its parked calls (or let them expire) and try again"
    )]
    PrincipalShare { backend: String, held: usize },
    #[error("backend `{backend}` could not be started: {reason}")]
    Spawn { backend: String, reason: String },
    #[error("backend `{backend}` failed to initialize: {reason}")]
    Init { backend: String, reason: String },
    #[error("backend `{backend}` session closed: {reason}")]
    Closed { backend: String, reason: String },
    #[error("backend `{0}` did not answer in time")]
    Timeout(String),
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

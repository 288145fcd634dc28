//! Bytes and typed messages, with no engine in them: what the client is told ([`Reply`]) and
//! the internal hop's format ([`hop`]).

pub mod hop;

use crate::jsonrpc::{ErrorObject, Payload};
use serde_json::Value;

/// What the client is told about one request, in order: notifications, then the outcome.
#[derive(Debug)]
pub enum Reply {
    Notification(Value),
    Done(Result<Payload, ErrorObject>),
}

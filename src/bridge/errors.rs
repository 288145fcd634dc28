//! The errors the engine makes of what went wrong upstream, as the client gets them: a legacy
//! backend's error answer in 2026-07-28 terms, a backend that failed or was busy, and the
//! refusal of new work while the gateway shuts down.

use crate::jsonrpc::{self, ErrorObject, INVALID_PARAMS};
use crate::upstream;
use serde_json::Value;

/// -31000 for a request the gateway will not take on as it shuts down: another replica can.
pub(crate) fn shutting_down() -> ErrorObject {
    ErrorObject::new(
        jsonrpc::BACKEND_BUSY,
        "the gateway is shutting down: send the request to another replica",
    )
}

/// A backend's error answer, as a 2026-07-28 server may send it: resource not found (-32002)
/// becomes -32602, as 2026-07-28 says it; a missing client capability (-32021) that names what
/// it needs in `data.requiredCapabilities` passes as it is, since it means just what 2026-07-28
/// means by it; any other code in the range the specification keeps for itself (-32020 to
/// -32099: the legacy backend cannot mean what 2026-07-28 defines there, and -32042 is no longer
/// a code) becomes -32603, with the backend's message and data.
pub(crate) fn backend_error(mut e: ErrorObject) -> ErrorObject {
    match e.code {
        jsonrpc::LEGACY_RESOURCE_NOT_FOUND => e.code = INVALID_PARAMS,
        jsonrpc::MISSING_CLIENT_CAPABILITY if names_required_capabilities(&e) => {}
        -32099..=-32020 => e.code = jsonrpc::INTERNAL_ERROR,
        _ => {}
    }
    e
}

/// The data 2026-07-28 gives a -32021: an object of the capabilities the client must declare.
fn names_required_capabilities(e: &ErrorObject) -> bool {
    e.data
        .as_ref()
        .and_then(|data| data.get("requiredCapabilities"))
        .is_some_and(Value::is_object)
}

/// A backend that failed while serving a request; `when` (e.g. " during the call") says at
/// what point, or is empty. The transports' reasons do not name the backend: this names it once.
pub(crate) fn backend_failed(backend: &str, when: &str, reason: &str) -> ErrorObject {
    ErrorObject::new(
        jsonrpc::BACKEND_FAILED,
        format!("backend `{backend}` failed{when}: {reason}"),
    )
}

pub(crate) fn upstream_error(e: &upstream::Error) -> ErrorObject {
    let code = match e {
        upstream::Error::Busy(_)
        | upstream::Error::PrincipalShare { .. }
        | upstream::Error::ShuttingDown => jsonrpc::BACKEND_BUSY,
        _ => jsonrpc::BACKEND_FAILED,
    };
    ErrorObject::new(code, e.to_string())
}

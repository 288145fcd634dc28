//! What the gateway knows about MCP eras: the versions on each side, the per-request `_meta` of
//! 2026-07-28, the MRTR shapes, and the translations between legacy and modern forms.

pub mod caps;
pub mod header;
pub mod input;
pub mod meta;
pub mod param;

/// The one modern version the client-facing side speaks.
pub const MODERN: &str = "2026-07-28";
/// Versions the gateway can speak to a backend, newest first.
pub const LEGACY: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

pub fn is_legacy(version: &str) -> bool {
    LEGACY.contains(&version)
}

/// Methods that may answer `InputRequiredResult` (and so may carry `inputResponses`).
pub fn is_mrtr_method(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// Methods whose complete results need `ttlMs` and `cacheScope`.
pub fn is_cacheable_method(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// Methods of 2026-07-28 that the gateway forwards as they are.
/// The long-lived stream of a backend's change notifications; relayed to 2026-07-28 backends
/// only (a legacy backend's changes would need its session's GET stream).
pub const LISTEN: &str = "subscriptions/listen";

pub fn is_forwarded_method(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "completion/complete"
    )
}

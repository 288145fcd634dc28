//! A backend's `sse_path` and `messages_path`: where legacy clients of the 2024-11-05 HTTP+SSE
//! transport reach it (`server::legacy_sse`), besides its `path`. Both or neither; each a path
//! of its own, taken by no backend's `path`, `sse_path` or `messages_path`.

use super::check::mcp_path;
use super::{Backend, ConfigError, bad};

/// The two paths of a backend's HTTP+SSE face.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacySse {
    /// GET here opens a client's stream; its first event names the messages path.
    pub sse_path: String,
    /// The client POSTs its messages here, `?session_id=` naming its stream.
    pub messages_path: String,
}

impl Backend {
    /// Whether a request on `path` is this backend's, on any of its faces.
    pub fn serves(&self, path: &str) -> bool {
        self.path == path
            || self
                .legacy_sse
                .as_ref()
                .is_some_and(|s| s.sse_path == path || s.messages_path == path)
    }
}

/// The HTTP+SSE face of the backend served at `path`, if it has one; `others` are the backends
/// before it.
pub(super) fn validate(
    field: &dyn Fn(&str) -> String,
    sse_path: Option<String>,
    messages_path: Option<String>,
    path: &str,
    others: &[Backend],
) -> Result<Option<LegacySse>, ConfigError> {
    let (sse_path, messages_path) = match (sse_path, messages_path) {
        (None, None) => return Ok(None),
        (Some(s), Some(m)) => (s, m),
        (Some(_), None) => {
            return Err(bad(field("messages_path"), "required with `sse_path`"));
        }
        (None, Some(_)) => {
            return Err(bad(field("sse_path"), "required with `messages_path`"));
        }
    };
    for (key, value) in [("sse_path", &sse_path), ("messages_path", &messages_path)] {
        let field = field(key);
        mcp_path(&field, value)?;
        // The messages path is sent to clients with a query after it.
        if value.contains(['?', '#']) {
            return Err(bad(field, format!("`{value}` must hold no `?` or `#`")));
        }
        if value == path || others.iter().any(|o| o.serves(value)) {
            return Err(bad(field, format!("`{value}` is used by another endpoint")));
        }
    }
    if sse_path == messages_path {
        return Err(bad(
            field("messages_path"),
            format!("`{messages_path}` is `sse_path` too: give each its own"),
        ));
    }
    Ok(Some(LegacySse {
        sse_path,
        messages_path,
    }))
}

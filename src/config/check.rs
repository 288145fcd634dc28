//! The small checks every section of the config uses: a default, a range, a URL path. Each
//! names the field it refuses, so an error points at the setting to fix.

use super::{ConfigError, bad};

/// A count that must not be 0, or `default`.
pub(super) fn positive(
    field: &str,
    value: Option<usize>,
    default: usize,
) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(0) => Err(bad(field, "must be greater than 0")),
        Some(v) => Ok(v),
    }
}

/// A value (a duration, a byte count) from `min` to `max`, or `default`.
pub(super) fn in_range<T: PartialOrd + Copy + std::fmt::Debug>(
    field: &str,
    value: Option<T>,
    default: T,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(bad(field, format!("must be between {min:?} and {max:?}")));
    }
    Ok(v)
}

/// A path the MCP listener serves: absolute, no spaces.
pub(super) fn mcp_path(field: &str, path: &str) -> Result<(), ConfigError> {
    if !path.starts_with('/') || path.contains(char::is_whitespace) {
        return Err(bad(
            field,
            format!("`{path}` must start with `/` and hold no spaces"),
        ));
    }
    Ok(())
}

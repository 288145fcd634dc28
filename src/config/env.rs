//! What the environment may set over the file: the `MRTR_*` variables (so a deployment can give
//! each replica its name, address and keys without a file per replica), and the state key ring
//! they or `state.keys` describe. Read once, at `Config::load`.

use super::{ConfigError, bad, raw};
use crate::seal::{Key, KeyRing};

/// Environment variable that overrides `state.keys`: `id:secret[,id:secret...]`, first seals.
pub const KEYS_ENV: &str = "MRTR_STATE_KEYS";
/// Environment variable that overrides `fleet.replica_id` (e.g. the pod name).
pub const REPLICA_ID_ENV: &str = "MRTR_REPLICA_ID";
/// Environment variable that overrides `fleet.advertise` (e.g. `$(POD_IP):8081`).
pub const ADVERTISE_ENV: &str = "MRTR_ADVERTISE";

/// The value of an environment variable that is set to something other than blanks.
pub(super) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Puts [`REPLICA_ID_ENV`] and [`ADVERTISE_ENV`], where set, over the file's `[fleet]`.
pub(super) fn override_fleet(fleet: &mut raw::Fleet) {
    if let Some(id) = var(REPLICA_ID_ENV) {
        fleet.replica_id = Some(id);
    }
    if let Some(addr) = var(ADVERTISE_ENV) {
        fleet.advertise = Some(addr);
    }
}

/// The key ring from `env_keys` (the value of [`KEYS_ENV`]) if it is set, else from
/// `state.keys`; with no key at all, an ephemeral one (the `bool` says so).
pub(super) fn key_ring(
    entries: &[raw::KeyEntry],
    env_keys: Option<&str>,
) -> Result<(KeyRing, bool), ConfigError> {
    let keys = match env_keys.filter(|s| !s.trim().is_empty()) {
        Some(list) => keys_from_env(list)?,
        None => keys_from_file(entries)?,
    };
    if keys.is_empty() {
        return Ok((KeyRing::ephemeral(), true));
    }
    KeyRing::new(keys)
        .map(|r| (r, false))
        .map_err(|e| bad("state.keys", e.to_string()))
}

/// `id:secret[,id:secret...]`.
fn keys_from_env(list: &str) -> Result<Vec<Key>, ConfigError> {
    let mut keys = Vec::new();
    for item in list.split(',') {
        let (id, secret) = item
            .trim()
            .split_once(':')
            .ok_or_else(|| bad(KEYS_ENV, "expected id:secret[,id:secret...]"))?;
        keys.push(Key::from_base64(id, secret).map_err(|e| bad(KEYS_ENV, e.to_string()))?);
    }
    Ok(keys)
}

/// `state.keys`, each error naming its entry.
fn keys_from_file(entries: &[raw::KeyEntry]) -> Result<Vec<Key>, ConfigError> {
    let mut keys = Vec::new();
    for (i, k) in entries.iter().enumerate() {
        keys.push(
            Key::from_base64(&k.id, &k.secret)
                .map_err(|e| bad(format!("state.keys[{i}]"), e.to_string()))?,
        );
    }
    Ok(keys)
}

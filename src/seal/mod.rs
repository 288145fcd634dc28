//! Sealing and opening requestState and legacy session ids, the key ring, digests and random ids: the only crypto in
//! the crate. requestState travels through the client and comes back as attacker-controlled
//! input, so it is authenticated encryption (AES-256-GCM) framed as `v1.<key id>.<base64url>`,
//! and every failure to open it is one opaque [`Invalid`].

use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest as sha, hkdf, hmac};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The largest replay transcript a config may allow (JSON bytes, before sealing).
pub const MAX_TRANSCRIPT: usize = 48 * 1024;

/// Tokens longer than this are refused before any decoding: room for the largest transcript,
/// base64-expanded, plus the claims around it.
const MAX_TOKEN: usize = MAX_TRANSCRIPT * 4 / 3 + 8 * 1024;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Digest(pub [u8; 32]);

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

pub fn digest(bytes: &[u8]) -> Digest {
    finish(sha::digest(&sha::SHA256, bytes))
}

/// SHA-256 of JSON text as `serde_json` writes it, hashed as it is written (nothing buffered).
pub fn digest_json<T: Serialize>(value: &T) -> Digest {
    struct Hasher(sha::Context);
    impl std::io::Write for Hasher {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut h = Hasher(sha::Context::new(&sha::SHA256));
    serde_json::to_writer(&mut h, value).expect("writing to a hash does not fail");
    finish(h.0.finish())
}

fn finish(d: sha::Digest) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    Digest(out)
}

/// A random 128-bit park id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParkId(pub [u8; 16]);

impl ParkId {
    pub fn random() -> ParkId {
        let mut b = [0u8; 16];
        SystemRandom::new().fill(&mut b).expect("system randomness");
        ParkId(b)
    }
}

impl fmt::Display for ParkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for ParkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a sealed requestState binds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub park: ParkId,
    pub owner: String,
    pub principal: Digest,
    pub request: Digest,
    pub round: u32,
    pub expires_at_ms: u64,
    pub outstanding: Vec<String>,
    /// Where the other replicas reach the owner (`host:port` of its internal listener); only
    /// ever read from inside the seal, so a client cannot aim the gateway anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_addr: Option<String>,
    /// Replay mode: the whole call so far. Nothing is parked; any replica runs the call again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Transcript>,
}

/// What a relayed call's requestState binds: the 2026-07-28 backend's own state, which the
/// gateway hands back verbatim on a retry that passes the same checks a parked call's does.
/// Nothing is kept anywhere else, so any replica serves any round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relayed {
    pub principal: Digest,
    /// The backend's path: a state is never taken to another backend.
    pub backend: String,
    pub request: Digest,
    pub expires_at_ms: u64,
    /// The backend's `requestState`, as it wrote it.
    pub state: String,
    /// The child of a stdio backend that wrote it: a server may keep what its state means in
    /// its own process, so the retry goes back to that child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<u32>,
}

/// What a legacy client's sealed `Mcp-Session-Id` binds: whose session it is, which replica
/// holds it and where that replica is reached, the backend, and what was negotiated. The
/// session itself lives only on its owner; the id lets any replica tell whose it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    /// The key of the session in its owner's registry.
    pub session: ParkId,
    pub owner: String,
    /// Where the other replicas reach the owner; only ever read from inside the seal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_addr: Option<String>,
    pub principal: Digest,
    /// The backend's path: a session is never taken to another backend.
    pub backend: String,
    /// The protocol version the session negotiated.
    pub version: String,
    /// The client's capabilities, as [`crate::protocol::caps::Declared::fingerprint`].
    pub capabilities: u8,
}

/// The input a replayed call has been given so far, in the order the backend asked for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transcript {
    /// The backend's path: a transcript is never replayed against another backend.
    pub backend: String,
    /// The last input key used, so keys stay unique across rounds.
    pub next_key: u32,
    pub turns: Vec<Turn>,
}

/// One input request of a replayed call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub key: String,
    pub method: String,
    /// Digest of the input request as the client saw it (method and params without `_meta`).
    pub ask: Digest,
    /// The client's answer; `None` while it is still asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("key id `{0}`: use 1 to 32 characters of letters, digits, `-` and `_`")]
    BadId(String),
    #[error("key `{0}`: {1}")]
    BadSecret(String, String),
    #[error("{0}")]
    Ring(String),
}

/// One AES-256-GCM key with its id, and a MAC key derived from the same secret.
pub struct Key {
    id: String,
    aead: LessSafeKey,
    mac: hmac::Key,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Key {
    pub fn new(id: &str, secret: &[u8]) -> Result<Key, KeyError> {
        let id_ok = !id.is_empty()
            && id.len() <= 32
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !id_ok {
            return Err(KeyError::BadId(id.to_owned()));
        }
        if secret.len() != 32 {
            return Err(KeyError::BadSecret(
                id.to_owned(),
                format!("secret must decode to 32 bytes, got {}", secret.len()),
            ));
        }
        let unbound =
            UnboundKey::new(&AES_256_GCM, secret).map_err(|_| KeyError::Ring("bad key".into()))?;
        // The MAC key for the internal hop is derived with HKDF under its own label, so the
        // two uses never share key material.
        let mac: hmac::Key = hkdf::Salt::new(hkdf::HKDF_SHA256, b"mrtr-gateway")
            .extract(secret)
            .expand(&[b"internal hop v1"], hmac::HMAC_SHA256)
            .map_err(|_| KeyError::Ring("key derivation".into()))?
            .into();
        Ok(Key {
            id: id.to_owned(),
            aead: LessSafeKey::new(unbound),
            mac,
        })
    }

    pub fn from_base64(id: &str, secret_b64url: &str) -> Result<Key, KeyError> {
        let trimmed = secret_b64url.trim();
        let bytes = URL_SAFE_NO_PAD
            .decode(trimmed.trim_end_matches('='))
            .or_else(|_| URL_SAFE.decode(trimmed))
            .map_err(|_| KeyError::BadSecret(id.to_owned(), "secret is not base64url".into()))?;
        Key::new(id, &bytes)
    }

    pub fn generate(id: &str) -> Result<(Key, String), KeyError> {
        let mut secret = [0u8; 32];
        SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| KeyError::Ring("no randomness".into()))?;
        let key = Key::new(id, &secret)?;
        Ok((key, URL_SAFE_NO_PAD.encode(secret)))
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The key ring: the first key seals, every key opens.
pub struct KeyRing {
    keys: Vec<Key>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|k| &k.id))
            .finish()
    }
}

/// The one opaque failure; the reason is for metrics and logs only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid(pub Reason);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Malformed,
    UnknownKey,
    Tampered,
}

impl Reason {
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::UnknownKey => "unknown_key",
            Reason::Tampered => "tampered",
        }
    }
}

/// The frame of a parked call's state (and a replay transcript's).
const PARKED: &str = "v1.";
/// The frame of a relayed call's state: the backend's own state inside the gateway's seal.
const RELAYED: &str = "r1.";

/// The frame of a legacy client's session id.
const SESSION: &str = "s1.";
/// The frame of an HTTP+SSE client's stream id (its `endpoint` event's `session_id`).
const STREAM: &str = "e1.";

/// Associated data: the frame and key id, as the token starts (`v1.<id>` for parked states,
/// as they have always been bound).
fn aad(form: &str, id: &str) -> Vec<u8> {
    format!("{form}{id}").into_bytes()
}

impl KeyRing {
    pub fn new(keys: Vec<Key>) -> Result<KeyRing, KeyError> {
        if keys.is_empty() {
            return Err(KeyError::Ring("at least one key is required".into()));
        }
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.id == k.id) {
                return Err(KeyError::BadId(format!("{} (used twice)", k.id)));
            }
        }
        Ok(KeyRing { keys })
    }

    pub fn ephemeral() -> KeyRing {
        let (key, _) = Key::generate("ephemeral").expect("fixed id is valid");
        KeyRing { keys: vec![key] }
    }

    pub fn sealing_key_id(&self) -> &str {
        &self.keys[0].id
    }

    pub fn seal(&self, claims: &Claims) -> String {
        self.seal_as(PARKED, claims)
    }

    pub fn open(&self, token: &str) -> Result<Claims, Invalid> {
        self.open_as(PARKED, token)
    }

    /// Seals a relayed call's state; it opens only with [`KeyRing::open_relayed`].
    pub fn seal_relayed(&self, relayed: &Relayed) -> String {
        self.seal_as(RELAYED, relayed)
    }

    pub fn open_relayed(&self, token: &str) -> Result<Relayed, Invalid> {
        self.open_as(RELAYED, token)
    }

    /// Seals a legacy session's claims into the `Mcp-Session-Id` the client sends back; it
    /// opens only with [`KeyRing::open_session`].
    pub fn seal_session(&self, claims: &SessionClaims) -> String {
        self.seal_as(SESSION, claims)
    }

    pub fn open_session(&self, token: &str) -> Result<SessionClaims, Invalid> {
        self.open_as(SESSION, token)
    }

    /// Seals an HTTP+SSE stream's claims into the id its client POSTs with; it opens only with
    /// [`KeyRing::open_stream`], never as a session id.
    pub fn seal_stream(&self, claims: &SessionClaims) -> String {
        self.seal_as(STREAM, claims)
    }

    pub fn open_stream(&self, token: &str) -> Result<SessionClaims, Invalid> {
        self.open_as(STREAM, token)
    }

    /// Whether `token` is framed as a relayed call's state (says nothing of its seal).
    pub fn is_relayed(token: &str) -> bool {
        token.starts_with(RELAYED)
    }

    /// `<form>.<key id>.<base64url(nonce, sealed JSON)>`; the form and key id are bound as
    /// associated data, so a state of one form never opens as the other.
    fn seal_as<T: Serialize>(&self, form: &str, value: &T) -> String {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("system randomness");
        let mut data = serde_json::to_vec(value).expect("claims serialize");
        key.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(form, &key.id)),
                &mut data,
            )
            .expect("AES-GCM seal");
        let mut payload = nonce.to_vec();
        payload.extend_from_slice(&data);
        format!("{form}{}.{}", key.id, URL_SAFE_NO_PAD.encode(payload))
    }

    fn open_as<T: serde::de::DeserializeOwned>(
        &self,
        form: &str,
        token: &str,
    ) -> Result<T, Invalid> {
        let malformed = Invalid(Reason::Malformed);
        if token.len() > MAX_TOKEN {
            return Err(malformed);
        }
        let rest = token.strip_prefix(form).ok_or(malformed)?;
        let (id, payload) = rest.split_once('.').ok_or(malformed)?;
        if id.is_empty() || payload.is_empty() {
            return Err(malformed);
        }
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or(Invalid(Reason::UnknownKey))?;
        let mut bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|_| malformed)?;
        if bytes.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return Err(malformed);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&bytes[..NONCE_LEN]);
        let sealed = &mut bytes[NONCE_LEN..];
        let plain = key
            .aead
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(form, &key.id)),
                sealed,
            )
            .map_err(|_| Invalid(Reason::Tampered))?;
        serde_json::from_slice(plain).map_err(|_| Invalid(Reason::Tampered))
    }

    /// MAC for the internal hop between replicas, with the sealing key's MAC key.
    pub fn mac(&self, data: &[u8]) -> [u8; 32] {
        let tag = hmac::sign(&self.keys[0].mac, data);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Constant-time check against every key.
    pub fn verify_mac(&self, data: &[u8], tag: &[u8]) -> bool {
        self.keys
            .iter()
            .any(|k| hmac::verify(&k.mac, data, tag).is_ok())
    }
}

#[cfg(test)]
mod tests;

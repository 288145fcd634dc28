//! TLS material of an `https` backend: a private CA (`ca_file`) and the gateway's own client
//! certificate (`client_cert_file` with `client_key_file`). Both are read and checked when the
//! config is loaded, so a bad file stops `check` and the start, not the first call.

use super::{ConfigError, bad, raw};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::{self, PemObject};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A private certificate authority for an `https` backend: the certificates of `ca_file`,
/// read and checked when the config is loaded.
#[derive(Clone)]
pub struct Ca {
    pub path: PathBuf,
    pub roots: Arc<rustls::RootCertStore>,
}

/// The file and how many roots it holds, as `check` prints it.
impl std::fmt::Display for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.roots.len();
        let s = if n == 1 { "" } else { "s" };
        write!(f, "{} ({n} root{s})", self.path.display())
    }
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The gateway's own certificate for an `https` backend that asks for one (mutual TLS): the
/// chain of `client_cert_file` (the gateway's certificate first) with the private key of
/// `client_key_file`, read and checked to belong together when the config is loaded.
#[derive(Clone)]
pub struct ClientCert {
    pub path: PathBuf,
    pub key: Arc<rustls::sign::CertifiedKey>,
}

/// The certificate's file, as `check` prints it; the key is never shown.
impl std::fmt::Display for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())
    }
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The backend's `ca_file`, which only an `https` URL uses.
pub(super) fn ca(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
    url: &http::Uri,
) -> Result<Option<Ca>, ConfigError> {
    match (&b.ca_file, url.scheme_str()) {
        (None, _) => Ok(None),
        (Some(path), Some("https")) => Ok(Some(read_ca(&field("ca_file"), path)?)),
        (Some(_), _) => Err(bad(field("ca_file"), "only used with an https:// url")),
    }
}

/// The backend's `client_cert_file` and `client_key_file`: both or neither, and only for an
/// `https` URL.
pub(super) fn client_cert(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
    url: &http::Uri,
) -> Result<Option<ClientCert>, ConfigError> {
    match (&b.client_cert_file, &b.client_key_file) {
        (None, None) => Ok(None),
        (Some(_), _) | (_, Some(_)) if url.scheme_str() != Some("https") => Err(bad(
            field("client_cert_file"),
            "only used with an https:// url",
        )),
        (Some(cert), Some(key)) => Ok(Some(read_client_cert(field, cert, key)?)),
        (Some(_), None) => Err(bad(
            field("client_key_file"),
            "required with client_cert_file",
        )),
        (None, Some(_)) => Err(bad(
            field("client_cert_file"),
            "required with client_key_file",
        )),
    }
}

/// The PEM certificates of `path`, at least one.
fn pem_certificates(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let name = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(
                field,
                format!("{name}: {}", pem_error(e, "not PEM certificates")),
            )
        })?;
    if certs.is_empty() {
        return Err(bad(field, format!("{name}: no PEM certificate in it")));
    }
    Ok(certs)
}

/// Reads the PEM certificates of `path` as the roots a backend's certificate must chain to.
fn read_ca(field: &str, path: &Path) -> Result<Ca, ConfigError> {
    let name = path.display();
    let certs = pem_certificates(field, path)?;
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| bad(field, format!("{name}: certificate {}: {e}", i + 1)))?;
    }
    Ok(Ca {
        path: path.to_path_buf(),
        roots: Arc::new(roots),
    })
}

/// Reads the chain of `cert` and the private key of `key`, and checks that they go together.
fn read_client_cert(
    field: &dyn Fn(&str) -> String,
    cert: &Path,
    key: &Path,
) -> Result<ClientCert, ConfigError> {
    use rustls::pki_types::PrivateKeyDer;
    let key_field = field("client_key_file");
    let chain = pem_certificates(&field("client_cert_file"), cert)?;
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        let reason = match e {
            pem::Error::NoItemsFound => "no PEM private key in it".to_owned(),
            other => pem_error(other, "not a PEM private key"),
        };
        bad(&key_field, format!("{}: {reason}", key.display()))
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        rustls::sign::CertifiedKey::from_der(chain, private, &provider).map_err(|e| {
            bad(
                &key_field,
                format!(
                    "{} does not go with the certificate of {}: {e}",
                    key.display(),
                    cert.display()
                ),
            )
        })?;
    Ok(ClientCert {
        path: cert.to_path_buf(),
        key: Arc::new(certified),
    })
}

/// Why a PEM file could not be read; `not` says what it failed to be.
fn pem_error(e: pem::Error, not: &str) -> String {
    match e {
        pem::Error::Io(e) => format!("cannot read it: {e}"),
        other => format!("{not}: {other:?}"),
    }
}

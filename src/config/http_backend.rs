//! A backend reached over HTTP (`kind = "http"` or `"sse"`): its validated settings and the
//! checks from its raw `[[backend]]` table: the URL, the extra headers, what goes in
//! `Authorization`, the TLS files (in `tls`) and the limits of the transport.

use super::check::in_range;
use super::tls::{self, Ca, ClientCert};
use super::{ConfigError, PrincipalSource, bad, raw};
use std::time::Duration;

/// `max_response_head_bytes` unless configured: room for the response heads of common servers
/// and proxies.
pub const DEFAULT_RESPONSE_HEAD: usize = 4096;

/// An HTTP backend (`kind = "http"` or `"sse"`).
#[derive(Debug, Clone)]
pub struct Http {
    pub url: http::Uri,
    /// Sent on every request to the backend.
    pub headers: http::HeaderMap,
    pub authorization: Authorization,
    pub connect_timeout: Duration,
    /// Roots trusted for an `https` backend instead of the bundled public ones (`ca_file`).
    pub ca: Option<Ca>,
    /// The certificate the gateway shows an `https` backend that asks for one (mutual TLS).
    pub client_cert: Option<ClientCert>,
    /// The longest response head (status line and headers) accepted from the backend. The
    /// head's buffer holds what has arrived, no more, and is let go once the head and what
    /// came with it have been read.
    pub max_response_head_bytes: usize,
    /// Streamable HTTP: keep a GET stream open per session for pushes unrelated to a POST.
    pub standalone_stream: bool,
    /// Streamable HTTP: a parked call whose answer stream carries event ids lets it go until
    /// the retry, and picks it up again with `Last-Event-ID`.
    pub release_parked_streams: bool,
}

/// What reaches the backend in its `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub enum Authorization {
    /// Nothing: the client's credential stays at the gateway (the default).
    Drop,
    /// The client's own header (needs `principal.source = "authorization"`, so a session never
    /// carries two credentials).
    Pass,
    /// A configured credential, whatever the client sent.
    Replace(http::HeaderValue),
}

/// As `check` prints it: the setting, never the credential.
impl std::fmt::Display for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Authorization::Drop => "drop",
            Authorization::Pass => "pass",
            Authorization::Replace(_) => "replace (configured credential)",
        })
    }
}

/// The same text: a credential must not reach a log through `{:?}` either.
impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Validates the settings of an `http` or `sse` backend.
pub(super) fn validate(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
    principal: &PrincipalSource,
) -> Result<Http, ConfigError> {
    let url = url(field, b.url.as_deref())?;
    let headers = headers(field, b)?;
    let authorization = authorization(field, b, principal)?;
    let ca = tls::ca(field, b, &url)?;
    let client_cert = tls::client_cert(field, b, &url)?;
    Ok(Http {
        url,
        headers,
        authorization,
        connect_timeout: in_range(
            &field("connect_timeout"),
            b.connect_timeout,
            Duration::from_secs(5),
            Duration::from_millis(10),
            Duration::from_secs(300),
        )?,
        ca,
        client_cert,
        max_response_head_bytes: in_range(
            &field("max_response_head_bytes"),
            b.max_response_head_bytes,
            DEFAULT_RESPONSE_HEAD,
            1024,
            1 << 20,
        )?,
        standalone_stream: b.standalone_stream.unwrap_or(true),
        release_parked_streams: b.release_parked_streams.unwrap_or(true),
    })
}

/// An `http://` or `https://` URL with a host and no credential in it.
fn url(field: &dyn Fn(&str) -> String, text: Option<&str>) -> Result<http::Uri, ConfigError> {
    let text = text.ok_or_else(|| bad(field("url"), "required for an http or sse backend"))?;
    let url: http::Uri = text
        .parse()
        .map_err(|_| bad(field("url"), format!("`{text}` is not a URL")))?;
    if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
        return Err(bad(
            field("url"),
            format!("`{text}`: expected an http:// or https:// URL with a host"),
        ));
    }
    // Not echoed: it holds a credential.
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(bad(
            field("url"),
            "a user or password in the URL is not sent to the backend: give the credential with \
             `authorization = \"replace\"` and `authorization_value`",
        ));
    }
    Ok(url)
}

/// The extra headers sent on every request; none the transports set themselves.
fn headers(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
) -> Result<http::HeaderMap, ConfigError> {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &b.headers {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(field("headers"), format!("`{name}` is not a header name")))?;
        if is_managed_header(&header) {
            return Err(bad(
                field("headers"),
                format!("`{name}` is set by the gateway (use `authorization` for credentials)"),
            ));
        }
        let value = http::HeaderValue::from_str(value).map_err(|_| {
            bad(
                field("headers"),
                format!("the value of `{name}` is not a valid header value"),
            )
        })?;
        headers.insert(header, value);
    }
    Ok(headers)
}

/// `authorization` with `authorization_value`, which only `"replace"` takes.
fn authorization(
    field: &dyn Fn(&str) -> String,
    b: &raw::Backend,
    principal: &PrincipalSource,
) -> Result<Authorization, ConfigError> {
    match (
        b.authorization.as_deref().unwrap_or("drop"),
        &b.authorization_value,
    ) {
        ("drop", None) => Ok(Authorization::Drop),
        ("pass", None) if *principal != PrincipalSource::Authorization => Err(bad(
            field("authorization"),
            "\"pass\" needs principal.source = \"authorization\", so one upstream session never carries two credentials",
        )),
        ("pass", None) => Ok(Authorization::Pass),
        ("replace", Some(v)) => Ok(Authorization::Replace(
            http::HeaderValue::from_str(v)
                .map_err(|_| bad(field("authorization_value"), "not a valid header value"))?,
        )),
        ("replace", None) => Err(bad(
            field("authorization_value"),
            "required when authorization = \"replace\"",
        )),
        ("drop" | "pass", Some(_)) => Err(bad(
            field("authorization_value"),
            "only used with authorization = \"replace\"",
        )),
        (other, _) => Err(bad(
            field("authorization"),
            format!("`{other}`: expected \"drop\", \"pass\" or \"replace\""),
        )),
    }
}

/// Headers the HTTP transports set themselves.
fn is_managed_header(name: &http::HeaderName) -> bool {
    [
        "authorization",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "content-type",
        "accept",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
    ]
    .contains(&name.as_str())
}

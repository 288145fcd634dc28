//! The client side of the health check: `mrtr-gateway health` asks a running gateway's admin
//! listener for `/healthz` and turns the answer into an exit status. It exists because the
//! container image has no curl or shell; a `HEALTHCHECK` runs this binary instead.

use crate::shard::Shards;
use crate::upstream::h1;
use http::{HeaderMap, Method, StatusCode, Uri};
use std::process::ExitCode;
use std::time::Duration;

/// Where `health` looks when no `--url` is given: the admin listener's liveness endpoint.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9090/healthz";

/// The whole probe (connect, request, status line) must finish within this.
pub const DEADLINE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("only http:// URLs with a host are supported: {0}")]
    BadUrl(Uri),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("http: {0}")]
    Exchange(String),
    #[error("unhealthy: {0}")]
    Status(StatusCode),
}

pub fn run(url: &Uri) -> ExitCode {
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(check(url, DEADLINE)).map_err(|e| e.to_string()));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mrtr-gateway: {url}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// GET `url` once; `Ok` only for a 200 answer within `deadline`.
pub async fn check(url: &Uri, deadline: Duration) -> Result<(), ProbeError> {
    match tokio::time::timeout(deadline, get(url)).await {
        Ok(Ok(StatusCode::OK)) => Ok(()),
        Ok(Ok(status)) => Err(ProbeError::Status(status)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ProbeError::Timeout(deadline)),
    }
}

/// One GET with the gateway's own HTTP client, the status of its answer.
async fn get(url: &Uri) -> Result<StatusCode, ProbeError> {
    let (Some("http"), Some(host)) = (url.scheme_str(), url.host()) else {
        return Err(ProbeError::BadUrl(url.clone()));
    };
    let addr = format!("{host}:{}", url.port_u16().unwrap_or(80));
    // A probe keeps no connection for later, and admin heads are small.
    let client = h1::Client::new(
        h1::connector(DEADLINE, None, None),
        0,
        crate::config::DEFAULT_RESPONSE_HEAD,
        &Shards::none(),
    );
    let request = h1::Request {
        method: &Method::GET,
        uri: url,
        configured: &HeaderMap::new(),
        headers: &[],
        json: None,
    };
    match client.send(request).await {
        Ok(resp) => Ok(resp.status()),
        Err(h1::Error::Connect(reason)) => Err(ProbeError::Connect { addr, reason }),
        Err(e) => Err(ProbeError::Exchange(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_non_http_url_is_refused_without_connecting() {
        let url: Uri = "https://127.0.0.1:1/healthz".parse().unwrap();
        assert!(matches!(
            check(&url, DEADLINE).await,
            Err(ProbeError::BadUrl(_))
        ));
    }

    #[tokio::test]
    async fn a_closed_port_is_unhealthy() {
        // Bind then drop, so the port is known to be free.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url: Uri = format!("http://127.0.0.1:{port}/healthz").parse().unwrap();
        assert!(matches!(
            check(&url, DEADLINE).await,
            Err(ProbeError::Connect { .. })
        ));
    }
}

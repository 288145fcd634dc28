//! The admin listener, on its own address so it can stay off the public network:
//! `GET /metrics` (Prometheus text format), `GET /healthz` (the process answers) and
//! `GET /readyz` (config loaded and listeners up, which is true once this runs, and not
//! draining: 503 from the moment shutdown starts, so load balancers stop sending work).
//!
//! It keeps serving while the gateway drains and stops last.

use super::Body;
use super::listener::{self, Limits};
use super::respond::text;
use crate::bridge::Bridge;
use crate::metrics::Listener;
use crate::shard::Shards;
use http::{Method, StatusCode, header};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the admin endpoints read.
#[derive(Debug)]
pub struct Admin {
    pub registry: Arc<Registry>,
    pub bridge: Arc<Bridge>,
    /// Cancelled when shutdown starts.
    pub draining: CancellationToken,
}

impl Admin {
    async fn respond(self: Arc<Self>, method: Method, path: String) -> hyper::Response<Body> {
        if method != Method::GET && method != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        match path.as_str() {
            "/metrics" => {
                // Off the runtime's thread: reading /proc for the process metrics lists every
                // open descriptor, tens of milliseconds with tens of thousands of connections.
                let admin = self.clone();
                let encoded = tokio::task::spawn_blocking(move || {
                    admin.bridge.refresh_gauges();
                    crate::metrics::encode(&admin.registry)
                })
                .await;
                let Ok(body) = encoded else {
                    return text(StatusCode::INTERNAL_SERVER_ERROR, "metrics unavailable\n");
                };
                let mut resp = text(StatusCode::OK, body);
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
                );
                resp
            }
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" if self.draining.is_cancelled() || self.bridge.is_draining() => {
                text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
            }
            "/readyz" => text(StatusCode::OK, "ready\n"),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

/// Serves admin requests until `stop`, with at most `admin.max_connections` open at once: when
/// all are taken, the one idle the longest is closed to take a new one, so a probe gets in
/// under a flood of idle connections, and an idle connection stays only `admin.header_timeout`.
pub async fn serve(
    listener: TcpListener,
    admin: Arc<Admin>,
    stop: CancellationToken,
    shards: Shards,
) {
    let config = &admin.bridge.config.admin;
    let limits = Limits {
        name: "admin",
        max_connections: config.max_connections,
        // Probes come from the node and scrapes from one scraper: no cap per address, eviction
        // keeps the room instead.
        max_per_address: config.max_connections,
        evict_idle: true,
        header_read_timeout: config.header_timeout,
        write_timeout: Duration::from_secs(10),
    };
    let metrics = admin.bridge.metrics.listener(Listener::Admin);
    let connections = listener::serve(listener, limits, &shards, metrics, stop, move |req, _| {
        admin
            .clone()
            .respond(req.method().clone(), req.uri().path().to_owned())
    })
    .await;
    // Admin requests answer at once; a connection still open after a second is let go.
    let _ = tokio::time::timeout(Duration::from_secs(1), connections.wait()).await;
}

//! `mrtr-gateway health` (the container HEALTHCHECK) run as a real child process against real
//! loopback sockets: 200 is healthy; any other status, a refused connection or a server that
//! never answers is not. And against a gateway whose admin listener is flooded with idle
//! connections: the probe still gets in.

mod common;

use bytes::Bytes;
use common::{ADMIN_ON, Gateway, Options};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Output;
use std::time::Duration;
use tokio::net::TcpListener;

/// An admin-like server: `/healthz` answers 200, `/readyz` 503 (as while draining), others 404.
async fn admin_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                let status = match req.uri().path() {
                    "/healthz" => StatusCode::OK,
                    "/readyz" => StatusCode::SERVICE_UNAVAILABLE,
                    _ => StatusCode::NOT_FOUND,
                };
                let mut resp = Response::new(Full::new(Bytes::from_static(b"")));
                *resp.status_mut() = status;
                Ok::<_, Infallible>(resp)
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

async fn health(url: &str) -> Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["health", "--url", url])
        .kill_on_drop(true)
        .output();
    // Far above the command's own 2 s deadline: only guards against a hung test.
    tokio::time::timeout(Duration::from_secs(30), child)
        .await
        .expect("health command finished")
        .expect("run health command")
}

#[tokio::test]
async fn health_exits_zero_when_the_endpoint_answers_200() {
    let addr = admin_server().await;
    let out = health(&format!("http://{addr}/healthz")).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn health_exits_one_and_names_the_status_when_not_200() {
    let addr = admin_server().await;
    let out = health(&format!("http://{addr}/readyz")).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("503"), "{err}");

    let out = health(&format!("http://{addr}/missing")).await;
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn health_exits_one_when_nothing_listens() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = health(&format!("http://127.0.0.1:{port}/healthz")).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connect"), "{err}");
}

#[tokio::test]
async fn health_gives_up_on_a_server_that_accepts_but_never_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    // Accept and hold the connection open without ever writing a response.
    let holder = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    });
    let out = health(&format!("http://{addr}/healthz")).await;
    holder.abort();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no answer within"), "{err}");
}

#[tokio::test]
async fn health_refuses_a_malformed_url_as_bad_usage() {
    let out = health("not a url").await;
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}

#[tokio::test]
async fn health_answers_while_idle_connections_flood_the_admin_listener() {
    let gw = Gateway::with(Options {
        extra: ADMIN_ON.into(),
        ..Default::default()
    })
    .await;
    let admin = gw.admin_addr();
    // Twice the default admin.max_connections (16): the listener full, and more behind.
    let mut idle = Vec::new();
    for _ in 0..32 {
        idle.push(
            tokio::net::TcpStream::connect(admin)
                .await
                .expect("connect"),
        );
    }
    let out = health(&format!("http://{admin}/healthz")).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evicted = gw.scrape().await.get(
        "mrtr_connections_shed_total",
        &[("listener", "admin"), ("reason", "idle_evicted")],
    );
    assert!(evicted >= 1.0, "idle connections made room: {evicted}");
    drop(idle);
    gw.stop().await;
}

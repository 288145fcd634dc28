//! A legacy client's session across a fleet without sticky sessions: three gateway processes
//! sharing keys, in front of one FastMCP server (PyPI `mcp==1.30.0`, Streamable HTTP), behind a
//! round-robin proxy that sends each HTTP request to the next replica in turn, so no two
//! requests in a row reach the same replica. The PyPI legacy driver must pass through it, its
//! session's requests served wherever they land by forwarding to the session's owner. Once the
//! owner is killed, its sessions are gone (404) and a fresh `initialize` works.

#[path = "interop/harness.rs"]
mod harness;
mod legacy_client;

use harness::{Proc, assert_legacy_driver_passed, bearer_header, run_legacy_driver, start_fastmcp};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use legacy_client::Legacy;
use mrtr_gateway::seal::{Key, KeyRing};
use serde_json::json;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// FastMCP declares no `logging`, so the driver has nothing to set there.
const FASTMCP: [&str; 4] = ["--server", "fastmcp", "--skip", "logging/setLevel"];

/// Writes a config file of its own for one replica.
fn config_file(id: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "mrtr-legacy-fleet-{}-{id}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("write config");
    path
}

/// One replica: `mrtr-gateway serve` with an internal listener, the fleet's keys and `id`.
fn start_replica(id: &str, keys: &str, backend: &str) -> (Proc, String) {
    let config = config_file(
        id,
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[principal]\nsource = \"authorization\"\n\n[fleet]\ninternal_listen = \"127.0.0.1:0\"\nforward_connect_timeout = \"2s\"\n\n[[backend]]\nname = \"fastmcp\"\nkind = \"http\"\nurl = \"{backend}\"\n"
        ),
    );
    let mut replica = Proc::spawn(
        &format!("replica {id}"),
        Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("MRTR_STATE_KEYS", keys)
            .env("MRTR_REPLICA_ID", id)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let url = replica.announced_url();
    let _ = std::fs::remove_file(&config);
    (replica, url)
}

/// Where the proxy sends requests, and which replica each request went to, in order.
#[derive(Default)]
struct Rotation {
    /// `None` once a replica is taken out (as a load balancer's health check would).
    replicas: Vec<Option<SocketAddr>>,
    next: usize,
    served: Vec<usize>,
}

impl Rotation {
    /// The next replica in turn, skipping those taken out.
    fn pick(&mut self) -> (usize, SocketAddr) {
        for _ in 0..self.replicas.len() {
            let i = self.next % self.replicas.len();
            self.next += 1;
            if let Some(addr) = self.replicas[i] {
                self.served.push(i);
                return (i, addr);
            }
        }
        panic!("no replica left in the rotation");
    }
}

/// A round-robin HTTP proxy: each request (not each connection: a client keeps its
/// connections alive) goes to the next replica in turn, on a connection of its own, and the
/// answer streams back as it comes.
struct Proxy {
    url: String,
    rotation: Arc<Mutex<Rotation>>,
}

impl Proxy {
    async fn start(replicas: &[String]) -> Proxy {
        let addrs = replicas
            .iter()
            .map(|url| {
                let uri: http::Uri = url.parse().expect("replica url");
                Some(
                    uri.authority()
                        .expect("authority")
                        .as_str()
                        .parse()
                        .expect("addr"),
                )
            })
            .collect();
        let rotation = Arc::new(Mutex::new(Rotation {
            replicas: addrs,
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let path = replicas[0].parse::<http::Uri>().unwrap().path().to_owned();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        let shared = rotation.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let rotation = shared.clone();
                let service = hyper::service::service_fn(move |req| {
                    let (i, addr) = rotation.lock().unwrap().pick();
                    relay(req, i, addr)
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service),
                );
            }
        });
        Proxy { url, rotation }
    }

    fn take_out(&self, replica: usize) {
        self.rotation.lock().unwrap().replicas[replica] = None;
    }

    fn served(&self) -> Vec<usize> {
        self.rotation.lock().unwrap().served.clone()
    }
}

type Answer = hyper::Response<http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>>;

/// Sends one request to the replica at `addr`; its answer, streamed.
async fn relay(
    mut req: hyper::Request<Incoming>,
    replica: usize,
    addr: SocketAddr,
) -> Result<Answer, std::convert::Infallible> {
    let failed = |why: String| {
        let body = http_body_util::Full::new(bytes::Bytes::from(why))
            .map_err(|never| match never {})
            .boxed();
        Ok(hyper::Response::builder().status(502).body(body).unwrap())
    };
    let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
        return failed(format!("replica {replica} is not there"));
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        return failed(format!("no HTTP with replica {replica}"));
    };
    tokio::spawn(conn);
    req.headers_mut()
        .insert(http::header::HOST, addr.to_string().parse().unwrap());
    match sender.send_request(req).await {
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(e) => failed(format!("replica {replica}: {e}")),
    }
}

#[test]
fn a_legacy_session_is_served_by_whichever_replica_each_request_reaches() {
    let (_server, backend) = start_fastmcp();
    let (_, secret) = Key::generate("fleet").expect("key");
    let keys = format!("fleet:{secret}");
    let ring = KeyRing::new(vec![Key::from_base64("fleet", &secret).unwrap()]).unwrap();
    let mut replicas: Vec<Option<(Proc, String)>> = ["r0", "r1", "r2"]
        .iter()
        .map(|id| Some(start_replica(id, &keys, &backend)))
        .collect();
    let urls: Vec<String> = replicas.iter().flatten().map(|(_, u)| u.clone()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let proxy = rt.block_on(Proxy::start(&urls));

    let summary =
        assert_legacy_driver_passed(run_legacy_driver(&proxy.url, "gina", &FASTMCP), "gina");
    let sid = summary["session_id"].as_str().expect("a session id");
    let owner = ring.open_session(sid).expect("the fleet's own id").owner;
    let served = proxy.served();
    let mut per_replica = [0usize; 3];
    for &i in &served {
        per_replica[i] += 1;
    }
    assert!(
        served.windows(2).all(|w| w[0] != w[1]),
        "no two requests in a row reached one replica: {served:?}"
    );
    let (least, most) = (per_replica.iter().min(), per_replica.iter().max());
    assert!(
        served.len() >= 9 && most.unwrap() - least.unwrap() <= 1,
        "every replica served its turn: {per_replica:?}"
    );
    let owner_index: usize = owner[1..].parse().expect("r<N>");
    let elsewhere = served.len() - per_replica[owner_index];
    assert!(
        elsewhere * 2 >= served.len(),
        "most of the session's requests reached a replica that forwarded them to {owner}: {per_replica:?}"
    );

    // A session of our own, its owner then killed.
    let mut client = Legacy::new(&proxy.url).with_authorization(&bearer_header("hugo"));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    rt.block_on(async {
        let (status, init) = client.initialize("2025-11-25", json!({})).await;
        assert_eq!(status, 200, "{init:#}");
        let answer = client.post(&list).await;
        assert_eq!(answer.status, 200);
        assert!(answer.json().await["result"]["tools"].is_array());
    });
    let sid = client.session.clone().expect("a session id");
    let owner = ring.open_session(&sid).expect("the fleet's own id").owner;
    let owner_index: usize = owner[1..].parse().expect("r<N>");
    drop(replicas[owner_index].take());
    proxy.take_out(owner_index);
    rt.block_on(async {
        let gone = client.post(&list).await;
        assert_eq!(gone.status, 404, "the session died with its owner");
        let (status, init) = client.initialize("2025-11-25", json!({})).await;
        assert_eq!(status, 200, "a fresh initialize works: {init:#}");
        assert_ne!(client.session.as_deref(), Some(sid.as_str()));
        let answer = client.post(&list).await;
        assert_eq!(answer.status, 200);
        assert!(answer.json().await["result"]["tools"].is_array());
    });
}

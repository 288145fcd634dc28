//! A byte relay: a process that accepts TCP connections and copies bytes to and from the fixture,
//! nothing else. Placed where the gateway sits, it shows what one more process on the path costs
//! on this machine before any proxy does any work: the floor under what the gateway adds.
//!
//! It runs as this harness binary started again with `--relay-to ADDR`: its own process, on one
//! thread (a single-threaded tokio runtime). That is the leanest relay here: on tokio's
//! work-stealing runtime with two workers it added 15 to 30 us more at p50, each message also
//! waking the idle worker.

use crate::gateway::Proc;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;

/// The relay process, and the fixture URL as seen through it.
#[derive(Debug)]
pub struct Relay {
    pub proc: Proc,
    pub url: String,
}

impl Relay {
    /// Starts a relay in front of the fixture at `target` (an `http://host:port/path` URL).
    pub async fn start(dir: &Path, target: &str) -> anyhow::Result<Relay> {
        let uri: hyper::Uri = target.parse().context("fixture URL")?;
        let authority = uri.authority().context("fixture URL has no host")?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["--relay-to", authority.as_str()]);
        let mut proc = Proc::spawn(cmd, &dir.join("relay.stderr"))?;
        let addr = proc.announced("relay listening on").await?;
        Ok(Relay {
            proc,
            url: format!("http://{addr}{path}"),
        })
    }
}

/// The relay's own process: listens on an ephemeral loopback port, says where, and relays every
/// connection to `target` until the process is stopped.
pub async fn serve(target: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("relay listening on {}", listener.local_addr()?);
    loop {
        let (mut inbound, _) = listener.accept().await?;
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(target).await else {
                return;
            };
            // Both sides speak small request/response messages: no Nagle delay, as the gateway.
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}

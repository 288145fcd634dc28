//! The command line: `serve`, `check`, `keygen`, `health`, `demo`, and the built-in legacy server
//! that `demo` runs as its backend.

use crate::app;
use crate::config::{Config, LogFormat};
use crate::shard::Shards;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status for a bad config or bad usage (EX_USAGE).
pub const EXIT_CONFIG: u8 = 64;

#[derive(Debug, Parser)]
#[command(
    name = "mrtr-gateway",
    version,
    about = "Serve legacy MCP servers to MCP 2026-07-28 clients"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve {
        /// The config file (TOML, see docs/configuration.md)
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },
    /// Check a config as `serve` would, and print the resolved settings.
    Check {
        /// The config file to check (TOML, see docs/configuration.md)
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print a fresh requestState key for [state] keys.
    Keygen {
        #[arg(long, default_value = "k1")]
        id: String,
    },
    /// Exit 0 if a gateway's admin endpoint answers 200 within 2 s (the image's HEALTHCHECK).
    Health {
        #[arg(long, default_value = crate::probe::DEFAULT_URL)]
        url: http::Uri,
    },
    /// Run the gateway on 127.0.0.1:8080 in front of the built-in legacy server.
    Demo {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
    },
    /// The built-in legacy MCP server (stdio, or HTTP with --http / --sse), as `demo` runs it.
    #[command(hide = true)]
    LegacyServer(mrtr_fixture::Options),
}

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Check { config } => match load(&config) {
            Ok(c) => {
                print!("{}", c.describe());
                println!("config OK");
                ExitCode::SUCCESS
            }
            Err(e) => config_error(&e),
        },
        Command::Keygen { id } => match crate::seal::Key::generate(&id) {
            Ok((_, secret)) => {
                println!("[state]\nkeys = [{{ id = \"{id}\", secret = \"{secret}\" }}]");
                println!(
                    "# or in the environment: {}={id}:{secret}",
                    crate::config::KEYS_ENV
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mrtr-gateway: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Command::Health { url } => crate::probe::run(&url),
        Command::Serve { config } => match load(&config) {
            Ok(c) => serve(c, false),
            Err(e) => config_error(&e),
        },
        Command::Demo { listen } => match demo_config(&listen) {
            Ok(c) => serve(c, true),
            Err(e) => config_error(&e),
        },
        Command::LegacyServer(opts) => {
            app::init_tracing(LogFormat::Text, "warn");
            let rt = runtime();
            let outcome = rt.block_on(mrtr_fixture::run(opts));
            // A blocking stdin read may still be pending; do not wait for it.
            rt.shutdown_timeout(std::time::Duration::from_millis(100));
            match outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("legacy server: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The config file at `path`, valid and able to run here: `serve` and `check` refuse the same
/// configs, so a config `check` passes is one `serve` starts with.
fn load(path: &Path) -> Result<Config, crate::config::ConfigError> {
    let config = Config::load(path)?;
    config.check_host()?;
    Ok(config)
}

fn config_error(e: &crate::config::ConfigError) -> ExitCode {
    eprintln!("mrtr-gateway: config error: {e}");
    ExitCode::from(EXIT_CONFIG)
}

/// The built-in legacy server's runtime: one thread, as the servers it stands for run (the
/// Python and TypeScript SDKs serve from one event loop). On tokio's work-stealing runtime
/// each request also woke an idle worker to look for work, which took CPU time from the
/// processes it shares a machine with in the benchmarks.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Serves on `worker_threads` shards ([`Shards`]); the main thread's runtime runs the
/// accept loops, the admin listener and the drain.
fn serve(config: Config, demo: bool) -> ExitCode {
    app::init_tracing(config.log.format, &config.log.level);
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let started = main.and_then(|rt| Ok((rt, Shards::start(config.server.worker_threads)?)));
    let (main, shards) = match started {
        Ok(started) => started,
        Err(e) => {
            eprintln!("mrtr-gateway: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let serving = shards.clone();
    let code = main.block_on(async move {
        let running = match app::start(config, serving).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("mrtr-gateway: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        for url in running.urls() {
            println!("mrtr-gateway listening on {url}");
        }
        if let Some(internal) = running.internal_addr() {
            println!("mrtr-gateway internal listener on {internal}");
        }
        if let Some(admin) = running.admin_addr() {
            println!("mrtr-gateway admin on http://{admin}");
        }
        if demo {
            println!("{}", demo_help(&running.urls()[0]));
        }
        running.until_signal().await;
        ExitCode::SUCCESS
    });
    shards.stop();
    code
}

/// The demo: the built-in legacy server, started from this same binary.
fn demo_config(listen: &str) -> Result<Config, crate::config::ConfigError> {
    let exe = std::env::current_exe().map_err(|e| crate::config::ConfigError {
        field: "demo".into(),
        reason: format!("cannot find this executable: {e}"),
    })?;
    let text = format!(
        "[server]\nlisten = {listen:?}\n\n[state]\npark_ttl = \"5m\"\n\n[roots]\nstatic = [{{ uri = \"file:///tmp/demo\", name = \"demo\" }}]\n\n[[backend]]\nname = \"demo\"\ncommand = {exe:?}\nargs = [\"legacy-server\"]\n",
        exe = exe.display().to_string()
    );
    Config::parse(
        &text,
        std::env::var(crate::config::KEYS_ENV).ok().as_deref(),
    )
}

fn demo_help(url: &str) -> String {
    format!(
        r#"
Built-in legacy server tools: echo, ask_form, ask_url, sample, list_roots, all_three, pair, two_step,
url_required, log_levels, fail.
Try one elicitation round trip:

  curl -s {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: ask_form' \
    -d '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ask_form","arguments":{{}},
         "_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{}}}}}}}}}}'

Then send the same request again with id 2, adding to params:
  "inputResponses": {{"elicitation-1": {{"action":"accept","content":{{"name":"Ada"}}}}}},
  "requestState": "<requestState from the first answer>"
Stop with Ctrl-C."#
    )
}

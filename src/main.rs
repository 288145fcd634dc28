#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    mrtr_gateway::cli::run(mrtr_gateway::cli::Cli::parse())
}

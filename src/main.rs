#![forbid(unsafe_code)]

use clap::Parser;

/// Every message is a few dozen small allocations (JSON trees, headers, buffers), and glibc's
/// allocator took about a quarter of the gateway's user-space instructions per call.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    mrtr_gateway::cli::run(mrtr_gateway::cli::Cli::parse())
}

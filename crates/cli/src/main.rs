//! The `vodkit` binary: argument parsing and wiring only. Each subcommand lives in its own
//! module under `cmd/` and calls into the crate that does the work.

mod cmd;
#[cfg(test)]
mod reference;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc for every subcommand: serving a popular title from memory, glibc's `malloc` and
/// `free` were 5% of `vodkit serve`'s CPU (per-request heads, log lines, range lists).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Generate, drive, serve, emulate, analyze and report HTTP video delivery.
#[derive(Parser)]
#[command(name = "vodkit", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate workloads from specs; show specs; import/export session logs.
    Workload(cmd::workload::Args),
    /// Write, verify and inspect the files a workload's server serves.
    #[command(subcommand)]
    Fileset(cmd::fileset::FilesetCommand),
    /// Replay sessions against an HTTP server and measure it.
    Load(cmd::load::Args),
    /// Serve video over HTTP/1.1 (and HTTP/2 with --http2 or --h2c) with serialized
    /// aggressive prefetching.
    Serve(Box<cmd::serve::Args>),
    /// Emulated hard disk: bring up, tear down, tune and benchmark.
    #[command(subcommand)]
    Hdd(cmd::hdd::HddCommand),
    /// Run a command under a memory budget that includes its page cache.
    Run(cmd::run::Args),
    /// System metrics: disk, CPU, memory and network per second.
    #[command(subcommand)]
    Sys(cmd::sys::SysCommand),
    /// Capacity experiments with servers under test side by side.
    Bench(cmd::bench::Args),
    /// A capacity comparison on built-in defaults (about 9 minutes).
    Demo(cmd::demo::Args),
    /// Run an unmodified program under the preload shim (starts its daemon if needed).
    Preload(cmd::preload::Args),
    /// The preload shim's daemon: serialized, enlarged reads for the library's misses.
    Prefetchd(cmd::prefetchd::Args),
    /// Chains and phases from access logs.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCommand),
    /// Trace-driven simulation of prefetch policies.
    Simulate(cmd::simulate::Args),
    /// TLS helpers: throwaway certificates for HTTPS tests.
    #[command(subcommand)]
    Tls(cmd::tls::Command),
    /// Live sources: publish live streams to an origin by HTTP PUT.
    #[command(subcommand)]
    Live(cmd::live::Command),
    /// A cluster of origins behind a load balancer: HAProxy and nginx configurations
    /// routed by title, and the health agent that probes an origin like a viewer.
    #[command(subcommand)]
    Cluster(cmd::cluster::Command),
}

impl Command {
    /// Commands that only write files and standard output. Network commands keep SIGPIPE
    /// ignored, because a peer closing a socket must never kill a server or a load run.
    fn only_prints(&self) -> bool {
        matches!(
            self,
            Command::Workload(_)
                | Command::Fileset(_)
                | Command::Sys(_)
                | Command::Trace(_)
                | Command::Simulate(_)
        )
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cmd::clap_exit(e),
    };
    if cli.command.only_prints() {
        cmd::restore_sigpipe();
    }
    cmd::init_logging();
    let result = match cli.command {
        Command::Workload(a) => cmd::workload::run(a),
        Command::Fileset(a) => cmd::fileset::run(a),
        Command::Load(a) => cmd::load::run(a),
        Command::Serve(a) => cmd::serve::run(*a),
        Command::Hdd(a) => cmd::hdd::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Sys(a) => cmd::sys::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Preload(a) => cmd::preload::run(a),
        Command::Prefetchd(a) => cmd::prefetchd::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Tls(a) => cmd::tls::run(a),
        Command::Live(a) => cmd::live::run(a),
        Command::Cluster(a) => cmd::cluster::run(a),
    };
    cmd::exit_code(result)
}

//! `vodkit preload`: run an unmodified program under the preload shim (docs/preload.md):
//! the shim's library in `LD_PRELOAD`, and the shim's daemon started when none is running.

use std::path::PathBuf;
use std::process::Command;
use vodkit_preload::{run_command, Preload};

#[derive(clap::Args)]
pub struct Args {
    /// Print the path of the shim's library, for your own LD_PRELOAD (writing it there if
    /// needed), and exit.
    #[arg(long)]
    pub print_path: bool,
    /// The daemon to use; one is started with these settings unless one already listens
    /// on the socket.
    #[command(flatten)]
    pub daemon: super::prefetchd::DaemonArgs,
    /// Longest time the library waits for the daemon before reading anyway.
    #[arg(long, value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    pub timeout: Option<std::time::Duration>,
    /// Write the daemon's final metrics as JSON here (daemon started here).
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// The program to run and its arguments.
    #[arg(last = true)]
    pub command: Vec<std::ffi::OsString>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.print_path {
        let path = vodkit_preload::library::path()
            .map_err(|e| anyhow::anyhow!("cannot write the preload shim's library: {e}"))?;
        println!("{}", path.display());
        return Ok(());
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err(super::usage(
            "nothing to run: give a command after `--` (or --print-path)",
        ));
    };
    let config = args.daemon.config()?;
    if config.admission != vodkit_prefetch::admission::AdmissionPolicy::Off {
        return Err(super::usage(
            "--admission answers on an admin listener, which `vodkit preload`'s own daemon has \
             not: run `vodkit prefetchd --admission … --admin ADDR` and point nginx at it",
        ));
    }
    let mut preload = Preload::start(config)?;
    if preload.daemon().is_none() {
        eprintln!(
            "vodkit preload: using the daemon already listening on {} (its own policy and mode)",
            preload.socket().display()
        );
    }
    if let Some(t) = args.timeout {
        preload = preload.with_timeout_ms(t.as_millis() as u64);
    }
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let status = run_command(&preload, cmd)
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", program.to_string_lossy()))?;
    if let Some(m) = preload.finish() {
        if let Some(path) = &args.metrics {
            vodkit_preload::daemon::write_metrics(path, &m)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        }
    }
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => {
            use std::os::unix::process::ExitStatusExt;
            std::process::exit(128 + status.signal().unwrap_or(0))
        }
    }
}

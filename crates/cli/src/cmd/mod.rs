//! One module per subcommand. Conventions shared by all of them:
//! errors print as one line `vodkit: <what>: <why>`; bad input (files, flags, specs) is a
//! [`UsageError`] and exits 2; runtime failures exit 1.

pub mod bench;
pub mod cluster;
pub mod demo;
pub mod fileset;
pub mod flags;
pub mod hdd;
pub mod live;
pub mod load;
pub mod prefetchd;
pub mod preload;
pub mod run;
pub mod serve;
pub mod simulate;
pub mod synth;
pub mod sys;
pub mod tls;
pub mod trace;
pub mod workload;

use std::fmt;
use std::process::ExitCode;

/// Marks an error as the user's input being wrong (exit code 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Wrap any displayable input error as a usage error.
/// `path` made absolute against the working directory (paths handed to servers and
/// child processes that run elsewhere must not depend on our working directory).
pub fn absolute(path: &std::path::Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

pub fn usage(e: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(UsageError(e.to_string()))
}

/// Restore the default SIGPIPE action, so `vodkit trace ... | head` ends quietly like
/// other Unix tools instead of panicking on a closed standard output.
pub fn restore_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL at start-up, before any thread runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Log to stderr at `warn` (`VODKIT_LOG` overrides, e.g. `VODKIT_LOG=debug`). The FUSE
/// library's notices about operations the emulated disk does not implement are noise for
/// users, so it logs errors only.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VODKIT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fuser=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Exit for an argument error from clap. Help and version go to stdout as clap prints them;
/// a usage error prints one line (`vodkit: <what>; see --help`) and exits 2, like every
/// other input error.
pub fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        // `vodkit` or `vodkit hdd` alone: the help is the answer, but it is still an error.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            // clap's first paragraph says what is wrong (a missing-argument error lists the
            // arguments on the lines below); tips and the usage block follow a blank line.
            let text = e.to_string();
            let what: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let what = what.join(" ");
            let what = what.strip_prefix("error: ").unwrap_or(&what);
            eprintln!("vodkit: {what}; see --help");
            ExitCode::from(2)
        }
    }
}

/// Print the error on one line and map it to the process exit code.
pub fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("vodkit: {line}");
            if e.chain().any(|c| c.is::<UsageError>()) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

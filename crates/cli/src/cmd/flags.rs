//! The flag vocabulary shared by the subcommands: value parsers for sizes, durations and
//! rates (all from `vodkit_units`, so every flag accepts the same forms) and the argument
//! groups several subcommands flatten, so one concept has one name everywhere.
//!
//! Names settled here: `--quiet` (no progress output; `--progress` forces a status line
//! where stderr is not a terminal), `--duration` (how long a run or each data point lasts),
//! `--interval` (how often a periodic sample or report is taken),
//! `--ingest-token`/`--ingest-token-file` (the live publisher's bearer token), `--bitrate`
//! (a bit rate with units), `--prefetch` (a prefetch policy), `--memory` (`auto|off|SIZE`),
//! `--sign-key`/`--sign-ttl`/`--sign-form` (a client signing URLs; the server's side is
//! `--secure-link`), `readahead` as one word, and `--format` for output formats only (an
//! input's dialect is `--log-format`). Older spellings stay as hidden aliases.

use std::time::Duration;
use vodkit_units::{Memory, UnitError};

/// Value name of flags taking a size; the cli tests find size flags by it.
pub const SIZE: &str = "SIZE";
/// Value name of flags taking a duration.
pub const DURATION: &str = "DURATION";
/// Value name of flags taking a bit rate.
pub const BITRATE: &str = "BITRATE";
/// Value name of flags taking a data rate (bytes per second).
pub const DATA_RATE: &str = "DATA_RATE";
/// Value name of flags taking sessions per second.
pub const SESSION_RATE: &str = "SESSION_RATE";
/// Value name of flags taking a memory setting.
pub const MEMORY: &str = "auto|off|SIZE";

/// A size: `512KiB`, `1GiB`, `3M`, `2.5MB`, `4096`.
pub fn size(s: &str) -> Result<u64, UnitError> {
    vodkit_units::parse_size(s)
}

/// A size above zero.
pub fn positive_size(s: &str) -> Result<u64, UnitError> {
    vodkit_units::parse_positive_size(s)
}

/// A duration: `60`, `60s`, `1m30s`, `250ms`, `2h`.
pub fn duration(s: &str) -> Result<Duration, UnitError> {
    vodkit_units::parse_duration(s)
}

/// A duration flag that may be `auto` (`None`: the value is derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoDuration(pub Option<Duration>);

/// `auto` or a duration.
pub fn auto_or_duration(s: &str) -> Result<AutoDuration, UnitError> {
    if s == "auto" {
        Ok(AutoDuration(None))
    } else {
        duration(s).map(|d| AutoDuration(Some(d)))
    }
}

/// A bit rate in bits per second: `800k`, `3M`, `3Mbit/s`, `1.5Mbps`.
pub fn bit_rate(s: &str) -> Result<u64, UnitError> {
    vodkit_units::parse_bit_rate(s)
}

/// A data rate in bytes per second: `2.5MB/s`, `20MiB/s`, `1KiB`.
pub fn byte_rate(s: &str) -> Result<u64, UnitError> {
    vodkit_units::parse_byte_rate(s)
}

/// Sessions per second: `2`, `0.5/s`, `120/min`.
pub fn session_rate(s: &str) -> Result<f64, UnitError> {
    vodkit_units::parse_session_rate(s)
}

/// `auto`, `off` or a size.
pub fn memory(s: &str) -> Result<Memory, UnitError> {
    vodkit_units::parse_memory(s)
}

/// A bit rate from a legacy `--...-kbps` flag: a bare number is kbit/s.
pub fn kbps_as_bit_rate(s: &str) -> Result<u64, UnitError> {
    vodkit_units::parse_kbps(s).map(|k| k.saturating_mul(1000))
}

/// The `--set KEY=VALUE` overrides of a workload spec, split.
pub fn spec_sets(sets: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    sets.iter()
        .map(|s| vodkit_workload::spec::split_set(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(super::usage)
}

/// The live publisher's bearer token: the value of `--ingest-token`, or the first line of
/// the `--ingest-token-file` file (trimmed); `None` when neither flag is given. The flags
/// conflict, so at most one is set.
pub fn ingest_token(
    token: Option<&str>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<String>> {
    match (token, file) {
        (Some(t), _) => Ok(Some(t.to_string())),
        (None, Some(f)) => Ok(Some(
            std::fs::read_to_string(f)
                .map_err(|e| super::usage(format!("--ingest-token-file {}: {e}", f.display())))?
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string(),
        )),
        (None, None) => Ok(None),
    }
}

/// `--quiet`: no progress output (for commands that show progress by default).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct Quiet {
    /// No progress output.
    #[arg(long)]
    pub quiet: bool,
}

impl Quiet {
    /// Whether to show progress.
    pub fn progress(self) -> bool {
        !self.quiet
    }
}

/// `--memory` of the servers with vodkit's prefetch-aware memory manager.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct PrefetchMemory {
    /// Prefetch-aware memory: `auto` (budget from the cgroup limit, else total RAM), a
    /// budget such as 1GiB, or `off` (the kernel's LRU alone). See docs/prefetch.md.
    #[arg(long, default_value = "auto", value_name = MEMORY, value_parser = memory)]
    pub memory: Memory,
}

impl PrefetchMemory {
    pub fn setting(self) -> vodkit_prefetch::budget::MemorySetting {
        self.memory.into()
    }
}

/// `--quiet` and `--progress` of a command that draws a status line when stderr is a
/// terminal.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct StatusLine {
    /// No status line.
    #[arg(long, conflicts_with = "progress")]
    pub quiet: bool,
    /// Show the live status line even when stderr is not a terminal.
    #[arg(long)]
    pub progress: bool,
}

/// `--sign-key`, `--sign-ttl`, `--sign-form`: sign every requested URL for a server that
/// checks signatures (`vodkit serve --secure-link`, nginx `secure_link`).
#[derive(clap::Args, Debug, Clone)]
pub struct SignUrls {
    /// Sign every requested URL with the secret in this file (one line), as `vodkit serve
    /// --secure-link` and nginx `secure_link` check it. URLs a signed manifest gave the
    /// player are sent as they are. See docs/load.md "Signed URLs".
    #[arg(long, value_name = "FILE")]
    pub sign_key: Option<std::path::PathBuf>,
    /// How long each signature is valid from the moment its request is sent.
    #[arg(long, default_value = "1h", value_name = DURATION, value_parser = duration, requires = "sign_key")]
    pub sign_ttl: Duration,
    /// `md5` (nginx `secure_link_md5`: `?md5=…&expires=…`) or `hmac` (HMAC-SHA-256:
    /// `?hmac=…&expires=…`; vodkit serve only).
    #[arg(
        long,
        default_value = "md5",
        value_name = "md5|hmac",
        requires = "sign_key"
    )]
    pub sign_form: vodkit_securelink::Form,
}

impl SignUrls {
    /// The signer the flags describe; `None` without `--sign-key`.
    pub fn signer(&self) -> anyhow::Result<Option<vodkit_securelink::Signer>> {
        let Some(path) = &self.sign_key else {
            return Ok(None);
        };
        let secret = vodkit_securelink::Secret::from_file(path)
            .map_err(|e| super::usage(format!("--sign-key {e}")))?;
        Ok(Some(vodkit_securelink::Signer {
            secret,
            form: self.sign_form,
            ttl_s: self.sign_ttl.as_secs().max(1),
        }))
    }
}

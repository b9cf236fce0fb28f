//! What running vodkit itself as a child process takes, for `vodkit serve`
//! ([`crate::adapters::ChildVodkit`]) and `vodkit prefetchd` ([`crate::preload`]): the
//! command wrapper that puts it under the memory budget, its `--memory` argument, which of
//! its log lines are errors, the words that say it died mid-point, and where its
//! executable is.

use std::path::PathBuf;
use std::process::Command;
use vodkit_peers::process::http_request;
use vodkit_prefetch::budget::MemorySetting;

/// Rewrites a server command (e.g. to run it in a memory cgroup or under the preload shim).
pub type CommandWrap = Box<dyn Fn(Command) -> Result<Command, String>>;

/// Environment variable naming the vodkit executable when the bench runs inside another
/// program (a test, a library user) rather than as `vodkit bench`.
pub const ENV_VODKIT: &str = "VODKIT";

/// For test suites: `$VODKIT`, else the vodkit executable cargo built next to the running
/// test binary (`target/<profile>/vodkit`, present after `cargo build -p vodkit` or a
/// workspace build). `None` when there is none.
pub fn built_vodkit() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_VODKIT) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    Some(profile_dir.join("vodkit")).filter(|p| p.is_file())
}

/// What the stop line of a server or daemon that died mid-point says (the progress line
/// looks for it).
pub(crate) const EXITED_DURING_RUN: &str = "exited during the run";

/// Whether a line of a vodkit child's log is an error.
pub(crate) fn vodkit_error_line(line: &str) -> bool {
    line.contains(" ERROR ") || line.contains("panicked")
}

/// The `--memory` argument for a setting.
pub(crate) fn memory_arg(m: MemorySetting) -> String {
    match m {
        MemorySetting::Off => "off".into(),
        MemorySetting::Auto => "auto".into(),
        MemorySetting::Budget(b) => b.to_string(),
    }
}

/// `POST /clock?rate=R` to the admin listener on `port` (`vodkit serve`, `vodkit prefetchd`).
pub fn set_clock_rate(port: u16, rate: f64) -> Result<(), String> {
    match http_request(port, "POST", &format!("/clock?rate={rate}")) {
        Ok((204, _)) => Ok(()),
        Ok((status, body)) => Err(format!(
            "POST /clock: {status} {}",
            String::from_utf8_lossy(&body).trim()
        )),
        Err(e) => Err(format!("POST /clock: {e}")),
    }
}

//! What a test needs beyond its own process, and the one rule for a missing need: print
//! one line naming the test and the missing thing and return early, except under CI,
//! where every test must run and a missing need fails the test.

use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};

/// One thing a test needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need<'a> {
    /// Running as root (cgroups, mounts, namespaces, dropping caches).
    Root,
    /// The FUSE device and root, for the emulated disk (mounted with mount(2)).
    Fuse,
    /// A peer web server installed: `"nginx"` or `"apache2"`.
    Peer(&'a str),
    /// A program on the `PATH` (`curl`, `ffmpeg`, `httperf`, ...).
    Tool(&'a str),
    /// A Python 3 module importable (`"libcachesim"`).
    Python(&'a str),
    /// Network namespaces and veth links (root and `ip`).
    Netns,
    /// A headless Chromium (`chromium` on the `PATH`).
    Browser,
    /// Nothing outside the process, but long: the full tier only.
    Slow,
}

impl fmt::Display for Need<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Root => write!(f, "root"),
            Need::Fuse => write!(f, "FUSE (/dev/fuse and root)"),
            Need::Peer(p) => write!(f, "the peer server {p}"),
            Need::Tool(t) => write!(f, "the program {t}"),
            Need::Python(m) => write!(f, "the Python module {m}"),
            Need::Netns => write!(f, "network namespaces (root and ip)"),
            Need::Browser => write!(f, "a headless Chromium"),
            Need::Slow => write!(f, "the full tier (a long test)"),
        }
    }
}

/// The environment variable that selects the fast tier (`VODKIT_TEST_TIER=fast`).
pub const TIER_VAR: &str = "VODKIT_TEST_TIER";

/// Whether this run is the fast tier: only tests that need nothing outside the process.
pub fn fast_tier() -> bool {
    std::env::var(TIER_VAR).is_ok_and(|t| t == "fast")
}

/// Whether CI is running the tests (`CI` set, and not `false` or `0`): then every test
/// must run, and a missing need is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The running test's name (libtest names each test's thread after the test).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("this test")
        .to_string()
}

/// Whether everything in `needs` is here. When something is missing this prints
/// `SKIPPED <test>: needs <thing>` (on stderr, shown even when the test passes) and returns
/// false (the test returns early); under CI it
/// panics instead. In the fast tier a test with any need is skipped without looking.
pub fn needs(needs: &[Need<'_>]) -> bool {
    if let Some(first) = needs.first() {
        if fast_tier() {
            say(format_args!(
                "SKIPPED {}: the fast tier leaves out tests that need {first}",
                test_name()
            ));
            return false;
        }
    }
    match needs.iter().find(|n| !present(n)) {
        None => true,
        Some(missing) => {
            skip(format_args!("needs {missing}"));
            false
        }
    }
}

/// A test cannot run here for `reason` (found while it ran, e.g. the emulated disk's
/// preflight failed): prints `SKIPPED <test>: <reason>`, or fails under CI.
pub fn skip(reason: impl fmt::Display) {
    let name = test_name();
    if in_ci() && !fast_tier() {
        panic!(
            "{name}: {reason}; CI is set, so this test must run \
             (scripts/install-test-deps installs what the tests need)"
        );
    }
    say(format_args!("SKIPPED {name}: {reason}"));
}

/// The machine lacks something no package provides (a kernel feature turned off): prints
/// `SKIPPED <test>: <reason>`, even under CI.
pub fn not_here(reason: impl fmt::Display) {
    say(format_args!("SKIPPED {}: {reason}", test_name()));
}

/// Writes one line to the process's stderr, past libtest's output capture (which takes only
/// what the print macros write), so that a skip shows in every run, not just failing ones.
fn say(line: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

fn present(need: &Need<'_>) -> bool {
    match need {
        Need::Root => is_root(),
        Need::Fuse => is_root() && Path::new("/dev/fuse").exists(),
        Need::Peer("nginx") => vodkit_peers::nginx_program().is_some(),
        Need::Peer("apache2" | "apache" | "httpd") => vodkit_peers::apache_program().is_some(),
        Need::Peer(other) | Need::Tool(other) => vodkit_peers::find_program(other).is_some(),
        Need::Python(module) => python_has(module),
        Need::Netns => is_root() && vodkit_peers::find_program("ip").is_some(),
        Need::Browser => vodkit_peers::find_program("chromium").is_some(),
        Need::Slow => true,
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_is_named_after_its_thread() {
        assert!(test_name().ends_with("a_test_is_named_after_its_thread"));
    }

    #[test]
    fn nothing_needed_is_always_here() {
        assert!(needs(&[]));
        assert!(present(&Need::Slow));
    }

    #[test]
    fn needs_read_as_the_missing_thing() {
        assert_eq!(Need::Peer("nginx").to_string(), "the peer server nginx");
        assert_eq!(
            Need::Python("libcachesim").to_string(),
            "the Python module libcachesim"
        );
    }
}

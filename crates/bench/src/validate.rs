//! The `validate` experiment: the trace-driven simulator (`vodkit-sim`) against a real
//! run. [`run`] serves a cut-down `netflix-2014` workload ([`shrink`]) from the emulated
//! disk, measures the device and the engine, and hands the measurement to the pure
//! `vodkit_sim::validate::compare`; [`write_report`] writes `validate.json`.
//!
//! `vodkit simulate --validate` and `vodkit bench --scenario validate` both run it.

pub mod run;
pub mod shrink;

pub use run::{run, summary_text, RunOptions, RunReport};

use std::path::PathBuf;

/// The experiment's name as a scenario (`vodkit bench --scenario validate`).
pub const SCENARIO: &str = "validate";
/// What it mirrors and checks, for `--scenario list`.
pub const MIRRORS: &str = "thesis 5.6.2 (the resource model against a measured run)";
pub const CHECKS: &str = "reports the simulator's error in disk utilization and prefetch memory against the emulated disk's counters at fixed:2MiB (docs/simulate.md: within 11% so far)";
/// Rough wall time (minutes) of a default run.
pub const MINUTES: u64 = 4;

/// Name of the report file in the run's directory.
pub const REPORT: &str = "validate.json";

/// Run the validation in `o.dir` (progress lines to `note`), write `validate.json` there
/// and return the summary text with the report's path.
pub fn run_and_report(o: &RunOptions, note: &mut dyn FnMut(&str)) -> Result<String, String> {
    let rep = run(o, note)?;
    let path = write_report(&rep, &o.dir)?;
    Ok(format!("{}-> {}\n", summary_text(&rep), path.display()))
}

/// Write `rep` as `dir/validate.json`; returns the path.
pub fn write_report(rep: &RunReport, dir: &std::path::Path) -> Result<PathBuf, String> {
    let path = dir.join(REPORT);
    let text = serde_json::to_string_pretty(rep).map_err(|e| format!("{REPORT}: {e}"))?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_fixed_policy_is_run_and_nothing_is_touched_before() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("v");
        let mut o = RunOptions::new(&dir);
        o.policy = "auto".parse().unwrap();
        let e = run_and_report(&o, &mut |_| {}).unwrap_err();
        assert!(e.contains("auto") && e.contains("fixed"), "{e}");
        // (An unknown drive cannot reach here any more: `Preset` is parsed at argv.)
        assert!("floppy".parse::<vodkit_disk::model::Preset>().is_err());
        assert!(!dir.exists(), "a refused run created {}", dir.display());
    }
}

//! `vodkit demo`: a capacity comparison in about 7 minutes on built-in defaults — the
//! `memory` scenario's 256 MiB workload (youtube-2011 at 10% scale, four times faster), the
//! emulated WD Red with a memory budget when this machine can host it (plain disk otherwise,
//! and the report says so), vodkit:asap:auto against nginx and Apache when they are
//! installed. It sets itself up first ([`crate::setup`]): as root on Debian or Ubuntu it
//! installs what is missing (unless told not to), elsewhere it prints the command to run.

use crate::report::{self, ServerReport};
use crate::runner::{finish, BarProgress, RunError, TestbedChoice};
use crate::scenario;
use crate::scenario_run::{run_cell, CellPlan};
use crate::search::Criterion;
use crate::setup;
use crate::sut;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Demo settings (exposed so the docs and tests use the same numbers).
pub const SPEC: &str = "youtube-2011";
pub const SCALE: f64 = 0.1;
/// The workload of the `memory` scenario's 256 MiB cell: youtube-2011 compressed four times
/// in time ([`scenario::YOUTUBE_4X`]: 512 KiB requests of 2.5 s of content at 1,676 kbit/s,
/// titles of at most 40 s, so a session of up to 16 paced requests fits a short point) with
/// the cell's catalog of 375 titles (3 GB), so the demo and that cell share one cached file
/// set and one row of docs/reproduction.md. On youtube-2011 at its own pace with 40 s
/// titles the demo would judge sessions of at most four requests, three of them fetched
/// back to back as the player's prebuffer, which leaves prefetching nothing to serialize
/// (vodkit 1.25 × nginx there; docs/bench.md, "Demo").
pub fn sets() -> Vec<&'static str> {
    scenario::smallest_memory_cell_sets()
}
/// Load per point (seconds, settling included): 25–70 judged sessions at the
/// rates the servers reach, so a capacity is good to about one search step.
pub const POINT_S: u64 = 30;
/// Offered load the search's guess aims at (MB/s): the `memory` scenario's, 10.04 sessions/s.
pub const GUESS_MB_S: f64 = 50.0;
/// Steps above the search's start: the ceiling is (1 + this) × guess/2, 25.1 sessions/s,
/// above the capacity bound (23.6 with sweeps counted), so no server stops at the ceiling
/// below what the drive allows.
pub const MAX_STEPS: u32 = 4;
/// Memory budget on the emulated disk (smaller than the file set, so the disk matters).
pub const MEMORY_BYTES: u64 = 256 << 20;
/// A point passes when no session fails, no request times out and 95% of the sessions end
/// at most 2 s behind their own pace: the capacity is the rate a server *serves*, as the
/// capacity bound assumes. Under `strict` (or `quality` judged on this workload's
/// deep-buffered probes) a disk-bound server passes while every viewer's session
/// stretches (docs/bench.md, "Why `pace`").
pub const CRITERION: Criterion = Criterion::Pace { max_lag_s: 2.0 };

/// Why the emulated disk cannot be used here (None when it can).
pub fn emulation_unavailable() -> Option<String> {
    vodkit_disk::testbed::preflight()
        .err()
        .map(|e| e.to_string())
}

/// The servers the demo compares, with messages for the ones left out.
pub fn servers() -> (Vec<sut::Sut>, Vec<(&'static str, String)>) {
    let mut list = vec!["vodkit:asap:auto"];
    let mut messages = Vec::new();
    for need in [setup::NGINX, setup::APACHE] {
        let (sut, program) = match need.program {
            "nginx" => ("nginx", vodkit_peers::launch::nginx_program()),
            _ => ("apache", vodkit_peers::launch::apache_program()),
        };
        if program.is_some() {
            list.push(sut);
        } else {
            messages.push((sut, setup::missing_peer(&need)));
        }
    }
    let suts = sut::parse_list(&list.join(",")).expect("built-in server list parses");
    (suts, messages)
}

/// What the demo needs: the emulated disk's tools and both peers.
pub fn needs() -> Vec<setup::Need> {
    let mut v = setup::DISK_NEEDS.to_vec();
    v.extend([setup::NGINX, setup::APACHE]);
    v
}

/// Run the demo into `out`; returns the table and the report paths. `install`: install what
/// is missing where this process may (false: print the command instead). `early_stop`: end
/// each point once its failure is certain ([`crate::early`]).
pub fn run(
    out: &Path,
    vodkit_exe: Option<PathBuf>,
    show_progress: bool,
    install: bool,
    early_stop: bool,
) -> Result<String, RunError> {
    crate::runner::create_out(out)?;
    // Setup lines are printed even when quiet: they say what changes on this machine.
    let mut notes = setup::prepare(&mut setup::Host, &needs(), install, &mut |l: &str| {
        eprintln!("{l}")
    });
    let mut progress = BarProgress::new(show_progress);
    let (testbed, memory) = match emulation_unavailable() {
        None => (
            TestbedChoice::Hdd(vodkit_disk::model::Preset::WdRed),
            Some(MEMORY_BYTES),
        ),
        Some(why) => {
            let m = format!(
                "emulated wd-red disk not used ({why}): running on this machine's plain disk without a memory budget, \
                 so capacities reflect its disk and page cache, not a 5,400 rpm drive"
            );
            progress.line(m.clone());
            notes.push(m);
            (TestbedChoice::Plain, None)
        }
    };
    let (suts, skipped) = servers();
    for (_, m) in &skipped {
        progress.line(m.clone());
    }
    let cell = CellPlan {
        label: String::new(),
        spec: SPEC.into(),
        sets: sets().iter().map(|s| s.to_string()).collect(),
        scale: SCALE,
        testbed,
        memory,
        server_cpus: None,
        suts,
        point: Duration::from_secs(POINT_S),
        guess_mb_s: GUESS_MB_S,
        // Steps of guess/2 (5.02 sessions/s) up to twice the guess (20.1 sessions/s), above
        // the workload's capacity bound (18.42 sessions/s at 256 MiB on wd-red): every
        // server's capacity is bracketed, none is reported at a ceiling it could have passed.
        max_steps: MAX_STEPS,
        sequential: false,
        precision_div: 8.0,
        criterion: CRITERION,
        probes: None,
        repeat: 1,
        fast_forward: Default::default(),
        early_stop,
    };
    let (mut servers, bound): (Vec<ServerReport>, _) = run_cell(
        &cell,
        out,
        vodkit_exe.as_ref(),
        &mut progress,
        &mut notes,
        &mut None,
    );
    progress.finish();
    for (name, m) in skipped {
        let s = sut::parse_one(name).expect("literal server name");
        servers.push(ServerReport::not_measured(&s, report::SKIPPED, m));
    }
    let mut rep = report::new_report(
        &format!("{SPEC} scaled x{SCALE}, {}", sets().join(" ")),
        &cell.testbed.to_string(),
        cell.memory,
        &CRITERION.to_string(),
        &crate::search::SearchPlan::failure_free_around(1.0),
        1,
    );
    rep.search = if bound.is_some() {
        serde_json::json!({"kind": "failure-free", "start": "bound/2", "step": "bound/4", "precision": "bound/32", "max": "bound", "point_s": POINT_S})
    } else {
        serde_json::json!({"kind": "failure-free", "start": "guess/2", "step": "guess/2", "precision": "guess/8", "max": "2 guess", "point_s": POINT_S})
    };
    rep.servers = servers;
    rep.notes = notes;
    if let Some(b) = &bound {
        report::apply_bound(&mut rep, b);
    }
    let verdict = if let (Some(v), Some(n)) = (rep.server("vodkit:asap:auto"), rep.server("nginx"))
    {
        let ratio = v
            .max_failure_free_rate
            .zip(n.max_failure_free_rate)
            .and_then(|(a, b)| (b > 0.0).then(|| a / b));
        let ceiling = v.hit_ceiling || n.hit_ceiling;
        rep.comparisons.push(report::Comparison {
            what: "vodkit:asap:auto / nginx".into(),
            ratio,
            target: Some(TARGET_RATIO),
            met: ratio
                .filter(|_| !ceiling)
                .map(|r| crate::scenario::meets(r, TARGET_RATIO)),
            note: "ratio of max failure-free rates in this run".into(),
        });
        verdict(ratio, ceiling)
    } else {
        "inconclusive: nginx was not measured (not installed)".to_string()
    };
    rep.scenario = Some(report::ScenarioInfo {
        name: "demo".into(),
        mirrors: "thesis ch. 4, seed 001 Table 3".into(),
        finding:
            "a server that serializes its disk reads and prefetches aggressively serves 2–3.6× the \
                  viewers of a default web server from a disk-bound video library"
                .into(),
        verdict,
    });
    finish(&mut rep, out).map(|(_, t)| t)
}

/// The seeds' smallest gain over a default web server (docs/reproduction.md).
const TARGET_RATIO: f64 = 2.0;

/// The demo's verdict on its seed finding from the vodkit / nginx ratio.
fn verdict(ratio: Option<f64>, ceiling: bool) -> String {
    match ratio {
        None => "inconclusive: a server has no passing rate".into(),
        Some(r) if ceiling => {
            format!("inconclusive: {r:.2}× nginx with a server at the search's ceiling")
        }
        Some(r) if crate::scenario::meets(r, TARGET_RATIO) => {
            format!("reproduced: vodkit serves {r:.2}× nginx (the seeds: 2–3.6×)")
        }
        Some(r) => format!(
            "not reproduced: vodkit serves {r:.2}× nginx, the seeds 2–3.6× \
             (docs/reproduction.md says why)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::verdict;

    /// The demo is the `memory` scenario's 256 MiB cell run with the demo's servers: same
    /// workload overrides (so one cached workload and file set), same budget.
    #[test]
    fn the_demo_runs_the_memory_scenarios_256_mib_cell() {
        let memory = crate::scenario::find("memory").expect("memory scenario");
        let cell = memory
            .cells
            .iter()
            .find(|c| c.label == "mem=256MiB")
            .expect("256 MiB cell");
        assert_eq!(cell.sets, super::sets());
        assert_eq!(cell.spec, super::SPEC);
        assert_eq!(memory.scale, super::SCALE);
        let budget = vodkit_units::parse_size(cell.memory).unwrap();
        assert_eq!(budget, super::MEMORY_BYTES);
        assert_eq!(cell.testbed, "hdd:wd-red");
    }

    #[test]
    fn the_verdict_follows_the_ratio_and_the_ceiling() {
        assert!(verdict(Some(2.4), false).starts_with("reproduced: vodkit serves 2.40×"));
        assert!(verdict(Some(1.3), false).starts_with("not reproduced: vodkit serves 1.30×"));
        assert!(verdict(Some(2.4), true).starts_with("inconclusive"));
        assert!(verdict(None, false).starts_with("inconclusive"));
    }
}

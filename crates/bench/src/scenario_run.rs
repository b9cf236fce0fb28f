//! Running scenarios (and the demo): prepare each cell's workload and file set (cached),
//! bring up its testbed, search every server's capacity, merge the cells into one report
//! with cell-qualified server names, and judge the seed finding.

use crate::bound::CapacityBound;
use crate::report::{self, BenchReport, Comparison, ScenarioInfo, ServerReport};
use crate::runner::{finish, run_workload, BarProgress, Ran, RunError, RunSetup, TestbedChoice};
use crate::scenario::{self, Scenario};
use crate::search::{Criterion, SearchPlan};
use crate::sut;
use crate::{prepare, sut::Sut};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One cell ready to run.
#[derive(Debug, Clone)]
pub struct CellPlan {
    pub label: String,
    pub spec: String,
    pub sets: Vec<String>,
    pub scale: f64,
    pub testbed: TestbedChoice,
    pub memory: Option<u64>,
    /// CPU quota of each server, in cores.
    pub server_cpus: Option<f64>,
    pub suts: Vec<Sut>,
    pub point: Duration,
    /// Offered load (MB/s) the first guess of the search aims at.
    pub guess_mb_s: f64,
    /// Steps of guess/2 above the start before the search stops at its ceiling.
    pub max_steps: u32,
    /// Also time a sequential read of the requested files on the testbed.
    pub sequential: bool,
    /// The search stops bisecting at guess / this.
    pub precision_div: f64,
    pub criterion: Criterion,
    /// Probe sessions per point (`--probe`).
    pub probes: Option<vodkit_load::probe::Probes>,
    pub repeat: u32,
    /// The history played before every point.
    pub fast_forward: crate::warmup::FastForwardChoice,
    /// End each point once its failure is certain ([`crate::early`]).
    pub early_stop: bool,
}

/// Turn a scenario's data into runnable cells.
pub fn cells(s: &Scenario) -> Result<Vec<CellPlan>, String> {
    s.cells
        .iter()
        .map(|c| {
            let mut sets: Vec<String> = c.sets.iter().map(|x| x.to_string()).collect();
            if c.layout != "unchunked" {
                sets.push(format!("layout={}", c.layout));
            }
            let memory = vodkit_units::parse_size(c.memory)
                .map_err(|e| e.at(format!("scenario cell {}: memory", c.label)))?;
            Ok(CellPlan {
                label: c.label.to_string(),
                spec: c.spec.to_string(),
                sets,
                scale: s.scale,
                testbed: TestbedChoice::parse(c.testbed)?,
                memory: Some(memory),
                server_cpus: c.server_cpus,
                suts: sut::parse_list(&c.suts.join(",")).map_err(|e| e.to_string())?,
                point: Duration::from_secs(s.point_seconds()),
                guess_mb_s: c.guess_mb_s.unwrap_or(s.guess_mb_s),
                max_steps: 8,
                // Only the cell holding the compared server reads the files sequentially.
                sequential: s.sequential_reference.is_some_and(|(name, _)| {
                    c.suts
                        .iter()
                        .any(|&x| scenario::qualified(c.label, x) == name)
                }),
                precision_div: 8.0,
                criterion: match s.criterion {
                    Some(c) => c.parse()?,
                    None => Criterion::Strict,
                },
                probes: s.probes.map(str::parse).transpose()?,
                repeat: s.repeat.max(1),
                fast_forward: s.fast_forward,
                early_stop: s.early_stop,
            })
        })
        .collect()
}

/// Every server of `cell` reported as not measured for `why`.
fn all_skipped(cell: &CellPlan, status: &str, why: &str) -> Vec<ServerReport> {
    cell.suts
        .iter()
        .map(|s| {
            let mut r = ServerReport::not_measured(s, status, why.to_string());
            r.sut = scenario::qualified(&cell.label, &s.label);
            r
        })
        .collect()
}

/// Run one cell; servers come back with cell-qualified names, with the cell's capacity
/// bound (servers carry their fraction of it) when its testbed has a drive model.
pub fn run_cell(
    cell: &CellPlan,
    out: &Path,
    vodkit_exe: Option<&PathBuf>,
    progress: &mut BarProgress,
    notes: &mut Vec<String>,
    sequential: &mut Option<f64>,
) -> (Vec<ServerReport>, Option<CapacityBound>) {
    let cache = prepare::cache_dir();
    let sets: Vec<&str> = cell.sets.iter().map(String::as_str).collect();
    progress.message(format!(
        "{}: generating workload {} (scale {})",
        cell.label, cell.spec, cell.scale
    ));
    let workload = match prepare::workload(&cell.spec, &sets, cell.scale, &cache) {
        Ok(w) => w,
        Err(e) => {
            return (
                all_skipped(cell, report::FAILED, &format!("workload: {e}")),
                None,
            )
        }
    };
    // On an emulated drive the bound brackets every server: plan from it. Elsewhere the
    // cell's own guess, steps and precision.
    let plan = |guess: f64, bound: Option<f64>| -> Result<SearchPlan, String> {
        Ok(match bound {
            Some(b) if b.is_finite() && b > 0.0 => SearchPlan::within_bound(b),
            _ => SearchPlan::FailureFree {
                start: guess / 2.0,
                step: guess / 2.0,
                precision: guess / cell.precision_div,
                max_rate: guess / 2.0 * f64::from(1 + cell.max_steps),
            },
        })
    };
    let safe = crate::launch::file_name_part(&cell.label, &[]);
    let setup = RunSetup {
        workload: &workload,
        root: None,
        testbed: &cell.testbed,
        memory: cell.memory,
        server_cpus: cell.server_cpus,
        suts: &cell.suts,
        point: Some(cell.point),
        guess_mb_s: cell.guess_mb_s,
        plan: &plan,
        criterion: cell.criterion,
        repeat: cell.repeat,
        run_base: out.join("runs").join(safe),
        vodkit_exe: vodkit_exe.map(PathBuf::as_path),
        label: &cell.label,
        sequential_read: cell.sequential,
        probes: cell.probes,
        players: None,
        fast_forward: cell.fast_forward,
        early_stop: cell.early_stop,
    };
    let Ran {
        report: rep,
        bound,
        sequential: seq,
        ..
    } = match run_workload(&setup, progress) {
        Ok(r) => r,
        Err(n) => return (all_skipped(cell, n.status, &n.error.to_string()), None),
    };
    match seq {
        Some(Ok(v)) => *sequential = Some(v),
        Some(Err(e)) => notes.push(labelled(
            &cell.label,
            &format!("sequential read reference not measured: {e}"),
        )),
        None => {}
    }
    notes.extend(rep.notes.iter().map(|n| labelled(&cell.label, n)));
    let servers = rep
        .servers
        .into_iter()
        .map(|mut s| {
            s.sut = scenario::qualified(&cell.label, &s.sut);
            s
        })
        .collect();
    (servers, bound)
}

/// Run a whole scenario and write its report into `out`.
pub fn run(
    s: &Scenario,
    out: &Path,
    vodkit_exe: Option<PathBuf>,
    show_progress: bool,
) -> Result<String, RunError> {
    let cells = cells(s).map_err(RunError::Usage)?;
    crate::runner::create_out(out)?;
    let mut progress = BarProgress::new(show_progress);
    let first = &cells[0];
    let plan = SearchPlan::failure_free_around(1.0);
    let mut rep = report::new_report(
        &format!("{} x{} (per cell)", first.spec, s.scale),
        &cells
            .iter()
            .map(|c| c.testbed.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        first.memory,
        &first.criterion.to_string(),
        &plan,
        first.repeat,
    );
    rep.search = serde_json::json!({"kind": "failure-free", "start": "bound/2 (guess/2 without a bound)", "step": "bound/4 (guess/2)", "precision": "bound/32 (guess/8)", "max": "bound", "point_s": s.point_seconds()});
    let mut notes = Vec::new();
    let mut sequential = None;
    let mut bounds = Vec::new();
    for c in &cells {
        if crate::interrupt::token().is_cancelled() {
            notes.push(format!(
                "cell `{}` and the ones after it were not run: {}",
                c.label,
                crate::interrupt::INTERRUPTED
            ));
            break;
        }
        progress.line(format!(
            "cell `{}`: {} servers",
            if c.label.is_empty() { "-" } else { &c.label },
            c.suts.len()
        ));
        let (servers, bound) = run_cell(
            c,
            out,
            vodkit_exe.as_ref(),
            &mut progress,
            &mut notes,
            &mut sequential,
        );
        rep.servers.extend(servers);
        bounds.extend(bound);
    }
    progress.finish();
    rep.notes = notes;
    // One cell: its bound is the run's. Several: each server carries its cell's fraction
    // and the notes give every cell's bound.
    if let ([b], 1) = (bounds.as_slice(), cells.len()) {
        rep.bound_rate = Some(b.bound_rate);
        rep.bound = Some(b.clone());
    }
    judge(s, &mut rep, sequential);
    finish(&mut rep, out).map(|(_, table)| table)
}

/// Fill in the scenario block and the comparisons.
pub fn judge(s: &Scenario, rep: &mut BenchReport, sequential_mb_s: Option<f64>) {
    let (mut comparisons, mut verdict): (Vec<Comparison>, String) = scenario::evaluate(s, rep);
    if let Some((name, target)) = s.sequential_reference {
        let disk = rep.server(name).and_then(|x| x.disk_mb_s);
        let ratio = disk
            .zip(sequential_mb_s)
            .and_then(|(d, q)| (q > 0.0).then(|| d / q));
        let note = match (disk, sequential_mb_s) {
            (Some(d), Some(q)) => format!(
                "{d:.1} MB/s from disk vs {q:.1} MB/s sequential read of the requested files"
            ),
            (None, _) => format!("{name} has no disk figures"),
            (_, None) => "the sequential read was not measured".to_string(),
        };
        let met = ratio.map(|r| r >= target);
        if verdict.starts_with("reproduced") {
            match met {
                Some(false) => {
                    verdict = format!(
                        "not reproduced: {name} disk MB/s / sequential read = {:.2} (target {target:.2})",
                        ratio.unwrap_or(0.0)
                    )
                }
                None => verdict = format!("inconclusive: {note}"),
                Some(true) => {}
            }
        }
        comparisons.push(Comparison {
            what: format!("{name} disk MB/s / sequential read"),
            ratio,
            target: Some(target),
            met,
            note,
        });
    }
    rep.comparisons = comparisons;
    if s.name == "matrix" {
        rep.notes.extend(crate::live::matrix_lines(rep));
    }
    rep.scenario = Some(ScenarioInfo {
        name: s.name.into(),
        mirrors: s.mirrors.into(),
        finding: s.finding.into(),
        verdict,
    });
}

/// A cell's note as the scenario report lists it: `label: note`, or the note alone for a
/// scenario's single unnamed cell.
fn labelled(label: &str, note: &str) -> String {
    if label.is_empty() {
        note.to_string()
    } else {
        format!("{label}: {note}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_cell_repeats_its_searches_as_the_scenario_says() {
        let mut s = crate::scenario::find("memory").unwrap();
        let once = super::cells(&s).unwrap();
        assert!(once.iter().all(|c| c.repeat == 1));
        s.repeat = 3;
        let thrice = super::cells(&s).unwrap();
        assert_eq!(thrice.len(), once.len());
        assert!(thrice.iter().all(|c| c.repeat == 3));
    }

    #[test]
    fn a_sequential_reference_without_figures_leaves_the_verdict_inconclusive() {
        let mut s = crate::scenario::find("memory").unwrap();
        s.checks.clear();
        let (name, _) = s.sequential_reference.unwrap();
        let mut rep = crate::report::new_report(
            "w",
            "hdd:wd-red",
            None,
            "pace:2s",
            &crate::search::SearchPlan::failure_free_around(1.0),
            1,
        );
        let sut = crate::sut::parse_one("vodkit:asap:auto").unwrap();
        let mut server = crate::report::ServerReport::not_measured(&sut, "measured", String::new());
        server.sut = name.to_string();
        rep.servers.push(server);
        super::judge(&s, &mut rep, Some(100.0));
        let verdict = &rep.scenario.as_ref().unwrap().verdict;
        assert!(verdict.starts_with("inconclusive"), "{verdict}");
        assert_eq!(rep.comparisons[0].met, None);
        // With the drive at 95 MB/s against a 100 MB/s sequential read it is met.
        rep.servers[0].disk_mb_s = Some(95.0);
        super::judge(&s, &mut rep, Some(100.0));
        let verdict = &rep.scenario.as_ref().unwrap().verdict;
        assert!(verdict.starts_with("reproduced"), "{verdict}");
    }

    #[test]
    fn an_unnamed_cell_adds_no_prefix_to_its_notes() {
        assert_eq!(super::labelled("", "capacity bound 1"), "capacity bound 1");
        assert_eq!(
            super::labelled("mem=1GiB", "capacity bound 1"),
            "mem=1GiB: capacity bound 1"
        );
    }
}

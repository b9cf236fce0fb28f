//! The bench's outputs: `bench.json` (the schema below, documented in docs/bench.md),
//! `report.md`, a self-contained `report.html` with inline SVG plots, and the terminal table.
//! [`check`] verifies that a report is complete and internally consistent.

pub mod html;
pub mod text;

use crate::point::{mean_of, PointMetrics};
use crate::search::{SearchOutcome, SearchPlan};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version tag of the bench.json layout.
pub const SCHEMA: &str = "vodkit-bench/1";

/// Top level of bench.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: String,
    pub generated_unix_s: u64,
    pub workload: String,
    pub testbed: String,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    pub criterion: String,
    pub search: serde_json::Value,
    pub repeat: u32,
    /// Unit of every rate in the file.
    pub rate_unit: String,
    /// The capacity bound: the highest rate any server could sustain with this workload,
    /// drive model and memory budget (omitted when the testbed has no drive model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_rate: Option<f64>,
    /// How the bound was computed (docs/bench.md, "The capacity bound").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<crate::bound::CapacityBound>,
    #[serde(default)]
    pub scenario: Option<ScenarioInfo>,
    pub servers: Vec<ServerReport>,
    #[serde(default)]
    pub comparisons: Vec<Comparison>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Which seed experiment a scenario mirrors and whether the run reproduced it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioInfo {
    pub name: String,
    pub mirrors: String,
    pub finding: String,
    /// "reproduced", "not reproduced" or "inconclusive", with the reason.
    pub verdict: String,
}

/// A measured ratio between two servers, or against a reference, with an optional target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub what: String,
    pub ratio: Option<f64>,
    #[serde(default)]
    pub target: Option<f64>,
    #[serde(default)]
    pub met: Option<bool>,
    pub note: String,
}

/// Outcome kinds for one server.
pub const MEASURED: &str = "measured";
pub const SKIPPED: &str = "skipped";
pub const FAILED: &str = "failed";

fn one_origin() -> usize {
    1
}

/// One server's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerReport {
    pub sut: String,
    pub kind: String,
    /// `measured`, `skipped` (not available here) or `failed` (error during the run).
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    /// Mean over repeats of the highest rate that met the criterion.
    pub max_failure_free_rate: Option<f64>,
    /// `max_failure_free_rate / (bound_rate × origins)` (its cell's bound in a scenario).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction_of_bound: Option<f64>,
    /// Origins behind the balancer of a cluster entry (each with the drive and budget the
    /// bound is drawn for); 1 for a single server.
    #[serde(default = "one_origin")]
    pub origins: usize,
    /// 95% confidence interval of that rate (t-distribution; needs ≥ 2 repeats).
    pub ci95: Option<[f64; 2]>,
    #[serde(default)]
    pub per_repeat: Vec<Option<f64>>,
    #[serde(default)]
    pub hit_ceiling: bool,
    /// The search stopped at a point that met the criterion without delivering the offered
    /// load (`search::Shortfall`): the capacity is a lower bound set by the testbed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<crate::search::Shortfall>,
    /// Figures at the capacity rate (mean over the repeats that passed there).
    pub throughput_mb_s: Option<f64>,
    pub disk_mb_s: Option<f64>,
    pub disk_ms_per_transaction: Option<f64>,
    pub avg_read_kib: Option<f64>,
    pub disk_util: Option<f64>,
    /// Machine-wide CPU busy share, iowait not counted (see `PointMetrics::cpu_busy`).
    #[serde(default)]
    pub cpu_busy: Option<f64>,
    /// Machine-wide iowait share.
    #[serde(default)]
    pub cpu_iowait: Option<f64>,
    /// Cores used by the server, the load generator and the disk emulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<crate::point::ProcessCores>,
    /// The CPU quota the server ran under (cores), when the run gave it one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<f64>,
    /// Files written before `cpu_busy`: 1 − idle (iowait counted as busy). Read only.
    #[serde(default, skip_serializing)]
    pub cpu_util: Option<f64>,
    #[serde(default)]
    pub qos: Option<serde_json::Value>,
    pub points: Vec<PointRecord>,
    /// Wall time of this server's whole search (start, warm-ups, points, stop), seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
}

/// One data point as stored in bench.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointRecord {
    pub rate: f64,
    pub repeat: u32,
    pub passed: bool,
    /// Met the criterion without delivering the offered load (not counted as a pass).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub short: bool,
    pub metrics: PointMetrics,
}

impl ServerReport {
    /// A server that could not be measured (missing program, dependency not landed, …).
    pub fn not_measured(sut: &crate::sut::Sut, status: &str, reason: String) -> ServerReport {
        ServerReport {
            sut: sut.label.clone(),
            kind: sut.kind().into(),
            status: status.into(),
            reason: Some(reason),
            max_failure_free_rate: None,
            fraction_of_bound: None,
            origins: sut.cluster.map_or(1, |c| c.origins),
            ci95: None,
            per_repeat: Vec::new(),
            hit_ceiling: false,
            shortfall: None,
            throughput_mb_s: None,
            disk_mb_s: None,
            disk_ms_per_transaction: None,
            avg_read_kib: None,
            disk_util: None,
            cpu_busy: None,
            cpu_iowait: None,
            cores: None,
            cpu_quota: None,
            cpu_util: None,
            qos: None,
            points: Vec::new(),
            wall_s: None,
        }
    }

    /// Summarise a finished search.
    pub fn from_search(sut: &crate::sut::Sut, out: &SearchOutcome<PointMetrics>) -> ServerReport {
        let mut r = ServerReport::not_measured(sut, MEASURED, String::new());
        r.reason = None;
        r.points = out
            .trials
            .iter()
            .map(|t| PointRecord {
                rate: t.rate,
                repeat: t.repeat,
                passed: t.passed,
                short: t.short,
                metrics: t.detail.clone(),
            })
            .collect();
        r.per_repeat = out
            .repeats
            .iter()
            .map(|x| x.max_failure_free_rate)
            .collect();
        r.hit_ceiling = out.repeats.iter().any(|x| x.hit_ceiling);
        r.shortfall = out.repeats.iter().find_map(|x| x.shortfall);
        let Some(est) = out.capacity() else {
            r.reason = Some("no tried rate met the criterion".into());
            return r;
        };
        r.max_failure_free_rate = Some(est.mean);
        r.ci95 = est.ci95.map(|(a, b)| [a, b]);
        // Figures at each repeat's own capacity rate, averaged.
        let at_capacity: Vec<&PointMetrics> = out
            .repeats
            .iter()
            .filter_map(|rep| {
                let rate = rep.max_failure_free_rate?;
                out.trials
                    .iter()
                    .find(|t| t.repeat == rep.repeat && t.passed && t.rate == rate)
            })
            .map(|t| &t.detail)
            .collect();
        if let Some(m) = mean_of(&at_capacity) {
            r.throughput_mb_s = Some(m.client.throughput_mb_s);
            r.disk_mb_s = m.disk.map(|d| d.mb_s);
            r.disk_ms_per_transaction = m.disk.map(|d| d.ms_per_transaction);
            r.avg_read_kib = m.disk.map(|d| d.avg_read_kib);
            r.disk_util = m.disk.map(|d| d.utilization);
            r.cpu_busy = m.cpu_busy;
            r.cpu_iowait = m.cpu_iowait;
            r.cores = Some(m.cores).filter(|c| !c.is_empty());
            r.qos = m.client.qos;
        }
        r
    }
}

impl BenchReport {
    pub fn server(&self, sut: &str) -> Option<&ServerReport> {
        self.servers.iter().find(|s| s.sut == sut)
    }
}

/// Builds a report skeleton from the run's settings.
pub fn new_report(
    workload: &str,
    testbed: &str,
    memory_bytes: Option<u64>,
    criterion: &str,
    plan: &SearchPlan,
    repeat: u32,
) -> BenchReport {
    BenchReport {
        schema: SCHEMA.into(),
        generated_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        workload: workload.into(),
        testbed: testbed.into(),
        memory_bytes,
        criterion: criterion.into(),
        search: serde_json::to_value(plan).unwrap_or_default(),
        repeat,
        rate_unit: "sessions/s".into(),
        bound_rate: None,
        bound: None,
        scenario: None,
        servers: Vec::new(),
        comparisons: Vec::new(),
        notes: Vec::new(),
    }
}

/// Set each server's `fraction_of_bound` against `bound_rate` times its origins.
pub fn set_fractions(servers: &mut [ServerReport], bound_rate: f64) {
    for s in servers {
        s.fraction_of_bound = s
            .max_failure_free_rate
            .filter(|_| bound_rate > 0.0)
            .map(|r| r / (bound_rate * s.origins.max(1) as f64));
    }
}

/// Record the run's capacity bound and every server's fraction of it.
pub fn apply_bound(report: &mut BenchReport, bound: &crate::bound::CapacityBound) {
    report.bound_rate = Some(bound.bound_rate);
    report.bound = Some(bound.clone());
    set_fractions(&mut report.servers, bound.bound_rate);
}

/// Servers whose measured capacity exceeds their bound by more than the tolerance, with
/// the one-line reason (the measurement or the bound is wrong).
pub fn above_bound(report: &BenchReport) -> Vec<(String, String)> {
    report
        .servers
        .iter()
        .filter_map(|s| {
            let (rate, f) = (s.max_failure_free_rate?, s.fraction_of_bound?);
            if f <= 0.0 {
                return None;
            }
            crate::bound::check_fraction(rate, rate / f)
                .err()
                .map(|e| (s.sut.clone(), e))
        })
        .collect()
}

/// Paths of the files a report is written to.
pub struct Written {
    pub json: PathBuf,
    pub markdown: PathBuf,
    pub html: PathBuf,
}

/// Write bench.json, report.md and report.html into `dir`.
pub fn write_all(report: &BenchReport, dir: &Path) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    let w = Written {
        json: dir.join("bench.json"),
        markdown: dir.join("report.md"),
        html: dir.join("report.html"),
    };
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(&w.json, json + "\n")?;
    std::fs::write(&w.markdown, text::markdown(report))?;
    std::fs::write(&w.html, html::render(report))?;
    Ok(w)
}

/// Problems that make a report incomplete or inconsistent (empty when it is sound).
pub fn check(report: &BenchReport) -> Vec<String> {
    let mut problems = Vec::new();
    if report.schema != SCHEMA {
        problems.push(format!(
            "schema is `{}`, expected `{SCHEMA}`",
            report.schema
        ));
    }
    if report.servers.is_empty() {
        problems.push("no servers".into());
    }
    for (sut, why) in above_bound(report) {
        problems.push(format!("{sut}: {why}"));
    }
    for s in &report.servers {
        let p = |m: &str| format!("{}: {m}", s.sut);
        match s.status.as_str() {
            MEASURED => {
                if s.points.is_empty() {
                    problems.push(p("measured but has no data points"));
                }
                for (i, r) in s.per_repeat.iter().enumerate() {
                    if let Some(r) = r {
                        let backed = s
                            .points
                            .iter()
                            .any(|pt| pt.passed && pt.repeat == i as u32 && pt.rate == *r);
                        if !backed {
                            problems
                                .push(p(&format!("repeat {i}: capacity {r} has no passing point")));
                        }
                    }
                }
                if let Some(rate) = s.max_failure_free_rate {
                    let each: Vec<f64> = s.per_repeat.iter().map(|r| r.unwrap_or(0.0)).collect();
                    let lo = each.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = each.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    if !(lo - 1e-9 <= rate && rate <= hi + 1e-9) {
                        problems.push(p("capacity is not backed by the repeats' passing points"));
                    }
                    if s.throughput_mb_s.is_none() {
                        problems.push(p("capacity without throughput"));
                    }
                    if let Some([lo, hi]) = s.ci95 {
                        if !(lo <= rate && rate <= hi) {
                            problems.push(p("ci95 does not contain the mean"));
                        }
                    }
                }
                let n = s.per_repeat.len() as u32;
                if n != report.repeat.max(1) {
                    problems.push(p(&format!(
                        "{n} repeats recorded, {} expected",
                        report.repeat
                    )));
                }
                for pt in &s.points {
                    let c = &pt.metrics.client;
                    if !(0.0..=1.0).contains(&c.failure_fraction) || c.failed_sessions > c.sessions
                    {
                        problems.push(p(&format!(
                            "point at {} has impossible failure figures",
                            pt.rate
                        )));
                    }
                    if c.throughput_mb_s < 0.0 || !c.throughput_mb_s.is_finite() {
                        problems.push(p(&format!("point at {} has a bad throughput", pt.rate)));
                    }
                }
            }
            SKIPPED | FAILED => {
                if s.reason.as_deref().unwrap_or("").is_empty() {
                    problems.push(p("not measured and no reason given"));
                }
            }
            other => problems.push(p(&format!("unknown status `{other}`"))),
        }
    }
    problems
}

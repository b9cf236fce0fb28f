//! The per-point procedure and the report, driven by simulated servers of known capacity:
//! every step runs in order (the fast-forward's history before each point), skipped servers
//! carry a reason, and the written report is complete and consistent.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::SystemTime;
use vodkit_bench::experiment::*;
use vodkit_bench::point::{ClientMetrics, DiskMetrics, ProcessCores};
use vodkit_bench::report::{self, BenchReport};
use vodkit_bench::search::{Criterion, SearchPlan};
use vodkit_bench::sut::{parse_list, Sut};
use vodkit_load::CancellationToken;

type Log = Rc<RefCell<Vec<String>>>;

struct Bed(Log);
impl Testbed for Bed {
    fn describe(&self) -> String {
        "simulated".into()
    }
    fn drop_caches(&mut self) -> Option<String> {
        self.0.borrow_mut().push("drop".into());
        None
    }
    fn set_timing(&mut self, scale: f64) -> Result<(), String> {
        self.0.borrow_mut().push(format!("timing {scale}"));
        Ok(())
    }
}

struct Sim {
    log: Log,
}
struct SimRunning {
    url: String,
    log: Log,
    /// A prefetch clock to speed up (vodkit's); nginx has none.
    clock: bool,
}
impl Running for SimRunning {
    fn base_url(&self) -> String {
        self.url.clone()
    }
    fn set_clock_rate(&self, rate: f64) -> Result<bool, String> {
        if self.clock {
            self.log.borrow_mut().push(format!("clock {rate}"));
        }
        Ok(self.clock)
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        self.log.borrow_mut().push("stop".into());
        Ok(vec![])
    }
}
impl Launcher for Sim {
    fn available(&self, sut: &Sut) -> Result<(), String> {
        if sut.label == "apache" {
            Err("apache2 is not installed; skipped".into())
        } else {
            Ok(())
        }
    }
    fn start(&mut self, sut: &Sut) -> Result<Box<dyn Running>, StartError> {
        self.log.borrow_mut().push(format!("start {}", sut.label));
        let cap = if sut.label == "nginx" { 2.0 } else { 6.5 };
        Ok(Box::new(SimRunning {
            url: format!("sim://{cap}"),
            log: self.log.clone(),
            clock: sut.label != "nginx",
        }))
    }
}

/// Simulated load; with `cancel`, the run numbered `.0` (from 1) ends by cancelling the
/// token, as Ctrl-C does during a point.
struct Load(Log, Option<(usize, CancellationToken)>);
impl LoadDriver for Load {
    fn fast_forward(
        &mut self,
        _url: &str,
        rate: f64,
        ff: vodkit_bench::warmup::FastForward,
        _budget: Option<u64>,
    ) -> Result<vodkit_bench::warmup::History, String> {
        self.0
            .borrow_mut()
            .push(format!("history {rate} at {}x", ff.speed));
        Ok(vodkit_bench::warmup::History {
            speed: ff.speed,
            window_s: 80.0,
            wall_s: 10.0,
            ..Default::default()
        })
    }
    fn run(&mut self, url: &str, rate: f64, _repeat: u32) -> Result<LoadOutcome, String> {
        self.0.borrow_mut().push("load".into());
        if let Some((n, token)) = &self.1 {
            if self.0.borrow().iter().filter(|l| *l == "load").count() == *n {
                token.cancel();
            }
        }
        let cap: f64 = url.trim_start_matches("sim://").parse().unwrap();
        let failed = if rate > cap {
            ((rate - cap) * 10.0).ceil() as u64
        } else {
            0
        };
        let sessions = 100;
        let now = SystemTime::now();
        Ok(LoadOutcome {
            client: ClientMetrics {
                sessions,
                failed_sessions: failed.min(sessions),
                failure_fraction: failed.min(sessions) as f64 / sessions as f64,
                requests: 1500,
                timed_out_requests: failed,
                throughput_mb_s: rate.min(cap) * 3.0,
                steady_s: 60.0,
                qos: Some(serde_json::json!({"rebuffer_ratio": 0.01 * rate})),
                ..Default::default()
            },
            steady: Some((now, now)),
            notes: Vec::new(),
            halves_mb_s: Some([80.0, 80.0]),
            ..Default::default()
        })
    }
}

struct Samp(Log);
impl Sampler for Samp {
    fn start(&mut self) -> Result<(), String> {
        self.0.borrow_mut().push("sample".into());
        Ok(())
    }
    fn finish(&mut self, w: Option<(SystemTime, SystemTime)>) -> Result<SystemFigures, String> {
        assert!(w.is_some(), "the steady window reaches the sampler");
        Ok(SystemFigures {
            disk: Some(DiskMetrics {
                mb_s: 40.0,
                reads_per_s: 20.0,
                ms_per_transaction: 5.0,
                avg_read_kib: 2048.0,
                utilization: 0.9,
            }),
            cpu_busy: Some(0.2),
            cpu_iowait: Some(0.7),
            cores: ProcessCores {
                server: Some(0.3),
                ..Default::default()
            },
            server_memory: None,
            listen_overflows: Some(0),
            // The first half reads more than the second: not steady.
            halves_disk_mb_s: Some([44.0, 36.0]),
            page_cache_bytes: [Some(1 << 20), Some(2 << 20)],
            device: Some(vodkit_bench::point::DeviceFigures {
                positionings_per_s: 25.0,
                kib_per_positioning: Some(1600.0),
                busy_fraction: 0.9,
            }),
            notes: vec![],
        })
    }
}

fn run(repeat: u32) -> (BenchReport, Log) {
    run_until(repeat, None)
}

/// `run`, cancelled during the load run numbered `cancel_at` (from 1) when given.
fn run_until(repeat: u32, cancel_at: Option<usize>) -> (BenchReport, Log) {
    run_with(repeat, cancel_at, None)
}

/// `run_until` with a fast-forward before every point.
fn run_with(
    repeat: u32,
    cancel_at: Option<usize>,
    fast_forward: Option<vodkit_bench::warmup::FastForward>,
) -> (BenchReport, Log) {
    let log: Log = Rc::default();
    let stop = CancellationToken::new();
    let suts = parse_list("vodkit:asap:auto,nginx,apache").unwrap();
    let settings = BenchSettings {
        workload: "sim".into(),
        memory_bytes: Some(1 << 30),
        cluster_plans: Vec::new(),
        plan: SearchPlan::FailureFree {
            start: 1.0,
            step: 1.0,
            precision: 0.1,
            max_rate: 50.0,
        },
        criterion: Criterion::Strict,
        repeat,
        stop: stop.clone(),
        fast_forward,
    };
    let (mut bed, mut l, mut ld, mut s) = (
        Bed(log.clone()),
        Sim { log: log.clone() },
        Load(log.clone(), cancel_at.map(|n| (n, stop.clone()))),
        Samp(log.clone()),
    );
    let mut rig = Rig {
        testbed: &mut bed,
        launcher: &mut l,
        load: &mut ld,
        sampler: &mut s,
    };
    (run_bench(&settings, &suts, &mut rig, &mut Quiet), log)
}

#[test]
fn each_point_follows_the_procedure_in_order() {
    let (_, log) = run(1);
    let log = log.borrow();
    let first: Vec<&str> = log.iter().take(5).map(String::as_str).collect();
    assert_eq!(
        first,
        ["drop", "start vodkit:asap:auto", "sample", "load", "stop"]
    );
    assert!(
        !log.iter().any(|l| l.contains("apache")),
        "a skipped server is never started"
    );
}

#[test]
fn every_point_plays_its_history_first_and_is_judged_for_steadiness() {
    let ff = vodkit_bench::warmup::FastForward::DEFAULT;
    let (rep, log) = run_with(1, None, Some(ff));
    let log = log.borrow();
    let point =
        |from: usize| -> Vec<&str> { log[from..from + 10].iter().map(String::as_str).collect() };
    assert_eq!(
        point(0),
        [
            "drop",
            "start vodkit:asap:auto",
            "timing 8",
            "clock 8",
            "history 1 at 8x",
            "clock 1",
            "timing 1",
            "sample",
            "load",
            "stop"
        ]
    );
    // Every point of every server, in order: a history before each load run.
    let loads = log.iter().filter(|l| *l == "load").count();
    let histories = log.iter().filter(|l| l.starts_with("history ")).count();
    assert_eq!(loads, histories, "{log:?}");
    for (i, _) in log.iter().enumerate().filter(|(_, l)| *l == "load") {
        assert_eq!(log[i - 1], "sample");
        assert_eq!(log[i - 2], "timing 1", "{log:?}");
        assert!(log[i - 3] == "clock 1" || log[i - 3].starts_with("history "));
    }
    // nginx has no prefetch clock: its drive and load are still sped up, and it is noted.
    let at = log.iter().position(|l| l == "start nginx").unwrap();
    let nginx: Vec<&str> = log[at..at + 6].iter().map(String::as_str).collect();
    assert_eq!(
        nginx,
        [
            "start nginx",
            "timing 8",
            "history 1 at 8x",
            "timing 1",
            "sample",
            "load"
        ]
    );
    assert!(
        rep.notes
            .iter()
            .any(|n| n.starts_with("nginx: fast-forward: the server has no prefetch clock")),
        "{:?}",
        rep.notes
    );
    assert!(rep
        .notes
        .iter()
        .any(|n| n.starts_with("fast-forward 8,fill=3")));
    // Each point carries its history and its halves; the passing ones are flagged unsteady.
    let v = rep.server("vodkit:asap:auto").unwrap();
    let p = &v.points[0].metrics;
    assert_eq!(p.fast_forward.as_ref().map(|h| h.server_clock), Some(true));
    let st = p.steadiness.unwrap();
    assert!(!st.steady);
    assert_eq!(st.halves[1].memory_share(), Some(0.55));
    assert!(
        rep.notes
            .iter()
            .any(|n| n.starts_with("vodkit:asap:auto: passing points not at steady state")),
        "{:?}",
        rep.notes
    );
    assert!(report::check(&rep).is_empty(), "{:?}", report::check(&rep));
    // report.md shows every point's drive counters, history and halves.
    let md = report::text::markdown(&rep);
    assert!(
        md.contains("| rate | point | tput MB/s | disk MB/s | positionings/s | KiB/positioning | engine hits | history | halves | steady |"),
        "{md}"
    );
    assert!(
        md.contains("| 1.00 | pass | 3.0 | 40.0 | 25.0 | 1600 | – | 80 s in 10 s | disk 44.0→36.0 MB/s, memory 45%→55%, cache 1→2 MiB | **no** |"),
        "{md}"
    );
}

#[test]
fn report_is_complete_consistent_and_written() {
    let (rep, _) = run(3);
    assert!(report::check(&rep).is_empty(), "{:?}", report::check(&rep));
    let v = rep.server("vodkit:asap:auto").unwrap();
    let cap = v.max_failure_free_rate.unwrap();
    assert!((6.4..=6.5).contains(&cap), "{cap}");
    assert_eq!(v.disk_mb_s, Some(40.0));
    assert!(v.ci95.is_some());
    let n = rep.server("nginx").unwrap().max_failure_free_rate.unwrap();
    assert!((1.9..=2.0).contains(&n), "{n}");
    let a = rep.server("apache").unwrap();
    assert_eq!(a.status, report::SKIPPED);
    assert!(a.reason.as_deref().unwrap().contains("not installed"));

    let dir = tempfile::tempdir().unwrap();
    let w = report::write_all(&rep, dir.path()).unwrap();
    let back: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    assert!(report::check(&back).is_empty());
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    for key in [
        "max_failure_free_rate",
        "ci95",
        "throughput_mb_s",
        "disk_mb_s",
        "disk_ms_per_transaction",
        "avg_read_kib",
        "cpu_busy",
        "cpu_iowait",
        "cores",
    ] {
        assert!(
            raw["servers"][0].get(key).is_some(),
            "bench.json lacks {key}"
        );
    }
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    assert!(md.contains("| vodkit:asap:auto |") && md.contains("not installed"));
    assert!(
        md.contains("| CPU busy | iowait | cores srv/load/disk |"),
        "CPU columns: {md}"
    );
    assert!(md.contains("| 20% | 70% | 0.30/–/– |"), "CPU cells: {md}");
    let html = std::fs::read_to_string(&w.html).unwrap();
    assert!(html.matches("<svg").count() >= 5, "plots inline");
    assert!(
        !html.contains("<script") && !html.contains("src=\"http"),
        "self-contained"
    );
    assert!(html.contains("QoS: rebuffer_ratio"));
}

#[test]
fn a_broken_report_is_caught() {
    let (mut rep, _) = run(1);
    rep.servers[0].max_failure_free_rate = Some(1000.0);
    rep.servers[2].reason = None;
    let problems = report::check(&rep);
    assert!(
        problems.iter().any(|p| p.contains("not backed")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("no reason")),
        "{problems:?}"
    );
}

#[test]
fn an_interrupted_run_drops_the_point_under_way_and_starts_no_other() {
    // Cancelled during vodkit's third point: that point is not judged, nginx never starts,
    // every started server was stopped, and the report says why each is missing.
    let (rep, log) = run_until(1, Some(3));
    let log = log.borrow();
    assert_eq!(log.iter().filter(|l| *l == "load").count(), 3, "{log:?}");
    assert!(!log.iter().any(|l| l == "start nginx"), "{log:?}");
    let starts = log.iter().filter(|l| l.starts_with("start ")).count();
    let stops = log.iter().filter(|l| *l == "stop").count();
    assert_eq!(starts, stops, "every started server is stopped: {log:?}");
    for name in ["vodkit:asap:auto", "nginx"] {
        let s = rep.server(name).unwrap();
        assert_eq!(s.max_failure_free_rate, None, "{name}");
        assert!(
            s.reason.as_deref().unwrap_or("").contains("interrupted"),
            "{name}: {:?}",
            s.reason
        );
    }
    assert!(report::check(&rep).is_empty(), "{:?}", report::check(&rep));
    // Uncancelled, the same run measures both.
    let (rep, _) = run_until(1, None);
    assert!(rep.server("nginx").unwrap().max_failure_free_rate.is_some());
}

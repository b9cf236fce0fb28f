//! CI smoke test: a miniature bench end to end in seconds — a tiny file set, the real load
//! generator, the vodkit origin in-process and nginx as a child process — and the written
//! report and bench.json checked for completeness and consistency.

use std::os::unix::fs::PermissionsExt;
use vodkit_bench::adapters::{InProcessVodkit, WorkloadLoad};
use vodkit_bench::experiment::{run_bench, BenchSettings, NoSampler, PlainDisk, Quiet, Rig};
use vodkit_bench::launch::LocalLauncher;
use vodkit_bench::report::{self, BenchReport};
use vodkit_bench::search::{Criterion, SearchPlan};
use vodkit_bench::sut::parse_list;
use vodkit_workload::model::{ByteRange, Request, Session};

const FILES: u32 = 6;
const FILE_BYTES: u64 = 1 << 20;
const REQ: u64 = 256 * 1024;

fn file_set(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("video");
    std::fs::create_dir_all(&root).unwrap();
    for d in [dir, root.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for i in 0..FILES {
        let body: Vec<u8> = (0..FILE_BYTES).map(|b| (b as u32 ^ i) as u8).collect();
        std::fs::write(root.join(format!("t{i}.mp4")), body).unwrap();
    }
    root
}

fn sessions(n: u64) -> Vec<Session> {
    (0..n)
        .map(|id| {
            let path = format!("/t{}.mp4", id % FILES as u64);
            let requests = (0..3)
                .map(|k| Request::new(&path, Some(ByteRange::closed(k * REQ, REQ)), 10.0))
                .collect();
            Session {
                title: Some((id % FILES as u64) as u32),
                ..Session::new(id, 1.0, "lan", requests)
            }
        })
        .collect()
}

#[test]
fn miniature_bench_end_to_end() {
    let have_nginx = vodkit_peers::launch::nginx_program().is_some();
    if !have_nginx {
        vodkit_testkit::skip("nginx is not installed: the smoke test runs vodkit only");
    }
    // Its points drop the page cache.
    let _cache = vodkit_testkit::turn(vodkit_testkit::turn::PAGE_CACHE);
    let dir = tempfile::tempdir().unwrap();
    let root = file_set(dir.path());
    let mut launcher = LocalLauncher::new(root, dir.path().join("runs"), "/t0.mp4".into());
    launcher.vodkit = Ok(Box::new(InProcessVodkit::new().unwrap()));
    // nginx+preload runs its daemon as `vodkit prefetchd`: the vodkit binary must be built.
    launcher.preload = vodkit_bench::adapters::PreloadKit::locate(
        vodkit_bench::adapters::built_vodkit().as_deref(),
    );
    if let Err(why) = &launcher.preload {
        vodkit_testkit::skip(format_args!("nginx+preload is not measured: {why}"));
    }
    let mut load = WorkloadLoad::of(sessions(24));
    let mut sampler = NoSampler("system metrics not sampled in this test".into());
    let mut bed = PlainDisk;
    let suts = parse_list("vodkit:vanilla,nginx,nginx+preload").unwrap();
    let settings = BenchSettings {
        workload: "smoke (24 sessions x 3 requests of 256 KiB)".into(),
        memory_bytes: None,
        cluster_plans: Vec::new(),
        plan: SearchPlan::FixedRates {
            rates: vec![20.0, 40.0],
        },
        criterion: Criterion::Strict,
        repeat: 2,
        stop: vodkit_load::CancellationToken::new(),
        fast_forward: None,
    };
    let mut rig = Rig {
        testbed: &mut bed,
        launcher: &mut launcher,
        load: &mut load,
        sampler: &mut sampler,
    };
    let rep = run_bench(&settings, &suts, &mut rig, &mut Quiet);

    let problems = report::check(&rep);
    assert!(problems.is_empty(), "{problems:?}");
    let out = dir.path().join("report");
    let written = report::write_all(&rep, &out).unwrap();
    let back: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&written.json).unwrap()).unwrap();
    assert!(report::check(&back).is_empty());

    let measured: Vec<&str> = match (have_nginx, launcher.preload.is_ok()) {
        (true, true) => vec!["vodkit:vanilla", "nginx", "nginx+preload"],
        (true, false) => vec!["vodkit:vanilla", "nginx"],
        (false, _) => vec!["vodkit:vanilla"],
    };
    for name in measured {
        let s = back.server(name).unwrap();
        assert_eq!(s.status, report::MEASURED, "{name}: {:?}", s.reason);
        // Loopback serves 24 small sessions without a timeout at either rate.
        assert_eq!(
            s.max_failure_free_rate,
            Some(40.0),
            "{name}: {:?}",
            s.points
        );
        assert_eq!(s.points.len(), 4);
        let expected_mb = 24.0 * 3.0 * REQ as f64 / 1e6;
        for p in &s.points {
            assert_eq!(p.metrics.client.sessions, 24, "{name}");
            assert_eq!(p.metrics.client.requests, 72, "{name}");
            let secs = p.metrics.client.steady_s;
            let got_mb = p.metrics.client.throughput_mb_s * secs;
            assert!(
                (got_mb - expected_mb).abs() / expected_mb < 0.05,
                "{name}: {got_mb} MB vs {expected_mb}"
            );
            assert!(p.metrics.notes.iter().any(|n| n.contains("not sampled")));
        }
        assert!(s.throughput_mb_s.unwrap() > 0.0);
        let [lo, hi] = s.ci95.unwrap();
        assert!(lo <= 40.0 && 40.0 <= hi);
    }
    let html = std::fs::read_to_string(&written.html).unwrap();
    assert!(html.contains("<svg") && html.contains("nginx") == have_nginx || !have_nginx);
    let md = std::fs::read_to_string(&written.markdown).unwrap();
    assert!(md.contains("vodkit:vanilla"));
}

//! Generation against the thesis: determinism, stream independence, and Table 3.3
//! statistics checked against values computed analytically from the distributions.

use std::collections::HashSet;
use vodkit_workload::generate::{write_workload, Plan};
use vodkit_workload::model::{Catalog, Layout, Session};
use vodkit_workload::spec;

fn plan(name: &str, sets: &[(&str, &str)], scale: f64, seed: Option<u64>) -> Plan {
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let checked = spec::load(name, &sets, scale).unwrap();
    let seed = seed.unwrap_or(checked.spec.seed);
    Plan::new(checked, seed)
}

fn read(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().to_string(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let started = std::time::Instant::now();
    let summary = write_workload(&plan("youtube-2011", &[], 1.0, None), dirs[0].path()).unwrap();
    println!(
        "youtube-2011 generated in {:?} (debug build)\n{}",
        started.elapsed(),
        summary.table("youtube-2011")
    );
    write_workload(&plan("youtube-2011", &[], 1.0, None), dirs[1].path()).unwrap();
    write_workload(&plan("youtube-2011", &[], 1.0, Some(2)), dirs[2].path()).unwrap();
    let (a, b, c) = (
        read(dirs[0].path()),
        read(dirs[1].path()),
        read(dirs[2].path()),
    );
    let names: Vec<&str> = a.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "catalog.json",
            "sessions.jsonl",
            "summary.json",
            "warmup.jsonl",
            "workload.json"
        ]
    );
    assert_eq!(a, b);
    for ((name, x), (_, y)) in a.iter().zip(&c) {
        if name != "workload.json" {
            assert_ne!(x, y, "{name} should depend on the seed");
        }
    }
    let summary_json: serde_json::Value = serde_json::from_slice(&a[2].1).unwrap();
    let keys: Vec<&String> = summary_json.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 11);
    for line in String::from_utf8(a[1].1.clone()).unwrap().lines().take(50) {
        let s: Session = serde_json::from_str(line).unwrap();
        assert!(!s.requests.is_empty());
    }
    let cat: Catalog = serde_json::from_slice(&a[0].1).unwrap();
    assert_eq!(cat.titles.len(), 10_000);
}

#[test]
fn catalog_does_not_depend_on_sessions_or_layout() {
    let a = plan("youtube-2011", &[], 0.1, None);
    let b = plan(
        "youtube-2011",
        &[
            ("catalog.collections.sd.sessions", "50"),
            ("request", "2MiB"),
        ],
        0.1,
        None,
    );
    assert!(
        a.catalog == b.catalog,
        "catalog changed with the session spec"
    );
    let c = plan("youtube-2011", &[("layout", "chunked:2MiB")], 0.1, None);
    for (x, y) in a.catalog.titles.iter().zip(&c.catalog.titles) {
        assert_eq!((x.id, x.rank, x.duration_s), (y.id, y.rank, y.duration_s));
        let disk = |t: &vodkit_workload::model::Title| {
            t.renditions[0]
                .files
                .iter()
                .map(|f| f.size_bytes)
                .sum::<u64>()
        };
        assert_eq!(disk(x), disk(y), "chunked titles occupy the unchunked size");
        assert_eq!(
            y.renditions[0].layout,
            Layout::Chunked {
                chunk_bytes: 2 << 20
            }
        );
    }
    // The first sessions' titles do not change when more sessions are generated.
    let few: Vec<_> = plan(
        "youtube-2011",
        &[("catalog.collections.sd.sessions", "100")],
        1.0,
        None,
    )
    .sessions()
    .map(|g| (g.session.title, g.session.gap, g.session.class))
    .collect();
    let many: Vec<_> = plan("youtube-2011", &[], 1.0, None)
        .sessions()
        .take(100)
        .map(|g| (g.session.title, g.session.gap, g.session.class))
        .collect();
    assert_eq!(few, many);
    // The three youtube-2014 specs share one catalog.
    let sd = plan("youtube-2014-sd", &[], 0.05, None);
    let mixed = plan("youtube-2014-mixed", &[], 0.05, None);
    assert!(
        sd.catalog.titles == mixed.catalog.titles,
        "youtube-2014 catalogs differ"
    );
    let ids: HashSet<u32> = sd.catalog.titles.iter().map(|t| t.id).collect();
    assert_eq!(ids.len(), sd.catalog.titles.len());
}

#[test]
fn sessions_never_get_a_class_slower_than_their_bit_rate() {
    let p = plan("youtube-2014-mixed", &[], 0.1, None);
    let mut by_rate: std::collections::HashMap<(u32, String), u64> = Default::default();
    for g in p.sessions() {
        *by_rate
            .entry((g.session.bitrate_kbps.unwrap(), g.session.class))
            .or_default() += 1;
    }
    let count = |kbps: u32, class: &str| by_rate.get(&(kbps, class.to_string())).copied();
    // The 1 Mbit/s class watches SD (419 kbit/s) but never HD (2,095 kbit/s).
    assert!(count(419, "medium").unwrap_or(0) > 50, "{by_rate:?}");
    assert_eq!(count(2095, "medium"), None, "{by_rate:?}");
    assert!(count(2095, "bband").unwrap_or(0) > 50, "{by_rate:?}");
    assert!(count(2095, "high").unwrap_or(0) > 50, "{by_rate:?}");
    let slow = spec::load(
        "youtube-2014-hd",
        &[
            ("clients.high.bandwidth".into(), "2Mbit/s".into()),
            ("clients.bband.bandwidth".into(), "2Mbit/s".into()),
        ],
        0.1,
    )
    .unwrap_err();
    assert!(
        slow.to_string().contains("fast enough for 2095 kbit/s"),
        "{slow}"
    );
}

#[test]
fn startup_buffer_reaches_workload_json_only_when_set() {
    assert_eq!(
        plan("youtube-2011", &[], 0.01, None)
            .meta()
            .measurement
            .startup_buffer_s,
        None
    );
    let p = plan(
        "youtube-2011",
        &[("measurement.startup_buffer", "4s")],
        0.01,
        None,
    );
    assert_eq!(p.meta().measurement.startup_buffer_s, Some(4.0));
    let too_long = spec::load(
        "youtube-2011",
        &[("measurement.startup_buffer".into(), "20m".into())],
        1.0,
    )
    .unwrap_err();
    assert!(too_long.to_string().contains("600 s"), "{too_long}");
}

#[test]
fn a_ladder_adds_renditions_and_leaves_the_sessions_alone() {
    let base = plan("youtube-2011", &[], 0.01, None);
    let laddered = plan(
        "youtube-2011",
        &[("catalog.collections.sd.ladder_kbps", "[1200, 150]")],
        0.01,
        None,
    );
    // Same titles and sessions; each title carries the base rendition first, then the
    // ladder's rungs in ascending order at sizes in proportion to their rates.
    assert_eq!(base.catalog.titles.len(), laddered.catalog.titles.len());
    for (a, b) in base.catalog.titles.iter().zip(&laddered.catalog.titles) {
        assert_eq!(a.renditions[0], b.renditions[0]);
        let rates: Vec<u32> = b.renditions.iter().map(|r| r.bitrate_kbps).collect();
        assert_eq!(rates, [419, 150, 1200], "title {}", b.id);
        let r = b.renditions[2].size_bytes as f64 / b.renditions[0].size_bytes as f64;
        assert!((r - 1200.0 / 419.0).abs() < 0.01, "{r}");
        let paths: HashSet<&str> = b
            .renditions
            .iter()
            .flat_map(|r| r.files.iter().map(|f| f.path.as_str()))
            .collect();
        assert_eq!(paths.len(), 3, "distinct files per rung: {paths:?}");
    }
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_workload(&base, da.path()).unwrap();
    write_workload(&laddered, db.path()).unwrap();
    let sessions = |d: &std::path::Path| std::fs::read(d.join("sessions.jsonl")).unwrap();
    assert_eq!(sessions(da.path()), sessions(db.path()));
    // A rung equal to the base rate is refused with the field named.
    let sets = vec![(
        "catalog.collections.sd.ladder_kbps".to_string(),
        "[419]".to_string(),
    )];
    let e = spec::load("youtube-2011", &sets, 0.01)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ladder_kbps"), "{e}");
}

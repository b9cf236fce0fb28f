//! The replay's cache engine against libCacheSim: the request stream of a memory replay,
//! exported as an object trace, through LRU, FIFO, S3-FIFO and SIEVE in both at the same
//! cache sizes; miss ratios agree within one percentage point. Needs python3 with the
//! `libcachesim` package (scripts/install-test-deps installs it); skipped without it, except
//! under CI=true.

use std::path::PathBuf;
use std::process::Command;
use vodkit_disk::model::DiskTerms;
use vodkit_prefetch::memory::order::Algo;
use vodkit_prefetch::memory::MemoryConfig;
use vodkit_sim::replay::export::{self, ObjectRequest};
use vodkit_sim::replay::{replay_traced, Prefetch, ReplayConfig, ReplayWorkload};
use vodkit_workload::model::{Catalog, Request, Session};

const MIB: u64 = 1 << 20;
const FILES: usize = 400;
const FILE_BYTES: u64 = 12 * MIB + (300 << 10);

fn catalog() -> Catalog {
    Catalog::of_files(
        (0..FILES).map(|i| (format!("f{i}.mp4"), FILE_BYTES)),
        40.0,
        2000,
    )
}

/// Sessions on Zipf-popular titles (exponent 0.8), most stopping early: each watches
/// 512 KiB requests up to a depth drawn uniformly in the square of a uniform variable.
fn sessions(n: u64) -> Vec<Session> {
    let weights: Vec<f64> = (1..=FILES).map(|r| (r as f64).powf(-0.8)).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        let x = vodkit_testkit::xorshift(&mut rng);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let step = 512 << 10;
    (0..n)
        .map(|id| {
            let mut u = next() * total;
            let title = weights
                .iter()
                .position(|w| {
                    u -= w;
                    u <= 0.0
                })
                .unwrap_or(FILES - 1);
            let depth = next() * next();
            let count = 1 + (depth * (FILE_BYTES / step) as f64) as u64;
            let requests = Request::consecutive(&format!("/f{title}.mp4"), count, step, 1.0);
            Session {
                bitrate_kbps: Some(2000),
                ..Session::new(id, 1.0, "c", requests)
            }
        })
        .collect()
}

#[test]
fn the_replays_cache_engine_agrees_with_libcachesim() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Python("libcachesim")]) {
        return;
    }
    let w = ReplayWorkload::prepare(&catalog(), &sessions(1500), &[]).expect("workload");
    let cfg = ReplayConfig {
        memory: MemoryConfig::for_budget(256 * MIB),
        disk: DiskTerms {
            positioning_s: 0.01,
            transfer_bytes_s: 100e6,
            span_fraction: 1.0,
            sweep: None,
        },
        prefetch: Prefetch::Budget,
        order: vodkit_prefetch::IoOrder::default(),
        queue_wait_s: vodkit_sim::replay::DEFAULT_QUEUE_WAIT_S,
    };
    let mut reqs: Vec<ObjectRequest> = Vec::new();
    replay_traced(&w, &cfg, 20.0, &mut |r| reqs.extend(export::objects(&r)));
    assert!(reqs.len() > 5_000, "{} object requests", reqs.len());
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace.csv");
    export::write_csv(&trace, &reqs).expect("trace");
    let sizes = [64 * MIB, 256 * MIB, 1024 * MIB];
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/libcachesim-miss-ratios");
    let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let out = Command::new("python3")
        .arg(&script)
        .arg(&trace)
        .args(["--sizes", &list.join(",")])
        .output()
        .expect("run the script");
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let results = doc["results"].as_array().expect("results");
    assert_eq!(results.len(), 4 * sizes.len());
    for r in results {
        let algo = match r["algo"].as_str() {
            Some("lru") => Algo::Lru,
            Some("fifo") => Algo::Fifo,
            Some("s3-fifo") => Algo::S3Fifo,
            Some("sieve") => Algo::Sieve,
            other => panic!("unknown algo {other:?}"),
        };
        let size = r["cache_bytes"].as_u64().expect("size");
        let (bytes, requests) = export::engine_miss_ratios(algo, size, &reqs);
        let theirs = (
            r["byte_miss_ratio"].as_f64().expect("byte miss ratio"),
            r["miss_ratio"].as_f64().expect("miss ratio"),
        );
        eprintln!(
            "{} at {} MiB: miss ratio {:.4} (libCacheSim {:.4}), byte miss ratio {:.4} ({:.4})",
            algo.name(),
            size / MIB,
            requests,
            theirs.1,
            bytes,
            theirs.0
        );
        assert!(
            (requests - theirs.1).abs() <= 0.01 && (bytes - theirs.0).abs() <= 0.01,
            "{} at {size} bytes: ours {requests:.4}/{bytes:.4}, libCacheSim {:.4}/{:.4}",
            algo.name(),
            theirs.1,
            theirs.0
        );
    }
}

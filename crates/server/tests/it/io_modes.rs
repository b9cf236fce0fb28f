//! The body path through the prefetch engine in every `--io` mode, on files evicted from
//! the page cache first: bodies stay byte-exact, misses are counted as disk bytes, and
//! the prefetching modes serve the following request from memory.

use crate::common;

use std::fs::File;

use common::{pattern, rotated_patterns, Client, TestServer};
use vodkit_server::IoMode;

const MIB: usize = 1 << 20;

fn evict(path: &std::path::Path) {
    let f = File::open(path).unwrap();
    // Dirty pages cannot be dropped: write them back first.
    f.sync_all().unwrap();
    vodkit_prefetch::residency::drop_cached(&f, 0, 0).unwrap();
    let len = f.metadata().unwrap().len();
    let r = vodkit_prefetch::residency::check(&f, 0, len, len, Default::default()).unwrap();
    if r.missing == 0 {
        panic!(
            "cannot evict {} from the page cache on this filesystem",
            path.display()
        );
    }
}

fn log_rows(path: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

fn serve_cold_chunks(mode: IoMode) -> (Vec<Vec<String>>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let log2 = log.clone();
    let s = TestServer::start_with(move |c| {
        c.io.mode = mode;
        c.io.prefetch = vodkit_prefetch::PolicySpec::default();
        c.io.stats_every = None;
        c.access_log = Some(log2);
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    });
    let data = pattern(8 * MIB);
    s.write("cold.mp4", &data);
    evict(&s.root().join("cold.mp4"));
    let mut c = s.connect();
    for i in 0..3 {
        let a = i * 512 * 1024;
        let b = a + 512 * 1024 - 1;
        let r = c.get(
            "/cold.mp4",
            &[("Range", &format!("bytes={a}-{b}")), ("X-Session-Id", "v1")],
        );
        assert_eq!(r.status, 206, "{mode}");
        assert_eq!(r.body, &data[a..=b], "{mode} chunk {i}");
    }
    let mut a = Client::connect(s.admin.unwrap());
    let stats: serde_json::Value = serde_json::from_slice(&a.get("/stats", &[]).body).unwrap();
    drop(c);
    s.stop();
    (log_rows(&log), stats)
}

#[test]
fn every_mode_serves_cold_files_exactly_and_counts_disk_bytes() {
    for mode in [
        IoMode::Vanilla,
        IoMode::Serialized,
        IoMode::Prefetch,
        IoMode::Asap,
    ] {
        let (rows, stats) = serve_cold_chunks(mode);
        assert_eq!(rows.len(), 3, "{mode}");
        // The first chunk of an evicted file comes from disk.
        assert_eq!(rows[0][11], "0", "{mode}: bytes_mem of the first chunk");
        assert_eq!(
            rows[0][12], "524288",
            "{mode}: bytes_disk of the first chunk"
        );
        assert_eq!(stats["io_mode"], mode.to_string());
        assert!(
            stats["prefetch"]["misses"].as_u64().unwrap() >= 1,
            "{mode}: {stats}"
        );
        if matches!(mode, IoMode::Prefetch | IoMode::Asap) {
            // A 2 MiB prefetch covers the next chunks: they are served from memory.
            for row in &rows[1..] {
                assert_eq!(
                    (row[11].as_str(), row[12].as_str()),
                    ("524288", "0"),
                    "{mode}"
                );
            }
            assert!(
                stats["prefetch"]["read_bytes"].as_u64().unwrap() >= 2 * MIB as u64,
                "{stats}"
            );
        }
    }
}

#[test]
fn asap_under_concurrent_viewers_stays_exact() {
    let s = TestServer::start_with(|c| {
        c.io.mode = IoMode::Asap;
        c.io.prefetch = vodkit_prefetch::PolicySpec::Fixed { bytes: 1 << 20 };
        c.io.stats_every = None;
    });
    let files = rotated_patterns(6, 3 * MIB + 1234, 97);
    for (i, d) in files.iter().enumerate() {
        s.write(&format!("v{i}.mp4"), d);
        evict(&s.root().join(format!("v{i}.mp4")));
    }
    std::thread::scope(|scope| {
        for (i, d) in files.iter().enumerate() {
            let addr = s.addr;
            scope.spawn(move || {
                let mut c = Client::connect(addr);
                let mut a = 0;
                while a < d.len() {
                    let b = (a + 512 * 1024).min(d.len()) - 1;
                    let r = c.get(
                        &format!("/v{i}.mp4"),
                        &[("Range", &format!("bytes={a}-{b}"))],
                    );
                    assert_eq!(r.body, &d[a..=b], "viewer {i} at {a}");
                    a = b + 1;
                }
                // And one open-ended whole-file request, sent window by window.
                let r = c.get(&format!("/v{i}.mp4"), &[]);
                assert_eq!(&r.body, d);
            });
        }
    });
    let st = s.stats();
    assert_eq!(st.prefetch.mode, "asap");
    assert!(st.bytes_from_disk > 0 && st.bytes_from_memory > 0, "{st:?}");
}

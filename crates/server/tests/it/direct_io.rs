//! `--io direct`: bodies sent from the engine's `O_DIRECT` buffer pool are byte-exact for
//! unaligned ranges, ranges crossing chunks, the last partial block, whole files and
//! multipart responses; the file never enters the page cache; several viewers share the
//! pool; the pool's figures reach `/stats` and `/metrics`.

use crate::common;

use std::fs::File;

use common::{pattern, rotated_patterns, Client, TestServer};
use vodkit_server::io::MemorySetting;
use vodkit_server::IoMode;

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

fn not_cached(path: &std::path::Path) -> u64 {
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    vodkit_prefetch::residency::check(&f, 0, len, len, Default::default())
        .unwrap()
        .missing
}

/// Drops the file's pages; `false` (said, and fatal in CI) when the filesystem keeps them.
fn evict(path: &std::path::Path) -> bool {
    let f = File::open(path).unwrap();
    f.sync_all().unwrap();
    vodkit_prefetch::residency::drop_cached(&f, 0, 0).unwrap();
    if not_cached(path) == f.metadata().unwrap().len() {
        return true;
    }
    let why = format!(
        "{} keeps its pages after POSIX_FADV_DONTNEED",
        path.display()
    );
    vodkit_testkit::skip(why);
    false
}

fn direct_server(log: Option<std::path::PathBuf>) -> TestServer {
    TestServer::start_with(move |c| {
        c.io.mode = IoMode::Direct;
        c.io.prefetch = vodkit_prefetch::PolicySpec::Fixed { bytes: 1 << 20 };
        c.io.memory = MemorySetting::Budget(128 * MIB as u64);
        c.io.stats_every = None;
        c.access_log = log;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn direct_serves_ranges_byte_for_byte_without_the_page_cache() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = direct_server(Some(log.clone()));
    let size = 3 * MIB + 1234;
    let data = pattern(size);
    s.write("title.mp4", &data);
    let path = s.root().join("title.mp4");
    if !evict(&path) {
        return;
    }
    let mut c = s.connect();
    for (a, b) in [
        (1000, 300_999),             // unaligned, inside one chunk run
        (262_143, 1_310_720),        // crosses chunk boundaries
        (size - 1234, size - 1),     // the last partial block
        (size - 5000, size - 1),     // ends at end of file
        (3 * MIB - 1, 3 * MIB + 10), // straddles a block boundary near the end
    ] {
        let r = c.get(
            "/title.mp4",
            &[("Range", &format!("bytes={a}-{b}")), ("X-Session-Id", "v1")],
        );
        assert_eq!(r.status, 206, "{a}-{b}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {a}-{b}/{size}").as_str())
        );
        assert_eq!(r.body, &data[a..=b], "{a}-{b}");
    }
    let r = c.get("/title.mp4", &[("Range", "bytes=-1234")]);
    assert_eq!(r.body, &data[size - 1234..]);
    // The whole file (two windows) and a multipart response.
    let r = c.get("/title.mp4", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, data);
    let r = c.get(
        "/title.mp4",
        &[("Range", &format!("bytes=5-99,{}-{}", size - 100, size - 1))],
    );
    assert_eq!(r.status, 206);
    assert!(contains(&r.body, &data[5..100]));
    assert!(contains(&r.body, &data[size - 100..]));

    let mut a = Client::connect(s.admin.unwrap());
    let stats: serde_json::Value = serde_json::from_slice(&a.get("/stats", &[]).body).unwrap();
    assert_eq!(stats["io_mode"], "direct");
    let d = &stats["prefetch"]["direct"];
    let (direct, fallback) = (d["direct_reads"].as_u64(), d["fallback_reads"].as_u64());
    assert!(direct.unwrap() + fallback.unwrap() >= 1, "{stats}");
    assert!(
        d["pool_bytes"].as_u64().unwrap() <= d["capacity_bytes"].as_u64().unwrap(),
        "{stats}"
    );
    if fallback == Some(0) {
        assert_eq!(
            not_cached(&path),
            size as u64,
            "direct reads left the file out of the page cache: {stats}"
        );
    } else {
        eprintln!(
            "O_DIRECT refused under {}: fallback used",
            s.root().display()
        );
    }
    // The admin listener answers one request per connection.
    let mut a = Client::connect(s.admin.unwrap());
    let metrics = String::from_utf8(a.get("/metrics", &[]).body).unwrap();
    for name in [
        "vodkit_direct_pool_bytes",
        "vodkit_direct_pool_capacity_bytes",
        "vodkit_direct_reads_total",
    ] {
        assert!(metrics.contains(name), "{name} missing");
    }
    drop(c);
    s.stop();
    // The first request came from disk; the 1 MiB prefetch served the second's start.
    let rows: Vec<Vec<String>> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    assert_eq!(
        (rows[0][11].as_str(), rows[0][12].as_str()),
        ("0", "300000")
    );
    assert_ne!(
        rows[1][11], "0",
        "bytes_mem of the second request: {:?}",
        rows[1]
    );
}

#[test]
fn viewers_of_one_title_share_the_pool_and_stay_exact() {
    let s = direct_server(None);
    let titles = rotated_patterns(2, 3 * MIB + 4321, 131);
    for (i, d) in titles.iter().enumerate() {
        s.write(&format!("t{i}.mp4"), d);
    }
    std::thread::scope(|scope| {
        for v in 0..4 {
            let addr = s.addr;
            let d = &titles[v % 2];
            scope.spawn(move || {
                let mut c = Client::connect(addr);
                let session = format!("viewer-{v}");
                let mut a = 0;
                while a < d.len() {
                    let b = (a + 300 * KIB + v).min(d.len()) - 1;
                    let r = c.get(
                        &format!("/t{}.mp4", v % 2),
                        &[
                            ("Range", &format!("bytes={a}-{b}")),
                            ("X-Session-Id", &session),
                        ],
                    );
                    assert_eq!(r.body, &d[a..=b], "viewer {v} at {a}");
                    a = b + 1;
                }
            });
        }
    });
    let st = s.stats();
    assert_eq!(st.prefetch.mode, "direct");
    assert!(st.bytes_from_memory > 0, "{st:?}");
    let d = st.prefetch.direct.clone().unwrap();
    assert!(d.pool_bytes <= d.capacity_bytes, "{d:?}");
    // Two titles, four viewers: each title is read about once, not once per viewer.
    assert!(
        d.read_bytes < 2 * (2 * titles[0].len() as u64),
        "{d:?} (disk {})",
        st.bytes_from_disk
    );
}

//! `workload from-log` streaming: the sessions, catalog and summary are those of the
//! in-memory rebuild, while the memory held stays under a limit a quarter of what the
//! in-memory rebuild needs.

use vodkit_trace::fromlog::{
    FromLogOptions, Rebuilt, SessionRebuilder, StreamOptions, StreamRebuilder,
};
use vodkit_trace::read::read_log;
use vodkit_trace::LogFormat;
use vodkit_workload::netflix::{synth_log, NetflixSpec};

/// Sessions as written (JSON lines), the catalog and the summary without the streaming
/// figures.
fn written(mut r: Rebuilt) -> (Vec<String>, String, String) {
    let sessions: Vec<String> = (&mut r.sessions)
        .map(|s| serde_json::to_string(&s).unwrap())
        .collect();
    assert!(r.sessions.error().is_none());
    let mut summary = r.summary.clone();
    summary.stream = None;
    (
        sessions,
        serde_json::to_string(&r.catalog).unwrap(),
        serde_json::to_string(&summary).unwrap(),
    )
}

#[test]
fn streaming_rebuild_matches_the_in_memory_one_within_a_quarter_of_its_memory() {
    let dir = tempfile::tempdir().unwrap();
    // Sessions arriving one every ~8 minutes: few are open at once, as in a long log.
    let sets = [
        ("sessions".to_string(), "120".to_string()),
        ("arrival_rate".to_string(), "0.002".to_string()),
    ];
    let spec = NetflixSpec::new(9, 0.12, &sets).unwrap();
    synth_log(&spec, dir.path()).unwrap();
    let log = std::fs::read(dir.path().join("log.csv")).unwrap();

    let opt = FromLogOptions {
        key: Some(b"test".to_vec()),
        ..Default::default()
    };
    let mut memory = SessionRebuilder::default();
    let mut longest = 0.0f64;
    let read = read_log(&log[..], LogFormat::Auto, |r| {
        longest = longest.max(r.service_s);
        memory.add(r);
    })
    .unwrap();
    assert!(read.requests > 50_000, "{}", read.describe());
    // What the in-memory rebuild holds: every request (48 bytes each, at least).
    let need = read.requests as usize * 48;
    let limit = need / 4;
    let want = written(memory.finish(&opt).unwrap());

    let limits = StreamOptions {
        max_service_s: longest + 1.0,
        order_tolerance_s: 60.0,
        memory_bytes: limit,
        spill_dir: dir.path().to_path_buf(),
    };
    let mut stream = StreamRebuilder::new(&opt, &limits);
    read_log(&log[..], LogFormat::Auto, |r| stream.add(r)).unwrap();
    let rebuilt = stream.finish().unwrap();
    let stats = rebuilt.summary.stream.clone().unwrap();
    assert!(stats.spilled_bytes > 0, "{stats:?}");
    assert!(
        stats.peak_held_bytes <= limit as u64,
        "held {} bytes, limit {limit}: {stats:?}",
        stats.peak_held_bytes
    );
    assert_eq!(stats.late_requests, 0);
    let got = written(rebuilt);
    assert_eq!(got.0.len(), want.0.len());
    for (i, (a, b)) in got.0.iter().zip(&want.0).enumerate() {
        assert!(a == b, "session {i} differs:\n{a}\n{b}");
    }
    assert!(got.1 == want.1, "catalogs differ");
    assert_eq!(got.2, want.2);
    // The spill directory is removed.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".vodkit-spill"))
        .collect();
    assert!(left.is_empty());
}

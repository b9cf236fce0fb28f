//! `scripts/popularity-cache` on a hand-built workload whose shares are counted by hand: the
//! static cache keeps the popular title's piece, LRU keeps the last piece asked for.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(dir: &Path, cache: u64) -> std::process::Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/popularity-cache");
    Command::new("python3")
        .arg(&script)
        .arg(dir)
        .args(["--cache", &cache.to_string(), "--rate", "1"])
        .output()
        .expect("run the script")
}

#[test]
fn a_static_cache_of_the_popular_title_beats_lru_by_the_hand_counted_share() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("catalog.json"),
        r#"{"spec":"hand","seed":1,"titles":[{"id":1,"rank":1},{"id":2,"rank":2}]}"#,
    )
    .unwrap();
    // Ten sessions a second apart, each asking for the first 512 KiB piece of its title.
    let titles = [1, 1, 1, 1, 1, 2, 1, 1, 1, 2];
    let sessions: String = titles
        .iter()
        .map(|t| {
            format!(
                "{{\"gap\":1.0,\"title\":{t},\"requests\":[{{\"range\":{{\"kind\":\"closed\",\"first\":0,\"last\":524287}},\"media_s\":1.0}}]}}\n"
            )
        })
        .collect();
    std::fs::write(dir.path().join("sessions.jsonl"), sessions).unwrap();
    // One piece of cache; the first fifth (two requests) fills it.
    let out = run(dir.path(), 512 << 10);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Of the last eight requests, six name title 1, which the static cache holds.
    assert!(text.contains("static, popularity known: 75.0%"), "{text}");
    // LRU hits when the request before named the same title: five of the eight.
    assert!(text.contains("LRU: 62.5%"), "{text}");
    // A session line without its title is named by line.
    std::fs::write(dir.path().join("sessions.jsonl"), "{\"gap\":1.0}\n").unwrap();
    let out = run(dir.path(), 512 << 10);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sessions.jsonl:1:"), "{err}");
}

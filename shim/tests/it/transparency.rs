//! Transparency: a probe program performing every intercepted call on files, sockets and
//! pipes prints identical results, errno values and bytes with and without the library,
//! whatever the daemon does (every mode, or no daemon at all).

use crate::common;

use common::*;
use std::time::Duration;
use vodkit_preload::IoMode;

const LIMIT: Duration = Duration::from_secs(60);

/// The probe's files, and what the probe prints over them without the library.
fn probe_dir() -> (tempfile::TempDir, String) {
    let dir = open_tempdir();
    write_content(dir.path(), "data.bin", 3_000_000);
    let d = dir.path().to_str().unwrap();
    let plain = stdout_of(&run_plain(TRANSPARENCY_BIN, &[d], LIMIT));
    (dir, plain)
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "probe failed: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf8")
}

fn assert_same(expected: &str, got: &str, what: &str) {
    for (i, (a, b)) in expected.lines().zip(got.lines()).enumerate() {
        assert_eq!(a, b, "{what}: line {} differs", i + 1);
    }
    assert_eq!(
        expected.lines().count(),
        got.lines().count(),
        "{what}: different number of lines"
    );
}

#[test]
fn every_call_behaves_the_same_under_the_library_in_every_mode() {
    let (dir, plain) = probe_dir();
    let d = dir.path().to_str().unwrap();
    assert!(plain.lines().count() > 100, "probe printed too little");
    for (mode, policy) in [
        (IoMode::Asap, vodkit_prefetch::PolicySpec::DEFAULT_TEXT),
        (IoMode::Serialized, "none"),
        (IoMode::Prefetch, "fixed:1MiB"),
        (IoMode::Vanilla, vodkit_prefetch::PolicySpec::DEFAULT_TEXT),
    ] {
        let daemon = daemon(dir.path(), mode, policy);
        let out = run_preloaded(daemon.socket(), TRANSPARENCY_BIN, &[d], LIMIT);
        let got = stdout_of(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("vodkit-preload"),
            "mode {mode}: unexpected warning: {stderr}"
        );
        assert_same(&plain, &got, &format!("mode {mode}"));
        let m = daemon.stop();
        // Every evicted-then-read call on data.bin reaches the daemon; if none did, the
        // library was not active and this test proved nothing.
        assert!(
            m.requests >= 15,
            "mode {mode}: only {} misses reported",
            m.requests
        );
        for call in [
            "read",
            "pread",
            "readv",
            "sendfile",
            "copy_file_range",
            "splice",
        ] {
            assert!(
                m.requests_by_call
                    .keys()
                    .any(|k| serde_json::to_value(k).unwrap() == call),
                "mode {mode}: no {call} miss reported: {:?}",
                m.requests_by_call
            );
        }
        match mode {
            IoMode::Asap | IoMode::Serialized => {
                assert!(m.outcomes.engine > 0 && m.engine.reads > 0 && m.engine.read_bytes > 0)
            }
            IoMode::Prefetch => {
                assert!(m.outcomes.prefetch_in_library > 0 && m.planned_bytes > 0);
                assert_eq!(m.engine.read_bytes, 0);
            }
            IoMode::Vanilla => assert!(m.outcomes.tracked_only > 0 && m.engine.read_bytes == 0),
            IoMode::Direct => unreachable!("not a daemon mode"),
        }
        assert_eq!(m.bad_messages, 0);
    }
}

#[test]
fn without_a_daemon_calls_proceed_and_warn_once_per_process() {
    let (dir, plain) = probe_dir();
    let d = dir.path().to_str().unwrap();
    let missing = dir.path().join("nobody-listens.sock");
    let out = run_preloaded(&missing, TRANSPARENCY_BIN, &[d], LIMIT);
    assert_same(&plain, &stdout_of(&out), "no daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings = stderr.matches("vodkit-preload:").count();
    // the probe and its one forked child: one warning each at most
    assert!(
        (1..=2).contains(&warnings),
        "expected one warning per process, got {warnings}: {stderr}"
    );
}

#[test]
fn a_daemon_that_never_answers_only_delays_calls() {
    let (dir, plain) = probe_dir();
    let d = dir.path().to_str().unwrap();
    // A listener that accepts (the kernel queues connections) but never reads or replies.
    let socket = dir.path().join("mute.sock");
    let _listener = vodkit_preload::daemon::socket::listen(&socket).unwrap();
    let preload = vodkit_preload::Preload::attach(&socket)
        .unwrap()
        .with_timeout_ms(30);
    let mut cmd = preload.command(TRANSPARENCY_BIN);
    cmd.arg(d);
    let out = run_with_limit(cmd, LIMIT);
    assert_same(&plain, &stdout_of(&out), "mute daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("prefetch daemon too slow"),
        "expected the timeout warning: {stderr}"
    );
}

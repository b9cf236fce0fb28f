//! Replays against a real nginx: the three httperf-family dialects and jsonl give exact
//! request and byte counts, open-ended ranges read only what they need, pacing is
//! start-to-start, and content is verified byte for byte.

use crate::common;

use common::{parse_log, run, Nginx};
use vodkit_load::record::{FailureReason, SessionEnd};
use vodkit_workload::logfmt::LogFormat;
use vodkit_workload::model::{ByteRange, Request, Session};

const CHUNK: usize = 64 * 1024;

fn files() -> Vec<(&'static str, usize)> {
    vec![
        ("vid01/secs-0-9", CHUNK),
        ("vid01/secs-10-19", CHUNK),
        ("vid01/secs-20-29", CHUNK),
        ("vid01/secs-30-39", CHUNK - 17),
        ("vid02", 3 * CHUNK + 5),
        ("vid03/high/secs-0-9", 2 * CHUNK),
        ("vid03/med/secs-10-19", CHUNK / 2),
    ]
}

fn assert_clean(run: &vodkit_load::Run, sessions: u64, requests: u64, bytes: u64) {
    let r = &run.results;
    assert_eq!(r.requests.errors, Default::default(), "{}", r.summary());
    assert_eq!(r.requests.timed_out, 0);
    assert_eq!(r.sessions.started, sessions);
    assert_eq!(r.sessions.completed, sessions, "{}", r.summary());
    assert_eq!(r.sessions.failed, 0);
    assert_eq!(r.requests.completed, requests);
    assert_eq!(r.requests.bytes, bytes);
    assert_eq!(r.latency_ms.ttlb.count, requests);
}

/// The run opened `opened` connections and reopened `reconnects` after the server closed.
fn assert_connections(run: &vodkit_load::Run, opened: u64, reconnects: u64) {
    let c = &run.results.connections;
    assert_eq!(c.opened, opened);
    assert_eq!(c.reconnects, reconnects);
}

#[test]
fn thesis_dialect_replays_exact_counts() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    let log = "# first session: separate chunk files, paced after two\n\
        vid01/secs-0-9 timeout=10\nvid01/secs-10-19 timeout=10\n\
        vid01/secs-20-29 timeout=10 pacing=0.05\nvid01/secs-30-39 timeout=10 pacing=0.05\n\n\
        # second session: ranges in one file\n\
        vid02 range=0-65535 timeout=10\nvid02 range=65536-131071 timeout=10\nvid02 range=131071-196607 timeout=10\n\n\
        vid03/high/secs-0-9 timeout=10\nvid03/med/secs-10-19 timeout=10\n";
    let sessions = parse_log(log, "thesis.log");
    assert_eq!(
        vodkit_load::input::read_sessions(
            &{
                let d = tempfile::tempdir().unwrap();
                let p = d.path().join("x");
                std::fs::write(&p, log).unwrap();
                std::mem::forget(d);
                p
            },
            None
        )
        .unwrap()
        .1,
        LogFormat::Thesis
    );
    let run = run(nginx.target(), sessions, |c| c.verify = true);
    let bytes = (4 * CHUNK - 17 + 3 * CHUNK + 1 + 2 * CHUNK + CHUNK / 2) as u64;
    assert_clean(&run, 3, 9, bytes);
    // One persistent connection per session.
    assert_connections(&run, 3, 0);
}

#[test]
fn videoperf_dialect_replays_exact_counts() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    let log = "session port=80\n\
        /vid02 timeout=10 headers='Range: bytes=0-99999' size=100000\n\
        /vid02 pace_time=0.05 timeout=10 headers='Range: bytes=100000-196612' size=96613\n\
        session port=80\n/vid01/secs-0-9 timeout=5\n/vid03/med/secs-10-19 pace_time=0.02 timeout=5\n";
    let sessions = parse_log(log, "videoperf.log");
    assert_eq!(sessions.len(), 2);
    let run = run(nginx.target(), sessions, |c| c.verify = true);
    let bytes = (3 * CHUNK + 5 + CHUNK + CHUNK / 2) as u64;
    assert_clean(&run, 2, 4, bytes);
}

#[test]
fn httperf_dialect_bursts_use_parallel_connections() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    let log = "/vid01/secs-0-9 think=0.05\n   /vid01/secs-10-19\n   /vid01/secs-20-29\n/vid01/secs-30-39\n\n/vid02\n/vid03/high/secs-0-9 think=0.01\n";
    let sessions = parse_log(log, "httperf.log");
    assert_eq!(sessions.len(), 2);
    let run = run(nginx.target(), sessions, |c| c.verify = true);
    let bytes = (4 * CHUNK - 17 + 3 * CHUNK + 5 + 2 * CHUNK) as u64;
    assert_clean(&run, 2, 6, bytes);
    // The first session uses three connection slots, the second one.
    assert_eq!(run.results.connections.opened, 4);
}

fn req(path: &str, range: Option<ByteRange>, pacing_s: f64) -> Request {
    Request {
        pacing_s,
        media_s: 1.0,
        ..Request::new(path, range, 10.0)
    }
}

fn session(id: u64, requests: Vec<Request>) -> Session {
    Session::new(id, 0.01, "default", requests)
}

#[test]
fn open_ended_ranges_read_only_what_the_session_needs() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    let s = session(
        1,
        vec![
            req(
                "/vid02",
                Some(ByteRange::OpenEnded {
                    first: 1000,
                    read: 5000,
                }),
                0.0,
            ),
            req(
                "/vid02",
                Some(ByteRange::OpenEnded {
                    first: 6000,
                    read: 70_000,
                }),
                0.0,
            ),
            req("/vid02", Some(ByteRange::Closed { first: 0, last: 9 }), 0.0),
        ],
    );
    let run = run(nginx.target(), vec![s], |c| c.verify = true);
    assert_clean(&run, 1, 3, 75_010);
    // Each open-ended request hangs up afterwards, so the session opened three
    // connections; those are not server-side closes.
    assert_connections(&run, 3, 0);
}

#[test]
fn pacing_is_start_to_start_within_two_percent() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    // Long enough that scheduler noise on a busy 2-core machine stays well inside 2%.
    let pace = 1.0;
    let mut reqs = vec![
        req("/vid01/secs-0-9", None, 0.0),
        req("/vid01/secs-10-19", None, 0.0),
    ];
    for _ in 0..3 {
        reqs.push(req("/vid01/secs-20-29", None, pace));
    }
    let run = run(nginx.target(), vec![session(1, reqs)], |_| {});
    assert_clean(&run, 1, 5, 5 * CHUNK as u64);
    let starts: Vec<f64> = run.sessions[0].requests.iter().map(|r| r.started).collect();
    // The two prebuffer requests go back to back.
    let first_done = run.sessions[0].requests[0].elapsed;
    assert!(
        starts[1] - starts[0] < first_done + 0.05,
        "prebuffer was paced: {starts:?}"
    );
    for w in starts[1..].windows(2) {
        let gap = w[1] - w[0];
        assert!(
            (gap - pace).abs() <= 0.02 * pace,
            "interval {gap} s, expected {pace} s (starts {starts:?})"
        );
    }
}

#[test]
fn corrupted_bytes_are_content_mismatches() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    // Flip one byte in the middle of a chunk file.
    let path = nginx.root().join("vid01/secs-10-19");
    let mut data = std::fs::read(&path).unwrap();
    data[40_000] ^= 0xff;
    std::fs::write(&path, data).unwrap();
    let s = session(
        1,
        vec![
            req("/vid01/secs-0-9", None, 0.0),
            req("/vid01/secs-10-19", None, 0.0),
            req("/vid01/secs-20-29", None, 0.0),
        ],
    );
    let run = run(nginx.target(), vec![s], |c| c.verify = true);
    let rec = &run.sessions[0];
    assert_eq!(rec.end, SessionEnd::Failed(FailureReason::Mismatch));
    let f = rec.requests[1].failure.as_ref().unwrap();
    assert!(f.detail.contains("byte 40000"), "{f}");
    assert_eq!(rec.skipped, 1);
    assert_eq!(run.results.requests.errors.get("mismatch"), Some(&1));
    assert_eq!(run.results.sessions.failure_fraction, 1.0);
}

#[test]
fn missing_file_fails_the_session_with_a_status_error() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    let ok = session(1, vec![req("/vid01/secs-0-9", None, 0.0)]);
    let bad = session(
        2,
        vec![req("/nope", None, 0.0), req("/vid01/secs-0-9", None, 0.0)],
    );
    let run = run(nginx.target(), vec![ok, bad], |_| {});
    let r = &run.results;
    assert_eq!(r.sessions.completed, 1);
    assert_eq!(r.sessions.failed, 1);
    assert_eq!(r.requests.errors.get("status"), Some(&1));
    assert_eq!(r.requests.skipped, 1);
    assert_eq!(r.sessions.failure_fraction, 0.5);
    let detail = &run
        .sessions
        .iter()
        .find(|s| s.session.id == 2)
        .unwrap()
        .requests[0];
    assert_eq!(detail.status, 404);
}

#[test]
fn warm_up_ramps_qos_and_outputs() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    let sessions: Vec<Session> = (0..6)
        .map(|i| {
            session(
                i,
                vec![
                    req("/vid01/secs-0-9", None, 0.0),
                    req("/vid01/secs-10-19", None, 0.0),
                    req("/vid01/secs-20-29", None, 0.05),
                    req(
                        "/vid02",
                        Some(ByteRange::Closed {
                            first: 10,
                            last: 1009,
                        }),
                        0.05,
                    ),
                ],
            )
        })
        .collect();
    let run = run(nginx.target(), sessions, |c| {
        c.warmup = vec![
            req("/vid02", None, 0.0),
            req("/vid03/high/secs-0-9", None, 0.0),
            req("/vid01/secs-0-9", None, 0.0),
        ];
        c.ramp.up_sessions = 1;
        c.ramp.down_sessions = 2;
    });
    let r = &run.results;
    assert_eq!(r.run.warmup_requests, 3);
    assert_eq!(r.run.sessions_started, 6);
    assert_eq!(r.run.requests_sent, 24);
    // Steady state: sessions 1, 2 and 3 in arrival order.
    assert_eq!(r.sessions.started, 3);
    assert_eq!(r.requests.completed, 12);
    assert_eq!(r.requests.bytes, 3 * (3 * CHUNK as u64 + 1000));
    assert!(r.throughput_mb_s > 0.0);
    assert_eq!(r.qos.sessions, 3);
    assert_eq!(r.qos.startup_failures + r.qos.inplay_failures, 0);
    assert!((r.qos.play_s - 12.0).abs() < 1e-6, "{}", r.qos.play_s);
    assert_eq!(
        r.qos.rebuffer_events, 0,
        "1 s of content every 50 ms never runs dry"
    );
    assert_eq!(r.qos.startup_delay_ms.count, 3);

    // results.json carries the fixed keys and merges with itself.
    let json: serde_json::Value = serde_json::to_value(r).unwrap();
    for key in [
        "requests",
        "sessions",
        "throughput_mb_s",
        "missed_deadlines",
        "latency_ms",
        "timeseries",
        "qos",
    ] {
        assert!(json.get(key).is_some(), "results.json lacks {key}");
    }
    for key in ["completed", "timed_out", "errors", "bytes"] {
        assert!(json["requests"].get(key).is_some(), "requests lacks {key}");
    }
    let back: vodkit_load::Results = serde_json::from_value(json).unwrap();
    let merged = vodkit_load::Results::merge(&[back.clone(), back]).unwrap();
    assert_eq!(merged.requests.completed, 24);
    assert_eq!(merged.latency_ms.ttlb.count, 24);
    assert_eq!(merged.qos.startup_delay_ms.count, 6);
    assert_eq!(merged.run.hosts, 2);
    assert!((merged.throughput_mb_s - 2.0 * r.throughput_mb_s).abs() < 1e-9);

    // One CSV row per request sent.
    let mut csv = Vec::new();
    vodkit_load::write_csv(&mut csv, &run.sessions).unwrap();
    let text = String::from_utf8(csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 25);
    assert!(lines[0].starts_with("session_index,session_id,class,request"));
    assert_eq!(lines.iter().filter(|l| l.contains(",ok,")).count(), 24);
    assert!(text.contains("bytes=10-1009"));
}

#[test]
fn a_warm_start_begins_with_sessions_already_playing() {
    let Some(nginx) = Nginx::start(&files()) else {
        return;
    };
    // 30 sessions of four chunks paced 0.3 s apart (0.9 s long), one every 0.1 s.
    let chunks = [
        "/vid01/secs-0-9",
        "/vid01/secs-10-19",
        "/vid01/secs-20-29",
        "/vid01/secs-30-39",
    ];
    let sessions: Vec<Session> = (0..30)
        .map(|id| Session {
            id,
            gap: 1.0,
            start_s: None,
            class: "c".into(),
            title: None,
            bitrate_kbps: None,
            requests: chunks
                .iter()
                .enumerate()
                .map(|(i, p)| Request {
                    path: p.to_string(),
                    range: None,
                    pacing_s: if i == 0 { 0.0 } else { 0.3 },
                    timeout_s: 10.0,
                    conn: 0,
                    media_s: 0.3,
                })
                .collect(),
            live: None,
            play: None,
        })
        .collect();
    let run_with = |warm: vodkit_load::WarmStart| {
        let r = run(nginx.target(), sessions.clone(), |c| {
            c.rate = 10.0;
            c.verify = true;
            c.warm_start = warm;
        });
        r.results
    };
    let cold = run_with(vodkit_load::WarmStart::Off);
    assert_eq!(cold.run.sessions_prefilled, 0);
    assert_eq!(cold.sessions.completed, 30, "{}", cold.summary());
    assert_eq!(cold.requests.completed, 120);
    // Horizon 0.9 s: the sessions arriving at 0.1..0.8 s (before: 0.9 s earlier) are
    // already playing; the one at 0.9 s starts whole at zero.
    let warm = run_with(vodkit_load::WarmStart::Auto);
    assert!((warm.run.warm_start_s - 0.9).abs() < 1e-9);
    let prefilled = warm.run.sessions_prefilled;
    assert_eq!(prefilled, 8, "{}", warm.summary());
    // Prefilled sessions are not judged, but their requests are counted; nor are the
    // sessions arriving before the run settled: a quarter of its 2.1 s, since the
    // prefilled sessions' next requests all come within 0.3 s.
    assert!(
        (warm.run.settle_s - 0.25 * 2.1).abs() < 1e-9,
        "{}",
        warm.run.settle_s
    );
    let judged = (0..30 - prefilled)
        .filter(|&i| i as f64 * 0.1 >= warm.run.settle_s)
        .count() as u64;
    assert_eq!(judged, 16);
    assert_eq!(warm.sessions.started, judged);
    assert_eq!(warm.sessions.completed, judged, "{}", warm.summary());
    assert!(warm.requests.completed > 4 * (30 - prefilled));
    assert!(warm.requests.completed < 120);
    assert_eq!(warm.requests.errors, Default::default());
    // A warm run is shorter: the schedule lost its first 0.9 s.
    assert!(
        warm.run.elapsed_s < cold.run.elapsed_s,
        "{} vs {}",
        warm.run.elapsed_s,
        cold.run.elapsed_s
    );
}

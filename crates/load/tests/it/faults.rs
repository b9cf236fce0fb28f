//! Servers that misbehave (stall, speak garbage, truncate, close keep-alive connections)
//! and inputs that are wrong: every case ends in a classified failure or a clear error,
//! never a panic or a hang.

use crate::common;

use common::run;
use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;
use vodkit_load::record::{FailureReason, SessionEnd};
use vodkit_load::Target;
use vodkit_workload::model::{ByteRange, Request, Session};

/// A blocking test server: for each connection, answer each request with `respond`.
/// `respond(request_number_on_connection)` returns bytes to write and whether to close.
fn serve(respond: fn(u32) -> (Vec<u8>, Action)) -> Target {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut n = 0;
                while common::read_head(&mut stream) {
                    let (bytes, action) = respond(n);
                    n += 1;
                    if stream.write_all(&bytes).is_err() {
                        return;
                    }
                    match action {
                        Action::KeepOpen => {}
                        Action::Close => return,
                        Action::Stall => {
                            std::thread::sleep(Duration::from_secs(30));
                            return;
                        }
                    }
                }
            });
        }
    });
    Target::parse(&format!("http://127.0.0.1:{port}"), false).unwrap()
}

#[derive(Clone, Copy)]
enum Action {
    KeepOpen,
    Close,
    Stall,
}

fn ok_response(len: usize) -> Vec<u8> {
    cut_response(len, len)
}

/// A 200 response announcing a body of `len` bytes that holds only the first `sent`.
fn cut_response(len: usize, sent: usize) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").into_bytes();
    v.resize(v.len() + sent, b'x');
    v
}

fn req(timeout_s: f64) -> Request {
    Request::new("/f", None, timeout_s)
}

fn session(id: u64, requests: Vec<Request>) -> Session {
    Session::new(id, 0.001, "default", requests)
}

#[test]
fn stalling_server_times_out_at_t_and_ends_the_session() {
    // Headers and part of the body, then silence.
    let target = serve(|_| (cut_response(100_000, 1000), Action::Stall));
    let t = 0.4;
    let sessions = (0..4)
        .map(|i| session(i, vec![req(t), req(t), req(t)]))
        .collect();
    let run = run(target, sessions, |_| {});
    assert_eq!(run.results.requests.timed_out, 4);
    assert_eq!(run.results.sessions.failed, 4);
    assert_eq!(run.results.requests.skipped, 8);
    for s in &run.sessions {
        assert_eq!(s.end, SessionEnd::Failed(FailureReason::Timeout));
        let r = &s.requests[0];
        // Never before T; after it by no more than a busy 2-core machine delays a timer.
        assert!(
            r.elapsed >= 0.95 * t && r.elapsed <= 1.5 * t,
            "timed out after {} s, T = {t} s",
            r.elapsed
        );
        assert_eq!(r.bytes, 1000);
        assert_eq!(s.requests.len(), 1, "remaining requests must be skipped");
    }
}

#[test]
fn unreachable_target_is_a_connect_failure() {
    let port = common::free_port();
    let target = Target::parse(&format!("http://127.0.0.1:{port}"), false).unwrap();
    let run = run(target, vec![session(1, vec![req(2.0), req(2.0)])], |_| {});
    assert_eq!(
        run.sessions[0].end,
        SessionEnd::Failed(FailureReason::Connect)
    );
    assert_eq!(run.results.requests.errors.get("connect"), Some(&1));
    assert_eq!(
        run.results.qos.sessions, 0,
        "no content seconds, no playout model"
    );
}

#[test]
fn garbage_server_is_a_protocol_failure() {
    let target = serve(|_| {
        (
            b"SSH-2.0-OpenSSH_9.2\r\n\r\nwhatever".to_vec(),
            Action::Close,
        )
    });
    let run = run(target, vec![session(1, vec![req(2.0)])], |_| {});
    assert_eq!(
        run.sessions[0].end,
        SessionEnd::Failed(FailureReason::Protocol)
    );
    let f = run.sessions[0].requests[0].failure.as_ref().unwrap();
    assert!(f.detail.contains("bad response head"), "{f}");
}

#[test]
fn truncated_body_is_a_short_body() {
    let target = serve(|_| (cut_response(5000, 1234), Action::Close));
    let run = run(target, vec![session(1, vec![req(2.0)])], |_| {});
    assert_eq!(
        run.sessions[0].end,
        SessionEnd::Failed(FailureReason::ShortBody)
    );
    assert_eq!(run.sessions[0].requests[0].bytes, 1234);
}

#[test]
fn oversized_range_answer_is_classified() {
    let target = serve(|_| {
        (
            b"HTTP/1.1 206 Partial Content\r\nContent-Length: 50\r\nContent-Range: bytes 0-49/100\r\n\r\n".to_vec(),
            Action::Close,
        )
    });
    let mut r = req(2.0);
    r.range = Some(ByteRange::Closed { first: 0, last: 9 });
    let run = run(target, vec![session(1, vec![r])], |_| {});
    assert_eq!(
        run.sessions[0].end,
        SessionEnd::Failed(FailureReason::OversizedBody)
    );
}

#[test]
fn connections_closed_by_the_server_are_reopened_and_counted() {
    // Every response says Connection: close; a second variant just closes silently.
    let target = serve(|_| {
        let mut v = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\n\r\n".to_vec();
        v.extend_from_slice(b"0123456789");
        (v, Action::Close)
    });
    let run = run(
        target,
        vec![session(1, vec![req(2.0), req(2.0), req(2.0)])],
        |_| {},
    );
    assert_eq!(
        run.results.sessions.completed,
        1,
        "{}",
        run.results.summary()
    );
    assert_eq!(run.results.connections.opened, 3);
    assert_eq!(run.results.connections.reconnects, 2);

    let silent = serve(|n| {
        (
            ok_response(10),
            if n == 0 {
                Action::Close
            } else {
                Action::KeepOpen
            },
        )
    });
    let run = common::run(silent, vec![session(1, vec![req(2.0), req(2.0)])], |_| {});
    assert_eq!(
        run.results.sessions.completed,
        1,
        "{}",
        run.results.summary()
    );
    assert_eq!(run.results.connections.reconnects, 1);
}

#[test]
fn bandwidth_limit_spreads_the_download() {
    let target = serve(|_| (ok_response(100_000), Action::KeepOpen));
    let mut s = session(1, vec![req(10.0)]);
    s.class = "slow".into();
    // 800 kbit/s: 100,000 bytes need about one second.
    let run = run(target, vec![s], |c| {
        common::link(c, "slow", 800_000, Duration::from_millis(50));
    });
    let r = &run.sessions[0].requests[0];
    assert!(r.completed());
    assert!(
        r.elapsed > 0.7,
        "100 kB at 800 kbit/s took only {} s",
        r.elapsed
    );
    assert!(
        r.ttfb.unwrap() >= 0.1,
        "two one-way delays must show in the first byte: {:?}",
        r.ttfb
    );
    assert_eq!(run.results.run.link_emulation, "user");
}

#[test]
fn bad_logs_are_located_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("bad.log", "/a timeout=10\n/b range=9-1\n", "bad.log:2"),
        ("attr.log", "/a colour=blue\n", "unknown attribute"),
        (
            "bad.jsonl",
            "{\"id\":1,\"gap\":1,\"class\":\"a\",\"requests\":[}\n",
            "bad.jsonl:1",
        ),
        ("empty.log", "# nothing\n", "no sessions"),
    ];
    for (name, text, want) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let e = vodkit_load::input::read_sessions(&path, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{name}: got {e:?}, want {want:?}");
        assert!(!e.contains('\n'));
    }
    let missing =
        vodkit_load::input::read_sessions(&dir.path().join("none.log"), None).unwrap_err();
    assert!(missing.to_string().contains("none.log"));
}

#[test]
fn invalid_sessions_are_rejected_before_running() {
    let target = Target::parse("http://127.0.0.1:9", false).unwrap();
    let mut r = req(1.0);
    r.timeout_s = 0.0;
    let config = vodkit_load::LoadConfig::new(target, vec![session(5, vec![r])], 1.0);
    let e = vodkit_load::run(config, vodkit_load::CancellationToken::new()).unwrap_err();
    assert!(e.to_string().contains("session id 5"), "{e}");
    assert!(e.to_string().contains("timeout_s"), "{e}");
}

#[test]
fn stop_token_cancels_long_sessions() {
    let target = serve(|_| (ok_response(10), Action::KeepOpen));
    let mut reqs = vec![req(5.0)];
    let mut paced = req(5.0);
    paced.pacing_s = 60.0;
    reqs.push(paced);
    let mut config = vodkit_load::LoadConfig::new(target, vec![session(1, reqs)], 100.0);
    config.duration = Some(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let run = vodkit_load::run(config, vodkit_load::CancellationToken::new()).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(run.sessions[0].end, SessionEnd::Cancelled);
    assert_eq!(run.results.sessions.cancelled, 1);
    assert_eq!(run.results.sessions.failed, 0);
}

#[test]
fn merge_rejects_empty_input_and_corrupt_histograms() {
    assert!(vodkit_load::Results::merge(&[]).is_err());
    let target = serve(|_| (ok_response(10), Action::KeepOpen));
    let run = run(target, vec![session(1, vec![req(2.0)])], |_| {});
    let mut bad = run.results.clone();
    bad.latency_ms.ttlb.histogram = "AAAA".into();
    let e = vodkit_load::Results::merge(&[run.results.clone(), bad]).unwrap_err();
    assert!(e.contains("input 2"), "{e}");
}

#[test]
fn absurd_numbers_are_input_errors_not_panics() {
    let target = Target::parse("http://127.0.0.1:9", false).unwrap();
    type Spoil = fn(&mut Request);
    let cases: [(&str, Spoil); 3] = [
        ("timeout_s", |r| r.timeout_s = 1e300),
        ("pacing_s", |r| r.pacing_s = f64::INFINITY),
        ("timeout_s", |r| r.timeout_s = f64::NAN),
    ];
    for (field, spoil) in cases {
        let mut r = req(1.0);
        spoil(&mut r);
        let config = vodkit_load::LoadConfig::new(target.clone(), vec![session(2, vec![r])], 1.0);
        let e = vodkit_load::run(config, vodkit_load::CancellationToken::new()).unwrap_err();
        assert!(e.to_string().contains(field), "{e}");
    }
    let mut late = session(3, vec![req(1.0)]);
    late.start_s = Some(1e300);
    let config = vodkit_load::LoadConfig::new(target, vec![late], 1.0);
    let e = vodkit_load::run(config, vodkit_load::CancellationToken::new()).unwrap_err();
    assert!(e.to_string().contains("start"), "{e}");
}

#[test]
fn a_503_refusal_is_counted_apart_from_failures() {
    use std::sync::atomic::{AtomicU32, Ordering};
    static FIRST_REQUESTS: AtomicU32 = AtomicU32::new(0);
    // Every other viewer is turned away at its first request; the others play.
    let target = serve(|n| {
        if n == 0 && FIRST_REQUESTS.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            let body = "503 Service Unavailable\n";
            let head = format!(
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            return (head.into_bytes(), Action::Close);
        }
        (ok_response(100), Action::KeepOpen)
    });
    let sessions = (0..6)
        .map(|i| session(i, vec![req(5.0), req(5.0)]))
        .collect();
    let run = run(target, sessions, |_| {});
    let s = &run.results.sessions;
    assert_eq!(s.refused, 3, "{s:?}");
    assert_eq!(s.failed, 0, "refusals are not failures: {s:?}");
    assert_eq!(s.completed, 3, "{s:?}");
    assert_eq!(s.failure_fraction, 0.0);
    assert_eq!(s.played_clean, 3, "{s:?}");
    assert!((s.goodput_fraction - 0.5).abs() < 1e-9, "{s:?}");
    assert_eq!(run.results.requests.errors.get("refused"), Some(&3));
    assert_eq!(run.results.latency_ms.refusal.count, 3);
    for r in run.sessions.iter().filter(|r| r.end == SessionEnd::Refused) {
        assert_eq!(r.requests.len(), 1, "a refused viewer asks no more");
    }
    assert!(run.results.summary().contains("refused 3"));
}

#[test]
fn latency_from_the_intended_send_time_charges_a_slow_response_to_the_ones_behind_it() {
    // The first response of each connection takes 0.8 s; the rest are immediate.
    let target = serve(|n| {
        if n == 0 {
            std::thread::sleep(Duration::from_millis(800));
        }
        (ok_response(10), Action::KeepOpen)
    });
    // Three requests on one connection, due 0.1 s apart: the second and third wait ~0.7 s
    // behind the first although the server answers them at once.
    let paced = |p: f64| Request {
        pacing_s: p,
        ..req(5.0)
    };
    let sessions = vec![session(1, vec![paced(0.0), paced(0.1), paced(0.1)])];
    let run = run(target, sessions, |c| c.percentiles = vec![50.0, 95.0]);
    let r = &run.results;
    assert_eq!(r.requests.completed, 3, "{}", r.summary());
    let (ttlb, intended) = (&r.latency_ms.ttlb, &r.latency_ms.ttlb_intended);
    assert_eq!(intended.count, 3);
    // Measured from the actual send: one slow request, two fast ones.
    assert!(ttlb.p50 < 100.0, "ttlb p50 {}", ttlb.p50);
    // Measured from the intended send: all three are slow.
    assert!(
        intended.p50 > 600.0 && intended.p50 < 1000.0,
        "intended p50 {}",
        intended.p50
    );
    assert!(intended.max >= ttlb.max);
    assert_eq!(r.schedule.late_requests, 2);
    // The session itself started on time: no warning about the generator.
    assert_eq!(r.schedule.late_sessions, 0);
    assert!(!r.summary().contains("could not keep the schedule"));
    // --percentiles: the chosen ones are stored and printed.
    assert_eq!(intended.chosen.len(), 2);
    assert_eq!(intended.chosen[1][0], 95.0);
    assert!(r.summary().contains("p95 "), "{}", r.summary());
    // Merging keeps the corrected distribution and the chosen percentiles.
    let merged = vodkit_load::Results::merge(&[r.clone(), r.clone()]).unwrap();
    assert_eq!(merged.latency_ms.ttlb_intended.count, 6);
    assert_eq!(merged.schedule.late_requests, 4);
    assert_eq!(merged.latency_ms.ttlb_intended.chosen.len(), 2);
}

/// Every other response of the server is a `502` that closes its connection: with
/// `retry` each failed request is fetched again on a fresh connection and the session
/// plays through, with the retries counted; without, the first `502` ends the session.
#[test]
fn a_server_error_is_retried_once_on_a_fresh_connection_only_when_asked() {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEEN: AtomicU32 = AtomicU32::new(0);
    let target = serve(|_| {
        if SEEN.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            (
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
                Action::Close,
            )
        } else {
            (ok_response(100), Action::KeepOpen)
        }
    });
    let one = || vec![session(1, vec![req(5.0), req(5.0), req(5.0)])];
    let run_with = |retry: bool| {
        SEEN.store(0, Ordering::SeqCst);
        run(target.clone(), one(), |c| c.retry = retry)
    };
    let retried = run_with(true);
    assert_eq!(retried.sessions[0].end, SessionEnd::Completed);
    assert_eq!(retried.results.run.retried_requests, 3);
    assert_eq!(retried.results.run.recovered_requests, 3);
    let plain = run_with(false);
    assert_eq!(
        plain.sessions[0].end,
        SessionEnd::Failed(FailureReason::Status)
    );
    assert_eq!(plain.results.run.retried_requests, 0);
}

//! Unit tests of the fast-forward: its flag, the history's window, the sped-up sessions,
//! the viewers the judged run resumes, and the steadiness judgement.

use super::*;
use vodkit_workload::model::{ByteRange, Request};

/// A session of `n` requests of `bytes` each, paced `pace` seconds apart, arriving after
/// `gap`.
fn session(id: u64, gap: f64, n: usize, pace: f64, bytes: u64) -> Session {
    Session {
        id,
        gap,
        start_s: None,
        class: "c".into(),
        title: None,
        bitrate_kbps: None,
        requests: (0..n)
            .map(|i| Request {
                path: format!("/f{id}"),
                range: Some(ByteRange::Closed {
                    first: i as u64 * bytes,
                    last: (i as u64 + 1) * bytes - 1,
                }),
                pacing_s: if i == 0 { 0.0 } else { pace },
                timeout_s: 10.0,
                conn: 0,
                media_s: pace,
            })
            .collect(),
        live: None,
        play: None,
    }
}

#[test]
fn the_flag_reads_speed_fill_off_and_auto() {
    let on = |s: &str| match s.parse::<FastForwardChoice>() {
        Ok(FastForwardChoice::On(ff)) => ff,
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(on("8,fill=3"), FastForward::DEFAULT);
    assert_eq!(
        on("4"),
        FastForward {
            speed: 4.0,
            fill: DEFAULT_FILL
        }
    );
    assert_eq!(on(" 16 , fill=0.5 ").fill, 0.5);
    assert_eq!("off".parse(), Ok(FastForwardChoice::Off));
    assert_eq!("auto".parse(), Ok(FastForwardChoice::Auto));
    for bad in ["", "fast", "0.5", "8,fill=-1", "8,speed=2", "2000"] {
        let e = bad.parse::<FastForwardChoice>().unwrap_err();
        assert!(e.starts_with("--fast-forward"), "{bad}: {e}");
    }
    // The words print back as they parse.
    for words in ["off", "auto", "8,fill=3", "2.5,fill=1"] {
        let c: FastForwardChoice = words.parse().unwrap();
        assert_eq!(c.to_string(), words);
    }
}

#[test]
fn auto_is_on_for_an_emulated_drive_with_a_budget_and_no_cpu_quota() {
    let auto = FastForwardChoice::Auto;
    assert_eq!(
        auto.resolve(true, Some(1 << 30), None),
        Some(FastForward::DEFAULT)
    );
    assert_eq!(auto.resolve(false, Some(1 << 30), None), None, "plain disk");
    assert_eq!(auto.resolve(true, None, None), None, "no budget");
    assert_eq!(
        auto.resolve(true, Some(1 << 30), Some(0.5)),
        None,
        "CPU quota"
    );
    assert_eq!(FastForwardChoice::Off.resolve(true, Some(1), None), None);
    let ff = FastForward {
        speed: 2.0,
        fill: 1.0,
    };
    assert_eq!(
        FastForwardChoice::On(ff).resolve(false, None, None),
        Some(ff)
    );
}

#[test]
fn the_window_is_two_longest_sessions_or_fill_budgets_of_requests() {
    // 40 s sessions: at least 80 s.
    assert_eq!(window_s(40.0, 3.0, None, 1e6), 80.0);
    // 3 × 100 MB at 1 MB/s of requests: 300 s.
    assert_eq!(window_s(40.0, 3.0, Some(100_000_000), 1e6), 300.0);
    // A budget that fills quickly: the sessions decide.
    assert_eq!(window_s(40.0, 3.0, Some(1_000_000), 1e6), 80.0);
    assert_eq!(window_s(40.0, 3.0, Some(1), 0.0), 80.0, "no demand");
    // From a session list: 11 requests 4 s apart (40 s), 1 MB each, at 2 sessions/s.
    let list: Vec<Session> = (0..10)
        .map(|i| session(i, 1.0, 11, 4.0, 1_000_000))
        .collect();
    let p = plan(FastForward::DEFAULT, &list, 2.0, Some(200_000_000));
    assert_eq!(p.longest_s, 40.0);
    assert!((p.demand_bytes_per_s - 22e6).abs() < 1.0, "{p:?}");
    assert_eq!(
        p.window_s, 80.0,
        "600 MB at 22 MB/s is 27 s: the sessions decide"
    );
    let p = plan(FastForward::DEFAULT, &list, 2.0, Some(2_000_000_000));
    assert!((p.window_s - 6e9 / 22e6).abs() < 1e-6, "{p:?}");
}

#[test]
fn a_short_list_is_repeated_with_fresh_ids_to_cover_the_history_and_the_point() {
    let list: Vec<Session> = (0..4).map(|i| session(i, 1.0, 2, 1.0, 10)).collect();
    // 4 gaps at 1 session/s: 4 s; 10 s asked: three copies (12 s).
    let c = cover(&list, 1.0, 10.0);
    assert_eq!(c.len(), 12);
    let ids: std::collections::HashSet<u64> = c.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), 12, "ids stay unique");
    assert_eq!(c[4].requests, list[0].requests);
    assert_eq!(cover(&list, 1.0, 3.0).len(), 4, "long enough already");
    let mut fixed = list.clone();
    fixed[0].start_s = Some(0.0);
    assert_eq!(
        cover(&fixed, 1.0, 10.0).len(),
        4,
        "explicit starts are kept"
    );
    assert_eq!(cover(&list, 1.0, 1e9).len(), 4 * MAX_REPEATS);
}

#[test]
fn sped_up_sessions_keep_their_content_and_shrink_their_time() {
    let mut s = session(3, 2.0, 3, 4.0, 100);
    s.start_s = Some(80.0);
    let f = &sped_up(std::slice::from_ref(&s), 8.0)[0];
    assert_eq!(f.start_s, Some(10.0));
    assert_eq!(f.gap, s.gap, "the arrival rate is scaled by the caller");
    assert_eq!(f.requests[1].pacing_s, 0.5);
    assert_eq!(f.requests[1].media_s, 0.5);
    assert_eq!(f.requests[1].timeout_s, 10.0, "timeouts stay");
    assert_eq!(f.requests[1].range, s.requests[1].range);
    let l = sped_up_link(
        vodkit_load::link::Link {
            bandwidth_bps: 4_000_000,
            one_way_delay: Duration::from_millis(40),
        },
        8.0,
    );
    assert_eq!(l.bandwidth_bps, 32_000_000);
    assert_eq!(l.one_way_delay, Duration::from_millis(5));
    let unlimited = sped_up_link(vodkit_load::link::Link::default(), 8.0);
    assert_eq!(unlimited.bandwidth_bps, 0);
}

/// The sessions still playing when a history of `window_s` at `rate` ends, played `speed`
/// times faster: (index, first request not yet due), from the sped-up schedule alone.
fn playing_at_end(list: &[Session], rate: f64, window_s: f64, speed: f64) -> Vec<(usize, usize)> {
    let fast = sped_up(list, speed);
    let end = window_s / speed;
    let mut gaps = 0.0;
    fast.iter()
        .enumerate()
        .filter_map(|(i, s)| {
            gaps += s.gap;
            let arrival = gaps / (rate * speed);
            if arrival >= end {
                return None;
            }
            let due: Vec<f64> = vodkit_load::warm::nominal_times(s, arrival).collect();
            due.iter().position(|&t| t >= end).map(|from| (i, from))
        })
        .collect()
}

#[test]
fn the_judged_run_resumes_exactly_the_viewers_the_history_left_playing() {
    // Sessions of 6 requests 5 s apart (25 s long), one a second, 70 s of history.
    let list: Vec<Session> = (0..120).map(|i| session(i, 1.0, 6, 5.0, 1000)).collect();
    let (rate, window) = (1.0, 70.0);
    let resumed = resumed(&list, rate, window);
    // Arrivals at 1..=120 s; those at 46..=69 s are still playing at 70 s (one arriving
    // at 45 s has its last request due at exactly 70 s: it resumes with that request).
    assert_eq!(resumed.first(), Some(&(44, 5)));
    assert_eq!(resumed.last(), Some(&(68, 1)));
    assert_eq!(resumed.len(), 25);
    // A session that arrived at 62 s asked at 62 and 67 s; at 70 s its third request is next.
    assert!(resumed.contains(&(61, 2)));
    // Played eight times faster, the history leaves the same viewers at the same requests.
    for speed in [1.0, 8.0, 10.0] {
        assert_eq!(
            playing_at_end(&list, rate, window, speed),
            resumed,
            "{speed}×"
        );
    }
}

fn half(delivered: f64, disk: f64) -> Half {
    Half {
        seconds: 30.0,
        delivered_mb_s: delivered,
        disk_mb_s: disk,
    }
}

#[test]
fn a_point_is_steady_when_its_halves_agree_in_disk_rate_and_memory_share() {
    let cache = [Some(90 << 20), Some(95 << 20)];
    // 40 → 42 MB/s from disk (5%), memory share 50% → 47.5%: steady.
    let st = Steadiness::judge([half(80.0, 40.0), half(80.0, 42.0)], cache);
    assert!(st.steady, "{st:?}");
    assert_eq!(st.halves[0].memory_share(), Some(0.5));
    // The disk rate climbs 25% while the cache fills: not steady.
    assert!(!Steadiness::judge([half(80.0, 32.0), half(80.0, 40.0)], cache).steady);
    // Same disk rate, but the delivered rate (and the memory share) moved 20 points.
    assert!(!Steadiness::judge([half(50.0, 40.0), half(66.7, 40.0)], cache).steady);
    // Almost nothing from disk in either half: equal however the tiny rates compare.
    assert!(Steadiness::judge([half(100.0, 0.1), half(100.0, 0.5)], cache).steady);
    // Nothing delivered: no evidence of steady state.
    assert!(!Steadiness::judge([half(0.0, 0.0), half(0.0, 0.0)], cache).steady);
    let text = st.describe();
    assert_eq!(text, "disk 40.0→42.0 MB/s, memory 50%→48%, cache 90→95 MiB");
}

#[test]
fn delivered_halves_average_the_seconds_of_each_half() {
    // 20 s at 10 MB/s, then 20 s at 20 MB/s; samples end at t_s.
    let samples: Vec<(u64, f64)> = (1..=40)
        .map(|t| (t, if t <= 20 { 10.0 } else { 20.0 }))
        .collect();
    assert_eq!(delivered_halves(&samples, 0.0, 40.0), Some([10.0, 20.0]));
    // The window starts when the run settled (10 s): halves 10-25 and 25-40.
    let [a, b] = delivered_halves(&samples, 10.0, 40.0).unwrap();
    assert!((a - (10.0 * 10.0 + 5.0 * 20.0) / 15.0).abs() < 1e-9, "{a}");
    assert_eq!(b, 20.0);
    assert_eq!(delivered_halves(&samples, 0.0, 1.0), None, "too short");
    assert_eq!(delivered_halves(&[], 0.0, 40.0), None);
}

#[test]
fn the_report_lists_passing_points_that_were_not_steady() {
    use crate::point::PointMetrics;
    use crate::report::{PointRecord, ServerReport};
    let sut = crate::sut::parse_one("nginx").unwrap();
    let mut s = ServerReport::not_measured(&sut, crate::report::FAILED, "test".into());
    let point = |rate: f64, passed: bool, steady: Option<bool>| PointRecord {
        rate,
        repeat: 0,
        passed,
        short: false,
        metrics: PointMetrics {
            steadiness: steady.map(|ok| Steadiness {
                steady: ok,
                ..Steadiness::judge([half(80.0, 40.0), half(80.0, 40.0)], [None, None])
            }),
            ..PointMetrics::default()
        },
    };
    s.points = vec![point(1.0, true, Some(true)), point(2.0, true, None)];
    assert_eq!(crate::experiment::unsteady_note(&s), None);
    // A failing point that was not steady is not listed: it did not set the capacity.
    s.points.push(point(4.0, false, Some(false)));
    assert_eq!(crate::experiment::unsteady_note(&s), None);
    s.points.push(point(3.0, true, Some(false)));
    let note = crate::experiment::unsteady_note(&s).unwrap();
    assert!(
        note.starts_with("nginx: passing points not at steady state"),
        "{note}"
    );
    assert!(
        note.ends_with("3.00/s (disk 40.0→40.0 MB/s, memory 50%→50%, cache –→– MiB)"),
        "{note}"
    );
}

#[test]
fn a_point_whose_list_ends_early_says_so() {
    // Two sessions a second: arrivals up to two gaps before the end are the list's last.
    assert_eq!(ran_out_note(99.5, 100.0, 2.0), None);
    assert_eq!(ran_out_note(99.0, 100.0, 2.0), None);
    let note = ran_out_note(50.0, 100.0, 2.0).expect("half the point without arrivals");
    assert!(note.contains("50 s into the 100 s point"), "{note}");
    assert_eq!(ran_out_note(50.0, 100.0, 0.0), None);
}

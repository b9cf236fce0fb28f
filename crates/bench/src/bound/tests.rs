//! Hand-computed cases of the capacity bound, its monotonicity, and the demo's figure.

use super::*;
use vodkit_disk::model::preset::half_rotation_ms;
use vodkit_disk::model::{preset, DriveSpec, SeekCurve, ZoneProfile, MIB};
use vodkit_workload::model::Request;

const MB: u64 = 1_000_000;

fn catalog(files: &[(&str, u64)]) -> Catalog {
    Catalog::of_files(
        files.iter().map(|(p, size)| (p.to_string(), *size)),
        10.0,
        8000,
    )
}

/// A session reading `n` consecutive requests of `bytes` from `path`, `pacing` s apart
/// (0 = unpaced).
fn session(id: u64, gap: f64, class: &str, path: &str, n: u64, bytes: u64, pacing: f64) -> Session {
    let requests = Request::consecutive(&format!("/{path}"), n, bytes, pacing);
    Session {
        bitrate_kbps: Some(8000),
        ..Session::new(id, gap, class, requests)
    }
}

/// Sessions one gap apart, the `i`-th reading the first `mb[i]` MB of `a.dat`, a MB a
/// second.
fn readers_of_a(mb: &[u64]) -> Vec<Session> {
    let reader = |(i, &n): (usize, &u64)| session(i as u64, 1.0, "c", "a.dat", n, MB, 1.0);
    mb.iter().enumerate().map(reader).collect()
}

fn class(name: &str, bandwidth_bps: u64) -> ClientClass {
    ClientClass {
        name: name.into(),
        bandwidth_bps,
        one_way_delay_s: 0.0,
        share: 1.0,
    }
}

/// t_pos 10 ms, R 10^8 bytes/s.
const DISK: DiskTerms = DiskTerms {
    positioning_s: 0.01,
    transfer_bytes_s: 1e8,
    span_fraction: 1.0,
    sweep: None,
};

/// Transfer only: the best split then simply maximizes hits.
const NO_SEEK: DiskTerms = DiskTerms {
    positioning_s: 0.0,
    transfer_bytes_s: 1e8,
    span_fraction: 1.0,
    sweep: None,
};

fn memory(bytes: u64) -> MemoryTerms {
    MemoryTerms {
        budget_bytes: bytes,
        reserve_bytes: 0,
    }
}

/// `n` sessions of distinct files, each ten 1 MB requests paced 1 s apart, gaps 1.
fn distinct(n: u64, bytes: u64, requests: u64, pacing: f64) -> Workload {
    let names: Vec<String> = (0..n).map(|i| format!("t{i}.dat")).collect();
    let files: Vec<(&str, u64)> = names
        .iter()
        .map(|p| (p.as_str(), bytes * requests))
        .collect();
    let sessions: Vec<Session> = names
        .iter()
        .enumerate()
        .map(|(i, p)| session(i as u64, 1.0, "c", p, requests, bytes, pacing))
        .collect();
    prepare(&catalog(&files), &sessions, &[]).unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn a_huge_memory_leaves_only_the_transfer_limit() {
    // 4 sessions × 10 MB over a schedule of 4 gaps: at λ the disk reads λ/4 × 40 MB/s, so
    // R = 10^8 allows λ = 10 (N = λ/4 × 40 s = 100 streams of 1 MB/s = R).
    let w = distinct(4, MB, 10, 1.0);
    let b = bound(&w, &DISK, &memory(1 << 50), "test").unwrap();
    assert!(b.bound_rate <= 10.0 + 1e-9, "{}", b.bound_rate);
    assert!(b.bound_rate > 9.99, "{}", b.bound_rate);
    assert!(b.streams_at_bound * 1e6 <= 1e8 * (1.0 + 1e-9));
    assert!(close(b.mean_session_s, 10.0, 1e-12));
    assert_eq!(b.hit_fraction, 0.0);
}

#[test]
fn b_finite_memory_solves_the_quadratic() {
    // N streams of ρ = 1 MB/s in steps of Q = 1 MB; each reads P = Q + 2M/N per positioning
    // (memory N(P − Q)/2 = M), so t_pos·N·ρ/P + N·ρ/R = 1. With t_pos = 0.01, R = 10^8,
    // M = 10^8: N² + 50 N − 10,000 = 0, N = (−50 + √42,500)/2 = 78.0776, and N = 10 λ.
    let w = distinct(5, MB, 10, 1.0);
    let b = bound(&w, &DISK, &memory(100 * MB), "test").unwrap();
    let n = (-50.0 + 42_500f64.sqrt()) / 2.0;
    assert!(close(n, 78.077_640_640_441_5, 1e-12));
    assert!(close(b.bound_rate, n / 10.0, 1e-6), "{}", b.bound_rate);
    assert!(close(b.streams_at_bound, n, 1e-6));
    // P at the reference rate (8,000 kbit/s = 1 MB/s): Q + 2M/N.
    let p = b.prefetch_bytes_at_ref.unwrap();
    assert!(close(p, 1e6 + 2e8 / n, 1e-6), "{p}");
    assert_eq!(b.interval_memory_bytes, 0);
}

#[test]
fn b_small_requests_reduce_to_the_continuous_square_root_rule() {
    // Steps of 1 kB every 1 ms: Q is negligible beside 2M/N, so the bound approaches the
    // continuous form t_pos·N²·ρ/(2M) + N·ρ/R = 1: N² + 200 N − 20,000 = 0, N = 73.205.
    let w = distinct(5, 1000, 10_000, 0.001);
    let b = bound(&w, &DISK, &memory(100 * MB), "test").unwrap();
    let continuous = (-200.0 + 120_000f64.sqrt()) / 2.0;
    assert!(
        close(b.streams_at_bound, continuous, 1e-3),
        "{}",
        b.streams_at_bound
    );
    // Exactly: N²(t_pos ρ R + ρ Q) + N(2Mρ − RQ) − 2MR = 0.
    let (t, rho, r, q, m): (f64, f64, f64, f64, f64) = (0.01, 1e6, 1e8, 1000.0, 1e8);
    let (qa, qb, qc) = (t * rho * r + rho * q, 2.0 * m * rho - r * q, -2.0 * m * r);
    let exact = (-qb + (qb * qb - 4.0 * qa * qc).sqrt()) / (2.0 * qa);
    assert!(
        close(b.streams_at_bound, exact, 1e-6),
        "{} vs {exact}",
        b.streams_at_bound
    );
}

#[test]
fn c_a_close_follower_is_served_from_the_kept_interval() {
    // Two sessions of one 10 MB file, one gap apart (schedule of 2 gaps): keeping the
    // interval holds 10 MB × (1/λ s) over 2/λ s = 5 MB on average, at any rate.
    let files = [("a.dat", 10 * MB)];
    let s = readers_of_a(&[10, 10]);
    let w = prepare(&catalog(&files), &s, &[]).unwrap();
    assert_eq!(w.watched_bytes, 20 * MB);
    for lambda in [1.0, 3.0] {
        let all = evaluate(&w, &NO_SEEK, 5e6, lambda, 1);
        assert_eq!(all.hit_bytes, 10e6);
        assert_eq!(all.disk_bytes, 10e6);
        let some = evaluate(&w, &NO_SEEK, 2e6, lambda, 1);
        assert_eq!(some.hit_bytes, 4e6);
        assert_eq!(some.disk_bytes, 16e6);
        let none = evaluate(&w, &NO_SEEK, 0.0, lambda, 1);
        assert_eq!(none.disk_bytes, 20e6);
    }
    // With memory to spare the same title doubles the transfer limit of distinct titles:
    // R × 2 gaps / 10 MB = 20 against R × 2 / 20 MB = 10.
    let shared = bound(&w, &DISK, &memory(1 << 50), "test").unwrap();
    assert!(shared.bound_rate > 19.9 && shared.bound_rate <= 20.0 + 1e-9);
    assert!(close(shared.hit_fraction, 0.5, 1e-9));
    let apart = bound(&distinct(2, MB, 10, 1.0), &DISK, &memory(1 << 50), "test").unwrap();
    assert!(apart.bound_rate > 9.9 && apart.bound_rate <= 10.0 + 1e-9);
}

#[test]
fn a_follower_not_yet_started_gets_nothing_without_foresight() {
    // The case above: the follower starts 1/λ s after the leader, which reads its i-th MB
    // at i s. Without foresight a MB is kept only if the follower has started by then:
    // i ≥ 1/λ, so 9 MB at λ = 1, 8 at λ = 0.5, 5 at λ = 0.2 and none at λ = 0.1 (it starts
    // at 10 s, after the leader's last read at 9 s).
    let files = [("a.dat", 10 * MB)];
    let w = prepare(&catalog(&files), &readers_of_a(&[10, 10]), &[]).unwrap();
    let started = Foresight::StartedFollowers;
    for (lambda, mb) in [(1.0, 9.0), (0.5, 8.0), (0.2, 5.0), (0.1, 0.0)] {
        let e = evaluate_with(&w, &NO_SEEK, 1e12, lambda, 1, started);
        assert_eq!(e.hit_bytes, mb * 1e6, "λ = {lambda}");
        assert_eq!(evaluate(&w, &NO_SEEK, 1e12, lambda, 1).hit_bytes, 10e6);
    }
    // With memory to spare the full bound is the transfer limit of 10 MB a session pair
    // (20 sessions/s); without foresight the first MB is read twice: R × 2 gaps / 11 MB.
    let b = bound(&w, &DISK, &memory(1 << 50), "test").unwrap();
    assert!(close(b.bound_rate, 20.0, 1e-6), "{}", b.bound_rate);
    let s = b.started_followers_rate.unwrap();
    assert!(close(s, 200.0 / 11.0, 1e-6), "{s}");
    assert!(close(
        b.started_followers_hit_fraction.unwrap(),
        9.0 / 20.0,
        1e-6
    ));
    // Two readers of distinct files share nothing either way.
    let apart = bound(&distinct(2, MB, 10, 1.0), &DISK, &memory(1 << 50), "test").unwrap();
    assert!(close(
        apart.started_followers_rate.unwrap(),
        apart.bound_rate,
        1e-9
    ));
}

#[test]
fn after_a_history_the_first_judged_reader_may_follow_the_historys() {
    // The two sessions of one 10 MB file of the case above, the first as history: only the
    // second is judged (10 MB watched over one gap), and the whole of it may come from the
    // interval the history left, which holds 10 MB × (1/λ s) over 1/λ s = 10 MB.
    let files = [("a.dat", 10 * MB)];
    let s = readers_of_a(&[10, 10]);
    let w = prepare_after(&catalog(&files), &s, &[], 1).unwrap();
    assert_eq!((w.sessions, w.watched_bytes), (1, 10 * MB));
    assert_eq!(w.gap_sum, 1.0);
    let all = evaluate(&w, &NO_SEEK, 10e6, 1.0, 1);
    assert_eq!((all.hit_bytes, all.disk_bytes), (10e6, 0.0));
    assert_eq!(evaluate(&w, &NO_SEEK, 5e6, 1.0, 1).hit_bytes, 5e6);
    // Without the history the same session is a cold reader: all from disk.
    let cold = prepare(&catalog(&files), &s[1..], &[]).unwrap();
    assert_eq!(evaluate(&cold, &NO_SEEK, 10e6, 1.0, 1).disk_bytes, 10e6);
    // A history as long as the list keeps one judged session.
    assert_eq!(
        prepare_after(&catalog(&files), &s, &[], 9)
            .unwrap()
            .sessions,
        1
    );
}

#[test]
fn intervals_run_between_consecutive_readers_of_each_byte_smallest_gap_first() {
    // A reads 3 MB, B the first 1 MB, C 3 MB, one gap apart (3 gaps in all). Reuses: B's
    // 1 MB from A and C's first 1 MB from B (gap 1), C's other 2 MB from A (gap 2): 4 MB
    // saved for 1 + 1 + 2 × 2 = 6 MB·gaps, i.e. 6/3 = 2 MB on average.
    let files = [("a.dat", 3 * MB)];
    let s = readers_of_a(&[3, 1, 3]);
    let w = prepare(&catalog(&files), &s, &[]).unwrap();
    assert_eq!(w.watched_bytes, 7 * MB);
    assert_eq!(evaluate(&w, &NO_SEEK, 2e6, 1.0, 1).hit_bytes, 4e6);
    // 1 MB on average = 3 MB·gaps: both gap-1 reuses, then half a MB at gap 2.
    assert_eq!(evaluate(&w, &NO_SEEK, 1e6, 1.0, 1).hit_bytes, 2.5e6);
    assert_eq!(evaluate(&w, &NO_SEEK, 0.5e6, 2.0, 1).hit_bytes, 1.5e6);
}

#[test]
fn unpaced_requests_last_as_long_as_the_link_takes() {
    let files = [("a.dat", 3 * MB)];
    let s = vec![session(0, 1.0, "slow", "a.dat", 3, MB, 0.0)];
    // 8 Mbit/s = 1 MB/s: three steps of 1 s, starting at 0, 1 and 2 s.
    let w = prepare(&catalog(&files), &s, &[class("slow", 8_000_000)]).unwrap();
    assert_eq!(
        w.steps,
        vec![
            Step {
                bytes: MB,
                tau: 1.0
            };
            3
        ]
    );
    assert!(close(w.stream_seconds, 3.0, 1e-12));
    // No memory: one positioning per request, 3 × 10 ms + 3 MB / R at λ = 1 (1 gap).
    let e = evaluate(&w, &DISK, 0.0, 1.0, 1);
    assert!(
        close(e.utilization, 0.03 + 0.03, 1e-12),
        "{}",
        e.utilization
    );
    // Each 1 MB response is in memory while the link delivers it: 0.5 MB on average for
    // 1 s, three times per 1-s gap: 1.5 MB that neither prefetch nor intervals can use.
    assert!(close(in_transfer_bytes(&w, 1.0), 1.5e6, 1e-9));
    assert!(close(in_transfer_bytes(&w, 2.0), 3.0e6, 1e-9));
    let spent = evaluate(&w, &DISK, 1.5e6, 1.0, 1);
    assert!(
        close(spent.utilization, 0.06, 1e-12),
        "{}",
        spent.utilization
    );
    assert!(evaluate(&w, &DISK, 3.0e6, 1.0, 1).utilization < 0.06);
    // An unlimited link delivers them at once: read in one piece, transfer only.
    let fast = prepare(&catalog(&files), &s, &[class("slow", 0)]).unwrap();
    assert_eq!(fast.stream_seconds, 0.0);
    assert_eq!(in_transfer_bytes(&fast, 1.0), 0.0);
    assert!(close(
        evaluate(&fast, &DISK, 0.0, 1.0, 1).utilization,
        0.03,
        1e-12
    ));
    // A class the workload does not define is an input error naming it.
    let e = prepare(&catalog(&files), &s, &[class("other", 0)]).unwrap_err();
    assert!(e.contains("session id 0") && e.contains("`slow`"), "{e}");
}

#[test]
fn requested_ranges_are_clipped_and_counted_once_per_session() {
    let files = [("a.dat", 1500)];
    let mut s = session(0, 1.0, "c", "a.dat", 2, 1000, 1.0);
    // The second request runs past the end of the file; a third repeats the first.
    s.requests.push(s.requests[0].clone());
    let w = prepare(&catalog(&files), &[s.clone()], &[]).unwrap();
    assert_eq!(w.watched_bytes, 1500);
    assert_eq!(w.steps.len(), 2);
    s.requests[0].path = "/missing.dat".into();
    let e = prepare(&catalog(&files), &[s], &[]).unwrap_err();
    assert!(e.contains("/missing.dat"), "{e}");
}

#[test]
fn disk_terms_follow_the_seek_curve_and_zones_over_the_span() {
    // Seek 2 ms + 12 ms per stroke, 6,000 rpm (5 ms half turn), 100 MiB/s everywhere: over
    // half the surface the mean distance is 0.5/3, so t_pos = 2 + 12 × 0.5/3 + 5 = 9 ms.
    let spec = DriveSpec {
        name: "flat".into(),
        model: "test".into(),
        capacity_bytes: 1 << 40,
        rpm: 6000.0,
        zones: ZoneProfile {
            outer_mb_s: 100.0,
            middle_mb_s: 100.0,
            inner_mb_s: 100.0,
            zones: 8,
        },
        seek: SeekCurve {
            settle_ms: 2.0,
            sqrt_ms: 0.0,
            knee: 0.0,
            linear_ms_per_stroke: 12.0,
        },
        published: Default::default(),
    };
    let t = disk_terms(&spec, 0.5).unwrap();
    assert!(close(t.positioning_s, 0.009, 1e-6), "{}", t.positioning_s);
    assert!(close(t.transfer_bytes_s, 100.0 * MIB, 1e-12));
    assert!(disk_terms(&spec, 0.0).is_err() && disk_terms(&spec, 1.5).is_err());
    // The whole WD Red surface: the model's own random-read positioning, a rate between
    // the inner and outer figures; a smaller span is faster on both counts.
    let wd = preset("wd-red").unwrap();
    let whole = disk_terms(&wd, 1.0).unwrap();
    let rot = half_rotation_ms(wd.rpm);
    assert!(close(
        whole.positioning_s,
        (wd.seek.mean_random_ms() + rot) / 1000.0,
        1e-12
    ));
    assert!(whole.transfer_bytes_s > 67.0 * MIB && whole.transfer_bytes_s < 133.0 * MIB);
    let outer = disk_terms(&wd, 0.25).unwrap();
    assert!(outer.positioning_s < whole.positioning_s);
    assert!(outer.transfer_bytes_s > whole.transfer_bytes_s);
}

/// A mixed workload: 400 sessions over 40 files of 30 MB with a skewed choice, 1 to 16
/// requests of 1 MiB, three unpaced then one every 2.5 s, two link classes.
fn mixed() -> Workload {
    let names: Vec<String> = (0..40).map(|i| format!("m{i}.dat")).collect();
    let files: Vec<(&str, u64)> = names.iter().map(|p| (p.as_str(), 30 * MB)).collect();
    let mut x: u64 = 12345;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let sessions: Vec<Session> = (0..400)
        .map(|i| {
            let u = next();
            let file = ((u * u * u) * 40.0) as usize;
            let n = 1 + (next() * 16.0) as u64;
            let gap = -(1.0 - next()).ln();
            let cls = if next() < 0.5 { "fast" } else { "slow" };
            let mut s = session(i, gap, cls, &names[file], n, 1 << 20, 2.5);
            for r in s.requests.iter_mut().take(3) {
                r.pacing_s = 0.0;
            }
            s
        })
        .collect();
    let classes = [class("fast", 40_000_000), class("slow", 4_000_000)];
    prepare(&catalog(&files), &sessions, &classes).unwrap()
}

#[test]
fn d_more_memory_or_a_faster_drive_never_lowers_the_bound() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    let w = mixed();
    assert!(!w.reuses.is_empty());
    let wd = disk_terms(&preset("wd-red").unwrap(), 0.8).unwrap();
    let mut last = 0.0;
    for m in [
        0u64,
        16 << 20,
        64 << 20,
        256 << 20,
        1 << 30,
        4 << 30,
        1 << 40,
    ] {
        let b = bound(&w, &wd, &memory(m), "wd-red").unwrap();
        assert!(
            b.bound_rate >= last * (1.0 - 1e-9),
            "{m}: {} < {last}",
            b.bound_rate
        );
        assert!((0.0..=1.0).contains(&b.hit_fraction));
        last = b.bound_rate;
    }
    let m = memory(256 << 20);
    let slow = bound(&w, &wd, &m, "wd-red").unwrap().bound_rate;
    for name in ["seagate-7200", "hp-10k"] {
        let t = disk_terms(&preset(name).unwrap(), 0.8).unwrap();
        assert!(t.positioning_s < wd.positioning_s, "{name}");
        let fast = bound(&w, &t, &m, name).unwrap().bound_rate;
        assert!(fast >= slow, "{name}: {fast} < {slow}");
    }
    // Shorter positioning alone, same rate: never lower.
    let quick = DiskTerms {
        positioning_s: wd.positioning_s / 2.0,
        ..wd
    };
    assert!(bound(&w, &quick, &m, "x").unwrap().bound_rate >= slow);
}

#[test]
fn d_sweeps_raise_the_bound_which_stays_a_bound_and_a_rate_above_it_fails() {
    let w = mixed();
    let m = memory(256 << 20);
    let with = disk_terms(&preset("wd-red").unwrap(), 0.8).unwrap();
    let sweep = with.sweep.expect("the drive terms model sweeps");
    let without = DiskTerms {
        sweep: None,
        ..with
    };
    let old = bound(&w, &without, &m, "wd-red").unwrap();
    let new = bound(&w, &with, &m, "wd-red").unwrap();
    assert_eq!(old.sweep_positioning_ms, None);
    // The cheaper positioning never lowers the bound: it stays an upper bound for servers
    // that read at independent places, and becomes one for servers that sweep.
    assert!(new.bound_rate >= old.bound_rate, "{new:?} {old:?}");
    // With this many streams a sweep's seeks are shorter, and the bound counts them: its
    // t_pos is the sweep's for one read of each stream active at the bound.
    let t = new.sweep_positioning_ms.expect("sweeps are cheaper here");
    assert!(t < new.positioning_ms, "{t} {}", new.positioning_ms);
    assert!(close(
        t / 1000.0,
        sweep.positioning_s(new.streams_at_bound),
        1e-9
    ));
    assert!(
        new.bound_rate > old.bound_rate * 1.03,
        "{} {}",
        new.bound_rate,
        old.bound_rate
    );
    // The same positioning at the bound's own rate fills the drive exactly.
    let e = evaluate(
        &w,
        &with,
        m.usable_bytes() as f64,
        new.bound_rate,
        SPLIT_STEPS,
    );
    assert!(close(e.utilization, 1.0, 1e-6), "{e:?}");
    // A measured rate the old bound would have rejected is within the new one; above the
    // new one it is an error.
    let between = old.bound_rate * 1.03;
    assert!(check_fraction(between, old.bound_rate).is_err());
    assert!(check_fraction(between, new.bound_rate).is_ok());
    let e = check_fraction(new.bound_rate * 1.05, new.bound_rate).unwrap_err();
    assert!(e.contains("exceeds the capacity bound"), "{e}");
}

#[test]
fn e_a_measured_rate_above_the_bound_is_an_error_naming_both() {
    assert_eq!(check_fraction(5.0, 10.0), Ok(0.5));
    assert_eq!(check_fraction(10.0, 10.0), Ok(1.0));
    // Within the 2% tolerance: still a fraction.
    assert!(close(check_fraction(10.15, 10.0).unwrap(), 1.015, 1e-12));
    let e = check_fraction(10.3, 10.0).unwrap_err();
    assert!(
        e.contains("10.300") && e.contains("10.000") && e.contains("3.0%"),
        "{e}"
    );
    assert!(!e.contains('\n'));
    assert!(check_fraction(1.0, 0.0).is_err());
    assert!(check_fraction(f64::NAN, 1.0).is_err());
}

#[test]
fn the_reserve_is_the_memory_managers() {
    let m = MemoryTerms::for_budget(256 << 20);
    assert_eq!(m.reserve_bytes, 64 << 20);
    assert_eq!(m.usable_bytes(), 192 << 20);
    assert_eq!(
        MemoryTerms::for_budget(4 << 30).reserve_bytes,
        (4u64 << 30) / 20
    );
}

/// The demo's defaults: youtube-2011 ×0.1 with the demo's overrides, on the emulated WD Red
/// at 256 MiB. Prints the figures (run with `--nocapture` to see them).
#[test]
fn the_demo_bound_lies_between_its_no_memory_and_unlimited_memory_bounds() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    let pairs: Vec<(String, String)> = crate::demo::sets()
        .iter()
        .map(|s| vodkit_workload::spec::split_set(s).unwrap())
        .collect();
    let checked =
        vodkit_workload::spec::load(crate::demo::SPEC, &pairs, crate::demo::SCALE).unwrap();
    let seed = checked.spec.seed;
    let plan = vodkit_workload::generate::Plan::new(checked, seed);
    let sessions: Vec<Session> = plan.sessions().map(|g| g.session).collect();
    let meta = plan.meta();
    let w = prepare(&plan.catalog, &sessions, &meta.client_classes).unwrap();
    let fileset = crate::prepare::fileset_bytes(&plan.catalog);
    let image = crate::system::HddTestbed::image_size_for(fileset);
    let b = for_testbed(
        &w,
        vodkit_disk::model::Preset::WdRed,
        fileset,
        image,
        crate::demo::MEMORY_BYTES,
    )
    .unwrap();
    eprintln!("demo bound: {}", serde_json::to_string_pretty(&b).unwrap());
    // The demo's search steps past the bound, so no server sits at its ceiling: the rate its
    // guess offers (runner::rate_guess: MB/s over the mean requested bytes per session) times
    // (1 + steps) / 2.
    let requested: u64 = sessions
        .iter()
        .flat_map(|s| &s.requests)
        .map(|r| r.range.map_or(512 * 1024, |x| x.len()))
        .sum();
    let guess = crate::demo::GUESS_MB_S / (requested as f64 / sessions.len() as f64 / 1e6);
    let ceiling = guess / 2.0 * f64::from(1 + crate::demo::MAX_STEPS);
    assert!(
        ceiling > b.bound_rate && ceiling < 1.5 * b.bound_rate,
        "demo search ceiling {ceiling} against the bound {}",
        b.bound_rate
    );
    let disk = disk_terms(&preset("wd-red").unwrap(), fileset as f64 / image as f64).unwrap();
    let none = bound(&w, &disk, &memory(0), "wd-red").unwrap();
    let all = bound(&w, &disk, &memory(1 << 50), "wd-red").unwrap();
    assert!(none.bound_rate <= b.bound_rate && b.bound_rate <= all.bound_rate);
    assert!(b.bound_rate > 0.0 && b.sessions == sessions.len());
    assert!(b.span_fraction > 0.5 && b.span_fraction < 1.0);
    // vodkit's memory manager replayed on the same terms is a server like any other: it
    // may not beat the bound, and with reads as large as its budget share it gets a
    // sizeable part of it.
    let r = manager_replay(
        &plan.catalog,
        &sessions,
        &meta.client_classes,
        disk,
        crate::demo::MEMORY_BYTES,
        b.bound_rate / 2.0,
        0,
    )
    .unwrap();
    eprintln!("demo replay: {}", serde_json::to_string_pretty(&r).unwrap());
    assert!(
        r.rate <= b.bound_rate * (1.0 + TOLERANCE),
        "replay {} above the bound {}",
        r.rate,
        b.bound_rate
    );
    assert!(
        r.rate > 0.3 * b.bound_rate,
        "replay {} bound {}",
        r.rate,
        b.bound_rate
    );
    // Its disk reads at least what the bound's perfect memory leaves to read (its hit
    // fraction also counts its own read-ahead, so compare bytes from disk instead).
    let from_disk = r.disk_bytes as f64 / r.requested_bytes as f64;
    assert!(from_disk >= 1.0 - b.hit_fraction - 0.05, "{r:?}");
}

fn a_bound(rate: f64) -> CapacityBound {
    CapacityBound {
        bound_rate: rate,
        drive: "wd-red".into(),
        span_fraction: 0.8,
        positioning_ms: 18.0,
        sweep_positioning_ms: None,
        transfer_mb_s: 120.0,
        memory_bytes: 256 << 20,
        reserve_bytes: 64 << 20,
        interval_memory_bytes: 96 << 20,
        prefetch_memory_bytes: 96 << 20,
        transfer_memory_bytes: 0,
        streams_at_bound: 100.0,
        mean_session_s: 10.0,
        sessions: 1000,
        ref_bitrate_kbps: 419,
        prefetch_bytes_at_ref: Some(1e6),
        hit_fraction: 0.25,
        disk_mb_s: 50.0,
        manager_replay: None,
        positioning_share: 0.5,
        started_followers_rate: None,
        started_followers_hit_fraction: None,
    }
}

#[test]
fn the_report_shows_the_bound_and_warns_above_it() {
    use crate::report::{self, ServerReport, MEASURED};
    let plan = crate::search::SearchPlan::failure_free_around(1.0);
    let mut rep = report::new_report("w", "emulated wd-red", Some(256 << 20), "strict", &plan, 1);
    for (name, rate) in [("nginx", 5.0), ("vodkit:asap:auto", 10.3)] {
        let sut = crate::sut::parse_one(name).unwrap();
        let mut s = ServerReport::not_measured(&sut, MEASURED, String::new());
        s.reason = None;
        s.max_failure_free_rate = Some(rate);
        rep.servers.push(s);
    }
    report::apply_bound(&mut rep, &a_bound(10.0));
    assert_eq!(rep.bound_rate, Some(10.0));
    assert_eq!(rep.servers[0].fraction_of_bound, Some(0.5));
    // 10.3 is 3% above the bound: the check and the table say one of the two is wrong.
    let above = report::above_bound(&rep);
    assert_eq!(above.len(), 1);
    assert_eq!(above[0].0, "vodkit:asap:auto");
    assert!(report::check(&rep)
        .iter()
        .any(|p| p.contains("vodkit:asap:auto") && p.contains("10.300") && p.contains("10.000")));
    let table = report::text::table(&rep);
    assert!(table.contains("% of bound"), "{table}");
    assert!(table.contains("bound 10.00 sessions/s"), "{table}");
    assert!(table.contains("50%") && table.contains("103%"), "{table}");
    assert!(table.contains("WARNING vodkit:asap:auto"), "{table}");
    let md = report::text::markdown(&rep);
    assert!(md.contains("| capacity bound | 10.00 sessions/s"), "{md}");
    let html = report::html::render(&rep);
    assert!(html.contains("capacity bound (no server can exceed it)"));
    // bench.json carries both figures and reads back.
    let json = serde_json::to_value(&rep).unwrap();
    assert_eq!(json["bound_rate"], 10.0);
    assert_eq!(json["bound"]["drive"], "wd-red");
    assert_eq!(json["servers"][0]["fraction_of_bound"], 0.5);
    let back: report::BenchReport = serde_json::from_value(json).unwrap();
    assert_eq!(back.bound, rep.bound);
    // Without a bound nothing is added.
    let plain = report::new_report("w", "plain", None, "strict", &plan, 1);
    let j = serde_json::to_value(&plain).unwrap();
    assert!(j.get("bound_rate").is_none() && j.get("bound").is_none());
    assert!(!report::text::table(&plain).contains("no server can exceed"));
}

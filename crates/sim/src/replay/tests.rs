//! The memory replay on hand-built workloads: hits from prefetch and from kept intervals,
//! a stream alone leaving nothing behind, the budget respected, disk time as charged.

use super::*;
use vodkit_workload::model::Request;

const MIB: u64 = 1 << 20;

/// `files` titles `f{i}.mp4` of `size` bytes.
fn catalog(files: usize, size: u64) -> Catalog {
    Catalog::of_files((0..files).map(|i| (format!("f{i}.mp4"), size)), 10.0, 8000)
}

/// `n` requests of `bytes` of file `f`, one a second.
fn session(id: u64, gap: f64, f: usize, n: u64, bytes: u64) -> Session {
    let requests = Request::consecutive(&format!("/f{f}.mp4"), n, bytes, 1.0);
    Session {
        bitrate_kbps: Some(8000),
        ..Session::new(id, gap, "c", requests)
    }
}

/// `n` sessions, one a second, each reading its own 10 MiB file in 1 MiB requests.
fn own_files(n: u64) -> ReplayWorkload {
    let sessions: Vec<Session> = (0..n)
        .map(|i| session(i, 1.0, i as usize, 10, MIB))
        .collect();
    ReplayWorkload::prepare(&catalog(n as usize, 10 * MIB), &sessions, &[]).unwrap()
}

/// A drive with 10 ms positioning and 100 MB/s.
const DISK: DiskTerms = DiskTerms {
    positioning_s: 0.010,
    transfer_bytes_s: 100e6,
    span_fraction: 1.0,
    sweep: None,
};

fn config(budget: u64, prefetch: Prefetch) -> ReplayConfig {
    ReplayConfig {
        memory: MemoryConfig::for_budget(budget),
        disk: DISK,
        prefetch,
        order: vodkit_prefetch::IoOrder::Fifo,
        queue_wait_s: f64::INFINITY,
    }
}

fn fixed(size: &str) -> Prefetch {
    Prefetch::Policy(format!("fixed:{size}").parse().expect("policy"))
}

#[test]
fn residency_counts_merges_and_splits_ranges() {
    let mut r = Residency::default();
    r.add(1, 0, 100);
    r.add(1, 50, 150);
    r.add(1, 200, 300);
    assert_eq!(r.bytes, 250);
    assert_eq!(r.covered(1, 0, 300), 250);
    assert_eq!(r.covered(1, 120, 220), 50);
    r.remove(1, 20, 250);
    assert_eq!(r.bytes, 70);
    assert_eq!(r.covered(1, 0, 300), 70);
    assert_eq!(r.covered(2, 0, 300), 0);
    assert_eq!(r.peak, 250);
}

#[test]
fn sessions_apart_hit_only_what_their_prefetch_brought_in() {
    // Each session reads its own file: no byte is ever asked for twice, so nothing is a
    // hit except what a prefetch brought in ahead of its request.
    let w = own_files(200);
    // 4 MiB prefetches: one read per four requests.
    let r = replay(&w, &config(1 << 30, fixed("4MiB")), 1.0);
    assert!(r.window_s > 100.0, "{r:?}");
    assert!((r.hit_fraction - 0.7).abs() < 0.05, "{r:?}");
    assert!(
        (r.mean_read_bytes - 10.0 / 3.0 * MIB as f64).abs() < 0.3 * MIB as f64,
        "{r:?}"
    );
    let per_read = DISK.positioning_s + r.mean_read_bytes / DISK.transfer_bytes_s;
    let expect = r.disk_reads as f64 * per_read / r.window_s;
    assert!(
        (r.utilization - expect).abs() < 1e-6 * expect.max(1.0),
        "{r:?}"
    );
    // Sent bytes wait in the consumed-cache only while the budget has room.
    assert!(r.peak_resident_bytes <= r.usable_bytes, "{r:?}");
    let small = replay(&w, &config(128 * MIB, fixed("4MiB")), 1.0);
    assert!(small.peak_resident_bytes <= small.usable_bytes, "{small:?}");
    assert!((small.hit_fraction - 0.7).abs() < 0.05, "{small:?}");
    // Request-sized reads: every request misses.
    let r1 = replay(&w, &config(1 << 30, fixed("1MiB")), 1.0);
    assert!(r1.hit_fraction < 0.01, "{r1:?}");
    assert!(r1.utilization > r.utilization, "{r1:?} vs {r:?}");
}

#[test]
fn a_follower_reads_from_memory_while_its_interval_fits_the_budget() {
    // Pairs of sessions on one file, 4 MiB a second: the second starts 2 s after the
    // first (an 8 MiB interval), a pair every 2 s, so about five pairs overlap.
    let mut pairs = Vec::new();
    for i in 0..200u64 {
        pairs.push(session(2 * i, 0.0, i as usize, 10, 4 * MIB));
        pairs.push(session(2 * i + 1, 2.0, i as usize, 10, 4 * MIB));
    }
    let cat = catalog(200, 40 * MIB);
    let w = ReplayWorkload::prepare(&cat, &pairs, &[]).unwrap();
    let near = replay(&w, &config(1 << 30, fixed("4MiB")), 1.0);
    // With room for every interval, the follower's half of the bytes are hits.
    assert!(near.hit_fraction > 0.45, "{near:?}");
    assert!(near.interval_hit_bytes > 0, "{near:?}");
    // A budget whose interval share holds about two of the five intervals: fewer hits.
    let tight = replay(&w, &config(96 * MIB, fixed("4MiB")), 1.0);
    assert!(
        tight.hit_fraction < near.hit_fraction - 0.1,
        "{tight:?} vs {near:?}"
    );
    assert!(
        tight.peak_resident_bytes <= tight.usable_bytes + 4 * MIB,
        "{tight:?}"
    );
}

#[test]
fn resident_bytes_stay_within_the_budget() {
    // Many concurrent streams, 128 MiB budget, prefetches as large as the budget allows.
    let sessions: Vec<Session> = (0..2000)
        .map(|i| session(i, 0.05, (i % 300) as usize, 20, 512 << 10))
        .collect();
    let w = ReplayWorkload::prepare(&catalog(300, 10 * MIB), &sessions, &[]).unwrap();
    let cfg = config(128 * MIB, Prefetch::Budget);
    let r = replay(&w, &cfg, 20.0);
    assert!(r.disk_reads > 100, "{r:?}");
    assert!(r.peak_resident_bytes > 0, "{r:?}");
    // The manager's promise: resident ≤ usable, plus one read in flight it sizes against.
    assert!(
        r.peak_resident_bytes <= r.usable_bytes + 16 * MIB,
        "peak {} usable {}",
        r.peak_resident_bytes,
        r.usable_bytes
    );
    // Reads asking for the whole share are all cut by the budget; a fixed 1 MiB prefetch
    // in a budget far larger than the streams need is never cut.
    assert_eq!(r.capped_read_fraction, 1.0, "{r:?}");
    assert!((0.0..=1.0).contains(&r.survival_cut_fraction), "{r:?}");
    let roomy = replay(&w, &config(8 << 30, fixed("1MiB")), 20.0);
    assert!(roomy.disk_reads > 100, "{roomy:?}");
    assert_eq!(roomy.capped_read_fraction, 0.0, "{roomy:?}");
}

#[test]
fn capacity_brackets_a_saturated_drive() {
    let w = own_files(400);
    let cfg = config(1 << 30, fixed("1MiB"));
    let c = capacity(&w, &cfg, 1.0).expect("a rate saturates the drive");
    assert!(c.utilization <= 1.0, "{c:?}");
    // Each stream reads 1 MiB a second at 20.5 ms a read: about 48 streams, i.e. a rate
    // of about 4.8 sessions/s for 10 s sessions.
    assert!((c.rate - 4.8).abs() < 0.5, "{c:?}");
    let above = replay(&w, &cfg, c.rate * 1.05);
    assert!(above.utilization > 1.0, "{above:?}");
}

#[test]
fn bad_sessions_are_named() {
    let mut s = session(7, 1.0, 3, 2, MIB);
    s.requests[0].path = "/nope.mp4".into();
    let e = ReplayWorkload::prepare(&catalog(1, MIB), &[s], &[]).unwrap_err();
    assert!(e.contains("session id 7") && e.contains("/nope.mp4"), "{e}");
    let mut s = session(8, 1.0, 0, 2, MIB);
    s.start_s = Some(3.0);
    let e = ReplayWorkload::prepare(&catalog(1, MIB), &[s], &[]).unwrap_err();
    assert!(e.contains("session id 8") && e.contains("start_s"), "{e}");
}

#[test]
fn a_history_moves_the_measured_window_past_the_bytes_it_requested() {
    // 400 sessions of 10 MiB (10 requests, 10 s), one a second: 10 MiB/s of requests.
    let w = own_files(400);
    let cfg = config(256 * MIB, fixed("1MiB"));
    // Without a history: one longest session (about 10 s) after the start.
    let cold = replay(&w, &cfg, 1.0);
    assert!((cold.window_s - 390.0).abs() < 1.5, "{cold:?}");
    // After 1000 MiB of history: 100 s at 10 MiB/s.
    let warm = replay(&w.clone().after_history(1000 * MIB), &cfg, 1.0);
    assert!((warm.window_s - 300.0).abs() < 1.0, "{warm:?}");
    // A history longer than half the arrivals is cut there.
    let long = replay(&w.after_history(1 << 40), &cfg, 1.0);
    assert!((long.window_s - 200.0).abs() < 1e-9, "{long:?}");
}

#[test]
fn in_sweeps_a_read_costs_the_sweep_positioning_of_the_sessions_in_progress() {
    // Ten-second sessions, one a second: about ten in progress at once.
    let w = own_files(300);
    let disk = vodkit_disk::model::disk_terms(&vodkit_disk::model::Preset::WdRed.spec(), 0.5)
        .expect("terms");
    let mut cfg = config(1 << 30, fixed("1MiB"));
    cfg.disk = disk;
    let fifo = replay(&w, &cfg, 1.0);
    assert!(
        (fifo.mean_positioning_ms - 1e3 * disk.positioning_s).abs() < 1e-9,
        "{fifo:?}"
    );
    cfg.order = vodkit_prefetch::IoOrder::Sweep;
    let sweep = replay(&w, &cfg, 1.0);
    let ms = |n: f64| 1e3 * disk.positioning_for(n);
    assert!(
        sweep.mean_positioning_ms > ms(13.0) && sweep.mean_positioning_ms < ms(8.0),
        "sweep {} ms, expected about {} ms (10 sessions)",
        sweep.mean_positioning_ms,
        ms(10.0)
    );
    // The same reads and hits, a less busy drive.
    assert_eq!(sweep.disk_reads, fifo.disk_reads);
    assert_eq!(sweep.hit_bytes, fifo.hit_bytes);
    assert!(
        sweep.utilization < fifo.utilization,
        "{sweep:?} vs {fifo:?}"
    );
}

#[test]
fn a_queue_as_busy_as_the_drive_at_capacity_bounds_what_a_sweep_orders() {
    // M/D/1: ρ + ρ²/(2(1 − ρ)) reads pending, by hand.
    assert!((queued_reads(0.5) - 0.75).abs() < 1e-12);
    assert!((queued_reads(0.9) - 4.95).abs() < 1e-9);
    assert!(queued_reads(1.0).is_infinite());
    // A mean wait of W with reads of S seconds: ρ = 2W/(S + 2W) (W = ρS/(2(1 − ρ))).
    let mut cfg = config(1 << 30, fixed("1MiB"));
    cfg.queue_wait_s = 0.45;
    assert!((cfg.busy_limit(0.1) - 0.9).abs() < 1e-12);
    assert!(
        (cfg.busy_limit(0.01) - 0.9 / 0.91).abs() < 1e-12,
        "short reads queue deeper"
    );
    cfg.queue_wait_s = f64::INFINITY;
    assert_eq!(cfg.busy_limit(0.1), 1.0);
    // 300 sessions of one 1 MiB title each at 10 sessions/s: about 100 in progress, so
    // the queue, not the sessions, sets the sweep's positioning.
    let w = own_files(300);
    let disk = vodkit_disk::model::disk_terms(&vodkit_disk::model::Preset::WdRed.spec(), 0.5)
        .expect("terms");
    cfg.disk = disk;
    cfg.order = vodkit_prefetch::IoOrder::Sweep;
    let all = replay(&w, &cfg, 10.0);
    assert_eq!(all.busy_limit, 1.0);
    cfg.queue_wait_s = 0.2;
    let queued = replay(&w, &cfg, 10.0);
    let service_s = queued.utilization * queued.window_s / queued.disk_reads as f64;
    let limit = cfg.busy_limit(service_s);
    assert!((queued.busy_limit - limit).abs() < 1e-12, "{queued:?}");
    let expected_ms = 1e3 * disk.positioning_for(queued_reads(limit));
    assert!(
        (queued.mean_positioning_ms - expected_ms).abs() < 0.02 * expected_ms,
        "{} ms, expected about {expected_ms} ms",
        queued.mean_positioning_ms
    );
    assert!(
        queued.mean_positioning_ms > all.mean_positioning_ms,
        "{queued:?} vs {all:?}"
    );
    // The capacity keeps the drive within its limit, and the queue costs capacity.
    let cap = capacity(&w, &cfg, 5.0).expect("capacity");
    assert!(
        cap.utilization <= cap.busy_limit && cap.utilization > 0.95 * cap.busy_limit,
        "{cap:?}"
    );
    cfg.queue_wait_s = f64::INFINITY;
    let full = capacity(&w, &cfg, 5.0).expect("capacity");
    assert!(full.rate > cap.rate, "{full:?} vs {cap:?}");
}

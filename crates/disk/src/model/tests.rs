//! Preset figures and properties of the timing model.

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn within(measured: f64, published: f64, tolerance: f64) -> bool {
    (measured - published).abs() / published <= tolerance
}

/// Throughput (MB/s) of `count` back-to-back reads of `len` bytes from `offset` onward.
fn sequential_run(drive: &mut Drive, offset: u64, len: u64, count: u64) -> f64 {
    let first = drive.access(offset, len, 0.0);
    let mut last = first;
    for i in 1..count {
        last = drive.access(offset + i * len, len, last.finish);
    }
    (count * len) as f64 / MIB / (last.finish - first.start - first.seek - first.rotation)
}

#[test]
fn sequential_outer_and_inner_match_published_figures() {
    for name in PRESET_NAMES {
        let spec = preset(name).unwrap();
        let cap = spec.capacity_bytes;
        let mut drive = Drive::new(spec.clone(), DriveOptions::default());
        let len = 2 << 20;
        let outer = sequential_run(&mut drive, 0, len, 32);
        let inner = sequential_run(&mut drive, cap - 32 * len, len, 32);
        let p = spec.published;
        let want_outer = p.outer_mb_s.unwrap();
        assert!(
            within(outer, want_outer, 0.05),
            "{name}: outer {outer:.1} vs {want_outer}"
        );
        if let Some(want_inner) = p.inner_mb_s {
            assert!(
                within(inner, want_inner, 0.05),
                "{name}: inner {inner:.1} vs {want_inner}"
            );
        }
        assert!(
            inner < outer,
            "{name}: inner {inner} not slower than outer {outer}"
        );
    }
}

#[test]
fn positioning_times_match_stroke_figures() {
    for name in ["wd-red", "hp-10k"] {
        let spec = preset(name).unwrap();
        let drive = Drive::new(spec.clone(), DriveOptions::default());
        let cap = spec.capacity_bytes;
        let p = spec.published;
        for (fraction, want) in [
            (1.0, p.full_stroke_ms),
            (0.5, p.half_stroke_ms),
            (0.25, p.quarter_stroke_ms),
        ] {
            let got =
                (drive.seek_time((cap as f64 * fraction) as u64) + drive.half_rotation()) * 1000.0;
            let want = want.unwrap();
            assert!(
                within(got, want, 0.01),
                "{name} {fraction}: {got:.2} ms vs {want}"
            );
        }
    }
}

#[test]
fn hitachi_random_2mb_and_s_max() {
    let spec = preset("hitachi-5k3000").unwrap();
    let random = expected_random_mb_s(&spec, 2.0 * MIB);
    assert!(within(random, 48.4, 0.10), "random 2 MB {random:.1} MB/s");
    let c = capacity(&spec);
    assert!(within(c.t_max_mb_s, 125.5, 0.05), "t_max {}", c.t_max_mb_s);
    assert!(
        (c.s_max_per_s - 39.4).abs() < 0.8,
        "s_max {:.2}",
        c.s_max_per_s
    );
}

#[test]
fn simulated_random_reads_agree_with_the_expectation() {
    // The closed-form expectation and a seeded simulation of the same benchmark agree.
    for name in PRESET_NAMES {
        let spec = preset(name).unwrap();
        let mut drive = Drive::new(
            spec.clone(),
            DriveOptions {
                rotation: Rotation::Random { seed: 7 },
                ..Default::default()
            },
        );
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let len = 2u64 << 20;
        let slots = spec.capacity_bytes / len;
        let mut t = 0.0;
        let n = 4000;
        for _ in 0..n {
            t = drive
                .access(rng.random_range(0..slots) * len, len, t)
                .finish;
        }
        let simulated = (n * len) as f64 / MIB / t;
        let expected = expected_random_mb_s(&spec, len as f64);
        assert!(
            within(simulated, expected, 0.03),
            "{name}: {simulated:.1} vs {expected:.1}"
        );
    }
}

#[test]
fn presets_are_found_by_name_and_unknown_names_are_not() {
    for name in PRESET_NAMES {
        assert_eq!(preset(name).unwrap().name, name);
    }
    assert!(preset("floppy").is_none());
}

#[test]
fn zones_are_monotone_non_increasing() {
    for name in PRESET_NAMES {
        let z = preset(name).unwrap().zones;
        for i in 1..z.zones {
            assert!(
                z.zone_mb_s(i) <= z.zone_mb_s(i - 1),
                "{name}: zone {i} faster than zone {}",
                i - 1
            );
        }
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..2000 {
            let (a, b): (f64, f64) = (rng.random(), rng.random());
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            assert!(
                z.rate_at(lo) >= z.rate_at(hi),
                "{name}: rate rises from {lo} to {hi}"
            );
        }
    }
}

#[test]
fn seek_time_never_decreases_with_distance() {
    for name in PRESET_NAMES {
        let spec = preset(name).unwrap();
        let drive = Drive::new(spec.clone(), DriveOptions::default());
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for _ in 0..5000 {
            let a = rng.random_range(0..spec.capacity_bytes);
            let b = rng.random_range(0..spec.capacity_bytes);
            let (near, far) = (a.min(b), a.max(b));
            assert!(
                drive.seek_time(near) <= drive.seek_time(far),
                "{name}: {near} vs {far}"
            );
        }
        let mut previous = 0.0;
        for step in 0..=1000u64 {
            let s = drive.seek_time(spec.capacity_bytes / 1000 * step);
            assert!(s >= previous, "{name}: seek drops at step {step}");
            previous = s;
        }
    }
}

#[test]
fn sequential_reads_never_seek() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for name in PRESET_NAMES {
        for opts in [
            DriveOptions::default(),
            DriveOptions {
                rotation: Rotation::Random { seed: 1 },
                readahead_bytes: 1 << 20,
                ..Default::default()
            },
        ] {
            let spec = preset(name).unwrap();
            let mut drive = Drive::new(spec.clone(), opts);
            let mut offset = rng.random_range(0..spec.capacity_bytes / 2);
            let mut t = drive.access(offset, 4096, 0.0).finish;
            offset += 4096;
            for _ in 0..300 {
                let len = rng.random_range(1..4096u64) * 512;
                let idle = if rng.random::<bool>() {
                    rng.random::<f64>() * 0.05
                } else {
                    0.0
                };
                let s = drive.access(offset, len, t + idle);
                assert_eq!(
                    (s.seek, s.rotation),
                    (0.0, 0.0),
                    "{name}: sequential read at {offset} positioned"
                );
                offset += len;
                t = s.finish;
            }
        }
    }
}

#[test]
fn fifo_actuator_serves_one_request_at_a_time() {
    let mut drive = Drive::new(preset("wd-red").unwrap(), DriveOptions::default());
    let reqs: Vec<Request> = (0..20)
        .map(|i| Request {
            offset: (i * 7919 % 20) << 30,
            len: 1 << 20,
            arrival: 0.0,
        })
        .collect();
    let served = drive.serve(&reqs);
    assert_eq!(served.len(), 20);
    for pair in served.windows(2) {
        assert!(pair[1].start >= pair[0].finish - 1e-12);
    }
    let order: Vec<u64> = served.iter().map(|s| s.offset).collect();
    assert_eq!(order, reqs.iter().map(|r| r.offset).collect::<Vec<_>>());
}

#[test]
fn sptf_positions_less_than_fifo_on_a_deep_queue() {
    let spec = preset("wd-red").unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let reqs: Vec<Request> = (0..400)
        .map(|_| Request {
            offset: rng.random_range(0..spec.capacity_bytes / 4096) * 4096,
            len: 65536,
            arrival: 0.0,
        })
        .collect();
    let total = |q: Queueing| {
        let mut d = Drive::new(
            spec.clone(),
            DriveOptions {
                queueing: q,
                ..Default::default()
            },
        );
        d.serve(&reqs).iter().map(|s| s.seek).sum::<f64>()
    };
    let fifo = total(Queueing::Fifo);
    let sptf = total(Queueing::Sptf { depth: 32 });
    assert!(
        sptf < 0.8 * fifo,
        "sptf seeks {sptf:.2}s vs fifo {fifo:.2}s"
    );
}

#[test]
fn readahead_segment_serves_a_nearby_forward_read_after_idle() {
    let spec = preset("wd-red").unwrap();
    let opts = DriveOptions {
        readahead_bytes: 2 << 20,
        ..Default::default()
    };
    let mut drive = Drive::new(spec.clone(), opts);
    let first = drive.access(1 << 30, 65536, 0.0);
    // After 50 ms idle the segment holds the next ~2 MiB; a read 64 KiB further is a hit.
    let s = drive.access((1 << 30) + 131072, 65536, first.finish + 0.05);
    assert_eq!(s.seek, 0.0);
    assert_eq!(s.cached_bytes, 65536);
    let mut cold = Drive::new(spec, DriveOptions::default());
    cold.access(1 << 30, 65536, 0.0);
    let s = cold.access((1 << 30) + 131072, 65536, first.finish + 0.05);
    assert!(s.seek > 0.0);
}

#[test]
fn same_seed_same_timings() {
    let spec = preset("hp-10k").unwrap();
    let run = || {
        let mut d = Drive::new(
            spec.clone(),
            DriveOptions {
                rotation: Rotation::Random { seed: 42 },
                ..Default::default()
            },
        );
        (0..50u64)
            .map(|i| d.access((i * 104_729 % 1000) << 27, 1 << 17, 0.0).finish)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn a_small_span_stands_for_the_whole_surface() {
    let spec = preset("wd-red").unwrap();
    let image = 4u64 << 30;
    let drive = Drive::new(spec.clone(), DriveOptions::default()).with_span(image);
    assert!(within(drive.rate_at(image - 1) / MIB, 67.0, 0.05));
    let full = drive.seek_time(image) + drive.half_rotation();
    assert!(within(full * 1000.0, 32.6, 0.01));
}

/// Busy time of 200 16 KiB reads alternating between two far-apart streams (one `diff -r`
/// over two trees), `gap_s` of idle time after each.
fn alternating_streams_busy(segments: usize, gap_s: f64) -> f64 {
    let spec = preset("wd-red").unwrap();
    let opts = DriveOptions {
        readahead_bytes: 512 << 10,
        segments,
        ..Default::default()
    };
    let mut drive = Drive::new(spec, opts);
    let streams = [1u64 << 30, 600u64 << 30];
    let (mut t, mut busy) = (0.0, 0.0);
    for i in 0..200u64 {
        let s = drive.access(streams[(i % 2) as usize] + (i / 2) * 16384, 16384, t);
        busy += s.finish - s.start;
        t = s.finish + gap_s;
    }
    busy
}

#[test]
fn kept_segments_serve_alternating_streams_read_ahead_while_idle() {
    let one = alternating_streams_busy(1, 0.002);
    let two = alternating_streams_busy(2, 0.002);
    // One segment: every switch of stream seeks. Two: each stream's read-ahead survives.
    assert!(two < one / 4.0, "two segments {two:.3} s vs one {one:.3} s");
}

#[test]
fn kept_segments_do_not_help_a_drive_that_is_never_idle() {
    // Back to back there is no idle read-ahead, so a kept segment holds only what was read.
    let one = alternating_streams_busy(1, 0.0);
    let four = alternating_streams_busy(4, 0.0);
    assert!((one - four).abs() < 1e-9, "{one} vs {four}");
}

#[test]
fn a_read_inside_a_kept_segment_does_not_move_the_head() {
    let spec = preset("wd-red").unwrap();
    let opts = DriveOptions {
        readahead_bytes: 1 << 20,
        segments: 2,
        ..Default::default()
    };
    let mut drive = Drive::new(spec, opts);
    let a = drive.access(1 << 30, 65536, 0.0);
    let b = drive.access(100 << 30, 65536, a.finish + 0.05);
    let head = drive.head();
    let hit = drive.access((1 << 30) + 65536, 65536, b.finish + 0.001);
    assert_eq!(
        (hit.seek, hit.transfer, hit.cached_bytes),
        (0.0, 0.0, 65536)
    );
    assert_eq!(drive.head(), head);
    // the current stream continues from its own read-ahead
    let next = drive.access(head, 65536, hit.finish + 0.001);
    assert_eq!(next.seek, 0.0);
}

#[test]
fn preset_names_parse_print_and_serialize_as_the_same_word() {
    for (p, name) in Preset::ALL.into_iter().zip(PRESET_NAMES) {
        assert_eq!(p.name(), name);
        assert_eq!(name.parse::<Preset>(), Ok(p));
        assert_eq!(p.spec().name, name);
        assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{name}\""));
    }
    let e = "floppy".parse::<Preset>().unwrap_err();
    assert!(e.contains("floppy") && e.contains("wd-red"), "{e}");
}

//! Policy tests, driven by a simulated clock.

use super::auto::window_score;
use super::*;

const MIB: u64 = 1 << 20;

fn ctx(kbps: u32, chain_bytes: u64, kind: ChainKind, now_s: f64) -> ReadContext {
    ReadContext {
        file: 1,
        offset: 5 * MIB,
        len: 512 * 1024,
        file_size: 1 << 40,
        bitrate_kbps: Some(kbps),
        chain_bytes,
        chain_kind: kind,
        now_s,
    }
}

fn spec(s: &str) -> PolicySpec {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn sqrt_rule_gives_root_five_between_hd_and_sd() {
    let mut p = spec("sqrt:6MiB@2095").build();
    let hd = p.prefetch_bytes(&ctx(2095, 0, ChainKind::Other, 0.0));
    let sd = p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, 0.0));
    assert_eq!(hd, 6 * MIB);
    let ratio = hd as f64 / sd as f64;
    assert!((ratio - 5f64.sqrt()).abs() < 1e-3, "ratio {ratio}");
    assert!((ratio - 2.24).abs() < 0.005);
    // Thesis 4.5.4: 6 MB for HD gives about 2.7 MB for SD (factor 0.45).
    assert!((sd as f64 / MIB as f64 - 2.68).abs() < 0.01, "sd {sd}");
    let state = p.current();
    assert_eq!(state.classes.len(), 2);
    assert_eq!(state.classes[0].bitrate_kbps, 419);
    assert_eq!(state.classes[0].bytes, sd);
}

#[test]
fn proportional_scales_linearly() {
    let mut p = spec("proportional:10MiB@2000").build();
    let mut at = |kbps| p.prefetch_bytes(&ctx(kbps, 0, ChainKind::Other, 0.0));
    assert_eq!(at(2000), 10 * MIB);
    assert_eq!(at(1000), 5 * MIB);
    assert_eq!(at(500), 5 * MIB / 2);
}

#[test]
fn fixed_and_none_ignore_bit_rate() {
    let mut f = PolicySpec::default().build();
    let sd = ctx(419, 0, ChainKind::Other, 0.0);
    let hd_later = ctx(5000, 9, ChainKind::OpenAtZero, 3.0);
    assert_eq!(f.prefetch_bytes(&sd), 2 * MIB);
    assert_eq!(f.prefetch_bytes(&hd_later), 2 * MIB);
    let mut n = spec("none").build();
    assert_eq!(n.prefetch_bytes(&ctx(419, 0, ChainKind::Other, 0.0)), 0);
}

#[test]
fn unknown_bit_rate_uses_default() {
    let mut p = spec("sqrt:4MiB@419").build();
    let mut c = ctx(419, 0, ChainKind::Other, 0.0);
    c.bitrate_kbps = None;
    assert_eq!(p.prefetch_bytes(&c), 4 * MIB);
}

#[test]
fn read_len_clips_to_request_and_end_of_file() {
    let c = ReadContext::new(1, 900, 50, 1000);
    assert_eq!(c.read_len(0), 50);
    assert_eq!(c.read_len(10), 50);
    assert_eq!(c.read_len(70), 70);
    assert_eq!(c.read_len(5000), 100);
}

#[test]
fn first_grow_first_sizes_per_chain_category() {
    let mut p = spec("first-grow").build();
    assert_eq!(
        p.prefetch_bytes(&ctx(419, 0, ChainKind::OpenAtZero, 0.0)),
        1_049_212
    );
    assert_eq!(
        p.prefetch_bytes(&ctx(419, 0, ChainKind::ChunkAtZero, 0.0)),
        131_073
    );
    assert_eq!(
        p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, 0.0)),
        2_936_037
    );
}

#[test]
fn first_grow_grows_by_3_35_up_to_the_cap() {
    let mut p = spec("first-grow:max=16MiB").build();
    let mut chain = 0u64;
    let mut sizes = vec![];
    for _ in 0..6 {
        let s = p.prefetch_bytes(&ctx(419, chain, ChainKind::Other, 0.0));
        sizes.push(s);
        chain += s;
    }
    assert_eq!(sizes[0], 2_936_037);
    assert_eq!(sizes[1], (2_936_037f64 * 3.35).round() as u64);
    assert_eq!(sizes[2], 16 * MIB, "3.35 × 12.77 MB exceeds the cap");
    assert!(sizes[3..].iter().all(|&s| s == 16 * MIB));
    let g =
        spec("first-grow:growth=2")
            .build()
            .prefetch_bytes(&ctx(419, MIB, ChainKind::Other, 0.0));
    assert_eq!(g, 2 * MIB);
}

#[test]
fn first_grow_sr_caps_by_square_root_of_bit_rate() {
    let mut p = spec("first-grow-sr:16MiB@2000").build();
    let long_chain = 100 * MIB;
    let at_ref = p.prefetch_bytes(&ctx(2000, long_chain, ChainKind::Other, 0.0));
    let at_500 = p.prefetch_bytes(&ctx(500, long_chain, ChainKind::Other, 0.0));
    assert_eq!(at_ref, 16 * MIB);
    assert_eq!(at_500, 8 * MIB, "√(500/2000) = 1/2");
    // First sizes are not scaled, only the cap.
    assert_eq!(
        p.prefetch_bytes(&ctx(500, 0, ChainKind::ChunkAtZero, 0.0)),
        131_073
    );
    // A small cap also limits the first prefetch.
    let mut small = spec("first-grow-sr:max=1MiB,ref=2000").build();
    assert_eq!(
        small.prefetch_bytes(&ctx(2000, 0, ChainKind::Other, 0.0)),
        MIB
    );
}

#[test]
fn bad_spec_strings_give_one_line_errors() {
    for (bad, needle) in [
        ("", "empty"),
        ("lru", "unknown policy `lru`"),
        ("fixed", "fixed:SIZE"),
        ("fixed:abc", "expected a size like 512KiB"),
        ("sqrt:2MiB", "SIZE@KBPS"),
        ("sqrt:2MiB@fast", "expected a bit rate"),
        ("proportional:2MiB@0", "expected a bit rate"),
        ("none:3", "no argument"),
        ("first-grow:max=1MiB@400", "plain SIZE"),
        ("first-grow:speed=3", "unknown key `speed`"),
        ("first-grow:growth=-1", "growth factor"),
        ("first-grow:max=1MiB,growth", "key=value"),
        ("auto:busy=2", "between 0 and 1"),
        ("auto:interval=soon", "expected a time"),
        ("auto:interval=0", "positive"),
        ("auto:step=0", "step"),
        ("auto:min=8MiB,max=4MiB", "larger than max"),
        ("auto:scale=cube", "expected sqrt"),
        ("auto:start=huge", "preset"),
        ("auto:colour=red", "unknown key"),
    ] {
        let err = bad.parse::<PolicySpec>().expect_err(bad).to_string();
        assert!(
            err.contains(needle),
            "`{bad}` gave `{err}`, wanted `{needle}`"
        );
        assert!(!err.contains('\n'), "{err}");
        assert!(err.starts_with("prefetch policy `"), "{err}");
    }
}

#[test]
fn specs_round_trip_through_display() {
    for s in [
        "none",
        PolicySpec::DEFAULT_TEXT,
        "proportional:7MiB@2000",
        "sqrt:3MiB@419",
        "first-grow",
        "first-grow:8MiB",
        "first-grow-sr",
        "first-grow-sr:max=12MiB@1000,growth=3",
        "auto",
        "auto:start=wd_red_hd,interval=3m,step=256KiB,deflation=10%,busy=0.5,evict=2%,ramp=30s,scale=proportional",
    ] {
        let a = spec(s);
        let b = spec(&a.to_string());
        assert_eq!(a, b, "{s} -> {a}");
    }
}

#[test]
fn auto_defaults_follow_table_4_2() {
    let PolicySpec::Auto(p) = spec("auto") else {
        panic!()
    };
    assert_eq!(p.adjust_interval_s, 180.0);
    assert_eq!(p.step_bytes, 524_288);
    assert_eq!(p.score_deflation, 0.05);
    assert_eq!(p.busy_threshold, 0.60);
    assert_eq!(p.evict_threshold, 0.05);
    assert_eq!(p.start_bytes, 3_145_728);
    let PolicySpec::Auto(hd) = spec("auto:start=wd-red-hd") else {
        panic!()
    };
    assert_eq!((hd.start_bytes, hd.ref_kbps), (4_194_304, 2095));
}

/// The seed figures file, when present, agrees with the built-in defaults.
#[test]
fn defaults_match_seed_figures_when_available() {
    let path = "/work/shared/data/seed-figures.toml";
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("skipping: {path} not found (only present in the project workspace)");
        return;
    };
    let doc: toml::Value = text.parse().expect("seed figures parse");
    let ap = &doc["auto_prefetch"];
    assert_eq!(ap["adjust_interval_s"].as_integer(), Some(180));
    assert_eq!(
        ap["step_bytes"].as_integer(),
        Some(auto::defaults::STEP_BYTES as i64)
    );
    assert_eq!(
        ap["score_deflation"].as_float(),
        Some(auto::defaults::SCORE_DEFLATION)
    );
    assert_eq!(
        ap["busy_threshold"].as_float(),
        Some(auto::defaults::BUSY_THRESHOLD)
    );
    assert_eq!(
        ap["evict_threshold"].as_float(),
        Some(auto::defaults::EVICT_THRESHOLD)
    );
    for (name, bytes, _) in auto::defaults::START_PRESETS {
        assert_eq!(
            ap["start_bytes"][name].as_integer(),
            Some(bytes as i64),
            "{name}"
        );
    }
    let fg = &doc["first_grow"];
    let d = FirstGrowParams::default();
    assert_eq!(
        fg["first_open_at_zero"].as_integer(),
        Some(d.first_open_at_zero as i64)
    );
    assert_eq!(
        fg["first_chunk_at_zero"].as_integer(),
        Some(d.first_chunk_at_zero as i64)
    );
    assert_eq!(fg["first_other"].as_integer(), Some(d.first_other as i64));
    assert_eq!(fg["growth"].as_float(), Some(d.growth));
}

#[test]
fn window_score_is_ms_per_128k_times_miss_ratio() {
    let o = Observation {
        requested_bytes: 2 * 131_072,
        disk_bytes: 4 * 131_072,
        disk_time_s: 0.040,
        ..Default::default()
    };
    // 10 ms per transaction × miss ratio 2.
    assert!((window_score(&o) - 20.0).abs() < 1e-9);
}

/// Drives an `auto` policy second by second against a synthetic system whose score
/// depends only on the reference size; returns the size after each second.
fn run_auto(
    policy: &mut AutoPolicy,
    seconds: u32,
    busy: f64,
    score_of: impl Fn(u64, f64) -> f64,
) -> Vec<u64> {
    let mut trace = Vec::with_capacity(seconds as usize);
    for t in 1..=seconds {
        let now = t as f64;
        let size = policy.reference_bytes();
        policy.prefetch_bytes(&ctx(419, 0, ChainKind::Other, now));
        // 10 MiB requested and read per second; disk time set so the window score equals
        // score_of(size): score = ms per 128 KiB × 1.
        let bytes = 10 * MIB;
        let transactions = bytes as f64 / 131_072.0;
        policy.observe(&Observation {
            now_s: now,
            requested_bytes: bytes,
            disk_bytes: bytes,
            disk_time_s: score_of(size, now) * transactions / 1000.0,
            busy_s: busy,
            ..Default::default()
        });
        trace.push(policy.reference_bytes());
    }
    trace
}

fn auto_policy(s: &str) -> AutoPolicy {
    let PolicySpec::Auto(p) = spec(s) else {
        panic!("{s}")
    };
    AutoPolicy::new(p, s.into())
}

#[test]
fn auto_converges_on_a_convex_score_curve_and_moves_gradually() {
    let best = 7 * MIB;
    let curve = |size: u64, _: f64| {
        let d = (size as f64 - best as f64) / MIB as f64;
        5.0 + d * d
    };
    let step = 524_288u64;
    let ramp = 60.0;
    for start in ["2MiB", "12MiB"] {
        let mut p = auto_policy(&format!("auto:start={start}@419"));
        let trace = run_auto(&mut p, 6 * 3600, 1.0, curve);
        let max_per_second = step as f64 / ramp + 1.0;
        let mut prev = trace[0] as f64;
        for &s in &trace[1..] {
            assert!(
                (s as f64 - prev).abs() <= max_per_second,
                "start {start}: jumped from {prev} to {s}"
            );
            prev = s as f64;
        }
        // After 3 hours the size stays within one step of the best size.
        for &s in &trace[3 * 3600..] {
            assert!(
                s.abs_diff(best) <= step,
                "start {start}: size {s} strayed from {best}"
            );
        }
        // And it spends more of that time at the best size than at either neighbour
        // (it keeps re-checking them as their stored scores deflate).
        let near = |target: u64| {
            trace[3 * 3600..]
                .iter()
                .filter(|&&s| s.abs_diff(target) < step / 4)
                .count()
        };
        let (below, at, above) = (near(best - step), near(best), near(best + step));
        assert!(
            at > below && at > above,
            "start {start}: {below} {at} {above}"
        );
        assert!(at * 3 > 3 * 3600, "start {start}: at best only {at} s");
    }
}

#[test]
fn auto_escapes_a_noisy_local_minimum_by_deflating_scores() {
    // During the first half hour, 3.5 MiB measures far worse than it is, which leaves
    // 3 MiB looking like a minimum; the true minimum is 6 MiB.
    let curve = |size: u64, now: f64| {
        let mb = size as f64 / MIB as f64;
        let base = 10.0 + (mb - 6.0).powi(2);
        if now < 1800.0 && (mb - 3.5).abs() < 0.01 {
            base + 8.0
        } else {
            base
        }
    };
    let mut p = auto_policy("auto:start=3MiB@419");
    let trace = run_auto(&mut p, 8 * 3600, 1.0, curve);
    let stuck = trace[1500..1800].iter().filter(|&&s| s <= 3 * MIB).count();
    assert!(stuck > 0, "never sat at the false minimum");
    assert!(p.stored_score(3 * MIB + 524_288).is_some());
    let end = *trace.last().unwrap();
    assert!(end.abs_diff(6 * MIB) <= 524_288, "ended at {end}");
}

#[test]
fn auto_holds_still_under_light_load() {
    let mut p = auto_policy("auto");
    let start = p.reference_bytes();
    let trace = run_auto(&mut p, 3600, 0.3, |s, _| s as f64);
    assert!(trace.iter().all(|&s| s == start));
    assert_eq!(p.current().detail["phase"], 1.0, "idle");
}

/// One second of busy reading at `t`: a request at 419 kbit/s, then the second's
/// observation — 1 MB requested, 0.5 s of disk time, workers 90% busy, the rest from `o`.
fn busy_second(p: &mut AutoPolicy, t: u64, o: Observation) {
    let now = t as f64;
    p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, now));
    p.observe(&Observation {
        now_s: now,
        requested_bytes: 1_000_000,
        disk_time_s: 0.5,
        busy_s: 0.9,
        ..o
    });
}

/// Feeds one observation per second from `from` to `to` in which 20% of the requested
/// bytes were prefetched and evicted unread, `eviction_time` seconds after their read.
fn evicting_seconds(p: &mut AutoPolicy, from: u64, to: u64, eviction_time: f64) {
    for t in from..=to {
        let o = Observation {
            disk_bytes: 2_000_000,
            evicted_bytes: 200_000,
            evictions: 2,
            eviction_time_s: 2.0 * eviction_time,
            ..Observation::default()
        };
        busy_second(p, t, o);
    }
}

#[test]
fn auto_eviction_guard_shrinks_to_eviction_time_times_bit_rate_at_once() {
    let mut p = auto_policy("auto:start=8MiB@419");
    let expected = (60.0 * 419.0 * 1000.0 / 8.0_f64).round() as u64; // 3,142,500 bytes ≈ 3 MB
    evicting_seconds(&mut p, 1, 30, 60.0);
    assert_eq!(
        p.reference_bytes(),
        8 * MIB,
        "no decision before two guard periods"
    );
    evicting_seconds(&mut p, 31, 31, 60.0);
    assert_eq!(p.target_bytes(), expected);
    assert_eq!(p.reference_bytes(), expected, "shrinking does not ramp");
    assert_eq!(p.current().detail["phase"], 4.0, "evicting");
    // Evictions of data prefetched at the old size keep arriving, now with shorter
    // eviction times; the guard does not act on them again within the interval.
    evicting_seconds(&mut p, 17, 100, 20.0);
    assert_eq!(p.reference_bytes(), expected, "one guard move per interval");
}

/// One second of busy reading without evictions.
fn clean_second(p: &mut AutoPolicy, t: u64) {
    let o = Observation {
        disk_bytes: 1_000_000,
        ..Observation::default()
    };
    busy_second(p, t, o);
}

#[test]
fn auto_eviction_guard_ignores_a_burst_that_does_not_last() {
    // A cold start evicts a fifth of what is requested for ten seconds, then nothing: one
    // guard period over the threshold is not evidence against the size.
    let mut p = auto_policy("auto:start=8MiB@419");
    evicting_seconds(&mut p, 1, 10, 5.0);
    for t in 11..=170 {
        clean_second(&mut p, t);
    }
    assert_eq!(p.reference_bytes(), 8 * MIB, "a burst moved the size");
    assert_eq!(
        p.current().detail["phase"],
        0.0,
        "still in the first window"
    );
    // The same evictions lasting two periods do move it.
    let mut q = auto_policy("auto:start=8MiB@419");
    evicting_seconds(&mut q, 1, 31, 5.0);
    assert!(q.reference_bytes() < MIB, "{}", q.reference_bytes());
    // Two over-threshold periods that are not consecutive are not enough either.
    let mut r = auto_policy("auto:start=8MiB@419");
    evicting_seconds(&mut r, 1, 15, 5.0);
    for t in 16..=30 {
        clean_second(&mut r, t);
    }
    evicting_seconds(&mut r, 31, 45, 5.0);
    for t in 46..=60 {
        clean_second(&mut r, t);
    }
    assert_eq!(r.reference_bytes(), 8 * MIB);
}

#[test]
fn auto_without_guard_applies_the_eviction_rule_when_the_window_closes() {
    let mut p = auto_policy("auto:start=8MiB@419,guard=1h");
    evicting_seconds(&mut p, 1, 180, 60.0);
    assert_eq!(p.reference_bytes(), 8 * MIB, "the window is still open");
    evicting_seconds(&mut p, 181, 181, 60.0);
    assert_eq!(p.reference_bytes(), 3_142_500);
}

#[test]
fn auto_grows_back_gradually_after_evictions() {
    let mut p = auto_policy("auto:start=1MiB@419");
    evicting_seconds(&mut p, 1, 31, 60.0);
    assert_eq!(p.target_bytes(), 3_142_500);
    let mut last = p.reference_bytes();
    assert!(last < 2 * MIB, "growing is not a jump: {last}");
    for t in 32..=2000 {
        p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, t as f64));
        let now = p.reference_bytes();
        assert!(now >= last && now - last <= 524_288 / 60 + 1);
        last = now;
    }
    assert_eq!(p.reference_bytes(), 3_142_500);
}

#[test]
fn auto_scales_other_bit_rates_by_square_root() {
    let mut p = auto_policy("auto:start=4MiB@2095");
    let hd = p.prefetch_bytes(&ctx(2095, 0, ChainKind::Other, 1.0));
    let sd = p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, 1.0));
    assert_eq!(hd, 4 * MIB);
    assert!((hd as f64 / sd as f64 - 5f64.sqrt()).abs() < 1e-3);
    let classes = p.current().classes;
    assert_eq!(
        classes.iter().map(|c| c.bitrate_kbps).collect::<Vec<_>>(),
        [419, 2095]
    );
}

#[test]
fn auto_is_deterministic() {
    let curve = |s: u64, _: f64| ((s as f64 / MIB as f64) - 5.0).abs() + 1.0;
    let mut a = auto_policy("auto");
    let mut b = auto_policy("auto");
    assert_eq!(
        run_auto(&mut a, 5000, 0.8, curve),
        run_auto(&mut b, 5000, 0.8, curve)
    );
}

#[test]
fn sizes_accept_binary_decimal_and_plain_units() {
    assert_eq!(spec(PolicySpec::DEFAULT_TEXT), PolicySpec::default());
    assert_eq!(PolicySpec::default(), PolicySpec::Fixed { bytes: 2 * MIB });
    assert_eq!(spec("fixed:2MB"), PolicySpec::Fixed { bytes: 2_000_000 });
    assert_eq!(spec("fixed:512KiB"), PolicySpec::Fixed { bytes: 524_288 });
    assert_eq!(
        spec("fixed:3145728"),
        PolicySpec::Fixed { bytes: 3_145_728 }
    );
    assert_eq!(
        spec(" sqrt:1 MiB@419kbps "),
        PolicySpec::Sqrt {
            bytes: MIB,
            ref_kbps: 419
        }
    );
}

#[test]
fn specs_serialize_as_strings() {
    let s = spec("first-grow-sr:8MiB@2000");
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.starts_with("\"first-grow-sr:max=8388608"), "{json}");
    assert_eq!(serde_json::from_str::<PolicySpec>(&json).unwrap(), s);
    let err = serde_json::from_str::<PolicySpec>("\"fixed:lots\"").unwrap_err();
    assert!(err.to_string().contains("expected a size"), "{err}");
}

#[test]
fn auto_starts_inside_the_memory_budget_and_searches_below_it() {
    let mut p = spec("auto:start=6MiB@419,step=512KiB").build();
    let mib = 1u64 << 20;
    assert_eq!(
        p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, 0.0)),
        6 * mib
    );
    // The manager reports 2.25 MiB per √kbps-share at 419 kbps: it applies at once, off
    // the 512 KiB step grid.
    let per = 2.25 * mib as f64 / 419f64.sqrt();
    p.observe(&Observation {
        now_s: 1.0,
        budget_per_sqrt_kbps: Some(per),
        ..Default::default()
    });
    let ceiling = 9 * mib / 4;
    assert_eq!(
        p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, 1.5)),
        ceiling
    );
    let state = p.current();
    assert_eq!(state.detail.get("ceiling_bytes"), Some(&(ceiling as f64)));
    // Busy, evicting nothing, for many windows: the search never grows past the ceiling.
    for w in 0..20 {
        let t = 2.0 + w as f64 * 181.0;
        p.observe(&Observation {
            now_s: t,
            requested_bytes: 100 * mib,
            disk_bytes: 100 * mib,
            disk_time_s: 170.0,
            busy_s: 170.0,
            budget_per_sqrt_kbps: Some(per),
            ..Default::default()
        });
        assert!(p.prefetch_bytes(&ctx(419, 0, ChainKind::Other, t)) <= ceiling);
    }
}

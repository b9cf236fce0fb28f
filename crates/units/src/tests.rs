//! Table-driven tests of every parser and round trips of every formatter.

use super::*;

const KI: u64 = 1024;
const MI: u64 = 1024 * 1024;
const GI: u64 = 1024 * 1024 * 1024;

/// Each `(text, want)` of `table` is read by `parse` as `want`.
#[track_caller]
fn assert_parses<T: PartialEq + std::fmt::Debug + Copy>(
    parse: impl Fn(&str) -> Result<T, UnitError>,
    table: &[(&str, T)],
) {
    for &(text, want) in table {
        assert_eq!(parse(text), Ok(want), "{text}");
    }
}

/// Each of `bad` is refused by `parse` as `what` ("expected WHAT, got 'BAD'").
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    parse: impl Fn(&str) -> Result<T, UnitError>,
    bad: &[&str],
    what: &str,
) {
    for bad in bad {
        let e = parse(bad).unwrap_err();
        assert_eq!(e.to_string(), format!("expected {what}, got '{bad}'"));
    }
}

#[test]
fn sizes_as_typed() {
    let table: &[(&str, u64)] = &[
        ("512KiB", 512 * KI),
        ("1GiB", GI),
        ("3M", 3_000_000),
        ("2.5MB", 2_500_000),
        ("4096", 4096),
        ("0", 0),
        ("3 MiB", 3 * MI),
        ("512kib", 512 * KI),
        ("2Mi", 2 * MI),
        ("1k", 1000),
        ("1KB", 1000),
        (" 64MiB ", 64 * MI),
        ("1.5KiB", 1536),
        ("10B", 10),
    ];
    assert_parses(parse_size, table);
    let bad = [
        "",
        "lots",
        "-1",
        "MiB",
        "1 furlong",
        "1MiB/s",
        "1.2.3MiB",
        "1Mbit",
    ];
    assert_refused(parse_size, &bad, "a size like 512KiB or 1GiB");
    for bad in bad {
        assert_eq!(
            parse_size(bad).unwrap_err().quantity(),
            Quantity::Size,
            "{bad}"
        );
    }
    assert!(parse_positive_size("0")
        .unwrap_err()
        .to_string()
        .contains("must be positive"));
    assert_eq!(parse_positive_size("1KiB"), Ok(1024));
}

#[test]
fn durations_as_typed() {
    let table: &[(&str, f64)] = &[
        ("60", 60.0),
        ("60s", 60.0),
        ("1m30s", 90.0),
        ("1m 30s", 90.0),
        ("250ms", 0.25),
        ("2h", 7200.0),
        ("2.5", 2.5),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("100us", 0.0001),
        ("5min", 300.0),
        (" 10s ", 10.0),
    ];
    for &(text, want) in table {
        let got = parse_seconds(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!((got - want).abs() < 1e-9, "{text}: {got} != {want}");
    }
    let bad = ["", "soon", "-1", "10 parsecs", "inf", "NaN", "s"];
    assert_refused(parse_duration, &bad, "a time like 60s, 1m30s or 250ms");
    assert!(parse_positive_duration("0").is_err());
    assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
}

#[test]
fn bit_rates_as_typed() {
    let table: &[(&str, u64)] = &[
        ("800k", 800_000),
        ("800K", 800_000),
        ("3M", 3_000_000),
        ("3Mbit/s", 3_000_000),
        ("800kbps", 800_000),
        ("1.5Mbps", 1_500_000),
        ("10Mb/s", 10_000_000),
        ("3000kbit/s", 3_000_000),
        ("1G", 1_000_000_000),
        ("2000", 2000),
        ("0", 0),
        ("419 kbit/s", 419_000),
        ("64bit/s", 64),
    ];
    assert_parses(parse_bit_rate, table);
    let bad = ["", "fast", "3MB/s", "3MiB", "10furlongs", "-1k", "k"];
    assert_refused(
        parse_bit_rate,
        &bad,
        "a bit rate like 800k, 3Mbit/s or 1.5Mbps",
    );
    assert!(parse_bandwidth("x")
        .unwrap_err()
        .to_string()
        .starts_with("expected a bandwidth like"));
    assert_eq!(parse_kbps("419"), Ok(419));
    assert_eq!(parse_kbps("3Mbit/s"), Ok(3000));
    assert_eq!(parse_kbps("800k"), Ok(800));
}

#[test]
fn byte_rates_as_typed() {
    let table: &[(&str, u64)] = &[
        ("2.5MB/s", 2_500_000),
        ("20MiB/s", 20 * MI),
        ("1KiB", 1024),
        ("4096", 4096),
        ("100MBps", 100_000_000),
    ];
    assert_parses(parse_byte_rate, table);
    assert_refused(
        parse_byte_rate,
        &["", "quick", "3Mbit/s", "/s"],
        "a data rate like 2.5MB/s or 20MiB/s",
    );
}

#[test]
fn session_rates_as_typed() {
    let table: &[(&str, f64)] = &[
        ("2", 2.0),
        ("0.5/s", 0.5),
        ("120/min", 2.0),
        ("7200/h", 2.0),
        ("0", 0.0),
    ];
    assert_parses(parse_session_rate, table);
    for bad in ["", "-1", "2/fortnight", "many", "inf"] {
        assert!(parse_session_rate(bad).is_err(), "{bad}");
    }
}

#[test]
fn memory_settings() {
    assert_eq!(parse_memory("auto"), Ok(Memory::Auto));
    assert_eq!(parse_memory("off"), Ok(Memory::Off));
    assert_eq!(parse_memory("1GiB"), Ok(Memory::Size(GI)));
    assert_eq!(parse_memory("256MiB").map(Memory::size), Ok(Some(256 * MI)));
    assert!(parse_memory("0")
        .unwrap_err()
        .to_string()
        .contains("must be positive"));
    assert_eq!(
        parse_memory("lots").unwrap_err().to_string(),
        "expected auto, off or a size like 1GiB, got 'lots'"
    );
    for m in [Memory::Auto, Memory::Off, Memory::Size(3 * MI)] {
        assert_eq!(m.to_string().parse::<Memory>(), Ok(m));
    }
}

#[test]
fn size_or_time() {
    assert_eq!(parse_size_or_time("10s"), Ok(SizeOrTime::Time(10.0)));
    assert_eq!(parse_size_or_time("2MiB"), Ok(SizeOrTime::Size(2 * MI)));
    assert_eq!(parse_size_or_time("4096"), Ok(SizeOrTime::Size(4096)));
    assert!(parse_size_or_time("x")
        .unwrap_err()
        .to_string()
        .contains("expected a size like 512KiB or a content time"));
}

#[test]
fn errors_name_the_flag_or_the_field() {
    let e = parse_size("x").unwrap_err();
    assert_eq!(
        e.clone().flag("memory").to_string(),
        "--memory: expected a size like 512KiB or 1GiB, got 'x'"
    );
    assert_eq!(
        e.clone().flag("--memory").to_string(),
        "--memory: expected a size like 512KiB or 1GiB, got 'x'"
    );
    assert_eq!(
        e.clone()
            .field("spec.toml", Some(3), "sessions.request")
            .to_string(),
        "spec.toml:3: sessions.request: expected a size like 512KiB or 1GiB, got 'x'"
    );
    assert_eq!(
        e.field("spec.toml", None, "pad_to")
            .at("workload")
            .to_string(),
        "workload: spec.toml: pad_to: expected a size like 512KiB or 1GiB, got 'x'"
    );
}

/// A small deterministic generator (xorshift) for the round trips: no dependency, and the
/// same cases every run.
fn values(seed: u64, n: usize) -> impl Iterator<Item = u64> {
    let mut x = seed;
    (0..n).map(move |i| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Mix small values, round values and arbitrary ones.
        match i % 4 {
            0 => x % 10_000,
            1 => (x % 4096) << (10 * (1 + (x >> 60) % 3)),
            2 => (x % 1000) * 10u64.pow((1 + (x >> 58) % 8) as u32),
            _ => x >> 20,
        }
    })
}

#[test]
fn formatted_sizes_parse_back() {
    for n in values(0x9e37_79b9_7f4a_7c15, 4000).chain([0, 1, 1023, 1024, GI, 1 << 50]) {
        let text = format_size(n);
        assert_eq!(parse_size(&text), Ok(n), "{n} -> {text}");
        let rate = format_byte_rate(n);
        assert_eq!(parse_byte_rate(&rate), Ok(n), "{n} -> {rate}");
    }
    assert_eq!(format_size(512 * KI), "512KiB");
    assert_eq!(format_size(GI), "1GiB");
    assert_eq!(format_size(1000), "1000");
    assert_eq!(format_byte_rate(20 * MI), "20MiB/s");
}

#[test]
fn formatted_bit_rates_parse_back() {
    for n in values(0x2545_f491_4f6c_dd1d, 4000).chain([0, 1, 999, 1000, 1500, 800_000]) {
        let text = format_bit_rate(n);
        assert_eq!(parse_bit_rate(&text), Ok(n), "{n} -> {text}");
    }
    assert_eq!(format_bit_rate(800_000), "800kbit/s");
    assert_eq!(format_bit_rate(1_500_000), "1.5Mbit/s");
    assert_eq!(format_bit_rate(3_000_000), "3Mbit/s");
    assert_eq!(format_bit_rate(1_234_567), "1234.567kbit/s");
    assert_eq!(format_bit_rate(999), "999bit/s");
}

#[test]
fn formatted_durations_parse_back() {
    for n in values(0x1234_5678_9abc_def1, 4000) {
        let d = Duration::from_nanos(n);
        let text = format_duration(d);
        assert_eq!(parse_duration(&text), Ok(d), "{n} ns -> {text}");
    }
    assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
    assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(format_duration(Duration::ZERO), "0s");
    assert_eq!(format_seconds(1.5), "1s500ms");
}

#[test]
fn compact_and_human_sizes() {
    assert_eq!(compact_size(524_288), "512k");
    assert_eq!(compact_size(2 << 20), "2m");
    assert_eq!(compact_size(3 << 30), "3g");
    assert_eq!(compact_size(1000), "1000");
    assert_eq!(compact_size(0), "0");
    assert_eq!(human_size(1536 * MI), "1.5 GiB");
}

#[test]
fn spec_fields_take_strings_and_numbers() {
    let s: Size = serde_json::from_str("\"512KiB\"").unwrap();
    assert_eq!(s, Size(512 * KI));
    let s: Size = serde_json::from_str("4096").unwrap();
    assert_eq!(s, Size(4096));
    let t: Seconds = serde_json::from_str("\"1m30s\"").unwrap();
    assert_eq!(t, Seconds(90.0));
    let t: Seconds = serde_json::from_str("2.5").unwrap();
    assert_eq!(t, Seconds(2.5));
    let b: Bandwidth = serde_json::from_str("\"800k\"").unwrap();
    assert_eq!(b, Bandwidth(800_000));
    let e = serde_json::from_str::<Size>("\"lots\"").unwrap_err();
    assert!(e.to_string().contains("expected a size like 512KiB"), "{e}");
    assert_eq!(serde_json::to_string(&Size(7)).unwrap(), "7");
    assert_eq!(serde_json::to_string(&Seconds(2.5)).unwrap(), "2.5");
    assert_eq!(
        serde_json::to_string(&Bandwidth(800_000)).unwrap(),
        "800000"
    );
    assert_eq!(
        serde_json::to_string(&SizeOrTime::Time(10.0)).unwrap(),
        "\"10s\""
    );
}

#[test]
fn unknown_choice_lists_the_choices_in_one_line() {
    assert_eq!(
        unknown_choice("read order", "x", &["fifo", "deadline", "sweep"]),
        "read order `x`: expected fifo, deadline or sweep"
    );
    assert_eq!(
        unknown_choice("--http", "3", &["1.1", "2"]),
        "--http `3`: expected 1.1 or 2"
    );
    assert_eq!(unknown_choice("mode", "", &["on"]), "mode ``: expected on");
}

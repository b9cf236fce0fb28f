//! Sizes, durations, data rates, bit rates and session rates as people type them: the one
//! place that parses and formats them for every flag, spec field and policy string.
//!
//! # What is accepted
//!
//! | quantity | examples | a bare number means |
//! | --- | --- | --- |
//! | size | `512KiB`, `1GiB`, `3M`, `2.5MB`, `3 MiB`, `4096` | bytes |
//! | duration | `60`, `60s`, `1m30s`, `1m 30s`, `250ms`, `2h`, `1.5s` | seconds |
//! | bit rate | `800k`, `3M`, `3Mbit/s`, `800kbps`, `1.5Mbps`, `10Mb/s` | bits per second |
//! | data rate | `2.5MB/s`, `20MiB/s`, `1KiB` | bytes per second |
//! | session rate | `2`, `0.5/s`, `120/min`, `7200/h` | sessions per second |
//! | memory | `auto`, `off`, or a size | — |
//!
//! # SI or IEC
//!
//! - **Sizes and data rates** follow the unit as written: `KiB`, `MiB`, `GiB`, `TiB` (and
//!   `Ki`, `Mi`, ...) are powers of 1024; `KB`, `MB`, `GB`, `TB` and the bare letters `k`,
//!   `M`, `G`, `T` are powers of 1000. Letters are case-insensitive (`512kib` is `512KiB`).
//! - **Bit rates** are SI only, as every encoder and network tool uses them: `k`, `M`, `G`
//!   are 10³, 10⁶, 10⁹ bits per second; the prefix letter is case-insensitive, the rest
//!   (`b`, `bit`, `bps`, `b/s`, `bit/s`) is not, because `B` means bytes. A byte unit
//!   (`MB/s`) is refused where a bit rate is expected, rather than guessed at.
//! - **Formatting** writes what parsing reads back exactly: [`format_size`] uses the largest
//!   IEC unit that divides the value (`512KiB`, `1GiB`, else bytes), [`format_bit_rate`]
//!   the largest SI unit with at most three decimals (`800kbit/s`, `1.5Mbit/s`),
//!   [`format_duration`] compact components (`1m30s`, `250ms`).
//!
//! # Errors
//!
//! Every parser fails with a [`UnitError`] that reads `expected a size like 512KiB or 1GiB,
//! got 'x'`. Put where the value came from in front with [`UnitError::flag`]
//! (`--memory: expected ...`) or [`UnitError::field`] (`spec.toml:3: sessions.request:
//! expected ...`). As a clap `value_parser` the plain message is right: clap names the flag.
//! A word that names none of a flag's or field's choices fails with the same one line from
//! [`unknown_choice`] (``read order `x`: expected fifo, deadline or sweep``).

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// What a parser expected: picks the one-line description and its examples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    Size,
    Duration,
    BitRate,
    /// A bit rate of a network link (the same forms as [`Quantity::BitRate`]).
    Bandwidth,
    ByteRate,
    SessionRate,
    Memory,
    SizeOrTime,
}

impl Quantity {
    /// The words after "expected", with examples.
    pub fn expected(self) -> &'static str {
        match self {
            Quantity::Size => "a size like 512KiB or 1GiB",
            Quantity::Duration => "a time like 60s, 1m30s or 250ms",
            Quantity::BitRate => "a bit rate like 800k, 3Mbit/s or 1.5Mbps",
            Quantity::Bandwidth => "a bandwidth like 10Mbit/s or 800k",
            Quantity::ByteRate => "a data rate like 2.5MB/s or 20MiB/s",
            Quantity::SessionRate => "a session rate like 2, 0.5/s or 120/min",
            Quantity::Memory => "auto, off or a size like 1GiB",
            Quantity::SizeOrTime => "a size like 512KiB or a content time like 10s",
        }
    }
}

/// A value that did not parse: what was expected, what was given, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    quantity: Quantity,
    got: String,
    place: Option<String>,
    why: Option<String>,
}

impl UnitError {
    pub fn new(quantity: Quantity, got: &str) -> Self {
        UnitError {
            quantity,
            got: got.to_string(),
            place: None,
            why: None,
        }
    }

    /// The same error with a reason after the expectation (`..., got '0' (must be positive)`).
    pub fn because(mut self, why: impl Into<String>) -> Self {
        self.why = Some(why.into());
        self
    }

    /// The error of a flag: `--memory: expected ...`.
    pub fn flag(self, name: &str) -> Self {
        let name = if name.starts_with('-') {
            name.to_string()
        } else {
            format!("--{name}")
        };
        self.at(name)
    }

    /// The error of a field in a file: `spec.toml:3: sessions.request: expected ...`
    /// (`line` when known).
    pub fn field(self, file: &str, line: Option<usize>, field: &str) -> Self {
        let place = match line {
            Some(l) => format!("{file}:{l}: {field}"),
            None => format!("{file}: {field}"),
        };
        self.at(place)
    }

    /// The error with any place in front (`place: expected ...`); an existing place stays
    /// innermost (`outer: inner: expected ...`).
    pub fn at(mut self, place: impl Into<String>) -> Self {
        let place = place.into();
        self.place = Some(match self.place.take() {
            Some(inner) => format!("{place}: {inner}"),
            None => place,
        });
        self
    }

    pub fn quantity(&self) -> Quantity {
        self.quantity
    }

    /// The text as given.
    pub fn got(&self) -> &str {
        &self.got
    }
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(place) = &self.place {
            write!(f, "{place}: ")?;
        }
        write!(
            f,
            "expected {}, got '{}'",
            self.quantity.expected(),
            self.got
        )?;
        if let Some(why) = &self.why {
            write!(f, " ({why})")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnitError {}

impl From<UnitError> for String {
    fn from(e: UnitError) -> String {
        e.to_string()
    }
}

/// The error of `got`, which names none of `expected` (a flag's or field's choices, e.g. an
/// enum's `strum::VariantNames`): ``read order `x`: expected fifo, deadline or sweep``.
pub fn unknown_choice(what: &str, got: &str, expected: &[&str]) -> String {
    let list = match expected {
        [] => "nothing".to_string(),
        [only] => only.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    };
    format!("{what} `{got}`: expected {list}")
}

/// A byte count: `512KiB`, `1GiB`, `3M`, `2.5MB` or a number of bytes.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let bad = || UnitError::new(Quantity::Size, s);
    if t.is_empty() || !t.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|_| bad())
}

/// A size above zero.
pub fn parse_positive_size(s: &str) -> Result<u64, UnitError> {
    match parse_size(s)? {
        0 => Err(UnitError::new(Quantity::Size, s).because("must be positive")),
        n => Ok(n),
    }
}

/// A duration: `60` (seconds), `60s`, `1m30s`, `250ms`, `2h`, `1.5s`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let t = s.trim();
    let bad = || UnitError::new(Quantity::Duration, s);
    if let Ok(x) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(x).map_err(|_| bad());
    }
    humantime::parse_duration(t).map_err(|_| bad())
}

/// A duration in seconds (see [`parse_duration`]).
pub fn parse_seconds(s: &str) -> Result<f64, UnitError> {
    parse_duration(s).map(|d| d.as_secs_f64())
}

/// A duration above zero.
pub fn parse_positive_duration(s: &str) -> Result<Duration, UnitError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(UnitError::new(Quantity::Duration, s).because("must be positive"));
    }
    Ok(d)
}

fn split_number(t: &str) -> (&str, &str) {
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    (num, unit.trim())
}

fn bit_rate(s: &str, quantity: Quantity) -> Result<u64, UnitError> {
    let bad = || UnitError::new(quantity, s);
    let (num, unit) = split_number(s.trim());
    let x: f64 = num.parse().map_err(|_| bad())?;
    let (prefix, rest) = match unit.chars().next() {
        Some(c @ ('k' | 'K' | 'm' | 'M' | 'g' | 'G' | 't' | 'T')) => (Some(c), &unit[1..]),
        _ => (None, unit),
    };
    let mult = match prefix.map(|c| c.to_ascii_lowercase()) {
        None => 1.0,
        Some('k') => 1e3,
        Some('m') => 1e6,
        Some('g') => 1e9,
        _ => 1e12,
    };
    if !matches!(
        rest,
        "" | "b" | "bit" | "bits" | "b/s" | "bit/s" | "bits/s" | "bps"
    ) {
        return Err(bad());
    }
    let bps = (x * mult).round();
    if !(0.0..1e18).contains(&bps) {
        return Err(bad());
    }
    Ok(bps as u64)
}

/// A bit rate in bits per second: `800k`, `3M`, `3Mbit/s`, `800kbps`, `1.5Mbps`, or bits
/// per second as a number.
pub fn parse_bit_rate(s: &str) -> Result<u64, UnitError> {
    bit_rate(s, Quantity::BitRate)
}

/// A bit rate in kbit/s where a bare number means kbit/s (`419`) and a number with a unit
/// is any bit rate (`419k`, `3Mbit/s`), rounded to the nearest kbit/s.
pub fn parse_kbps(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    if let Ok(k) = t.parse::<u64>() {
        return Ok(k);
    }
    if let Ok(k) = t.parse::<f64>() {
        return parse_bit_rate(&format!("{k}k")).map(|b| b / 1000);
    }
    parse_bit_rate(s).map(|b| (b + 500) / 1000)
}

/// A link bandwidth in bits per second: a bit rate, with the bandwidth wording in errors.
pub fn parse_bandwidth(s: &str) -> Result<u64, UnitError> {
    bit_rate(s, Quantity::Bandwidth)
}

/// A data rate in bytes per second: `2.5MB/s`, `20MiB/s` or a size (`1KiB`, per second).
pub fn parse_byte_rate(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let size = t
        .strip_suffix("/s")
        .or_else(|| t.strip_suffix("ps"))
        .unwrap_or(t);
    parse_size(size).map_err(|_| UnitError::new(Quantity::ByteRate, s))
}

/// Sessions started per second: `2`, `0.5/s`, `120/min`, `7200/h`.
pub fn parse_session_rate(s: &str) -> Result<f64, UnitError> {
    let t = s.trim();
    let (num, per) = match t.split_once('/') {
        Some((n, u)) => (n.trim(), u.trim()),
        None => (t, "s"),
    };
    let div = match per {
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(UnitError::new(Quantity::SessionRate, s)),
    };
    match num.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x / div),
        _ => Err(UnitError::new(Quantity::SessionRate, s)),
    }
}

/// A memory setting: `auto` (found from the cgroup or RAM by whoever uses it), `off`, or a
/// budget in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    Auto,
    Off,
    Size(u64),
}

impl Memory {
    /// The budget when one was given.
    pub fn size(self) -> Option<u64> {
        match self {
            Memory::Size(n) => Some(n),
            _ => None,
        }
    }
}

/// `auto`, `off` or a size above zero.
pub fn parse_memory(s: &str) -> Result<Memory, UnitError> {
    match s.trim() {
        "auto" => Ok(Memory::Auto),
        "off" => Ok(Memory::Off),
        t => match parse_size(t) {
            Ok(0) => Err(UnitError::new(Quantity::Memory, s).because("must be positive")),
            Ok(n) => Ok(Memory::Size(n)),
            Err(_) => Err(UnitError::new(Quantity::Memory, s)),
        },
    }
}

impl std::str::FromStr for Memory {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_memory(s)
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Memory::Auto => f.write_str("auto"),
            Memory::Off => f.write_str("off"),
            Memory::Size(n) => f.write_str(&format_size(*n)),
        }
    }
}

/// Either an amount of data or an amount of content time (`request = "512KiB"` or `"10s"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeOrTime {
    Size(u64),
    Time(f64),
}

/// `512KiB` (a size) or `10s` (a time; a bare number is a size).
pub fn parse_size_or_time(s: &str) -> Result<SizeOrTime, UnitError> {
    let t = s.trim();
    if t.ends_with('s') && !t.ends_with('B') && !t.ends_with('b') {
        if let Ok(x) = humantime::parse_duration(t) {
            return Ok(SizeOrTime::Time(x.as_secs_f64()));
        }
    }
    parse_size(t)
        .map(SizeOrTime::Size)
        .map_err(|_| UnitError::new(Quantity::SizeOrTime, s))
}

const IEC: [(u64, &str); 6] = [
    (1 << 50, "PiB"),
    (1 << 40, "TiB"),
    (1 << 30, "GiB"),
    (1 << 20, "MiB"),
    (1 << 10, "KiB"),
    (1, ""),
];

/// A size exactly, in the largest IEC unit that divides it: `512KiB`, `1GiB`, `1000`.
pub fn format_size(n: u64) -> String {
    if n == 0 {
        return "0".into();
    }
    let (unit, name) = IEC
        .iter()
        .copied()
        .find(|&(u, _)| n.is_multiple_of(u))
        .unwrap_or((1, ""));
    format!("{}{name}", n / unit)
}

/// A size for people, rounded: `1.5 GiB`, `512.0 KiB`, `100 B`.
pub fn human_size(n: u64) -> String {
    bytesize::ByteSize::b(n).display().iec().to_string()
}

/// A size compactly for paths and labels: `512k`, `2m`, `1g` (powers of 1024), else bytes.
pub fn compact_size(n: u64) -> String {
    match IEC[2..5]
        .iter()
        .find(|&&(u, _)| n > 0 && n.is_multiple_of(u))
    {
        Some(&(u, name)) => format!("{}{}", n / u, name[..1].to_ascii_lowercase()),
        None => n.to_string(),
    }
}

/// A data rate exactly: `20MiB/s`, `1000/s` (bytes per second).
pub fn format_byte_rate(bytes_per_s: u64) -> String {
    format!("{}/s", format_size(bytes_per_s))
}

/// A bit rate exactly, in the largest SI unit that keeps at most three decimals:
/// `800kbit/s`, `1.5Mbit/s`, `999bit/s`.
pub fn format_bit_rate(bps: u64) -> String {
    for (unit, name) in [(1_000_000_000u64, "G"), (1_000_000, "M"), (1_000, "k")] {
        if bps >= unit && bps.is_multiple_of(unit / 1000) {
            let whole = bps / unit;
            let frac = (bps % unit) / (unit / 1000);
            let text = if frac == 0 {
                format!("{whole}")
            } else {
                let f = format!("{frac:03}");
                format!("{whole}.{}", f.trim_end_matches('0'))
            };
            return format!("{text}{name}bit/s");
        }
    }
    format!("{bps}bit/s")
}

/// A duration compactly, exact to the nanosecond: `1m30s`, `250ms`, `2h`, `0s`.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let secs = d.as_secs();
    let nanos = u64::from(d.subsec_nanos());
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
        (nanos / 1_000_000, "ms"),
        (nanos / 1000 % 1000, "us"),
        (nanos % 1000, "ns"),
    ];
    parts
        .iter()
        .filter(|(v, _)| *v > 0)
        .map(|(v, u)| format!("{v}{u}"))
        .collect()
}

/// A duration in seconds compactly (see [`format_duration`]); negative or not finite
/// values print as seconds.
pub fn format_seconds(s: f64) -> String {
    match Duration::try_from_secs_f64(s) {
        Ok(d) => format_duration(d),
        Err(_) => format!("{s}s"),
    }
}

/// A byte count in a spec: `512KiB`, `2MiB`, `4096` or `"4096"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Size(pub u64);

/// A duration in seconds in a spec: `10s`, `50ms`, `1m 30s` or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Seconds(pub f64);

/// A link bandwidth in bits per second in a spec: `10Mbit/s`, `3.5Mbps`, `800k`, `0`
/// (unlimited) or a number of bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Bandwidth(pub u64);

/// A serde visitor that hands strings and numbers alike to a unit parser.
struct UnitVisitor<F> {
    parse: F,
    quantity: Quantity,
}

impl<'de, T, F: Fn(&str) -> Result<T, UnitError>> Visitor<'de> for UnitVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.quantity.expected())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.parse)(&v.to_string()).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        (self.parse)(&v.to_string()).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        (self.parse)(&v.to_string()).map_err(E::custom)
    }
}

/// Deserialize a value through a unit parser, from a string or a number: for
/// `#[serde(deserialize_with = "...")]` helpers and the spec types below.
pub fn deserialize_with<'de, D, T>(
    d: D,
    quantity: Quantity,
    parse: impl Fn(&str) -> Result<T, UnitError>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    d.deserialize_any(UnitVisitor { parse, quantity })
}

/// `#[serde(deserialize_with = "vodkit_units::field::size")]` and friends.
pub mod field {
    use super::*;

    pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        deserialize_with(d, Quantity::Size, parse_size)
    }

    pub fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        deserialize_with(d, Quantity::Duration, parse_seconds)
    }

    pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        deserialize_with(d, Quantity::Duration, parse_duration)
    }

    pub fn bit_rate<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        deserialize_with(d, Quantity::BitRate, parse_bit_rate)
    }

    pub fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<Memory, D::Error> {
        deserialize_with(d, Quantity::Memory, parse_memory)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        field::size(d).map(Size)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        field::seconds(d).map(Seconds)
    }
}

impl<'de> Deserialize<'de> for Bandwidth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_with(d, Quantity::Bandwidth, parse_bandwidth).map(Bandwidth)
    }
}

impl<'de> Deserialize<'de> for SizeOrTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_with(d, Quantity::SizeOrTime, parse_size_or_time)
    }
}

impl Serialize for SizeOrTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SizeOrTime::Size(n) => s.serialize_u64(*n),
            SizeOrTime::Time(t) => s.serialize_str(&format!("{t}s")),
        }
    }
}

#[cfg(test)]
mod tests;

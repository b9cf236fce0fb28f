//! Human units in specs: sizes (`512KiB`, `2MiB`, or a byte count), times (`10s`, `50ms`,
//! or seconds as a number) and bandwidths (`10Mbit/s`, `3.5Mbps`, or bits per second).

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

/// A byte count written as `512KiB`, `2MiB`, `4096` or `"4096"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

/// A duration in seconds written as `10s`, `50ms`, `1m 30s` or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Seconds(pub f64);

/// A link bandwidth in bits per second written as `10Mbit/s`, `3.5Mbps`, `0` (unlimited)
/// or a number of bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bandwidth(pub u64);

/// Either an amount of data or an amount of content time (`request = "512KiB"` or `"10s"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeOrTime {
    Size(u64),
    Time(f64),
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(n);
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|_| format!("expected a size like 512KiB, 2MiB or a byte count, got `{s}`"))
}

pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if let Ok(x) = t.parse::<f64>() {
        if x.is_finite() && x >= 0.0 {
            return Ok(x);
        }
    }
    humantime::parse_duration(t)
        .map(|d| d.as_secs_f64())
        .map_err(|_| format!("expected a time like 10s, 50ms or a number of seconds, got `{s}`"))
}

pub fn parse_bandwidth(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad =
        || format!("expected a bandwidth like 10Mbit/s, 3.5Mbps or bits per second, got `{s}`");
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num.parse().map_err(|_| bad())?;
    let mult = match unit.trim() {
        "" | "bit/s" | "bps" | "b/s" => 1.0,
        "kbit/s" | "kbps" | "Kbps" | "kb/s" => 1e3,
        "Mbit/s" | "Mbps" | "Mb/s" => 1e6,
        "Gbit/s" | "Gbps" | "Gb/s" => 1e9,
        _ => return Err(bad()),
    };
    let bps = x * mult;
    if !(0.0..1e15).contains(&bps) {
        return Err(bad());
    }
    Ok(bps.round() as u64)
}

pub fn parse_size_or_time(s: &str) -> Result<SizeOrTime, String> {
    let t = s.trim();
    if t.ends_with("s") && !t.ends_with("B") && !t.ends_with("b") {
        if let Ok(x) = humantime::parse_duration(t) {
            return Ok(SizeOrTime::Time(x.as_secs_f64()));
        }
    }
    parse_size(t)
        .map(SizeOrTime::Size)
        .map_err(|_| format!("expected a size like 512KiB or a content time like 10s, got `{s}`"))
}

/// Format a byte count compactly for paths and tables: `512k`, `2m`, `1000`.
pub fn compact_size(n: u64) -> String {
    const KI: u64 = 1024;
    if n > 0 && n.trailing_zeros() >= 30 {
        format!("{}g", n / (KI * KI * KI))
    } else if n > 0 && n.trailing_zeros() >= 20 {
        format!("{}m", n / (KI * KI))
    } else if n > 0 && n.trailing_zeros() >= 10 {
        format!("{}k", n / KI)
    } else {
        n.to_string()
    }
}

struct UnitVisitor<F> {
    parse: F,
    expecting: &'static str,
}

impl<'de, T, F: Fn(&str) -> Result<T, String>> Visitor<'de> for UnitVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
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

macro_rules! unit_serde {
    ($ty:ident, $parse:expr, $expecting:literal, $ser:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(UnitVisitor {
                    parse: $parse,
                    expecting: $expecting,
                })
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                #[allow(clippy::redundant_closure_call)]
                ($ser)(self, s)
            }
        }
    };
}

unit_serde!(
    Size,
    |s: &str| parse_size(s).map(Size),
    "a size like 512KiB or a byte count",
    |v: &Size, s: S| s.serialize_u64(v.0)
);
unit_serde!(
    Seconds,
    |s: &str| parse_seconds(s).map(Seconds),
    "a time like 10s or a number of seconds",
    |v: &Seconds, s: S| s.serialize_f64(v.0)
);
unit_serde!(
    Bandwidth,
    |s: &str| parse_bandwidth(s).map(Bandwidth),
    "a bandwidth like 10Mbit/s",
    |v: &Bandwidth, s: S| s.serialize_u64(v.0)
);
unit_serde!(
    SizeOrTime,
    parse_size_or_time,
    "a size like 512KiB or a content time like 10s",
    |v: &SizeOrTime, s: S| match v {
        SizeOrTime::Size(n) => s.serialize_u64(*n),
        SizeOrTime::Time(t) => s.serialize_str(&format!("{t}s")),
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_human_units() {
        assert_eq!(parse_size("512KiB"), Ok(524_288));
        assert_eq!(parse_size("2MiB"), Ok(2_097_152));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").unwrap_err().contains("expected a size"));
        assert_eq!(parse_seconds("10s"), Ok(10.0));
        assert_eq!(parse_seconds("50ms"), Ok(0.05));
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("soon").is_err());
        assert_eq!(parse_bandwidth("10Mbit/s"), Ok(10_000_000));
        assert_eq!(parse_bandwidth("3.5Mbps"), Ok(3_500_000));
        assert_eq!(parse_bandwidth("0"), Ok(0));
        assert!(parse_bandwidth("fast").is_err());
        assert!(parse_bandwidth("10furlongs").is_err());
        assert_eq!(parse_size_or_time("10s"), Ok(SizeOrTime::Time(10.0)));
        assert_eq!(parse_size_or_time("2MiB"), Ok(SizeOrTime::Size(2_097_152)));
        assert!(parse_size_or_time("x").is_err());
        assert_eq!(compact_size(524_288), "512k");
        assert_eq!(compact_size(2 << 20), "2m");
        assert_eq!(compact_size(1000), "1000");
    }
}

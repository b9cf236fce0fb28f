//! Latency histograms that survive a trip through results.json: HdrHistogram in
//! microseconds, stored as base64 of the V2 deflate encoding so runs can be merged.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A histogram of durations.
#[derive(Clone, Debug)]
pub struct Hist(Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist::new()
    }
}

impl Hist {
    pub fn new() -> Hist {
        // Three significant digits, growing as needed.
        let mut h = Histogram::new(3).expect("3 significant digits is a valid precision");
        h.auto(true);
        Hist(h)
    }

    /// Record a duration given in seconds.
    pub fn record_s(&mut self, seconds: f64) {
        let us = (seconds * 1e6).round().max(1.0) as u64;
        let _ = self.0.record(us);
    }

    pub fn add(&mut self, other: &Hist) {
        let _ = self.0.add(&other.0);
    }

    pub fn encode(&self) -> String {
        let mut bytes = Vec::new();
        if V2DeflateSerializer::new()
            .serialize(&self.0, &mut bytes)
            .is_err()
        {
            return String::new();
        }
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    pub fn decode(text: &str) -> Result<Hist, String> {
        if text.is_empty() {
            return Ok(Hist::new());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("histogram is not base64: {e}"))?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &bytes[..])
            .map_err(|e| format!("histogram does not decode: {e:?}"))?;
        let mut out = Hist::new();
        out.0
            .add(&h)
            .map_err(|e| format!("histogram does not merge: {e:?}"))?;
        Ok(out)
    }

    /// The `percentile` (0–100) in milliseconds; 0 when empty.
    pub fn value_at_ms(&self, percentile: f64) -> f64 {
        self.quantile_ms(percentile / 100.0)
    }

    /// The quantile `q` (0–1) in milliseconds; 0 when empty.
    fn quantile_ms(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    /// Summary in milliseconds plus the encoded histogram.
    pub fn percentiles(&self) -> Percentiles {
        let h = &self.0;
        let q = |q: f64| self.quantile_ms(q);
        Percentiles {
            count: h.len(),
            mean: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p99_9: q(0.999),
            max: if h.is_empty() {
                0.0
            } else {
                h.max() as f64 / 1000.0
            },
            chosen: Vec::new(),
            histogram: self.encode(),
        }
    }
}

/// Distribution summary in milliseconds (`histogram`: base64 HdrHistogram V2 deflate,
/// microseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
    /// The percentiles asked for with `--percentiles`, as `[percentile, ms]` pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen: Vec<[f64; 2]>,
    pub histogram: String,
}

impl Percentiles {
    pub fn hist(&self) -> Result<Hist, String> {
        Hist::decode(&self.histogram)
    }

    /// Fill [`Percentiles::chosen`] from the histogram (`list` in percent, e.g. 99.9).
    pub fn choose(&mut self, list: &[f64]) {
        let Ok(h) = self.hist() else {
            return;
        };
        self.chosen = list.iter().map(|&p| [p, h.value_at_ms(p)]).collect();
    }
}

/// Parse `--percentiles 50,90,95,99,99.9`: each strictly between 0 and 100 (100 = max).
pub fn parse_percentiles(text: &str) -> Result<Vec<f64>, String> {
    text.split(',')
        .map(|t| match t.trim().trim_end_matches('%').parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
            _ => Err(format!(
                "percentile `{}`: expected a number above 0 and at most 100 (list like 50,90,99.9)",
                t.trim()
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_round_trip_and_merge() {
        let mut a = Hist::new();
        for ms in 1..=100 {
            a.record_s(ms as f64 / 1000.0);
        }
        let p = a.percentiles();
        assert_eq!(p.count, 100);
        assert!((p.p50 - 50.0).abs() < 0.1, "{}", p.p50);
        assert!((p.max - 100.0).abs() < 0.1);
        let mut b = p.hist().unwrap();
        b.add(&a);
        assert_eq!(b.percentiles().count, 200);
        assert!(Hist::decode("not base64!").is_err());
    }

    #[test]
    fn chosen_percentiles_come_from_the_histogram() {
        let mut a = Hist::new();
        for ms in 1..=1000 {
            a.record_s(ms as f64 / 1000.0);
        }
        let mut p = a.percentiles();
        p.choose(&[50.0, 95.0, 99.0, 100.0]);
        let got: Vec<f64> = p.chosen.iter().map(|c| c[1]).collect();
        for (g, want) in got.iter().zip([500.0, 950.0, 990.0, 1000.0]) {
            assert!((g - want).abs() < 1.0, "{got:?}");
        }
        assert_eq!(
            parse_percentiles("50, 90,99.9%").unwrap(),
            vec![50.0, 90.0, 99.9]
        );
        for bad in ["0", "101", "x", "50,,90"] {
            assert!(
                parse_percentiles(bad)
                    .unwrap_err()
                    .contains("expected a number"),
                "{bad}"
            );
        }
    }
}

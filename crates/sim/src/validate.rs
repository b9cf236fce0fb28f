//! Comparing the model with a measured run (the analysis half of `--validate`).
//!
//! A real run (server with a policy on the emulated disk) yields device counters over a
//! window of time — bytes read, reads, busy seconds — and a peak of prefetch memory; its
//! access log yields chains. [`compare`] simulates the same chains with the same policy on
//! one drive and reports the relative error of the model's utilization
//! (`Σ bytes/t_max + reads/s_max` of the reads inside the window, over the window) and of
//! its peak memory.

use serde::{Deserialize, Serialize};
use vodkit_prefetch::PolicySpec;

use crate::input::Trace;
use crate::model::{for_each_prefetch, ModelConfig, Scratch, Simulator};

/// What the real run measured over `[start_s, end_s)` on the trace's clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub start_s: f64,
    pub end_s: f64,
    pub read_bytes: u64,
    pub reads: u64,
    /// Seconds the device was busy.
    pub busy_s: f64,
    /// Peak memory held by prefetched data, when measured.
    pub peak_memory_bytes: Option<u64>,
}

/// Model against measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    pub window_s: f64,
    pub measured_util: f64,
    pub simulated_util: f64,
    /// `simulated / measured − 1`.
    pub util_error: f64,
    pub simulated_read_bytes: u64,
    pub simulated_reads: u64,
    pub measured_memory_bytes: Option<u64>,
    pub simulated_memory_bytes: u64,
    pub memory_error: Option<f64>,
}

/// Simulates `trace` under `spec` and compares with `m` (all chains are taken to be on the
/// measured device).
pub fn compare(
    trace: &Trace,
    cfg: ModelConfig,
    spec: &PolicySpec,
    m: &Measured,
) -> Result<Validation, String> {
    let window = m.end_s - m.start_s;
    if !(window.is_finite() && window > 0.0) {
        return Err(format!(
            "measurement window [{}, {}) is empty",
            m.start_s, m.end_s
        ));
    }
    if m.busy_s <= 0.0 {
        return Err("the measured device was never busy".into());
    }
    let mut policy = spec.build();
    let (mut bytes, mut reads) = (0u64, 0u64);
    for c in &trace.chains {
        for_each_prefetch(c, policy.as_mut(), |t, n| {
            if t >= m.start_s && t < m.end_s {
                bytes += n;
                reads += 1;
            }
        });
    }
    let simulated_util = cfg.capacity.busy_seconds(bytes as f64, reads as f64) / window;
    let measured_util = m.busy_s / window;
    let sim = Simulator::new(trace, cfg)?;
    let memory = sim
        .run(spec.build().as_mut(), &mut Scratch::default())
        .max_memory_bytes;
    Ok(Validation {
        window_s: window,
        measured_util,
        simulated_util,
        util_error: simulated_util / measured_util - 1.0,
        simulated_read_bytes: bytes,
        simulated_reads: reads,
        measured_memory_bytes: m.peak_memory_bytes,
        simulated_memory_bytes: memory,
        memory_error: m
            .peak_memory_bytes
            .filter(|&b| b > 0)
            .map(|b| memory as f64 / b as f64 - 1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::SimChain;
    use crate::model::Capacity;
    use vodkit_prefetch::ChainKind;

    #[test]
    fn error_against_a_hand_computed_measurement() {
        const MIB: u64 = 1 << 20;
        // 10 MiB from 0 to 100 s with 4 MiB reads: reads at 0, 40 and 80 s.
        let trace = Trace {
            chains: vec![SimChain {
                file: 0,
                drive: 0,
                offset: 0,
                bytes: 10 * MIB,
                t_start: 0.0,
                t_end: 100.0,
                kind: ChainKind::Other,
                bitrate_kbps: None,
                file_size: u64::MAX,
            }],
            files: vec!["f".into()],
            drives: vec!["d".into()],
        };
        let cfg = ModelConfig::new(Capacity::given(100.0, 40.0).unwrap());
        let spec: PolicySpec = "fixed:4MiB".parse().unwrap();
        // Window [0, 60): two reads, 8 MiB => 0.08 + 0.05 = 0.13 busy seconds.
        let m = Measured {
            start_s: 0.0,
            end_s: 60.0,
            read_bytes: 8 * MIB,
            reads: 2,
            busy_s: 0.13 * 1.25,
            peak_memory_bytes: Some(5 * MIB),
        };
        let v = compare(&trace, cfg, &spec, &m).unwrap();
        assert_eq!((v.simulated_reads, v.simulated_read_bytes), (2, 8 * MIB));
        assert!((v.simulated_util - 0.13 / 60.0).abs() < 1e-12);
        assert!((v.util_error - (1.0 / 1.25 - 1.0)).abs() < 1e-9, "{v:?}");
        assert_eq!(v.simulated_memory_bytes, 4 * MIB);
        assert!((v.memory_error.unwrap() + 0.2).abs() < 1e-12);
        let empty = Measured { end_s: 0.0, ..m };
        assert!(compare(&trace, cfg, &spec, &empty).is_err());
    }
}

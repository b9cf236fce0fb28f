//! Comparing the model with a measured run (the analysis half of `--validate`).
//!
//! A real run (server with a policy on the emulated disk) yields device counters over a
//! window of time — bytes read, reads, busy seconds — and a peak of prefetch memory; its
//! access log yields chains. [`compare`] simulates the same chains with the same policy on
//! one drive and reports the relative error of the model's utilization
//! (`Σ bytes/t_max + reads/s_max` of the reads inside the window, over the window) and of
//! its peak memory.
//!
//! [`against_drive_model`] is the check that needs no real run: it replays the simulated
//! reads through the timing model the emulated disk uses (`vodkit_disk::Drive`: zoned
//! transfer rates, seek curve, rotational latency, FIFO) and compares each drive's busy
//! time per interval with the linear `bytes/t_max + seeks/s_max` of the simulator.

use serde::{Deserialize, Serialize};
use vodkit_prefetch::PolicySpec;

use vodkit_disk::model::{Drive, DriveOptions, DriveSpec};

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
    /// Peak of the simulated prefetched bytes not yet consumed ([`outstanding_peak`]): the
    /// quantity the measured peak is, where `simulated_memory_bytes` is the model's
    /// whole-buffer accounting.
    pub simulated_outstanding_bytes: u64,
    /// `simulated_outstanding / measured − 1`.
    pub outstanding_error: Option<f64>,
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
    let outstanding = outstanding_peak(trace, spec, cfg.release_after_s);
    let error_of = |sim: u64| {
        m.peak_memory_bytes
            .filter(|&b| b > 0)
            .map(|b| sim as f64 / b as f64 - 1.0)
    };
    Ok(Validation {
        window_s: window,
        measured_util,
        simulated_util,
        util_error: simulated_util / measured_util - 1.0,
        simulated_read_bytes: bytes,
        simulated_reads: reads,
        measured_memory_bytes: m.peak_memory_bytes,
        simulated_memory_bytes: memory,
        memory_error: error_of(memory),
        simulated_outstanding_bytes: outstanding,
        outstanding_error: error_of(outstanding),
    })
}

/// Peak over time of the prefetched bytes not yet consumed, summed over chains: a chain
/// holds what its reads fetched so far less its linear progress, from its start; past its
/// end what is left (the waste) stays until `release_after_s` later. Between reads every
/// chain's share only falls, so the peak is at one of the reads; all are checked.
pub fn outstanding_peak(trace: &Trace, spec: &PolicySpec, release_after_s: f64) -> u64 {
    let mut policy = spec.build();
    // Per chain: its reads (time, cumulative bytes after the read).
    let schedules: Vec<Vec<(f64, u64)>> = trace
        .chains
        .iter()
        .map(|c| {
            let mut reads = Vec::new();
            let mut total = 0u64;
            for_each_prefetch(c, policy.as_mut(), |t, n| {
                total += n;
                reads.push((t, total));
            });
            reads
        })
        .collect();
    let held = |i: usize, t: f64| -> f64 {
        let c = &trace.chains[i];
        if t < c.t_start || t >= c.t_end + release_after_s {
            return 0.0;
        }
        let fetched = schedules[i]
            .iter()
            .take_while(|&&(at, _)| at <= t)
            .last()
            .map_or(0, |&(_, f)| f) as f64;
        let span = c.t_end - c.t_start;
        let consumed = if span <= 0.0 || t >= c.t_end {
            c.bytes as f64
        } else {
            c.bytes as f64 * (t - c.t_start) / span
        };
        (fetched - consumed).max(0.0)
    };
    let mut peak = 0.0f64;
    for reads in &schedules {
        for &(t, _) in reads {
            let total: f64 = (0..trace.chains.len()).map(|i| held(i, t)).sum();
            peak = peak.max(total);
        }
    }
    peak.round() as u64
}

/// The simulator's utilization against the drive timing model, per drive and interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriveModelCheck {
    /// Highest utilization of the simulator (linear model) and of the drive model.
    pub linear_max_util: f64,
    pub drive_model_max_util: f64,
    /// `linear / drive model − 1` of those maxima.
    pub max_util_error: f64,
    /// Mean of `|linear / drive model − 1|` over the cells where the drive model is at
    /// least 5% busy, and how many cells that is.
    pub mean_abs_cell_error: f64,
    pub cells: usize,
}

/// Replays `spec`'s reads of every chain through `drive` (one per trace drive, files at
/// fixed pseudo-random positions, reads in arrival order) and compares busy time per
/// interval with the simulator's linear model. Reads are charged to the interval they
/// arrive in, in both models.
pub fn against_drive_model(
    trace: &Trace,
    cfg: ModelConfig,
    spec: &PolicySpec,
    drive: &DriveSpec,
) -> Result<DriveModelCheck, String> {
    let sim = Simulator::new(trace, cfg)?;
    let drives = trace.drives.len().max(1);
    let intervals = sim.intervals();
    let origin = trace.origin_s();
    // (arrival, disk address, bytes) per drive.
    let mut reads: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); drives];
    let mut policy = spec.build();
    let room = drive.capacity_bytes.saturating_sub(8 << 30).max(1);
    for c in &trace.chains {
        let base = (mix(u64::from(c.file)) % room) & !4095;
        let mut fetched = 0u64;
        for_each_prefetch(c, policy.as_mut(), |t, n| {
            reads[c.drive as usize].push((t, base + c.offset + fetched, n));
            fetched += n;
        });
    }
    let cell = |d: usize, t: f64| {
        let i = (((t - origin) / cfg.interval_s) as usize).min(intervals - 1);
        i * drives + d
    };
    let mut linear = vec![0.0f64; intervals * drives];
    let mut modelled = vec![0.0f64; intervals * drives];
    for (d, list) in reads.iter_mut().enumerate() {
        list.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut dm = Drive::new(drive.clone(), DriveOptions::default());
        for &(t, addr, n) in list.iter() {
            let k = cell(d, t);
            linear[k] += cfg.capacity.busy_seconds(n as f64, 1.0);
            modelled[k] += dm.access(addr, n, t).busy();
        }
    }
    let max = |v: &[f64]| v.iter().fold(0.0f64, |a, &b| a.max(b)) / cfg.interval_s;
    let (lin, dm) = (max(&linear), max(&modelled));
    if dm <= 0.0 {
        return Err("no reads to compare".into());
    }
    let floor = 0.05 * cfg.interval_s;
    let errors: Vec<f64> = linear
        .iter()
        .zip(&modelled)
        .filter(|(_, &m)| m >= floor)
        .map(|(&l, &m)| (l / m - 1.0).abs())
        .collect();
    Ok(DriveModelCheck {
        linear_max_util: lin,
        drive_model_max_util: dm,
        max_util_error: lin / dm - 1.0,
        mean_abs_cell_error: errors.iter().sum::<f64>() / errors.len().max(1) as f64,
        cells: errors.len(),
    })
}

/// A fixed scramble of a file id into a disk position.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::SimChain;
    use crate::model::Capacity;
    use vodkit_prefetch::ChainKind;

    const MIB: u64 = 1 << 20;

    fn chain(file: u32, bytes: u64, t_start: f64, t_end: f64) -> SimChain {
        SimChain {
            file,
            drive: 0,
            offset: 0,
            bytes,
            t_start,
            t_end,
            kind: ChainKind::Other,
            bitrate_kbps: None,
            file_size: u64::MAX,
        }
    }

    fn trace_of(chains: Vec<SimChain>) -> Trace {
        Trace {
            files: (0..chains.len()).map(|i| format!("f{i}")).collect(),
            drives: vec!["d".into()],
            chains,
        }
    }

    #[test]
    fn outstanding_bytes_of_overlapping_chains() {
        let spec: PolicySpec = "fixed:4MiB".parse().unwrap();
        // Chain A: 10 MiB over 0..100 s, reads at 0, 40, 80 s (12 MiB, 2 MiB wasted).
        // Chain B: the same over 20..120 s, reads at 20, 60, 100 s.
        // At 20 s: A holds 4 - 2 = 2 MiB, B 4 MiB; every read finds 6 MiB in all.
        let two = trace_of(vec![
            chain(0, 10 * MIB, 0.0, 100.0),
            chain(1, 10 * MIB, 20.0, 120.0),
        ]);
        assert_eq!(outstanding_peak(&two, &spec, 40.0), 6 * MIB);
        // B reading at 100 s: A's end leaves its 2 MiB of waste, kept 40 s more.
        let late = trace_of(vec![
            chain(0, 10 * MIB, 0.0, 100.0),
            chain(1, 4 * MIB, 100.0, 200.0),
        ]);
        assert_eq!(outstanding_peak(&late, &spec, 40.0), 6 * MIB);
        assert_eq!(outstanding_peak(&late, &spec, 0.0), 4 * MIB);
    }

    #[test]
    fn error_against_a_hand_computed_measurement() {
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
        // Outstanding: 4 MiB right after each read (0, 40, 80 s).
        assert_eq!(v.simulated_outstanding_bytes, 4 * MIB);
        assert!((v.outstanding_error.unwrap() + 0.2).abs() < 1e-12);
        let empty = Measured { end_s: 0.0, ..m };
        assert!(compare(&trace, cfg, &spec, &empty).is_err());
    }
}

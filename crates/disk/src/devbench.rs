//! Read benchmarks against an emulated (or real) block device with direct I/O: sequential
//! throughput at the outer and inner ends, random 2 MiB and 128 KiB reads, each beside the
//! preset's published figure and the model's prediction for the same pattern.

use crate::model::{capacity, expected_random_mb_s, Drive, DriveOptions, DriveSpec, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

/// How much to read in each test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BenchOptions {
    /// Bytes read sequentially at each end.
    pub sequential_bytes: u64,
    /// Size of each sequential read call.
    pub sequential_chunk: u64,
    pub random_2m_reads: u32,
    pub random_128k_reads: u32,
    pub seed: u64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            sequential_bytes: 64 << 20,
            sequential_chunk: 16 << 20,
            random_2m_reads: 40,
            random_128k_reads: 80,
            seed: 1,
        }
    }
}

/// One benchmark line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    pub test: String,
    pub reads: u64,
    pub bytes: u64,
    pub secs: f64,
    pub mb_s: f64,
    pub ms_per_read: f64,
    /// What the model predicts for this pattern, MB/s.
    pub model_mb_s: f64,
    /// The drive's published figure, when there is one.
    pub published_mb_s: Option<f64>,
}

impl BenchRow {
    /// Relative deviation of the measurement from the published figure, or from the
    /// model when nothing is published.
    pub fn deviation(&self) -> f64 {
        let reference = self.published_mb_s.unwrap_or(self.model_mb_s);
        (self.mb_s - reference) / reference
    }
}

/// Results of [`run`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub device: String,
    pub preset: String,
    pub rows: Vec<BenchRow>,
}

/// A 4 KiB-aligned buffer for `O_DIRECT` reads.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let layout =
            std::alloc::Layout::from_size_align(len.max(4096), 4096).expect("valid layout");
        // SAFETY: non-zero size, valid alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        AlignedBuf { ptr, layout }
    }

    fn slice(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: the allocation holds at least `layout.size()` bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len.min(self.layout.size())) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Time reads at `offsets`; with `position_first`, the first read only brings the head
/// to the start of a sequential run and is not timed.
fn timed_reads(
    file: &std::fs::File,
    offsets: &[u64],
    len: u64,
    position_first: bool,
) -> std::io::Result<f64> {
    let mut buf = AlignedBuf::new(len as usize);
    let mut offsets = offsets;
    if position_first {
        if let Some((&first, rest)) = offsets.split_first() {
            file.read_exact_at(buf.slice(len as usize), first)?;
            offsets = rest;
        }
    }
    let start = Instant::now();
    for &off in offsets {
        file.read_exact_at(buf.slice(len as usize), off)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

fn row(
    test: &str,
    offsets: &[u64],
    len: u64,
    secs: f64,
    model_mb_s: f64,
    published: Option<f64>,
) -> BenchRow {
    let bytes = offsets.len() as u64 * len;
    BenchRow {
        test: test.to_string(),
        reads: offsets.len() as u64,
        bytes,
        secs,
        mb_s: bytes as f64 / MIB / secs,
        ms_per_read: secs * 1000.0 / offsets.len() as f64,
        model_mb_s,
        published_mb_s: published,
    }
}

/// One timed pattern of the benchmark.
struct Pattern {
    test: &'static str,
    offsets: Vec<u64>,
    len: u64,
    /// The first read only positions the head (sequential runs).
    position_first: bool,
    published: Option<f64>,
}

/// The reads of [`run`], in order.
fn patterns(size: u64, spec: &DriveSpec, opts: &BenchOptions) -> Vec<Pattern> {
    let chunk = opts.sequential_chunk.max(4096) / 4096 * 4096;
    let count = (opts.sequential_bytes / chunk).max(1) + 1;
    let inner_start = (size - count * chunk) / 4096 * 4096;
    let p = &spec.published;
    let mut out = vec![
        Pattern {
            test: "sequential outer",
            offsets: (0..count).map(|i| i * chunk).collect(),
            len: chunk,
            position_first: true,
            published: p.outer_mb_s,
        },
        Pattern {
            test: "sequential inner",
            offsets: (0..count).map(|i| inner_start + i * chunk).collect(),
            len: chunk,
            position_first: true,
            published: p.inner_mb_s,
        },
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    for (test, len, n, published) in [
        (
            "random 2 MiB",
            2u64 << 20,
            opts.random_2m_reads,
            p.random_2mb_mb_s,
        ),
        ("random 128 KiB", 128 << 10, opts.random_128k_reads, None),
    ] {
        let slots = size / len;
        let offsets = (0..n.max(1))
            .map(|_| rng.random_range(0..slots) * len)
            .collect();
        out.push(Pattern {
            test,
            offsets,
            len,
            position_first: false,
            published,
        });
    }
    out
}

/// Modelled seconds of each pattern's timed reads, served back to back in order on one
/// drive (so the model column is the prediction for exactly these reads).
fn model_secs(spec: &DriveSpec, size: u64, patterns: &[Pattern]) -> Vec<f64> {
    let mut drive = Drive::new(spec.clone(), DriveOptions::default()).with_span(size);
    let mut now = 0.0;
    patterns
        .iter()
        .map(|p| {
            let mut secs = 0.0;
            for (i, &off) in p.offsets.iter().enumerate() {
                let svc = drive.access(off, p.len, now);
                now = svc.finish;
                if !(p.position_first && i == 0) {
                    secs += svc.busy();
                }
            }
            secs
        })
        .collect()
}

/// Benchmark `device` (opened read-only with `O_DIRECT`), `size` bytes long, standing for
/// the whole surface of `spec`. The calling thread runs with real-time priority while it
/// measures (when permitted), so a busy machine delays the reads less.
pub fn run(
    device: &Path,
    size: u64,
    spec: &DriveSpec,
    opts: &BenchOptions,
) -> std::io::Result<BenchReport> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(device)?;
    let patterns = patterns(size, spec, opts);
    let predicted = model_secs(spec, size, &patterns);
    let _priority = RealtimeGuard::enter();
    let mut rows = Vec::new();
    for (p, model) in patterns.iter().zip(predicted) {
        let secs = timed_reads(&file, &p.offsets, p.len, p.position_first)?;
        let timed = if p.position_first {
            &p.offsets[1..]
        } else {
            &p.offsets[..]
        };
        let bytes = timed.len() as u64 * p.len;
        rows.push(row(
            p.test,
            timed,
            p.len,
            secs,
            bytes as f64 / MIB / model,
            p.published,
        ));
    }
    Ok(BenchReport {
        device: device.display().to_string(),
        preset: spec.name.clone(),
        rows,
    })
}

/// Round-robin priority for the calling thread until dropped.
struct RealtimeGuard {
    promoted: bool,
}

impl RealtimeGuard {
    fn enter() -> Self {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: changes only the calling thread's scheduling policy.
        let promoted = unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) } == 0;
        RealtimeGuard { promoted }
    }
}

impl Drop for RealtimeGuard {
    fn drop(&mut self) {
        if self.promoted {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: restores the calling thread's normal policy.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        }
    }
}

/// The model's own figures for a preset (no device needed): the same table as [`run`]
/// plus Eq. 5.4 capacities.
pub fn model_table(spec: &DriveSpec) -> Vec<(String, f64, Option<f64>)> {
    let c = capacity(spec);
    let p = &spec.published;
    vec![
        (
            "sequential outer MB/s".into(),
            spec.zones.rate_at(0.0) / MIB,
            p.outer_mb_s,
        ),
        (
            "sequential middle MB/s".into(),
            spec.zones.rate_at(0.5) / MIB,
            p.middle_mb_s,
        ),
        (
            "sequential inner MB/s".into(),
            spec.zones.rate_at(1.0) / MIB,
            p.inner_mb_s,
        ),
        ("random 2 MiB MB/s".into(), c.random_mb_s, p.random_2mb_mb_s),
        (
            "random 128 KiB MB/s".into(),
            expected_random_mb_s(spec, 128.0 * 1024.0),
            None,
        ),
        (
            "full stroke ms".into(),
            spec.seek.ms(1.0) + crate::model::spec::half_rotation_ms(spec.rpm),
            p.full_stroke_ms,
        ),
        (
            "half stroke ms".into(),
            spec.seek.ms(0.5) + crate::model::spec::half_rotation_ms(spec.rpm),
            p.half_stroke_ms,
        ),
        (
            "quarter stroke ms".into(),
            spec.seek.ms(0.25) + crate::model::spec::half_rotation_ms(spec.rpm),
            p.quarter_stroke_ms,
        ),
        (
            "t_max MB/s (Eq. 5.4)".into(),
            c.t_max_mb_s,
            p.sequential_2mb_mb_s,
        ),
        (
            "s_max seeks/s (Eq. 5.4)".into(),
            c.s_max_per_s,
            p.s_max_per_s,
        ),
    ]
}

//! Chain statistics (thesis 5.3): Table 5.4 by kind and media, the length CDFs by count and
//! by bytes (Fig. 5.11), zero-offset chains by kind (Fig. 5.12), the CCDF with its
//! piecewise power-law fit (Fig. 5.13) and survival growth factors.

use std::io::{Read, Write};
use std::path::Path;

use serde::Serialize;
use vodkit_workload::order::MergeKey;

use crate::chain::{kind_name, ChainRec};
use crate::files::{media_label, media_slot, FileInfo, MEDIA};
use crate::fit::{growth_factor, PowerLawFit};
use crate::record::RequestKind;
use crate::runfile;
use crate::spill::{Merged, Record, Runs};
use vodkit_prefetch::ChainKind;

/// Length an open-ended client reads from offset 0 for its segment table (thesis 5.3.2).
pub const OPEN_HEADER_READ: u64 = 786_432;

#[derive(Clone, Copy, Debug, Default)]
struct RowAcc {
    chains: u64,
    requests: u64,
    bytes: u64,
    title_s: f64,
    title_chains: u64,
}

impl Tally for RowAcc {
    fn add(&mut self, o: &RowAcc) {
        self.chains += o.chains;
        self.requests += o.requests;
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.title_s += o.title_s;
        self.title_chains += o.title_chains;
    }

    fn is_empty(&self) -> bool {
        self.chains == 0
    }
}

/// What a table by request kind and media (Tables 5.2 and 5.4) counts in each cell.
pub(crate) trait Tally: Default {
    /// Counts `o` in too.
    fn add(&mut self, o: &Self);
    /// Nothing was counted (the cell gets no row).
    fn is_empty(&self) -> bool;
}

/// The rows of a table by request kind and media: each cell with anything counted, each
/// kind's total (media "total") after its cells, and last the total of all ("all",
/// "total"); `row(kind, media, tally)` makes one.
pub(crate) fn kind_media_rows<T: Tally, R>(
    cells: &[[T; MEDIA.len()]; 2],
    row: impl Fn(&'static str, &'static str, &T) -> R,
) -> Vec<R> {
    let mut rows = Vec::new();
    let mut all = T::default();
    for (cells, kind) in cells.iter().zip([RequestKind::Open, RequestKind::Chunk]) {
        let mut total = T::default();
        for (cell, media) in cells.iter().zip(MEDIA) {
            total.add(cell);
            if !cell.is_empty() {
                rows.push(row(kind_name(kind), media_label(media), cell));
            }
        }
        all.add(&total);
        rows.push(row(kind_name(kind), "total", &total));
    }
    rows.push(row("all", "total", &all));
    rows
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
pub(crate) fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// Nominal title seconds of `bytes` at `kbps`.
pub fn title_seconds(bytes: u64, kbps: u32) -> f64 {
    bytes as f64 * 8.0 / (f64::from(kbps) * 1000.0)
}

/// Collects chains as sessions close; [`ChainStatsBuilder::finish`] summarizes.
///
/// The CDFs, the CCDF and the fit are exact, so every chain's length is kept to the end: in
/// memory up to a budget, past it in sorted runs on disk ([`Runs`]). The summary then takes
/// one pass over the lengths merged in order, counting them (and their bytes) below every
/// length it will ask about, which it knows beforehand: the grid, 1 MB, 10 MB and the
/// fit's sample points ([`PowerLawFit::sample_points`], from the smallest and largest
/// length, counted as chains are added).
pub struct ChainStatsBuilder {
    rows: [[RowAcc; MEDIA.len()]; 2],
    lengths: Runs<Length>,
    /// Chains of each class (open at offset 0, chunk at offset 0, other) and those of
    /// exactly [`OPEN_HEADER_READ`] bytes.
    per_class: [u64; 3],
    header_reads: [u64; 3],
    zeros: u64,
    /// Smallest nonzero and largest length (`u64::MAX` and 0 before any).
    min_nonzero: u64,
    max: u64,
    total_bytes: u64,
    /// The first error writing a run, reported by [`ChainStatsBuilder::finish`].
    error: Option<std::io::Error>,
}

impl Default for ChainStatsBuilder {
    /// Statistics that keep every length in memory.
    fn default() -> Self {
        ChainStatsBuilder::new(&std::env::temp_dir(), usize::MAX)
    }
}

impl ChainStatsBuilder {
    /// Statistics whose chain lengths past `budget` bytes in memory go to sorted runs in a
    /// temporary directory under `dir`.
    pub fn new(dir: &Path, budget: usize) -> Self {
        ChainStatsBuilder {
            rows: Default::default(),
            lengths: Runs::new(dir, budget),
            per_class: [0; 3],
            header_reads: [0; 3],
            zeros: 0,
            min_nonzero: u64::MAX,
            max: 0,
            total_bytes: 0,
            error: None,
        }
    }

    pub fn add(&mut self, c: &ChainRec, f: &FileInfo) {
        let k = usize::from(c.kind == RequestKind::Chunk);
        let row = &mut self.rows[k][media_slot(f.media)];
        row.chains += 1;
        row.requests += u64::from(c.requests);
        row.bytes = row.bytes.saturating_add(c.bytes);
        if let Some(kbps) = f.bitrate_kbps.filter(|&b| b > 0) {
            row.title_s += title_seconds(c.bytes, kbps);
            row.title_chains += 1;
        }
        let class = match c.chain_kind() {
            ChainKind::OpenAtZero => 0,
            ChainKind::ChunkAtZero => 1,
            ChainKind::Other => 2,
        };
        self.per_class[class] += 1;
        self.header_reads[class] += u64::from(c.bytes == OPEN_HEADER_READ);
        if c.bytes == 0 {
            self.zeros += 1;
        } else {
            self.min_nonzero = self.min_nonzero.min(c.bytes);
        }
        self.max = self.max.max(c.bytes);
        self.total_bytes = self.total_bytes.saturating_add(c.bytes);
        if self.error.is_none() {
            let length = Length {
                bytes: c.bytes,
                class: class as u8,
            };
            if let Err(e) = self.lengths.push(length) {
                self.error = Some(e);
            }
        }
    }

    pub fn chains(&self) -> usize {
        self.per_class.iter().sum::<u64>() as usize
    }

    /// Bytes the lengths hold in memory (those on disk not counted).
    pub fn bytes(&self) -> usize {
        self.lengths.held()
    }

    /// Bytes of lengths written to disk so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.lengths.spilled
    }

    pub fn finish(
        self,
        breakpoints: &[f64],
        probabilities: &[f64],
    ) -> std::io::Result<ChainSummary> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let total_chains: u64 = self.per_class.iter().sum();
        let total_bytes = self.total_bytes;
        let table = kind_media_rows(&self.rows, |kind, media, acc| {
            TableRow::new(kind, media, acc, total_chains)
        });
        let grid = log_grid();
        let nonzero = (self.min_nonzero <= self.max).then_some((self.min_nonzero, self.max));
        let mut at = grid.clone();
        at.push(1e6);
        if let Some((lo, hi)) = nonzero {
            at.extend(PowerLawFit::sample_points(lo, hi, breakpoints));
        }
        let below = Below::count(self.lengths.finish()?, at)?;
        let le = |x: f64| below.at(x).chains;
        let pct = |a: u64, b: u64| percent(a as f64, b as f64);
        let length_cdf = grid
            .iter()
            .map(|&x| {
                let b = below.at(x);
                CdfPoint {
                    bytes: x,
                    chains_pct: pct(b.chains, total_chains),
                    bytes_pct: pct(b.bytes, total_bytes),
                }
            })
            .collect();
        let ccdf = grid
            .iter()
            .map(|&x| [x, pct(total_chains - le(x), total_chains)])
            .filter(|p| p[1] > 0.0)
            .collect();
        let class_cdf = |class: usize| {
            let n = self.per_class[class];
            ZeroOffsetClass {
                chains: n,
                exactly_open_header_read_pct: pct(self.header_reads[class], n),
                cdf: grid
                    .iter()
                    .map(|&x| [x, pct(below.at(x).by_class[class], n)])
                    .collect(),
            }
        };
        let zero_open = class_cdf(0);
        let zero_chunk = class_cdf(1);
        let fit = match nonzero {
            Some((lo, hi)) => {
                let n = total_chains - self.zeros;
                PowerLawFit::fit_survival(lo, hi, breakpoints, |x| {
                    (n - (le(x) - self.zeros)) as f64 / n as f64
                })
            }
            None => PowerLawFit::default(),
        };
        let survival = probabilities
            .iter()
            .map(|&p| SurvivalRow {
                p,
                segments: fit
                    .segments
                    .iter()
                    .map(|s| SurvivalSegment {
                        lo: s.lo,
                        hi: s.hi,
                        c: s.c,
                        growth: growth_factor(p, s.c),
                    })
                    .collect(),
            })
            .collect();
        Ok(ChainSummary {
            chains: total_chains,
            requests: self.rows.iter().flatten().map(|a| a.requests).sum(),
            bytes: total_bytes,
            chains_le_1mb_pct: pct(le(1e6), total_chains),
            bytes_in_chains_gt_10mb_pct: pct(below.over_10mb, total_bytes),
            table_5_4: table,
            length_cdf,
            zero_offset: ZeroOffset {
                share_pct: pct(zero_open.chains + zero_chunk.chains, total_chains),
                open: zero_open,
                chunk: zero_chunk,
                nonzero: class_cdf(2),
            },
            ccdf,
            breakpoints: breakpoints.to_vec(),
            fit,
            survival,
        })
    }
}

/// One chain's length and class (0 open at offset 0, 1 chunk at offset 0, 2 other).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Length {
    bytes: u64,
    class: u8,
}

impl MergeKey for Length {
    fn merge_cmp(&self, other: &Length) -> std::cmp::Ordering {
        self.bytes
            .cmp(&other.bytes)
            .then(self.class.cmp(&other.class))
    }
}

impl Record for Length {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Length>()
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        runfile::put_u64(w, self.bytes)?;
        w.write_all(&[self.class])
    }

    fn read(r: &mut impl Read) -> std::io::Result<Option<Length>> {
        let Some(b) = runfile::first8(r)? else {
            return Ok(None);
        };
        let mut class = [0u8];
        r.read_exact(&mut class)?;
        Ok(Some(Length {
            bytes: u64::from_le_bytes(b),
            class: class[0],
        }))
    }
}

/// Chains (in all and by class) and their bytes at or below one length.
#[derive(Clone, Copy, Debug, Default)]
struct Tallied {
    chains: u64,
    by_class: [u64; 3],
    bytes: u64,
}

/// What lies at or below each of a set of lengths, counted in one pass over the lengths in
/// ascending order, and the bytes of chains over 10 MB.
struct Below {
    at: Vec<f64>,
    tallies: Vec<Tallied>,
    over_10mb: u64,
}

impl Below {
    fn count(mut lengths: Merged<Length>, mut at: Vec<f64>) -> std::io::Result<Below> {
        at.sort_by(f64::total_cmp);
        at.dedup();
        let mut tallies = Vec::with_capacity(at.len());
        let (mut t, mut over_10mb) = (Tallied::default(), 0u64);
        while let Some(l) = lengths.next_record()? {
            let x = l.bytes as f64;
            while tallies.len() < at.len() && x > at[tallies.len()] {
                tallies.push(t);
            }
            t.chains += 1;
            if let Some(c) = t.by_class.get_mut(usize::from(l.class)) {
                *c += 1;
            }
            t.bytes = t.bytes.saturating_add(l.bytes);
            if l.bytes > 10_000_000 {
                over_10mb = over_10mb.saturating_add(l.bytes);
            }
        }
        tallies.resize(at.len(), t);
        Ok(Below {
            at,
            tallies,
            over_10mb,
        })
    }

    /// The tally at `x`, one of the lengths counted at.
    fn at(&self, x: f64) -> Tallied {
        let i = self.at.partition_point(|&a| a < x);
        self.tallies.get(i).copied().unwrap_or_default()
    }
}

fn log_grid() -> Vec<f64> {
    (20..=110)
        .map(|k| 10f64.powf(f64::from(k) / 10.0))
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct TableRow {
    pub kind: String,
    pub media: String,
    pub chains: u64,
    pub share_pct: f64,
    pub requests_per_chain: f64,
    pub mb_per_chain: f64,
    /// Nominal title seconds per chain (chains of files with a known bit rate).
    pub title_s_per_chain: Option<f64>,
}

impl TableRow {
    fn new(kind: &str, media: &str, a: &RowAcc, total: u64) -> TableRow {
        let per = |x: f64| {
            if a.chains == 0 {
                0.0
            } else {
                x / a.chains as f64
            }
        };
        TableRow {
            kind: kind.to_string(),
            media: media.to_string(),
            chains: a.chains,
            share_pct: percent(a.chains as f64, total as f64),
            requests_per_chain: per(a.requests as f64),
            mb_per_chain: per(a.bytes as f64) / 1e6,
            title_s_per_chain: (a.title_chains > 0).then(|| a.title_s / a.title_chains as f64),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CdfPoint {
    pub bytes: f64,
    /// Percent of chains no longer than `bytes`.
    pub chains_pct: f64,
    /// Percent of all bytes that are in chains no longer than `bytes`.
    pub bytes_pct: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ZeroOffsetClass {
    pub chains: u64,
    /// Percent of these chains exactly 768 KiB long.
    pub exactly_open_header_read_pct: f64,
    /// `[bytes, percent of chains no longer]`.
    pub cdf: Vec<[f64; 2]>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ZeroOffset {
    pub share_pct: f64,
    pub open: ZeroOffsetClass,
    pub chunk: ZeroOffsetClass,
    pub nonzero: ZeroOffsetClass,
}

#[derive(Clone, Debug, Serialize)]
pub struct SurvivalSegment {
    pub lo: f64,
    pub hi: f64,
    pub c: f64,
    /// d / x at this probability.
    pub growth: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SurvivalRow {
    pub p: f64,
    pub segments: Vec<SurvivalSegment>,
}

/// Everything `chains.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct ChainSummary {
    pub chains: u64,
    pub requests: u64,
    pub bytes: u64,
    pub chains_le_1mb_pct: f64,
    pub bytes_in_chains_gt_10mb_pct: f64,
    pub table_5_4: Vec<TableRow>,
    pub length_cdf: Vec<CdfPoint>,
    pub zero_offset: ZeroOffset,
    /// `[bytes, percent of chains longer]`.
    pub ccdf: Vec<[f64; 2]>,
    pub breakpoints: Vec<f64>,
    pub fit: PowerLawFit,
    pub survival: Vec<SurvivalRow>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use vodkit_workload::model::Media;

    fn rec(start: u64, bytes: u64, requests: u32, kind: RequestKind) -> ChainRec {
        ChainRec {
            file: 0,
            start,
            bytes,
            requests,
            t0: 0.0,
            t1: 1.0,
            kind,
            sent: bytes,
        }
    }

    #[test]
    fn lengths_spilled_past_their_budget_give_the_same_summary() {
        let video = FileInfo::of(Media::Video, 1000);
        let dir = tempfile::tempdir().unwrap();
        let mut held = ChainStatsBuilder::default();
        // 4,000 lengths of 16 bytes each against a 1 KiB budget: dozens of runs.
        let mut spilled = ChainStatsBuilder::new(dir.path(), 1024);
        let mut all: Vec<u64> = Vec::new();
        let mut x = 7u64;
        for i in 0..4000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Lengths over eight decades, some zero, some the open header read, ties.
            let bytes = match i % 50 {
                0 => 0,
                1 => OPEN_HEADER_READ,
                _ => 10u64.pow(2 + (x >> 60) as u32 % 8) + (x >> 20) % 1000,
            };
            let kind = if i % 3 == 0 {
                RequestKind::Open
            } else {
                RequestKind::Chunk
            };
            let c = rec(
                if i % 4 == 0 { 0 } else { 10 },
                bytes,
                1 + (i % 7) as u32,
                kind,
            );
            held.add(&c, &video);
            spilled.add(&c, &video);
            all.push(bytes);
        }
        assert_eq!(held.spilled_bytes(), 0);
        assert!(spilled.spilled_bytes() > 0);
        assert!(spilled.bytes() <= 1024 + 16, "{}", spilled.bytes());
        let a = held.finish(&[1e6, 2e8], &[0.45, 0.9]).unwrap();
        let b = spilled.finish(&[1e6, 2e8], &[0.45, 0.9]).unwrap();
        assert!(a.fit.segments.len() >= 2, "{:?}", a.fit);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        // The summary from the lengths agrees with the fit taken over the sorted lengths.
        assert_eq!(a.fit, PowerLawFit::fit(&all, &[1e6, 2e8]));
        // The run directory is gone with the builder.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn table_and_cdfs_from_hand_built_chains() {
        let video = FileInfo::of(Media::Video, 1000);
        let audio = FileInfo::of(Media::Audio, 100);
        let mut b = ChainStatsBuilder::default();
        b.add(&rec(0, OPEN_HEADER_READ, 1, RequestKind::Open), &video);
        b.add(&rec(0, 10_000, 1, RequestKind::Chunk), &video);
        b.add(&rec(5_000, 2_000_000, 10, RequestKind::Chunk), &video);
        b.add(&rec(7, 125_000, 3, RequestKind::Chunk), &audio);
        let s = b.finish(&[1e6, 2e8], &[0.45]).unwrap();
        assert_eq!(s.chains, 4);
        assert_eq!(s.requests, 15);
        let chunk_video = s
            .table_5_4
            .iter()
            .find(|r| r.kind == "chunk" && r.media == "video")
            .unwrap();
        assert_eq!(chunk_video.chains, 2);
        assert!((chunk_video.share_pct - 50.0).abs() < 1e-9);
        assert!((chunk_video.requests_per_chain - 5.5).abs() < 1e-9);
        // 2,010,000 bytes at 1000 kbit/s = 16.08 s over two chains.
        assert!((chunk_video.title_s_per_chain.unwrap() - 8.04).abs() < 1e-9);
        let audio_row = s.table_5_4.iter().find(|r| r.media == "audio").unwrap();
        assert!((audio_row.title_s_per_chain.unwrap() - 10.0).abs() < 1e-9);
        assert!((s.chains_le_1mb_pct - 75.0).abs() < 1e-9);
        assert_eq!(s.zero_offset.open.chains, 1);
        assert_eq!(s.zero_offset.open.exactly_open_header_read_pct, 100.0);
        assert_eq!(s.zero_offset.chunk.chains, 1);
        assert!((s.zero_offset.share_pct - 50.0).abs() < 1e-9);
        let last = s.length_cdf.last().unwrap();
        assert_eq!((last.chains_pct, last.bytes_pct), (100.0, 100.0));
    }
}

//! Chain statistics (thesis 5.3): Table 5.4 by kind and media, the length CDFs by count and
//! by bytes (Fig. 5.11), zero-offset chains by kind (Fig. 5.12), the CCDF with its
//! piecewise power-law fit (Fig. 5.13) and survival growth factors.

use serde::Serialize;

use crate::chain::{kind_name, ChainRec};
use crate::files::{media_label, media_slot, FileInfo, MEDIA};
use crate::fit::{growth_factor, PowerLawFit};
use crate::record::RequestKind;
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
#[derive(Debug, Default)]
pub struct ChainStatsBuilder {
    rows: [[RowAcc; MEDIA.len()]; 2],
    /// Chain lengths by class: 0 = open at offset 0, 1 = chunk at offset 0, 2 = other.
    lengths: [Vec<u64>; 3],
}

impl ChainStatsBuilder {
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
        self.lengths[class].push(c.bytes);
    }

    pub fn chains(&self) -> usize {
        self.lengths.iter().map(Vec::len).sum()
    }

    /// Heap bytes held: every chain's length (8 bytes a chain; [`Self::finish`] needs as
    /// much again).
    pub fn bytes(&self) -> usize {
        self.lengths
            .iter()
            .map(|v| v.capacity() * std::mem::size_of::<u64>())
            .sum()
    }

    /// All chain lengths, in no particular order (for fits by callers).
    pub fn lengths(&self) -> Vec<u64> {
        self.lengths.concat()
    }

    pub fn finish(mut self, breakpoints: &[f64], probabilities: &[f64]) -> ChainSummary {
        for v in &mut self.lengths {
            v.sort_unstable();
        }
        let mut lengths = self.lengths.concat();
        lengths.sort_unstable();
        let total_chains = lengths.len() as u64;
        let total_bytes: u64 = lengths.iter().fold(0u64, |a, &l| a.saturating_add(l));
        let table = kind_media_rows(&self.rows, |kind, media, acc| {
            TableRow::new(kind, media, acc, total_chains)
        });

        let grid = log_grid();
        let le = |x: f64| lengths.partition_point(|&l| l as f64 <= x);
        let pct = |a: u64, b: u64| percent(a as f64, b as f64);
        // Bytes in chains no longer than each point of the grid (ascending), summed on.
        let (mut below, mut summed) = (0u64, 0);
        let length_cdf = grid
            .iter()
            .map(|&x| {
                let i = le(x);
                below = lengths[summed..i]
                    .iter()
                    .fold(below, |a, &l| a.saturating_add(l));
                summed = i;
                CdfPoint {
                    bytes: x,
                    chains_pct: pct(i as u64, total_chains),
                    bytes_pct: pct(below, total_bytes),
                }
            })
            .collect();
        let ccdf = grid
            .iter()
            .map(|&x| [x, pct(total_chains - le(x) as u64, total_chains)])
            .filter(|p| p[1] > 0.0)
            .collect();
        let class_cdf = |class: usize| {
            let v = &self.lengths[class];
            let n = v.len() as u64;
            ZeroOffsetClass {
                chains: n,
                exactly_open_header_read_pct: pct(
                    v.iter().filter(|&&l| l == OPEN_HEADER_READ).count() as u64,
                    n,
                ),
                cdf: grid
                    .iter()
                    .map(|&x| [x, pct(v.partition_point(|&l| l as f64 <= x) as u64, n)])
                    .collect(),
            }
        };
        let zero_open = class_cdf(0);
        let zero_chunk = class_cdf(1);
        let fit = PowerLawFit::fit_sorted(&lengths, breakpoints);
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
        let big: u64 = lengths
            .iter()
            .filter(|&&l| l > 10_000_000)
            .fold(0u64, |a, &l| a.saturating_add(l));
        ChainSummary {
            chains: total_chains,
            requests: self.rows.iter().flatten().map(|a| a.requests).sum(),
            bytes: total_bytes,
            chains_le_1mb_pct: pct(le(1e6) as u64, total_chains),
            bytes_in_chains_gt_10mb_pct: pct(big, total_bytes),
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
        }
    }
}

/// Lengths 100 B .. 100 GB, ten points per decade.
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
    fn table_and_cdfs_from_hand_built_chains() {
        let video = FileInfo::of(Media::Video, 1000);
        let audio = FileInfo::of(Media::Audio, 100);
        let mut b = ChainStatsBuilder::default();
        b.add(&rec(0, OPEN_HEADER_READ, 1, RequestKind::Open), &video);
        b.add(&rec(0, 10_000, 1, RequestKind::Chunk), &video);
        b.add(&rec(5_000, 2_000_000, 10, RequestKind::Chunk), &video);
        b.add(&rec(7, 125_000, 3, RequestKind::Chunk), &audio);
        let s = b.finish(&[1e6, 2e8], &[0.45]);
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

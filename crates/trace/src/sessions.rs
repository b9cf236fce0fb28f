//! Session and request statistics (thesis 5.2): request types (Table 5.2), parallel
//! connections per file (Table 5.3), fraction of the title downloaded (Fig. 5.5), portions
//! of titles accessed (Fig. 5.6), start, end and pause positions (Fig. 5.7) and average
//! chunk request sizes by bit rate (Fig. 5.10).

use std::collections::BTreeMap;

use serde::Serialize;
use vodkit_workload::model::Media;

use crate::chain::ChainRec;
use crate::chainstats::{kind_media_rows, percent, title_seconds, Tally};
use crate::files::{media_label, media_slot, FileInfo, FileTable, MEDIA};
use crate::record::{LogRequest, RequestKind};
use crate::runfile;

const BINS: usize = 100;
/// The fraction-downloaded CCDF is read at 0%, 5%, …, 300% of the title.
const CCDF_STEPS: usize = 61;
const CCDF_STEP_PCT: f64 = 5.0;
/// Chains at offset 0 shorter than this are taken for segment-table reads.
const SEGMENT_TABLE_MAX: u64 = 1 << 20;

/// Highest concurrency seen for one file of one session, from the last few requests.
///
/// The requests are kept in a fixed ring inside the tracker (no heap block to chase on
/// every request); the count does not depend on their order.
#[derive(Clone, Debug, Default)]
pub struct ParallelTracker {
    /// Activity interval and connection (meaningful where `with_conn` has the bit).
    recent: [(f64, f64, u64); ParallelTracker::KEEP],
    /// Bit `i`: `recent[i]` names its connection.
    with_conn: u8,
    /// Requests held, and the slot of the oldest.
    len: u8,
    oldest: u8,
    pub max: u32,
}

impl ParallelTracker {
    const KEEP: usize = 8;

    fn slot(&self, i: usize) -> (f64, f64, Option<u64>) {
        let (a, b, c) = self.recent[i];
        (a, b, (self.with_conn >> i & 1 == 1).then_some(c))
    }

    /// The requests held, oldest first.
    fn held(&self) -> impl Iterator<Item = (f64, f64, Option<u64>)> + '_ {
        (0..usize::from(self.len)).map(|k| self.slot((usize::from(self.oldest) + k) % Self::KEEP))
    }

    fn push(&mut self, (a, b, c): (f64, f64, Option<u64>)) {
        let i = if usize::from(self.len) == Self::KEEP {
            let i = usize::from(self.oldest);
            self.oldest = ((i + 1) % Self::KEEP) as u8;
            i
        } else {
            self.len += 1;
            (usize::from(self.oldest) + usize::from(self.len) - 1) % Self::KEEP
        };
        self.recent[i] = (a, b, c.unwrap_or(0));
        self.with_conn = (self.with_conn & !(1 << i)) | (u8::from(c.is_some()) << i);
    }

    /// Count the requests whose activity overlaps this one (distinct connections when the
    /// log names them).
    pub fn add(&mut self, r: &LogRequest<'_>) {
        let (a, b) = (r.recv_s(), r.done_s);
        // This request and at most KEEP recent ones: a fixed array, no allocation.
        let mut conns = [None; Self::KEEP + 1];
        conns[0] = r.conn;
        let mut n = 1;
        for i in 0..usize::from(self.len) {
            let (x, y, c) = self.slot(i);
            if x <= b && a <= y && (c.is_none() || !conns[..n].contains(&c)) {
                conns[n] = c;
                n += 1;
            }
        }
        self.max = self.max.max(n as u32);
        self.push((a, b, r.conn));
    }

    /// Write the tracker as it is (the requests oldest first), for [`ParallelTracker::get`].
    pub(crate) fn put(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        runfile::put_u32(w, self.max)?;
        let held: Vec<_> = self.held().collect();
        let too_long = "too many requests to spill";
        runfile::put_seq(w, &held, too_long, |w, &(a, b, c)| {
            runfile::put_f64(w, a)?;
            runfile::put_f64(w, b)?;
            w.write_all(&[u8::from(c.is_some())])?;
            runfile::put_u64(w, c.unwrap_or(0))
        })
    }

    /// A tracker written by [`ParallelTracker::put`], holding the same requests.
    pub(crate) fn get(r: &mut impl std::io::Read) -> std::io::Result<ParallelTracker> {
        let max = runfile::get_u32(r)?;
        let recent = runfile::get_seq(r, |r| {
            let a = runfile::get_f64(r)?;
            let b = runfile::get_f64(r)?;
            let some = runfile::get_u8(r)? == 1;
            let c = runfile::get_u64(r)?;
            Ok((a, b, some.then_some(c)))
        })?;
        if recent.len() > Self::KEEP {
            return Err(std::io::Error::other(
                "a spilled parallel-request tracker holds more requests than it keeps",
            ));
        }
        let mut t = ParallelTracker {
            max,
            ..ParallelTracker::default()
        };
        for x in recent {
            t.push(x);
        }
        Ok(t)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    requests: u64,
    bytes: u64,
}

impl Tally for Acc {
    fn add(&mut self, o: &Acc) {
        self.requests += o.requests;
        self.bytes = self.bytes.saturating_add(o.bytes);
    }

    fn is_empty(&self) -> bool {
        self.requests == 0
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct SizeAcc {
    requests: u64,
    bytes: u64,
}

/// Accumulates session statistics.
#[derive(Debug)]
pub struct SessionStatsBuilder {
    requests: [[Acc; MEDIA.len()]; 2],
    chunk_sizes: BTreeMap<(u8, u32), SizeAcc>,
    parallel: [u64; 6],
    /// Per media: sessions whose fraction downloaded first fits under each CCDF step
    /// ([`ccdf_step`]); the last slot counts those past every step.
    fraction: [[u64; CCDF_STEPS + 1]; 3],
    portions: [Vec<u64>; 2],
    portion_sessions: [u64; 2],
    starts: Vec<u64>,
    ends: Vec<u64>,
    pauses: Vec<u64>,
    sessions: u64,
    positioned: u64,
}

impl Default for SessionStatsBuilder {
    fn default() -> Self {
        SessionStatsBuilder {
            requests: Default::default(),
            chunk_sizes: BTreeMap::new(),
            parallel: [0; 6],
            fraction: [[0; CCDF_STEPS + 1]; 3],
            portions: [vec![0; BINS], vec![0; BINS]],
            portion_sessions: [0; 2],
            starts: vec![0; BINS],
            ends: vec![0; BINS],
            pauses: vec![0; BINS],
            sessions: 0,
            positioned: 0,
        }
    }
}

/// The first CCDF step `i` with `fraction × 100 ≤ 5i` (`CCDF_STEPS` when none is): a count
/// per step gives the same CCDF as keeping every session's fraction and sorting them.
fn ccdf_step(fraction: f32) -> usize {
    let pct = f64::from(fraction) * 100.0;
    (0..CCDF_STEPS)
        .find(|&i| pct <= i as f64 * CCDF_STEP_PCT)
        .unwrap_or(CCDF_STEPS)
}

fn bin(x: f64) -> usize {
    ((x * BINS as f64).floor().max(0.0) as usize).min(BINS - 1)
}

impl SessionStatsBuilder {
    pub fn on_request(&mut self, r: &LogRequest<'_>, f: &FileInfo) {
        let k = usize::from(r.kind == RequestKind::Chunk);
        let acc = &mut self.requests[k][media_slot(f.media)];
        acc.requests += 1;
        acc.bytes = acc.bytes.saturating_add(r.bytes_sent);
        if r.kind == RequestKind::Chunk {
            let key = (media_slot(f.media) as u8, f.bitrate_kbps.unwrap_or(0));
            let s = self.chunk_sizes.entry(key).or_default();
            s.requests += 1;
            s.bytes = s.bytes.saturating_add(r.extent);
        }
    }

    /// Add the request counts of `other` ([`SessionStatsBuilder::on_request`]; its sessions
    /// are not taken). Counts and saturating byte sums: the result does not depend on how
    /// the requests were split.
    pub fn merge_requests(&mut self, other: SessionStatsBuilder) {
        for (mine, theirs) in self
            .requests
            .iter_mut()
            .flatten()
            .zip(other.requests.iter().flatten())
        {
            mine.requests += theirs.requests;
            mine.bytes = mine.bytes.saturating_add(theirs.bytes);
        }
        for (key, a) in other.chunk_sizes {
            let s = self.chunk_sizes.entry(key).or_default();
            s.requests += a.requests;
            s.bytes = s.bytes.saturating_add(a.bytes);
        }
    }

    /// Close a session: `parallel` holds the max concurrency per file, `size` gives a file's
    /// size in bytes when known.
    pub fn add_session(
        &mut self,
        chains: &[ChainRec],
        parallel: &[u32],
        files: &FileTable,
        mut size: impl FnMut(u32) -> Option<u64>,
    ) {
        if chains.is_empty() {
            return;
        }
        self.sessions += 1;
        for &p in parallel {
            self.parallel[(p.max(1) as usize - 1).min(5)] += 1;
        }
        let mut frac = [0.0f64; 3];
        let mut has = [false; 3];
        let mut touched = [[false; BINS]; 2];
        let mut start: Option<(f64, f64)> = None;
        let mut end: Option<(f64, f64)> = None;
        for c in chains {
            let f = files.get(c.file);
            let Some(sz) = size(c.file).filter(|&s| s > 0) else {
                continue;
            };
            let m = media_slot(f.media).min(2);
            let m = if f.media.is_none() { 1 } else { m };
            frac[m] += c.bytes as f64 / sz as f64;
            has[m] = true;
            let group = usize::from(f.media != Some(Media::Audio));
            let (a, b) = (c.start as f64 / sz as f64, c.end() as f64 / sz as f64);
            for t in touched[group]
                .iter_mut()
                .take(bin(b.min(1.0) - 1e-12) + 1)
                .skip(bin(a))
            {
                *t = true;
            }
            // Segment-table reads (short chains at offset 0) say nothing about where
            // playback starts.
            let table_read = c.start == 0 && c.bytes < SEGMENT_TABLE_MAX;
            if group == 1 && !table_read {
                if start.is_none_or(|s| c.t0 < s.0) {
                    start = Some((c.t0, a));
                }
                if end.is_none_or(|e| c.t1 > e.0) {
                    end = Some((c.t1, b));
                }
            }
        }
        for m in 0..3 {
            if has[m] {
                self.fraction[m][ccdf_step(frac[m] as f32)] += 1;
            }
        }
        for (g, bins) in touched.iter().enumerate() {
            if bins.iter().any(|&t| t) {
                self.portion_sessions[g] += 1;
                for (i, t) in bins.iter().enumerate() {
                    self.portions[g][i] += u64::from(*t);
                }
            }
        }
        let start = start.or(end.map(|_| (0.0, 0.0)));
        if let (Some(s), Some(e)) = (start, end) {
            self.positioned += 1;
            self.starts[bin(s.1)] += 1;
            self.ends[bin(e.1.min(1.0) - 1e-12)] += 1;
        }
        // Pauses: a chain continuing exactly where an earlier one stopped, after a gap
        // longer than the chain window.
        for (i, a) in chains.iter().enumerate() {
            if files.get(a.file).media == Some(Media::Audio) {
                continue;
            }
            let Some(sz) = size(a.file).filter(|&s| s > 0) else {
                continue;
            };
            if chains[i + 1..]
                .iter()
                .any(|b| b.file == a.file && b.start == a.end() && b.t0 > a.t1)
            {
                self.pauses[bin(a.end() as f64 / sz as f64)] += 1;
            }
        }
    }

    /// Heap bytes held beyond the fixed-size bins: the chunk sizes by media and bit rate
    /// (one entry per pair seen, whatever the number of sessions).
    pub fn bytes(&self) -> usize {
        self.chunk_sizes.len() * std::mem::size_of::<((u8, u32), SizeAcc)>()
    }

    pub fn finish(self) -> SessionSummary {
        let total_req: u64 = self.requests.iter().flatten().map(|a| a.requests).sum();
        let total_bytes: u64 = self
            .requests
            .iter()
            .flatten()
            .fold(0u64, |t, a| t.saturating_add(a.bytes));
        let table_5_2 = kind_media_rows(&self.requests, |kind, media, a| {
            RequestRow::new(kind, media, *a, total_req, total_bytes)
        });
        let files: u64 = self.parallel.iter().sum();
        let ccdf = |counts: &[u64; CCDF_STEPS + 1]| -> Vec<[f64; 2]> {
            let n: u64 = counts.iter().sum();
            let mut le = 0;
            (0..CCDF_STEPS)
                .map(|i| {
                    le += counts[i];
                    [i as f64 * CCDF_STEP_PCT, percent((n - le) as f64, n as f64)]
                })
                .collect()
        };
        let per_bin = |v: &[u64], n: u64| {
            v.iter()
                .map(|&c| percent(c as f64, n as f64))
                .collect::<Vec<f64>>()
        };
        SessionSummary {
            sessions: self.sessions,
            table_5_2,
            table_5_3_pct: self
                .parallel
                .iter()
                .map(|&c| percent(c as f64, files as f64))
                .collect(),
            files_per_session: files,
            fraction_downloaded_ccdf: FractionCcdf {
                audio: ccdf(&self.fraction[0]),
                video: ccdf(&self.fraction[1]),
                combined: ccdf(&self.fraction[2]),
            },
            portions_accessed_pct: Portions {
                audio: per_bin(&self.portions[0], self.portion_sessions[0]),
                video_or_combined: per_bin(&self.portions[1], self.portion_sessions[1]),
            },
            positions_pct: Positions {
                start: per_bin(&self.starts, self.positioned),
                end: per_bin(&self.ends, self.positioned),
                pause: per_bin(&self.pauses, self.positioned),
            },
            chunk_sizes: self
                .chunk_sizes
                .iter()
                .map(|(&(m, kbps), a)| ChunkSizeRow {
                    media: media_label(MEDIA[usize::from(m)]).into(),
                    bitrate_kbps: kbps,
                    requests: a.requests,
                    mean_bytes: a.bytes as f64 / a.requests as f64,
                    mean_title_s: (kbps > 0)
                        .then(|| title_seconds(a.bytes, kbps) / a.requests as f64),
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RequestRow {
    pub kind: String,
    pub media: String,
    pub requests: u64,
    pub requests_pct: f64,
    pub gb: f64,
    pub bytes_pct: f64,
}

impl RequestRow {
    fn new(kind: &str, media: &str, a: Acc, req: u64, bytes: u64) -> RequestRow {
        RequestRow {
            kind: kind.into(),
            media: media.into(),
            requests: a.requests,
            requests_pct: percent(a.requests as f64, req as f64),
            gb: a.bytes as f64 / 1e9,
            bytes_pct: percent(a.bytes as f64, bytes as f64),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FractionCcdf {
    /// `[percent of title, percent of sessions downloading more]`.
    pub audio: Vec<[f64; 2]>,
    pub video: Vec<[f64; 2]>,
    pub combined: Vec<[f64; 2]>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Portions {
    /// Per 1% bin of the title: percent of sessions that requested it.
    pub audio: Vec<f64>,
    pub video_or_combined: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Positions {
    /// Per 1% bin: percent of sessions starting, ending and pausing there.
    pub start: Vec<f64>,
    pub end: Vec<f64>,
    pub pause: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChunkSizeRow {
    pub media: String,
    pub bitrate_kbps: u32,
    pub requests: u64,
    pub mean_bytes: f64,
    pub mean_title_s: Option<f64>,
}

/// Everything `sessions.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct SessionSummary {
    pub sessions: u64,
    pub table_5_2: Vec<RequestRow>,
    /// Percent of (session, file) pairs with 1, 2, 3, 4, 5 and 6+ concurrent requests.
    pub table_5_3_pct: Vec<f64>,
    pub files_per_session: u64,
    pub fraction_downloaded_ccdf: FractionCcdf,
    pub portions_accessed_pct: Portions,
    pub positions_pct: Positions,
    pub chunk_sizes: Vec<ChunkSizeRow>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lr(done: f64, service: f64, conn: Option<u64>) -> LogRequest<'static> {
        LogRequest {
            done_s: done,
            service_s: service,
            session: "s".into(),
            file: "f",
            offset: 0,
            extent: 1,
            kind: RequestKind::Chunk,
            bytes_sent: 1,
            conn,
        }
    }

    #[test]
    fn parallel_counts_overlapping_requests() {
        let mut p = ParallelTracker::default();
        p.add(&lr(1.0, 0.5, None));
        p.add(&lr(1.1, 0.5, None));
        p.add(&lr(1.2, 0.5, None));
        p.add(&lr(5.0, 0.1, None));
        assert_eq!(p.max, 3);
        // The same connection twice is not parallelism.
        let mut q = ParallelTracker::default();
        q.add(&lr(1.0, 0.5, Some(7)));
        q.add(&lr(1.1, 0.5, Some(7)));
        assert_eq!(q.max, 1);
    }

    #[test]
    fn the_ring_keeps_the_last_eight_and_survives_a_spill() {
        // Ten requests one second apart, each 0.5 s long: none overlaps another.
        let mut p = ParallelTracker::default();
        for i in 0..10u64 {
            p.add(&lr(i as f64, 0.5, Some(i)));
        }
        assert_eq!(p.max, 1);
        let mut buf = Vec::new();
        p.put(&mut buf).unwrap();
        let mut q = ParallelTracker::get(&mut &buf[..]).unwrap();
        assert_eq!(q.held().collect::<Vec<_>>(), p.held().collect::<Vec<_>>());
        // A long request spanning all ten overlaps only the eight kept (the two oldest
        // were pushed out), on nine distinct connections with its own.
        let long = lr(10.0, 10.5, Some(99));
        p.add(&long);
        q.add(&long);
        assert_eq!((p.max, q.max), (9, 9));
        // A spilled tracker holding more than the ring keeps is refused, not truncated.
        let mut bad = Vec::new();
        runfile::put_u32(&mut bad, 1).unwrap();
        let many = vec![(0.0f64, 1.0f64); ParallelTracker::KEEP + 1];
        runfile::put_seq(&mut bad, &many, "too long", |w, &(a, b)| {
            runfile::put_f64(w, a)?;
            runfile::put_f64(w, b)?;
            w.write_all(&[0])?;
            runfile::put_u64(w, 0)
        })
        .unwrap();
        assert!(ParallelTracker::get(&mut &bad[..]).is_err());
    }

    #[test]
    fn the_fraction_ccdf_from_steps_is_the_one_from_every_fraction() {
        // The reference: every session's fraction kept and sorted.
        let reference = |v: &[f32]| -> Vec<[f64; 2]> {
            let mut s = v.to_vec();
            s.sort_by(f32::total_cmp);
            (0..=60)
                .map(|i| {
                    let x = f64::from(i) * 5.0;
                    let le = s.partition_point(|&f| f64::from(f) * 100.0 <= x);
                    [x, percent((s.len() - le) as f64, s.len() as f64)]
                })
                .collect()
        };
        let mut files = FileTable::default();
        let v = files
            .insert("v", FileInfo::of(Media::Video, 1000), None)
            .unwrap();
        let size = 1_000_000u64;
        let mut b = SessionStatsBuilder::default();
        let mut fractions = Vec::new();
        // Fractions on and between the steps, past 300% and at 0, from a fixed sequence.
        let mut x = 12_345u64;
        for i in 0..5_000u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let bytes = match i % 4 {
                0 => (x >> 33) % (4 * size),
                1 => (x >> 40) % 61 * size / 20,
                2 => 1 + (x >> 33) % 1000,
                _ => size * 3 + (x >> 33) % size,
            };
            let chain = ChainRec {
                file: v,
                start: 0,
                bytes,
                requests: 1,
                t0: 0.0,
                t1: 1.0,
                kind: RequestKind::Chunk,
                sent: bytes,
            };
            b.add_session(&[chain], &[1], &files, |_| Some(size));
            fractions.push((bytes as f64 / size as f64) as f32);
        }
        let got = b.finish().fraction_downloaded_ccdf.video;
        assert_eq!(got, reference(&fractions));
        assert!(got[20][1] > 0.0 && got[20][1] < 100.0, "{:?}", got[20]);
    }

    #[test]
    fn fraction_portions_and_positions() {
        let mut files = FileTable::default();
        let v = files
            .insert("v", FileInfo::of(Media::Video, 1000), None)
            .unwrap();
        let chains = [
            ChainRec {
                file: v,
                start: 0,
                bytes: 25_000_000,
                requests: 2,
                t0: 0.0,
                t1: 10.0,
                kind: RequestKind::Chunk,
                sent: 250,
            },
            ChainRec {
                file: v,
                start: 25_000_000,
                bytes: 25_000_000,
                requests: 2,
                t0: 100.0,
                t1: 110.0,
                kind: RequestKind::Chunk,
                sent: 250,
            },
        ];
        let mut b = SessionStatsBuilder::default();
        b.add_session(&chains, &[3], &files, |_| Some(100_000_000));
        let s = b.finish();
        assert_eq!(s.table_5_3_pct[2], 100.0);
        // 50% of the title: every session downloaded more than 45% and none more than 50%.
        let at = |x: f64| {
            s.fraction_downloaded_ccdf
                .video
                .iter()
                .find(|p| p[0] == x)
                .unwrap()[1]
        };
        assert_eq!(at(45.0), 100.0);
        assert_eq!(at(50.0), 0.0);
        assert_eq!(s.portions_accessed_pct.video_or_combined[0], 100.0);
        assert_eq!(s.portions_accessed_pct.video_or_combined[49], 100.0);
        assert_eq!(s.portions_accessed_pct.video_or_combined[50], 0.0);
        assert_eq!(s.positions_pct.start[0], 100.0);
        assert_eq!(s.positions_pct.end[49], 100.0);
        assert_eq!(s.positions_pct.pause[25], 100.0);
        // A short read at offset 0 (the segment table) does not count as the start.
        let mut b = SessionStatsBuilder::default();
        let mut later = chains;
        later[0].bytes = 20_000;
        b.add_session(&later, &[1], &files, |_| Some(100_000_000));
        assert_eq!(b.finish().positions_pct.start[25], 100.0);
    }
}

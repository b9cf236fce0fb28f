//! Phases of client behaviour (thesis 5.4) found from a session's chains: clusters of
//! short chains (at most 40 s long, less than 10 s apart) are transient phases, each long
//! chain is a stable phase, and 40 s or more without any request is an inactive phase.
//! Audio chains run beside the video and are left out of transient and stable phases (they
//! still count as activity). Also: shares of time and bytes per phase, the bit rates probed
//! in transient phases against the following stable rate (Figs. 5.17/5.18), and transfer
//! ratios by chain duration (Fig. 5.20).

use std::collections::BTreeMap;

use serde::Serialize;
use vodkit_workload::model::Media;

use crate::chain::{ChainRec, CHAIN_WINDOW_S};
use crate::chainstats::{percent, title_seconds};
use crate::files::FileTable;
use crate::record::RequestKind;

/// Thresholds of the phase rules (thesis 5.4.3, 5.4.5).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PhaseParams {
    pub short_chain_s: f64,
    pub transient_gap_s: f64,
    pub inactive_s: f64,
}

impl Default for PhaseParams {
    fn default() -> Self {
        PhaseParams {
            short_chain_s: CHAIN_WINDOW_S,
            transient_gap_s: 10.0,
            inactive_s: CHAIN_WINDOW_S,
        }
    }
}

/// What a client was doing (thesis 5.4): probing (transient), streaming steadily
/// (stable), or nothing (inactive). Written to and read from `phases.csv` by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    Transient,
    Stable,
    Inactive,
}

impl PhaseKind {
    pub fn name(self) -> &'static str {
        match self {
            PhaseKind::Transient => "transient",
            PhaseKind::Stable => "stable",
            PhaseKind::Inactive => "inactive",
        }
    }
}

impl std::fmt::Display for PhaseKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub kind: PhaseKind,
    pub t_start: f64,
    pub t_end: f64,
    pub bytes: u64,
    /// Indices into the session's chains (none for inactive phases).
    pub chains: Vec<usize>,
}

impl Phase {
    pub fn duration_s(&self) -> f64 {
        self.t_end - self.t_start
    }
}

fn is_audio(files: &FileTable, c: &ChainRec) -> bool {
    files.get(c.file).media == Some(Media::Audio)
}

/// The phases of one session, ordered by start time. `chains` must be ordered by `t0`.
pub fn session_phases(chains: &[ChainRec], files: &FileTable, p: &PhaseParams) -> Vec<Phase> {
    let mut out = Vec::new();
    let mut cluster: Option<Phase> = None;
    for (i, c) in chains.iter().enumerate() {
        if is_audio(files, c) {
            continue;
        }
        if c.duration_s() > p.short_chain_s {
            out.push(Phase {
                kind: PhaseKind::Stable,
                t_start: c.t0,
                t_end: c.t1,
                bytes: c.bytes,
                chains: vec![i],
            });
            continue;
        }
        match cluster.as_mut() {
            Some(cl) if c.t0 - cl.t_end < p.transient_gap_s => {
                cl.t_end = cl.t_end.max(c.t1);
                cl.bytes = cl.bytes.saturating_add(c.bytes);
                cl.chains.push(i);
            }
            _ => {
                if let Some(done) = cluster.take() {
                    out.push(done);
                }
                cluster = Some(Phase {
                    kind: PhaseKind::Transient,
                    t_start: c.t0,
                    t_end: c.t1,
                    bytes: c.bytes,
                    chains: vec![i],
                });
            }
        }
    }
    out.extend(cluster);
    // Inactive: gaps in the union of all chains' activity.
    let mut end: Option<f64> = None;
    for c in chains {
        if let Some(e) = end {
            if c.t0 - e >= p.inactive_s {
                out.push(Phase {
                    kind: PhaseKind::Inactive,
                    t_start: e,
                    t_end: c.t0,
                    bytes: 0,
                    chains: vec![],
                });
            }
        }
        end = Some(end.map_or(c.t1, |e: f64| e.max(c.t1)));
    }
    out.sort_by(|a, b| a.t_start.total_cmp(&b.t_start));
    out
}

/// Sort and merge intervals.
pub fn union(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    vodkit_prefetch::memory::ranges::join_sorted(v)
}

fn length(v: &[(f64, f64)]) -> f64 {
    v.iter().map(|(a, b)| b - a).sum()
}

fn overlap(x: &[(f64, f64)], y: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut sum) = (0, 0, 0.0);
    while i < x.len() && j < y.len() {
        let lo = x[i].0.max(y[j].0);
        let hi = x[i].1.min(y[j].1);
        if hi > lo {
            sum += hi - lo;
        }
        if x[i].1 < y[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    sum
}

/// How much of the true phase time was classified the same: `(agreeing s, true s)`,
/// summed over the three kinds.
pub fn agreement(truth: &[(PhaseKind, f64, f64)], found: &[(PhaseKind, f64, f64)]) -> (f64, f64) {
    let mut agree = 0.0;
    let mut total = 0.0;
    for k in [PhaseKind::Transient, PhaseKind::Stable, PhaseKind::Inactive] {
        let pick = |v: &[(PhaseKind, f64, f64)]| {
            union(v.iter().filter(|p| p.0 == k).map(|p| (p.1, p.2)).collect())
        };
        let t = pick(truth);
        let f = pick(found);
        agree += overlap(&t, &f);
        total += length(&t);
    }
    (agree, total)
}

type Matrix = BTreeMap<(u32, u32), f64>;

/// Accumulates phase statistics over sessions.
#[derive(Debug, Default)]
pub struct PhaseStatsBuilder {
    sessions: u64,
    short_sessions: u64,
    with_stable: u64,
    start_transient: u64,
    with_phases: u64,
    session_s: f64,
    transient_s: f64,
    stable_s: f64,
    inactive_s: f64,
    transient_bytes: u64,
    stable_bytes: u64,
    audio_bytes: u64,
    transient_phases: u64,
    stable_phases: u64,
    inactive_phases: u64,
    first: Matrix,
    successor: [Matrix; 3],
    successor_counts: [u64; 3],
    transfer: BTreeMap<(u8, i64), (f64, u64)>,
}

fn duration_bin(d: f64) -> i64 {
    if d < 60.0 {
        d.round() as i64
    } else if d < 600.0 {
        (d / 10.0).round() as i64 * 10
    } else {
        (d / 60.0).round() as i64 * 60
    }
}

impl PhaseStatsBuilder {
    pub fn add_session(
        &mut self,
        chains: &[ChainRec],
        phases: &[Phase],
        files: &FileTable,
        p: &PhaseParams,
    ) {
        if chains.is_empty() {
            return;
        }
        self.sessions += 1;
        let t0 = chains.iter().map(|c| c.t0).fold(f64::INFINITY, f64::min);
        let t1 = chains
            .iter()
            .map(|c| c.t1)
            .fold(f64::NEG_INFINITY, f64::max);
        let span = t1 - t0;
        self.session_s += span;
        if span <= p.short_chain_s {
            self.short_sessions += 1;
        }
        let spans = |k: PhaseKind| {
            union(
                phases
                    .iter()
                    .filter(|x| x.kind == k)
                    .map(|x| (x.t_start, x.t_end))
                    .collect(),
            )
        };
        self.transient_s += length(&spans(PhaseKind::Transient));
        self.stable_s += length(&spans(PhaseKind::Stable));
        self.inactive_s += length(&spans(PhaseKind::Inactive));
        for c in chains {
            if is_audio(files, c) {
                self.audio_bytes = self.audio_bytes.saturating_add(c.bytes);
            }
        }
        let mut stable: Vec<&Phase> = Vec::new();
        let mut transient: Vec<&Phase> = Vec::new();
        for ph in phases {
            match ph.kind {
                PhaseKind::Transient => {
                    self.transient_phases += 1;
                    self.transient_bytes = self.transient_bytes.saturating_add(ph.bytes);
                    transient.push(ph);
                }
                PhaseKind::Stable => {
                    self.stable_phases += 1;
                    self.stable_bytes = self.stable_bytes.saturating_add(ph.bytes);
                    stable.push(ph);
                }
                PhaseKind::Inactive => self.inactive_phases += 1,
            }
        }
        if let Some(first) = phases.iter().find(|x| x.kind != PhaseKind::Inactive) {
            self.with_phases += 1;
            if first.kind == PhaseKind::Transient {
                self.start_transient += 1;
            }
        }
        let rate = |ph: &Phase| files.get(chains[ph.chains[0]].file).bitrate_kbps;
        if let Some(s) = stable.first() {
            self.with_stable += 1;
            if let (Some(t), Some(kbps)) = (transient.first(), rate(s)) {
                if t.t_start <= s.t_start {
                    self.probe(true, 0, t, kbps, chains, files);
                }
            }
        }
        for t in transient.iter().skip(1) {
            let next = stable.iter().find(|s| s.t_start >= t.t_start).or_else(|| {
                stable
                    .iter()
                    .find(|s| s.t_start < t.t_start && s.t_end >= t.t_start)
            });
            let prev = stable
                .iter()
                .rev()
                .find(|s| s.t_start < t.t_start && Some(*s) != next);
            if let (Some(n), Some(pr)) = (next, prev) {
                if let (Some(nk), Some(pk)) = (rate(n), rate(pr)) {
                    let dir = match nk.cmp(&pk) {
                        std::cmp::Ordering::Greater => 0,
                        std::cmp::Ordering::Less => 1,
                        std::cmp::Ordering::Equal => 2,
                    };
                    self.successor_counts[dir] += 1;
                    self.probe(false, dir, t, nk, chains, files);
                }
            }
        }
        for c in chains {
            let f = files.get(c.file);
            let (Some(kbps), false) = (f.bitrate_kbps, f.media == Some(Media::Audio)) else {
                continue;
            };
            let d = c.duration_s();
            if d >= 1.0 && kbps > 0 {
                let key = (u8::from(c.kind == RequestKind::Chunk), duration_bin(d));
                let e = self.transfer.entry(key).or_insert((0.0, 0));
                e.0 += title_seconds(c.bytes, kbps) / d;
                e.1 += 1;
            }
        }
    }

    fn probe(
        &mut self,
        first: bool,
        dir: usize,
        t: &Phase,
        stable_kbps: u32,
        chains: &[ChainRec],
        files: &FileTable,
    ) {
        let m = if first {
            &mut self.first
        } else {
            &mut self.successor[dir]
        };
        for &i in &t.chains {
            let c = &chains[i];
            if let Some(kbps) = files.get(c.file).bitrate_kbps.filter(|&k| k > 0) {
                *m.entry((stable_kbps, kbps)).or_insert(0.0) += title_seconds(c.bytes, kbps);
            }
        }
    }

    pub fn finish(self, p: &PhaseParams) -> PhaseSummary {
        let nb = self.transient_bytes as f64 + self.stable_bytes as f64;
        let transfer = |k: u8| {
            self.transfer
                .iter()
                .filter(|((kk, _), _)| *kk == k)
                .map(|((_, d), (sum, n))| TransferPoint {
                    duration_s: *d,
                    ratio: sum / *n as f64,
                    chains: *n,
                })
                .collect()
        };
        PhaseSummary {
            params: *p,
            sessions: self.sessions,
            sessions_le_short_pct: percent(self.short_sessions as f64, self.sessions as f64),
            sessions_with_stable_pct: percent(self.with_stable as f64, self.sessions as f64),
            sessions_starting_transient_pct: percent(
                self.start_transient as f64,
                self.with_phases as f64,
            ),
            time_pct: PhaseShares {
                transient: percent(self.transient_s, self.session_s),
                stable: percent(self.stable_s, self.session_s),
                inactive: percent(self.inactive_s, self.session_s),
            },
            bytes_pct: PhaseShares {
                transient: percent(self.transient_bytes as f64, nb),
                stable: percent(self.stable_bytes as f64, nb),
                inactive: 0.0,
            },
            audio_bytes: self.audio_bytes,
            phases: PhaseCounts {
                transient: self.transient_phases,
                stable: self.stable_phases,
                inactive: self.inactive_phases,
            },
            mean_stable_s: if self.stable_phases > 0 {
                self.stable_s / self.stable_phases as f64
            } else {
                0.0
            },
            first_transient: AssocMatrix::from(&self.first),
            successor_up: AssocMatrix::from(&self.successor[0]),
            successor_down: AssocMatrix::from(&self.successor[1]),
            successor_same: AssocMatrix::from(&self.successor[2]),
            successor_direction_pct: {
                let n: u64 = self.successor_counts.iter().sum();
                let f = |i: usize| percent(self.successor_counts[i] as f64, n as f64);
                PhaseShares {
                    transient: f(0),
                    stable: f(1),
                    inactive: f(2),
                }
            },
            transfer_ratio_open: transfer(0),
            transfer_ratio_chunk: transfer(1),
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct PhaseShares {
    pub transient: f64,
    pub stable: f64,
    pub inactive: f64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct PhaseCounts {
    pub transient: u64,
    pub stable: u64,
    pub inactive: u64,
}

/// Percent of transient-phase title time at each probed rate (rows), per following
/// stable rate (columns); every column sums to 100.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AssocMatrix {
    pub stable_kbps: Vec<u32>,
    pub probed_kbps: Vec<u32>,
    /// `percent[row][column]`.
    pub percent: Vec<Vec<f64>>,
}

impl AssocMatrix {
    fn from(m: &Matrix) -> AssocMatrix {
        let mut cols: Vec<u32> = m.keys().map(|k| k.0).collect();
        cols.dedup();
        let mut rows: Vec<u32> = m.keys().map(|k| k.1).collect();
        rows.sort_unstable();
        rows.dedup();
        let totals: Vec<f64> = cols
            .iter()
            .map(|c| m.iter().filter(|(k, _)| k.0 == *c).map(|(_, v)| v).sum())
            .collect();
        let percent = rows
            .iter()
            .map(|r| {
                cols.iter()
                    .zip(&totals)
                    .map(|(c, t)| m.get(&(*c, *r)).map_or(0.0, |v| percent(*v, *t)))
                    .collect()
            })
            .collect();
        AssocMatrix {
            stable_kbps: cols,
            probed_kbps: rows,
            percent,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TransferPoint {
    pub duration_s: i64,
    /// Mean of (nominal title seconds / chain duration).
    pub ratio: f64,
    pub chains: u64,
}

/// Everything `phases.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseSummary {
    pub params: PhaseParams,
    pub sessions: u64,
    pub sessions_le_short_pct: f64,
    pub sessions_with_stable_pct: f64,
    pub sessions_starting_transient_pct: f64,
    pub time_pct: PhaseShares,
    /// Of bytes in non-audio chains (`inactive` is always 0).
    pub bytes_pct: PhaseShares,
    pub audio_bytes: u64,
    pub phases: PhaseCounts,
    pub mean_stable_s: f64,
    pub first_transient: AssocMatrix,
    pub successor_up: AssocMatrix,
    pub successor_down: AssocMatrix,
    pub successor_same: AssocMatrix,
    /// Of successor transients: `transient` = stable rate went up, `stable` = down,
    /// `inactive` = unchanged.
    pub successor_direction_pct: PhaseShares,
    pub transfer_ratio_open: Vec<TransferPoint>,
    pub transfer_ratio_chunk: Vec<TransferPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::FileInfo;

    fn chain(file: u32, t0: f64, t1: f64, bytes: u64) -> ChainRec {
        ChainRec {
            file,
            start: 1000,
            bytes,
            requests: 1,
            t0,
            t1,
            kind: RequestKind::Chunk,
            sent: bytes,
        }
    }

    fn table() -> FileTable {
        let mut t = FileTable::default();
        for (name, kbps) in [("v235", 235), ("v1050", 1050), ("v1750", 1750)] {
            t.insert(name, FileInfo::of(Media::Video, kbps), None)
                .unwrap();
        }
        let audio = FileInfo {
            media: Some(Media::Audio),
            ..FileInfo::default()
        };
        t.insert("a96", audio, None).unwrap();
        t
    }

    #[test]
    fn clusters_long_chains_and_gaps() {
        let files = table();
        let chains = vec![
            chain(0, 0.0, 2.0, 10),
            chain(3, 0.5, 300.0, 50),
            chain(1, 5.0, 8.0, 20),
            chain(2, 9.0, 200.0, 1000),
            chain(0, 30.0, 31.0, 5),
            chain(2, 400.0, 900.0, 2000),
        ];
        let p = PhaseParams::default();
        let ph = session_phases(&chains, &files, &p);
        let kinds: Vec<(PhaseKind, f64, f64)> =
            ph.iter().map(|x| (x.kind, x.t_start, x.t_end)).collect();
        assert_eq!(
            kinds,
            vec![
                (PhaseKind::Transient, 0.0, 8.0),
                (PhaseKind::Stable, 9.0, 200.0),
                (PhaseKind::Transient, 30.0, 31.0),
                (PhaseKind::Inactive, 300.0, 400.0),
                (PhaseKind::Stable, 400.0, 900.0),
            ]
        );
        let mut b = PhaseStatsBuilder::default();
        b.add_session(&chains, &ph, &files, &p);
        let s = b.finish(&p);
        assert_eq!(s.sessions, 1);
        assert!((s.time_pct.inactive - 100.0 * 100.0 / 900.0).abs() < 1e-9);
        assert!((s.time_pct.transient - 100.0 * 9.0 / 900.0).abs() < 1e-9);
        assert_eq!(s.sessions_starting_transient_pct, 100.0);
        assert_eq!(s.first_transient.stable_kbps, vec![1750]);
        assert_eq!(s.first_transient.probed_kbps, vec![235, 1050]);
        let col: f64 = s.first_transient.percent.iter().map(|r| r[0]).sum();
        assert!((col - 100.0).abs() < 1e-9);
    }

    #[test]
    fn agreement_counts_overlap_per_kind() {
        let truth = [
            (PhaseKind::Transient, 0.0, 10.0),
            (PhaseKind::Stable, 10.0, 110.0),
        ];
        let found = [
            (PhaseKind::Transient, 0.0, 5.0),
            (PhaseKind::Stable, 5.0, 110.0),
        ];
        let (a, t) = agreement(&truth, &found);
        assert_eq!(t, 110.0);
        assert_eq!(a, 105.0);
    }
}

//! Chains (thesis 5.3): maximal runs of byte-adjacent requests for one file in one session.
//!
//! Two requests are adjacent when one starts at the byte where the other ends, and they
//! belong together when the continuing request arrived no more than the chain window
//! (40 s by default) before the other arrived, nor more than the window after the other
//! finished — whatever order they arrived or completed in. For short requests this is
//! "received within 40 s of each other"; a long open-ended stream is continued by a
//! request arriving within 40 s of the stream's end. The
//! builder keeps open *fragments*: every request extends the longest fragment that ends
//! where it starts, or prepends to the longest one starting where it ends, or both (which
//! merges them); this is the two passes of the thesis (find adjacent pairs, then combine
//! them into the longest chains) done incrementally so memory stays one small record per
//! chain. A request that repeats a range already inside a chain starts a chain of its own.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use vodkit_workload::model::Media;

use crate::files::{each_csv_record, FileTable};
use crate::record::{LogRequest, RequestKind};
use crate::runfile;

/// Default chain window (thesis 5.3): adjacent requests this close in time join. The one
/// constant of `vodkit_prefetch::chain`, which owns chains; this builder is the offline
/// counterpart of its live trackers (it joins in any order, using completion times).
pub use vodkit_prefetch::chain::CHAIN_WINDOW_S;
use vodkit_prefetch::ChainKind;

/// The columns of `chains.csv`.
pub const CSV_HEADER: &str =
    "session,file,start_offset,bytes,requests,t_start,t_end,kind,media,bitrate_kbps,drive";

/// One chain as read from `chains.csv` (the columns in order; an empty optional column
/// is `None`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Chain {
    pub session: String,
    pub file: String,
    pub start_offset: u64,
    /// Bytes of the file the chain covers (end offset minus start offset).
    pub bytes: u64,
    pub requests: u32,
    /// Earliest arrival of any of its requests (s).
    pub t_start: f64,
    /// Latest completion of any of its requests (s).
    pub t_end: f64,
    /// Kind of the request at the chain's start offset.
    pub kind: RequestKind,
    pub media: Option<Media>,
    pub bitrate_kbps: Option<u32>,
    pub drive: Option<String>,
}

impl Chain {
    pub fn duration_s(&self) -> f64 {
        self.t_end - self.t_start
    }

    /// How the chain began, as the prefetch policies see it (thesis Table 5.6).
    pub fn chain_kind(&self) -> ChainKind {
        ChainKind::starting_at(self.start_offset, self.kind == RequestKind::Open)
    }
}

/// A chain inside the analyzer: file by id, no strings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChainRec {
    pub file: u32,
    pub start: u64,
    pub bytes: u64,
    pub requests: u32,
    pub t0: f64,
    pub t1: f64,
    /// Kind of the request at the chain's start offset.
    pub kind: RequestKind,
    /// Body bytes sent for the chain's requests.
    pub sent: u64,
}

impl ChainRec {
    pub fn duration_s(&self) -> f64 {
        self.t1 - self.t0
    }

    pub fn end(&self) -> u64 {
        self.start + self.bytes
    }

    /// How the chain began, as the prefetch policies see it (thesis Table 5.6).
    pub fn chain_kind(&self) -> ChainKind {
        ChainKind::starting_at(self.start, self.kind == RequestKind::Open)
    }
}

#[derive(Clone, Debug)]
struct Frag {
    start: u64,
    end: u64,
    /// Activity interval of the request at the start and at the end offset.
    s_int: (f64, f64),
    e_int: (f64, f64),
    t0: f64,
    t1: f64,
    requests: u32,
    sent: u64,
    kind: RequestKind,
}

/// How far apart in time a request `pred` and the request `succ` that continues it are:
/// zero when `succ` arrived between 0 s before `pred` arrived and the moment `pred` was
/// finished; otherwise the distance to that span. Intervals are (arrival, completion).
pub fn join_distance(pred: (f64, f64), succ: (f64, f64)) -> f64 {
    (pred.0 - succ.0).max(succ.0 - pred.1).max(0.0)
}

/// Builds the chains of one session, keeping beside each file's fragments a value `T` of
/// the caller's (the analyzer keeps its parallel-request tracker there), so a request finds
/// everything its file needs in one place.
///
/// The file ids are searched in a small inline array (a session reads a handful of files),
/// and each file's first fragment is stored inline: the analyzer's per-request work then
/// touches the session and one file entry, not a chain of heap blocks.
#[derive(Clone, Debug)]
pub struct ChainBuilder<T = ()> {
    /// File ids in the order the session first asked for them.
    ids: SmallVec<[u32; 8]>,
    /// One entry per id, in the same order.
    files: Vec<FileChains<T>>,
}

#[derive(Clone, Debug)]
struct FileChains<T> {
    frags: SmallVec<[Frag; 1]>,
    extra: T,
}

impl<T> Default for ChainBuilder<T> {
    fn default() -> Self {
        ChainBuilder {
            ids: SmallVec::new(),
            files: Vec::new(),
        }
    }
}

impl<T: Default> ChainBuilder<T> {
    /// Number of open fragments (for memory accounting).
    pub fn fragments(&self) -> usize {
        self.files.iter().map(|f| f.frags.len()).sum()
    }

    /// Bytes the builder holds (an estimate: its own size and its vectors' spilled
    /// capacities; a `T` counts by its size in the file entries).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.table_bytes()
            + self
                .files
                .iter()
                .map(|f| frag_heap(&f.frags))
                .sum::<usize>()
    }

    /// Heap bytes of the file entries and, once past their inline room, the file ids.
    fn table_bytes(&self) -> usize {
        let ids = if self.ids.spilled() {
            self.ids.capacity() * std::mem::size_of::<u32>()
        } else {
            0
        };
        ids + self.files.capacity() * std::mem::size_of::<FileChains<T>>()
    }

    /// The caller's values, with their files, in the order the files were first asked for.
    pub fn extras(&self) -> impl Iterator<Item = (u32, &T)> {
        self.ids
            .iter()
            .copied()
            .zip(self.files.iter().map(|f| &f.extra))
    }

    /// Ask the CPU to bring `file`'s entry into its cache, if the session has one: a caller
    /// that knows a request it will add soon hides the cache miss [`ChainBuilder::add`]
    /// would otherwise wait for.
    pub fn prefetch(&self, file: u32) {
        if let Some(entry) = self.entry(file) {
            crate::cacheline::prefetch(entry);
        }
    }

    /// After [`ChainBuilder::prefetch`] has brought `file`'s entry in: ask for the
    /// fragments it keeps on the heap (past the one it holds inline), which the entry
    /// points to.
    pub fn prefetch_fragments(&self, file: u32) {
        if let Some(entry) = self.entry(file).filter(|e| e.frags.spilled()) {
            for f in entry.frags.iter().take(8) {
                crate::cacheline::prefetch(&f.end);
            }
        }
    }

    /// Where `file`'s entry is, if the session has asked for it.
    fn index(&self, file: u32) -> Option<usize> {
        self.ids.iter().position(|&f| f == file)
    }

    fn entry(&self, file: u32) -> Option<&FileChains<T>> {
        self.index(file).and_then(|i| self.files.get(i))
    }

    /// Add a request; returns the bytes [`ChainBuilder::bytes`] grew by and the caller's
    /// value for the request's file (a default one the first time the file is seen).
    pub fn add(&mut self, file: u32, r: &LogRequest<'_>, window_s: f64) -> (usize, &mut T) {
        let before = self.table_bytes();
        let i = match self.index(file) {
            Some(i) => i,
            None => {
                self.ids.push(file);
                self.files.push(FileChains {
                    frags: SmallVec::new(),
                    extra: T::default(),
                });
                self.files.len() - 1
            }
        };
        let after = self.table_bytes();
        let entry = &mut self.files[i];
        let grown = add_to(&mut entry.frags, r, window_s);
        (grown + after - before, &mut entry.extra)
    }

    /// Write the builder as it is (every fragment, in order) for [`ChainBuilder::get_with`],
    /// each file's value written by `put_extra`.
    pub(crate) fn put_with<W: Write>(
        &self,
        w: &mut W,
        mut put_extra: impl FnMut(&mut W, &T) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let too_long = "a session with too many files or chains to spill";
        let pairs: Vec<(u32, &FileChains<T>)> =
            self.ids.iter().copied().zip(self.files.iter()).collect();
        runfile::put_seq(w, &pairs, too_long, |w, (file, fc)| {
            runfile::put_u32(w, *file)?;
            runfile::put_seq(w, &fc.frags, too_long, |w, f| {
                runfile::put_u64(w, f.start)?;
                runfile::put_u64(w, f.end)?;
                for x in [f.s_int.0, f.s_int.1, f.e_int.0, f.e_int.1, f.t0, f.t1] {
                    runfile::put_f64(w, x)?;
                }
                runfile::put_u32(w, f.requests)?;
                runfile::put_u64(w, f.sent)?;
                runfile::put_kind(w, f.kind)
            })?;
            put_extra(w, &fc.extra)
        })?;
        Ok(())
    }

    /// A builder written by [`ChainBuilder::put_with`], exactly as it was.
    pub(crate) fn get_with<R: Read>(
        r: &mut R,
        mut get_extra: impl FnMut(&mut R) -> std::io::Result<T>,
    ) -> std::io::Result<ChainBuilder<T>> {
        let pairs = runfile::get_seq(r, |r| {
            let file = runfile::get_u32(r)?;
            let frags = runfile::get_seq(r, |r| {
                let start = runfile::get_u64(r)?;
                let end = runfile::get_u64(r)?;
                let mut x = [0.0; 6];
                for v in &mut x {
                    *v = runfile::get_f64(r)?;
                }
                Ok(Frag {
                    start,
                    end,
                    s_int: (x[0], x[1]),
                    e_int: (x[2], x[3]),
                    t0: x[4],
                    t1: x[5],
                    requests: runfile::get_u32(r)?,
                    sent: runfile::get_u64(r)?,
                    kind: runfile::get_kind(r)?,
                })
            })?;
            let extra = get_extra(r)?;
            Ok((
                file,
                FileChains {
                    frags: SmallVec::from_vec(frags),
                    extra,
                },
            ))
        })?;
        let (ids, files) = pairs.into_iter().unzip();
        Ok(ChainBuilder { ids, files })
    }

    /// The session's chains, ordered by start time (then file and offset).
    pub fn finish(self) -> Vec<ChainRec> {
        let mut out: Vec<ChainRec> = self
            .ids
            .into_iter()
            .zip(self.files)
            .flat_map(|(file, fc)| {
                fc.frags.into_iter().map(move |f| ChainRec {
                    file,
                    start: f.start,
                    bytes: f.end - f.start,
                    requests: f.requests,
                    t0: f.t0,
                    t1: f.t1,
                    kind: f.kind,
                    sent: f.sent,
                })
            })
            .collect();
        out.sort_by(|x, y| {
            x.t0.total_cmp(&y.t0)
                .then(x.file.cmp(&y.file))
                .then(x.start.cmp(&y.start))
        });
        out
    }
}

/// Heap bytes of a file's fragments (none while the one inline slot holds them).
fn frag_heap(frags: &SmallVec<[Frag; 1]>) -> usize {
    if frags.spilled() {
        frags.capacity() * std::mem::size_of::<Frag>()
    } else {
        0
    }
}

/// Add a request to one file's fragments; returns the heap bytes they grew by.
fn add_to(frags: &mut SmallVec<[Frag; 1]>, r: &LogRequest<'_>, window_s: f64) -> usize {
    let heap = frag_heap(frags);
    let (a, b) = (r.offset, r.end());
    let int = (r.recv_s(), r.done_s);
    let mut pred: Option<usize> = None;
    let mut succ: Option<usize> = None;
    for (i, f) in frags.iter().enumerate() {
        if f.end == a && join_distance(f.e_int, int) <= window_s {
            if pred.is_none_or(|p| f.end - f.start > frags[p].end - frags[p].start) {
                pred = Some(i);
            }
        } else if f.start == b
            && join_distance(int, f.s_int) <= window_s
            && succ.is_none_or(|s| f.end - f.start > frags[s].end - frags[s].start)
        {
            succ = Some(i);
        }
    }
    match (pred, succ) {
        (Some(p), Some(s)) => {
            let tail = frags[s].clone();
            let f = &mut frags[p];
            f.end = tail.end;
            f.e_int = tail.e_int;
            f.t0 = f.t0.min(tail.t0).min(int.0);
            f.t1 = f.t1.max(tail.t1).max(int.1);
            f.requests += tail.requests + 1;
            f.sent = f
                .sent
                .saturating_add(tail.sent)
                .saturating_add(r.bytes_sent);
            frags.swap_remove(s);
        }
        (Some(p), None) => {
            let f = &mut frags[p];
            f.end = b;
            f.e_int = int;
            f.t0 = f.t0.min(int.0);
            f.t1 = f.t1.max(int.1);
            f.requests += 1;
            f.sent = f.sent.saturating_add(r.bytes_sent);
        }
        (None, Some(s)) => {
            let f = &mut frags[s];
            f.start = a;
            f.s_int = int;
            f.kind = r.kind;
            f.t0 = f.t0.min(int.0);
            f.t1 = f.t1.max(int.1);
            f.requests += 1;
            f.sent = f.sent.saturating_add(r.bytes_sent);
        }
        (None, None) => frags.push(Frag {
            start: a,
            end: b,
            s_int: int,
            e_int: int,
            t0: int.0,
            t1: int.1,
            requests: 1,
            sent: r.bytes_sent,
            kind: r.kind,
        }),
    }
    frag_heap(frags) - heap
}

pub fn kind_name(k: RequestKind) -> &'static str {
    match k {
        RequestKind::Open => "open",
        RequestKind::Chunk => "chunk",
    }
}

/// Seconds rounded to the millisecond, as the CSV files carry them.
pub fn ms(t: f64) -> f64 {
    (t * 1000.0).round() / 1000.0
}

/// One `chains.csv` row as written (borrowing its strings).
#[derive(Serialize)]
struct ChainRow<'a> {
    session: &'a str,
    file: &'a str,
    start_offset: u64,
    bytes: u64,
    requests: u32,
    t_start: f64,
    t_end: f64,
    kind: RequestKind,
    media: Option<Media>,
    bitrate_kbps: Option<u32>,
    drive: Option<&'a str>,
}

/// A `chains.csv` writer (RFC 4180 quoting: names may hold commas and quotes) with its
/// header already written.
pub fn chains_writer<W: Write>(w: W) -> std::io::Result<csv::Writer<W>> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .buffer_capacity(1 << 20)
        .from_writer(w);
    w.write_record(CSV_HEADER.split(','))?;
    Ok(w)
}

/// Append one `chains.csv` row.
pub fn write_row<W: Write>(
    w: &mut csv::Writer<W>,
    session: &str,
    c: &ChainRec,
    files: &FileTable,
) -> std::io::Result<()> {
    let f = files.get(c.file);
    w.serialize(ChainRow {
        session,
        file: &files.name(c.file),
        start_offset: c.start,
        bytes: c.bytes,
        requests: c.requests,
        t_start: ms(c.t0),
        t_end: ms(c.t1),
        kind: c.kind,
        media: f.media,
        bitrate_kbps: f.bitrate_kbps,
        drive: files.drive(c.file),
    })?;
    Ok(())
}

/// Read a `chains.csv` back. Errors name the line and field.
pub fn read_chains_csv(path: &Path) -> Result<Vec<Chain>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_chains_csv(std::io::BufReader::new(file), &path.display().to_string())
}

/// What each `chains.csv` column holds, for error messages.
const CSV_WANT: [&str; 11] = [
    "a session id",
    "a file name",
    "bytes",
    "bytes",
    "a count",
    "seconds",
    "seconds",
    "open or chunk",
    "audio, video, combined or nothing",
    "kbit/s or nothing",
    "a drive name or nothing",
];

/// Parse `chains.csv` text from any reader; `name` is used in error messages.
pub fn parse_chains_csv(input: impl Read, name: &str) -> Result<Vec<Chain>, String> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(input);
    let header_fields: Vec<&str> = CSV_HEADER.split(',').collect();
    match rdr.headers() {
        Ok(h) if h.iter().map(str::trim).eq(header_fields.iter().copied()) => {}
        Ok(h) if h.is_empty() => {
            return Err(format!(
                "{name}: empty file, expected the header {CSV_HEADER}"
            ))
        }
        Ok(_) => return Err(format!("{name}:1: expected the header {CSV_HEADER}")),
        Err(e) => return Err(format!("{name}:1: {e}")),
    }
    let mut out = Vec::new();
    each_csv_record(&mut rdr, name, |rec, n| {
        if rec.len() != header_fields.len() {
            return Err(format!(
                "{name}:{n}: expected {} fields, got {}",
                header_fields.len(),
                rec.len()
            ));
        }
        let bad = |i: usize| {
            let i = i.min(header_fields.len() - 1);
            format!(
                "{name}:{n}: field {}: expected {}",
                header_fields[i], CSV_WANT[i]
            )
        };
        let chain: Chain = rec.deserialize(None).map_err(|e| match e.kind() {
            csv::ErrorKind::Deserialize { err, .. } => bad(err.field().unwrap_or(0) as usize),
            _ => format!("{name}:{n}: {e}"),
        })?;
        out.push(chain);
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::FileInfo;

    fn req(
        offset: u64,
        len: u64,
        done: f64,
        service: f64,
        kind: RequestKind,
    ) -> LogRequest<'static> {
        LogRequest {
            done_s: done,
            service_s: service,
            session: "s".into(),
            file: "f",
            offset,
            extent: len,
            kind,
            bytes_sent: len,
            conn: None,
        }
    }

    /// The chains of 10-byte chunk requests, each `(offset, completed at)` and served in
    /// 0.1 s.
    fn chunk_chains(at: &[(u64, f64)]) -> Vec<(u64, u64, u32)> {
        let reqs: Vec<_> = at
            .iter()
            .map(|&(offset, done)| req(offset, 10, done, 0.1, RequestKind::Chunk))
            .collect();
        chains(&reqs)
    }

    fn chains(reqs: &[LogRequest<'_>]) -> Vec<(u64, u64, u32)> {
        let mut b = ChainBuilder::<()>::default();
        for r in reqs {
            b.add(0, r, CHAIN_WINDOW_S);
        }
        b.finish()
            .iter()
            .map(|c| (c.start, c.bytes, c.requests))
            .collect()
    }

    #[test]
    fn sequential_requests_form_one_chain_and_pauses_split() {
        let reqs = [(0, 1.0), (10, 30.0), (20, 69.0), (30, 200.0)];
        assert_eq!(chunk_chains(&reqs), vec![(0, 30, 3), (30, 10, 1)]);
    }

    #[test]
    fn out_of_order_and_parallel_parts_join_in_any_order() {
        let c = RequestKind::Chunk;
        let parts = [
            req(0, 10, 1.0, 0.5, c),
            req(10, 10, 1.2, 0.7, c),
            req(20, 10, 1.1, 0.6, c),
            req(30, 10, 1.3, 0.8, c),
        ];
        // Every permutation of completion order gives the same single chain.
        let orders = [
            [0, 1, 2, 3],
            [3, 2, 1, 0],
            [1, 3, 0, 2],
            [2, 0, 3, 1],
            [3, 0, 2, 1],
        ];
        for o in orders {
            let reqs: Vec<_> = o.iter().map(|&i| parts[i].clone()).collect();
            assert_eq!(chains(&reqs), vec![(0, 40, 4)], "order {o:?}");
        }
    }

    #[test]
    fn open_ended_request_joins_by_activity_interval() {
        // A 10-minute open-ended stream that arrived right after the header request.
        let reqs = [
            req(0, 100, 1.0, 0.5, RequestKind::Chunk),
            req(100, 50_000, 601.0, 599.0, RequestKind::Open),
            req(50_100, 10, 620.0, 0.1, RequestKind::Chunk),
        ];
        assert_eq!(chains(&reqs), vec![(0, 50_110, 3)]);
    }

    #[test]
    fn repeated_range_starts_its_own_chain_without_breaking_the_original() {
        let reqs = [(0, 1.0), (10, 2.0), (10, 3.0), (20, 4.0)];
        assert_eq!(chunk_chains(&reqs), vec![(0, 30, 3), (10, 10, 1)]);
        // A re-download long after the first viewing is a separate chain too.
        let later = [(0, 1.0), (10, 2.0), (0, 300.0), (10, 301.0)];
        assert_eq!(chunk_chains(&later), vec![(0, 20, 2), (0, 20, 2)]);
    }

    #[test]
    fn a_stream_arriving_after_a_chain_does_not_join_its_start() {
        // A chain at [100, 200) arrived at t=0; a stream [0, 100) arrived at t=150 and ran
        // for 10 minutes: it ends where the chain starts but arrived 150 s after it.
        let reqs = [
            req(100, 100, 148.0, 148.0, RequestKind::Open),
            req(0, 100, 750.0, 600.0, RequestKind::Open),
        ];
        assert_eq!(chains(&reqs), vec![(100, 100, 1), (0, 100, 1)]);
        assert_eq!(join_distance((150.0, 750.0), (0.0, 148.0)), 150.0);
        assert_eq!(join_distance((0.0, 1.0), (30.0, 31.0)), 29.0);
        assert_eq!(join_distance((5.0, 6.0), (1.0, 2.0)), 4.0);
    }

    #[test]
    fn csv_round_trip_and_errors() {
        let mut files = FileTable::default();
        let id = files.intern("nf/v.mp4");
        let rec = ChainRec {
            file: id,
            start: 5,
            bytes: 100,
            requests: 2,
            t0: 1.5,
            t1: 9.25,
            kind: RequestKind::Open,
            sent: 100,
        };
        let mut w = chains_writer(Vec::new()).unwrap();
        write_row(&mut w, "s1", &rec, &files).unwrap();
        let buf = w.into_inner().unwrap();
        let back = parse_chains_csv(&buf[..], "mem").unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].file, "nf/v.mp4");
        assert_eq!(
            (back[0].start_offset, back[0].bytes, back[0].requests),
            (5, 100, 2)
        );
        assert_eq!((back[0].t_start, back[0].t_end), (1.5, 9.25));
        assert_eq!(back[0].kind, RequestKind::Open);
        assert_eq!(back[0].media, None);
        let bad = format!("{CSV_HEADER}\ns,f,1,x,1,0,1,open,,,\n");
        let e = parse_chains_csv(bad.as_bytes(), "mem").unwrap_err();
        assert!(e.contains("mem:2: field bytes"), "{e}");
        let bad = format!("{CSV_HEADER}\ns,f,1,2,1,0,1,open,video,fast,\n");
        let e = parse_chains_csv(bad.as_bytes(), "mem").unwrap_err();
        assert!(e.contains("mem:2: field bitrate_kbps"), "{e}");
        let e = parse_chains_csv("a,b\n".as_bytes(), "mem").unwrap_err();
        assert!(e.contains("mem:1: expected the header"), "{e}");
    }

    #[test]
    fn names_with_commas_and_quotes_round_trip() {
        let mut files = FileTable::default();
        let info = FileInfo::of(Media::Video, 2000);
        let id = files
            .insert("nf/a \"b\", c.mp4", info, Some("d,1"))
            .unwrap();
        let rec = ChainRec {
            file: id,
            start: 0,
            bytes: 10,
            requests: 1,
            t0: 0.0,
            t1: 1.0,
            kind: RequestKind::Chunk,
            sent: 10,
        };
        let session = "sess,\"9\"";
        let mut w = chains_writer(Vec::new()).unwrap();
        write_row(&mut w, session, &rec, &files).unwrap();
        let buf = w.into_inner().unwrap();
        let back = parse_chains_csv(&buf[..], "mem").unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].session, session);
        assert_eq!(back[0].file, "nf/a \"b\", c.mp4");
        assert_eq!(back[0].drive.as_deref(), Some("d,1"));
        assert_eq!(back[0].media, Some(Media::Video));
        assert_eq!(back[0].bitrate_kbps, Some(2000));
        assert_eq!(back[0].chain_kind(), ChainKind::ChunkAtZero);
    }
}

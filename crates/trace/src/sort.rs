//! `--sort`: an external merge sort of a log by completion time, for logs that are not in
//! completion order. The log is read once (any format, compressed or not, in parallel);
//! each request becomes one Netflix-CSV record (with its connection id), records are
//! gathered in sorted runs of bounded size spilled to temporary files, and the runs are
//! merged into a stream the analysis reads as a log. Ties keep the log's order.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::parse::ReadSummary;
use crate::read::{read_log_with, ReadOptions};
use crate::record::{LogRequest, RequestKind};
use crate::runfile;
use vodkit_workload::order::MinEntry;

/// The header of the sorted stream.
pub const SORTED_HEADER: &str =
    "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type,conn\n";

/// A log sorted by completion time, readable as a Netflix-CSV log.
pub struct SortedLog {
    header: &'static [u8],
    runs: Vec<BufReader<File>>,
    heap: BinaryHeap<Head>,
    /// The record being handed out and how much of it is gone.
    line: Vec<u8>,
    at: usize,
    /// Runs' directory, removed when the log is dropped.
    _tmp: Option<tempfile::TempDir>,
    memory: std::vec::IntoIter<(f64, u64, Vec<u8>)>,
    /// Bytes spilled to run files.
    pub spilled: u64,
}

/// The head record of a run, keyed by completion time and then its place in the log (the
/// earliest line first); the record and the run's index ride along.
type Head = MinEntry<(f64, u64), (Vec<u8>, usize)>;

fn read_record(r: &mut impl Read) -> std::io::Result<Option<(f64, u64, Vec<u8>)>> {
    let Some(done) = runfile::first8(r)? else {
        return Ok(None);
    };
    let seq = u64::from_le_bytes(runfile::get8(r)?);
    let line = runfile::get_bytes(r)?;
    Ok(Some((f64::from_le_bytes(done), seq, line)))
}

impl Read for SortedLog {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.header.is_empty() {
            let n = self.header.len().min(buf.len());
            buf[..n].copy_from_slice(&self.header[..n]);
            self.header = &self.header[n..];
            return Ok(n);
        }
        if self.at == self.line.len() {
            self.at = 0;
            self.line.clear();
            if let Some((_, _, l)) = self.memory.next() {
                self.line = l;
            } else if let Some(MinEntry {
                value: (l, run), ..
            }) = self.heap.pop()
            {
                if let Some(r) = self.runs.get_mut(run) {
                    if let Some((d, s, next)) = read_record(r)? {
                        self.heap.push(Head::new((d, s), (next, run)));
                    }
                }
                self.line = l;
            } else {
                return Ok(0);
            }
        }
        let n = (self.line.len() - self.at).min(buf.len());
        buf[..n].copy_from_slice(&self.line[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Sort `input` by completion time within `memory_bytes`, spilling runs under `dir`.
/// Returns the sorted log and what reading the original found (its line numbers).
pub fn sort_log<R: BufRead + Send>(
    input: R,
    opts: &ReadOptions,
    memory_bytes: usize,
    dir: &Path,
) -> std::io::Result<(SortedLog, ReadSummary)> {
    let mut runs = Runs {
        dir: dir.to_path_buf(),
        tmp: None,
        recs: Vec::new(),
        bytes: 0,
        budget: memory_bytes.max(1),
        files: Vec::new(),
        spilled: 0,
        err: None,
    };
    // The CSV writer writes each record into a buffer shared with this function, taken
    // after every record (csv::Writer does not lend its inner writer mutably).
    let line_buf = std::rc::Rc::new(std::cell::RefCell::new(Vec::with_capacity(256)));
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .buffer_capacity(1024)
        .from_writer(Shared(line_buf.clone()));
    let mut seq = 0u64;
    // The order check means nothing for a log about to be sorted.
    let read_opts = ReadOptions {
        order_tolerance_s: f64::INFINITY,
        ..opts.clone()
    };
    let sum = read_log_with(input, &read_opts, |r: &LogRequest<'_>| {
        if runs.err.is_some() {
            return;
        }
        let rec = (
            r.done_s,
            r.service_s,
            &*r.session,
            r.file,
            r.offset,
            r.extent,
            u8::from(r.kind == RequestKind::Open),
            r.bytes_sent,
            "",
            r.conn,
        );
        let line = w
            .serialize(rec)
            .and_then(|()| w.flush().map_err(csv::Error::from))
            .map(|()| std::mem::take(&mut *line_buf.borrow_mut()));
        match line {
            Ok(line) => runs.push(r.done_s, seq, line),
            Err(e) => runs.err = Some(std::io::Error::other(e)),
        }
        seq += 1;
    })?;
    if let Some(e) = runs.err.take() {
        return Err(e);
    }
    Ok((runs.finish()?, sum))
}

/// A writer appending to a buffer someone else also holds.
struct Shared(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Runs {
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    recs: Vec<(f64, u64, Vec<u8>)>,
    bytes: usize,
    budget: usize,
    files: Vec<PathBuf>,
    spilled: u64,
    err: Option<std::io::Error>,
}

impl Runs {
    fn push(&mut self, done: f64, seq: u64, line: Vec<u8>) {
        self.bytes += line.len() + 48;
        self.recs.push((done, seq, line));
        if self.bytes > self.budget {
            if let Err(e) = self.spill() {
                self.err = Some(e);
            }
        }
    }

    fn sort(&mut self) {
        self.recs
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }

    fn spill(&mut self) -> std::io::Result<()> {
        let n = self.files.len();
        let (path, mut w) = runfile::create(&mut self.tmp, &self.dir, ".vodkit-sort-", n)?;
        self.sort();
        for (done, seq, line) in self.recs.drain(..) {
            w.write_all(&done.to_le_bytes())?;
            w.write_all(&seq.to_le_bytes())?;
            runfile::put_bytes(&mut w, &line, "a log line longer than 4 GiB")?;
        }
        w.flush()?;
        self.spilled += w.get_ref().metadata()?.len();
        self.bytes = 0;
        self.files.push(path);
        Ok(())
    }

    fn finish(mut self) -> std::io::Result<SortedLog> {
        if self.files.is_empty() {
            self.sort();
            return Ok(SortedLog {
                header: SORTED_HEADER.as_bytes(),
                runs: Vec::new(),
                heap: BinaryHeap::new(),
                line: Vec::new(),
                at: 0,
                _tmp: None,
                memory: self.recs.into_iter(),
                spilled: 0,
            });
        }
        if !self.recs.is_empty() {
            self.spill()?;
        }
        let mut runs = Vec::new();
        let mut heap = BinaryHeap::new();
        for (i, p) in self.files.iter().enumerate() {
            let mut r = BufReader::with_capacity(1 << 16, File::open(p)?);
            if let Some((d, s, l)) = read_record(&mut r)? {
                heap.push(Head::new((d, s), (l, i)));
            }
            runs.push(r);
        }
        Ok(SortedLog {
            header: SORTED_HEADER.as_bytes(),
            runs,
            heap,
            line: Vec::new(),
            at: 0,
            _tmp: self.tmp,
            memory: Vec::new().into_iter(),
            spilled: self.spilled,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::read_log;
    use crate::LogFormat;

    /// Every field of a request the sort must carry, owned.
    #[allow(clippy::type_complexity)]
    fn fields(
        r: &crate::record::LogRequest<'_>,
    ) -> (
        f64,
        f64,
        String,
        String,
        u64,
        u64,
        crate::record::RequestKind,
        u64,
        Option<u64>,
    ) {
        (
            r.done_s,
            r.service_s,
            r.session.to_string(),
            r.file.to_string(),
            r.offset,
            r.extent,
            r.kind,
            r.bytes_sent,
            r.conn,
        )
    }

    #[test]
    fn a_shuffled_log_comes_out_in_completion_order_with_every_field() {
        let mut lines = Vec::new();
        for i in 0..3000u64 {
            let t = 1_700_000_000 + (i * 7919) % 3001;
            lines.push(format!(
                "{t}.250 0.5 {} \"s,{}\" \"/v/{}.mp4\" \"bytes={}-{}\" 206 400 100\n",
                i % 9,
                i % 5,
                i % 3,
                i * 100,
                i * 100 + 99
            ));
        }
        let text: String = lines.concat() + "garbage\n";
        let dir = tempfile::tempdir().unwrap();
        let mut want = Vec::new();
        let sum0 = read_log(text.as_bytes(), LogFormat::Auto, |r| want.push(fields(r))).unwrap();
        assert!(sum0.out_of_order > 0);
        want.sort_by(|a, b| a.0.total_cmp(&b.0));
        for memory in [1000, usize::MAX] {
            let (sorted, sum) =
                sort_log(text.as_bytes(), &ReadOptions::default(), memory, dir.path()).unwrap();
            assert_eq!(sorted.spilled > 0, memory == 1000);
            assert_eq!(sum.bad_examples[0].0, 3001, "line numbers of the original");
            let mut got = Vec::new();
            let again = read_log(BufReader::new(sorted), LogFormat::Auto, |r| {
                got.push(fields(r))
            })
            .unwrap();
            assert_eq!(again.format, "netflix");
            assert_eq!(again.bad_lines, 0, "{}", again.describe());
            assert_eq!(again.out_of_order, 0);
            assert!(got == want, "memory {memory}");
        }
    }
}

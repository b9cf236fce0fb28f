//! `--sort`: an external merge sort of a log by completion time, for logs that are not in
//! completion order. The log is read once (any format, compressed or not, in parallel);
//! each request becomes one Netflix-CSV record (with its connection id), records are
//! gathered in sorted runs of bounded size spilled to temporary files (the `spill`
//! module's external sort), and the runs are merged into a stream the analysis reads as a
//! log. Ties keep the log's order.

use std::cmp::Ordering;
use std::io::{BufRead, Read, Write};
use std::path::Path;

use crate::parse::ReadSummary;
use crate::read::{read_log_with, ReadOptions, IN_FLIGHT_SHARE};
use crate::record::{LogRequest, RequestKind};
use crate::runfile;
use crate::spill::{Merged, Record, Runs};
use vodkit_workload::order::MergeKey;

/// The header of the sorted stream.
pub const SORTED_HEADER: &str =
    "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type,conn\n";

/// One request as a line of the sorted stream, keyed by completion time and then its place
/// in the log (the earliest line first).
struct Line {
    done: f64,
    seq: u64,
    text: Vec<u8>,
}

impl MergeKey for Line {
    fn merge_cmp(&self, other: &Line) -> Ordering {
        self.done
            .total_cmp(&other.done)
            .then(self.seq.cmp(&other.seq))
    }
}

impl Record for Line {
    fn bytes(&self) -> usize {
        self.text.len() + 48
    }

    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        runfile::put_f64(w, self.done)?;
        runfile::put_u64(w, self.seq)?;
        runfile::put_bytes(w, &self.text, "a log line longer than 4 GiB")
    }

    fn read(r: &mut impl Read) -> std::io::Result<Option<Line>> {
        let Some(done) = runfile::first8(r)? else {
            return Ok(None);
        };
        let seq = runfile::get_u64(r)?;
        let text = runfile::get_bytes(r)?;
        Ok(Some(Line {
            done: f64::from_le_bytes(done),
            seq,
            text,
        }))
    }
}

/// A log sorted by completion time, readable as a Netflix-CSV log.
pub struct SortedLog {
    header: &'static [u8],
    lines: Merged<Line>,
    /// The line being handed out and how much of it is gone.
    line: Vec<u8>,
    at: usize,
    /// Bytes spilled to run files.
    pub spilled: u64,
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
            match self.lines.next_record()? {
                Some(l) => self.line = l.text,
                None => {
                    self.line.clear();
                    return Ok(0);
                }
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
    let mut runs: Runs<Line> = Runs::new(dir, memory_bytes.max(1));
    let mut err: Option<std::io::Error> = None;
    // The CSV writer writes each record into a buffer shared with this function, taken
    // after every record (csv::Writer does not lend its inner writer mutably).
    let line_buf = std::rc::Rc::new(std::cell::RefCell::new(Vec::with_capacity(256)));
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .buffer_capacity(1024)
        .from_writer(Shared(line_buf.clone()));
    let mut seq = 0u64;
    // The order check means nothing for a log about to be sorted. The blocks in flight
    // take their share of the limit, as in the analysis.
    let read_opts = ReadOptions {
        order_tolerance_s: f64::INFINITY,
        in_flight_bytes: opts.in_flight_bytes.min(memory_bytes / IN_FLIGHT_SHARE),
        ..opts.clone()
    };
    let sum = read_log_with(input, &read_opts, |r: &LogRequest<'_>| {
        if err.is_some() {
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
        let pushed = line.map_err(std::io::Error::other).and_then(|text| {
            runs.push(Line {
                done: r.done_s,
                seq,
                text,
            })
        });
        if let Err(e) = pushed {
            err = Some(e);
        }
        seq += 1;
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    let lines = runs.finish()?;
    let sorted = SortedLog {
        header: SORTED_HEADER.as_bytes(),
        spilled: lines.spilled,
        lines,
        line: Vec::new(),
        at: 0,
    };
    Ok((sorted, sum))
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
            let again = read_log(std::io::BufReader::new(sorted), LogFormat::Auto, |r| {
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

//! Parallel log reading: the log is cut into blocks at line ends (outside quoted CSV
//! fields), blocks are parsed on worker threads, and their requests reach the caller in log
//! order, so what the caller sees does not depend on the number of threads. gzip and zstd
//! logs are decompressed on the fly, recognized by their magic bytes; a corrupt or cut
//! compressed stream ends the log with a bad line, never a failure.

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::sync::mpsc::{channel, sync_channel};
use std::sync::Mutex;

use crate::parse::{
    parse_csv, parse_csv_spans, parse_csv_text, parse_line, CsvCols, LogFormat, Parsed, ReadSummary,
};
use crate::record::{LogRequest, Requests, LOOK_AHEAD};

/// Bytes a block is filled to before it is cut at its last line end, when blocks are parsed
/// on threads of their own.
pub const BLOCK_BYTES: usize = 1 << 20;

/// The same on one thread, which parses a block and then delivers its requests: small
/// enough that the block and what it parses into are still in the core's cache when
/// delivered.
pub const SMALL_BLOCK_BYTES: usize = 1 << 16;

/// A block grows up to this size looking for a line end outside quotes; past it, it is cut
/// at its last line end regardless (an unterminated quote must not pull the whole log into
/// memory).
const MAX_BLOCK_BYTES: usize = 64 << 20;

/// Blocks read ahead of the one being handed to the caller, per parsing thread: two keep
/// every parser busy (four went as fast on two cores and held 14 MiB more, a parsed block
/// of 1 MiB of log being about 2.5 MiB).
const AHEAD_PER_THREAD: usize = 2;

/// A parsed block holds about this many times its text (a parsed block of 1 MiB of log
/// being about 2.5 MiB), so a block in flight costs this many times its text in all.
const PARSED_PER_TEXT: usize = 3;

/// The size blocks are cut to: [`SMALL_BLOCK_BYTES`] on one thread, [`BLOCK_BYTES`] on
/// several unless the blocks in flight (read ahead, being parsed, delivered, and their
/// parsed forms) would pass `in_flight_bytes`, down to [`SMALL_BLOCK_BYTES`].
pub fn block_bytes(threads: usize, in_flight_bytes: usize) -> usize {
    if threads <= 1 {
        return SMALL_BLOCK_BYTES;
    }
    let workers = threads - 1;
    let blocks = workers * AHEAD_PER_THREAD + workers + 1;
    (in_flight_bytes / (blocks * PARSED_PER_TEXT)).clamp(SMALL_BLOCK_BYTES, BLOCK_BYTES)
}

/// How a log's bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// Recognize gzip (`1f 8b`) and zstd (`28 b5 2f fd`) by their first bytes.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// An error of the decompressor: the stream is corrupt or cut, not an I/O failure.
#[derive(Debug)]
struct Corrupt(String);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Corrupt {}

/// The message of an error that says the compressed stream is corrupt or cut (not an I/O
/// failure of the file underneath).
pub fn corrupt_message(e: &std::io::Error) -> Option<String> {
    e.get_ref()
        .and_then(|x| x.downcast_ref::<Corrupt>())
        .map(|c| c.0.clone())
}

/// A decompressor whose errors are marked [`Corrupt`].
struct Decoded<R> {
    inner: R,
    what: &'static str,
}

impl<R: Read> Read for Decoded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                Corrupt(format!("{} stream corrupt or cut: {e}", self.what)),
            )
        })
    }
}

/// The log's bytes, decompressed when they start with a gzip or zstd magic number.
pub fn decompressed<'a, R: BufRead + Send + 'a>(
    mut input: R,
) -> std::io::Result<Box<dyn Read + Send + 'a>> {
    let head = loop {
        match input.fill_buf() {
            Ok(h) => break h,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    Ok(match Compression::sniff(head) {
        Compression::None => Box::new(input),
        Compression::Gzip => Box::new(Decoded {
            inner: flate2::bufread::MultiGzDecoder::new(input),
            what: "gzip",
        }),
        Compression::Zstd => Box::new(Decoded {
            inner: zstd::stream::read::Decoder::with_buffer(input)?,
            what: "zstd",
        }),
    })
}

/// A block of whole lines, and why the log ended after it if it ended early.
pub(crate) struct Block {
    bytes: Vec<u8>,
    corrupt: Option<String>,
}

/// Cuts a byte stream into blocks of whole lines.
pub(crate) struct Blocks<R> {
    input: R,
    carry: Vec<u8>,
    /// Cut only outside `"..."` (RFC 4180 fields may hold line ends).
    quotes: bool,
    /// [`block_bytes`].
    block_bytes: usize,
    done: bool,
    /// Buffers of blocks already parsed, to fill again.
    spare: Vec<Vec<u8>>,
}

impl<R: Read> Blocks<R> {
    /// `first`: bytes already taken from `input` that belong before it; blocks are filled
    /// to `block_bytes`.
    pub(crate) fn new(input: R, first: Vec<u8>, quotes: bool, block_bytes: usize) -> Self {
        Blocks {
            input,
            carry: first,
            quotes,
            block_bytes,
            done: false,
            spare: Vec::new(),
        }
    }

    /// Take back the bytes of a block that has been parsed, to fill again.
    pub(crate) fn recycle(&mut self, bytes: Vec<u8>) {
        if bytes.capacity() > 0 && self.spare.len() < 2 {
            self.spare.push(bytes);
        }
    }

    /// Where to cut `buf`: after its last line end (outside quotes when asked).
    fn cut(&self, buf: &[u8], force: bool) -> Option<usize> {
        if !self.quotes || force || memchr::memchr(b'"', buf).is_none() {
            return memchr::memrchr(b'\n', buf).map(|i| i + 1);
        }
        let mut inside = false;
        let mut last = None;
        for i in memchr::memchr2_iter(b'"', b'\n', buf) {
            if buf[i] == b'"' {
                inside = !inside;
            } else if !inside {
                last = Some(i + 1);
            }
        }
        last
    }

    pub(crate) fn next_block(&mut self) -> std::io::Result<Option<Block>> {
        if self.done && self.carry.is_empty() {
            return Ok(None);
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        let mut target = self
            .block_bytes
            .max(self.carry.len() + self.block_bytes / 2);
        buf.reserve(target);
        buf.extend_from_slice(&self.carry);
        self.carry.clear();
        let mut corrupt = None;
        loop {
            if !self.done && buf.len() < target {
                // `read_to_end` fills spare capacity without zeroing it first; what was read
                // before an error stays in `buf`.
                let want = (target - buf.len()) as u64;
                match (&mut self.input).take(want).read_to_end(&mut buf) {
                    Ok(n) => {
                        if (n as u64) < want {
                            self.done = true;
                        }
                    }
                    Err(e) => match corrupt_message(&e) {
                        Some(why) => {
                            corrupt = Some(why);
                            self.done = true;
                        }
                        None => return Err(e),
                    },
                }
            }
            if self.done {
                return Ok(Some(Block {
                    bytes: buf,
                    corrupt,
                }));
            }
            let force = buf.len() >= MAX_BLOCK_BYTES;
            match self.cut(&buf, force) {
                Some(at) => {
                    self.carry.extend_from_slice(&buf[at..]);
                    buf.truncate(at);
                    return Ok(Some(Block {
                        bytes: buf,
                        corrupt: None,
                    }));
                }
                None if force => {
                    // One line longer than the largest block: hand it over as it is.
                    return Ok(Some(Block {
                        bytes: buf,
                        corrupt: None,
                    }));
                }
                None => target = (target * 2).min(MAX_BLOCK_BYTES),
            }
        }
    }
}

/// One request parsed off a block: its session key and file name are the spans `session`
/// and `file` of the block's `names` (`req`'s own are empty).
struct Req {
    req: LogRequest<'static>,
    session: (u32, u32),
    file: (u32, u32),
    /// Line number in the block (from 1).
    line: u32,
}

/// What the parsing of one block found, line numbers relative to the block.
#[derive(Default)]
pub(crate) struct ParsedBlock {
    lines: u64,
    reqs: Vec<Req>,
    names: String,
    sum: ReadSummary,
}

impl ParsedBlock {
    fn push(&mut self, r: &LogRequest<'_>, line: u64) {
        let mut put = |s: &str| {
            let at = self.names.len() as u32;
            self.names.push_str(s);
            (at, s.len() as u32)
        };
        let session = put(&r.session);
        let file = put(r.file);
        self.reqs.push(Req {
            req: r.with_names("", ""),
            session,
            file,
            line: line as u32,
        });
    }

    fn record(&mut self, parsed: Result<Parsed<'_>, String>, line: u64) {
        match parsed {
            Ok(Parsed::Request(r)) => self.push(&r, line),
            Ok(Parsed::Skip) => {}
            Ok(Parsed::Status) => self.sum.skipped_status += 1,
            Ok(Parsed::Empty) => self.sum.empty += 1,
            Ok(Parsed::Unsupported) => self.sum.unsupported_range += 1,
            Err(why) => self.sum.bad(line, why),
        }
    }
}

/// Lines in a block of whole lines (a last line without its line end counts).
fn count_lines(b: &[u8]) -> u64 {
    let n = memchr::memchr_iter(b'\n', b).count() as u64;
    n + u64::from(b.last().is_some_and(|&c| c != b'\n'))
}

/// Parse one block into `out` (emptied first; its buffers are reused). A block holds far
/// fewer than 2^32 lines and bytes (it is cut at [`MAX_BLOCK_BYTES`] plus one line).
pub(crate) fn parse_block(
    block: &Block,
    fmt: LogFormat,
    cols: Option<&CsvCols>,
    out: &mut ParsedBlock,
) {
    let bytes = &block.bytes[..];
    out.lines = count_lines(bytes);
    out.reqs.clear();
    out.reqs.reserve(bytes.len() / 64);
    out.names.clear();
    out.names.reserve(bytes.len() / 2);
    out.sum = ReadSummary::default();
    match (fmt, cols) {
        // Without quotes or carriage returns a record is a line: the common case, split
        // here, much faster than through the `csv` reader.
        (LogFormat::Netflix, Some(cols)) if memchr::memchr2(b'"', b'\r', bytes).is_none() => {
            parse_plain_csv(bytes, cols, out)
        }
        (LogFormat::Netflix, Some(cols)) => parse_quoted_csv(bytes, cols, out),
        _ => {
            let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            if !bytes.is_empty() {
                for (i, raw) in body.split(|&c| c == b'\n').enumerate() {
                    let n = i as u64 + 1;
                    let Ok(line) = std::str::from_utf8(raw) else {
                        out.sum.bad(n, "not UTF-8".into());
                        continue;
                    };
                    let line = line.trim_end_matches('\r');
                    if line.trim().is_empty() {
                        continue;
                    }
                    out.record(parse_line(line, fmt), n);
                }
            }
        }
    }
    if let Some(why) = &block.corrupt {
        out.sum.broken_at(out.lines + 1, why.clone());
    }
}

/// The records of a Netflix CSV block without quotes or carriage returns: its lines, their
/// fields what lies between commas (as the `csv` reader splits them), found in one pass
/// over the block without copying a field.
fn parse_plain_csv(bytes: &[u8], cols: &CsvCols, out: &mut ParsedBlock) {
    let text = std::str::from_utf8(bytes).ok();
    let mut spans = Vec::with_capacity(cols.width() + 1);
    // The `csv` reader numbers a record by the line after the record before it (empty lines
    // between them not counted); so are the records numbered here.
    let mut number = 1;
    // A last line without its line end ends at the end of the block.
    let unterminated = bytes.last().is_some_and(|&c| c != b'\n');
    let ends = memchr::memchr_iter(b'\n', bytes).chain(unterminated.then_some(bytes.len()));
    let mut start = 0;
    for (i, end) in ends.enumerate() {
        let line = &bytes[start..end];
        // An empty line is no record; a line of whitespace alone is one, skipped.
        if !line.is_empty() {
            // Fields are short: a plain loop finds their commas.
            spans.clear();
            let mut field = start;
            for (at, &c) in (start..).zip(line) {
                if c == b',' {
                    spans.push((field, at));
                    field = at + 1;
                }
            }
            spans.push((field, end));
            let blank = spans.len() == 1 && line.iter().all(u8::is_ascii_whitespace);
            if !blank {
                out.record(parse_csv_spans(bytes, text, &spans, cols), number);
            }
            number = i as u64 + 2;
        }
        start = end + 1;
    }
}

/// The records of any Netflix CSV block, through the `csv` reader (quoted fields, line ends
/// inside them, carriage returns).
fn parse_quoted_csv(bytes: &[u8], cols: &CsvCols, out: &mut ParsedBlock) {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut raw = csv::ByteRecord::new();
    loop {
        match rdr.read_byte_record(&mut raw) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                // Not reached with `flexible` over bytes; counted, and the block ends.
                out.sum.bad(rdr.position().line(), format!("CSV: {e}"));
                break;
            }
        }
        let n = raw.position().map_or(0, |p| p.line());
        if raw.len() == 1 && raw[0].iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match csv::StringRecord::from_byte_record(std::mem::take(&mut raw)) {
            Ok(text) => {
                out.record(parse_csv_text(&text, cols), n);
                raw = text.into_byte_record();
            }
            Err(e) => {
                raw = e.into_byte_record();
                out.record(parse_csv(&raw, cols), n);
            }
        }
    }
}

/// Hands parsed blocks to the caller in order, numbering lines from the log's start and
/// checking that completion times do not go back by more than the tolerance.
pub(crate) struct Deliver<'s, F> {
    pub sum: &'s mut ReadSummary,
    pub sink: F,
    pub order_tolerance_s: f64,
    pub clock: f64,
}

impl<F: Requests> Deliver<'_, F> {
    fn block(&mut self, b: &ParsedBlock) {
        let base = self.sum.lines;
        let text = |(at, len): (u32, u32)| &b.names[at as usize..(at + len) as usize];
        for (i, r) in b.reqs.iter().enumerate() {
            if let Some(next) = b.reqs.get(i + LOOK_AHEAD) {
                self.sink
                    .ahead(&next.req.with_names(text(next.session), text(next.file)));
            }
            let req = r.req.with_names(text(r.session), text(r.file));
            if req.done_s < self.clock - self.order_tolerance_s {
                self.sum.out_of_order(
                    base + u64::from(r.line),
                    self.clock - req.done_s,
                    self.order_tolerance_s,
                );
            }
            self.clock = self.clock.max(req.done_s);
            self.sum.requests += 1;
            self.sink.take(&req);
        }
        let s = &b.sum;
        self.sum.skipped_status += s.skipped_status;
        self.sum.empty += s.empty;
        self.sum.unsupported_range += s.unsupported_range;
        self.sum.add_bad(s, base);
        self.sum.lines += b.lines;
    }
}

/// Read every block of `blocks`, parse them on `threads` threads (1: on this one) and
/// deliver them in order.
pub(crate) fn run<R: Read + Send, F: Requests>(
    mut blocks: Blocks<R>,
    fmt: LogFormat,
    cols: Option<CsvCols>,
    threads: usize,
    out: &mut Deliver<'_, F>,
) -> std::io::Result<()> {
    let cols = cols.as_ref();
    if threads <= 1 {
        let mut parsed = ParsedBlock::default();
        while let Some(b) = blocks.next_block()? {
            parse_block(&b, fmt, cols, &mut parsed);
            out.block(&parsed);
            blocks.recycle(b.bytes);
        }
        return Ok(());
    }
    // This thread delivers (the caller's work per request); `threads - 1` parse; one more
    // reads and decompresses. Tokens bound the blocks in flight; each carries the bytes of
    // a block delivered, for the reader to fill again (the first ones carry none).
    let workers = threads - 1;
    let ahead = workers * AHEAD_PER_THREAD;
    let (tok_tx, tok_rx) = sync_channel::<Vec<u8>>(ahead);
    for _ in 0..ahead {
        // The channel holds `ahead` tokens: these sends never block or fail.
        let _ = tok_tx.send(Vec::new());
    }
    let (work_tx, work_rx) = sync_channel::<(u64, Block)>(ahead);
    let work_rx = Mutex::new(work_rx);
    let work_rx = &work_rx;
    // Parsed blocks delivered, for the workers to fill again.
    let spare: Mutex<Vec<ParsedBlock>> = Mutex::new(Vec::new());
    let spare = &spare;
    let (done_tx, done_rx) = channel::<(u64, ParsedBlock, Vec<u8>)>();
    // Everything moves in, so a panic in the caller's sink drops the token sender and the
    // other threads end instead of waiting for it.
    std::thread::scope(move |s| -> std::io::Result<()> {
        let reader = s.spawn(move || -> std::io::Result<()> {
            let mut seq = 0u64;
            while let Ok(bytes) = tok_rx.recv() {
                blocks.recycle(bytes);
                let Some(b) = blocks.next_block()? else { break };
                if work_tx.send((seq, b)).is_err() {
                    break;
                }
                seq += 1;
            }
            Ok(())
        });
        for _ in 0..workers {
            let done_tx = done_tx.clone();
            s.spawn(move || loop {
                let job = match work_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok((seq, b)) = job else { return };
                let mut parsed = match spare.lock() {
                    Ok(mut s) => s.pop().unwrap_or_default(),
                    Err(_) => return,
                };
                parse_block(&b, fmt, cols, &mut parsed);
                if done_tx.send((seq, parsed, b.bytes)).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let mut pending: BTreeMap<u64, (ParsedBlock, Vec<u8>)> = BTreeMap::new();
        let mut next = 0u64;
        for (seq, pb, bytes) in done_rx {
            pending.insert(seq, (pb, bytes));
            while let Some((pb, bytes)) = pending.remove(&next) {
                out.block(&pb);
                next += 1;
                if let Ok(mut s) = spare.lock() {
                    if s.len() < workers + 1 {
                        s.push(pb);
                    }
                }
                // The reader may have finished and gone: nothing left to allow.
                let _ = tok_tx.send(bytes);
            }
        }
        match reader.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks_of(text: &[u8], quotes: bool) -> Vec<Vec<u8>> {
        let mut b = Blocks::new(text, Vec::new(), quotes, BLOCK_BYTES);
        let mut out = Vec::new();
        while let Some(x) = b.next_block().unwrap() {
            assert!(x.corrupt.is_none());
            out.push(x.bytes);
        }
        out
    }

    #[test]
    fn blocks_in_flight_keep_within_their_bytes_down_to_the_small_size() {
        // One thread parses and delivers small blocks whatever the bytes.
        assert_eq!(block_bytes(1, usize::MAX), SMALL_BLOCK_BYTES);
        assert_eq!(block_bytes(1, 0), SMALL_BLOCK_BYTES);
        // Several: the full size when it fits, never below the small one.
        assert_eq!(block_bytes(3, usize::MAX), BLOCK_BYTES);
        assert_eq!(block_bytes(3, 0), SMALL_BLOCK_BYTES);
        for threads in [2, 3, 5] {
            let in_flight = (threads - 1) * (AHEAD_PER_THREAD + 1) + 1;
            for mib in [2usize, 8, 16, 32] {
                let bytes = mib << 20;
                let b = block_bytes(threads, bytes);
                assert!((SMALL_BLOCK_BYTES..=BLOCK_BYTES).contains(&b));
                if b > SMALL_BLOCK_BYTES {
                    assert!(in_flight * PARSED_PER_TEXT * b <= bytes, "{threads} {mib}");
                }
                if b < BLOCK_BYTES {
                    // Cut no further than the bytes require.
                    assert!(
                        in_flight * PARSED_PER_TEXT * (b + 1) > bytes,
                        "{threads} {mib}"
                    );
                }
            }
        }
        // 8 MiB on three threads (two parsing): seven blocks of about 390 KiB.
        assert_eq!(block_bytes(3, 8 << 20), (8 << 20) / 21);
    }

    #[test]
    fn blocks_end_at_line_ends_outside_quotes() {
        let mut text = Vec::new();
        for i in 0..200_000 {
            text.extend_from_slice(format!("{i},\"a\nb\",x\n").as_bytes());
        }
        let blocks = blocks_of(&text, true);
        assert!(blocks.len() > 1);
        assert_eq!(blocks.concat(), text);
        for b in &blocks {
            assert_eq!(b.iter().filter(|&&c| c == b'"').count() % 2, 0);
            assert_eq!(b.last(), Some(&b'\n'));
        }
    }

    /// What a parsed block holds, comparable: requests with their names and line numbers,
    /// and the summary.
    fn contents(b: &ParsedBlock) -> (Vec<(String, String, LogRequest<'static>, u32)>, String) {
        let text = |(at, len): (u32, u32)| b.names[at as usize..(at + len) as usize].to_string();
        let reqs = b
            .reqs
            .iter()
            .map(|r| (text(r.session), text(r.file), r.req.clone(), r.line))
            .collect();
        (reqs, format!("{:?}", b.sum))
    }

    /// Property test: a block without quotes or carriage returns reads the same split by
    /// hand as through the `csv` reader, whatever its lines hold.
    #[test]
    fn plain_csv_reads_as_the_csv_reader() {
        let cols = crate::parse::csv_header(
            "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type,conn",
        )
        .unwrap();
        let fields: [&[&[u8]]; 10] = [
            &[
                b"10", b"0.5", b" 7.25 ", b"1e3", b"+4", b"-1", b"inf", b"x", b".5", b"5.",
            ],
            &[
                b"0.046",
                b"0",
                b"2.000000000000001",
                b"",
                b"0.1234567890123456789",
            ],
            &[b"s1", b" s2", b"s\xff", b"s\xc3\xa9", b"", b"\t"],
            &[b"/nf/a.mp4?x=1", b"f1", b"f\xfe", b" f ", b"#f"],
            &[
                b"0",
                b"100",
                b"18446744073709551615",
                b"+7",
                b"007",
                b"99999999999999999999",
            ],
            &[b"100", b"", b"0", b"1 8"],
            &[b"0", b"1", b"true", b"false", b"2"],
            &[b"100", b"5000", b"0", b"x"],
            &[b"tv", b"mobile", b"\xff"],
            &[b"", b"3", b"x", b"+1"],
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = move || vodkit_testkit::xorshift(&mut x) as usize;
        for _ in 0..1000 {
            let mut block = Vec::new();
            for _ in 0..(rnd() % 30) {
                match rnd() % 12 {
                    0 => block.extend_from_slice(b"\n"),
                    1 => block.extend_from_slice(b"  \t\n"),
                    2 => block.extend_from_slice(b"1,2,3\n"),
                    _ => {
                        let line: Vec<&[u8]> = fields.iter().map(|f| f[rnd() % f.len()]).collect();
                        block.extend_from_slice(&line.join(&b","[..]));
                        block.push(b'\n');
                    }
                }
            }
            if rnd() % 3 == 0 {
                block.extend_from_slice(b"11,0.5,s,f,0,10,0,10,tv,");
            }
            let (mut plain, mut quoted) = (ParsedBlock::default(), ParsedBlock::default());
            parse_plain_csv(&block, &cols, &mut plain);
            parse_quoted_csv(&block, &cols, &mut quoted);
            assert_eq!(
                contents(&plain),
                contents(&quoted),
                "{}",
                String::from_utf8_lossy(&block)
            );
        }
    }

    #[test]
    fn sniffs_compression() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(
            Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd]),
            Compression::Zstd
        );
        assert_eq!(Compression::sniff(b"ts_end,"), Compression::None);
    }

    #[test]
    fn counts_lines() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"a\n"), 1);
        assert_eq!(count_lines(b"a\nb"), 2);
        assert_eq!(count_lines(b"\n\n"), 2);
    }
}

//! Streaming access-log reading: the log (plain, gzip or zstd) is read line by line until
//! its format is known, then in blocks parsed on worker threads ([`crate::blocks`]); the
//! requests reach the caller in log order. Lines that do not parse are counted (the first
//! few kept with their line numbers) and skipped, never fatal.

use std::io::BufRead;

use crate::parse::{csv_header, detect, CSV_NAMES};
pub use crate::parse::{LogFormat, ReadSummary, BAD_EXAMPLES};
use crate::record::LogRequest;
pub use crate::record::{Requests, LOOK_AHEAD};

/// How a log is read.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    pub format: LogFormat,
    /// Threads parsing the log (the calling thread included); 1 reads on the calling
    /// thread alone. The requests reach the sink in log order whatever the number.
    pub threads: usize,
    /// A request completing more than this before the latest completion already read is
    /// counted as out of order, with its line number.
    pub order_tolerance_s: f64,
    /// Most bytes the blocks in flight between the threads may hold (their text and what
    /// it parses into); under it the blocks are cut smaller ([`crate::blocks::block_bytes`]).
    pub in_flight_bytes: usize,
}

/// The blocks in flight between a reader's threads get one part in this many of a memory
/// limit (`--memory`), in the analysis and in `--sort`'s reading alike.
pub const IN_FLIGHT_SHARE: usize = 16;

/// Default of [`ReadOptions::order_tolerance_s`]: servers write a log in completion order,
/// give or take the buffering of parallel workers.
pub const ORDER_TOLERANCE_S: f64 = 60.0;

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            format: LogFormat::Auto,
            threads: 1,
            order_tolerance_s: ORDER_TOLERANCE_S,
            in_flight_bytes: usize::MAX,
        }
    }
}

/// Every core of the machine (the default of `--threads`).
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Read every request of `input` on the calling thread, calling `sink` for each; returns
/// the summary. Only I/O errors are returned as errors; unparseable lines are counted.
pub fn read_log<R: BufRead + Send>(
    input: R,
    format: LogFormat,
    sink: impl FnMut(&LogRequest<'_>),
) -> std::io::Result<ReadSummary> {
    let opts = ReadOptions {
        format,
        ..Default::default()
    };
    read_log_with(input, &opts, sink)
}

/// A closure taking every request.
struct Each<F>(F);

impl<F: FnMut(&LogRequest<'_>)> Requests for Each<F> {
    fn take(&mut self, r: &LogRequest<'_>) {
        (self.0)(r)
    }
}

/// Read every request of `input` (plain, gzip or zstd), parsing on `opts.threads`
/// threads; `sink` is called on the calling thread, in log order.
pub fn read_log_with<R: BufRead + Send>(
    input: R,
    opts: &ReadOptions,
    sink: impl FnMut(&LogRequest<'_>),
) -> std::io::Result<ReadSummary> {
    read_requests(input, opts, Each(sink))
}

/// [`read_log_with`] handing the requests to `sink`'s [`Requests::take`], each shown to its
/// [`Requests::ahead`] first.
pub fn read_requests<R: BufRead + Send>(
    input: R,
    opts: &ReadOptions,
    sink: impl Requests,
) -> std::io::Result<ReadSummary> {
    let mut sum = ReadSummary::default();
    let mut input = std::io::BufReader::with_capacity(1 << 16, crate::blocks::decompressed(input)?);
    let mut buf = Vec::with_capacity(256);
    let mut fmt = opts.format;
    let mut cols = None;
    // Up to the first line that decides the format (and, for the CSV, its header), line by
    // line; the rest in blocks.
    let mut first = Vec::new();
    loop {
        buf.clear();
        match input.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => match crate::blocks::corrupt_message(&e) {
                Some(why) => {
                    sum.broken_at(sum.lines + 1, why);
                    break;
                }
                None => return Err(e),
            },
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            sum.lines += 1;
            sum.bad(sum.lines, "not UTF-8".into());
            continue;
        };
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            sum.lines += 1;
            continue;
        }
        if fmt == LogFormat::Auto {
            fmt = detect(line);
        }
        if fmt != LogFormat::Netflix {
            first = std::mem::take(&mut buf);
            break;
        }
        sum.lines += 1;
        match csv_header(line) {
            Some(c) => {
                cols = Some(c);
                break;
            }
            None => sum.bad(
                sum.lines,
                format!("expected the CSV header {}", CSV_NAMES.join(",")),
            ),
        }
    }
    let block_bytes = crate::blocks::block_bytes(opts.threads, opts.in_flight_bytes);
    let blocks = crate::blocks::Blocks::new(input, first, fmt == LogFormat::Netflix, block_bytes);
    let mut out = crate::blocks::Deliver {
        sum: &mut sum,
        sink,
        order_tolerance_s: opts.order_tolerance_s,
        clock: f64::NEG_INFINITY,
    };
    if fmt != LogFormat::Auto && (fmt != LogFormat::Netflix || cols.is_some()) {
        crate::blocks::run(blocks, fmt, cols, opts.threads.max(1), &mut out)?;
    }
    sum.format = match fmt {
        LogFormat::Auto => "empty",
        LogFormat::Netflix => "netflix",
        LogFormat::Nginx => "nginx",
        LogFormat::Vodkit => "vodkit",
        LogFormat::Combined => "combined",
        LogFormat::Common => "common",
        LogFormat::Json => "json",
    }
    .to_string();
    Ok(sum)
}

/// A reader that reports how many bytes have gone through it, at most every `every` bytes.
pub struct Progress<R, F: FnMut(u64)> {
    inner: R,
    done: u64,
    next: u64,
    every: u64,
    report: F,
}

impl<R, F: FnMut(u64)> Progress<R, F> {
    pub fn new(inner: R, every: u64, report: F) -> Self {
        Progress {
            inner,
            done: 0,
            next: every,
            every: every.max(1),
            report,
        }
    }
}

impl<R: std::io::Read, F: FnMut(u64)> std::io::Read for Progress<R, F> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        if self.done >= self.next || n == 0 {
            (self.report)(self.done);
            self.next = self.done + self.every;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RequestKind;

    type Row = (String, String, u64, u64, RequestKind, f64);

    fn collect(text: &str, f: LogFormat) -> (Vec<Row>, ReadSummary) {
        let mut out = Vec::new();
        let sum = read_log(text.as_bytes(), f, |r| {
            out.push((
                r.session.to_string(),
                r.file.to_string(),
                r.offset,
                r.extent,
                r.kind,
                r.recv_s(),
            ))
        })
        .unwrap();
        (out, sum)
    }

    /// The `i`-th bad line reported in `sum` is said to have `what` wrong.
    fn assert_bad(sum: &ReadSummary, i: usize, what: &str) {
        assert!(
            sum.bad_examples[i].1.contains(what),
            "{:?}",
            sum.bad_examples
        );
    }

    #[test]
    fn each_request_is_shown_ahead_before_it_is_taken() {
        #[derive(Default)]
        struct Log {
            taken: Vec<u64>,
            ahead: Vec<u64>,
        }
        impl Requests for &mut Log {
            fn take(&mut self, r: &LogRequest<'_>) {
                self.taken.push(r.offset);
            }
            fn ahead(&mut self, r: &LogRequest<'_>) {
                // Shown exactly LOOK_AHEAD requests before it is taken.
                assert_eq!(self.taken.len() + LOOK_AHEAD, r.offset as usize);
                self.ahead.push(r.offset);
            }
        }
        let mut text = String::from(
            "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n",
        );
        for i in 0..200 {
            text.push_str(&format!("{},0.1,s{},f,{i},1,0,1,tv\n", 10 + i, i % 7));
        }
        let mut log = Log::default();
        read_requests(text.as_bytes(), &ReadOptions::default(), &mut log).unwrap();
        assert_eq!(log.taken, (0..200).collect::<Vec<u64>>());
        // One block: every request past the first LOOK_AHEAD was shown ahead.
        assert_eq!(log.ahead, log.taken[LOOK_AHEAD..]);
    }

    #[test]
    fn netflix_csv_with_bad_lines() {
        let text =
            "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n\
                    10,0.5,s1,f1,0,100,0,100,tv\n\
                    11,2,s1,f1,100,,1,5000,tv\n\
                    garbage\n\
                    12,0.1,s1,f1,x,1,0,1,tv\n\
                    13,0.1,s1,f1,1,,0,1,tv\n";
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert_eq!(sum.format, "netflix");
        assert_eq!(reqs.len(), 2);
        assert_eq!(
            reqs[0],
            ("s1".into(), "f1".into(), 0, 100, RequestKind::Chunk, 9.5)
        );
        assert_eq!(reqs[1].3, 5000);
        assert_eq!(reqs[1].4, RequestKind::Open);
        assert_eq!(sum.bad_lines, 3);
        assert_eq!(sum.bad_examples[0].0, 4);
        assert_bad(&sum, 1, "field offset");
        assert_bad(&sum, 2, "field length");
        assert!(sum.describe().contains("line 4"));
    }

    #[test]
    fn netflix_csv_bytes_not_utf8_fail_only_the_fields_read() {
        let mut text =
            b"ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n"
                .to_vec();
        text.extend_from_slice(b"10,0.5,s1,f1,0,100,0,100,t\xffv\n");
        text.extend_from_slice(b"11,0.5,s\xc3,f1,100,100,0,100,tv\n");
        text.extend_from_slice("12,0.5,s\u{e9},f1,200,100,0,100,tv\n".as_bytes());
        let mut sessions = Vec::new();
        let sum = read_log(&text[..], LogFormat::Auto, |r| {
            sessions.push(r.session.to_string())
        })
        .unwrap();
        assert_eq!(sessions, vec!["s1".to_string(), "s\u{e9}".to_string()]);
        assert_eq!(sum.bad_lines, 1);
        assert_eq!(sum.bad_examples[0].0, 3);
        assert_bad(&sum, 0, "field session: not UTF-8");
    }

    #[test]
    fn netflix_csv_fields_may_be_quoted() {
        let text =
            "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n\
                    10,0.5,\"s,\"\"1\"\"\",\"nf/a, b.mp4\",0,100,0,100,tv\n\
                    \n\
                    11,0.5,s2,f,0,100,0,100,tv\n";
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert_eq!(sum.bad_lines, 0, "{:?}", sum.bad_examples);
        assert_eq!(reqs.len(), 2);
        assert_eq!(
            (reqs[0].0.as_str(), reqs[0].1.as_str()),
            ("s,\"1\"", "nf/a, b.mp4")
        );
        assert_eq!(sum.lines, 4);
    }

    #[test]
    fn nginx_lines_with_and_without_session() {
        let text =
            "1700000000.500 0.250 17 \"abc\" \"/nf/v1.mp4?x=1\" \"bytes=100-199\" 206 400 100\n\
                    1700000001.000 1.000 18 \"-\" \"/nf/v1.mp4\" \"bytes=200-\" 206 9300 9000\n\
                    1700000002.000 0.001 18 \"-\" \"/missing\" \"-\" 404 150 0\n\
                    1700000003.000 0.001 18 \"-\" \"/nf/v1.mp4\" \"bytes=0-1,5-9\" 206 150 10\n";
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert_eq!(sum.format, "nginx");
        assert_eq!(reqs.len(), 2, "{sum:?}");
        assert_eq!(reqs[0].0, "abc");
        assert_eq!(reqs[0].1, "nf/v1.mp4");
        assert_eq!((reqs[0].2, reqs[0].3), (100, 100));
        assert_eq!(reqs[1].0, "18");
        assert_eq!(
            (reqs[1].2, reqs[1].3, reqs[1].4),
            (200, 9000, RequestKind::Open)
        );
        assert_eq!(sum.skipped_status, 1);
        assert_eq!(sum.unsupported_range, 1);
    }

    #[test]
    fn ranges_past_the_end_of_u64_are_bad_lines_not_panics() {
        let text =
            "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n\
                    1,0,s,f,18446744073709551615,10,0,10,tv\n";
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert!(reqs.is_empty());
        assert_eq!(sum.bad_lines, 1);
        let nginx = "1.0 0.1 1 \"s\" \"/f\" \"bytes=18446744073709551615-\" 206 10 10\n";
        let (reqs, sum) = collect(nginx, LogFormat::Nginx);
        assert!(reqs.is_empty());
        assert_eq!(sum.bad_lines, 1);
    }

    #[test]
    fn progress_reports_bytes_read() {
        use std::io::Read;
        let mut seen = Vec::new();
        let mut r = Progress::new(&b"0123456789"[..], 4, |n| seen.push(n));
        let mut buf = [0u8; 3];
        while r.read(&mut buf).unwrap() > 0 {}
        assert_eq!(seen, vec![6, 10, 10]);
    }

    #[test]
    fn vodkit_tsv_lines() {
        let text = "#vodkit-access-log v1\tend_time\tservice_time\tclient\tconn\treq\tsession\tmethod\tpath\trange\tstatus\tbytes\tbytes_mem\tbytes_disk\toutcome\n\
                    100.000001\t0.5\t127.0.0.1:5000\t3\t1\tsess9\tGET\t/nf/a.mp4\t0-99\t206\t100\t100\t0\tdone\n\
                    101.0\t0.5\t127.0.0.1:5000\t3\t2\tsess9\tGET\t/nf/a.mp4\t100-\t206\t50\t0\t50\taborted\n\
                    101.0\tbad\n";
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert_eq!(sum.format, "vodkit");
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].0, "sess9");
        assert_eq!(
            (reqs[1].2, reqs[1].3, reqs[1].4),
            (100, 50, RequestKind::Open)
        );
        assert_eq!(sum.bad_lines, 1);
    }

    const COMBINED: &str = "\
192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /v/a.mp4?x=1 HTTP/1.1\" 206 1000 \"-\" \"Mozilla/5.0 (X11)\" 0.250 \"bytes=0-999\"
192.0.2.1 - - [10/Oct/2000:13:55:37 -0700] \"GET /v/a.mp4 HTTP/1.1\" 200 5000 \"http://r/\" \"Mozilla/5.0 (X11)\"
192.0.2.1 - - [10/Oct/2000:13:55:38 -0700] \"GET /v/a.mp4 HTTP/1.1\" 206 10 \"-\" \"curl \\\"q\\\"\" 0.001
this is not a log line
192.0.2.2 - - [10/Oct/2000:13:55:38 -0700] \"HEAD /v/a.mp4 HTTP/1.1\" 200 0 \"-\" \"x\"
192.0.2.2 - - [99/Oct/2000:13:55:38 -0700] \"GET /v/a.mp4 HTTP/1.1\" 200 10 \"-\" \"x\"
";

    #[test]
    fn combined_log_with_optional_columns_and_bad_lines() {
        let (reqs, sum) = collect(COMBINED, LogFormat::Auto);
        assert_eq!(sum.format, "combined");
        assert_eq!(sum.lines, 6);
        assert_eq!(sum.requests, 3);
        assert_eq!(sum.bad_lines, 2);
        assert_eq!(sum.bad_examples[0].0, 4);
        assert_eq!(sum.bad_examples[1].0, 6);
        assert_eq!(sum.skipped_status, 1, "HEAD is not a content request");
        // 2000-10-10 20:55:36 UTC.
        let t0 = 971_211_336.0;
        assert_eq!(
            reqs[0],
            (
                "192.0.2.1 Mozilla/5.0 (X11)".to_string(),
                "v/a.mp4".to_string(),
                0,
                1000,
                RequestKind::Chunk,
                t0 - 0.25
            )
        );
        assert_eq!(reqs[1].0, reqs[0].0, "same client and agent: one session");
        assert_eq!(
            (reqs[1].3, reqs[1].4, reqs[1].5),
            (5000, RequestKind::Open, t0 + 1.0)
        );
        assert_eq!(
            reqs[2].0, "192.0.2.1 curl \\\"q\\\"",
            "escaped quote kept in the field"
        );
    }

    #[test]
    fn common_log_sessions_by_address() {
        let text = "\
10.0.0.1 - bob [01/Jan/1970:00:00:10 +0000] \"GET /a HTTP/1.0\" 200 100
10.0.0.2 - - [01/Jan/1970:00:00:11 +0100] \"GET /b HTTP/1.0\" 200 -
10.0.0.2 - - [01/Jan/1970:01:00:12 +0100] \"GET /b HTTP/1.0\" 206 7 0.5 \"bytes=3-9\"
";
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert_eq!(sum.format, "common");
        assert_eq!(sum.bad_lines, 1, "{}", sum.describe());
        assert_eq!(
            sum.bad_examples[0].0, 2,
            "timestamp before 1970 after the zone"
        );
        assert_eq!(reqs.len(), 2, "the second line is bad");
        assert_eq!(reqs[0].0, "10.0.0.1");
        assert_eq!(reqs[0].5, 10.0);
        assert_eq!((reqs[1].2, reqs[1].3, reqs[1].5), (3, 7, 11.5));
        // Forced format on the other kind of log: lines are bad, none fatal (the third,
        // with both optional columns, has as many fields as `combined` and reads as one).
        let (reqs, sum) = collect(text, LogFormat::Combined);
        assert_eq!(reqs.len(), 1);
        assert_eq!(sum.bad_lines, 2);
        assert_eq!(sum.bad_examples[0].0, 1);
    }

    /// Property test: random bytes and mangled lines, fed to every reader, never panic,
    /// and every line is either a request, skipped, or counted as bad.
    #[test]
    fn random_input_is_never_fatal() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || vodkit_testkit::xorshift(&mut x);
        let seeds = [
            COMBINED,
            "10.0.0.1 - - [01/Jan/1970:00:00:10 +0000] \"GET /a HTTP/1.0\" 200 100 1 \"0-\"\n",
        ];
        let alphabet = b" \"[]/:-+0123456789.\\\tGETa\n\xff";
        for round in 0..3000 {
            let mut text: Vec<u8> = seeds[round % 2].as_bytes().to_vec();
            for _ in 0..(rnd() % 8) {
                let i = (rnd() as usize) % text.len().max(1);
                match rnd() % 3 {
                    0 => {
                        text.insert(
                            i.min(text.len()),
                            alphabet[(rnd() as usize) % alphabet.len()],
                        );
                    }
                    1 if !text.is_empty() => {
                        text.remove(i.min(text.len() - 1));
                    }
                    _ => {
                        if let Some(b) = text.get_mut(i) {
                            *b = rnd() as u8;
                        }
                    }
                }
            }
            for f in [
                LogFormat::Auto,
                LogFormat::Json,
                LogFormat::Combined,
                LogFormat::Common,
                LogFormat::Nginx,
                LogFormat::Vodkit,
            ] {
                let mut n = 0u64;
                let sum = read_log(&text[..], f, |r| {
                    assert!(r.offset.checked_add(r.extent).is_some());
                    n += 1;
                })
                .unwrap();
                assert_eq!(sum.requests, n);
                assert!(sum.bad_lines <= sum.lines);
                if round % 10 == 0 {
                    // The parallel reader finds the same.
                    let opts = ReadOptions {
                        format: f,
                        threads: 2,
                        ..Default::default()
                    };
                    assert_eq!(read_log_with(&text[..], &opts, |_| {}).unwrap(), sum);
                }
            }
        }
    }

    #[test]
    fn json_lines_as_nginx_escape_json_writes_them() {
        let text = r#"{"msec":"1700000000.500","remote_addr":"10.1.1.1","request_method":"GET","request_uri":"/v/b.mp4?t=1","status":"206","body_bytes_sent":"100","request_time":"0.100","http_user_agent":"VLC \"x\"","http_range":"bytes=100-199"}
{"msec":1700000001,"remote_addr":"10.1.1.1","request_uri":"/v/b.mp4","status":200,"body_bytes_sent":50,"http_user_agent":"VLC \"x\""}
{"msec":"1700000002","remote_addr":"10.1.1.1","request_method":"HEAD","request_uri":"/v/b.mp4","status":"200","body_bytes_sent":"0"}
{"msec":"x","remote_addr":"10.1.1.1","request_uri":"/v/b.mp4","status":"200","body_bytes_sent":"0"}
{"remote_addr":
"#;
        let (reqs, sum) = collect(text, LogFormat::Auto);
        assert_eq!(sum.format, "json");
        assert_eq!(sum.skipped_status, 1);
        assert_eq!(sum.bad_lines, 2, "{}", sum.describe());
        assert_eq!(
            sum.bad_examples.iter().map(|b| b.0).collect::<Vec<_>>(),
            [4, 5]
        );
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].0, "10.1.1.1 VLC \"x\"");
        assert_eq!(reqs[0].1, "v/b.mp4");
        assert_eq!(
            (reqs[0].2, reqs[0].3, reqs[0].4),
            (100, 100, RequestKind::Chunk)
        );
        assert!((reqs[0].5 - 1_700_000_000.4).abs() < 1e-6);
        assert_eq!(reqs[1].0, reqs[0].0);
        assert_eq!((reqs[1].3, reqs[1].4), (50, RequestKind::Open));
    }
}

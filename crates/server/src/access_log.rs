//! The access log: one tab-separated line per response, written by a background task so
//! connections never wait for the disk. The format is documented in `docs/server.md`
//! and is read back by `vodkit trace`. On SIGUSR1 the file is flushed, closed and opened
//! again by name, so logrotate can move it away (`postrotate kill -USR1 PID`).

use std::borrow::Cow;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use strum::{EnumString, IntoStaticStr, VariantNames};

/// First line written to a new log file; names the format version.
pub const HEADER: &str = "#vodkit-access-log v1";

/// Second line written to a new log file: the field names, as many tab-separated fields as
/// every data line has (the leading `#` marks it as a comment for readers).
pub const FIELDS: &str = "#end_time\tservice_time\tclient\tconn\treq\tsession\tmethod\tpath\trange\tstatus\tbytes\tbytes_mem\tbytes_disk\toutcome\tversion\thost\tuser_agent\treferer";

/// How lines are written: tab-separated (the default, with two header lines) or one JSON
/// object per line with the same field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, EnumString, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_format)]
pub enum AccessLogFormat {
    #[default]
    Tsv,
    Jsonl,
}

fn unknown_format(s: &str) -> String {
    vodkit_units::unknown_choice("access log format", s, AccessLogFormat::VARIANTS)
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// Every byte was handed to the kernel.
    Done,
    /// The client went away or the socket failed mid-response.
    Aborted,
    /// The client read slower than the minimum send rate.
    #[strum(serialize = "slow")]
    TooSlow,
    /// The file could not be read from its disk.
    ReadError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Everything one log line says. The request's texts are borrowed: a line is rendered as
/// soon as it is recorded, so serving a request copies none of them.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub end: SystemTime,
    pub service: Duration,
    pub client: SocketAddr,
    pub conn: u64,
    pub req: u64,
    pub session: Option<Cow<'a, str>>,
    pub method: Cow<'a, str>,
    pub path: Cow<'a, str>,
    pub range: Cow<'a, str>,
    pub status: u16,
    pub bytes: u64,
    pub bytes_mem: u64,
    pub bytes_disk: u64,
    pub outcome: Outcome,
    /// `HTTP/1.0` or `HTTP/1.1`; `None` for heads that could not be parsed.
    pub version: Option<&'static str>,
    pub host: Option<Cow<'a, str>>,
    pub user_agent: Option<Cow<'a, str>>,
    pub referer: Option<Cow<'a, str>>,
}

/// Replace bytes that would break the field structure (controls, spaces, non-ASCII) with
/// percent escapes; an empty value becomes `-`.
pub fn field(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len());
    push_field(&mut out, text.as_bytes(), true);
    String::from_utf8_lossy(&out).into_owned()
}

/// Like [`field`] for a request target, which is already percent-encoded on the wire: a
/// `%` is kept as is (so `/%2e%2e/` is logged as `/%2e%2e/`, not `/%252e%252e/`), other
/// bytes that would break the field structure are escaped.
pub fn target_field(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len());
    push_field(&mut out, text.as_bytes(), false);
    String::from_utf8_lossy(&out).into_owned()
}

/// Appends `text` as one field: printable ASCII as is (`%` too unless `escape_percent`),
/// every other byte as `%XX`; `-` for an empty value.
fn push_field(out: &mut Vec<u8>, text: &[u8], escape_percent: bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if text.is_empty() {
        out.push(b'-');
        return;
    }
    let plain = |b: u8| (0x21..0x7f).contains(&b) && !(escape_percent && b == b'%');
    // Runs of bytes that need no escape are copied whole.
    let mut rest = text;
    while !rest.is_empty() {
        let run = rest.iter().position(|&b| !plain(b)).unwrap_or(rest.len());
        out.extend_from_slice(&rest[..run]);
        if let Some(&b) = rest.get(run) {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            rest = &rest[run + 1..];
        } else {
            rest = &[];
        }
    }
}

/// The first `max` bytes of `s` at most, cut at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// An integer in decimal.
fn push_int(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `.` and a fraction of a second in six digits.
fn push_micros(out: &mut Vec<u8>, us: u32) {
    let mut digits = [b'0'; 7];
    digits[0] = b'.';
    let mut n = us.min(999_999);
    for d in digits[1..].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits);
}

/// A socket address as `Display` writes it (`a.b.c.d:port`, `[v6]:port`).
fn push_addr(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(a) => {
            for (i, octet) in a.ip().octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(itoa::Buffer::new().format(octet).as_bytes());
            }
            out.push(b':');
            push_int(out, u64::from(a.port()));
        }
        SocketAddr::V6(_) => {
            let _ = write!(out, "{addr}");
        }
    }
}

/// [`push_field`] of an optional header value (at most its first `max` bytes, cut at a
/// character boundary), `-` when absent.
fn push_opt_field(out: &mut Vec<u8>, v: Option<&str>, max: usize) {
    match v {
        Some(s) => push_field(out, cut(s, max).as_bytes(), true),
        None => out.push(b'-'),
    }
}

impl Entry<'_> {
    /// The entry of request `req` on connection `conn` from `client`, ending now after
    /// `service`: a head nothing is known of (every request field `-`, status 0, no bytes,
    /// `done`) for the caller to fill in.
    pub fn ending_now(
        client: SocketAddr,
        conn: u64,
        req: u64,
        service: Duration,
    ) -> Entry<'static> {
        Entry {
            end: SystemTime::now(),
            service,
            client,
            conn,
            req,
            session: None,
            method: "-".into(),
            path: "-".into(),
            range: "-".into(),
            status: 0,
            bytes: 0,
            bytes_mem: 0,
            bytes_disk: 0,
            outcome: Outcome::Done,
            version: None,
            host: None,
            user_agent: None,
            referer: None,
        }
    }

    /// The memory and disk byte counts, capped so that `mem + disk <= bytes`: the counters
    /// measure bytes read for the response, which exceed the bytes sent when the client
    /// went away mid-response. Memory bytes count first, then disk bytes.
    pub fn sent_split(&self) -> (u64, u64) {
        let mem = self.bytes_mem.min(self.bytes);
        let disk = self.bytes_disk.min(self.bytes - mem);
        (mem, disk)
    }

    /// The entry as one line (with trailing newline).
    pub fn line(&self) -> String {
        let mut out = Vec::with_capacity(256);
        self.write_tsv(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Appends the entry's tab-separated line (with trailing newline) to `out`, with no
    /// allocation of its own: the server renders every response's line this way.
    pub fn write_tsv(&self, out: &mut Vec<u8>) {
        let end = self.end.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (mem, disk) = self.sent_split();
        // Writing to a Vec cannot fail.
        // The service time to the microsecond, rounded, in integers (a float format was a
        // quarter of this function's time).
        let service_us = (self.service.as_nanos() + 500) / 1000;
        // Integers through `itoa`: `write!` was most of this function's time.
        push_int(out, end.as_secs());
        push_micros(out, end.subsec_micros());
        out.push(b'\t');
        push_int(
            out,
            u64::try_from(service_us / 1_000_000).unwrap_or(u64::MAX),
        );
        push_micros(out, (service_us % 1_000_000) as u32);
        out.push(b'\t');
        push_addr(out, self.client);
        out.push(b'\t');
        push_int(out, self.conn);
        out.push(b'\t');
        push_int(out, self.req);
        out.push(b'\t');
        push_opt_field(out, self.session.as_deref(), 256);
        out.push(b'\t');
        push_field(out, self.method.as_bytes(), true);
        out.push(b'\t');
        push_field(out, self.path.as_bytes(), false);
        out.push(b'\t');
        out.extend_from_slice(self.range.as_bytes());
        for n in [u64::from(self.status), self.bytes, mem, disk] {
            out.push(b'\t');
            push_int(out, n);
        }
        out.push(b'\t');
        out.extend_from_slice(self.outcome.as_str().as_bytes());
        out.push(b'\t');
        out.extend_from_slice(self.version.unwrap_or("-").as_bytes());
        out.push(b'\t');
        push_opt_field(out, self.host.as_deref(), 1024);
        out.push(b'\t');
        push_opt_field(out, self.user_agent.as_deref(), 1024);
        out.push(b'\t');
        push_opt_field(out, self.referer.as_deref(), 1024);
        out.push(b'\n');
    }
}

impl Entry<'_> {
    /// The entry as one JSON object (with trailing newline); strings are written as they
    /// came (JSON escaping only), times as numbers.
    pub fn json_line(&self) -> String {
        let end = self.end.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (mem, disk) = self.sent_split();
        let v = serde_json::json!({
            "end_time": end.as_secs_f64(),
            "service_time": self.service.as_secs_f64(),
            "client": self.client.to_string(),
            "conn": self.conn,
            "req": self.req,
            "session": self.session.as_deref().map(|s| cut(s, 256)),
            "method": self.method,
            "path": self.path,
            "range": self.range,
            "status": self.status,
            "bytes": self.bytes,
            "bytes_mem": mem,
            "bytes_disk": disk,
            "outcome": self.outcome.as_str(),
            "version": self.version,
            "host": self.host,
            "user_agent": self.user_agent,
            "referer": self.referer,
        });
        let mut s = v.to_string();
        s.push('\n');
        s
    }

    /// Appends the entry's line in `format` to `out`.
    fn render(&self, format: AccessLogFormat, out: &mut Vec<u8>) {
        match format {
            AccessLogFormat::Tsv => self.write_tsv(out),
            AccessLogFormat::Jsonl => out.extend_from_slice(self.json_line().as_bytes()),
        }
    }
}

/// Sending side of the log; cheap to clone. Each response's line is rendered straight
/// into a shared buffer by the connection that served it; a writer task takes the buffer
/// out to the file now and then. Nothing wakes the writer per line: under load one
/// wake-up and one `write` carry hundreds of lines (a wake-up and an allocated line per
/// response were a tenth of the server's CPU serving a popular title from memory).
#[derive(Debug, Clone)]
pub struct AccessLog {
    handle: std::sync::Arc<Handle>,
}

/// Shared by every clone of an [`AccessLog`]; when the last one goes, the writer is told to
/// write out what is left and stop.
#[derive(Debug)]
struct Handle {
    pending: std::sync::Arc<Pending>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.pending.lock().closed = true;
        self.pending.wake.notify_one();
    }
}

/// Lines rendered and not yet written, and the writer's wake-up.
#[derive(Debug)]
struct Pending {
    state: std::sync::Mutex<PendingState>,
    format: AccessLogFormat,
    /// Raised when a line lands in an empty buffer, and when the log closes.
    wake: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct PendingState {
    bytes: Vec<u8>,
    /// Lines rendered since the log opened (the writer's "did another line come?").
    lines: u64,
    closed: bool,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AccessLog {
    /// Open (append) the file and start the writer task. Returns the log handle and the
    /// task, which ends after every handle is dropped and the file is written out.
    pub fn open(
        path: &Path,
        format: AccessLogFormat,
    ) -> io::Result<(AccessLog, tokio::task::JoinHandle<()>)> {
        let out = open_file(path, format)?;
        // Registered before returning, so a SIGUSR1 from now on reopens instead of killing.
        let reopen = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
        let pending = std::sync::Arc::new(Pending {
            state: std::sync::Mutex::new(PendingState {
                bytes: Vec::with_capacity(64 * 1024),
                ..PendingState::default()
            }),
            format,
            wake: tokio::sync::Notify::new(),
        });
        let task = tokio::spawn(write_loop(pending.clone(), out, path.to_path_buf(), reopen));
        Ok((
            AccessLog {
                handle: std::sync::Arc::new(Handle { pending }),
            },
            task,
        ))
    }

    pub fn record(&self, entry: Entry<'_>) {
        let p = &self.handle.pending;
        let first = {
            let mut st = p.lock();
            let first = st.bytes.is_empty();
            entry.render(p.format, &mut st.bytes);
            st.lines += 1;
            first
        };
        if first {
            p.wake.notify_one();
        }
    }
}

/// Open (append) the log file, writing the header lines if it is new.
fn open_file(path: &Path, format: AccessLogFormat) -> io::Result<std::fs::File> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    let fresh = file.metadata()?.len() == 0;
    if fresh && format == AccessLogFormat::Tsv {
        file.write_all(format!("{HEADER}\n{FIELDS}\n").as_bytes())?;
    }
    Ok(file)
}

/// How long the writer waits for another line before writing out what it holds: on an
/// idle server a line reaches the file this soon; under load one `write` carries many lines.
const IDLE_FLUSH: Duration = Duration::from_millis(100);

/// Longest a line waits in the buffer while lines keep coming (nginx's `flush=1s`).
const MAX_FLUSH_DELAY: Duration = Duration::from_secs(1);

async fn write_loop(
    pending: std::sync::Arc<Pending>,
    mut out: std::fs::File,
    path: PathBuf,
    mut reopen: tokio::signal::unix::Signal,
) {
    // The buffer being written; swapped with the shared one so neither is reallocated.
    let mut spare: Vec<u8> = Vec::with_capacity(64 * 1024);
    let write_out = |out: &mut std::fs::File, spare: &mut Vec<u8>| {
        std::mem::swap(&mut pending.lock().bytes, spare);
        if let Err(err) = out.write_all(spare) {
            tracing::error!("access log {}: write failed: {err}", path.display());
        }
        spare.clear();
    };
    let reopen_file = |out: &mut std::fs::File| match open_file(&path, pending.format) {
        Ok(fresh) => *out = fresh,
        Err(err) => tracing::error!(
            "access log {}: reopen failed, still writing the old file: {err}",
            path.display()
        ),
    };
    loop {
        tokio::select! {
            () = pending.wake.notified() => {}
            Some(()) = reopen.recv() => {
                write_out(&mut out, &mut spare);
                reopen_file(&mut out);
                continue;
            }
        }
        // A line came into an empty buffer (or the log closed): wait until none has come
        // for IDLE_FLUSH, or the first has waited MAX_FLUSH_DELAY, then write them out.
        let first = tokio::time::Instant::now();
        loop {
            let (seen, closed) = {
                let st = pending.lock();
                (st.lines, st.closed)
            };
            if closed {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(IDLE_FLUSH) => {}
                Some(()) = reopen.recv() => {
                    write_out(&mut out, &mut spare);
                    reopen_file(&mut out);
                }
            }
            if pending.lock().lines == seen || first.elapsed() >= MAX_FLUSH_DELAY {
                break;
            }
        }
        write_out(&mut out, &mut spare);
        if pending.lock().closed {
            // Lines recorded by requests still finishing after the close went in above.
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_keep_their_log_words() {
        let words = [
            Outcome::Done,
            Outcome::Aborted,
            Outcome::TooSlow,
            Outcome::ReadError,
        ]
        .map(Outcome::as_str);
        assert_eq!(words, ["done", "aborted", "slow", "read_error"]);
    }

    #[test]
    fn line_has_fourteen_fields_and_escapes() {
        let e = Entry {
            end: UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
            session: Some("s 1".into()),
            method: "GET".into(),
            path: "/a b.mp4".into(),
            range: "0-9".into(),
            status: 206,
            bytes: 10,
            bytes_mem: 10,
            bytes_disk: 0,
            outcome: Outcome::Done,
            version: Some("HTTP/1.1"),
            host: Some("localhost:8080".into()),
            user_agent: Some("vodkit-load/0.1 (x)".into()),
            ..Entry::ending_now(
                "127.0.0.1:5000".parse().unwrap(),
                3,
                2,
                Duration::from_micros(2500),
            )
        };
        let line = e.line();
        assert_eq!(
            line,
            "1700000000.123456\t0.002500\t127.0.0.1:5000\t3\t2\ts%201\tGET\t/a%20b.mp4\t0-9\t206\t10\t10\t0\tdone\tHTTP/1.1\tlocalhost:8080\tvodkit-load/0.1%20(x)\t-\n"
        );
        assert_eq!(
            FIELDS.split('\t').count(),
            line.trim_end().split('\t').count()
        );
        assert_eq!(FIELDS.split('\t').count(), 18);
    }

    #[test]
    fn numbers_addresses_and_escape_runs_as_display_would_write_them() {
        let mut e = entry("%x\u{7f}ab%", u64::MAX, 7, 9);
        e.end = UNIX_EPOCH + Duration::new(1_800_000_000, 7_000);
        e.service = Duration::new(3_725, 999_999_600);
        e.user_agent = Some("a\tb c\u{e9}".into());
        for client in [
            "[fe80::1%2]:443",
            "[::1]:80",
            "10.200.3.4:65535",
            "0.0.0.0:0",
        ] {
            e.client = client.parse().unwrap();
            let f = fields(&e.line());
            assert_eq!(f[0], "1800000000.000007");
            // 3725.9999996 s rounds to the next microsecond, carried into the seconds.
            assert_eq!(f[1], "3726.000000");
            assert_eq!(f[2], client);
            assert_eq!(f[7], "%x%7Fab%");
            assert_eq!(f[10], u64::MAX.to_string());
            assert_eq!((f[11].as_str(), f[12].as_str()), ("7", "9"));
            assert_eq!(f[16], "a%09b%20c%C3%A9");
        }
    }

    fn entry(path: &str, bytes: u64, mem: u64, disk: u64) -> Entry<'_> {
        Entry {
            end: UNIX_EPOCH,
            method: "GET".into(),
            path: path.into(),
            status: 200,
            bytes,
            bytes_mem: mem,
            bytes_disk: disk,
            outcome: Outcome::Aborted,
            ..Entry::ending_now("127.0.0.1:5000".parse().unwrap(), 1, 1, Duration::ZERO)
        }
    }

    fn fields(line: &str) -> Vec<String> {
        line.trim_end().split('\t').map(str::to_string).collect()
    }

    #[test]
    fn percent_in_target_is_not_escaped_twice_and_query_kept() {
        let line = entry("/%2e%2e/a b?x=1&y=%41", 5, 0, 0).line();
        assert_eq!(fields(&line)[7], "/%2e%2e/a%20b?x=1&y=%41");
        // A literal % in a free-text field is still escaped.
        assert_eq!(field("50%"), "50%25");
    }

    #[test]
    fn json_line_has_the_same_fields() {
        let mut e = entry("/%2e%2e/a\"b?q=1", 0, 30_416, 0);
        e.session = Some("s\t1".into());
        let v: serde_json::Value = serde_json::from_str(e.json_line().trim_end()).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), FIELDS.split('\t').count());
        for name in FIELDS.trim_start_matches('#').split('\t') {
            assert!(obj.contains_key(name), "{name}");
        }
        assert_eq!(v["path"], "/%2e%2e/a\"b?q=1");
        assert_eq!(v["session"], "s\t1");
        assert_eq!(v["bytes_mem"], 0);
        assert_eq!(v["outcome"], "aborted");
        assert_eq!("jsonl".parse(), Ok(AccessLogFormat::Jsonl));
        assert!("xml".parse::<AccessLogFormat>().is_err());
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        // 255 ASCII bytes then a two-byte character across the 256-byte cut of a session id.
        let mut e = entry("/a", 1, 0, 0);
        e.session = Some(format!("{}é and more", "s".repeat(255)).into());
        e.user_agent = Some(format!("{}ü", "u".repeat(1023)).into());
        let f = fields(&e.line());
        assert_eq!(f[5], "s".repeat(255));
        assert_eq!(f[16], "u".repeat(1023));
        let v: serde_json::Value = serde_json::from_str(e.json_line().trim_end()).unwrap();
        assert_eq!(v["session"], "s".repeat(255));
    }

    /// Runs `body` with a TSV access log writing to `path`, on a runtime of its own; then,
    /// the log closed (`body` drops its handles), waits until its task has written all.
    fn with_log(path: &Path, body: impl AsyncFnOnce(AccessLog)) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (log, task) = AccessLog::open(path, AccessLogFormat::Tsv).unwrap();
            body(log).await;
            task.await.unwrap();
        });
    }

    #[test]
    fn lines_from_many_threads_arrive_whole_and_all_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        with_log(&path, async |log| {
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let log = log.clone();
                    std::thread::spawn(move || {
                        for i in 0..500 {
                            log.record(entry(&format!("/t{t}/{i}"), i, 0, 0));
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines.len(), 2000);
        for l in &lines {
            assert_eq!(l.split('\t').count(), 18, "{l}");
        }
        for t in 0..4 {
            for i in [0, 499] {
                let want = format!("\t/t{t}/{i}\t");
                assert!(text.contains(&want), "{want} missing");
            }
        }
    }

    #[test]
    fn memory_plus_disk_never_exceeds_sent() {
        for (bytes, mem, disk) in [
            (0, 30_416, 0),
            (0, 0, 30_416),
            (100, 60, 60),
            (100, 30, 20),
            (7, 0, 9),
        ] {
            let f = fields(&entry("/a", bytes, mem, disk).line());
            let m: u64 = f[11].parse().unwrap();
            let d: u64 = f[12].parse().unwrap();
            assert!(m + d <= bytes, "{bytes} {mem} {disk} -> {m} {d}");
            assert_eq!(m, mem.min(bytes));
            if mem + disk <= bytes {
                assert_eq!((m, d), (mem, disk));
            }
        }
    }

    #[test]
    fn sigusr1_reopens_the_file_by_name() {
        let dir = std::env::temp_dir().join(format!("vodkit-alog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let moved = dir.join("access.log.1");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&moved);
        with_log(&path, async |log| {
            log.record(entry("/before", 1, 0, 0));
            let wait_for = |p: PathBuf, what: &'static str| async move {
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    if text.contains(what) {
                        return text;
                    }
                    assert!(std::time::Instant::now() < deadline, "{what} never written");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            wait_for(path.clone(), "/before").await;
            std::fs::rename(&path, &moved).unwrap();
            // SAFETY: raising a signal in our own process; its handler was installed by
            // AccessLog::open in `with_log`.
            unsafe {
                libc::raise(libc::SIGUSR1);
            }
            // Entries recorded until the reopen still go to the moved file; poll until a
            // new file with the header appears, then check a new entry lands there.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !path.exists() {
                assert!(std::time::Instant::now() < deadline, "file never reopened");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            log.record(entry("/after", 1, 0, 0));
            let new = wait_for(path.clone(), "/after").await;
            assert!(new.starts_with(HEADER), "{new}");
            assert!(!new.contains("/before"));
            let old = std::fs::read_to_string(&moved).unwrap();
            assert!(old.contains("/before") && !old.contains("/after"), "{old}");
            drop(log);
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lines_reach_the_file_when_idle_and_at_most_a_second_late_under_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        with_log(&path, async |log| {
            let lines = || {
                std::fs::read_to_string(&path)
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .count()
            };
            // An idle server: the one line is written soon after, without a shutdown.
            log.record(entry("/idle", 1, 0, 0));
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while lines() < 1 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "an idle line was never written"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Under load (a line every 20 ms, never idle for 100 ms), lines still reach
            // the file while they keep coming, though the 64 KiB buffer is far from full,
            // and in a few writes, not one per line. (Another test of this binary raises
            // SIGUSR1, which flushes too: one more write at most.)
            let start = std::time::Instant::now();
            let (mut sent, mut grew, mut last) = (0, 0, lines());
            while start.elapsed() < Duration::from_millis(2500) {
                log.record(entry("/busy", 1, 0, 0));
                sent += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let now = lines();
                if now != last {
                    grew += 1;
                    last = now;
                }
            }
            assert!(grew >= 1, "{sent} lines in 2.5 s of load, none written");
            assert!(grew <= 8, "{grew} writes for {sent} lines");
        });
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.lines().filter(|l| l.contains("/busy")).count() > 5);
    }
}

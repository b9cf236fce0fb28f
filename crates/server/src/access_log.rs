//! The access log: one tab-separated line per response, written by a background task so
//! connections never wait for the disk. The format is documented in `docs/server.md`
//! and is read back by `vodkit trace`. On SIGUSR1 the file is flushed, closed and opened
//! again by name, so logrotate can move it away (`postrotate kill -USR1 PID`).

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

/// First line written to a new log file; names the format version.
pub const HEADER: &str = "#vodkit-access-log v1";

/// Second line written to a new log file: the field names, as many tab-separated fields as
/// every data line has (the leading `#` marks it as a comment for readers).
pub const FIELDS: &str = "#end_time\tservice_time\tclient\tconn\treq\tsession\tmethod\tpath\trange\tstatus\tbytes\tbytes_mem\tbytes_disk\toutcome\tversion\thost\tuser_agent\treferer";

/// How lines are written: tab-separated (the default, with two header lines) or one JSON
/// object per line with the same field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessLogFormat {
    #[default]
    Tsv,
    Jsonl,
}

impl std::str::FromStr for AccessLogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tsv" => Ok(AccessLogFormat::Tsv),
            "jsonl" => Ok(AccessLogFormat::Jsonl),
            _ => Err(format!(
                "unknown access log format {s:?} (expected tsv or jsonl)"
            )),
        }
    }
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every byte was handed to the kernel.
    Done,
    /// The client went away or the socket failed mid-response.
    Aborted,
    /// The client read slower than the minimum send rate.
    TooSlow,
    /// The file could not be read from its disk.
    ReadError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Aborted => "aborted",
            Outcome::TooSlow => "slow",
            Outcome::ReadError => "read_error",
        }
    }
}

/// Everything one log line says.
#[derive(Debug, Clone)]
pub struct Entry {
    pub end: SystemTime,
    pub service: Duration,
    pub client: SocketAddr,
    pub conn: u64,
    pub req: u64,
    pub session: Option<String>,
    pub method: String,
    pub path: String,
    pub range: String,
    pub status: u16,
    pub bytes: u64,
    pub bytes_mem: u64,
    pub bytes_disk: u64,
    pub outcome: Outcome,
    /// `HTTP/1.0` or `HTTP/1.1`; `None` for heads that could not be parsed.
    pub version: Option<&'static str>,
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub referer: Option<String>,
}

/// Replace bytes that would break the field structure (controls, spaces, non-ASCII) with
/// percent escapes; an empty value becomes `-`.
pub fn field(text: &str) -> String {
    if text.is_empty() {
        return "-".into();
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Like [`field`] for a request target, which is already percent-encoded on the wire: a
/// `%` is kept as is (so `/%2e%2e/` is logged as `/%2e%2e/`, not `/%252e%252e/`), other
/// bytes that would break the field structure are escaped.
pub fn target_field(text: &str) -> String {
    if text.is_empty() {
        return "-".into();
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x21..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// [`field`] of an optional header value (at most 1024 bytes), `-` when absent.
fn opt_field(v: &Option<String>) -> String {
    match v.as_deref() {
        Some(s) => {
            let mut end = s.len().min(1024);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            field(&s[..end])
        }
        None => "-".into(),
    }
}

impl Entry {
    /// The entry of request `req` on connection `conn` from `client`, ending now after
    /// `service`: a head nothing is known of (every request field `-`, status 0, no bytes,
    /// `done`) for the caller to fill in.
    pub fn ending_now(client: SocketAddr, conn: u64, req: u64, service: Duration) -> Entry {
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
        let end = self.end.duration_since(UNIX_EPOCH).unwrap_or_default();
        let session = self
            .session
            .as_deref()
            .map(|s| field(&s[..s.len().min(256)]));
        let (mem, disk) = self.sent_split();
        format!(
            "{}.{:06}\t{:.6}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            end.as_secs(),
            end.subsec_micros(),
            self.service.as_secs_f64(),
            self.client,
            self.conn,
            self.req,
            session.as_deref().unwrap_or("-"),
            field(&self.method),
            target_field(&self.path),
            self.range,
            self.status,
            self.bytes,
            mem,
            disk,
            self.outcome.as_str(),
            self.version.unwrap_or("-"),
            opt_field(&self.host),
            opt_field(&self.user_agent),
            opt_field(&self.referer),
        )
    }
}

impl Entry {
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
            "session": self.session.as_deref().map(|s| &s[..s.len().min(256)]),
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

    fn render(&self, format: AccessLogFormat) -> String {
        match format {
            AccessLogFormat::Tsv => self.line(),
            AccessLogFormat::Jsonl => self.json_line(),
        }
    }
}

/// Sending side of the log; cheap to clone.
#[derive(Debug, Clone)]
pub struct AccessLog {
    tx: mpsc::UnboundedSender<Entry>,
}

impl AccessLog {
    /// Open (append) the file and start the writer task. Returns the log handle and the
    /// task, which ends after every handle is dropped and the file is flushed.
    pub fn open(
        path: &Path,
        format: AccessLogFormat,
    ) -> io::Result<(AccessLog, tokio::task::JoinHandle<()>)> {
        let out = open_file(path, format)?;
        // Registered before returning, so a SIGUSR1 from now on reopens instead of killing.
        let reopen = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_loop(rx, out, path.to_path_buf(), format, reopen));
        Ok((AccessLog { tx }, task))
    }

    pub fn record(&self, entry: Entry) {
        let _ = self.tx.send(entry);
    }
}

/// Open (append) the log file, writing the header lines if it is new.
fn open_file(path: &Path, format: AccessLogFormat) -> io::Result<BufWriter<std::fs::File>> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let fresh = file.metadata()?.len() == 0;
    let mut out = BufWriter::with_capacity(64 * 1024, file);
    if fresh && format == AccessLogFormat::Tsv {
        writeln!(out, "{HEADER}")?;
        writeln!(out, "{FIELDS}")?;
        out.flush()?;
    }
    Ok(out)
}

/// How long the writer waits for another entry before writing out what it holds: on an
/// idle server a line reaches the file this soon; under load one `write` carries many lines
/// (a `write` per line was a tenth of the server's CPU serving a popular title from memory).
const IDLE_FLUSH: Duration = Duration::from_millis(100);

/// Longest a line waits in the buffer while entries keep coming (nginx's `flush=1s`).
const MAX_FLUSH_DELAY: Duration = Duration::from_secs(1);

async fn write_loop(
    mut rx: mpsc::UnboundedReceiver<Entry>,
    mut out: BufWriter<std::fs::File>,
    path: PathBuf,
    format: AccessLogFormat,
    mut reopen: tokio::signal::unix::Signal,
) {
    let mut batch = Vec::with_capacity(256);
    // When the oldest line not yet written out was buffered.
    let mut pending_since: Option<tokio::time::Instant> = None;
    loop {
        let n = tokio::select! {
            n = rx.recv_many(&mut batch, 256) => n,
            () = tokio::time::sleep(IDLE_FLUSH), if pending_since.is_some() => {
                let _ = out.flush();
                pending_since = None;
                continue;
            }
            Some(()) = reopen.recv() => {
                let _ = out.flush();
                pending_since = None;
                match open_file(&path, format) {
                    Ok(fresh) => out = fresh,
                    Err(err) => tracing::error!(
                        "access log {}: reopen failed, still writing the old file: {err}",
                        path.display()
                    ),
                }
                continue;
            }
        };
        if n == 0 {
            break;
        }
        for e in batch.drain(..) {
            if let Err(err) = out.write_all(e.render(format).as_bytes()) {
                tracing::error!("access log write failed: {err}");
            }
        }
        let since = *pending_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= MAX_FLUSH_DELAY {
            let _ = out.flush();
            pending_since = None;
        }
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn entry(path: &str, bytes: u64, mem: u64, disk: u64) -> Entry {
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
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (log, task) = AccessLog::open(&path, AccessLogFormat::Tsv).unwrap();
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
            // AccessLog::open above.
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
            task.await.unwrap();
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lines_reach_the_file_when_idle_and_at_most_a_second_late_under_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let (log, task) = AccessLog::open(&path, AccessLogFormat::Tsv).unwrap();
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
            drop(log);
            task.await.unwrap();
        });
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.lines().filter(|l| l.contains("/busy")).count() > 5);
    }
}

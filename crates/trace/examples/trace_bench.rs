//! Benchmark driver for `scripts/bench-trace`: `synth DIR SCALE` writes a netflix-2014 log,
//! `analyze DIR [OUT]` runs chains + phases over it (writing chains.csv and phases.csv to
//! OUT when given) and prints requests per CPU second; `THREADS` in the environment sets
//! the threads parsing and analyzing (`--threads`, default 1) and `MEMORY` the analysis's
//! memory limit (`--memory`, default 512MiB) and `REPEAT` plays the log that many times back
//! to back as one log made on the fly ([`Repeat`]: a log longer than the disk holds). Peak
//! memory is measured around each step by the script.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use vodkit_trace::analyze::{analyze, AnalyzeOptions, NoSink};
use vodkit_trace::output::DirSink;
use vodkit_trace::FileTable;
use vodkit_workload::netflix::{synth_log, NetflixSpec};

/// The allocator the `vodkit` binary runs with, so that the figures are the command's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn cpu_seconds() -> f64 {
    // utime + stime of this process, from /proc (Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The process's peak resident memory so far (`VmHWM`, MiB; 0 where unknown).
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("synth") if args.len() == 4 => {
            let scale: f64 = args[3]
                .parse()
                .map_err(|_| "SCALE must be a number".to_string())?;
            let spec = NetflixSpec::new(42, scale, &[])?;
            let t = Instant::now();
            let s = synth_log(&spec, Path::new(&args[2]))?;
            println!(
                "synth: {} sessions, {} requests, {} chains ({} ambiguous requests) in {:.1} s",
                s.sessions,
                s.requests,
                s.chains,
                s.ambiguous,
                t.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Some("analyze") if args.len() == 3 || args.len() == 4 => {
            let dir = Path::new(&args[2]);
            let out = args.get(3).map(Path::new);
            let times: u32 = match std::env::var("REPEAT") {
                Ok(n) => n.parse().map_err(|_| format!("REPEAT: {n} is not a count"))?,
                Err(_) => 1,
            };
            let threads = std::env::var("THREADS")
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(1);
            let mut opts = AnalyzeOptions {
                threads,
                ..Default::default()
            };
            if let Ok(m) = std::env::var("MEMORY") {
                opts.memory_bytes = vodkit_units::parse_positive_size(&m)
                    .map_err(|e| format!("MEMORY: {e}"))?
                    as usize;
            }
            opts.prepare_process();
            let log = Repeat::open(&dir.join("log.csv"), times)?;
            let input = BufReader::with_capacity(1 << 20, log);
            // Read within the file table's share of the limit, as `vodkit trace` reads it
            // (not timed).
            let files = FileTable::from_csv_within(
                &dir.join("files.csv"),
                opts.file_table_bytes(),
                &opts.spill_dir,
            )?;
            let cpu0 = cpu_seconds();
            let t = Instant::now();
            let a = match out {
                None => analyze(input, files, &opts, &mut NoSink).map_err(|e| e.to_string())?,
                Some(o) => {
                    let mut sink = DirSink::create(o, true, true).map_err(|e| e.to_string())?;
                    let a = analyze(input, files, &opts, &mut sink).map_err(|e| e.to_string())?;
                    sink.finish().map_err(|e| e.to_string())?;
                    a
                }
            };
            let wall = t.elapsed().as_secs_f64();
            let cpu = (cpu_seconds() - cpu0).max(1e-3);
            println!(
                "analyze ({} threads): {} requests, {} chains, {} sessions (peak {} open, {:.1} MiB; {} spilled; file table {:.1} MiB ({} spills), statistics {:.1} MiB; peak resident {:.0} MiB) in {:.2} s wall, {:.2} s CPU: {:.0} requests/s/core, {:.0} requests/s",
                threads,
                a.read.requests,
                a.chains.chains,
                a.phases.sessions,
                a.peak_open_sessions,
                a.peak_open_bytes as f64 / 1048576.0,
                a.spill.sessions,
                a.file_table_bytes as f64 / 1048576.0,
                a.files.spills(),
                a.statistics_bytes as f64 / 1048576.0,
                peak_mib(),
                wall,
                cpu,
                a.read.requests as f64 / cpu,
                a.read.requests as f64 / wall
            );
            Ok(())
        }
        Some(way @ ("fromlog-memory" | "fromlog-stream")) if args.len() == 3 => {
            // Session rebuilding as `workload from-log` does it, without writing the list.
            let dir = Path::new(&args[2]);
            let log = std::fs::File::open(dir.join("log.csv")).map_err(|e| e.to_string())?;
            let input = BufReader::with_capacity(1 << 20, log);
            let cpu0 = cpu_seconds();
            let t = Instant::now();
            let opt = vodkit_trace::fromlog::FromLogOptions {
                key: Some(b"bench".to_vec()),
                ..Default::default()
            };
            let read_opts = vodkit_trace::read::ReadOptions::default();
            let mut sessions = 0u64;
            let read = if way == "fromlog-memory" {
                let mut b = vodkit_trace::fromlog::SessionRebuilder::default();
                let read = vodkit_trace::read::read_log_with(input, &read_opts, |r| b.add(r))
                    .map_err(|e| e.to_string())?;
                sessions += b.finish(&opt)?.sessions.count() as u64;
                read
            } else {
                let limits = vodkit_trace::fromlog::StreamOptions {
                    max_service_s: 3600.0,
                    order_tolerance_s: 60.0,
                    memory_bytes: 512 << 20,
                    spill_dir: std::env::temp_dir(),
                };
                let mut b = vodkit_trace::fromlog::StreamRebuilder::new(&opt, &limits);
                let read = vodkit_trace::read::read_log_with(input, &read_opts, |r| b.add(r))
                    .map_err(|e| e.to_string())?;
                let r = b.finish()?;
                println!("{:?}", r.summary.stream);
                sessions += r.sessions.count() as u64;
                read
            };
            let cpu = (cpu_seconds() - cpu0).max(1e-3);
            println!(
                "{way}: {} requests, {sessions} sessions in {:.2} s wall, {cpu:.2} s CPU: {:.0} requests/s/core",
                read.requests,
                t.elapsed().as_secs_f64(),
                read.requests as f64 / cpu
            );
            Ok(())
        }
        _ => Err(
            "usage: trace_bench synth DIR SCALE | trace_bench analyze DIR [OUT] | trace_bench fromlog-memory|fromlog-stream DIR"
                .into(),
        ),
    }
}

/// A netflix-format log (`ts_end,service_time_s,session,…`, one header line) played `times`
/// times back to back as one log, made while it is read. Pass `k` adds `k × shift` to every
/// timestamp, where `shift` is the log's last timestamp plus two hours (so every session of
/// a pass is closed before the next begins), and `k × (largest session id + 1)` to every
/// session id, so each pass brings new sessions and chains over the same files.
struct Repeat {
    path: PathBuf,
    times: u32,
    pass: u32,
    input: BufReader<File>,
    shift_s: f64,
    sessions: u64,
    out: Vec<u8>,
    at: usize,
    line: Vec<u8>,
}

impl Repeat {
    /// Scans `path` once for its last timestamp and largest session id.
    fn open(path: &Path, times: u32) -> Result<Repeat, String> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let open = || {
            File::open(path)
                .map(|f| BufReader::with_capacity(1 << 20, f))
                .map_err(err)
        };
        let (mut last_s, mut sessions) = (0.0f64, 0u64);
        if times > 1 {
            for line in open()?.lines().skip(1) {
                let line = line.map_err(err)?;
                let mut f = line.split(',');
                let ts = f.next().and_then(|t| t.parse::<f64>().ok());
                let session = f.nth(1).and_then(|t| t.parse::<u64>().ok());
                last_s = last_s.max(ts.unwrap_or(0.0));
                sessions = sessions.max(session.unwrap_or(0));
            }
        }
        Ok(Repeat {
            path: path.to_path_buf(),
            times: times.max(1),
            pass: 0,
            input: open()?,
            shift_s: last_s.ceil() + 7200.0,
            sessions: sessions + 1,
            out: Vec::with_capacity(1 << 20),
            at: 0,
            line: Vec::new(),
        })
    }

    /// Appends the next lines to `out` until it holds about a MiB; false at the end of the
    /// last pass.
    fn fill(&mut self) -> std::io::Result<bool> {
        self.out.clear();
        self.at = 0;
        while self.out.len() < 1 << 20 {
            self.line.clear();
            if self.input.read_until(b'\n', &mut self.line)? == 0 {
                self.pass += 1;
                if self.pass >= self.times {
                    break;
                }
                self.input = BufReader::with_capacity(1 << 20, File::open(&self.path)?);
                // The header comes once, at the start of the first pass.
                self.line.clear();
                self.input.read_until(b'\n', &mut self.line)?;
                continue;
            }
            if self.pass == 0 {
                self.out.extend_from_slice(&self.line);
            } else {
                self.shifted();
            }
        }
        Ok(!self.out.is_empty())
    }

    /// `line` with its timestamp and session id moved to this pass; unchanged when they do
    /// not parse (the analysis counts it as the bad line it is).
    fn shifted(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        let mut f = text.splitn(4, ',');
        let (Some(ts), Some(service), Some(session), Some(rest)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            self.out.extend_from_slice(&self.line);
            return;
        };
        let (Ok(ts), Ok(session)) = (ts.parse::<f64>(), session.parse::<u64>()) else {
            self.out.extend_from_slice(&self.line);
            return;
        };
        use std::io::Write as _;
        let k = u64::from(self.pass);
        let _ = write!(
            self.out,
            "{:.3},{service},{},{rest}",
            ts + k as f64 * self.shift_s,
            session + k * self.sessions
        );
    }
}

impl Read for Repeat {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // One pass is the file as it is: read straight through, as `vodkit trace` reads it.
        if self.times == 1 {
            return self.input.read(buf);
        }
        if self.at >= self.out.len() && !self.fill()? {
            return Ok(0);
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

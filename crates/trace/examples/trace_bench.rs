//! Benchmark driver for `scripts/bench-trace`: `synth DIR SCALE` writes a netflix-2014 log,
//! `analyze DIR [OUT]` runs chains + phases over it (writing chains.csv and phases.csv to
//! OUT when given) and prints requests per CPU second; `THREADS` in the environment sets
//! the threads parsing and analyzing (`--threads`, default 1) and `MEMORY` the analysis's
//! memory limit (`--memory`, default 512MiB). Peak memory is measured around each step by
//! the script.

use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

use vodkit_trace::analyze::{analyze, AnalyzeOptions, NoSink};
use vodkit_trace::output::DirSink;
use vodkit_trace::FileTable;
use vodkit_workload::netflix::{synth_log, NetflixSpec};

fn cpu_seconds() -> f64 {
    // utime + stime of this process, from /proc (Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
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
            let files = FileTable::from_csv(&dir.join("files.csv"))?;
            let log = std::fs::File::open(dir.join("log.csv")).map_err(|e| e.to_string())?;
            let cpu0 = cpu_seconds();
            let t = Instant::now();
            let input = BufReader::with_capacity(1 << 20, log);
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
                "analyze ({} threads): {} requests, {} chains, {} sessions (peak {} open, {:.1} MiB; {} spilled; file table {:.1} MiB, statistics {:.1} MiB) in {:.2} s wall, {:.2} s CPU: {:.0} requests/s/core, {:.0} requests/s",
                threads,
                a.read.requests,
                a.chains.chains,
                a.phases.sessions,
                a.peak_open_sessions,
                a.peak_open_bytes as f64 / 1048576.0,
                a.spill.sessions,
                a.file_table_bytes as f64 / 1048576.0,
                a.statistics_bytes as f64 / 1048576.0,
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

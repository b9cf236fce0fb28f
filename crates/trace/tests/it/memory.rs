//! The analysis within a memory limit: open sessions spilled to disk, read back and merged
//! back in order give every output of the analysis that keeps them in memory, byte for
//! byte, for one and two threads and any seed of the session names' hash; and on a log whose open sessions need many times the
//! limit, the state held and the process's peak memory stay within it.

use std::path::{Path, PathBuf};
use std::process::Command;

use vodkit_trace::analyze::{analyze, AnalyzeOptions, ClosedSession, SessionSink, MEMORY_BYTES};
use vodkit_trace::output::{DirSink, OutputFormat, PassSummary, Tables};
use vodkit_trace::FileTable;

use crate::threads::{assert_same, every_output, json, synthesized};

/// `summary.json` without what depends on the memory limit (what was held and spilled).
fn summary_but_memory(bytes: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    let o = v.as_object_mut().unwrap();
    for k in [
        "peak_open_bytes",
        "spilled_sessions",
        "spilled_bytes",
        "spill_runs",
        "sessions_reloaded",
        "statistics_bytes",
        "statistics_spilled_bytes",
        "file_table_bytes",
    ] {
        assert!(o.remove(k).is_some(), "summary.json has {k}");
    }
    v
}

#[test]
fn a_tiny_memory_spills_and_every_output_is_the_same_for_one_and_two_threads_and_any_hash_seed() {
    let dir = synthesized();
    let log = dir.path().join("log.csv");
    let files = || FileTable::from_csv(&dir.path().join("files.csv")).unwrap();
    let run = |memory: usize, threads: usize, format: OutputFormat, seed: u64| {
        let out = dir
            .path()
            .join(format!("out-{memory}-{threads}-{format:?}-{seed}"));
        let opts = AnalyzeOptions {
            threads,
            hash_seed: seed,
            exclude_tail_s: 600.0,
            memory_bytes: memory,
            // The spill directory is made in the output directory and gone at the end:
            // every_output finds only the four tables there.
            spill_dir: out.clone(),
            ..Default::default()
        };
        std::fs::create_dir_all(&out).unwrap();
        every_output(&log, files(), &opts, format, &out)
    };
    let (a, want) = run(MEMORY_BYTES, 1, OutputFormat::Csv, 1);
    assert_eq!(a.spill.sessions, 0, "{:?}", a.spill);
    // Small enough that blocks and batches in flight are at their floors, the file table
    // goes to disk and tens of thousands of sessions are spilled and read back; each run
    // at this limit costs about ten of the analysis in memory.
    let tiny = 96 << 10;
    assert!(
        a.peak_open_bytes > 4 * tiny as u64,
        "the open sessions need many times the limit: {}",
        a.peak_open_bytes
    );
    // The sessions' partitions, their places in the tables and the order they are spilled
    // in follow the hash of their names: other seeds must give the same bytes.
    for (memory, threads, seed) in [
        (MEMORY_BYTES, 2, 1),
        (MEMORY_BYTES, 2, 2),
        (tiny, 1, 3),
        (tiny, 2, 1),
        (tiny, 2, u64::MAX),
    ] {
        let (b, got) = run(memory, threads, OutputFormat::Csv, seed);
        let what = format!("--memory {memory}, {threads} threads, hash seed {seed}");
        if memory == tiny {
            // The file table went to disk (an eighth of the limit keeps few names).
            assert!(
                b.file_table_bytes < a.file_table_bytes,
                "{what}: {} file table bytes",
                b.file_table_bytes
            );
            let s = b.spill;
            assert!(
                s.sessions > 0 && s.reloaded > 0 && s.runs > 0,
                "{what}: {s:?}"
            );
            assert!(
                b.peak_open_bytes <= (tiny / 2) as u64,
                "{what}: {} held",
                b.peak_open_bytes
            );
        }
        assert_eq!(b.peak_open_sessions, a.peak_open_sessions, "{what}");
        assert_eq!(
            summary_but_memory(&want[0].1),
            summary_but_memory(&got[0].1),
            "{what}"
        );
        assert_same(&want[1..], &got[1..], &what);
    }
    // Parquet too.
    let (_, want) = run(MEMORY_BYTES, 1, OutputFormat::Parquet, 1);
    let (_, got) = run(tiny, 2, OutputFormat::Parquet, 5);
    assert_same(&want[1..], &got[1..], "parquet, tiny memory, 2 threads");
}

/// A sink that keeps the warnings.
#[derive(Default)]
struct Warnings(Vec<String>);

impl SessionSink for Warnings {
    fn session(&mut self, _: &ClosedSession<'_>) -> std::io::Result<()> {
        Ok(())
    }

    fn warning(&mut self, message: &str) {
        self.0.push(message.to_string());
    }
}

/// The header of the netflix-2014 logs these tests write.
const HEADER: &str =
    "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n";

/// A temporary directory holding a `log.csv` of `text`, and the log's path.
fn log_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    std::fs::write(&log, text).unwrap();
    (dir, log)
}

/// A log naming `files` files once each, four to a session, 10 ms apart.
fn many_files_log(files: u64) -> String {
    let mut text = String::from(HEADER);
    for i in 0..files {
        let t = 1000.0 + i as f64 * 0.01;
        text += &format!(
            "{t:.3},0.01,s{},nf/t{i:07}/v1750.mp4,0,4096,0,4096,tv\n",
            i / 4
        );
    }
    text
}

#[test]
fn the_file_table_is_accounted_and_passing_the_limit_is_said_once() {
    let files = 40_000u64;
    let log = many_files_log(files);
    let run = |memory: usize| {
        let opts = AnalyzeOptions {
            memory_bytes: memory,
            spill_dir: std::env::temp_dir(),
            ..Default::default()
        };
        let mut sink = Warnings::default();
        let a = analyze(log.as_bytes(), FileTable::default(), &opts, &mut sink).unwrap();
        (a, sink.0)
    };
    let (a, none) = run(MEMORY_BYTES);
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(a.files.len() as u64, files);
    // Every name once (23 bytes), and well under 100 bytes a file for the rest: the index,
    // what is known of the file, where its name ends and the analysis's per-file state.
    let names = files * 23;
    let per_file = (a.file_table_bytes - names) / files;
    assert!(
        a.file_table_bytes > names && per_file < 100,
        "{} bytes, {per_file} a file beyond its name",
        a.file_table_bytes
    );
    // One chain a file: its length in the statistics.
    assert!(a.statistics_bytes >= 16 * files, "{}", a.statistics_bytes);
    // Within 1 MiB the open sessions are spilled and the file table went to disk, but the
    // process (this test's) is resident in more than that: said once, with the limit and
    // what grew.
    let (b, warned) = run(1 << 20);
    assert!(b.spill.sessions > 0, "{:?}", b.spill);
    assert_eq!(a.files.spills(), 0);
    assert!(b.files.spills() > 0);
    assert!(
        b.file_table_bytes < a.file_table_bytes / 2,
        "{} {}",
        b.file_table_bytes,
        a.file_table_bytes
    );
    // The chain lengths past a sixteenth of the limit went to disk.
    assert_eq!(a.statistics_spilled_bytes, 0);
    assert!(b.statistics_spilled_bytes > 0);
    assert!(
        b.statistics_bytes < a.statistics_bytes,
        "{} {}",
        b.statistics_bytes,
        a.statistics_bytes
    );
    assert_eq!(warned.len(), 1, "{warned:?}");
    let w = &warned[0];
    for part in ["--memory 1.0 MiB", "file table", "files)", "statistics"] {
        assert!(w.contains(part), "{part:?} in {w}");
    }
}

#[test]
fn a_process_past_the_limit_is_said_even_when_the_analysis_fits() {
    if !cfg!(target_os = "linux") {
        vodkit_testkit::need::not_here("resident memory is read from /proc (Linux)");
        return;
    }
    // A hundred requests hold a few KiB; this test process alone is resident in more than
    // 2 MiB (its binary, its threads' stacks), which the limit bounds too.
    let log = many_files_log(100);
    let opts = AnalyzeOptions {
        memory_bytes: 2 << 20,
        spill_dir: std::env::temp_dir(),
        ..Default::default()
    };
    let mut sink = Warnings::default();
    let a = analyze(log.as_bytes(), FileTable::default(), &opts, &mut sink).unwrap();
    assert!(
        a.file_table_bytes + a.statistics_bytes < 1 << 20,
        "{} {}",
        a.file_table_bytes,
        a.statistics_bytes
    );
    assert_eq!(sink.0.len(), 1, "{:?}", sink.0);
    let w = &sink.0[0];
    for part in ["--memory 2.0 MiB", "resident", "file table"] {
        assert!(w.contains(part), "{part:?} in {w}");
    }
}

/// A log whose open sessions hold about 500 bytes per line: a viewer arrives every second
/// and reads the start of `files` files in a minute, then stays idle; everything is within
/// an hour, so no session closes before the end.
fn wide_log(sessions: u64, files: u64) -> String {
    let mut lines = Vec::new();
    for s in 0..sessions {
        for f in 0..files {
            let t = 1000.0 + s as f64 + f as f64 * 60.0 / files as f64;
            lines.push((
                t,
                format!("{t:.3},0.01,s{s},title/{f}.mp4,0,4096,0,4096,tv\n"),
            ));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut text = String::from(HEADER);
    for (_, l) in lines {
        text += &l;
    }
    text
}

/// The memory limit of the peak-memory test.
const LIMIT: usize = 16 << 20;

/// Peak memory beyond the limit that does not depend on the log's length, on one thread:
/// the 1 MiB read buffer, parsing block and parsed requests, the two 1 MiB CSV writers, the
/// closing sessions' sort (an eighth of the limit), chain statistics and the allocator's
/// slack (measured: about 12 MiB).
const FIXED: u64 = 16 << 20;

/// More per thread beyond the first: the blocks read and parsed ahead (2 of 1 MiB per
/// parsing thread, each about 2.5 MiB parsed) and each thread's allocator arena (measured
/// with three copies of the test at once: the two-thread run grew 31.5 MiB, 8 less than
/// the limit, the fixed costs and this allow).
const PER_THREAD: u64 = 8 << 20;

/// Figures of one analysis in a child process (`RESULT` line of `analysis_child`).
#[derive(Debug)]
struct Child {
    baseline_kib: u64,
    peak_kib: u64,
    peak_open_bytes: u64,
    spilled: u64,
}

impl Child {
    /// How far the process's peak memory rose past what it held before the analysis
    /// (bytes).
    fn grew(&self) -> u64 {
        self.peak_kib.saturating_sub(self.baseline_kib) * 1024
    }
}

/// Whether this machine tells a process's peak memory (from /proc, on Linux); says the
/// test is skipped when not.
fn peak_memory_readable() -> bool {
    let linux = cfg!(target_os = "linux");
    if !linux {
        vodkit_testkit::need::not_here("peak memory is read from /proc (Linux)");
    }
    linux
}

fn child(log: &Path, out: &Path, memory: usize, threads: usize) -> Child {
    child_beside(log, out, memory, threads, 0)
}

/// [`child`] in a process that holds `ballast` bytes of its own all through the analysis.
fn child_beside(log: &Path, out: &Path, memory: usize, threads: usize, ballast: usize) -> Child {
    let exe = std::env::current_exe().unwrap();
    let o = Command::new(exe)
        .args([
            "memory::analysis_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "VODKIT_TRACE_MEMORY_CHILD",
            format!(
                "{}\n{}\n{memory}\n{threads}\n{ballast}",
                log.display(),
                out.display()
            ),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "child: {stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split("RESULT ").nth(1))
        .unwrap_or_else(|| panic!("no RESULT line: {stdout}"));
    let n: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    Child {
        baseline_kib: n[0],
        peak_kib: n[1],
        peak_open_bytes: n[2],
        spilled: n[3],
    }
}

/// A field of `/proc/self/status` in KiB.
fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore = "the child process of the peak-memory test, started by it"]
fn analysis_child() {
    let arg = std::env::var("VODKIT_TRACE_MEMORY_CHILD").unwrap();
    let mut parts = arg.split('\n');
    let log = Path::new(parts.next().unwrap());
    let out = Path::new(parts.next().unwrap());
    let memory: usize = parts.next().unwrap().parse().unwrap();
    let threads: usize = parts.next().unwrap().parse().unwrap();
    let ballast = vec![1u8; parts.next().unwrap().parse().unwrap()];
    let baseline = status_kib("VmRSS:");
    let tables = Tables {
        chains: true,
        phases: true,
        sessions: false,
        requests: false,
    };
    let mut sink = DirSink::create_tables(out, tables, OutputFormat::Csv, None).unwrap();
    let opts = AnalyzeOptions {
        threads,
        memory_bytes: memory,
        spill_dir: out.to_path_buf(),
        ..Default::default()
    };
    let input = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(log).unwrap());
    let a = analyze(input, FileTable::default(), &opts, &mut sink).unwrap();
    sink.finish().unwrap();
    std::fs::write(out.join("summary.json"), json(&PassSummary::of(&a))).unwrap();
    std::hint::black_box(&ballast);
    println!(
        "RESULT {baseline} {} {} {}",
        status_kib("VmHWM:"),
        a.peak_open_bytes,
        a.spill.sessions
    );
}

#[test]
fn a_log_needing_many_times_the_memory_limit_is_analyzed_within_it() {
    if !peak_memory_readable() {
        return;
    }
    let (dir, log) = log_file(&wide_log(2000, 100));
    let (small, large) = (dir.path().join("small"), dir.path().join("large"));
    let spilled = child(&log, &small, LIMIT, 1);
    let kept = child(&log, &large, MEMORY_BYTES, 1);
    let two = child(&log, &dir.path().join("two"), LIMIT, 2);
    eprintln!(
        "within {} MiB: {spilled:?}, 2 threads {two:?}; kept: {kept:?}",
        LIMIT >> 20
    );
    // Kept in memory, the open sessions need more than four times the limit.
    assert_eq!(kept.spilled, 0, "{kept:?}");
    assert!(kept.peak_open_bytes > 4 * LIMIT as u64, "{kept:?}");
    // Within the limit, they are spilled, and held at most half of it.
    for c in [&spilled, &two] {
        assert!(c.spilled > 0, "{c:?}");
        assert!(c.peak_open_bytes <= LIMIT as u64 / 2, "{c:?}");
    }
    // The process's peak memory, beyond what it held before the analysis: within the limit
    // and the fixed costs, where keeping every session needs more than twice as much.
    assert!(
        spilled.grew() <= LIMIT as u64 + FIXED,
        "{spilled:?}: {} MiB",
        spilled.grew() >> 20
    );
    assert!(
        two.grew() <= LIMIT as u64 + FIXED + PER_THREAD,
        "{two:?}: {} MiB",
        two.grew() >> 20
    );
    assert!(
        kept.grew() > 2 * spilled.grew(),
        "{kept:?} against {spilled:?}"
    );
    for name in ["chains.csv", "phases.csv", "summary.json"] {
        let want = std::fs::read(large.join(name)).unwrap();
        for d in [&small, &dir.path().join("two")] {
            let got = std::fs::read(d.join(name)).unwrap();
            if name == "summary.json" {
                let (a, b) = (summary_but_memory(&want), summary_but_memory(&got));
                assert_eq!(a, b, "{}", d.display());
            } else {
                assert!(got == want, "{name} differs in {}", d.display());
            }
        }
    }
    let files = |d: &Path| std::fs::read_dir(d).unwrap().count();
    assert_eq!(files(&small), files(&large), "no spill left behind");
    assert_eq!(files(&dir.path().join("two")), files(&large));
}

#[test]
fn what_the_rest_of_the_process_holds_comes_out_of_the_sessions_share() {
    if !peak_memory_readable() {
        return;
    }
    let (dir, log) = log_file(&wide_log(2000, 100));
    // 24 MiB held beside the analysis: with the sessions' half of 64 MiB and the fixed costs
    // the process would pass the limit; the sessions get what the rest leaves instead.
    let limit = 64 << 20;
    let ballast = 24 << 20;
    let c = child_beside(&log, &dir.path().join("out"), limit, 1, ballast);
    eprintln!(
        "within {} MiB beside {} MiB: {c:?}",
        limit >> 20,
        ballast >> 20
    );
    assert!(c.baseline_kib * 1024 > ballast as u64, "{c:?}");
    assert!(c.spilled > 0, "{c:?}");
    assert!(
        c.peak_open_bytes < limit as u64 / 2 - (4 << 20),
        "the sessions held less than their half: {c:?}"
    );
    assert!(
        c.peak_kib * 1024 <= limit as u64,
        "the process stays within the limit: {} MiB, {c:?}",
        c.peak_kib >> 10
    );
}

/// Process memory a file of [`many_files_log`] may cost beyond the limit and the fixed costs.
/// The file table, the furthest byte read of each sizeless file and the chains' lengths each
/// keep within a share of the limit and go to disk past it, so what is left is about a byte
/// and a half a file on disk's filters; a table that kept its files (23-byte names, about
/// 80 bytes each with their state) would pass this.
const PER_FILE: u64 = 16;

#[test]
fn many_files_cost_the_process_little_more_than_their_names() {
    if !peak_memory_readable() {
        return;
    }
    let files = 400_000u64;
    let (dir, log) = log_file(&many_files_log(files));
    let c = child(&log, &dir.path().join("out"), LIMIT, 1);
    let grew = c.grew();
    eprintln!(
        "{files} files within {} MiB: {c:?}, grew {} MiB",
        LIMIT >> 20,
        grew >> 20
    );
    assert!(
        c.spilled > 0 && c.peak_open_bytes <= LIMIT as u64 / 2,
        "{c:?}"
    );
    // Measured: 19 MiB (debug build), against 25 MiB with the sizeless files' offsets
    // always in memory and about 50 MiB with the file table too.
    assert!(
        grew <= LIMIT as u64 + FIXED + files * PER_FILE,
        "{c:?}: {} MiB, {} bytes a file",
        grew >> 20,
        grew / files
    );
}

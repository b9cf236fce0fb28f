//! The parallel reader and the partitioned analysis: the same output, byte for byte, for
//! any number of threads (every table, CSV and Parquet, and every summary) and for plain,
//! gzip and zstd logs; corrupt or cut compressed logs and logs out of completion
//! order are reported with line numbers, never fatal; a shuffled log, sorted, gives the
//! outputs of the log in order.

use std::io::Write;
use std::path::Path;

use vodkit_trace::analyze::{analyze, AnalyzeOptions, NoSink};
use vodkit_trace::output::{DirSink, OutputFormat, PassSummary, Tables};
use vodkit_trace::read::{read_log_with, ReadOptions};
use vodkit_trace::{FileTable, LogFormat};
use vodkit_workload::netflix::{synth_log, NetflixSpec};

/// A synthesized netflix-2014 log of several parsing blocks, with its file table.
pub(crate) fn synthesized() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = NetflixSpec::new(5, 0.1, &[]).unwrap();
    synth_log(&spec, dir.path()).unwrap();
    let size = std::fs::metadata(dir.path().join("log.csv")).unwrap().len();
    assert!(
        size > 3 * vodkit_trace::blocks::BLOCK_BYTES as u64,
        "the log must span several blocks: {size} bytes"
    );
    dir
}

pub(crate) fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap()
}

/// Everything `trace phases`/`chains` would write for `log`, as (file name, bytes).
fn outputs(dir: &Path, log: &Path, threads: usize) -> Vec<(String, Vec<u8>)> {
    let files = FileTable::from_csv(&dir.join("files.csv")).unwrap();
    let out = dir.join(format!("out-{threads}-{}", log.display().to_string().len()));
    let mut sink = DirSink::create(&out, true, true).unwrap();
    let opts = AnalyzeOptions {
        threads,
        ..Default::default()
    };
    let input = std::io::BufReader::new(std::fs::File::open(log).unwrap());
    let a = analyze(input, files, &opts, &mut sink).unwrap();
    sink.finish().unwrap();
    assert_eq!(a.read.bad_lines, 0, "{}", a.read.describe());
    let mut got = vec![
        ("summary.json".to_string(), json(&PassSummary::of(&a))),
        ("chains.json".to_string(), json(&a.chains)),
        ("phases.json".to_string(), json(&a.phases)),
        ("sessions.json".to_string(), json(&a.sessions)),
    ];
    for name in ["chains.csv", "phases.csv"] {
        got.push((name.to_string(), std::fs::read(out.join(name)).unwrap()));
    }
    got
}

/// Every table (`--requests` included) in `format`, and every summary, for `log` analyzed
/// on `threads` threads, as (file name, bytes) in name order.
pub(crate) fn every_output(
    log: &Path,
    files: FileTable,
    opts: &AnalyzeOptions,
    format: OutputFormat,
    out: &Path,
) -> (vodkit_trace::Analysis, Vec<(String, Vec<u8>)>) {
    let tables = Tables {
        chains: true,
        phases: true,
        sessions: true,
        requests: true,
    };
    let mut sink = DirSink::create_tables(out, tables, format, None).unwrap();
    let input = std::io::BufReader::new(std::fs::File::open(log).unwrap());
    let mut a = analyze(input, files, opts, &mut sink).unwrap();
    sink.finish().unwrap();
    let mut got = vec![
        ("summary.json".to_string(), json(&PassSummary::of(&a))),
        ("chains.json".to_string(), json(&a.chains)),
        ("phases.json".to_string(), json(&a.phases)),
        ("sessions.json".to_string(), json(&a.sessions)),
    ];
    // The part of the file table on disk, if it went there, is removed with the table.
    a.files = FileTable::default();
    let mut names: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    for name in names {
        got.push((name.clone(), std::fs::read(out.join(&name)).unwrap()));
    }
    (a, got)
}

pub(crate) fn assert_same(a: &[(String, Vec<u8>)], b: &[(String, Vec<u8>)], what: &str) {
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(b) {
        assert!(x == y, "{name} differs: {what}");
    }
}

#[test]
fn one_two_and_three_threads_write_the_same_bytes() {
    let dir = synthesized();
    let log = dir.path().join("log.csv");
    let one = outputs(dir.path(), &log, 1);
    assert!(one[4].1.len() > 1000, "chains.csv has rows");
    for threads in [2, 3] {
        assert_same(&one, &outputs(dir.path(), &log, threads), "threads");
    }
}

#[test]
fn every_table_csv_and_parquet_is_the_same_for_one_two_and_four_threads() {
    let dir = synthesized();
    let log = dir.path().join("log.csv");
    let gz = compressed(dir.path(), "gz");
    let files = || FileTable::from_csv(&dir.path().join("files.csv")).unwrap();
    for format in [OutputFormat::Csv, OutputFormat::Parquet] {
        let run = |path: &Path, threads: usize| {
            let opts = AnalyzeOptions {
                threads,
                exclude_tail_s: 600.0,
                ..Default::default()
            };
            let out = dir.path().join(format!(
                "all-{format:?}-{threads}-{}",
                path.extension().unwrap().to_string_lossy()
            ));
            every_output(path, files(), &opts, format, &out).1
        };
        let one = run(&log, 1);
        let requests = &one.iter().find(|x| x.0.starts_with("requests.")).unwrap().1;
        assert!(requests.len() > 100_000, "{format:?}: requests written");
        for (path, threads) in [(&log, 2), (&log, 4), (&gz, 1), (&gz, 4)] {
            let what = format!("{format:?}, {threads} threads, {}", path.display());
            assert_same(&one, &run(path, threads), &what);
        }
    }
}

/// A netflix CSV log whose session `big` runs through the whole log (one chain of
/// `BIG` requests across many parsing blocks) beside clients that come and go: each is
/// active for 4000 s and away for 4000 s, longer than a session stays open, so it is
/// closed and seen again. No file table: files are known only by what the log says.
fn spanning_log(path: &Path) {
    let mut text = String::from(
        "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n",
    );
    let mut big = 0u64;
    for i in 0..3 * BIG {
        let t = 1000.0 + i as f64 * 0.2;
        if i % 3 == 0 {
            text += &format!(
                "{t:.3},0.05,big,title/big.mp4,{},1000,0,1000,tv\n",
                big * 1000
            );
            big += 1;
            continue;
        }
        let j = i % 40;
        if (t / 4000.0) as u64 % 2 != j % 2 {
            continue;
        }
        let piece = (i / 40) % 5;
        text += &format!(
            "{t:.3},0.{},c{j},title/{}.mp4,{},500,{},500,pc\n",
            j % 10,
            (i / 200) % 13,
            piece * 500,
            u8::from(piece == 4)
        );
    }
    std::fs::write(path, text).unwrap();
}

const BIG: u64 = 60_000;

#[test]
fn a_session_spanning_many_blocks_and_clients_that_return_are_the_same_for_any_threads() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    spanning_log(&log);
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(
        size > 4 * vodkit_trace::blocks::BLOCK_BYTES as u64,
        "the log must span several blocks: {size} bytes"
    );
    let run_within = |threads: usize, memory_bytes: usize| {
        let opts = AnalyzeOptions {
            threads,
            exclude_tail_s: 3600.0,
            memory_bytes,
            spill_dir: dir.path().to_path_buf(),
            ..Default::default()
        };
        let out = dir.path().join(format!("out-{threads}-{memory_bytes}"));
        every_output(&log, FileTable::default(), &opts, OutputFormat::Csv, &out)
    };
    let run = |threads: usize| run_within(threads, AnalyzeOptions::default().memory_bytes);
    let (a, one) = run(1);
    assert_eq!(a.read.bad_lines, 0, "{}", a.read.describe());
    assert!(a.reopened >= 20, "clients come back: {}", a.reopened);
    assert!(a.excluded_tail > 0);
    let chains =
        String::from_utf8(one.iter().find(|x| x.0 == "chains.csv").unwrap().1.clone()).unwrap();
    let big: Vec<&str> = chains.lines().filter(|l| l.starts_with("big,")).collect();
    assert_eq!(big.len(), 1, "one chain: {big:?}");
    assert!(
        big[0].starts_with(&format!("big,title/big.mp4,0,{},{BIG},", BIG * 1000)),
        "{}",
        big[0]
    );
    for threads in [2, 4] {
        let (b, many) = run(threads);
        assert_eq!(b.reopened, a.reopened);
        assert_same(&one, &many, &format!("{threads} threads"));
    }
    // Within 4 KiB the closed sessions' name hashes go to disk in runs of a few: the
    // sessions reopened, counted from the runs merged, and every output are the same.
    let threads = 2;
    let (b, small) = run_within(threads, 4096);
    assert!(
        b.spill.runs > 10,
        "{threads} threads: runs {}",
        b.spill.runs
    );
    assert_eq!(b.reopened, a.reopened, "{threads} threads within 4 KiB");
    // summary.json differs in what it says of memory and spills only.
    assert_eq!(one[0].0, "summary.json");
    assert_same(
        &one[1..],
        &small[1..],
        &format!("{threads} threads within 4 KiB"),
    );
}

#[test]
fn gzip_and_zstd_logs_read_as_the_plain_one() {
    let dir = synthesized();
    let log = dir.path().join("log.csv");
    let (gz, zst) = (compressed(dir.path(), "gz"), compressed(dir.path(), "zst"));
    let plain = outputs(dir.path(), &log, 1);
    for (path, threads) in [(&gz, 1), (&gz, 2), (&zst, 2)] {
        let got = outputs(dir.path(), path, threads);
        // summary.json holds the same counts; everything else is the same bytes.
        assert_same(&plain, &got, &path.display().to_string());
    }
}

#[test]
fn corrupt_or_cut_compressed_logs_are_bad_lines_not_failures() {
    let mut text = String::from(
        "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n",
    );
    for i in 0..200_000u64 {
        text += &format!(
            "{},0.1,s{},f{},0,100,0,100,tv\n",
            1000 + i / 10,
            i % 7,
            i % 13
        );
    }
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    let gz = e.finish().unwrap();
    let zst = zstd::encode_all(text.as_bytes(), 1).unwrap();
    let mut flipped = gz.clone();
    let mid = flipped.len() / 2;
    for b in &mut flipped[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("cut gzip", gz[..gz.len() / 2].to_vec(), "gzip"),
        ("flipped gzip", flipped, "gzip"),
        ("cut zstd", zst[..zst.len() / 2].to_vec(), "zstd"),
        ("gzip header only", gz[..5].to_vec(), "gzip"),
    ];
    for (what, bytes, kind) in cases {
        for threads in [1, 2] {
            let opts = AnalyzeOptions {
                threads,
                ..Default::default()
            };
            let a = analyze(&bytes[..], FileTable::default(), &opts, &mut NoSink).unwrap();
            let r = &a.read;
            assert!(r.requests < 200_000, "{what}: {}", r.describe());
            let (line, why) = r.broken.as_ref().expect(what);
            assert!(
                why.contains(kind) && why.contains("corrupt"),
                "{what}: {}",
                r.describe()
            );
            // The break is placed after the last line read.
            assert_eq!(*line, r.lines + 1, "{what}: {}", r.describe());
            assert!(r
                .describe()
                .contains(&format!("reading stopped at line {line}")));
        }
    }
}

#[test]
fn nginx_and_combined_lines_reach_the_sink_in_log_order_for_any_thread_count() {
    let mut text = String::new();
    for i in 0..40_000u64 {
        let t = 1_700_000_000 + i / 20;
        text += &format!(
            "{t}.{:03} 0.010 {} \"s{}\" \"/v/{}.mp4\" \"bytes={}-{}\" 206 400 100\n",
            i % 1000,
            i % 50,
            i % 11,
            i % 17,
            i * 100,
            i * 100 + 99
        );
        if i % 5000 == 7 {
            text += "a broken line\n";
        }
    }
    let read = |threads: usize| {
        let mut seen = Vec::new();
        let opts = ReadOptions {
            format: LogFormat::Auto,
            threads,
            ..Default::default()
        };
        let sum = read_log_with(text.as_bytes(), &opts, |r| {
            seen.push((
                r.done_s,
                r.session.to_string(),
                r.file.to_string(),
                r.offset,
            ))
        })
        .unwrap();
        (seen, sum)
    };
    let (one, sum1) = read(1);
    assert_eq!(sum1.format, "nginx");
    assert_eq!(one.len(), 40_000);
    assert_eq!(sum1.bad_lines, 8);
    // Line 8 is the first broken line (after the eighth request).
    assert_eq!(sum1.bad_examples[0].0, 9);
    assert_eq!(sum1.bad_examples[1].0, 5000 + 10);
    for threads in [2, 4] {
        let (many, sum) = read(threads);
        assert!(many == one, "{threads} threads: other requests or order");
        assert_eq!(sum, sum1);
    }
}

#[test]
fn requests_out_of_completion_order_are_counted_with_line_numbers() {
    let mut text = String::from(
        "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n",
    );
    for (i, t) in [100.0, 101.0, 150.0, 95.0, 151.0, 160.0, 30.0]
        .iter()
        .enumerate()
    {
        text += &format!("{t},0.1,s,f,{},10,0,10,tv\n", i * 10);
    }
    let opts = ReadOptions {
        order_tolerance_s: 50.0,
        ..Default::default()
    };
    let sum = read_log_with(text.as_bytes(), &opts, |_| {}).unwrap();
    assert_eq!(sum.out_of_order, 2, "{}", sum.describe());
    // 95 (line 5) is 55 s before 150; 30 (line 8) is 130 s before 160; 101 is within 50 s.
    let lines: Vec<u64> = sum.out_of_order_examples.iter().map(|e| e.0).collect();
    assert_eq!(lines, vec![5, 8]);
    assert!(sum.describe().contains("line 8"), "{}", sum.describe());
}

#[test]
fn a_shuffled_log_sorted_within_a_small_memory_gives_the_same_chains_and_phases() {
    let dir = synthesized();
    let log = dir.path().join("log.csv");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let header = lines.remove(0);
    // A fixed shuffle (xorshift).
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..lines.len()).rev() {
        let r = vodkit_testkit::xorshift(&mut x);
        lines.swap(i, (r % (i as u64 + 1)) as usize);
    }
    let shuffled = format!("{header}\n{}\n", lines.join("\n"));
    let unsorted =
        vodkit_trace::read::read_log(shuffled.as_bytes(), LogFormat::Auto, |_| {}).unwrap();
    assert!(unsorted.out_of_order > 1000, "{}", unsorted.describe());

    let (sorted, read) = vodkit_trace::sort::sort_log(
        shuffled.as_bytes(),
        &ReadOptions::default(),
        1 << 20,
        dir.path(),
    )
    .unwrap();
    assert!(sorted.spilled > 0);
    assert_eq!(read.requests, unsorted.requests);
    let sorted_path = dir.path().join("sorted.csv");
    let mut f = std::fs::File::create(&sorted_path).unwrap();
    std::io::copy(&mut std::io::BufReader::new(sorted), &mut f).unwrap();
    drop(f);
    let want = outputs(dir.path(), &log, 1);
    let got = outputs(dir.path(), &sorted_path, 2);
    for name in [
        "chains.csv",
        "phases.csv",
        "chains.json",
        "phases.json",
        "sessions.json",
    ] {
        let a = &want.iter().find(|x| x.0 == name).unwrap().1;
        let b = &got.iter().find(|x| x.0 == name).unwrap().1;
        assert!(a == b, "{name} differs after sorting");
    }
}

/// `dir/log.csv` compressed into `dir/log.csv.<ext>`: `gz` (gzip) or `zst` (zstd).
fn compressed(dir: &Path, ext: &str) -> std::path::PathBuf {
    let text = std::fs::read(dir.join("log.csv")).unwrap();
    let bytes = match ext {
        "gz" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&text).unwrap();
            e.finish().unwrap()
        }
        "zst" => zstd::encode_all(&text[..], 1).unwrap(),
        other => panic!("no compression {other}"),
    };
    let path = dir.join(format!("log.csv.{ext}"));
    std::fs::write(&path, bytes).unwrap();
    path
}

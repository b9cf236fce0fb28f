//! End-to-end cases through the analyzer: logs cut off while sessions are active,
//! out-of-order parallel parts, open-ended and repeated requests, nginx and vodkit logs,
//! and bad lines that must be reported but not stop the analysis.

use std::collections::HashMap;

use vodkit_trace::analyze::{analyze, AnalyzeOptions, ClosedSession, SessionSink};
use vodkit_trace::chain::read_chains_csv;
use vodkit_trace::files::FileTable;
use vodkit_workload::netflix::{synth_log, NetflixSpec};

/// (session, file, start, bytes, requests)
type Row = (String, String, u64, u64, u32);

#[derive(Default)]
struct Collect {
    chains: Vec<Row>,
}

impl SessionSink for Collect {
    fn session(&mut self, s: &ClosedSession<'_>) -> std::io::Result<()> {
        for c in s.chains {
            self.chains.push((
                s.name.to_string(),
                s.files.name(c.file).to_string(),
                c.start,
                c.bytes,
                c.requests,
            ));
        }
        Ok(())
    }
}

const HEADER: &str =
    "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n";

fn run(text: &str) -> (vodkit_trace::Analysis, Vec<Row>) {
    let mut c = Collect::default();
    let a = analyze(
        text.as_bytes(),
        FileTable::default(),
        &AnalyzeOptions::default(),
        &mut c,
    )
    .unwrap();
    let mut chains = c.chains;
    chains.sort();
    (a, chains)
}

#[test]
fn parallel_parts_completing_out_of_order_form_one_chain() {
    // Three connections fetch thirds of each 300-byte segment; completions interleave.
    let mut text = String::from(HEADER);
    let order = [[2, 0, 1], [1, 2, 0], [0, 2, 1]];
    for (seg, o) in order.iter().enumerate() {
        for &part in o {
            let off = seg * 300 + part * 100;
            let done = 10.0 + seg as f64 * 2.0 + part as f64 * 0.1;
            text += &format!("{done:.1},0.5,s,f,{off},100,0,100,tv\n");
        }
    }
    let (a, chains) = run(&text);
    assert_eq!(chains, vec![("s".into(), "f".into(), 0, 900, 9)]);
    assert_eq!(a.read.requests, 9);
}

#[test]
fn open_ended_and_repeated_requests() {
    let text = format!(
        "{HEADER}\
         1,0.2,s,f,0,,1,786432,tv\n\
         700,690,s,f,1000000,,1,50000000,tv\n\
         705,0.1,s,f,51000000,1000,0,1000,tv\n\
         706,0.1,s,f,51000000,1000,0,1000,tv\n\
         707,0.1,s,f,51001000,1000,0,1000,tv\n"
    );
    let (_, chains) = run(&text);
    assert_eq!(
        chains,
        vec![
            ("s".into(), "f".into(), 0, 786_432, 1),
            ("s".into(), "f".into(), 1_000_000, 50_002_000, 3),
            ("s".into(), "f".into(), 51_000_000, 1000, 1),
        ]
    );
}

#[test]
fn bad_lines_are_counted_and_the_rest_analyzed() {
    let text = format!("{HEADER}1,0.1,s,f,0,10,0,10,tv\nnot,a,line\n2,0.1,s,f,10,10,0,10,tv\n3,x,s,f,20,10,0,10,tv\n");
    let (a, chains) = run(&text);
    assert_eq!(a.read.bad_lines, 2);
    assert_eq!(a.read.bad_examples[0].0, 3);
    assert_eq!(a.read.bad_examples[1].0, 5);
    assert_eq!(chains, vec![("s".into(), "f".into(), 0, 20, 2)]);
}

#[test]
fn sessions_active_at_the_log_end_are_flagged_and_can_be_excluded() {
    let text = format!(
        "{HEADER}\
         10,0.1,old,f,0,10,0,10,tv\n\
         5000,0.1,late,g,0,10,0,10,tv\n\
         5001,0.1,late,g,10,10,0,10,tv\n"
    );
    let (a, chains) = run(&text);
    assert_eq!(a.open_at_end, 1);
    assert_eq!(chains.len(), 2);
    assert_eq!(a.phases.sessions, 2);
    let opts = AnalyzeOptions {
        exclude_tail_s: 3600.0,
        ..Default::default()
    };
    let a = analyze(
        text.as_bytes(),
        FileTable::default(),
        &opts,
        &mut Collect::default(),
    )
    .unwrap();
    assert_eq!(a.excluded_tail, 1);
    assert_eq!(a.phases.sessions, 1);
    assert_eq!(
        a.chains.chains, 2,
        "excluded sessions still have their chains"
    );
}

#[test]
fn a_log_cut_mid_session_gives_prefixes_of_the_true_chains() {
    let dir = tempfile::tempdir().unwrap();
    let spec = NetflixSpec::new(21, 0.05, &[]).unwrap();
    synth_log(&spec, dir.path()).unwrap();
    let log = std::fs::read_to_string(dir.path().join("log.csv")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    // Keep the first 60% of the log: many sessions are still running at the cut.
    let keep = lines.len() * 6 / 10;
    let cut = lines[..keep].join("\n") + "\n";
    let files = FileTable::from_csv(&dir.path().join("files.csv")).unwrap();
    let mut c = Collect::default();
    let a = analyze(cut.as_bytes(), files, &AnalyzeOptions::default(), &mut c).unwrap();
    assert!(a.open_at_end > 0, "the cut should leave sessions open");
    let truth = read_chains_csv(&dir.path().join("truth/chains.csv")).unwrap();
    let mut by_start: HashMap<(String, String, u64), Vec<u64>> = HashMap::new();
    for t in &truth {
        by_start
            .entry((t.session.clone(), t.file.clone(), t.start_offset))
            .or_default()
            .push(t.bytes);
    }
    // Every chain found is a true chain or a part of one cut by the log's end: it lies
    // inside some true chain of the same session and file.
    for (s, f, start, bytes, _) in &c.chains {
        let inside = truth.iter().any(|t| {
            &t.session == s
                && &t.file == f
                && t.start_offset <= *start
                && start + bytes <= t.start_offset + t.bytes
        });
        assert!(
            inside,
            "chain {s} {f} {start}+{bytes} is not inside any true chain"
        );
    }
    assert!(c.chains.len() < truth.len());
}

#[test]
fn nginx_log_with_session_header_and_file_table() {
    let table = "file,bitrate_kbps,media,size_bytes,drive\nnf/v.mp4,1000,video,100000000,d01\n";
    let mut log = String::new();
    for i in 0..30u64 {
        let first = i * 250_000;
        let done = 1_700_000_000.0 + i as f64 * 2.0;
        log += &format!(
            "{done:.3} 0.100 {} \"sess-1\" \"/nf/v.mp4\" \"bytes={first}-{}\" 206 250300 250000\n",
            1 + i % 3,
            first + 249_999
        );
    }
    log += "1700000100.000 0.001 9 \"sess-1\" \"/nf/v.mp4\" \"bytes=99999999999-\" 416 200 0\n";
    let files = FileTable::parse_csv(table.as_bytes(), "files.csv").unwrap();
    let mut c = Collect::default();
    let a = analyze(log.as_bytes(), files, &AnalyzeOptions::default(), &mut c).unwrap();
    assert_eq!(a.read.format, "nginx");
    assert_eq!(a.read.skipped_status, 1);
    assert_eq!(
        c.chains,
        vec![("sess-1".into(), "nf/v.mp4".into(), 0, 7_500_000, 30)]
    );
    // 7.5 MB at 1000 kbit/s is 60 s of title in a chain of about 58 s: one stable phase.
    assert_eq!(a.phases.phases.stable, 1);
    assert_eq!(a.phases.phases.transient, 0);
}

#[test]
fn report_renders_every_section_with_plots() {
    let dir = tempfile::tempdir().unwrap();
    let spec = NetflixSpec::new(5, 0.03, &[]).unwrap();
    synth_log(&spec, dir.path()).unwrap();
    let files = FileTable::from_csv(&dir.path().join("files.csv")).unwrap();
    let log = std::io::BufReader::new(std::fs::File::open(dir.path().join("log.csv")).unwrap());
    let a = analyze(
        log,
        files,
        &AnalyzeOptions::default(),
        &mut Collect::default(),
    )
    .unwrap();
    let html = vodkit_trace::report::html(&a);
    for needle in [
        "Table 5.2",
        "Table 5.3",
        "Table 5.4",
        "Fig. 5.11",
        "Fig. 5.13",
        "Fig. 5.17",
        "Fig. 5.20",
        "Fig. 5.5",
        "Fig. 5.7",
        "Fig. 5.10",
    ] {
        assert!(html.contains(needle), "report lacks {needle}");
    }
    assert!(html.matches("<svg").count() >= 7);
    assert!(
        !html.contains("no data measured"),
        "every plot of a synthesized log has data"
    );
    assert!(html.ends_with("</html>\n"));
}

/// The video fraction-downloaded CCDF's share of sessions above `pct` percent of a title.
fn video_above(a: &vodkit_trace::Analysis, pct: f64) -> f64 {
    a.sessions
        .fraction_downloaded_ccdf
        .video
        .iter()
        .find(|p| p[0] == pct)
        .map(|p| p[1])
        .expect("a CCDF step at that percentage")
}

#[test]
fn a_file_the_table_does_not_size_is_as_long_as_the_furthest_byte_read() {
    // Session a reads the whole 1,000-byte file in four chunks, b only the first half.
    let mut text = String::from(HEADER);
    for (i, off) in [0u64, 250, 500, 750].iter().enumerate() {
        let done = 10.0 + i as f64;
        text.push_str(&format!("{done},0.01,a,v.mp4,{off},250,0,250,tv\n"));
    }
    for (i, off) in [0u64, 250].iter().enumerate() {
        let done = 20.0 + i as f64;
        text.push_str(&format!("{done},0.01,b,v.mp4,{off},250,0,250,tv\n"));
    }
    // Without a table: a read all of it, b half.
    let (a, _) = run(&text);
    assert_eq!(a.sessions.sessions, 2);
    assert_eq!(video_above(&a, 45.0), 100.0);
    assert_eq!(video_above(&a, 50.0), 50.0);
    assert_eq!(video_above(&a, 95.0), 50.0);
    assert_eq!(video_above(&a, 100.0), 0.0);
    // A table that sizes it at 2,000 bytes is taken instead: a read half, b a quarter.
    let table = FileTable::parse_csv(
        "file,bitrate_kbps,media,size_bytes,drive\nv.mp4,1000,video,2000,d1\n".as_bytes(),
        "files.csv",
    )
    .unwrap();
    let mut c = Collect::default();
    let sized = analyze(text.as_bytes(), table, &AnalyzeOptions::default(), &mut c).unwrap();
    assert_eq!(video_above(&sized, 20.0), 100.0);
    assert_eq!(video_above(&sized, 25.0), 50.0);
    assert_eq!(video_above(&sized, 50.0), 0.0);
}

//! The SQL recipes of docs/trace.md, run by DuckDB (the `duckdb` Python package, installed
//! by scripts/install-test-deps) on the analyzer's Parquet output, give the numbers of its
//! JSON summaries; and the Parquet files hold the rows of the CSV files.

use std::io::Write;
use std::process::{Command, Stdio};

use vodkit_testkit::{needs, Need};
use vodkit_trace::analyze::{analyze, AnalyzeOptions};
use vodkit_trace::output::{DirSink, OutputFormat, Tables};
use vodkit_trace::FileTable;
use vodkit_workload::netflix::{synth_log, NetflixSpec};

/// The ```` ```sql recipe=NAME ```` blocks of docs/trace.md.
fn recipes() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/trace.md"))
        .unwrap();
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        if let Some(name) = l.strip_prefix("```sql recipe=") {
            let sql: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            out.push((name.trim().to_string(), sql.join("\n")));
        }
    }
    out
}

const RUN: &str = r#"
import duckdb, json, sys
d = json.load(sys.stdin)
con = duckdb.connect()
TABLES = ("chains", "phases", "sessions", "requests")
for t in TABLES:
    con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{d['dir']}/{t}-*.parquet')")
    con.execute(f"CREATE VIEW {t}_csv AS SELECT * FROM read_csv('{d['dir']}/csv/{t}.csv', header=true, all_varchar=true)")
out = {}
for name, sql in d["recipes"]:
    cur = con.execute(sql)
    cols = [c[0] for c in cur.description]
    out[name] = [dict(zip(cols, [float(v) if isinstance(v, (int, float)) else v for v in row])) for row in cur.fetchall()]
# The Parquet rows are the CSV rows: every column, as text, in the same order.
for t in TABLES:
    diff = con.execute(f"""
        SELECT count(*) FROM (
          SELECT * FROM {t}_csv EXCEPT ALL SELECT COLUMNS(*)::VARCHAR FROM {t})""").fetchone()[0]
    out[t + "_rows"] = con.execute(f"SELECT (SELECT count(*) FROM {t}_csv) - (SELECT count(*) FROM {t})").fetchone()[0]
    out[t + "_rows_not_in_parquet"] = diff
out["requests_count"] = con.execute("SELECT count(*) FROM requests").fetchone()[0]
out["session_bytes_minus_chain_bytes"] = con.execute(
    "SELECT (SELECT sum(bytes) FROM sessions) - (SELECT sum(bytes) FROM chains)").fetchone()[0]
out["sessions_distinct"] = con.execute(
    "SELECT count(*) - count(DISTINCT session) FROM sessions").fetchone()[0]
print(json.dumps(out))
"#;

#[test]
fn sql_recipes_on_parquet_give_the_reported_numbers() {
    if !needs(&[Need::Python("duckdb")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = NetflixSpec::new(3, 0.05, &[]).unwrap();
    synth_log(&spec, dir.path()).unwrap();
    let files = || FileTable::from_csv(&dir.path().join("files.csv")).unwrap();
    let log = || std::io::BufReader::new(std::fs::File::open(dir.path().join("log.csv")).unwrap());
    let opts = AnalyzeOptions::default();
    let out = dir.path().join("out");
    let all = Tables {
        chains: true,
        phases: true,
        sessions: true,
        requests: true,
    };
    // Parquet split into files of at most 1,000 rows, read back as one table per glob.
    let mut sink = DirSink::create_tables(&out, all, OutputFormat::Parquet, Some(1000)).unwrap();
    let a = analyze(log(), files(), &opts, &mut sink).unwrap();
    sink.finish().unwrap();
    let split = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("requests-"))
        .count();
    assert!(split > 2, "requests split into {split} files");
    let mut csv = DirSink::create_tables(&out.join("csv"), all, OutputFormat::Csv, None).unwrap();
    analyze(log(), files(), &opts, &mut csv).unwrap();
    csv.finish().unwrap();

    let recipes = recipes();
    assert_eq!(recipes.len(), 5, "{recipes:?}");
    let input = serde_json::json!({ "dir": out, "recipes": recipes });
    let mut child = Command::new("python3")
        .args(["-c", RUN])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    let num = |recipe: &str, row: usize, col: &str| -> f64 {
        got[recipe][row][col]
            .as_f64()
            .unwrap_or_else(|| panic!("{recipe}[{row}].{col} in {got}"))
    };
    let close = |what: &str, sql: f64, report: f64| {
        assert!(
            (sql - report).abs() < 1e-6 * report.abs().max(1.0),
            "{what}: SQL {sql}, report {report}"
        );
    };
    for t in ["chains", "phases", "sessions", "requests"] {
        assert_eq!(got[format!("{t}_rows_not_in_parquet")], 0, "{t}");
        assert_eq!(
            got[format!("{t}_rows")],
            0,
            "{t}: CSV rows minus Parquet rows"
        );
    }
    assert_eq!(got["requests_count"].as_u64(), Some(a.read.requests));
    assert_eq!(got["session_bytes_minus_chain_bytes"], 0, "{got}");
    // One row per session (a session seen again after it closed counts as a new one).
    assert_eq!(got["sessions_distinct"].as_u64(), Some(a.reopened), "{got}");
    let c = &a.chains;
    assert!(c.chains > 500, "{}", c.chains);
    close("chains", num("headline", 0, "chains"), c.chains as f64);
    close(
        "chains from the requests table",
        num("chains_from_requests", 0, "chains"),
        c.chains as f64,
    );
    close(
        "chains <= 1 MB",
        num("headline", 0, "chains_le_1mb_pct"),
        c.chains_le_1mb_pct,
    );
    close(
        "bytes in chains > 10 MB",
        num("headline", 0, "bytes_in_chains_gt_10mb_pct"),
        c.bytes_in_chains_gt_10mb_pct,
    );
    // Survival at 1 MB is the complement of the share of chains up to 1 MB.
    close(
        "survival at 1 MB",
        num("survival", 1, "pct_longer"),
        100.0 - c.chains_le_1mb_pct,
    );
    let big: f64 = got["bytes_by_length"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["class"].as_f64() >= Some(3.0))
        .map(|r| r["bytes_pct"].as_f64().unwrap())
        .sum();
    close(
        "bytes by length above 10 MB",
        big,
        c.bytes_in_chains_gt_10mb_pct,
    );
    let p = &a.phases;
    // Times in the files are rounded to the millisecond: shares agree to 0.01 points.
    for (col, want) in [
        ("transient_time_pct", p.time_pct.transient),
        ("stable_time_pct", p.time_pct.stable),
        ("inactive_time_pct", p.time_pct.inactive),
        ("transient_bytes_pct", p.bytes_pct.transient),
        ("stable_bytes_pct", p.bytes_pct.stable),
    ] {
        let sql = num("phase_shares", 0, col);
        assert!((sql - want).abs() < 0.01, "{col}: SQL {sql}, report {want}");
    }
}

//! Plain-text views of a report: the terminal table and report.md.

use super::{BenchReport, ServerReport, MEASURED};
use std::fmt::Write;

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |x| format!("{x:.digits$}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |x| format!("{:.0}%", x * 100.0))
}

fn capacity(s: &ServerReport) -> String {
    match (s.status.as_str(), s.max_failure_free_rate) {
        (MEASURED, Some(r)) => {
            let ci = s
                .ci95
                .map(|[a, b]| format!(" ±{:.2}", (b - a) / 2.0))
                .unwrap_or_default();
            let ceil = if s.hit_ceiling { " (≥, ceiling)" } else { "" };
            format!("{r:.2}{ci}{ceil}")
        }
        (MEASURED, None) => "none passed".into(),
        (status, _) => status.to_string(),
    }
}

const HEADER: [&str; 11] = [
    "server",
    "max rate",
    "% of bound",
    "tput MB/s",
    "disk MB/s",
    "ms/transaction",
    "avg read KiB",
    "disk util",
    "CPU busy",
    "iowait",
    "cores srv/load/disk",
];

fn row(s: &ServerReport) -> [String; 11] {
    [
        s.sut.clone(),
        capacity(s),
        pct(s.fraction_of_bound),
        num(s.throughput_mb_s, 1),
        num(s.disk_mb_s, 1),
        num(s.disk_ms_per_transaction, 2),
        num(s.avg_read_kib, 0),
        pct(s.disk_util),
        cpu_busy(s),
        pct(s.cpu_iowait),
        cores(s),
    ]
}

/// Machine-wide CPU busy; for result files written before it was measured, the old
/// 1 − idle figure as an upper bound (it counted iowait as busy).
fn cpu_busy(s: &ServerReport) -> String {
    match (s.cpu_busy, s.cpu_util) {
        (None, Some(old)) => format!("≤{}", pct(Some(old))),
        (busy, _) => pct(busy),
    }
}

/// Cores used by the server, the load generator and the disk emulator (`–` where unknown).
fn cores(s: &ServerReport) -> String {
    match &s.cores {
        Some(c) if !c.is_empty() => [c.server, c.load, c.disk_emulator]
            .map(|v| num(v, 2))
            .join("/"),
        _ => "–".into(),
    }
}

/// Aligned table for the terminal, followed by skip reasons and comparisons.
pub fn table(r: &BenchReport) -> String {
    let rows: Vec<[String; 11]> = r.servers.iter().map(row).collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for rw in &rows {
        for (w, c) in widths.iter_mut().zip(rw) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w - c.chars().count();
            if i == 0 {
                let _ = write!(s, "{c}{}  ", " ".repeat(pad));
            } else {
                let _ = write!(s, "{}{c}  ", " ".repeat(pad));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = format!(
        "max failure-free rate in {} ({})\n",
        r.rate_unit, r.criterion
    );
    if let Some(line) = bound_line(r) {
        out += &line;
        out += "\n";
    }
    out += &line(&HEADER.map(String::from));
    for rw in &rows {
        out += &line(rw);
    }
    for s in r.servers.iter().filter(|s| s.reason.is_some()) {
        let _ = writeln!(
            out,
            "  {}: {}",
            s.sut,
            s.reason.as_deref().unwrap_or_default()
        );
    }
    for c in &r.comparisons {
        let _ = writeln!(out, "  {}: {} — {}", c.what, num(c.ratio, 2), c.note);
    }
    for (sut, why) in super::above_bound(r) {
        let _ = writeln!(out, "  WARNING {sut}: {why}");
    }
    out
}

/// "bound X sessions/s (...)": the capacity bound and what it assumed, when the run has one.
fn bound_line(r: &BenchReport) -> Option<String> {
    let rate = r.bound_rate?;
    let how = r.bound.as_ref().map_or(String::new(), |b| {
        format!(
            " — {} t_pos {:.1} ms, R {:.0} MB/s, {} memory, {:.0}% hits",
            b.drive,
            b.positioning_ms,
            b.transfer_mb_s,
            bytesize::ByteSize(b.memory_bytes),
            b.hit_fraction * 100.0
        )
    });
    Some(format!(
        "bound {rate:.2} {} (no server can exceed it){how}",
        r.rate_unit
    ))
}

/// report.md: settings, the table, comparisons, scenario verdict and notes.
pub fn markdown(r: &BenchReport) -> String {
    let mut md = String::from("# vodkit bench report\n\n");
    if let Some(s) = &r.scenario {
        let _ = writeln!(md, "Scenario **{}** — mirrors {}.\n", s.name, s.mirrors);
        let _ = writeln!(md, "- Seed finding checked: {}", s.finding);
        let _ = writeln!(md, "- Verdict: {}\n", s.verdict);
    }
    let _ = writeln!(md, "| setting | value |\n|---|---|");
    let _ = writeln!(md, "| workload | `{}` |", r.workload);
    let _ = writeln!(md, "| testbed | {} |", r.testbed);
    let mem = r
        .memory_bytes
        .map(|b| bytesize::ByteSize(b).to_string())
        .unwrap_or("unlimited".into());
    let _ = writeln!(md, "| memory budget | {mem} |");
    if let Some(line) = bound_line(r) {
        let _ = writeln!(
            md,
            "| capacity bound | {} |",
            line.trim_start_matches("bound ")
        );
    }
    let _ = writeln!(md, "| criterion | {} |", r.criterion);
    let _ = writeln!(md, "| search | `{}` |", r.search);
    let _ = writeln!(md, "| repeats | {} |\n", r.repeat);
    let _ = writeln!(md, "Rates are in {}.\n", r.rate_unit);
    let _ = writeln!(md, "| {} |", super::text::HEADER.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(HEADER.len()));
    for s in &r.servers {
        let _ = writeln!(md, "| {} |", row(s).join(" | "));
    }
    let reasons: Vec<_> = r.servers.iter().filter(|s| s.reason.is_some()).collect();
    if !reasons.is_empty() {
        md += "\n";
        for s in reasons {
            let _ = writeln!(
                md,
                "- `{}` ({}): {}",
                s.sut,
                s.status,
                s.reason.as_deref().unwrap_or_default()
            );
        }
    }
    if !r.comparisons.is_empty() {
        md += "\n## Ratios\n\n| comparison | measured | target | met | note |\n|---|---|---|---|---|\n";
        for c in &r.comparisons {
            let met = match c.met {
                Some(true) => "yes",
                Some(false) => "no",
                None => "–",
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {met} | {} |",
                c.what,
                num(c.ratio, 2),
                num(c.target, 2),
                c.note
            );
        }
    }
    let above = super::above_bound(r);
    if !above.is_empty() {
        md += "\n";
        for (sut, why) in above {
            let _ = writeln!(md, "**Warning** `{sut}`: {why}\n");
        }
    }
    if !r.notes.is_empty() {
        md += "\n## Notes\n\n";
        for n in &r.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

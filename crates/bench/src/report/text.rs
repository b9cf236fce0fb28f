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
            let ceil = match (s.hit_ceiling, s.shortfall) {
                (_, Some(_)) => " (≥, delivery)",
                (true, None) => " (≥, ceiling)",
                _ => "",
            };
            format!("{r:.2}{ci}{ceil}")
        }
        (MEASURED, None) => "none passed".into(),
        (status, _) => status.to_string(),
    }
}

pub(super) const HEADER: [&str; 11] = [
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

pub(super) fn row(s: &ServerReport) -> [String; 11] {
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

/// The adaptive players' figures of one point (`qos.abr`, `vodkit bench --player`).
pub(super) fn abr(qos: Option<&serde_json::Value>) -> Option<String> {
    let a = qos?.get("abr")?;
    let f = |k: &str| a.get(k).and_then(serde_json::Value::as_f64);
    let players = f("players")?;
    Some(format!(
        "mean {} kbit/s, {} stalls ({} s), {} of {} players unstalled, {} switches, start-up p50 {} ms",
        num(f("mean_bitrate_kbps"), 0),
        num(f("stalls"), 0),
        num(f("stall_s"), 1),
        num(f("unstalled_players"), 0),
        num(Some(players), 0),
        num(f("switches"), 0),
        num(f("startup_ms_p50"), 0)
    ))
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
    let mut out = String::new();
    if let Some(s) = &r.scenario {
        let _ = writeln!(out, "seed finding ({}): {}", s.mirrors, s.finding);
        let _ = writeln!(out, "verdict: {}", s.verdict);
    }
    let _ = writeln!(
        out,
        "max failure-free rate in {} ({})",
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
    for s in &r.servers {
        if let Some(line) = abr(s.qos.as_ref()) {
            let _ = writeln!(out, "  {} players at capacity: {line}", s.sut);
        }
    }
    for c in &r.comparisons {
        let _ = writeln!(out, "  {}: {} — {}", c.what, num(c.ratio, 2), c.note);
    }
    for (sut, why) in super::above_bound(r) {
        let _ = writeln!(out, "  WARNING {sut}: {why}");
    }
    out
}

/// report.md's players section: each point's ABR figures, so a reader sees the delivered
/// bit rate fall before stalls appear. Empty without players.
fn players_section(r: &BenchReport) -> String {
    let intro = "\n## Players\n\nAdaptive players' figures at every point (mean bit rate of \
                 the media fetched, weighted by media time; stalls after start-up).\n";
    point_tables(r, intro, &["players"], |s| {
        s.points
            .iter()
            .filter_map(|p| Some(point_row(p, &abr(p.metrics.client.qos.as_ref())?)))
            .collect()
    })
}

/// A report.md section of one table per server, over its points: `rows` gives a server's
/// rows (each from [`point_row`]) under `columns` (those after the rate and the verdict).
/// A server without rows has no table; the section, opened by `intro`, is empty when no
/// server has one.
fn point_tables(
    r: &BenchReport,
    intro: &str,
    columns: &[&str],
    rows: impl Fn(&ServerReport) -> Vec<String>,
) -> String {
    let mut md = String::new();
    for s in &r.servers {
        let rows = rows(s);
        if rows.is_empty() {
            continue;
        }
        if md.is_empty() {
            md += intro;
        }
        let _ = writeln!(
            md,
            "\n`{}`\n\n| rate | point | {} |\n|---|---|{}",
            s.sut,
            columns.join(" | "),
            "---|".repeat(columns.len())
        );
        for row in rows {
            md += &row;
            md += "\n";
        }
    }
    md
}

/// A point's row of a [`point_tables`] table: its rate, its verdict (and when a point
/// stopped early was ended), then `cells` (joined by ` | `).
fn point_row(p: &super::PointRecord, cells: &str) -> String {
    let verdict = match (p.passed, &p.metrics.client.stopped_early) {
        (true, _) => "pass".to_string(),
        (false, Some(e)) => format!("fail, stopped at {:.0} s", e.at_s),
        (false, None) => "fail".to_string(),
    };
    format!("| {:.2} | {verdict} | {cells} |", p.rate)
}

/// report.md's points section: every point's judged window — delivered and disk MB/s, the
/// emulated drive's positionings, and the window's two halves with the steadiness verdict.
/// Empty when no point has any of them.
fn points_section(r: &BenchReport) -> String {
    let shown = |p: &super::PointRecord| {
        p.metrics.steadiness.is_some()
            || p.metrics.device.is_some()
            || p.metrics.fast_forward.is_some()
    };
    let intro = "\n## Points\n\nEvery point's judged window (from the point the run settled): \
                 client and disk MB/s, the emulated drive's positionings, and the window's two \
                 halves — steady when their disk MB/s agree within 10% and their memory share \
                 (1 − disk / delivered bytes) within 10 points. The history column is the \
                 fast-forward played before the point (schedule seconds in wall seconds); \
                 engine hits, for servers that report them, are the requested bytes their \
                 engine found in memory, prefetched ones included.\n";
    let columns = [
        "tput MB/s",
        "disk MB/s",
        "positionings/s",
        "KiB/positioning",
        "engine hits",
        "history",
        "halves",
        "steady",
    ];
    point_tables(r, intro, &columns, |s| {
        if !s.points.iter().any(shown) {
            return Vec::new();
        }
        s.points.iter().map(point_window_row).collect()
    })
}

/// A point's row of the points section.
fn point_window_row(p: &super::PointRecord) -> String {
    let m = &p.metrics;
    let d = m.device;
    let history = m.fast_forward.as_ref().map_or("–".into(), |h| {
        let drain = h
            .drain_s
            .filter(|&d| d >= 0.5)
            .map_or(String::new(), |d| format!(" + {d:.0} s drain"));
        format!("{:.0} s in {:.0} s{drain}", h.window_s, h.wall_s)
    });
    let (halves, steady) = match &m.steadiness {
        Some(st) => (st.describe(), if st.steady { "yes" } else { "**no**" }),
        None => ("–".into(), "–"),
    };
    let cells = format!(
        "{:.1} | {} | {} | {} | {} | {history} | {halves} | {steady}",
        m.client.throughput_mb_s,
        num(m.disk.map(|d| d.mb_s), 1),
        num(d.map(|d| d.positionings_per_s), 1),
        num(d.and_then(|d| d.kib_per_positioning), 0),
        pct(m.engine.map(|e| e.hit_fraction)),
    );
    point_row(p, &cells)
}

/// report.md's comparison of each server whose engine reports its counters with the memory
/// replay (the same manager on the bound's drive terms): capacity, the share of requested
/// bytes found in memory, and the mean read, at the server's highest passing point. Empty
/// without a replay or such a server.
fn replay_section(r: &BenchReport) -> String {
    let Some(replay) = r.bound.as_ref().and_then(|b| b.manager_replay.as_ref()) else {
        return String::new();
    };
    let drive_mb_s = r.bound.as_ref().map_or(0.0, |b| b.transfer_mb_s);
    let (mut md, mut sizing) = (String::new(), String::new());
    for s in &r.servers {
        let best = s
            .points
            .iter()
            .filter(|p| p.passed && p.metrics.engine.is_some())
            .max_by(|a, b| a.rate.total_cmp(&b.rate));
        let (Some(p), Some(cap)) = (best, s.max_failure_free_rate) else {
            continue;
        };
        let Some(e) = p.metrics.engine else { continue };
        if md.is_empty() {
            md += "\n## Run against replay\n\nThe server's engine over the judged window of its \
                   highest passing point (`/stats`: requested bytes found in memory, prefetched \
                   ones included, the mean read, the positioning the engine learned from \
                   its reads, and how long a read waited in the drive's queue) beside the \
                   memory replay of the same manager (docs/simulate.md, \"Memory replay\"), \
                   whose capacity is the rate at which reads wait its `--queue-wait`; in \
                   parentheses, run / replay. Positionings per read: the emulated drive's \
                   positionings over the engine's reads (the replay prices one a read), and \
                   the share of the bytes in the engine's read ranges already resident, which \
                   a buffered read skips, so that one read reaches the drive in pieces.\n\n\
                   | server | capacity (sessions/s) | hits | mean read | positioning | queue wait | positionings per read |\n\
                   |---|---|---|---|---|---|---|\n";
        }
        let mib = |b: f64| b / f64::from(1u32 << 20);
        let positioning = match e.positioning_ms {
            Some(ms) if replay.mean_positioning_ms > 0.0 => format!(
                "{ms:.1} vs {:.1} ms ({:.2})",
                replay.mean_positioning_ms,
                ms / replay.mean_positioning_ms
            ),
            _ => "–".to_string(),
        };
        let wait = match (e.queue_wait_ms, replay.queue_wait_s) {
            (Some(ms), Some(s)) => format!("{ms:.0} vs {:.0} ms ({:.2})", s * 1e3, ms / (s * 1e3)),
            (Some(ms), None) => format!("{ms:.0} ms vs none"),
            _ => "–".to_string(),
        };
        let pieces = match (p.metrics.device, e.reads_per_s) {
            (Some(d), Some(reads)) if reads > 0.0 => format!(
                "{:.2} vs 1.00{}",
                d.positionings_per_s / reads,
                e.resident_read_fraction.map_or(String::new(), |f| format!(
                    " ({:.0}% of read bytes resident)",
                    f * 100.0
                ))
            ),
            _ => "–".to_string(),
        };
        let _ = writeln!(
            md,
            "| {} | {cap:.2} vs {:.2} ({:.2}) | {:.0}% vs {:.0}% ({:.2}) | {:.2} vs {:.2} MiB ({:.2}) | {positioning} | {wait} | {pieces} |",
            s.sut,
            replay.rate,
            cap / replay.rate,
            e.hit_fraction * 100.0,
            replay.hit_fraction * 100.0,
            e.hit_fraction / replay.hit_fraction,
            mib(e.mean_read_bytes),
            mib(replay.mean_read_bytes),
            e.mean_read_bytes / replay.mean_read_bytes,
        );
        if let Some(z) = e.sizing {
            let vs = |run: f64, rep: f64| format!("{run:.1} vs {rep:.1}");
            let pct_vs = |run: f64, rep: f64| format!("{:.0}% vs {:.0}%", run * 100.0, rep * 100.0);
            let rate = e
                .transfer_mb_s
                .map_or("–".to_string(), |t| format!("{t:.0} vs {drive_mb_s:.0}"));
            let _ = writeln!(
                sizing,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} vs 0 | {rate} |",
                s.sut,
                vs(mib(z.mean_cap_bytes), mib(replay.mean_cap_bytes)),
                pct_vs(z.capped_fraction, replay.capped_read_fraction),
                pct_vs(z.survival_cut_fraction, replay.survival_cut_fraction),
                vs(z.weighted_streams, replay.mean_weighted_streams),
                vs(
                    mib(z.pool_bytes),
                    mib(replay.usable_bytes as f64 - replay.mean_kept_bytes)
                ),
                vs(mib(z.kept_bytes), mib(replay.mean_kept_bytes)),
                mib(z.unreleased_bytes),
            );
        }
    }
    if !sizing.is_empty() {
        md += "\nWhat sized the reads, run vs replay: the mean cap the budget allowed a read \
               (MiB), the reads the budget cut and those cut where viewers are likely to have \
               left, the streams sharing the prefetch pool, the pool and the kept intervals \
               (MiB, averaged over the window), what socket buffers held of released pages \
               (MiB; the replay has none) and the transfer rate (MB/s: learned from the \
               engine's reads against the drive's).\n\n\
               | server | mean cap | cut by budget | cut by survival | streams | pool | kept | held by sockets | transfer |\n\
               |---|---|---|---|---|---|---|---|---|\n";
        md += &sizing;
    }
    md
}

/// "bound X sessions/s (...)": the capacity bound and what it assumed, when the run has one.
pub(super) fn bound_line(r: &BenchReport) -> Option<String> {
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
    md += &players_section(r);
    md += &points_section(r);
    md += &replay_section(r);
    md += &balancer_section(r);
    md += &origins_section(r);
    md += &failover_section(r);
    md += &time_section(r);
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

/// A cluster's load balancer: its cores at capacity and at the most throughput any point
/// delivered, and its cores per Gbit/s, to size the balancer.
fn balancer_section(r: &BenchReport) -> String {
    let gbit = |mb_s: f64| mb_s * 8.0 / 1000.0;
    let mut md = String::new();
    for s in &r.servers {
        let busiest = s
            .points
            .iter()
            .filter(|p| p.metrics.cores.balancer.is_some())
            .max_by(|a, b| {
                let t = |p: &super::PointRecord| p.metrics.client.throughput_mb_s;
                t(a).total_cmp(&t(b))
            });
        let at_capacity = s.cores.filter(|c| c.balancer.is_some());
        if busiest.is_none() && at_capacity.is_none() {
            continue;
        }
        if md.is_empty() {
            md += "\n## Balancer\n\nThe cluster's load balancer's CPU over the judged window \
                   (its processes and workers, measured as the server's), beside the Gbit/s the \
                   clients received through it (docs/cluster.md, \"Sizing the balancer\").\n\n\
                   | server | at | rate | Gbit/s | balancer cores | cores per Gbit/s |\n\
                   |---|---|---|---|---|---|\n";
        }
        if let Some(c) = at_capacity {
            let _ = writeln!(
                md,
                "| {} | capacity | {} | {} | {} | {} |",
                s.sut,
                num(s.max_failure_free_rate, 2),
                num(s.throughput_mb_s.map(gbit), 2),
                num(c.balancer, 2),
                num(c.balancer_per_gbit_s, 2)
            );
        }
        if let Some(p) = busiest {
            let c = &p.metrics.cores;
            let _ = writeln!(
                md,
                "| {} | most delivered | {:.2} | {:.2} | {} | {} |",
                s.sut,
                p.rate,
                gbit(p.metrics.client.throughput_mb_s),
                num(c.balancer, 2),
                num(c.balancer_per_gbit_s, 2)
            );
        }
    }
    md
}

/// The notes of a point that describe a cluster's origins one by one.
const ORIGIN_NOTES: [&str; 4] = [
    "origins (from HAProxy)",
    "origins' engines",
    "origins' memory",
    "each origin's own drive",
];

/// Each cluster's origins at its capacity (the highest point that passed): how the balancer
/// spread sessions and bytes, each origin's bytes from memory and each drive's MB/s.
fn origins_section(r: &BenchReport) -> String {
    let mut md = String::new();
    for s in &r.servers {
        let Some(p) = s
            .points
            .iter()
            .filter(|p| p.passed)
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
        else {
            continue;
        };
        let notes: Vec<&String> = p
            .metrics
            .notes
            .iter()
            .filter(|n| ORIGIN_NOTES.iter().any(|k| n.starts_with(k)))
            .collect();
        if notes.is_empty() {
            continue;
        }
        if md.is_empty() {
            md += "\n## Origins\n\nEach cluster's origins at the highest rate it passed \
                   (docs/cluster.md, \"In the bench\").\n";
        }
        let _ = writeln!(md, "\n`{}` at {:.2}:\n", s.sut, p.rate);
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

/// Every point of a `:failover` cluster: the origin killed in its middle, the sessions that
/// were on it and what became of them, and the failures elsewhere (target 0).
fn failover_section(r: &BenchReport) -> String {
    let intro = "\n## Failover\n\nOne origin killed (`SIGKILL`) at the middle of every point's \
                 judged part: the sessions under way on it (from its access log), those that \
                 played to the end anyway and those lost, the sessions elsewhere and how many \
                 of them failed (target 0), and the requests the load retried once on a fresh \
                 connection (docs/cluster.md, \"Failover\").\n";
    let columns = [
        "killed",
        "at s",
        "on it",
        "recovered",
        "lost",
        "elsewhere",
        "failed elsewhere",
        "retries completed",
    ];
    point_tables(r, intro, &columns, |s| {
        s.points
            .iter()
            .filter_map(|p| {
                let f = p.metrics.failover.as_ref()?;
                let cells = format!(
                    "{} | {} | {} | {} | {} | {} | {} | {} of {}",
                    f.origin,
                    num(f.killed_at_s, 0),
                    f.sessions_on_origin,
                    f.recovered,
                    f.lost,
                    f.others,
                    f.others_failed,
                    f.recovered_requests,
                    f.retried_requests
                );
                Some(point_row(p, &cells))
            })
            .collect()
    })
}

/// How long each server's search took, and in all (a scenario's cells say which cell).
fn time_section(r: &BenchReport) -> String {
    let timed: Vec<(&str, f64)> = r
        .servers
        .iter()
        .filter_map(|s| Some((s.sut.as_str(), s.wall_s?)))
        .collect();
    if timed.is_empty() {
        return String::new();
    }
    let mut md = String::from("\n## Time\n\n| server | points | wall time |\n|---|---|---|\n");
    let minutes = |s: f64| format!("{:.1} min", s / 60.0);
    for (sut, s) in &timed {
        let points = r
            .servers
            .iter()
            .find(|x| x.sut == *sut)
            .map_or(0, |x| x.points.len());
        let _ = writeln!(md, "| {sut} | {points} | {} |", minutes(*s));
    }
    let total: f64 = timed.iter().map(|(_, s)| s).sum();
    let _ = writeln!(md, "| all | | {} |", minutes(total));
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{new_report, PointRecord, ServerReport};
    use crate::search::SearchPlan;

    /// A report judged `strict`, on `testbed` with `memory`, with no servers yet.
    fn strict_report(testbed: &str, memory: Option<u64>) -> BenchReport {
        let plan = SearchPlan::failure_free_around(1.0);
        new_report("w", testbed, memory, "strict", &plan, 1)
    }

    /// Server `name`, measured, with no points yet.
    fn measured(name: &str) -> ServerReport {
        let sut = crate::sut::parse_one(name).unwrap();
        ServerReport {
            reason: None,
            ..ServerReport::not_measured(&sut, MEASURED, String::new())
        }
    }

    /// The markdown of `rep` once `s` is added to it, which must have a `## {heading}`
    /// section.
    /// `md` contains each of `parts`.
    fn assert_has(md: &str, parts: &[&str]) {
        for part in parts {
            assert!(md.contains(part), "`{part}` not in {md}");
        }
    }

    fn markdown_with(rep: &mut BenchReport, s: ServerReport, heading: &str) -> String {
        rep.servers.push(s);
        let md = markdown(rep);
        assert!(md.contains(&format!("## {heading}")), "{md}");
        md
    }

    fn point(rate: f64, passed: bool, kbps: f64, stalls: u64) -> PointRecord {
        let mut p = PointRecord {
            rate,
            repeat: 1,
            passed,
            short: false,
            metrics: Default::default(),
        };
        p.metrics.client.qos = Some(serde_json::json!({
            "acceptable_sessions_fraction": 1.0,
            "abr": {
                "players": 40, "mean_bitrate_kbps": kbps, "switches": 7, "stalls": stalls,
                "stall_s": 1.5, "unstalled_players": 40 - stalls, "startup_ms_p50": 420.0,
                "startup_ms_p90": 900.0
            }
        }));
        p
    }

    #[test]
    fn players_show_at_capacity_and_point_by_point() {
        let mut rep = strict_report("plain", None);
        let mut s = measured("nginx");
        s.max_failure_free_rate = Some(2.0);
        s.points = vec![
            point(1.0, true, 2900.0, 0),
            point(2.0, true, 2100.0, 0),
            point(3.0, false, 900.0, 6),
        ];
        s.qos = s.points[1].metrics.client.qos.clone();
        rep.servers.push(s);
        let table = table(&rep);
        assert!(
            table.contains("nginx players at capacity: mean 2100 kbit/s, 0 stalls (1.5 s), 40 of 40 players unstalled, 7 switches, start-up p50 420 ms"),
            "{table}"
        );
        let md = markdown(&rep);
        assert_has(&md, &["## Players", "| 1.00 | pass | mean 2900 kbit/s"]);
        assert!(
            md.contains("| 3.00 | fail | mean 900 kbit/s, 6 stalls"),
            "{md}"
        );
        // Without players there is no section and no line.
        let mut plain = rep.clone();
        for s in &mut plain.servers {
            s.qos = None;
            s.points.clear();
        }
        assert!(!markdown(&plain).contains("## Players"));
        assert!(!table_contains_players(&plain));
    }

    #[test]
    fn the_engine_is_read_against_the_replay_at_the_highest_passing_point() {
        let mut rep = strict_report("hdd:wd-red", Some(1 << 28));
        let mut s = measured("vodkit");
        s.max_failure_free_rate = Some(10.0);
        let engine = |hit_fraction: f64| crate::point::EngineFigures {
            hit_fraction,
            mean_read_bytes: 1.5 * 1048576.0,
            seconds: 20.0,
            positioning_ms: Some(14.0),
            queue_wait_ms: Some(120.0),
            transfer_mb_s: Some(90.0),
            reads_per_s: Some(20.0),
            resident_read_fraction: Some(0.125),
            sizing: Some(crate::point::ReadSizing {
                mean_cap_bytes: 1.5 * 1048576.0,
                capped_fraction: 0.8,
                survival_cut_fraction: 0.1,
                weighted_streams: 120.0,
                pool_bytes: 100.0 * 1048576.0,
                kept_bytes: 80.0 * 1048576.0,
                unreleased_bytes: 4.0 * 1048576.0,
            }),
        };
        s.points = vec![
            point(5.0, true, 100.0, 0),
            point(10.0, true, 100.0, 0),
            point(12.0, false, 100.0, 1),
        ];
        s.points[0].metrics.engine = Some(engine(0.9));
        s.points[1].metrics.engine = Some(engine(0.6));
        // The drive positioned 27 times a second for the engine's 20 reads.
        s.points[1].metrics.device = Some(crate::point::DeviceFigures {
            positionings_per_s: 27.0,
            kib_per_positioning: Some(2048.0),
            busy_fraction: 0.9,
        });
        s.points[2].metrics.engine = Some(engine(0.2));
        rep.servers.push(s);
        // Without a replay there is nothing to read the engine against.
        assert!(!markdown(&rep).contains("## Run against replay"));
        rep.bound = Some(crate::bound::CapacityBound {
            bound_rate: 20.0,
            transfer_mb_s: 120.0,
            manager_replay: Some(vodkit_sim::replay::ReplayResult {
                rate: 12.5,
                hit_fraction: 0.5,
                mean_read_bytes: 1048576.0,
                mean_positioning_ms: 10.0,
                queue_wait_s: Some(0.5),
                mean_cap_bytes: 2.0 * 1048576.0,
                capped_read_fraction: 0.7,
                survival_cut_fraction: 0.0,
                mean_weighted_streams: 100.0,
                usable_bytes: 192 * 1048576,
                mean_kept_bytes: 72.0 * 1048576.0,
                ..Default::default()
            }),
            ..Default::default()
        });
        let md = markdown(&rep);
        assert!(
            md.contains(
                "| vodkit | 10.00 vs 12.50 (0.80) | 60% vs 50% (1.20) | 1.50 vs 1.00 MiB (1.50) \
                 | 14.0 vs 10.0 ms (1.40) | 120 vs 500 ms (0.24) \
                 | 1.35 vs 1.00 (12% of read bytes resident) |"
            ),
            "{md}"
        );
        // What sized the reads, at the same point: the pool is usable less kept.
        assert!(
            md.contains(
                "| vodkit | 1.5 vs 2.0 | 80% vs 70% | 10% vs 0% | 120.0 vs 100.0 | 100.0 vs 120.0 \
                 | 80.0 vs 72.0 | 4.0 vs 0 | 90 vs 120 |"
            ),
            "{md}"
        );
        // An engine without a memory manager has no sizing row.
        for p in &mut rep.servers[0].points {
            if let Some(e) = &mut p.metrics.engine {
                e.sizing = None;
            }
        }
        assert!(!markdown(&rep).contains("What sized the reads"));
    }

    #[test]
    fn the_report_says_how_long_each_server_took() {
        let mut rep = strict_report("plain", None);
        assert!(!markdown(&rep).contains("## Time"));
        for (name, secs) in [("nginx", 600.0), ("vodkit", 330.0)] {
            let mut s = measured(name);
            s.points = vec![point(1.0, true, 100.0, 0), point(2.0, false, 100.0, 1)];
            s.wall_s = Some(secs);
            rep.servers.push(s);
        }
        let md = markdown(&rep);
        assert_has(
            &md,
            &[
                "| nginx | 2 | 10.0 min |",
                "| vodkit | 2 | 5.5 min |",
                "| all | | 15.5 min |",
            ],
        );
    }

    #[test]
    fn a_cluster_report_sizes_its_balancer() {
        let mut rep = strict_report("plain", None);
        let mut s = measured("cluster:2:vodkit@haproxy:title");
        s.max_failure_free_rate = Some(2.0);
        let mut a = point(2.0, true, 100.0, 0);
        a.metrics.client.throughput_mb_s = 250.0;
        a.metrics.cores.balancer = Some(0.3);
        a.metrics.cores = a.metrics.cores.with_delivery(250.0);
        let mut b = point(3.0, false, 100.0, 0);
        b.metrics.client.throughput_mb_s = 500.0;
        b.metrics.cores.balancer = Some(0.5);
        b.metrics.cores = b.metrics.cores.with_delivery(500.0);
        s.throughput_mb_s = Some(250.0);
        s.cores = Some(a.metrics.cores);
        s.points = vec![a, b];
        let md = markdown_with(&mut rep, s, "Balancer");
        assert!(
            md.contains(
                "| cluster:2:vodkit@haproxy:title | capacity | 2.00 | 2.00 | 0.30 | 0.15 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| cluster:2:vodkit@haproxy:title | most delivered | 3.00 | 4.00 | 0.50 | 0.12 |"
            ),
            "{md}"
        );
        // Without a balancer there is no such section.
        rep.servers[0].cores = None;
        for p in &mut rep.servers[0].points {
            p.metrics.cores = Default::default();
        }
        assert!(!markdown(&rep).contains("## Balancer"));
    }

    #[test]
    fn a_cluster_report_lists_its_origins_at_capacity() {
        let mut rep = strict_report("plain", None);
        let mut s = measured("cluster:2:vodkit@haproxy:title");
        s.points = [(2.0, true), (3.0, true), (4.0, false)]
            .iter()
            .map(|&(rate, passed)| {
                let mut p = point(rate, passed, 100.0, 0);
                p.metrics.notes = vec![
                    format!("each origin's own drive: drive 1 (loop1) {rate} MB/s"),
                    "some other note".into(),
                ];
                p
            })
            .collect();
        let md = markdown_with(&mut rep, s, "Origins");
        assert!(
            md.contains("`cluster:2:vodkit@haproxy:title` at 3.00:"),
            "{md}"
        );
        assert!(
            md.contains("- each origin's own drive: drive 1 (loop1) 3 MB/s"),
            "{md}"
        );
        assert!(
            !md.contains("(loop1) 4 MB/s") && !md.contains("- some other note"),
            "{md}"
        );
    }

    #[test]
    fn a_point_stopped_early_says_when_and_has_no_halves() {
        let mut rep = strict_report("plain", None);
        let mut s = measured("nginx");
        let mut early = point(6.0, false, 100.0, 0);
        early.metrics.fast_forward = Some(Default::default());
        let mut whole = early.clone();
        whole.rate = 4.0;
        early.metrics.client.stopped_early = Some(crate::early::EarlyStop {
            at_s: 9.2,
            why: "3 of at most 40 sessions already more than 2 s behind, 2 allowed".into(),
        });
        s.points = vec![whole, early];
        let md = markdown_with(&mut rep, s, "Points");
        assert_has(
            &md,
            &[
                "| 4.00 | fail | ",
                "| 6.00 | fail, stopped at 9 s | ",
                " | – | – |\n",
            ],
        );
    }

    #[test]
    fn a_failover_point_counts_the_killed_origins_sessions() {
        let mut rep = strict_report("plain", None);
        let mut s = measured("cluster:3:vodkit@haproxy:title:failover");
        let mut p = point(2.0, true, 100.0, 0);
        assert!(!markdown(&rep).contains("## Failover"));
        p.metrics.failover = Some(crate::failover::FailoverFigures {
            origin: "o1".into(),
            killed_at_s: Some(45.0),
            sessions_on_origin: 30,
            recovered: 28,
            lost: 2,
            others: 70,
            others_failed: 0,
            retried_requests: 9,
            recovered_requests: 7,
        });
        s.points = vec![p];
        let md = markdown_with(&mut rep, s, "Failover");
        assert!(
            md.contains("| 2.00 | pass | o1 | 45 | 30 | 28 | 2 | 70 | 0 | 7 of 9 |"),
            "{md}"
        );
    }

    #[test]
    fn the_terminal_table_names_the_seed_finding_and_its_verdict() {
        let mut rep = strict_report("plain", None);
        assert!(!table(&rep).contains("seed finding"));
        rep.scenario = Some(crate::report::ScenarioInfo {
            name: "demo".into(),
            mirrors: "seed 001 Table 3".into(),
            finding: "prefetching serves more".into(),
            verdict: "reproduced: 2.10×".into(),
        });
        let t = table(&rep);
        assert!(
            t.starts_with("seed finding (seed 001 Table 3): prefetching serves more\nverdict: reproduced: 2.10×\nmax failure-free rate"),
            "{t}"
        );
    }

    fn table_contains_players(r: &BenchReport) -> bool {
        table(r).contains("players at capacity")
    }
}

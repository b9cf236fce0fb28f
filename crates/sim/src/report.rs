//! Outputs of `vodkit simulate`: `sim.json`, `sim.csv`, `index.html` (two plots in the
//! form of thesis Figs. 5.22/5.23: utilization on the left axis, memory on the right) and
//! the text summary relative to Fixed.

use std::fmt::Write as _;
use std::path::Path;

use crate::sweep::{Curve, Family};
use crate::SimReport;
use vodkit_plot::{escape, Axis, Plot, Series};

const MIB: f64 = 1_048_576.0;
const GB: f64 = 1e9;

/// Writes `sim.json`, `sim.csv` and `index.html` into `out` (created if missing).
pub fn write_all(out: &Path, r: &SimReport) -> Result<(), String> {
    let io = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", out.display());
    std::fs::create_dir_all(out).map_err(|e| io("create directory", e))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    std::fs::write(out.join("sim.json"), json + "\n").map_err(|e| io("write sim.json", e))?;
    std::fs::write(out.join("sim.csv"), csv(r)?).map_err(|e| io("write sim.csv", e))?;
    std::fs::write(out.join("index.html"), html(r)).map_err(|e| io("write index.html", e))?;
    Ok(())
}

/// The columns of `sim.csv`, in [`CsvRow`]'s order.
pub const CSV_HEADER: &str = "policy,param_bytes,spec,max_disk_util,max_memory_bytes,feasible,\
busiest_drive,busiest_interval,prefetches,disk_bytes,chain_bytes,wasted_bytes";

/// One `sim.csv` row.
#[derive(serde::Serialize)]
struct CsvRow<'a> {
    policy: &'a str,
    param_bytes: u64,
    spec: &'a str,
    max_disk_util: f64,
    max_memory_bytes: u64,
    feasible: bool,
    busiest_drive: u32,
    busiest_interval: u64,
    prefetches: u64,
    disk_bytes: u64,
    chain_bytes: u64,
    wasted_bytes: u64,
}

/// One row per policy and parameter (RFC 4180 quoting, written with the `csv` crate).
pub fn csv(r: &SimReport) -> Result<String, String> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    w.write_record(CSV_HEADER.split(','))
        .map_err(|e| format!("sim.csv: {e}"))?;
    for c in &r.policies {
        for p in &c.points {
            let q = &p.result;
            w.serialize(CsvRow {
                policy: c.policy.name(),
                param_bytes: p.param_bytes,
                spec: &p.spec,
                max_disk_util: (q.max_disk_util * 1e6).round() / 1e6,
                max_memory_bytes: q.max_memory_bytes,
                feasible: q.feasible,
                busiest_drive: q.busiest_drive,
                busiest_interval: q.busiest_interval,
                prefetches: q.prefetches,
                disk_bytes: q.disk_bytes,
                chain_bytes: q.chain_bytes,
                wasted_bytes: q.wasted_bytes,
            })
            .map_err(|e| format!("sim.csv: {e}"))?;
        }
    }
    let bytes = w.into_inner().map_err(|e| format!("sim.csv: {e}"))?;
    String::from_utf8(bytes).map_err(|e| format!("sim.csv: {e}"))
}

fn pct(x: f64) -> String {
    let v = x * 100.0;
    if v < 0.0 {
        format!("\u{2212}{:.0}%", -v)
    } else {
        format!("+{v:.0}%")
    }
}

/// The comparison with Fixed in the thesis's form, one line per policy.
pub fn summary_text(r: &SimReport) -> String {
    let mut s = String::new();
    let fixed = r.summary.iter().find(|c| c.policy == Family::Fixed);
    if let Some(f) = fixed {
        let _ = writeln!(
            s,
            "fixed: best utilization {:.1}% at {:.1} MiB with {:.2} GB memory",
            f.best_util * 100.0,
            f.best_param_bytes as f64 / MIB,
            f.best_memory_bytes as f64 / GB
        );
    }
    for c in r.summary.iter().filter(|c| c.policy != Family::Fixed) {
        let _ = write!(
            s,
            "{}: best utilization {:.1}% at {:.1} MiB ({:.2} GB)",
            c.policy.name(),
            c.best_util * 100.0,
            c.best_param_bytes as f64 / MIB,
            c.best_memory_bytes as f64 / GB
        );
        if fixed.is_some() {
            let mem = c
                .memory_change_at_equal_util
                .map_or("never reaches fixed's best utilization".to_string(), |m| {
                    format!("{} memory at equal best utilization", pct(m))
                });
            let util = c
                .util_change_at_equal_memory
                .map_or("needs more memory than fixed's best".to_string(), |u| {
                    format!("{} utilization at equal memory", pct(u))
                });
            let _ = write!(s, "; {mem}; {util}");
        }
        s.push('\n');
    }
    let infeasible: Vec<_> = r
        .policies
        .iter()
        .flat_map(|c| {
            c.points
                .iter()
                .filter(|p| !p.result.feasible)
                .map(move |p| (c, p))
        })
        .collect();
    if !infeasible.is_empty() {
        let _ = writeln!(
            s,
            "infeasible (a drive above 100%): {} of {} points",
            infeasible.len(),
            r.policies.iter().map(|c| c.points.len()).sum::<usize>()
        );
    }
    s
}

/// A policy family's colour, the same in both figures.
fn color(f: Family) -> usize {
    Family::ALL.iter().position(|&x| x == f).unwrap_or(0)
}

/// A plot of utilization (solid, left axis) and memory (dashed, right axis) against the
/// sweep parameter for `curves`, in the look of every vodkit report (`vodkit_plot`).
pub fn dual_axis_svg(title: &str, curves: &[&Curve]) -> String {
    let line = |c: &Curve, what: &str, f: &dyn Fn(&crate::sweep::Point) -> f64| Series {
        name: format!("{} {what}", c.policy.name()),
        points: c
            .points
            .iter()
            .map(|p| (p.param_bytes as f64 / MIB, f(p)))
            .collect(),
        color: Some(color(c.policy)),
        ..Series::default()
    };
    let util: Vec<Series> = curves
        .iter()
        .map(|c| Series {
            markers: true,
            ..line(c, "Util", &|p| p.result.max_disk_util * 100.0)
        })
        .collect();
    let mem: Vec<Series> = curves
        .iter()
        .map(|c| Series {
            dashed: true,
            ..line(c, "Mem", &|p| p.result.max_memory_bytes as f64 / GB)
        })
        .collect();
    let over_100 = util.iter().flat_map(|s| &s.points).any(|p| p.1 >= 100.0);
    Plot {
        title: title.into(),
        x: Axis::linear("prefetch size parameter (MiB)"),
        y: Axis::linear("Util: busiest drive (%), solid"),
        series: util,
        right: Some((Axis::linear("Mem: peak memory (GB), dashed"), mem)),
        rules: if over_100 {
            vec![(100.0, "100% (infeasible above)".into())]
        } else {
            Vec::new()
        },
    }
    .render()
}

/// The HTML page: parameters, the two figures, the summary and a table of all points.
pub fn html(r: &SimReport) -> String {
    let pick = |fams: &[Family]| -> Vec<&Curve> {
        r.policies
            .iter()
            .filter(|c| fams.contains(&c.policy))
            .collect()
    };
    let rate_based = pick(&[
        Family::Fixed,
        Family::Proportional,
        Family::Sqrt,
        Family::Auto,
    ]);
    let chain_based = pick(&[Family::Fixed, Family::FirstGrow, Family::FirstGrowSr]);
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vodkit simulate</title>\
         <style>body{font-family:sans-serif;max-width:960px;margin:2em auto}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\
         </style></head><body><h1>Prefetch policy simulation</h1>",
    );
    let _ = write!(
        s,
        "<p>{} chains on {} drives over {:.0} s; t_max {:.1} MB/s, s_max {:.1} seeks/s; \
         interval {} s; buffers released {} s after a chain ends; reference rate {} kbps.</p>\
         <p>First-Grow: first sizes open@0 {} B ({}), chunk@0 {} B ({}), other {} B ({}); \
         growth {:.2} ({}, P = {}).</p>",
        r.chains,
        r.drives,
        r.trace_span_s,
        r.capacity.t_max_mb_s,
        r.capacity.s_max_per_s,
        r.interval_s,
        r.release_after_s,
        r.ref_kbps,
        r.first_grow.open_at_zero.bytes,
        r.first_grow.open_at_zero.source,
        r.first_grow.chunk_at_zero.bytes,
        r.first_grow.chunk_at_zero.source,
        r.first_grow.other.bytes,
        r.first_grow.other.source,
        r.first_grow.growth.factor,
        r.first_grow.growth.source,
        r.first_grow.growth.probability
    );
    let _ = write!(s, "<pre>{}</pre>", escape(&summary_text(r)));
    if rate_based.len() > 1 || chain_based.len() <= 1 {
        s.push_str(&dual_axis_svg(
            "Bit-rate-based policies (cf. thesis Fig. 5.22)",
            &rate_based,
        ));
    }
    if chain_based.len() > 1 {
        s.push_str(&dual_axis_svg(
            "Chain-length-based policies (cf. thesis Fig. 5.23)",
            &chain_based,
        ));
    }
    s.push_str(
        "<h2>All points</h2><table><tr><th>policy</th><th>parameter (MiB)</th>\
         <th>max disk util (%)</th><th>max memory (GB)</th><th>feasible</th>\
         <th>wasted (GB)</th></tr>",
    );
    for c in &r.policies {
        for p in &c.points {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.3}</td><td>{}</td><td>{:.3}</td></tr>",
                c.policy.name(),
                p.param_bytes as f64 / MIB,
                p.result.max_disk_util * 100.0,
                p.result.max_memory_bytes as f64 / GB,
                if p.result.feasible { "yes" } else { "no" },
                p.result.wasted_bytes as f64 / GB
            );
        }
    }
    s.push_str("</table></body></html>\n");
    s
}

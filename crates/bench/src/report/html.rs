//! report.html: one self-contained page (no scripts, no external files) with the summary
//! table and inline SVG plots (`vodkit_plot`, the look shared with the trace and simulate
//! reports).

use super::{text, BenchReport, ServerReport};
use std::collections::BTreeMap;
use vodkit_plot::{escape, Axis, Plot, Series};

/// Mean of a per-point figure at each rate, for one server.
fn by_rate(s: &ServerReport, f: impl Fn(&super::PointRecord) -> Option<f64>) -> Vec<(f64, f64)> {
    let mut acc: BTreeMap<u64, (f64, f64, u32)> = BTreeMap::new();
    for p in &s.points {
        if let Some(v) = f(p) {
            let e = acc.entry(p.rate.to_bits()).or_insert((p.rate, 0.0, 0));
            e.1 += v;
            e.2 += 1;
        }
    }
    let mut v: Vec<(f64, f64)> = acc
        .values()
        .map(|(r, sum, n)| (*r, sum / *n as f64))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// A line plot with a dot at every measured point, in the look of every vodkit report
/// (`vodkit_plot`); an explanatory note when there is nothing to draw.
pub fn line_plot(title: &str, x_desc: &str, y_desc: &str, series: &[Series]) -> String {
    Plot {
        title: title.into(),
        x: Axis::linear(x_desc),
        y: Axis::linear(y_desc),
        series: series
            .iter()
            .map(|s| Series {
                markers: true,
                ..s.clone()
            })
            .collect(),
        ..Plot::default()
    }
    .render()
}

fn per_server(
    r: &BenchReport,
    f: impl Fn(&super::PointRecord) -> Option<f64> + Copy,
) -> Vec<Series> {
    r.servers
        .iter()
        .map(|s| Series {
            name: s.sut.clone(),
            points: by_rate(s, f),
            ..Series::default()
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// Each measured server's capacity as one point (x = its place in the list) under a
/// horizontal line at the capacity bound; in % of each server's own bound when the run has
/// no single bound (scenarios with several cells). `None` without any bound.
fn capacity_plot(r: &BenchReport) -> Option<String> {
    let (percent, y_desc, line) = match r.bound_rate {
        Some(b) => (false, r.rate_unit.clone(), b),
        None => (true, "% of bound".to_string(), 100.0),
    };
    let mut series: Vec<Series> = r
        .servers
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let y = if percent {
                s.fraction_of_bound? * 100.0
            } else {
                s.max_failure_free_rate?
            };
            Some(Series {
                name: s.sut.clone(),
                points: vec![(i as f64 + 1.0, y)],
                ..Series::default()
            })
        })
        .collect();
    if series.is_empty() && r.bound_rate.is_none() {
        return None;
    }
    series.push(Series {
        name: "capacity bound (no server can exceed it)".into(),
        points: vec![(0.5, line), (r.servers.len() as f64 + 0.5, line)],
        ..Series::default()
    });
    Some(line_plot(
        "Max failure-free rate against the capacity bound",
        "server (in the order of the table)",
        &y_desc,
        &series,
    ))
}

/// Numeric top-level QoS fields reported by the load generator, in a stable order.
fn qos_fields(r: &BenchReport) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    for s in &r.servers {
        for p in &s.points {
            if let Some(serde_json::Value::Object(m)) = &p.metrics.client.qos {
                names.extend(
                    m.iter()
                        .filter(|(_, v)| v.is_number())
                        .map(|(k, _)| k.clone()),
                );
            }
        }
    }
    names.into_iter().take(4).collect()
}

/// Render the whole page.
pub fn render(r: &BenchReport) -> String {
    let rate = format!("offered rate ({})", r.rate_unit);
    let mut plots = vec![
        line_plot(
            "Client throughput",
            &rate,
            "MB/s",
            &per_server(r, |p| Some(p.metrics.client.throughput_mb_s)),
        ),
        line_plot(
            "Failed sessions",
            &rate,
            "% of sessions",
            &per_server(r, |p| Some(p.metrics.client.failure_fraction * 100.0)),
        ),
        line_plot(
            "Disk throughput",
            &rate,
            "MB/s",
            &per_server(r, |p| p.metrics.disk.map(|d| d.mb_s)),
        ),
        line_plot(
            "Disk time per transaction",
            &rate,
            "ms",
            &per_server(r, |p| p.metrics.disk.map(|d| d.ms_per_transaction)),
        ),
        line_plot(
            "CPU busy (user+system+irq+softirq+steal, all cores; iowait not counted)",
            &rate,
            "%",
            &per_server(r, |p| p.metrics.cpu_busy.map(|c| c * 100.0)),
        ),
        line_plot(
            "CPU iowait (all cores)",
            &rate,
            "%",
            &per_server(r, |p| p.metrics.cpu_iowait.map(|c| c * 100.0)),
        ),
        line_plot(
            "Server CPU (its processes and their workers)",
            &rate,
            "cores",
            &per_server(r, |p| p.metrics.cores.server),
        ),
    ];
    if let Some(p) = capacity_plot(r) {
        plots.insert(0, p);
    }
    for field in qos_fields(r) {
        let f = field.clone();
        let series: Vec<Series> = r
            .servers
            .iter()
            .map(|s| Series {
                name: s.sut.clone(),
                points: by_rate(s, |p| p.metrics.client.qos.as_ref()?.get(&f)?.as_f64()),
                ..Series::default()
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        plots.push(line_plot(&format!("QoS: {field}"), &rate, &field, &series));
    }
    // Adaptive players (`--player`): the delivered bit rate falls before stalls appear.
    for (key, title, unit) in [
        (
            "mean_bitrate_kbps",
            "Players: mean bit rate delivered",
            "kbit/s",
        ),
        ("stalls", "Players: stalls", "stalls"),
    ] {
        let series: Vec<Series> = r
            .servers
            .iter()
            .map(|s| Series {
                name: s.sut.clone(),
                points: by_rate(s, |p| {
                    p.metrics
                        .client
                        .qos
                        .as_ref()?
                        .get("abr")?
                        .get(key)?
                        .as_f64()
                }),
                ..Series::default()
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            plots.push(line_plot(title, &rate, unit, &series));
        }
    }
    let prefetch: Vec<Series> = r
        .servers
        .iter()
        .filter_map(|s| {
            let p = s
                .points
                .iter()
                .rev()
                .find(|p| !p.metrics.prefetch_size.is_empty())?;
            let pts = p
                .metrics
                .prefetch_size
                .iter()
                .map(|(t, b)| (*t, *b as f64 / 1048576.0))
                .collect();
            Some(Series {
                name: format!("{} at {}", s.sut, p.rate),
                points: pts,
                ..Series::default()
            })
        })
        .collect();
    plots.push(if prefetch.is_empty() {
        "<p class=\"empty\">Prefetch size over time: no server reported it (only adaptive policies such as \
         <code>auto</code> do).</p>"
            .to_string()
    } else {
        line_plot("Prefetch size over time", "seconds", "MiB", &prefetch)
    });

    let md_table = text::table(r);
    let mut html = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vodkit bench report</title>\n\
         <style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}\
         pre{background:#f5f5f5;padding:1em;overflow-x:auto}.empty{color:#777}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}</style>\n\
         </head><body>\n<h1>vodkit bench report</h1>\n",
    );
    if let Some(s) = &r.scenario {
        html += &format!(
            "<h2>Scenario {}</h2>\n<p>Mirrors {}.</p>\n<p>Finding checked: {}</p>\n<p><b>Verdict:</b> {}</p>\n",
            escape(&s.name),
            escape(&s.mirrors),
            escape(&s.finding),
            escape(&s.verdict)
        );
    }
    html += &format!(
        "<table><tr><th>workload</th><td>{}</td></tr><tr><th>testbed</th><td>{}</td></tr>\
         <tr><th>criterion</th><td>{}</td></tr><tr><th>repeats</th><td>{}</td></tr></table>\n",
        escape(&r.workload),
        escape(&r.testbed),
        escape(&r.criterion),
        r.repeat
    );
    html += &format!(
        "<h2>Summary</h2>\n<pre>{}</pre>\n<h2>Plots</h2>\n",
        escape(&md_table)
    );
    for p in plots {
        html += &p;
        html += "\n";
    }
    if !r.notes.is_empty() {
        html += "<h2>Notes</h2>\n<ul>\n";
        for n in &r.notes {
            html += &format!("<li>{}</li>\n", escape(n));
        }
        html += "</ul>\n";
    }
    html += "</body></html>\n";
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_is_inline_svg_with_legend() {
        let svg = line_plot(
            "Client throughput",
            "rate",
            "MB/s",
            &[Series {
                name: "nginx".into(),
                points: vec![(1.0, 2.0), (2.0, 4.0)],
                ..Series::default()
            }],
        );
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("nginx"));
    }

    #[test]
    fn empty_plot_says_so() {
        let s = line_plot("Disk throughput", "rate", "MB/s", &[]);
        assert!(s.contains("no data measured"));
    }
}

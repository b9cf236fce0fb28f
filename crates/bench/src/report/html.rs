//! report.html: one self-contained page (no scripts, no external files) with the summary
//! table and inline SVG plots (`vodkit_plot`, the look shared with the trace and simulate
//! reports).

use super::{text, BenchReport, ServerReport};
use crate::search::Criterion;
use std::collections::BTreeMap;
use vodkit_plot::{escape, Axis, Bar, Bars, Plot, Series};

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

/// Each server's capacity as a horizontal bar with the capacity bound drawn across; in %
/// of each server's own bound when the run has no single bound (scenarios with several
/// cells). `None` when no server has a capacity and there is no bound.
fn capacity_plot(r: &BenchReport) -> Option<String> {
    let percent = r.bound_rate.is_none();
    if r.servers.iter().all(|s| s.max_failure_free_rate.is_none()) && percent {
        return None;
    }
    let bars = r
        .servers
        .iter()
        .map(|s| {
            let value = if percent {
                s.fraction_of_bound.map(|f| f * 100.0)
            } else {
                s.max_failure_free_rate
            };
            let note = match s.max_failure_free_rate {
                Some(rate) => {
                    let mut n = format!("{rate:.2}");
                    if let Some(f) = s.fraction_of_bound {
                        n += &format!(" ({:.0} % of bound)", f * 100.0);
                    }
                    if s.shortfall.is_some() || s.hit_ceiling {
                        n += " or more";
                    }
                    n
                }
                None if s.status == super::MEASURED => "no tried rate passed".into(),
                None => s.status.clone(),
            };
            Bar {
                label: s.sut.clone(),
                value,
                note,
                color: None,
            }
        })
        .collect();
    let rules = match r.bound_rate {
        Some(b) => vec![(
            b,
            format!("capacity bound (no server can exceed it): {b:.2}"),
        )],
        None => vec![(100.0, "each server's capacity bound".to_string())],
    };
    let x = if percent {
        "% of the capacity bound".to_string()
    } else {
        format!("max failure-free rate ({})", r.rate_unit)
    };
    Some(
        Bars {
            title: "Capacity: max failure-free rate".into(),
            x: Axis::linear(x),
            bars,
            rules,
        }
        .render(),
    )
}

/// The figure the criterion judges each point on, against the offered rate, with the
/// criterion's limit drawn across, and one sentence saying how to read it. `None` when the
/// criterion cannot be read.
fn criterion_plot(r: &BenchReport) -> Option<(String, String)> {
    type Figure = fn(&super::PointRecord) -> Option<f64>;
    let criterion: Criterion = r.criterion.parse().ok()?;
    let (title, unit, figure, limit, rule, how): (_, _, Figure, _, _, _) = match criterion {
        Criterion::Pace { max_lag_s } => (
            format!("What decided ({criterion}): how late sessions ended"),
            "lag p95 (s)",
            |p| p.metrics.observation().lag_p95_s,
            max_lag_s,
            format!("limit {max_lag_s} s"),
            format!(
                "A point passes when 95% of its sessions ended at most {max_lag_s} s behind                  their own pace (at or below the line) and no session failed and no request                  timed out."
            ),
        ),
        Criterion::Quality {
            min_acceptable_fraction,
        } => (
            format!("What decided ({criterion}): sessions that played without a stall"),
            "unstalled sessions (%)",
            |p| p.metrics.observation().acceptable_fraction.map(|a| a * 100.0),
            min_acceptable_fraction * 100.0,
            format!("at least {:.1} %", min_acceptable_fraction * 100.0),
            format!(
                "A point passes when at least {:.1}% of the judged sessions completed and                  played without a stall (at or above the line) and no session failed and no                  request timed out.",
                min_acceptable_fraction * 100.0
            ),
        ),
        Criterion::Strict => (
            format!("What decided ({criterion}): failures"),
            "failed sessions + timed-out requests",
            |p| {
                let o = p.metrics.observation();
                Some((o.failed_sessions + o.timed_out_requests) as f64)
            },
            0.0,
            "none allowed".to_string(),
            "A point passes when no session failed and no request timed out.".to_string(),
        ),
        Criterion::Sessions {
            max_failed_fraction,
        } => (
            format!("What decided ({criterion}): failed sessions"),
            "failed sessions (%)",
            |p| Some(p.metrics.observation().failure_fraction * 100.0),
            max_failed_fraction * 100.0,
            format!("below {} %", max_failed_fraction * 100.0),
            format!(
                "A point passes when fewer than {}% of its sessions failed (below the line).",
                max_failed_fraction * 100.0
            ),
        ),
    };
    let plot = Plot {
        title,
        x: Axis::linear(format!("offered rate ({})", r.rate_unit)),
        y: Axis::linear(unit),
        series: judged(r, figure),
        rules: vec![(limit, rule)],
        ..Plot::default()
    };
    let how = format!("{how} Filled dots passed, open dots did not.");
    Some((plot.render(), how))
}

/// One series per server of the criterion's figure, with an open dot where no point at
/// that rate passed.
fn judged(r: &BenchReport, figure: fn(&super::PointRecord) -> Option<f64>) -> Vec<Series> {
    r.servers
        .iter()
        .map(|s| {
            let points = by_rate(s, figure);
            let open = points
                .iter()
                .enumerate()
                .filter(|(_, (rate, _))| !s.points.iter().any(|p| p.rate == *rate && p.passed))
                .map(|(i, _)| i)
                .collect();
            Series {
                name: s.sut.clone(),
                points,
                markers: true,
                open,
                ..Series::default()
            }
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// Bytes delivered to the clients per byte read from the disk, at each point: above 1 the
/// page cache served part of the load, below 1 the server read more than it sent (prefetch
/// evicted before use, or read-ahead beyond what viewers watched).
fn delivered_per_read(p: &super::PointRecord) -> Option<f64> {
    let disk = p.metrics.disk?;
    (disk.mb_s > 0.0).then(|| p.metrics.client.throughput_mb_s / disk.mb_s)
}

/// The summary as an HTML table (the terminal table's columns), with the bound, the
/// reasons of servers not measured, players, comparisons and warnings below it.
fn summary(r: &BenchReport) -> String {
    let mut h = String::new();
    h += &format!(
        "<p>Max failure-free rate in {} (criterion {}).",
        escape(&r.rate_unit),
        escape(&r.criterion)
    );
    if let Some(b) = text::bound_line(r) {
        h += &format!(" The capacity {}.", escape(&b));
    }
    h += "</p>\n<div class=\"scroll\"><table class=\"summary\">\n<thead><tr>";
    for c in text::HEADER {
        h += &format!("<th>{}</th>", escape(c));
    }
    h += "</tr></thead>\n<tbody>\n";
    for s in &r.servers {
        h += "<tr>";
        for (i, c) in text::row(s).iter().enumerate() {
            let tag = if i == 0 { "th scope=\"row\"" } else { "td" };
            h += &format!("<{tag}>{}</{}>", escape(c), &tag[..2]);
        }
        h += "</tr>\n";
    }
    h += "</tbody></table></div>\n";
    let mut items = Vec::new();
    for s in &r.servers {
        if let Some(why) = s.reason.as_deref().filter(|w| !w.is_empty()) {
            items.push(format!("<b>{}</b>: {}", escape(&s.sut), escape(why)));
        }
        if let Some(line) = text::abr(s.qos.as_ref()) {
            items.push(format!(
                "<b>{}</b> players at capacity: {}",
                escape(&s.sut),
                escape(&line)
            ));
        }
    }
    for c in &r.comparisons {
        let ratio = c.ratio.map_or("–".to_string(), |x| format!("{x:.2}"));
        items.push(format!(
            "<b>{}</b>: {} — {}",
            escape(&c.what),
            ratio,
            escape(&c.note)
        ));
    }
    for (sut, why) in super::above_bound(r) {
        items.push(format!("<b>warning {}</b>: {}", escape(&sut), escape(&why)));
    }
    if !items.is_empty() {
        h += "<ul>\n";
        for i in items {
            h += &format!("<li>{i}</li>\n");
        }
        h += "</ul>\n";
    }
    h
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
    let disk = [
        line_plot(
            "Disk throughput",
            &rate,
            "MB/s read from the disk",
            &per_server(r, |p| p.metrics.disk.map(|d| d.mb_s)),
        ),
        line_plot(
            "Bytes delivered per byte read from the disk",
            &rate,
            "client MB/s ÷ disk MB/s",
            &per_server(r, delivered_per_read),
        ),
    ];
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

    let mut html = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>vodkit bench report</title>\n\
         <style>body{font-family:sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;line-height:1.4}\
         h1{font-size:1.6em}svg{display:block;max-width:100%;height:auto;margin:1em 0}\
         .empty{color:#777}.how{color:#444;font-size:.95em;margin-top:-.5em}\
         .scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.9em}\
         td,th{border:1px solid #ccc;padding:3px 8px}td{text-align:right;white-space:nowrap}\
         th{background:#f5f5f5;text-align:left}th[scope=row]{position:sticky;left:0}table.settings td{text-align:left;white-space:normal}</style>\n\
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
        "<table class=\"settings\"><tr><th>workload</th><td>{}</td></tr><tr><th>testbed</th><td>{}</td></tr>\
         <tr><th>criterion</th><td>{}</td></tr><tr><th>repeats</th><td>{}</td></tr></table>\n",
        escape(&r.workload),
        escape(&r.testbed),
        escape(&r.criterion),
        r.repeat
    );
    html += "<h2>Summary</h2>\n";
    html += &summary(r);
    html += "<h2>What decided</h2>\n";
    if let Some(p) = capacity_plot(r) {
        html += &p;
        html += "\n";
    }
    if let Some((p, how)) = criterion_plot(r) {
        html += &p;
        html += &format!("\n<p class=\"how\">{}</p>\n", escape(&how));
    }
    html += "<h2>Disk</h2>\n";
    for p in disk {
        html += &p;
        html += "\n";
    }
    html += "<h2>More plots</h2>\n";
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
    use crate::point::{ClientMetrics, DiskMetrics, PointMetrics};
    use crate::report::{PointRecord, MEASURED, SKIPPED};

    /// A point: offered rate, its lag p95, client and disk MB/s, pass.
    fn point(rate: f64, lag: f64, client: f64, disk: f64, passed: bool) -> PointRecord {
        PointRecord {
            rate,
            repeat: 0,
            passed,
            short: false,
            metrics: PointMetrics {
                client: ClientMetrics {
                    sessions: (rate * 25.0) as u64,
                    throughput_mb_s: client,
                    lag_p95_s: Some(lag),
                    ..ClientMetrics::default()
                },
                disk: Some(DiskMetrics {
                    mb_s: disk,
                    ..DiskMetrics::default()
                }),
                ..PointMetrics::default()
            },
        }
    }

    fn server(sut: &str, capacity: Option<f64>, points: Vec<PointRecord>) -> ServerReport {
        let s = crate::sut::parse_one(sut).unwrap();
        let mut r = ServerReport::not_measured(&s, MEASURED, String::new());
        r.reason = None;
        r.max_failure_free_rate = capacity;
        r.per_repeat = vec![capacity];
        r.throughput_mb_s = capacity.map(|c| c * 5.0);
        r.disk_mb_s = capacity.map(|c| c * 3.1);
        r.disk_util = capacity.map(|_| 0.93);
        r.points = points;
        r
    }

    /// A demo-like report: two servers measured under `pace:2s` against a bound, one skipped.
    pub(crate) fn demo_like() -> BenchReport {
        let mut r = crate::report::new_report(
            "youtube-2011 scaled x0.1",
            "hdd:wd-red",
            Some(256 << 20),
            "pace:2s",
            &crate::search::SearchPlan::failure_free_around(1.0),
            1,
        );
        r.servers = vec![
            server(
                "vodkit:asap:auto",
                Some(15.06),
                vec![
                    point(5.02, 0.4, 25.0, 18.0, true),
                    point(10.04, 0.7, 50.0, 33.0, true),
                    point(15.06, 1.6, 74.0, 47.0, true),
                    point(20.08, 6.5, 80.0, 52.0, false),
                ],
            ),
            server(
                "nginx",
                Some(5.02),
                vec![
                    point(5.02, 1.1, 25.0, 31.0, true),
                    point(10.04, 9.0, 41.0, 44.0, false),
                ],
            ),
            ServerReport::not_measured(
                &crate::sut::parse_one("apache").unwrap(),
                SKIPPED,
                crate::setup::missing_peer(&crate::setup::APACHE),
            ),
        ];
        r.bound_rate = Some(18.42);
        crate::report::set_fractions(&mut r.servers, 18.42);
        r
    }

    #[test]
    fn the_page_shows_what_decided() {
        let page = render(&demo_like());
        // The summary is a table, with a row per server.
        assert!(!page.contains("<pre>"), "no preformatted summary");
        assert!(page.contains("<table class=\"summary\">"));
        assert!(page.contains("<th scope=\"row\">nginx</th>"));
        assert!(
            page.contains("apt-get install -y apache2"),
            "skip reason listed"
        );
        // Capacity as bars with the bound across, notes at the bars.
        assert!(page.contains("capacity bound (no server can exceed it): 18.42"));
        assert!(page.contains("15.06 (82 % of bound)"), "vodkit's bar note");
        // The pace criterion's own figure and its limit.
        assert!(page.contains("lag p95 (s)") && page.contains("limit 2 s"));
        assert!(page.contains("95% of its sessions ended at most 2 s behind"));
        assert!(page.contains("open dots did not"));
        assert_eq!(
            vodkit_plot::open_dots(&page),
            2,
            "the two failed rates, one per server"
        );
        // Disk and delivered bytes per byte read.
        assert!(page.contains("Bytes delivered per byte read from the disk"));
        assert!(
            page.contains("name=\"viewport\""),
            "phones get the page's width"
        );
    }

    #[test]
    fn each_criterion_plots_its_own_figure() {
        let mut r = demo_like();
        for (criterion, unit, rule) in [
            ("quality:95%", "unstalled sessions (%)", "at least 95.0 %"),
            (
                "strict",
                "failed sessions + timed-out requests",
                "none allowed",
            ),
            ("sessions:0.3%", "failed sessions (%)", "below 0.3 %"),
        ] {
            r.criterion = criterion.into();
            for s in &mut r.servers {
                for p in &mut s.points {
                    p.metrics.client.acceptable_fraction = Some(0.97);
                }
            }
            let (svg, how) = criterion_plot(&r).unwrap();
            assert!(
                svg.contains(unit) && svg.contains(rule),
                "{criterion}: {svg}"
            );
            assert!(how.starts_with("A point passes"), "{how}");
        }
        r.criterion = "nonsense".into();
        assert!(criterion_plot(&r).is_none());
    }

    #[test]
    fn delivered_per_read_is_client_over_disk() {
        let p = point(5.0, 0.1, 30.0, 20.0, true);
        assert_eq!(delivered_per_read(&p), Some(1.5));
        let mut idle = p.clone();
        idle.metrics.disk = Some(DiskMetrics::default());
        assert_eq!(delivered_per_read(&idle), None, "no reads: no ratio");
    }

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

//! The HTML report: every table and figure of the characterization on one page, plots as
//! inline SVG, no external assets.

use std::fmt::Write as _;

use crate::analyze::Analysis;
use crate::phase::AssocMatrix;
use vodkit_plot::{escape as esc, Axis, Plot, Series};

/// A table with `head` over `rows`.
fn table(head: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut s = String::from("<table><tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let _ = write!(s, "<td>{}</td>", esc(&c));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

/// `[x, y]` pairs as a plot's points.
fn points(v: &[[f64; 2]]) -> Vec<(f64, f64)> {
    v.iter().map(|p| (p[0], p[1])).collect()
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn matrix(title: &str, m: &AssocMatrix) -> String {
    if m.stable_kbps.is_empty() {
        return format!("<h3>{}</h3><p>no data</p>", esc(title));
    }
    let mut head = vec!["probed \\ stable kbit/s".to_string()];
    head.extend(m.stable_kbps.iter().map(|k| k.to_string()));
    let rows = m.probed_kbps.iter().zip(&m.percent).map(|(r, vals)| {
        let mut row = vec![r.to_string()];
        row.extend(vals.iter().map(|v| {
            if *v >= 0.5 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        }));
        row
    });
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    format!("<h3>{}</h3>{}", esc(title), table(&head, rows))
}

/// A plot of shares of sessions over positions in a title (Figs. 5.6, 5.7): each series'
/// value `i` is drawn at the middle of its percent bin, `i + 0.5`.
fn positions_plot(title: &str, series: &[(&str, &Vec<f64>)]) -> String {
    let bins = |v: &Vec<f64>| {
        v.iter()
            .enumerate()
            .map(|(i, y)| (i as f64 + 0.5, *y))
            .collect::<Vec<_>>()
    };
    plot(
        title,
        "position in title (%)",
        "% of sessions",
        false,
        false,
        series.iter().map(|(name, v)| (*name, bins(v))).collect(),
    )
}

fn plot(
    title: &str,
    x: &str,
    y: &str,
    log_x: bool,
    log_y: bool,
    series: Vec<(&str, Vec<(f64, f64)>)>,
) -> String {
    let axis = |label: &str, log: bool| Axis {
        label: label.into(),
        log,
    };
    Plot {
        title: title.into(),
        x: axis(x, log_x),
        y: axis(y, log_y),
        series: series.into_iter().map(|(n, p)| Series::new(n, p)).collect(),
        ..Plot::default()
    }
    .render()
}

/// Render the whole report.
pub fn html(a: &Analysis) -> String {
    let c = &a.chains;
    let p = &a.phases;
    let s = &a.sessions;
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>vodkit trace report</title>\
         <style>body{font-family:sans-serif;max-width:1000px;margin:auto}table{border-collapse:collapse;margin:8px 0}\
         td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}h2{margin-top:28px}</style></head><body>\
         <h1>vodkit trace report</h1>",
    );
    let _ = write!(h, "<p>{}</p>", esc(&a.read.describe()));
    let _ = write!(
        h,
        "<p>{} sessions, {} chains, {} requests, {:.2} GB in chains; {} sessions still active at the end of the log.</p>",
        s.sessions,
        c.chains,
        c.requests,
        c.bytes as f64 / 1e9,
        a.open_at_end
    );

    h.push_str("<h2>Requests by type (Table 5.2)</h2>");
    h.push_str(&table(
        &["kind", "media", "requests", "%", "GB", "%"],
        s.table_5_2.iter().map(|r| {
            vec![
                r.kind.clone(),
                r.media.clone(),
                r.requests.to_string(),
                f1(r.requests_pct),
                format!("{:.2}", r.gb),
                f1(r.bytes_pct),
            ]
        }),
    ));

    h.push_str("<h2>Parallel connections per file (Table 5.3)</h2>");
    let row: Vec<String> = s.table_5_3_pct.iter().map(|v| f1(*v)).collect();
    h.push_str(&table(&["1", "2", "3", "4", "5", "6+"], [row]));

    h.push_str("<h2>Chains (Table 5.4)</h2>");
    h.push_str(&table(
        &[
            "kind",
            "media",
            "% chains",
            "requests/chain",
            "MB/chain",
            "title s/chain",
        ],
        c.table_5_4.iter().map(|r| {
            vec![
                r.kind.clone(),
                r.media.clone(),
                f1(r.share_pct),
                f1(r.requests_per_chain),
                f1(r.mb_per_chain),
                r.title_s_per_chain.map(f1).unwrap_or_default(),
            ]
        }),
    ));
    let _ = write!(
        h,
        "<p>{:.1}% of chains are 1 MB or shorter; {:.1}% of bytes are in chains longer than 10 MB; {:.1}% of chains start at offset 0.</p>",
        c.chains_le_1mb_pct, c.bytes_in_chains_gt_10mb_pct, c.zero_offset.share_pct
    );
    h.push_str(&plot(
        "Chain lengths (Fig. 5.11)",
        "chain length (bytes)",
        "cumulative %",
        true,
        false,
        vec![
            (
                "chains",
                c.length_cdf
                    .iter()
                    .map(|p| (p.bytes, p.chains_pct))
                    .collect(),
            ),
            (
                "bytes requested",
                c.length_cdf
                    .iter()
                    .map(|p| (p.bytes, p.bytes_pct))
                    .collect(),
            ),
        ],
    ));
    h.push_str(&plot(
        "Chains by start offset (Fig. 5.12)",
        "chain length (bytes)",
        "cumulative %",
        true,
        false,
        vec![
            ("open-ended at 0", points(&c.zero_offset.open.cdf)),
            ("chunk at 0", points(&c.zero_offset.chunk.cdf)),
            ("other offsets", points(&c.zero_offset.nonzero.cdf)),
        ],
    ));
    let mut ccdf_series = vec![("measured", points(&c.ccdf))];
    let fits: Vec<(String, Vec<(f64, f64)>)> = c
        .fit
        .segments
        .iter()
        .map(|seg| {
            let pts = (0..=10)
                .map(|i| {
                    let x = seg.lo * (seg.hi / seg.lo).powf(f64::from(i) / 10.0);
                    (x, 100.0 * seg.a * x.powf(-seg.c))
                })
                .collect();
            (format!("fit c={:.3}", seg.c), pts)
        })
        .collect();
    for (n, pts) in &fits {
        ccdf_series.push((n.as_str(), pts.clone()));
    }
    h.push_str(&plot(
        "Longer chains (Fig. 5.13)",
        "chain length (bytes)",
        "% of chains longer",
        true,
        true,
        ccdf_series,
    ));
    let rows = c.survival.iter().flat_map(|sv| {
        sv.segments.iter().map(move |seg| {
            vec![
                format!("{}", sv.p),
                format!("{:.3e}", seg.lo),
                format!("{:.3e}", seg.hi),
                format!("{:.3}", seg.c),
                format!("{:.2}", seg.growth),
            ]
        })
    });
    h.push_str("<h3>Survival distance d = (P<sup>-1/c</sup> - 1) x</h3>");
    h.push_str(&table(&["P", "from bytes", "to bytes", "c", "d / x"], rows));

    h.push_str("<h2>Phases (thesis 5.4)</h2>");
    let _ = write!(
        h,
        "<p>Time: transient {:.1}%, stable {:.1}%, inactive {:.1}%. Bytes (non-audio): transient {:.1}%, stable {:.1}%. \
         {:.1}% of sessions start with a transient phase; {:.1}% have a stable phase; {:.1}% last 40 s or less. \
         Mean stable phase {:.0} s.</p>",
        p.time_pct.transient,
        p.time_pct.stable,
        p.time_pct.inactive,
        p.bytes_pct.transient,
        p.bytes_pct.stable,
        p.sessions_starting_transient_pct,
        p.sessions_with_stable_pct,
        p.sessions_le_short_pct,
        p.mean_stable_s
    );
    h.push_str(&matrix(
        "Bit rates probed in the first transient phase (Fig. 5.17), % of title time",
        &p.first_transient,
    ));
    h.push_str(&matrix(
        "Successor transient phases, stable rate went down (Fig. 5.18)",
        &p.successor_down,
    ));
    let tr = |v: &Vec<crate::phase::TransferPoint>| {
        v.iter()
            .map(|t| (t.duration_s as f64, t.ratio))
            .collect::<Vec<_>>()
    };
    h.push_str(&plot(
        "Transfer ratio by chain duration (Fig. 5.20)",
        "chain duration (s)",
        "title time / duration",
        true,
        false,
        vec![
            ("open-ended", tr(&p.transfer_ratio_open)),
            ("chunk", tr(&p.transfer_ratio_chunk)),
        ],
    ));

    h.push_str("<h2>Sessions (thesis 5.2.2)</h2>");
    h.push_str(&plot(
        "Fraction of title downloaded (Fig. 5.5)",
        "% of title",
        "% of sessions downloading more",
        false,
        false,
        vec![
            ("audio", points(&s.fraction_downloaded_ccdf.audio)),
            ("video", points(&s.fraction_downloaded_ccdf.video)),
            ("combined", points(&s.fraction_downloaded_ccdf.combined)),
        ],
    ));
    h.push_str(&positions_plot(
        "Portions of titles accessed (Fig. 5.6)",
        &[
            ("audio", &s.portions_accessed_pct.audio),
            ("video/combined", &s.portions_accessed_pct.video_or_combined),
        ],
    ));
    h.push_str(&positions_plot(
        "Start, end and pause positions (Fig. 5.7)",
        &[
            ("start", &s.positions_pct.start),
            ("end", &s.positions_pct.end),
            ("pause", &s.positions_pct.pause),
        ],
    ));
    h.push_str("<h2>Average chunk request size (Fig. 5.10)</h2>");
    h.push_str(&table(
        &["media", "kbit/s", "requests", "mean bytes", "mean title s"],
        s.chunk_sizes.iter().map(|r| {
            vec![
                r.media.clone(),
                r.bitrate_kbps.to_string(),
                r.requests.to_string(),
                format!("{:.0}", r.mean_bytes),
                r.mean_title_s
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_default(),
            ]
        }),
    ));
    h.push_str("</body></html>\n");
    h
}

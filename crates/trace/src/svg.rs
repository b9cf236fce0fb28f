//! Minimal inline-SVG line plots for the HTML report (linear or log axes, a legend).

use std::fmt::Write as _;

const W: f64 = 640.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Plot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
    if log {
        (lo.floor() as i64..=hi.ceil() as i64)
            .map(|e| e as f64)
            .filter(|e| *e >= lo - 1e-9 && *e <= hi + 1e-9)
            .collect()
    } else {
        let span = (hi - lo).max(1e-12);
        let raw = span / 5.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| span / s <= 6.0)
            .unwrap_or(10.0 * mag);
        let mut t = (lo / step).ceil() * step;
        let mut out = Vec::new();
        while t <= hi + 1e-9 {
            out.push(t);
            t += step;
        }
        out
    }
}

fn label(v: f64, log: bool) -> String {
    if log {
        let x = 10f64.powf(v);
        if !(1e-2..1e4).contains(&x) {
            format!("1e{}", v.round() as i64)
        } else {
            format!("{x}")
        }
    } else if v.abs() >= 1e5 {
        format!("{v:.1e}")
    } else if v.fract().abs() < 1e-9 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}

impl Plot {
    pub fn render(&self) -> String {
        let tx = |x: f64| if self.log_x { x.log10() } else { x };
        let ty = |y: f64| if self.log_y { y.log10() } else { y };
        let pts: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .filter(|(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!self.log_x || *x > 0.0)
                            && (!self.log_y || *y > 0.0)
                    })
                    .map(|&(x, y)| (tx(x), ty(y)))
                    .collect()
            })
            .collect();
        let all: Vec<&(f64, f64)> = pts.iter().flatten().collect();
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
        );
        let _ = write!(
            svg,
            r#"<text x="{}" y="18" text-anchor="middle" font-size="13">{}</text>"#,
            W / 2.0,
            escape(&self.title)
        );
        if all.is_empty() {
            let _ = write!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
                W / 2.0,
                H / 2.0
            );
            return svg;
        }
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for p in &all {
            x0 = x0.min(p.0);
            x1 = x1.max(p.0);
            y0 = y0.min(p.1);
            y1 = y1.max(p.1);
        }
        if !self.log_y {
            y0 = y0.min(0.0);
        }
        if x1 - x0 < 1e-12 {
            x1 = x0 + 1.0;
        }
        if y1 - y0 < 1e-12 {
            y1 = y0 + 1.0;
        }
        let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
        let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
        let _ = write!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
            W - LEFT - RIGHT,
            H - TOP - BOTTOM
        );
        for t in ticks(x0, x1, self.log_x) {
            let x = px(t);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{TOP}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                H - BOTTOM,
                H - BOTTOM + 14.0,
                label(t, self.log_x)
            );
        }
        for t in ticks(y0, y1, self.log_y) {
            let y = py(t);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                W - RIGHT,
                LEFT - 4.0,
                y + 4.0,
                label(t, self.log_y)
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (LEFT + W - RIGHT) / 2.0,
            H - 12.0,
            escape(&self.x_label)
        );
        let _ = write!(
            svg,
            r#"<text x="14" y="{}" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>"#,
            H / 2.0,
            H / 2.0,
            escape(&self.y_label)
        );
        for (i, (s, p)) in self.series.iter().zip(&pts).enumerate() {
            let color = COLORS[i % COLORS.len()];
            let path: Vec<String> = p
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{}"/>"#,
                path.join(" ")
            );
            let ly = TOP + 14.0 + 14.0 * i as f64;
            let _ = write!(
                svg,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                W - RIGHT - 150.0,
                W - RIGHT - 130.0,
                W - RIGHT - 125.0,
                ly + 4.0,
                escape(&s.name)
            );
        }
        svg.push_str("</svg>");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_series_and_survives_empty_data() {
        let p = Plot {
            title: "t<1>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            log_y: false,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1.0, 1.0), (100.0, 3.0), (0.0, 2.0)],
            }],
        };
        let s = p.render();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains("t&lt;1&gt;"));
        assert_eq!(s.matches("<polyline").count(), 1);
        let empty = Plot {
            series: vec![],
            ..p
        }
        .render();
        assert!(empty.contains("no data"));
    }
}

//! One look for every report's plots (`vodkit bench`, `vodkit trace`, `vodkit simulate`):
//! inline SVG line charts drawn with plotters' SVG backend, and the one HTML escaper.
//!
//! A [`Plot`] has a title, an x axis, a left y axis and optionally a right one (the
//! simulator's memory beside utilization); each axis may be logarithmic. Series take the
//! palette's colours in order unless they name one, so one thing keeps its colour across
//! plots; a series may be dashed and may mark its points. A plot without data renders as a
//! one-line note instead of an empty frame. [`Bars`] is the horizontal bar chart (one bar per
//! labelled thing, e.g. each server's capacity, with reference rules drawn across).

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The colour of reference rules (limits, bounds): dark, dashed, unlike any series.
pub const RULE: RGBColor = RGBColor(40, 40, 40);

/// Font sizes (px): the title, and tick labels, notes and legends (axis titles one more);
/// large enough to read when a phone shows a plot at half its size.
const CAPTION_PX: u32 = 19;
const LABEL_PX: u32 = 14;

/// Width and height of every plot, in pixels.
pub const SIZE: (u32, u32) = (720, 400);

/// The colours of series, in order.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Text made safe for HTML and SVG, in element content and in quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// How many dots in `svg` (one rendered plot, or a page holding several) are drawn open:
/// the points series list in [`Series::open`].
pub fn open_dots(svg: &str) -> usize {
    svg.split("<circle")
        .skip(1)
        .filter(|c| c.split('>').next().unwrap_or("").contains("fill=\"none\""))
        .count()
}

/// One line of a plot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Index into [`PALETTE`] (modulo its length); `None`: the series' place in the plot.
    pub color: Option<usize>,
    pub dashed: bool,
    /// Draw a dot at every point.
    pub markers: bool,
    /// Indices of points whose dot is drawn open (e.g. points that failed a criterion).
    pub open: Vec<usize>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            ..Series::default()
        }
    }
}

/// An axis: its label and whether it is logarithmic (points at or below zero are left
/// out of a logarithmic axis).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Axis {
    pub label: String,
    pub log: bool,
}

impl Axis {
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            log: false,
        }
    }

    pub fn log(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            log: true,
        }
    }

    fn to_plot(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        if self.log {
            (v > 0.0).then(|| v.log10())
        } else {
            Some(v)
        }
    }

    fn tick_label(&self, v: f64) -> String {
        let x = if self.log { 10f64.powf(v) } else { v };
        if x != 0.0 && !(1e-2..1e5).contains(&x.abs()) {
            format!("{x:.0e}")
        } else if (x - x.round()).abs() < 1e-9 {
            format!("{}", x.round() as i64)
        } else if x.abs() >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        }
    }
}

/// A line chart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plot {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    /// A second y axis on the right with its own series.
    pub right: Option<(Axis, Vec<Series>)>,
    /// Horizontal reference lines on the left axis (value, label), e.g. 100 % utilization.
    pub rules: Vec<(f64, String)>,
}

/// The range of plotted values, padded when empty or flat and by `pad_top` (a share of the
/// span) above; linear y ranges start at zero.
fn range(values: impl Iterator<Item = f64>, from_zero: bool, pad_top: f64) -> (f64, f64) {
    let (mut lo, mut hi) = values.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-12 {
        if from_zero && lo == 0.0 {
            // All zero (e.g. no failures): an axis from 0 up, not one around it.
            hi = 1.0;
        } else {
            lo -= 0.5;
            hi += 0.5;
        }
    }
    hi += (hi - lo) * pad_top;
    (lo, hi)
}

/// Points of `s` in plot coordinates.
fn mapped(s: &Series, x: &Axis, y: &Axis) -> Vec<(f64, f64)> {
    s.points
        .iter()
        .filter_map(|&(a, b)| Some((x.to_plot(a)?, y.to_plot(b)?)))
        .collect()
}

/// For each point [`mapped`] keeps, whether its dot is drawn open.
fn open_flags(s: &Series, x: &Axis, y: &Axis) -> Vec<bool> {
    s.points
        .iter()
        .enumerate()
        .filter(|(_, &(a, b))| x.to_plot(a).is_some() && y.to_plot(b).is_some())
        .map(|(i, _)| s.open.contains(&i))
        .collect()
}

/// A series ready to draw: its points in left-axis coordinates and which dots are open.
type Line<'a> = (&'a Series, Vec<(f64, f64)>, Vec<bool>);

impl Plot {
    /// Room above the data for the legend in the upper left corner: a share of the y span
    /// growing with its lines, so the lines rarely run under it.
    fn headroom(&self) -> f64 {
        let lines =
            self.series.len() + self.rules.len() + self.right.as_ref().map_or(0, |(_, s)| s.len());
        0.08 + 0.05 * lines as f64
    }

    /// The chart as an inline `<svg>` element, or a `<p class="empty">` note when no
    /// series has a point to draw.
    pub fn render(&self) -> String {
        let left: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|s| mapped(s, &self.x, &self.y))
            .collect();
        let right: Vec<Vec<(f64, f64)>> = self
            .right
            .iter()
            .flat_map(|(axis, series)| series.iter().map(move |s| mapped(s, &self.x, axis)))
            .collect();
        let xs = left.iter().chain(&right).flatten().map(|p| p.0);
        if xs.clone().next().is_none() {
            return format!(
                "<p class=\"empty\">{}: no data measured.</p>",
                escape(&self.title)
            );
        }
        let x_range = range(xs, false, 0.0);
        let y_range = range(
            left.iter()
                .flatten()
                .map(|p| p.1)
                .chain(self.rules.iter().filter_map(|r| self.y.to_plot(r.0))),
            !self.y.log,
            self.headroom(),
        );
        let mut svg = String::new();
        if let Err(e) = self.draw(&mut svg, x_range, y_range, &left, &right) {
            return format!(
                "<p class=\"empty\">{}: plot failed: {}</p>",
                escape(&self.title),
                escape(&e)
            );
        }
        svg
    }

    fn draw(
        &self,
        svg: &mut String,
        (x0, x1): (f64, f64),
        (y0, y1): (f64, f64),
        left: &[Vec<(f64, f64)>],
        right: &[Vec<(f64, f64)>],
    ) -> Result<(), String> {
        let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", CAPTION_PX))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .right_y_label_area_size(if self.right.is_some() { 64 } else { 0 })
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        // Every series is drawn in the left axis' coordinates: the right axis' values are
        // mapped onto them, so one loop draws all lines alike.
        let mut lines: Vec<Line> = self
            .series
            .iter()
            .zip(left.iter().cloned())
            .map(|(s, pts)| (s, pts, open_flags(s, &self.x, &self.y)))
            .collect();
        match &self.right {
            None => {
                let mut chart = chart;
                self.draw_lines(&mut chart, (x0, x1), &lines)?;
                let corner = legend_corner(&lines, (x0, x1), (y0, y1));
                legend(&mut chart, corner)?;
            }
            Some((axis, series)) => {
                let (r0, r1) = range(
                    right.iter().flatten().map(|p| p.1),
                    !axis.log,
                    self.headroom(),
                );
                let to_left = |v: f64| y0 + (v - r0) / (r1 - r0) * (y1 - y0);
                lines.extend(series.iter().zip(right).map(|(s, pts)| {
                    let on_left = pts.iter().map(|&(x, v)| (x, to_left(v))).collect();
                    (s, on_left, open_flags(s, &self.x, axis))
                }));
                // The secondary coordinates before the mesh: they take over the right label
                // area, which the primary mesh would otherwise label too.
                let mut chart = chart.set_secondary_coord(x0..x1, r0..r1);
                self.draw_lines(&mut chart, (x0, x1), &lines)?;
                let fr = |v: &f64| axis.tick_label(*v);
                chart
                    .configure_secondary_axes()
                    .y_desc(axis.label.as_str())
                    .y_label_formatter(&fr)
                    .label_style(("sans-serif", LABEL_PX))
                    .axis_desc_style(("sans-serif", LABEL_PX + 1))
                    .draw()
                    .map_err(|e| e.to_string())?;
                let corner = legend_corner(&lines, (x0, x1), (y0, y1));
                legend(&mut chart, corner)?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The mesh, the reference rules and the series (in left-axis coordinates).
    fn draw_lines<'a, DB: DrawingBackend + 'a>(
        &self,
        chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
        (x0, x1): (f64, f64),
        lines: &[Line],
    ) -> Result<(), String> {
        let (x_axis, y_axis) = (&self.x, &self.y);
        let fx = |v: &f64| x_axis.tick_label(*v);
        let fy = |v: &f64| y_axis.tick_label(*v);
        chart
            .configure_mesh()
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(221, 221, 221))
            .x_desc(self.x.label.as_str())
            .y_desc(self.y.label.as_str())
            .x_label_formatter(&fx)
            .y_label_formatter(&fy)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", LABEL_PX + 1))
            .draw()
            .map_err(|e| e.to_string())?;
        for (value, label) in &self.rules {
            let Some(v) = self.y.to_plot(*value) else {
                continue;
            };
            let style = RULE.stroke_width(2);
            chart
                .draw_series(DashedLineSeries::new([(x0, v), (x1, v)], 3, 3, style))
                .map_err(|e| e.to_string())?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        for (i, (s, pts, open)) in lines.iter().enumerate() {
            let style = line_style(s, i);
            let drawn = if s.dashed {
                chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))
            } else {
                chart.draw_series(LineSeries::new(pts.iter().copied(), style))
            };
            drawn
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            if s.markers {
                let dot = |(k, &p): (usize, &(f64, f64))| {
                    if open.get(k).copied().unwrap_or(false) {
                        Circle::new(
                            p,
                            4,
                            ShapeStyle {
                                filled: false,
                                ..style
                            },
                        )
                    } else {
                        Circle::new(p, 3, style.color.filled())
                    }
                };
                chart
                    .draw_series(pts.iter().enumerate().map(dot))
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

/// One bar: its label, its value (`None`: nothing measured) and the text written beside it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: Option<f64>,
    /// Written at the end of the bar (or at zero without a value), e.g. "12.3 (67 % of bound)".
    pub note: String,
    /// Index into [`PALETTE`]; `None`: the bar's place.
    pub color: Option<usize>,
}

/// A horizontal bar chart, first bar on top, with vertical reference rules (value, label)
/// drawn across all bars, e.g. the capacity bound no bar can pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bars {
    pub title: String,
    /// The value axis (linear, from zero).
    pub x: Axis,
    pub bars: Vec<Bar>,
    pub rules: Vec<(f64, String)>,
}

/// Height of one bar's row, in pixels.
const BAR_ROW: u32 = 46;

impl Bars {
    /// The chart as an inline `<svg>` element, or a `<p class="empty">` note without bars.
    pub fn render(&self) -> String {
        if self.bars.is_empty() {
            return format!(
                "<p class=\"empty\">{}: no data measured.</p>",
                escape(&self.title)
            );
        }
        let mut svg = String::new();
        if let Err(e) = self.draw(&mut svg) {
            return format!(
                "<p class=\"empty\">{}: plot failed: {}</p>",
                escape(&self.title),
                escape(&e)
            );
        }
        svg
    }

    fn draw(&self, svg: &mut String) -> Result<(), String> {
        let n = self.bars.len();
        let top = self
            .bars
            .iter()
            .filter_map(|b| b.value)
            .chain(self.rules.iter().map(|r| r.0))
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        // Room on the right for the note written after the longest bar.
        let x1 = if top > 0.0 { top * 1.3 } else { 1.0 };
        let longest = self.bars.iter().map(|b| b.label.chars().count()).max();
        let label_area = (longest.unwrap_or(0) as u32 * LABEL_PX * 3 / 5 + 16).clamp(60, 240);
        // Bar i fills row n-1-i (so the first bar is on top); the rules' labels get a band
        // of half a row above the bars.
        let band = if self.rules.is_empty() { 0.0 } else { 0.6 };
        let height = 96 + BAR_ROW * n as u32 + (band * BAR_ROW as f64) as u32;
        let root = SVGBackend::with_string(svg, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", CAPTION_PX))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(label_area)
            .build_cartesian_2d(0.0..x1, 0.0..n as f64 + band)
            .map_err(|e| e.to_string())?;
        let row = |i: usize| (n - 1 - i) as f64;
        let fx = |v: &f64| self.x.tick_label(*v);
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(221, 221, 221))
            .x_desc(self.x.label.as_str())
            .x_label_formatter(&fx)
            .y_labels(0)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", LABEL_PX + 1))
            .draw()
            .map_err(|e| e.to_string())?;
        let text = |anchor: HPos| {
            ("sans-serif", LABEL_PX)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(anchor, VPos::Center))
        };
        for (i, b) in self.bars.iter().enumerate() {
            let color = PALETTE[b.color.unwrap_or(i) % PALETTE.len()];
            let r = row(i);
            if let Some(v) = b.value.filter(|v| v.is_finite() && *v > 0.0) {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, r + 0.2), (v, r + 0.8)],
                        color.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
            }
            // The label left of the axis, in the root area's pixels (the mesh's own labels
            // fall on round values, not on the rows).
            let (px, py) = chart.backend_coord(&(0.0, r + 0.5));
            root.draw(&Text::new(b.label.clone(), (px - 8, py), text(HPos::Right)))
                .map_err(|e| e.to_string())?;
            let at = b.value.filter(|v| v.is_finite()).unwrap_or(0.0).max(0.0);
            chart
                .draw_series(std::iter::once(Text::new(
                    format!(" {}", b.note),
                    (at, r + 0.5),
                    text(HPos::Left),
                )))
                .map_err(|e| e.to_string())?;
        }
        for (value, label) in &self.rules {
            chart
                .draw_series(DashedLineSeries::new(
                    [(*value, 0.0), (*value, n as f64 + band)],
                    5,
                    4,
                    RULE.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{label} "),
                    (*value, n as f64 + band / 2.0),
                    text(HPos::Right),
                )))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The stroke of a series: its palette colour (its own or its place), 2 px.
fn line_style(s: &Series, place: usize) -> ShapeStyle {
    PALETTE[s.color.unwrap_or(place) % PALETTE.len()].stroke_width(2)
}

/// The corner for the legend where the fewest lines run: the upper left unless another
/// corner's box (a third of the width, a quarter of the height) holds fewer points and
/// segment midpoints.
fn legend_corner(
    lines: &[Line],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> SeriesLabelPosition {
    let (w, h) = ((x1 - x0) / 3.0, (y1 - y0) / 4.0);
    let probes: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|(_, pts, _)| {
            let mids = pts
                .windows(2)
                .map(|p| ((p[0].0 + p[1].0) / 2.0, (p[0].1 + p[1].1) / 2.0));
            pts.iter().copied().chain(mids).collect::<Vec<_>>()
        })
        .collect();
    let count = |left: bool, top: bool| {
        probes
            .iter()
            .filter(|(x, y)| {
                (if left { *x <= x0 + w } else { *x >= x1 - w })
                    && (if top { *y >= y1 - h } else { *y <= y0 + h })
            })
            .count()
    };
    [
        (SeriesLabelPosition::UpperLeft, count(true, true)),
        (SeriesLabelPosition::UpperRight, count(false, true)),
        (SeriesLabelPosition::LowerRight, count(false, false)),
        (SeriesLabelPosition::LowerLeft, count(true, false)),
    ]
    .into_iter()
    .min_by_key(|(_, n)| *n)
    .map_or(SeriesLabelPosition::UpperLeft, |(p, _)| p)
}

/// The legend box, the same on every plot, in the given corner.
fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    corner: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", LABEL_PX))
        .position(corner)
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(series: Vec<Series>) -> Plot {
        Plot {
            title: "Rate <& \"load\">".into(),
            x: Axis::linear("rate"),
            y: Axis::linear("MB/s"),
            series,
            ..Plot::default()
        }
    }

    #[test]
    fn escape_covers_text_and_attributes() {
        assert_eq!(
            escape("a<b>&\"c\"'d'"),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;"
        );
    }

    #[test]
    fn plot_is_inline_svg_with_a_legend_and_an_escaped_title() {
        let svg = plot(vec![Series::new("nginx <1>", vec![(1.0, 2.0), (2.0, 4.0)])]).render();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("nginx &lt;1&gt;"));
        assert!(svg.contains("Rate &lt;&amp;"));
        assert!(!svg.contains("<&"));
    }

    #[test]
    fn empty_or_unplottable_data_gives_a_note() {
        let s = plot(vec![]).render();
        assert!(
            s.contains("no data measured") && s.contains("Rate &lt;&amp;"),
            "{s}"
        );
        // Points a log axis cannot show are left out; none left means no data.
        let log = Plot {
            x: Axis::log("size"),
            ..plot(vec![Series::new("a", vec![(0.0, 1.0), (-1.0, 2.0)])])
        };
        assert!(log.render().contains("no data measured"));
    }

    #[test]
    fn dual_axes_dashes_markers_and_rules_render() {
        let p = Plot {
            x: Axis::log("size (MiB)"),
            series: vec![Series {
                markers: true,
                ..Series::new("fixed util", vec![(1.0, 50.0), (10.0, 80.0)])
            }],
            right: Some((
                Axis::linear("GB"),
                vec![Series {
                    dashed: true,
                    color: Some(0),
                    ..Series::new("fixed mem", vec![(1.0, 2.0), (10.0, 9.0)])
                }],
            )),
            rules: vec![(100.0, "100 %".into())],
            ..plot(vec![])
        };
        let svg = p.render();
        assert!(svg.starts_with("<svg"), "{svg}");
        for label in ["fixed util", "fixed mem", "100 %", "GB", "size (MiB)"] {
            assert!(svg.contains(label), "{label} missing");
        }
        assert!(svg.contains("<circle"), "markers drawn");
        let open = Plot {
            series: vec![Series {
                markers: true,
                open: vec![1],
                ..Series::new("a", vec![(1.0, 1.0), (2.0, 2.0)])
            }],
            ..plot(vec![])
        }
        .render();
        assert_eq!(open.matches("<circle").count(), 2, "{open}");
        assert_eq!(open_dots(&open), 1, "{open}");
        assert_eq!(
            svg.matches("MB/s").count(),
            1,
            "the left axis is labelled once"
        );
    }

    #[test]
    fn bars_render_labels_notes_and_the_rule() {
        let b = Bars {
            title: "Capacity".into(),
            x: Axis::linear("sessions/s"),
            bars: vec![
                Bar {
                    label: "vodkit <a>".into(),
                    value: Some(12.0),
                    note: "12.00 (65 % of bound)".into(),
                    color: None,
                },
                Bar {
                    label: "apache".into(),
                    value: None,
                    note: "skipped".into(),
                    color: None,
                },
            ],
            rules: vec![(18.4, "capacity bound 18.40".into())],
        };
        let svg = b.render();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "vodkit &lt;a&gt;",
            "apache",
            "65 % of bound",
            "skipped",
            "capacity bound 18.40",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // One filled bar in the first colour; the skipped server has none.
        assert_eq!(svg.matches("fill=\"#1F77B4\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("fill=\"#D62728\"").count(), 0, "{svg}");
        assert!(
            svg.contains("stroke=\"#282828\""),
            "the rule is drawn: {svg}"
        );
        let none = Bars { bars: vec![], ..b };
        assert!(none.render().contains("no data measured"));
    }

    #[test]
    fn the_legend_goes_where_no_line_runs() {
        let s = Series::new("a", vec![]);
        // A line along the top: the legend goes below it.
        let top = [(&s, vec![(0.0, 9.0), (10.0, 9.5)], vec![])];
        let corner = legend_corner(&top, (0.0, 10.0), (0.0, 10.0));
        assert!(
            matches!(corner, SeriesLabelPosition::LowerRight),
            "{corner:?}"
        );
        // A line rising from the lower left: the upper left is free.
        let rising = [(&s, vec![(0.0, 0.0), (10.0, 10.0)], vec![])];
        let corner = legend_corner(&rising, (0.0, 10.0), (0.0, 10.0));
        assert!(
            matches!(corner, SeriesLabelPosition::UpperLeft),
            "{corner:?}"
        );
    }

    #[test]
    fn an_all_zero_series_gets_an_axis_from_zero_up() {
        assert_eq!(range([0.0, 0.0].into_iter(), true, 0.0), (0.0, 1.0));
        assert_eq!(range([2.0, 2.0].into_iter(), false, 0.0), (1.5, 2.5));
    }

    #[test]
    fn tick_labels_read_as_values() {
        assert_eq!(Axis::log("x").tick_label(2.0), "100");
        assert_eq!(Axis::linear("x").tick_label(2.5), "2.50");
        assert_eq!(Axis::linear("x").tick_label(3e6), "3e6");
    }
}

//! Charts as data (series of points, axes with units) laid out once, then drawn as SVG (the
//! HTML report) or as PDF vector paths (the PDF report): the two reports show the same
//! pictures.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart with labelled axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    /// Axis labels with units, e.g. "latency (ms)".
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Draw a marker at every point (sweeps have few points).
    pub markers: bool,
}

/// Colours of the series, in order (colour-blind safe, Okabe-Ito).
pub const COLOURS: [(u8, u8, u8); 6] =
    [(0, 114, 178), (213, 94, 0), (0, 158, 115), (204, 121, 167), (230, 159, 0), (86, 180, 233)];

/// "Nice" tick values covering [lo, hi].
pub fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    ticks_of(lo, hi, n, false)
}

/// [`ticks`] on an axis of whole numbers (concurrencies, counts): whole-number steps only,
/// so no tick falls between two values the axis can take.
pub fn whole_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    ticks_of(lo, hi, n, true)
}

fn ticks_of(lo: f64, hi: f64, n: usize, whole: bool) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let fits = |s: &f64| !whole || (*s >= 1.0 - 1e-9 && (s - s.round()).abs() < 1e-9);
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .filter(fits)
        .map(|s| if whole { s.round() } else { s })
        .find(|s| *s >= raw)
        .unwrap_or(if whole { raw.ceil().max(1.0) } else { raw });
    let start = (lo / step).floor() * step;
    let mut v = Vec::new();
    let mut t = start;
    while t <= hi + step * 1e-9 {
        if t >= lo - step * 1e-9 {
            v.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        }
        t += step;
    }
    v
}

/// A figure for a table: whole numbers without decimals, else 1 decimal from 100 up, 3
/// below; `-` for none.
pub fn figure(v: Option<f64>) -> String {
    v.map_or_else(
        || "-".into(),
        |x| {
            if x.fract() == 0.0 {
                format!("{x:.0}")
            } else if x >= 100.0 {
                format!("{x:.1}")
            } else {
                format!("{x:.3}")
            }
        },
    )
}

/// The columns of a sweep table after the load column: (header, key in sweep.json steps),
/// for steps that generate (chat, completions, transcriptions...).
pub const SWEEP_COLUMNS: [(&str, &str); 10] = [
    ("req/s", "request_throughput"),
    ("steady r/s", "steady_request_throughput"),
    ("req/min", "requests_per_minute"),
    ("out tok/s", "output_token_throughput"),
    ("E2E p50", "e2e_p50_ms"),
    ("E2E p99", "e2e_p99_ms"),
    ("TTFT p50", "ttft_p50_ms"),
    ("ITL p50", "itl_p50_ms"),
    ("ok", "completed"),
    ("errors", "failed"),
];

/// The columns of a sweep table of steps that embed or rank: inputs instead of tokens, and
/// no first token or gaps.
pub const INPUT_SWEEP_COLUMNS: [(&str, &str); 10] = [
    ("req/s", "request_throughput"),
    ("steady r/s", "steady_request_throughput"),
    ("req/min", "requests_per_minute"),
    ("inputs/s", "input_throughput"),
    ("in tok/s", "input_token_throughput"),
    ("E2E p50", "e2e_p50_ms"),
    ("E2E p99", "e2e_p99_ms"),
    ("E2E/in p50", "per_input_p50_ms"),
    ("ok", "completed"),
    ("errors", "failed"),
];

/// A tick label without needless digits.
pub fn tick_label(v: f64) -> String {
    if v.abs() >= 1000.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// The labels of an axis's ticks, all with the fewest decimals that tell every tick apart
/// and say each value (`20.00 20.02 20.04`, not `20 20.0 20.0`); values of 1000 and up
/// whole.
///
/// ```
/// use quetta_report::chart::tick_labels;
/// assert_eq!(tick_labels(&[0.0, 20.0, 40.0]), ["0", "20", "40"]);
/// assert_eq!(tick_labels(&[20.0, 20.02, 20.04]), ["20.00", "20.02", "20.04"]);
/// assert_eq!(tick_labels(&[0.0, 2.5, 5.0]), ["0.0", "2.5", "5.0"]);
/// ```
pub fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let step = ticks.windows(2).map(|w| (w[1] - w[0]).abs()).fold(f64::INFINITY, f64::min);
    let big = ticks.iter().all(|t| t.abs() >= 1000.0 || *t == 0.0);
    for d in 0..=6 {
        let labels: Vec<String> = ticks.iter().map(|t| format!("{t:.d$}")).collect();
        let exact = ticks.iter().zip(&labels).all(|(t, l)| {
            l.parse::<f64>().is_ok_and(|v| (v - t).abs() <= step.min(t.abs().max(1.0)) * 1e-3)
        });
        let distinct = labels.windows(2).all(|w| w[0] != w[1]);
        if (exact || (big && d == 0)) && distinct {
            return labels;
        }
    }
    ticks.iter().map(|t| tick_label(*t)).collect()
}

/// The chart laid out in a `w` × `h` box: plot area, axis ranges and ticks.
#[derive(Debug, Clone)]
pub struct Layout {
    pub w: f64,
    pub h: f64,
    /// Plot area: left, top, right, bottom.
    pub area: (f64, f64, f64, f64),
    pub x: (f64, f64),
    pub y: (f64, f64),
    pub x_ticks: Vec<f64>,
    pub y_ticks: Vec<f64>,
    /// Where each series' legend entry starts (left of its line sample, text baseline):
    /// rows between the title and the plot area, never over the data.
    pub legend: Vec<(f64, f64)>,
}

/// Width of a character of the charts' 11-unit text, for laying out legends.
const CHAR_W: f64 = 6.4;

impl Layout {
    pub fn new(c: &Chart, w: f64, h: f64) -> Self {
        // an axis of whole numbers (a sweep's concurrencies) gets whole ticks
        let whole_x = c.series.iter().flat_map(|s| s.points.iter()).all(|p| p.0.fract() == 0.0);
        let pts = c.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, f64::MIN);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1, y1) = (0.0, 1.0, 1.0);
        }
        if x1 <= x0 {
            // one x value (a one-step sweep): centre it instead of drawing it on the frame
            let pad = (x0.abs() * 0.5).max(0.5);
            (x0, x1) = (x0 - pad, x1 + pad);
        }
        let y0 = 0.0;
        // headroom: the highest line never touches the frame
        let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.08 };
        let y_ticks = ticks(y0, y1, 5);
        let y1 = y_ticks.last().copied().unwrap_or(y1).max(y1);
        let (left, right) = (62.0, w - 16.0);
        let (mut lx, mut ly) = (left, 38.0);
        let mut legend = Vec::with_capacity(c.series.len());
        for s in &c.series {
            let width = 28.0 + CHAR_W * s.name.chars().count() as f64;
            if lx > left && lx + width > right {
                (lx, ly) = (left, ly + 15.0);
            }
            legend.push((lx, ly));
            lx += width + 14.0;
        }
        let top = if c.series.len() > 1 || c.series.iter().any(|s| !s.name.is_empty()) {
            ly + 10.0
        } else {
            30.0
        };
        Self {
            w,
            h,
            area: (left, top, right, h - 46.0),
            x: (x0, x1),
            y: (y0, y1),
            x_ticks: if whole_x { whole_ticks(x0, x1, 6) } else { ticks(x0, x1, 6) },
            y_ticks,
            legend,
        }
    }

    /// Map a data point to box coordinates (y grows downwards).
    pub fn map(&self, x: f64, y: f64) -> (f64, f64) {
        let (l, t, r, b) = self.area;
        let fx = (x - self.x.0) / (self.x.1 - self.x.0);
        let fy = (y - self.y.0) / (self.y.1 - self.y.0);
        (l + fx * (r - l), b - fy * (b - t))
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The chart as an inline SVG element.
pub fn svg(c: &Chart, w: f64, h: f64) -> String {
    let l = Layout::new(c, w, h);
    let (al, at, ar, ab) = l.area;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11" role="img" aria-label="{}">"#,
        esc(&c.title)
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        al,
        esc(&c.title)
    );
    for (&t, label) in l.y_ticks.iter().zip(tick_labels(&l.y_ticks)) {
        let (_, y) = l.map(l.x.0, t);
        let _ = write!(
            s,
            r##"<line x1="{al}" y1="{y:.1}" x2="{ar}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            al - 6.0,
            y + 4.0,
        );
    }
    for (&t, label) in l.x_ticks.iter().zip(tick_labels(&l.x_ticks)) {
        let (x, _) = l.map(t, l.y.0);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{ab}" x2="{x:.1}" y2="{:.1}" stroke="#888"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            ab + 4.0,
            ab + 16.0,
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{al}" y="{at}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
        ar - al,
        ab - at
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        f64::midpoint(al, ar),
        h - 8.0,
        esc(&c.x_label)
    );
    let _ = write!(
        s,
        r#"<text transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        f64::midpoint(at, ab),
        esc(&c.y_label)
    );
    for (i, ser) in c.series.iter().enumerate() {
        let (r, g, b) = COLOURS[i % COLOURS.len()];
        let pts: Vec<String> = ser
            .points
            .iter()
            .map(|&(x, y)| {
                let (px, py) = l.map(x, y);
                format!("{px:.1},{py:.1}")
            })
            .collect();
        let _ = write!(
            s,
            r#"<g class="series" data-series="{i}" data-points="{}"><polyline fill="none" stroke="rgb({r},{g},{b})" stroke-width="1.6" points="{}"/>"#,
            ser.points.len(),
            pts.join(" ")
        );
        // every point can be hovered to read it; drawn as a marker on sweeps, and alone (a
        // distribution of one value: no line to draw)
        let opacity = if c.markers || ser.points.len() == 1 { 1.0 } else { 0.0 };
        for &(x, y) in &ser.points {
            let (px, py) = l.map(x, y);
            let _ = write!(
                s,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="rgb({r},{g},{b})" fill-opacity="{opacity}"><title>{}: {} = {}, {} = {}</title></circle>"#,
                esc(&ser.name),
                esc(&c.x_label),
                tick_label(x),
                esc(&c.y_label),
                tick_label(y)
            );
        }
        s.push_str("</g>");
        let (lx, ly) = l.legend[i];
        let _ = write!(
            s,
            r#"<g class="legend" data-series="{i}" style="cursor:pointer"><line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="rgb({r},{g},{b})" stroke-width="2"/><text x="{:.1}" y="{ly:.1}">{}</text></g>"#,
            ly - 4.0,
            lx + 20.0,
            ly - 4.0,
            lx + 24.0,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        assert_eq!(ticks(0.0, 100.0, 5), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let t = ticks(0.0, 7.3, 5);
        assert_eq!(t[1], 2.0);
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(1500.0), "1500");
        // concurrencies 1 to 4: whole steps, not 0.5
        assert_eq!(ticks(1.0, 4.0, 6), vec![1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
        assert_eq!(whole_ticks(1.0, 4.0, 6), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(whole_ticks(1.0, 64.0, 6), ticks(1.0, 64.0, 6));
        assert_eq!(whole_ticks(0.0, 2.0, 6), vec![0.0, 1.0, 2.0]);
    }

    #[test]
    fn svg_has_the_axes_and_a_polyline_per_series() {
        let c = Chart {
            title: "TTFT <CDF>".into(),
            x_label: "TTFT (ms)".into(),
            y_label: "share of requests".into(),
            series: vec![Series { name: "run".into(), points: vec![(1.0, 0.1), (5.0, 1.0)] }],
            markers: true,
        };
        let s = svg(&c, 600.0, 300.0);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains("TTFT &lt;CDF&gt;") && s.contains("TTFT (ms)"));
        assert_eq!(s.matches("<polyline").count(), 1);
        assert_eq!(s.matches("<circle").count(), 2);
    }

    /// A distribution of one value (every request in one histogram bucket) is one point:
    /// with no line to draw, its marker shows, where other lines' points stay hidden.
    #[test]
    fn a_lone_point_is_drawn_as_a_marker() {
        let one = Series { name: "E2E".into(), points: vec![(655.3, 1.0)] };
        let two = Series { name: "TTFT".into(), points: vec![(1.0, 0.5), (2.0, 1.0)] };
        let c = Chart {
            title: "CDF".into(),
            x_label: "ms".into(),
            y_label: "share".into(),
            series: vec![one, two],
            markers: false,
        };
        let s = svg(&c, 600.0, 300.0);
        assert_eq!(s.matches(r#"fill-opacity="1""#).count(), 1, "{s}");
        assert_eq!(s.matches(r#"fill-opacity="0""#).count(), 2);
    }
}

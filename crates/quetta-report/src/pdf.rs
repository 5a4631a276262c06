//! `report.pdf`: A4 landscape pages with vector charts (the same [`Chart`]s as the HTML
//! report) and an embedded font (DejaVu Sans, bundled): a title page with the configuration
//! and highlights, the sweep table, the sweep charts and one page per step (or, for a single
//! run, its metric table and charts).

use printpdf::{
    Color, IndirectFontRef, Line, Mm, PdfDocument, PdfDocumentReference, PdfLayerReference, Point,
    Rgb,
};

use crate::chart::{tick_labels, Chart, Layout, COLOURS};
use crate::html::{run_charts, run_highlights, sweep_charts, Results, RunData, SweepData};

const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
const W: f64 = 297.0;
const H: f64 = 210.0;

/// The PDF could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PdfError {
    #[error("PDF: {0}")]
    Pdf(String),
}

struct Doc {
    pdf: PdfDocumentReference,
    font: IndirectFontRef,
    first: Option<PdfLayerReference>,
}

fn rgb(c: (u8, u8, u8)) -> Color {
    Color::Rgb(Rgb::new(
        f32::from(c.0) / 255.0,
        f32::from(c.1) / 255.0,
        f32::from(c.2) / 255.0,
        None,
    ))
}

impl Doc {
    fn page(&mut self) -> Page {
        let layer = match self.first.take() {
            Some(l) => l,
            None => {
                let (p, l) = self.pdf.add_page(Mm(W as f32), Mm(H as f32), "content");
                self.pdf.get_page(p).get_layer(l)
            }
        };
        Page { layer, font: self.font.clone(), y: 18.0 }
    }
}

/// A page being written top to bottom; `y` is the next line's distance from the top (mm).
struct Page {
    layer: PdfLayerReference,
    font: IndirectFontRef,
    y: f64,
}

impl Page {
    fn text_at(&self, s: &str, size: f64, x: f64, y_top: f64) {
        self.layer.set_fill_color(rgb((20, 20, 20)));
        self.layer.use_text(s, size as f32, Mm(x as f32), Mm((H - y_top) as f32), &self.font);
    }

    fn line(&mut self, s: &str, size: f64) {
        self.y += size * 0.45;
        self.text_at(s, size, 16.0, self.y);
        self.y += size * 0.1 + 1.5;
    }

    fn polyline(&self, pts: &[(f64, f64)], colour: (u8, u8, u8), width: f64) {
        if pts.len() < 2 {
            return;
        }
        self.layer.set_outline_color(rgb(colour));
        self.layer.set_outline_thickness(width as f32);
        self.layer.add_line(Line {
            points: pts
                .iter()
                .map(|&(x, y)| (Point::new(Mm(x as f32), Mm((H - y) as f32)), false))
                .collect(),
            is_closed: false,
        });
    }

    /// A table: one row of strings per line, columns at fixed widths.
    fn table(&mut self, rows: &[Vec<String>], widths: &[f64], size: f64) {
        for (i, r) in rows.iter().enumerate() {
            self.y += size * 0.5;
            let mut x = 16.0;
            for (c, w) in r.iter().zip(widths) {
                self.text_at(c, size, x, self.y);
                x += w;
            }
            if i == 0 {
                let total: f64 = widths.iter().sum();
                self.polyline(
                    &[(16.0, self.y + 1.2), (16.0 + total, self.y + 1.2)],
                    (120, 120, 120),
                    0.4,
                );
            }
            self.y += 1.6;
        }
        self.y += 3.0;
    }

    /// A chart in a `w` × `h` mm box whose top left is (`x`, `y`).
    fn chart(&self, c: &Chart, x: f64, y: f64, w: f64, h: f64) {
        // Lay out in points-like units scaled to mm: reuse the SVG layout with mm sizes.
        let l = Layout::new(c, w * 3.0, h * 3.0);
        let k = 1.0 / 3.0;
        let map = |px: f64, py: f64| {
            let (a, b) = l.map(px, py);
            (x + a * k, y + b * k)
        };
        let (al, at, ar, ab) = l.area;
        let (al, at, ar, ab) = (x + al * k, y + at * k, x + ar * k, y + ab * k);
        self.text_at(&c.title, 10.0, al, y + 6.0);
        for (&t, lab) in l.y_ticks.iter().zip(tick_labels(&l.y_ticks)) {
            let (_, py) = map(l.x.0, t);
            self.polyline(&[(al, py), (ar, py)], (220, 220, 220), 0.3);
            self.text_at(&lab, 7.0, al - 2.0 - 1.35 * lab.len() as f64, py + 1.0);
        }
        for (&t, lab) in l.x_ticks.iter().zip(tick_labels(&l.x_ticks)) {
            let (px, _) = map(t, l.y.0);
            self.polyline(&[(px, ab), (px, ab + 1.2)], (90, 90, 90), 0.4);
            self.text_at(&lab, 7.0, px - 0.7 * lab.len() as f64, ab + 4.5);
        }
        self.polyline(&[(al, at), (ar, at), (ar, ab), (al, ab), (al, at)], (60, 60, 60), 0.5);
        self.text_at(
            &c.x_label,
            8.0,
            f64::midpoint(al, ar) - 0.8 * c.x_label.len() as f64,
            ab + 9.5,
        );
        // the y axis' label in the top right corner, clear of the legend row
        let y_label = format!("y: {}", c.y_label);
        self.text_at(&y_label, 7.0, ar - 1.35 * y_label.chars().count() as f64, y + 6.0);
        for (i, s) in c.series.iter().enumerate() {
            let col = COLOURS[i % COLOURS.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(a, b)| map(a, b)).collect();
            self.polyline(&pts, col, 0.8);
            // a lone point (a distribution of one value) has no line: mark it
            if c.markers || pts.len() == 1 {
                for &(px, py) in &pts {
                    self.polyline(&[(px - 0.8, py - 0.8), (px + 0.8, py + 0.8)], col, 0.7);
                    self.polyline(&[(px - 0.8, py + 0.8), (px + 0.8, py - 0.8)], col, 0.7);
                }
            }
            let (lx, ly) = l.legend[i];
            let (lx, ly) = (x + lx * k, y + ly * k);
            self.polyline(&[(lx, ly - 1.0), (lx + 6.0, ly - 1.0)], col, 1.0);
            self.text_at(&s.name, 7.0, lx + 7.5, ly);
        }
    }
}

fn fmt(v: Option<f64>) -> String {
    crate::chart::figure(v)
}

fn metric_rows(r: &RunData) -> Vec<Vec<String>> {
    let mut rows =
        vec![["latency (ms)", "count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()];
    for (name, st) in crate::terminal::latency_rows(&r.summary) {
        rows.push(vec![
            name.into(),
            st.count.to_string(),
            fmt(st.mean),
            fmt(st.p50),
            fmt(st.p90),
            fmt(st.p95),
            fmt(st.p99),
            fmt(st.p999),
            fmt(st.max),
        ]);
    }
    rows
}

/// The steady window and the figures that differ over it, as the terminal shows them.
fn steady_lines(p: &mut Page, r: &RunData) {
    let Some((head, rows)) = crate::terminal::steady_view(&r.summary) else { return };
    p.line(&format!("steady state: {head}"), 9.0);
    for [name, x, y] in rows {
        p.line(&format!("    {name}: {x} (whole run {y})"), 8.0);
    }
}

const METRIC_WIDTHS: [f64; 9] = [50.0, 18.0, 20.0, 20.0, 20.0, 20.0, 20.0, 20.0, 20.0];

fn config_lines(p: &mut Page, r: &RunData) {
    let t = &r.summary.target;
    p.line(
        &format!("target: {} {} ({}), model {}", t.backend, t.base_url, t.endpoint, t.model),
        9.0,
    );
    if let Ok(serde_json::Value::Object(o)) = serde_json::to_value(&r.summary.config) {
        let items: Vec<String> = o
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}: {}", crate::terminal::setting_text(v)))
            .collect();
        for chunk in items.chunks(3) {
            p.line(&chunk.join("    "), 8.0);
        }
    }
}

/// The least height a chart is drawn at (axes, ticks and a legend with room for a curve).
const MIN_CHART_MM: f64 = 60.0;

/// A run's results from `p` on (the summary first, the charts after).
fn run_pages(d: &mut Doc, mut p: Page, r: &RunData, heading: &str) {
    p.line(heading, 14.0);
    let m = &r.summary.metrics;
    if let Some(l) = crate::partial_label(&r.summary) {
        p.line(&l, 12.0);
    }
    if m.completed == 0 {
        let failed = crate::failed_label(&r.summary);
        wrapped(
            &mut p,
            &failed.unwrap_or_else(|| "FAILED: no request was measured".into()),
            12.0,
            76,
        );
        error_lines(&mut p, m);
        note_lines(&mut p, &r.summary.notes);
        return;
    }
    let hl: Vec<String> =
        run_highlights(&r.summary).iter().map(|(k, v)| format!("{k}: {v}")).collect();
    for h in hl.chunks(3) {
        p.line(&h.join("    "), 9.0);
    }
    p.y += 2.0;
    p.table(&metric_rows(r), &METRIC_WIDTHS, 8.0);
    steady_lines(&mut p, r);
    error_lines(&mut p, m);
    note_lines(&mut p, &r.summary.notes);
    let charts = run_charts(r);
    let y0 = p.y + 2.0;
    // Two charts below the table where they fit readably (notes and errors can take the
    // room); else every chart goes on the pages that follow.
    let room = H - y0 - 10.0;
    let here = if room >= MIN_CHART_MM { 2.min(charts.len()) } else { 0 };
    for (i, c) in charts.iter().take(here).enumerate() {
        p.chart(c, 14.0 + i as f64 * 136.0, y0, 130.0, room.min(85.0));
    }
    chart_grid(d, &charts[here..]);
}

/// The run's notes (warnings first), each wrapped to the page's width.
fn note_lines<N: std::fmt::Display>(p: &mut Page, notes: &[N]) {
    for n in notes {
        wrapped(p, &n.to_string(), 7.0, 130);
    }
}

/// `text` at `size`, broken between words into lines of at most `width` characters (the
/// lines after the first indented).
fn wrapped(p: &mut Page, text: &str, size: f64, width: usize) {
    let mut line = String::new();
    for w in text.split(' ') {
        if line.len() + w.len() > width {
            p.line(&line, size);
            line = "  ".into();
        }
        line.push_str(w);
        line.push(' ');
    }
    p.line(line.trim_end(), size);
}

/// Error kinds, then the most frequent messages (cut to fit the line).
fn error_lines(p: &mut Page, m: &quetta_metrics::MetricsSummary) {
    if m.errors.is_empty() {
        return;
    }
    let e: Vec<String> = m.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    p.line(&format!("errors: {}", e.join(", ")), 9.0);
    for t in &m.top_errors {
        let msg: String = t.message.chars().take(110).collect();
        p.line(&format!("  {} x {}: {msg}", t.count, t.kind), 8.0);
    }
}

/// The report as PDF bytes.
pub fn render(res: &Results) -> Result<Vec<u8>, PdfError> {
    let (doc, page, layer) =
        PdfDocument::new("Quetta report", Mm(W as f32), Mm(H as f32), "content");
    let font = doc.add_external_font(FONT).map_err(|e| PdfError::Pdf(e.to_string()))?;
    let first = doc.get_page(page).get_layer(layer);
    let mut d = Doc { pdf: doc, font, first: Some(first) };
    match res {
        Results::Run(r) => {
            let mut p = d.page();
            p.line(&format!("Quetta run report — {}", r.summary.target.model), 18.0);
            p.line(
                &format!(
                    "started {}    {} {}",
                    r.summary.started_at, r.summary.tool, r.summary.tool_version
                ),
                9.0,
            );
            p.y += 3.0;
            run_pages(&mut d, p, r, "Results");
            let mut p = d.page();
            p.line("Configuration", 12.0);
            config_lines(&mut p, r);
        }
        Results::Sweep(sw) => sweep_pages(&mut d, sw),
        Results::Repeats(rp) => repeats_pages(&mut d, rp),
    }
    d.pdf.save_to_bytes().map_err(|e| PdfError::Pdf(e.to_string()))
}

/// A repeated run: the figures across the repeats, their charts, then each repeat's run.
fn repeats_pages(d: &mut Doc, rp: &crate::html::RepeatsData) {
    let r = &rp.report;
    let mut p = d.page();
    let model = rp.runs.first().map_or("", |x| x.summary.target.model.as_str());
    p.line(&format!("Quetta repeated run — {model}"), 18.0);
    let whole = r.runs.iter().filter(|x| !x.partial).count();
    p.line(&format!("{whole} of {} repeats ran to their end", r.planned), 10.0);
    if let Some(u) = &r.until_ci {
        let met = if u.met { "met" } else { "NOT met within the planned repeats" };
        p.line(
            &format!("until-ci ±{:.1}% on {}: {met}", u.half_width * 100.0, u.figures.join(", ")),
            9.0,
        );
    }
    p.y += 2.0;
    let mut rows =
        vec![["figure", "mean", "stddev", "CV", "95% CI of the mean"].map(String::from).to_vec()];
    for f in &r.figures {
        let (mean, sd) = (fmt(Some(f.across.mean)), fmt(f.across.stddev));
        rows.push(vec![f.figure.clone(), mean, sd, f.cv_text(), f.ci_text(|v| fmt(Some(v)))]);
    }
    p.table(&rows, &[70.0, 30.0, 30.0, 20.0, 60.0], 8.0);
    chart_grid(d, &crate::html::repeat_charts(r));
    for (i, run) in rp.runs.iter().enumerate() {
        let mut p = d.page();
        p.line(&format!("Repeat {}", i + 1), 14.0);
        p.table(&metric_rows(run), &METRIC_WIDTHS, 8.0);
    }
}

/// Charts two by two on pages of their own.
fn chart_grid(d: &mut Doc, charts: &[Chart]) {
    for page in charts.chunks(4) {
        let p = d.page();
        for (i, c) in page.iter().enumerate() {
            let (col, row) = ((i % 2) as f64, (i / 2) as f64);
            p.chart(c, 14.0 + col * 136.0, 14.0 + row * 96.0, 130.0, 88.0);
        }
    }
}

/// The pages of a sweep: a summary page first (target, what was swept, the peak, where SLOs
/// broke, the sweep table), the charts four to a page, one page per step, the
/// configuration last.
fn sweep_pages(d: &mut Doc, sw: &SweepData) {
    let kind = sw.sweep.kind.as_str();
    let mut p = d.page();
    let first = sw.steps.first();
    p.line(
        &format!("Quetta sweep report — {}", first.map_or("", |r| r.summary.target.model.as_str())),
        18.0,
    );
    if let Some(f) = first {
        let t = &f.summary.target;
        p.line(
            &format!(
                "target {} {} ({}), started {}",
                t.backend, t.base_url, t.endpoint, f.summary.started_at
            ),
            9.0,
        );
    }
    let values: Vec<String> = sw.sweep.steps.iter().map(|st| fmt(Some(st.value()))).collect();
    let steps = if values.len() == 1 { "step" } else { "steps" };
    p.line(&format!("swept {kind} {} ({} {steps})", values.join(", "), values.len()), 10.0);
    p.line(
        &sw.sweep.peak.as_ref().map_or("peak: none (no step ran to its end)".into(), |pk| {
            format!(
                "peak {:.2} req/s, {} at {kind} {}",
                pk.request_throughput,
                pk.volume(),
                fmt(Some(pk.value()))
            )
        }),
        10.0,
    );
    let slo = match crate::html::slo_break(sw) {
        Some(b) => format!("SLOs first broken at {b}"),
        None if sw.steps.iter().any(|r| r.summary.metrics.slo_verdict.is_some()) => {
            "SLOs met at every step".into()
        }
        None => "no SLOs given".into(),
    };
    p.line(&slo, 10.0);
    p.line(&format!("total errors {}", sw.sweep.total_errors), 10.0);
    if let Some(f) = &sw.sweep.failed {
        wrapped(&mut p, &format!("FAILED: {f}"), 12.0, 76);
    }
    note_lines(&mut p, &sw.sweep.notes);
    p.y += 2.0;
    let mut rows = vec![std::iter::once(kind)
        .chain(sw.sweep.columns().iter().map(|c| c.0))
        .map(str::to_owned)
        .collect::<Vec<_>>()];
    for st in &sw.sweep.steps {
        let mut row: Vec<String> = std::iter::once(kind)
            .chain(sw.sweep.columns().iter().map(|c| c.1))
            .map(|k| fmt(st.column(k)))
            .collect();
        if st.partial {
            // the column is narrow: the step's page says how much of it ran
            row[0].push_str(" (partial)");
        }
        rows.push(row);
    }
    p.table(&rows, &[24.0, 22.0, 22.0, 22.0, 24.0, 22.0, 22.0, 22.0, 22.0, 20.0, 20.0], 8.0);
    chart_grid(d, &sweep_charts(sw));
    for (i, r) in sw.steps.iter().enumerate() {
        let label = fmt(sw.sweep.steps.get(i).map(crate::SweepStep::value));
        let mut p = d.page();
        p.line(&format!("Step {} — {kind} {label}", i + 1), 14.0);
        if let Some(l) = crate::partial_label(&r.summary) {
            p.line(&l, 10.0);
        }
        if let Some(f) = crate::failed_label(&r.summary) {
            wrapped(&mut p, &f, 10.0, 90);
        }
        p.table(&metric_rows(r), &METRIC_WIDTHS, 8.0);
        let hl: Vec<String> =
            run_highlights(&r.summary).iter().map(|(k, v)| format!("{k}: {v}")).collect();
        for h in hl.chunks(3) {
            p.line(&h.join("    "), 9.0);
        }
        error_lines(&mut p, &r.summary.metrics);
        let charts = run_charts(r);
        let y0 = p.y + 2.0;
        for (j, c) in charts.iter().take(2).enumerate() {
            p.chart(c, 14.0 + j as f64 * 136.0, y0, 130.0, (H - y0 - 10.0).min(80.0));
        }
    }
    if let Some(f) = first {
        let mut p = d.page();
        p.line("Configuration (of the first step; each step sets its own load)", 12.0);
        config_lines(&mut p, f);
    }
}

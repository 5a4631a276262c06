//! `report.html`: one self-contained file (inline CSS and SVG, no scripts, no external
//! assets) for a run or a sweep.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quetta_metrics::series::{Second, SeriesBuilder};
use quetta_metrics::Metric;

use crate::chart::{svg, Chart, Series};
use crate::{ReportError, RunDir, Summary, SweepReport};

/// A run's results as read back from its directory: what its reports draw. The CDFs come
/// from the summary's histograms and the over-time charts from the time series, so a
/// report holds no record, whatever the number of requests.
#[derive(Debug, Clone)]
pub struct RunData {
    pub dir: PathBuf,
    pub summary: Summary,
    pub series: Vec<Second>,
}

/// A sweep: its sweep.json and each step's run.
#[derive(Debug, Clone)]
pub struct SweepData {
    pub dir: PathBuf,
    pub sweep: SweepReport,
    pub steps: Vec<RunData>,
}

/// A repeated run: its repeats.json and each whole repeat's run.
#[derive(Debug, Clone)]
pub struct RepeatsData {
    pub dir: PathBuf,
    pub report: crate::RepeatsReport,
    pub runs: Vec<RunData>,
}

/// What a results directory holds.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Results {
    Run(Box<RunData>),
    Sweep(Box<SweepData>),
    Repeats(Box<RepeatsData>),
}

/// Read a run directory (summary.json and timeseries.jsonl). A series of schema 1 has no
/// ITL per second: it is filled in from one streamed pass over requests.jsonl.
pub fn load_run(dir: &Path) -> Result<RunData, ReportError> {
    let d = RunDir::open(dir)?;
    let summary = d.read_summary()?;
    let mut series = d.read_series()?;
    let gaps = summary.metrics.itl_ms.count > 0;
    if gaps && series.iter().all(|s| s.itl_mean_ms.is_none()) {
        let (parts, _) = d.fold_records(SeriesBuilder::default, |b, r| b.add(&r))?;
        let mut b = SeriesBuilder::default();
        for p in &parts {
            b.merge(p);
        }
        let rebuilt = b.finish();
        for s in &mut series {
            s.itl_mean_ms = rebuilt.get(s.t_s as usize).and_then(|x| x.itl_mean_ms);
        }
    }
    Ok(RunData { dir: dir.to_path_buf(), summary, series })
}

/// Read a run, a sweep or a repeated run's directory.
pub fn load(dir: &Path) -> Result<Results, ReportError> {
    let d = RunDir::open(dir)?;
    if d.is_repeats() {
        let report = d.read_repeats()?;
        let runs = (1..=report.runs.len())
            .filter(|i| !report.runs[i - 1].partial)
            .map(|i| load_run(&dir.join(format!("run-{i}"))))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Results::Repeats(Box::new(RepeatsData {
            dir: dir.to_path_buf(),
            report,
            runs,
        })));
    }
    if d.is_sweep() {
        let sweep = d.read_sweep()?;
        let mut steps = Vec::new();
        for st in &sweep.steps {
            let p = PathBuf::from(&st.dir);
            // Step directories are recorded as given; read them relative to the sweep when moved.
            let p = if p.exists() { p } else { dir.join(p.file_name().unwrap_or_default()) };
            steps.push(load_run(&p)?);
        }
        return Ok(Results::Sweep(Box::new(SweepData { dir: dir.to_path_buf(), sweep, steps })));
    }
    Ok(Results::Run(Box::new(load_run(dir)?)))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn ms(v: Option<f64>) -> String {
    crate::chart::figure(v)
}

/// Seconds of per-second series a run needs before its over-time charts say anything.
const MIN_SECONDS_FOR_SERIES: usize = 5;

fn line(title: &str, x: &str, y: &str, series: Vec<Series>, markers: bool) -> Chart {
    Chart { title: title.into(), x_label: x.into(), y_label: y.into(), series, markers }
}

fn named(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series { name: name.into(), points }
}

/// Only the charts with data, and in them only the series with data.
fn drawable(mut charts: Vec<Chart>) -> Vec<Chart> {
    for c in &mut charts {
        c.series.retain(|s| !s.points.is_empty());
    }
    charts.retain(|c| !c.series.is_empty());
    charts
}

/// Points of a CDF chart.
const CDF_POINTS: usize = 400;

/// The charts of one run (also drawn by the PDF report): each latency on its own axis,
/// over-time charts only for runs of at least 5 s, and no chart without data.
pub fn run_charts(r: &RunData) -> Vec<Chart> {
    let agg = &r.summary.aggregate;
    let cdf = |m: Metric| agg.cdf(m, CDF_POINTS);
    let share = "share of requests";
    let mut charts = vec![
        line(
            "TTFT CDF",
            "time to first token (ms)",
            share,
            vec![named("TTFT", cdf(Metric::Ttft))],
            false,
        ),
        line(
            "E2E latency CDF",
            "end-to-end latency (ms)",
            share,
            vec![named("E2E", cdf(Metric::E2e))],
            false,
        ),
        line(
            "TPOT and ITL CDF",
            "time per token (ms)",
            "share",
            vec![
                named("TPOT (per request)", cdf(Metric::Tpot)),
                named("ITL (every gap)", cdf(Metric::Itl)),
            ],
            false,
        ),
    ];
    if r.summary.target.kind.generates() {
        if r.series.len() >= MIN_SECONDS_FOR_SERIES {
            charts.extend(over_time(r));
        }
    } else {
        // an embedding or a ranking: no token, a latency per input instead
        charts.insert(
            2,
            line(
                "E2E per input CDF",
                "end-to-end latency per input (ms)",
                share,
                vec![named("E2E per input", cdf(Metric::PerInput))],
                false,
            ),
        );
        if r.series.len() >= MIN_SECONDS_FOR_SERIES {
            charts.extend(over_time(r).into_iter().filter(|c| c.title.starts_with("Throughput")));
        }
    }
    drawable(charts)
}

/// TTFT, ITL, throughput and load per second of the run; the last, partial second's counts
/// are divided by its length, so a run ending 0.2 s into a second shows no false drop.
fn over_time(r: &RunData) -> Vec<Chart> {
    let t = "time since start (s)";
    let end = r.summary.metrics.duration_s;
    let per_s = |t_s: u64, n: u64| {
        let len = (end - t_s as f64).clamp(0.0, 1.0);
        if len > 0.05 {
            n as f64 / len
        } else {
            n as f64
        }
    };
    let mean = |f: fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
        r.series.iter().filter_map(|s| f(s).map(|v| (s.t_s as f64 + 0.5, v))).collect()
    };
    let done = r.series.iter().map(|s| (s.t_s as f64 + 0.5, per_s(s.t_s, s.completed))).collect();
    let tokens =
        r.series.iter().map(|s| (s.t_s as f64 + 0.5, per_s(s.t_s, s.output_tokens))).collect();
    let in_flight = r.series.iter().map(|s| (s.t_s as f64, s.in_flight as f64)).collect();
    vec![
        line(
            "TTFT over time",
            t,
            "mean TTFT (ms)",
            vec![named("TTFT", mean(|s| s.ttft_mean_ms))],
            false,
        ),
        line(
            "ITL over time",
            t,
            "mean ITL (ms)",
            vec![named("ITL", mean(|s| s.itl_mean_ms))],
            false,
        ),
        line(
            "Output tokens over time",
            t,
            "output tokens per second",
            vec![named("output tok/s", tokens)],
            false,
        ),
        line(
            "Throughput and load over time",
            t,
            "per second / requests",
            vec![named("completed per s", done), named("in flight", in_flight)],
            false,
        ),
    ]
}

/// The charts of a sweep (also drawn by the PDF report): throughput, each latency's p50 and
/// p99 on its own axis, the latency–throughput trade-off, and the CDFs of every step
/// overlaid.
pub fn sweep_charts(s: &SweepData) -> Vec<Chart> {
    let kind = s.sweep.kind.as_str();
    let unit =
        if kind == "rate" { "request rate (req/s)" } else { "concurrency (requests in flight)" };
    let pts = |k: &str| -> Vec<(f64, f64)> {
        s.sweep.steps.iter().filter_map(|st| Some((st.value(), st.column(k)?))).collect()
    };
    let pair = |metric: &str, key: &str| {
        let (p50, p99) = (format!("{key}_p50_ms"), format!("{key}_p99_ms"));
        line(
            &format!("{metric} vs {kind}"),
            unit,
            &format!("{metric} (ms)"),
            vec![
                named(&format!("{metric} p50"), pts(&p50)),
                named(&format!("{metric} p99"), pts(&p99)),
            ],
            true,
        )
    };
    // per user: the tokens a stream receives per second, 1000 / TPOT p50 (docs/METRICS.md)
    let trade: Vec<(f64, f64)> = s
        .sweep
        .steps
        .iter()
        .filter_map(|st| {
            Some((st.output_token_throughput, 1e3 / st.tpot_p50_ms.filter(|t| *t > 0.0)?))
        })
        .collect();
    let label = |i: usize| {
        s.sweep.steps.get(i).map_or(format!("step {}", i + 1), |st| {
            format!("{kind} {}", crate::chart::figure(Some(st.value())))
        })
    };
    let step_cdf = |m: Metric| -> Vec<Series> {
        s.steps
            .iter()
            .enumerate()
            .map(|(i, r)| named(&label(i), r.summary.aggregate.cdf(m, CDF_POINTS)))
            .collect()
    };
    // steps that embed or rank count inputs, not output tokens
    let volume = if s.sweep.counts_inputs() {
        line(
            &format!("Inputs vs {kind}"),
            unit,
            "inputs per second",
            vec![named("inputs/s", pts("input_throughput"))],
            true,
        )
    } else {
        line(
            &format!("Output tokens vs {kind}"),
            unit,
            "output tokens per second",
            vec![named("output tok/s", pts("output_token_throughput"))],
            true,
        )
    };
    drawable(vec![
        line(
            &format!("Throughput vs {kind}"),
            unit,
            "requests per second",
            vec![named("request throughput", pts("request_throughput"))],
            true,
        ),
        volume,
        pair("TTFT", "ttft"),
        pair("ITL", "itl"),
        pair("TPOT", "tpot"),
        pair("E2E", "e2e"),
        pair("E2E per input", "per_input"),
        line(
            "Latency–throughput trade-off",
            "total output tokens per second",
            "output tokens per second per user",
            vec![named("steps", trade)],
            true,
        ),
        line(
            "TTFT CDF by step",
            "time to first token (ms)",
            "share of requests",
            step_cdf(Metric::Ttft),
            false,
        ),
        line(
            "E2E latency CDF by step",
            "end-to-end latency (ms)",
            "share of requests",
            step_cdf(Metric::E2e),
            false,
        ),
        line(
            "E2E per input CDF by step",
            "end-to-end latency per input (ms)",
            "share of requests",
            step_cdf(Metric::PerInput),
            false,
        ),
    ])
}

fn metric_table_html(s: &mut String, sum: &crate::Summary) {
    s.push_str("<table><tr><th>latency (ms)</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th></tr>");
    for (name, st) in crate::terminal::latency_rows(sum) {
        let _ = write!(
            s,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            st.count, ms(st.mean), ms(st.p50), ms(st.p90), ms(st.p95), ms(st.p99), ms(st.p999), ms(st.max)
        );
    }
    s.push_str("</table>");
}

/// The steady window and its figures beside the whole run's (docs/METRICS.md, Steady state).
fn steady_html(s: &mut String, sum: &Summary) {
    let Some((head, rows)) = crate::terminal::steady_view(sum) else { return };
    let _ = write!(s, "<p class=\"steady\"><b>Steady state:</b> {}</p>", esc(&head));
    if rows.is_empty() {
        return;
    }
    s.push_str(
        "<table class=\"steady\"><tr><th></th><th>steady window</th><th>whole run</th></tr>",
    );
    for [name, x, y] in rows {
        let _ =
            write!(s, "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", esc(&name), esc(&x), esc(&y));
    }
    s.push_str("</table>");
}

fn config_table(s: &mut String, sum: &Summary) {
    s.push_str("<table class=\"kv\">");
    let t = &sum.target;
    let _ = write!(
        s,
        "<tr><td>target</td><td>{} {} ({}), model {}</td></tr>",
        esc(&t.backend),
        esc(&t.base_url),
        esc(&t.endpoint),
        esc(&t.model)
    );
    if let Ok(serde_json::Value::Object(o)) = serde_json::to_value(&sum.config) {
        for (k, v) in &o {
            if v.is_null() {
                continue;
            }
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(k),
                esc(&crate::terminal::setting_text(v))
            );
        }
    }
    s.push_str("</table>");
}

fn errors_table(s: &mut String, m: &quetta_metrics::MetricsSummary) {
    if m.errors.is_empty() {
        s.push_str("<p>No errors.</p>");
        return;
    }
    s.push_str("<table><tr><th>error kind</th><th>requests</th></tr>");
    for (k, v) in &m.errors {
        let _ = write!(s, "<tr><td>{}</td><td>{v}</td></tr>", esc(k));
    }
    s.push_str("</table>");
    if !m.top_errors.is_empty() {
        s.push_str("<table class=\"kv\"><tr><th>requests</th><th>kind</th><th>most frequent messages, in the server's words</th></tr>");
        for e in &m.top_errors {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                e.count,
                esc(&e.kind),
                esc(&e.message)
            );
        }
        s.push_str("</table>");
    }
}

/// A banner for a run cut short or a run that failed as a whole (empty otherwise).
fn banner(s: &mut String, sum: &Summary) {
    if let Some(p) = crate::partial_label(sum) {
        let _ = write!(s, "<p class=\"banner\">{}</p>", esc(&p));
    }
    if let Some(f) = crate::failed_label(sum) {
        let _ = write!(s, "<p class=\"banner\">{}</p>", esc(&f));
    }
}

const CSS: &str = "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1000px;color:#222}h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}.kv td{text-align:left}.hl{display:flex;flex-wrap:wrap;gap:10px}.hl div{border:1px solid #ccc;border-radius:4px;padding:8px 12px;min-width:140px}.hl b{display:block;font-size:18px}svg{display:block;margin:8px 0}.note{color:#a33}.banner{background:#fde8e8;border:1px solid #c33;color:#900;font-weight:bold;padding:8px 12px}code{white-space:pre-wrap}";

fn highlights(s: &mut String, items: &[(String, String)]) {
    s.push_str("<div class=\"hl\">");
    for (k, v) in items {
        let _ = write!(s, "<div><b>{}</b>{}</div>", esc(v), esc(k));
    }
    s.push_str("</div>");
}

/// Highlights of a run: (label, value); of generation, or (embeddings, rankings) of inputs.
pub fn run_highlights(sum: &crate::Summary) -> Vec<(String, String)> {
    let m = &sum.metrics;
    let mut v = vec![
        ("requests completed / failed".into(), format!("{} / {}", m.completed, m.failed)),
        ("requests per second".into(), format!("{:.2}", m.request_throughput)),
    ];
    if !sum.target.kind.generates() {
        let per_input = m.per_input_ms.as_ref().and_then(|s| s.p50);
        v.extend([
            ("inputs per second".into(), format!("{:.1}", m.input_throughput)),
            ("input tokens per second".into(), format!("{:.1}", m.input_token_throughput)),
            ("E2E p50 / p99 (ms)".into(), format!("{} / {}", ms(m.e2e_ms.p50), ms(m.e2e_ms.p99))),
            ("E2E per input p50 (ms)".into(), ms(per_input)),
        ]);
        return v;
    }
    v.extend([
        ("output tokens per second".into(), format!("{:.1}", m.output_token_throughput)),
        ("TTFT p50 / p99 (ms)".into(), format!("{} / {}", ms(m.ttft_ms.p50), ms(m.ttft_ms.p99))),
        ("TPOT p50 (ms)".into(), ms(m.tpot_ms.p50)),
        ("E2E p99 (ms)".into(), ms(m.e2e_ms.p99)),
    ]);
    if m.total_audio_s > 0.0 {
        v.push(("seconds of audio per second (RTFx)".into(), format!("{:.2}", m.rtfx)));
    }
    v
}

fn run_section(s: &mut String, r: &RunData, heading: &str) {
    let m = &r.summary.metrics;
    let _ = write!(s, "<h2>{}</h2>", esc(heading));
    banner(s, &r.summary);
    if m.completed == 0 {
        // nothing was measured: the errors are the result, and there is nothing to draw
        s.push_str("<h3>Errors</h3>");
        errors_table(s, m);
        for n in &r.summary.notes {
            let _ = write!(s, "<p class=\"note\">{}</p>", esc(&n.to_string()));
        }
        return;
    }
    highlights(s, &run_highlights(&r.summary));
    metric_table_html(s, &r.summary);
    steady_html(s, &r.summary);
    for c in run_charts(r) {
        s.push_str(&svg(&c, 940.0, 300.0));
    }
    s.push_str("<h3>Errors</h3>");
    errors_table(s, m);
    for n in &r.summary.notes {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(&n.to_string()));
    }
}

/// Hover a point to read it (its `<title>`, written into the chart's readout line and the
/// point enlarged), click a legend entry to hide or show its series. `data-rendered` on
/// each chart counts the points the browser parsed, and `data-error` on the body holds a
/// script error (the browser test reads both, and hovers and clicks).
const SCRIPT: &str = r#"<script>
window.addEventListener('error', function (e) { document.body.dataset.error = String(e.message); });
document.querySelectorAll('svg').forEach(function (svg) {
  var n = 0;
  svg.querySelectorAll('g.series polyline').forEach(function (p) { n += p.points.numberOfItems; });
  svg.dataset.rendered = n;
  var ro = document.createElementNS('http://www.w3.org/2000/svg', 'text');
  ro.setAttribute('class', 'readout');
  // top right, clear of the title on the left and the legend row below it
  ro.setAttribute('x', String(svg.viewBox.baseVal.width - 10));
  ro.setAttribute('y', '14');
  ro.setAttribute('text-anchor', 'end');
  svg.appendChild(ro);
  svg.querySelectorAll('g.series circle').forEach(function (c) {
    var op = c.getAttribute('fill-opacity');
    c.addEventListener('mouseover', function () {
      ro.textContent = c.querySelector('title').textContent;
      c.setAttribute('r', '5');
      c.setAttribute('fill-opacity', '1');
    });
    c.addEventListener('mouseout', function () {
      ro.textContent = '';
      c.setAttribute('r', '3');
      c.setAttribute('fill-opacity', op);
    });
  });
  svg.querySelectorAll('g.legend').forEach(function (l) {
    l.addEventListener('click', function () {
      var g = svg.querySelector('g.series[data-series="' + l.dataset.series + '"]');
      var hidden = g.style.display === 'none';
      g.style.display = hidden ? '' : 'none';
      l.style.opacity = hidden ? 1 : 0.35;
    });
  });
});
document.body.dataset.ready = '1';
</script>"#;

/// `label` and `metadata` of a run, as one line (empty when it has neither).
fn tags(sum: &Summary) -> String {
    let c = &sum.config;
    let mut parts: Vec<String> = c.label.iter().map(|l| format!("label {l}")).collect();
    parts.extend(c.metadata.iter().map(|(k, v)| format!("{k}={v}")));
    parts.join(" · ")
}

/// The whole HTML document: the summary first, the configuration last.
pub fn render(res: &Results) -> String {
    let mut s = String::new();
    let title = match res {
        Results::Run(r) => format!("Quetta run — {}", r.summary.target.model),
        Results::Sweep(sw) => format!(
            "Quetta sweep — {}",
            sw.steps.first().map_or("", |r| r.summary.target.model.as_str())
        ),
        Results::Repeats(rp) => format!(
            "Quetta repeated run — {}",
            rp.runs.first().map_or("", |r| r.summary.target.model.as_str())
        ),
    };
    let _ = write!(s, "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body><h1>{}</h1>", esc(&title), esc(&title));
    match res {
        Results::Run(r) => {
            let t = &r.summary.target;
            let _ = write!(
                s,
                "<p>{} {} ({}) · started {} · {} {}</p>",
                esc(&t.backend),
                esc(&t.base_url),
                esc(&t.endpoint),
                esc(&r.summary.started_at),
                esc(&r.summary.tool),
                esc(&r.summary.tool_version)
            );
            let tags = tags(&r.summary);
            if !tags.is_empty() {
                let _ = write!(s, "<p>{}</p>", esc(&tags));
            }
            run_section(&mut s, r, "Results");
            s.push_str("<h2>Configuration</h2>");
            config_table(&mut s, &r.summary);
        }
        Results::Sweep(sw) => sweep_body(&mut s, sw),
        Results::Repeats(rp) => repeats_body(&mut s, rp),
    }
    s.push_str(SCRIPT);
    s.push_str("</body></html>\n");
    s
}

/// The figures of a repeated run that its charts draw: (chart title, y label, figure).
const REPEAT_CHARTS: [(&str, &str, &str); 4] = [
    ("Throughput by repeat", "requests per second", "request_throughput"),
    ("TTFT p99 by repeat", "time to first token (ms)", "ttft_ms.p99"),
    ("TPOT p99 by repeat", "time per output token (ms)", "tpot_ms.p99"),
    ("E2E p99 by repeat", "end-to-end latency (ms)", "e2e_ms.p99"),
];

/// Each figure's value per repeat, with its mean and the 95 % interval of the mean as flat
/// lines across the repeats: the error bars of a repeated run (HTML and PDF draw the same).
pub fn repeat_charts(r: &crate::RepeatsReport) -> Vec<Chart> {
    let charts = REPEAT_CHARTS.iter().map(|(title, y, figure)| {
        let mut series = Vec::new();
        if let Some(f) = r.figure(figure) {
            let pts: Vec<(f64, f64)> = f
                .values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.map(|v| ((i + 1) as f64, v)))
                .collect();
            let n = pts.len() as f64;
            let flat = |v: Option<f64>| v.map_or(Vec::new(), |v| vec![(1.0, v), (n.max(1.0), v)]);
            series.push(named("each repeat", pts));
            series.push(named("mean", flat(Some(f.across.mean))));
            series.push(named("95% CI of the mean, low", flat(f.across.ci95_low)));
            series.push(named("95% CI of the mean, high", flat(f.across.ci95_high)));
        }
        line(title, "repeat", y, series, true)
    });
    drawable(charts.collect())
}

fn repeats_body(s: &mut String, rp: &RepeatsData) {
    let r = &rp.report;
    let whole = r.runs.iter().filter(|x| !x.partial).count();
    let _ = write!(
        s,
        "<p>{whole} of {} repeats ran to their end · prompts {}</p>",
        r.planned,
        if r.same_prompts { "the same in every repeat" } else { "fresh in every repeat" }
    );
    if r.partial {
        let _ = write!(
            s,
            "<p class=\"banner\">PARTIAL: {whole} of {} repeats ran to their end</p>",
            r.planned
        );
    }
    if let Some(u) = &r.until_ci {
        let met = if u.met { "met" } else { "NOT met within the planned repeats" };
        let _ = write!(
            s,
            "<p>until the 95% intervals of {} are within ±{:.1}% of their means: {met}</p>",
            esc(&u.figures.join(", ")),
            u.half_width * 100.0
        );
    }
    s.push_str("<h2>Across the repeats</h2><table><tr><th>figure</th><th>mean</th><th>stddev</th><th>CV</th><th>95% CI of the mean</th><th>each repeat</th></tr>");
    for f in &r.figures {
        let each: Vec<String> = f.values.iter().map(|v| ms(*v)).collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&f.figure),
            ms(Some(f.across.mean)),
            ms(f.across.stddev),
            f.cv_text(),
            f.ci_text(|v| ms(Some(v))),
            each.join(" · ")
        );
    }
    s.push_str("</table>");
    for c in repeat_charts(r) {
        s.push_str(&svg(&c, 940.0, 300.0));
    }
    for (i, run) in rp.runs.iter().enumerate() {
        run_section(s, run, &format!("Repeat {}", i + 1));
    }
    if let Some(first) = rp.runs.first() {
        s.push_str("<h2>Configuration</h2>");
        config_table(s, &first.summary);
    }
}

/// The first SLO-bearing step whose objectives failed, as "KIND VALUE: why".
pub(crate) fn slo_break(sw: &SweepData) -> Option<String> {
    let kind = sw.sweep.kind.as_str();
    sw.steps.iter().zip(&sw.sweep.steps).find_map(|(r, st)| {
        let v = r.summary.metrics.slo_verdict.as_ref()?;
        (!v.pass).then(|| format!("{kind} {}: {}", ms(Some(st.value())), crate::verdict_line(v)))
    })
}

/// The body of a sweep's report: a one-page summary (target, what was swept, the peak,
/// where SLOs broke), the sweep table and charts, each step, the configuration last.
fn sweep_body(s: &mut String, sw: &SweepData) {
    let kind = sw.sweep.kind.as_str();
    let values: Vec<String> = sw.sweep.steps.iter().map(|st| ms(Some(st.value()))).collect();
    if let Some(f) = &sw.sweep.failed {
        let _ = write!(s, "<p class=\"banner\">FAILED: {}</p>", esc(f));
    }
    s.push_str("<h2>Summary</h2><table class=\"kv\">");
    if let Some(first) = sw.steps.first() {
        let t = &first.summary.target;
        let _ = write!(
            s,
            "<tr><td>target</td><td>{} {} ({}), model {}</td></tr>",
            esc(&t.backend),
            esc(&t.base_url),
            esc(&t.endpoint),
            esc(&t.model)
        );
        let _ = write!(s, "<tr><td>started</td><td>{}</td></tr>", esc(&first.summary.started_at));
        let tags = tags(&first.summary);
        if !tags.is_empty() {
            let _ = write!(s, "<tr><td>tags</td><td>{}</td></tr>", esc(&tags));
        }
    }
    let _ = write!(
        s,
        "<tr><td>swept</td><td>{kind} {} ({} step{})</td></tr>",
        esc(&values.join(", ")),
        values.len(),
        if values.len() == 1 { "" } else { "s" }
    );
    let _ = write!(
        s,
        "<tr><td>peak</td><td>{}</td></tr>",
        sw.sweep.peak.as_ref().map_or("none (no step ran to its end)".into(), |p| format!(
            "{:.2} req/s, {} at {kind} {}",
            p.request_throughput,
            p.volume(),
            ms(Some(p.value()))
        ))
    );
    let slo = match slo_break(sw) {
        Some(b) => format!("first broken at {b}"),
        None if sw.steps.iter().any(|r| r.summary.metrics.slo_verdict.is_some()) => {
            "met at every step".into()
        }
        None => "none given".into(),
    };
    let _ = write!(s, "<tr><td>SLOs</td><td>{}</td></tr>", esc(&slo));
    let _ = write!(s, "<tr><td>errors</td><td>{}</td></tr></table>", sw.sweep.total_errors);
    for n in &sw.sweep.notes {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(&n.to_string()));
    }
    s.push_str("<h2>Sweep</h2><table><tr>");
    for h in std::iter::once(kind).chain(sw.sweep.columns().iter().map(|c| c.0)) {
        let _ = write!(s, "<th>{h}</th>");
    }
    s.push_str("</tr>");
    for st in &sw.sweep.steps {
        s.push_str("<tr>");
        for k in std::iter::once(kind).chain(sw.sweep.columns().iter().map(|c| c.1)) {
            let _ = write!(s, "<td>{}</td>", ms(st.column(k)));
        }
        if let Some(p) = st.partial_label() {
            let _ = write!(s, "<td class=\"note\">{p}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    for c in sweep_charts(sw) {
        s.push_str(&svg(&c, 940.0, 300.0));
    }
    for (i, r) in sw.steps.iter().enumerate() {
        let label = ms(sw.sweep.steps.get(i).map(crate::SweepStep::value));
        run_section(s, r, &format!("Step {} — {kind} {label}", i + 1));
    }
    if let Some(first) = sw.steps.first() {
        s.push_str("<h2>Configuration</h2><p>Of the first step; each step sets its own load.</p>");
        config_table(s, &first.summary);
    }
}

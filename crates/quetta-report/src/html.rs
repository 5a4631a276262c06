//! `report.html`: one self-contained file (inline CSS and SVG, no scripts, no external
//! assets) for a run or a sweep.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quetta_metrics::series::Second;
use quetta_metrics::{RequestRecord, Stats};

use crate::chart::{cdf, svg, Chart, Series};
use crate::{ReportError, RunDir, Summary, SweepReport};

/// A run's results as read back from its directory.
#[derive(Debug, Clone)]
pub struct RunData {
    pub dir: PathBuf,
    pub summary: Summary,
    pub records: Vec<RequestRecord>,
    pub series: Vec<Second>,
}

/// A sweep: its sweep.json and each step's run.
#[derive(Debug, Clone)]
pub struct SweepData {
    pub dir: PathBuf,
    pub sweep: SweepReport,
    pub steps: Vec<RunData>,
}

/// What a results directory holds.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Results {
    Run(Box<RunData>),
    Sweep(Box<SweepData>),
}

/// Read a run directory (summary.json, requests.jsonl, timeseries.jsonl).
pub fn load_run(dir: &Path) -> Result<RunData, ReportError> {
    let d = RunDir::open(dir)?;
    Ok(RunData {
        dir: dir.to_path_buf(),
        summary: d.read_summary()?,
        records: d.read_records()?.records,
        series: d.read_series()?,
    })
}

/// Read a run or a sweep directory.
pub fn load(dir: &Path) -> Result<Results, ReportError> {
    let d = RunDir::open(dir)?;
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

/// The charts of one run (also drawn by the PDF report).
pub fn run_charts(r: &RunData) -> Vec<Chart> {
    let ok: Vec<&RequestRecord> = r.records.iter().filter(|x| x.ok()).collect();
    let vals =
        |f: fn(&RequestRecord) -> Option<f64>| ok.iter().filter_map(|x| f(x)).collect::<Vec<f64>>();
    let mut charts = vec![
        Chart {
            title: "Latency CDF".into(),
            x_label: "latency (ms)".into(),
            y_label: "share of requests".into(),
            series: vec![
                Series { name: "TTFT".into(), points: cdf(&vals(|x| x.ttft_ms)) },
                Series { name: "E2E".into(), points: cdf(&vals(|x| x.e2e_ms)) },
            ],
            markers: false,
        },
        Chart {
            title: "TPOT and ITL CDF".into(),
            x_label: "time per token (ms)".into(),
            y_label: "share".into(),
            series: vec![
                Series { name: "TPOT (per request)".into(), points: cdf(&vals(|x| x.tpot_ms)) },
                Series {
                    name: "ITL (every gap)".into(),
                    points: cdf(&ok
                        .iter()
                        .flat_map(|x| x.itl_ms.iter().copied())
                        .collect::<Vec<_>>()),
                },
            ],
            markers: false,
        },
    ];
    if !r.series.is_empty() {
        charts.push(Chart {
            title: "TTFT over time".into(),
            x_label: "time since start (s)".into(),
            y_label: "mean TTFT (ms)".into(),
            series: vec![Series {
                name: "TTFT".into(),
                points: r
                    .series
                    .iter()
                    .filter_map(|s| s.ttft_mean_ms.map(|t| (s.t_s as f64 + 0.5, t)))
                    .collect(),
            }],
            markers: false,
        });
        // ITL over time: the gaps of completed requests, by the second they ended in.
        let mut sum = vec![0.0; r.series.len() + 1];
        let mut n = vec![0u64; r.series.len() + 1];
        for x in &ok {
            let (Some(first), false) = (x.first_token_offset_ms, x.itl_ms.is_empty()) else {
                continue;
            };
            let mut t = first;
            for g in &x.itl_ms {
                t += g;
                let k = ((t / 1e3) as usize).min(sum.len() - 1);
                sum[k] += g;
                n[k] += 1;
            }
        }
        charts.push(Chart {
            title: "ITL over time".into(),
            x_label: "time since start (s)".into(),
            y_label: "mean ITL (ms)".into(),
            series: vec![Series {
                name: "ITL".into(),
                points: (0..sum.len())
                    .filter(|&k| n[k] > 0)
                    .map(|k| (k as f64 + 0.5, sum[k] / n[k] as f64))
                    .collect(),
            }],
            markers: false,
        });
        charts.push(Chart {
            title: "Throughput and load over time".into(),
            x_label: "time since start (s)".into(),
            y_label: "per second / requests".into(),
            series: vec![
                Series {
                    name: "completed per s".into(),
                    points: r
                        .series
                        .iter()
                        .map(|s| (s.t_s as f64 + 0.5, s.completed as f64))
                        .collect(),
                },
                Series {
                    name: "in flight".into(),
                    points: r.series.iter().map(|s| (s.t_s as f64, s.in_flight as f64)).collect(),
                },
            ],
            markers: false,
        });
    }
    charts
}

/// The charts of a sweep (also drawn by the PDF report).
pub fn sweep_charts(s: &SweepData) -> Vec<Chart> {
    let kind = s.sweep.kind.as_str();
    let unit =
        if kind == "rate" { "request rate (req/s)" } else { "concurrency (requests in flight)" };
    let pts = |k: &str| -> Vec<(f64, f64)> {
        s.sweep.steps.iter().filter_map(|st| Some((st.value(), st.column(k)?))).collect()
    };
    vec![
        Chart {
            title: format!("Throughput vs {kind}"),
            x_label: unit.into(),
            y_label: "requests per second".into(),
            series: vec![Series {
                name: "request throughput".into(),
                points: pts("request_throughput"),
            }],
            markers: true,
        },
        Chart {
            title: format!("Output tokens vs {kind}"),
            x_label: unit.into(),
            y_label: "output tokens per second".into(),
            series: vec![Series {
                name: "output tok/s".into(),
                points: pts("output_token_throughput"),
            }],
            markers: true,
        },
        Chart {
            title: format!("Latency vs {kind}"),
            x_label: unit.into(),
            y_label: "latency (ms)".into(),
            series: vec![
                Series { name: "TTFT p50".into(), points: pts("ttft_p50_ms") },
                Series { name: "E2E p50".into(), points: pts("e2e_p50_ms") },
                Series { name: "E2E p99".into(), points: pts("e2e_p99_ms") },
            ],
            markers: true,
        },
    ]
}

fn stats_rows(m: &quetta_metrics::MetricsSummary) -> Vec<(&'static str, &Stats)> {
    vec![
        ("TTFT", &m.ttft_ms),
        ("TPOT", &m.tpot_ms),
        ("ITL (pooled)", &m.itl_ms),
        ("E2E", &m.e2e_ms),
        ("TTFT from intended send", &m.ttft_from_intended_ms),
        ("E2E from intended send", &m.e2e_from_intended_ms),
        ("Queue", &m.queue_ms),
        ("Schedule lag", &m.schedule_lag_ms),
    ]
}

fn metric_table_html(s: &mut String, m: &quetta_metrics::MetricsSummary) {
    s.push_str("<table><tr><th>latency (ms)</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th></tr>");
    for (name, st) in stats_rows(m) {
        if st.count == 0 {
            continue;
        }
        let _ = write!(
            s,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            st.count, ms(st.mean), ms(st.p50), ms(st.p90), ms(st.p95), ms(st.p99), ms(st.p999), ms(st.max)
        );
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
                esc(v.to_string().trim_matches('"'))
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

/// A banner for a run cut short or a run in which every request failed (empty otherwise).
fn banner(s: &mut String, sum: &Summary) {
    if let Some(p) = crate::partial_label(sum) {
        let _ = write!(s, "<p class=\"banner\">{}</p>", esc(&p));
    }
    let m = &sum.metrics;
    if m.completed == 0 && m.failed > 0 {
        let _ = write!(
            s,
            "<p class=\"banner\">FAILED: every one of the {} measured requests failed</p>",
            m.failed
        );
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

/// Highlights of a run: (label, value).
pub fn run_highlights(m: &quetta_metrics::MetricsSummary) -> Vec<(String, String)> {
    vec![
        ("requests completed / failed".into(), format!("{} / {}", m.completed, m.failed)),
        ("requests per second".into(), format!("{:.2}", m.request_throughput)),
        ("output tokens per second".into(), format!("{:.1}", m.output_token_throughput)),
        ("TTFT p50 / p99 (ms)".into(), format!("{} / {}", ms(m.ttft_ms.p50), ms(m.ttft_ms.p99))),
        ("TPOT p50 (ms)".into(), ms(m.tpot_ms.p50)),
        ("E2E p99 (ms)".into(), ms(m.e2e_ms.p99)),
    ]
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
            let _ = write!(s, "<p class=\"note\">{}</p>", esc(n));
        }
        return;
    }
    highlights(s, &run_highlights(m));
    metric_table_html(s, m);
    for c in run_charts(r) {
        s.push_str(&svg(&c, 940.0, 300.0));
    }
    s.push_str("<h3>Errors</h3>");
    errors_table(s, m);
    for n in &r.summary.notes {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(n));
    }
}

/// The whole HTML document.
pub fn render(res: &Results) -> String {
    let mut s = String::new();
    let title = match res {
        Results::Run(r) => format!("Quetta run — {}", r.summary.target.model),
        Results::Sweep(sw) => format!(
            "Quetta sweep — {}",
            sw.steps.first().map_or("", |r| r.summary.target.model.as_str())
        ),
    };
    let _ = write!(s, "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body><h1>{}</h1>", esc(&title), esc(&title));
    match res {
        Results::Run(r) => {
            let _ = write!(
                s,
                "<p>Started {} · {} {}</p>",
                esc(&r.summary.started_at),
                esc(&r.summary.tool),
                esc(&r.summary.tool_version)
            );
            run_section(&mut s, r, "Results");
            s.push_str("<h2>Configuration</h2>");
            config_table(&mut s, &r.summary);
        }
        Results::Sweep(sw) => sweep_body(&mut s, sw),
    }
    s.push_str("</body></html>\n");
    s
}

/// The body of a sweep's report: highlights, the sweep table and charts, then each step.
fn sweep_body(s: &mut String, sw: &SweepData) {
    let kind = sw.sweep.kind.as_str();
    if let Some(first) = sw.steps.first() {
        let _ = write!(
            s,
            "<p>Started {} · {} steps</p>",
            esc(&first.summary.started_at),
            sw.steps.len()
        );
        s.push_str("<h2>Configuration</h2><p>Of the first step; each step sets its own load.</p>");
        config_table(s, &first.summary);
    }
    s.push_str("<h2>Highlights</h2>");
    let peak = sw.sweep.peak.as_ref();
    highlights(
        s,
        &[
            (
                format!(
                    "peak requests per second (at {kind} {})",
                    ms(peak.map(crate::SweepStep::value))
                ),
                format!("{:.2}", peak.map_or(0.0, |p| p.request_throughput)),
            ),
            (
                "peak output tokens per second".into(),
                format!(
                    "{:.1}",
                    sw.sweep.steps.iter().map(|x| x.output_token_throughput).fold(0.0, f64::max)
                ),
            ),
            ("total errors".into(), sw.sweep.total_errors.to_string()),
        ],
    );
    s.push_str("<h2>Sweep</h2><table><tr>");
    for h in std::iter::once(kind).chain(crate::chart::SWEEP_COLUMNS.iter().map(|c| c.0)) {
        let _ = write!(s, "<th>{h}</th>");
    }
    s.push_str("</tr>");
    for st in &sw.sweep.steps {
        s.push_str("<tr>");
        for k in std::iter::once(kind).chain(crate::chart::SWEEP_COLUMNS.iter().map(|c| c.1)) {
            let _ = write!(s, "<td>{}</td>", ms(st.column(k)));
        }
        if st.partial {
            let ended = st.completed + st.failed;
            let of = st.planned.map_or(String::new(), |p| format!(": {ended} of {p}"));
            let _ = write!(s, "<td class=\"note\">PARTIAL{of}</td>");
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
}

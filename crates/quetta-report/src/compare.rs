//! `compare`: per-metric deltas of two runs, with bootstrap confidence intervals of the
//! difference of medians and Mann-Whitney U tests over their per-request values
//! (`quetta_metrics::stats`), a regression verdict, and `compare.json`.

use std::fmt::Write as _;
use std::time::Duration;

use quetta_metrics::stats::{bootstrap_median_delta, mann_whitney, median, Reservoir};
use quetta_metrics::RequestRecord;
use serde::{Deserialize, Serialize};

use crate::dir::{ReportError, RunDir};
use crate::summary::{RunSettings, Summary};

/// How two runs are compared.
///
/// ```
/// let o = quetta_report::CompareOptions { fail_on_regression: Some(0.05), ..Default::default() };
/// assert_eq!((o.alpha, o.resamples), (0.05, 1000));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CompareOptions {
    /// Significance level of the tests.
    pub alpha: f64,
    /// A regression counts when a metric is significantly worse by more than this share
    /// (0.05 = 5 %); `None`: every significant slow-down is listed, none fails.
    pub fail_on_regression: Option<f64>,
    /// A baseline older than this is marked stale.
    pub max_baseline_age: Duration,
    /// Refuse runs whose workload or load settings differ.
    pub strict: bool,
    /// Bootstrap resamples of each interval (seeded, so a comparison is repeatable).
    pub resamples: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            alpha: 0.05,
            fail_on_regression: None,
            max_baseline_age: Duration::from_secs(30 * 86_400),
            strict: false,
            resamples: 1000,
        }
    }
}

/// One metric of a comparison: medians with a test (per-request metrics), or one value per
/// run (throughputs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricComparison {
    pub metric: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_median: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_median: Option<f64>,
    /// Throughputs: the run's one value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<f64>,
    /// (candidate − baseline) ÷ baseline.
    pub relative_delta: f64,
    /// 95 % bootstrap interval of median(candidate) − median(baseline), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub significant: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Requests on each side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<[usize; 2]>,
    /// Values the interval and the test used on each side, when a side had more than
    /// [`COMPARE_SAMPLE`] and was sampled (the medians stay those of every request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<[usize; 2]>,
    /// Both sides repeated: Welch's test of the figure's per-run values (a per-request
    /// metric's per-run median, a throughput) between the sides, and the repeats on each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub between_runs_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<[usize; 2]>,
}

/// `compare.json` (written into the candidate's directory).
///
/// ```no_run
/// use quetta_report::{compare, CompareOptions, RunDir};
/// let (a, b) = (RunDir::open("results/base")?, RunDir::open("results/new")?);
/// let r = compare(&a, &b, &CompareOptions { fail_on_regression: Some(0.05), ..Default::default() })?;
/// print!("{}", r.render());
/// std::process::exit(i32::from(r.failed()));
/// # Ok::<(), quetta_report::ReportError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    pub baseline: String,
    pub candidate: String,
    pub alpha: f64,
    pub metrics: Vec<MetricComparison>,
    /// Significant slow-downs (beyond the threshold, when one was given), e.g. `e2e_ms +21.3%`.
    pub regressions: Vec<String>,
    pub baseline_stale: bool,
    pub notes: Vec<crate::Note>,
    /// The threshold of `fail_on_regression`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression_threshold: Option<f64>,
    /// The run headers shown by [`CompareReport::render`] (model, start, `--label` and
    /// `--metadata`).
    #[serde(skip)]
    pub headers: [String; 2],
}

impl CompareReport {
    /// Write `compare.json` where `candidate` keeps it ([`CompareSide::report_path`]).
    pub fn write(&self, candidate: &CompareSide) -> Result<(), ReportError> {
        crate::dir::write_json(&candidate.report_path(), self)
    }

    /// Whether the comparison fails (a threshold was given and a metric regressed past it).
    pub fn failed(&self) -> bool {
        self.regression_threshold.is_some() && !self.regressions.is_empty()
    }

    /// The terminal table.
    pub fn render(&self) -> String {
        let mut out = format!(
            "== Quetta compare ==\nbaseline   {} ({})\ncandidate  {} ({})\n\n",
            self.baseline, self.headers[0], self.candidate, self.headers[1]
        );
        let _ = writeln!(
            out,
            "{:<22}{:>12}{:>12}{:>10}{:>24}{:>10}  verdict",
            "metric (median)", "baseline", "candidate", "delta", "95% CI of delta", "p"
        );
        for m in &self.metrics {
            let (a, b) = (m.baseline_median.or(m.baseline), m.candidate_median.or(m.candidate));
            let ci = m.ci95.map_or("-".into(), |[lo, hi]| format!("[{lo:.3}, {hi:.3}]"));
            let p = m.p_value.map_or("-".into(), |p| format!("{p:.2e}"));
            let _ = writeln!(
                out,
                "{:<22}{:>12.3}{:>12.3}{:>9.1}%{ci:>24}{p:>10}  {}",
                m.metric,
                a.unwrap_or(0.0),
                b.unwrap_or(0.0),
                m.relative_delta * 100.0,
                m.verdict.as_deref().unwrap_or("(one value per run: no test)")
            );
            if let (Some(p), Some([x, y])) = (m.between_runs_p, m.runs) {
                let _ = writeln!(out, "{:<22}between runs ({x} vs {y} repeats): p {p:.2e}", "");
            }
        }
        for n in &self.notes {
            let _ = writeln!(out, "note       {n}");
        }
        if self.failed() {
            let _ = writeln!(out, "REGRESSION {}", self.regressions.join(", "));
        }
        out
    }
}

/// The per-request metrics a comparison tests.
/// (`per_input_ms` of runs that embed or rank: E2E per input.)
const PER_REQUEST: [&str; 5] =
    ["ttft_ms", "tpot_ms", "itl_request_mean_ms", "e2e_ms", "per_input_ms"];

/// Values a comparison tests per metric and side: every value of a run of up to this many
/// requests, a seeded uniform sample of this many of a larger one.
pub const COMPARE_SAMPLE: usize = 50_000;

/// A side's kept values of one metric ([`COMPARE_SAMPLE`] at most; a fixed seed, so the
/// same file gives the same sample).
type Sample = Reservoir;

fn samples(n: usize) -> [Sample; 5] {
    std::array::from_fn(|_| Reservoir::new(n, 42))
}

/// Each completed request's values of the metrics of [`PER_REQUEST`] into the samples, in
/// one streamed pass over a run's records (a torn last line is left out, as everywhere).
fn keep_values(run: &RunDir, values: &mut [Sample; 5]) -> Result<(), ReportError> {
    let _torn = run.for_each_record(|r| {
        if r.ok() {
            for (i, v) in values.iter_mut().enumerate() {
                if let Some(x) = value(&r, i) {
                    v.push(x);
                }
            }
        }
    })?;
    Ok(())
}

/// The value of a per-request metric of [`PER_REQUEST`] for a completed request.
fn value(r: &RequestRecord, metric: usize) -> Option<f64> {
    match metric {
        0 => r.ttft_ms,
        1 => r.tpot_ms,
        2 => r.itl_mean_ms(),
        3 => r.e2e_ms,
        _ => r.per_input_ms(),
    }
}

/// The figures' median of a metric of [`PER_REQUEST`] (its histogram, 3 significant digits).
fn summary_median(m: &quetta_metrics::MetricsSummary, metric: usize) -> Option<f64> {
    match metric {
        0 => m.ttft_ms.p50,
        1 => m.tpot_ms.p50,
        2 => m.itl_request_mean_ms.p50,
        3 => m.e2e_ms.p50,
        _ => m.per_input_ms.as_ref().and_then(|p| p.p50),
    }
}

/// One side of a comparison: a Quetta run directory, or the result file of
/// `vllm bench serve --save-result --save-detailed` (docs/METRICS.md, vLLM's result file).
#[derive(Debug, Clone)]
pub struct CompareSide {
    /// Where it was read from.
    pub path: String,
    /// The run's summary (a Quetta run), for its settings, machine and target.
    summary: Option<Box<Summary>>,
    /// Per-request values of each metric of [`PER_REQUEST`], completed requests only (ms):
    /// all of them, or a sample of [`COMPARE_SAMPLE`].
    values: [Sample; 5],
    /// Each metric's median over every completed request: exact, or (a run of more than
    /// [`COMPARE_SAMPLE`] requests) its summary's p50.
    medians: [Option<f64>; 5],
    request_throughput: f64,
    output_token_throughput: f64,
    /// Inputs per second of a run that embeds or ranks (none for generation).
    input_throughput: Option<f64>,
    /// A vLLM result file: its model, date (`YYYYMMDD-HHMMSS`), label, and whether it held
    /// per-request latencies.
    vllm: Option<VllmSide>,
    /// A repeated run: its figures across the repeats.
    repeats: Option<Box<crate::RepeatsReport>>,
}

#[derive(Debug, Clone)]
struct VllmSide {
    model: String,
    date: String,
    label: Option<String>,
    had_latencies: bool,
}

/// The fields of a vLLM result file a comparison reads; the rest is ignored (vLLM's own
/// files carry more, and older ones fewer: `latencies` is recent).
#[derive(Debug, Deserialize)]
struct VllmDetailed {
    #[serde(default)]
    date: String,
    #[serde(default)]
    model_id: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    request_throughput: f64,
    #[serde(default)]
    output_throughput: f64,
    ttfts: Vec<f64>,
    itls: Vec<Vec<f64>>,
    output_lens: Vec<u64>,
    #[serde(default)]
    errors: Vec<String>,
    #[serde(default)]
    latencies: Option<Vec<f64>>,
}

impl CompareSide {
    /// A run directory, or (a file) a vLLM result JSON.
    pub fn open(path: &std::path::Path) -> Result<Self, ReportError> {
        Self::open_with(path, COMPARE_SAMPLE)
    }

    /// [`CompareSide::open`] keeping at most `sample` values per metric for the tests (all
    /// of them up to `sample`, a seeded uniform sample beyond).
    pub fn open_with(path: &std::path::Path, sample: usize) -> Result<Self, ReportError> {
        if path.is_dir() {
            let d = RunDir::open(path)?;
            if d.is_repeats() {
                Self::read_repeats(path, sample)
            } else {
                Self::read_run(&d, sample)
            }
        } else {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ReportError::Read { path: path.display().to_string(), source: e })?;
            Self::read_vllm(&text, path, sample)
        }
    }

    /// A Quetta run, read in one streamed pass: memory holds the samples, not the records.
    pub fn from_run(run: &RunDir) -> Result<Self, ReportError> {
        Self::read_run(run, COMPARE_SAMPLE)
    }

    fn read_run(run: &RunDir, sample: usize) -> Result<Self, ReportError> {
        let s = run.read_summary()?;
        let mut values = samples(sample);
        keep_values(run, &mut values)?;
        // a sample's median is an estimate: the summary's is of every request
        let medians = [0, 1, 2, 3, 4].map(|i| {
            if values[i].whole() {
                median(&values[i].kept)
            } else {
                summary_median(&s.metrics, i)
            }
        });
        Ok(Self {
            path: run.path().display().to_string(),
            values,
            medians,
            request_throughput: s.metrics.request_throughput,
            output_token_throughput: s.metrics.output_token_throughput,
            input_throughput: (!s.target.kind.generates()).then_some(s.metrics.input_throughput),
            summary: Some(Box::new(s)),
            vllm: None,
            repeats: None,
        })
    }

    /// A repeated run: the requests of every whole repeat pooled (their medians, the pooled
    /// throughputs), and each repeat's own figures for the tests between runs.
    fn read_repeats(path: &std::path::Path, sample: usize) -> Result<Self, ReportError> {
        let rep = RunDir::open(path)?.read_repeats()?;
        let dirs: Vec<std::path::PathBuf> = (1..=rep.runs.len())
            .filter(|i| !rep.runs[i - 1].partial)
            .map(|i| path.join(format!("run-{i}")))
            .collect();
        let Some((first, rest)) = dirs.split_first() else {
            let why = format!("{}: no repeat ran to its end", path.display());
            return Err(ReportError::Invalid(why));
        };
        let mut side = Self::read_run(&RunDir::open(first)?, sample)?;
        for d in rest {
            keep_values(&RunDir::open(d)?, &mut side.values)?;
        }
        if let Some(p) = &rep.pooled {
            side.medians = [0, 1, 2, 3, 4].map(|i| {
                let v = &side.values[i];
                if v.whole() {
                    median(&v.kept)
                } else {
                    summary_median(p, i)
                }
            });
            side.request_throughput = p.request_throughput;
            side.output_token_throughput = p.output_token_throughput;
            side.input_throughput = side.input_throughput.map(|_| p.input_throughput);
        }
        side.path = path.display().to_string();
        side.repeats = Some(Box::new(rep));
        Ok(side)
    }

    /// A figure's value in each whole repeat (`None`: not a repeated run, or no such figure).
    fn per_run(&self, figure: &str) -> Option<Vec<f64>> {
        let f = self.repeats.as_ref()?.figure(figure)?;
        Some(f.values.iter().flatten().copied().collect())
    }

    /// A `vllm bench serve --save-result --save-detailed` file: per request its TTFT, its
    /// inter-token gaps, its output length and its error (empty: completed), and (recent
    /// vLLM) its latency; times in seconds. TPOT is (E2E − TTFT) ÷ (output tokens − 1),
    /// Quetta's definition and vLLM's; without `latencies`, E2E is TTFT + the sum of gaps.
    pub fn from_vllm(path: &std::path::Path) -> Result<Self, ReportError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ReportError::Read { path: path.display().to_string(), source: e })?;
        Self::parse_vllm(&text, path)
    }

    /// [`CompareSide::from_vllm`] of the file's text (`path` names it in errors).
    pub fn parse_vllm(text: &str, path: &std::path::Path) -> Result<Self, ReportError> {
        Self::read_vllm(text, path, COMPARE_SAMPLE)
    }

    fn read_vllm(text: &str, path: &std::path::Path, sample: usize) -> Result<Self, ReportError> {
        let v: VllmDetailed = serde_json::from_str(text).map_err(|e| ReportError::Parse {
            path: path.display().to_string(),
            line: e.line(),
            reason: e.to_string(),
        })?;
        let n = v.ttfts.len();
        let where_ = path.display();
        if v.itls.len() != n || v.output_lens.len() != n {
            return Err(ReportError::Invalid(format!(
                "{where_}: ttfts, itls and output_lens must have one entry per request ({n}, {}, {}): save it with vLLM's save-detailed option",
                v.itls.len(),
                v.output_lens.len()
            )));
        }
        if let Some(l) = v.latencies.as_ref().filter(|l| l.len() != n) {
            return Err(ReportError::Invalid(format!(
                "{where_}: latencies has {} entries for {n} requests",
                l.len()
            )));
        }
        let mut all: [Vec<f64>; 5] = Default::default();
        for i in 0..n {
            if v.errors.get(i).is_some_and(|e| !e.is_empty()) {
                continue;
            }
            let ttft = v.ttfts[i] * 1e3;
            let gaps = &v.itls[i];
            let e2e = v
                .latencies
                .as_ref()
                .map_or_else(|| ttft + gaps.iter().sum::<f64>() * 1e3, |l| l[i] * 1e3);
            all[0].push(ttft);
            if v.output_lens[i] > 1 {
                all[1].push((e2e - ttft) / (v.output_lens[i] - 1) as f64);
            }
            if !gaps.is_empty() {
                all[2].push(gaps.iter().sum::<f64>() * 1e3 / gaps.len() as f64);
            }
            all[3].push(e2e);
        }
        // the file is in memory whole: its medians are exact whatever its size
        let medians = [0, 1, 2, 3, 4].map(|i| median(&all[i]));
        let mut values = samples(sample);
        for (s, a) in values.iter_mut().zip(all) {
            for x in a {
                s.push(x);
            }
        }
        Ok(Self {
            path: path.display().to_string(),
            summary: None,
            values,
            medians,
            request_throughput: v.request_throughput,
            output_token_throughput: v.output_throughput,
            input_throughput: None,
            vllm: Some(VllmSide {
                model: v.model_id,
                date: v.date,
                label: v.label,
                had_latencies: v.latencies.is_some(),
            }),
            repeats: None,
        })
    }

    /// Where the comparison's `compare.json` goes: into a run directory, or beside a vLLM
    /// file as `FILE.compare.json`.
    pub fn report_path(&self) -> std::path::PathBuf {
        let p = std::path::Path::new(&self.path);
        match self.summary {
            Some(_) => p.join(crate::files::COMPARE),
            None => std::path::PathBuf::from(format!("{}.compare.json", self.path)),
        }
    }

    fn model(&self) -> &str {
        match (&self.summary, &self.vllm) {
            (Some(s), _) => &s.target.model,
            (None, Some(v)) => &v.model,
            (None, None) => "",
        }
    }

    /// The start time as RFC 3339 (vLLM's date is the client's local time).
    fn started_at(&self) -> String {
        match (&self.summary, &self.vllm) {
            (Some(s), _) => s.started_at.clone(),
            (None, Some(v)) => {
                let d = &v.date;
                match (
                    d.get(0..4),
                    d.get(4..6),
                    d.get(6..8),
                    d.get(9..11),
                    d.get(11..13),
                    d.get(13..15),
                ) {
                    (Some(y), Some(mo), Some(dd), Some(h), Some(mi), Some(s)) => {
                        format!("{y}-{mo}-{dd}T{h}:{mi}:{s}Z")
                    }
                    _ => d.clone(),
                }
            }
            (None, None) => String::new(),
        }
    }

    fn header(&self) -> String {
        let mut h = format!("{}, {}", self.model(), self.started_at());
        let label = match (&self.summary, &self.vllm) {
            (Some(s), _) => s.config.label.clone(),
            (None, Some(v)) => v.label.clone(),
            (None, None) => None,
        };
        if let Some(l) = label {
            let _ = write!(h, ", label {l}");
        }
        if let Some(s) = &self.summary {
            for (k, v) in &s.config.metadata {
                let _ = write!(h, ", {k}={v}");
            }
        } else {
            h.push_str(", vLLM result file");
        }
        h
    }
}

/// Where vLLM's definitions differ from Quetta's, for a comparison with a vLLM side.
fn vllm_notes(sides: [&CompareSide; 2]) -> Vec<crate::Note> {
    let mut notes = Vec::new();
    if sides.iter().all(|s| s.vllm.is_none()) {
        return notes;
    }
    let (baseline, candidate) = (sides[0].vllm.is_some(), sides[1].vllm.is_some());
    notes.push(crate::Note::VllmFile { baseline, candidate });
    notes.push(crate::Note::VllmClock);
    notes.push(crate::Note::VllmItl);
    if sides.iter().any(|s| s.vllm.as_ref().is_some_and(|v| !v.had_latencies)) {
        notes.push(crate::Note::VllmNoLatencies);
    }
    notes
}

/// Settings that make two runs comparable (everything but where and when they ran).
fn config_diff(a: &RunSettings, b: &RunSettings) -> Vec<String> {
    let skip = ["seed", "simulator", "extra_header_names", "api_key_given", "insecure"];
    let (Ok(serde_json::Value::Object(x)), Ok(serde_json::Value::Object(y))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return Vec::new();
    };
    let null = serde_json::Value::Null;
    x.iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .filter(|(k, v)| y.get(*k).unwrap_or(&null) != *v)
        .map(|(k, v)| format!("{k}: {v} -> {}", y.get(k).unwrap_or(&null)))
        .collect()
}

/// What differs between the runs besides the settings: machines, engines, models, age.
fn context_notes(
    b: &CompareSide,
    c: &CompareSide,
    opts: &CompareOptions,
) -> (Vec<crate::Note>, bool) {
    let mut notes = vllm_notes([b, c]);
    if let (Some(bs), Some(cs)) = (&b.summary, &c.summary) {
        if let (Some(a), Some(b)) = (&bs.client.host, &cs.client.host) {
            if a != b {
                notes.push(crate::Note::DifferentMachines {
                    baseline: format!("{} ({})", a.hostname, a.cpu_model),
                    candidate: format!("{} ({})", b.hostname, b.cpu_model),
                });
            }
        }
        if bs.target.backend != cs.target.backend {
            notes.push(crate::Note::DifferentEngines {
                baseline: bs.target.backend.clone(),
                candidate: cs.target.backend.clone(),
            });
        }
    }
    if b.model() != c.model() {
        notes.push(crate::Note::DifferentModels {
            baseline: b.model().to_string(),
            candidate: c.model().to_string(),
        });
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let age = crate::unix_of(&b.started_at()).map(|t| now.saturating_sub(t));
    let stale = age.is_some_and(|x| x > opts.max_baseline_age.as_secs());
    if stale {
        notes.push(crate::Note::StaleBaseline {
            days: age.unwrap_or(0) / 86_400,
            max_days: opts.max_baseline_age.as_secs() / 86_400,
        });
    }
    (notes, stale)
}

/// The figure of `repeats.json` whose per-run values stand for each metric of
/// [`PER_REQUEST`] in the test between runs (a run's median; none for the two that
/// `repeats.json` does not carry).
const BETWEEN: [Option<&str>; 5] =
    [Some("ttft_ms.p50"), Some("tpot_ms.p50"), None, Some("e2e_ms.p50"), None];

/// Both sides repeated: Welch's p-value of `figure`'s per-run values, and the repeats on each
/// side.
fn between_runs(
    b: &CompareSide,
    c: &CompareSide,
    figure: Option<&str>,
) -> Option<(f64, [usize; 2])> {
    let f = figure?;
    let (x, y) = (b.per_run(f)?, c.per_run(f)?);
    let p = quetta_metrics::stats::welch_p(&x, &y)?;
    Some((p, [x.len(), y.len()]))
}

/// Per metric of [`PER_REQUEST`]: the bootstrap interval of the difference of medians and
/// the Mann-Whitney p-value over the kept values (`None` with fewer than 2 on a side), the
/// metrics on threads of their own (the bootstrap is the cost of a comparison).
fn tests(b: &CompareSide, c: &CompareSide, resamples: usize) -> [Option<((f64, f64), f64)>; 5] {
    std::thread::scope(|sc| {
        let jobs: Vec<_> = (0..5)
            .map(|i| {
                let (x, y) = (&b.values[i].kept, &c.values[i].kept);
                sc.spawn(move || {
                    if x.len() < 2 || y.len() < 2 {
                        return None;
                    }
                    let ci = bootstrap_median_delta(x, y, resamples, 42).unwrap_or((0.0, 0.0));
                    Some((ci, mann_whitney(x, y)))
                })
            })
            .collect();
        let mut out = [None; 5];
        for (o, j) in out.iter_mut().zip(jobs) {
            *o = j.join().unwrap_or(None);
        }
        out
    })
}

/// Compare two runs: each per-request metric's medians with a bootstrap interval and a
/// Mann-Whitney U test, the throughputs, the settings that differ, and the regressions.
pub fn compare(
    baseline: &RunDir,
    candidate: &RunDir,
    opts: &CompareOptions,
) -> Result<CompareReport, ReportError> {
    compare_sides(&CompareSide::from_run(baseline)?, &CompareSide::from_run(candidate)?, opts)
}

/// [`compare`] of any two sides: Quetta runs or vLLM result files ([`CompareSide::open`]).
pub fn compare_sides(
    b: &CompareSide,
    c: &CompareSide,
    opts: &CompareOptions,
) -> Result<CompareReport, ReportError> {
    let diff = match (&b.summary, &c.summary) {
        (Some(bs), Some(cs)) => config_diff(&bs.config, &cs.config),
        _ => Vec::new(),
    };
    if !diff.is_empty() && opts.strict {
        return Err(ReportError::Invalid(format!(
            "the runs' settings differ (strict): {}",
            diff.join("; ")
        )));
    }
    let (mut notes, stale) = context_notes(b, c, opts);
    notes.push(match (&b.repeats, &c.repeats) {
        (Some(_), Some(_)) => crate::Note::ComparedRepeats,
        (None, None) => crate::Note::OneRunPerSide,
        _ => crate::Note::RepeatsOnOneSide,
    });
    if !diff.is_empty() {
        notes.insert(0, crate::Note::SettingsDiffer(diff));
    }
    let mut metrics = Vec::new();
    let mut regressions = Vec::new();
    let tests = tests(b, c, opts.resamples);
    for (i, m) in PER_REQUEST.iter().enumerate() {
        let (x, y) = (&b.values[i], &c.values[i]);
        let (Some(mx), Some(my), Some(((lo, hi), p))) = (b.medians[i], c.medians[i], tests[i])
        else {
            continue;
        };
        let rel = if mx > 0.0 { (my - mx) / mx } else { 0.0 };
        // repeated on both sides: the runs' medians must differ too, beyond their spread
        let between = between_runs(b, c, BETWEEN[i]);
        let significant =
            p < opts.alpha && (lo > 0.0 || hi < 0.0) && between.is_none_or(|(q, _)| q < opts.alpha);
        let verdict = match (significant, rel > 0.0) {
            (true, true) => "slower (significant)",
            (true, false) => "faster (significant)",
            (false, _) => "no significant change",
        };
        if significant && rel > 0.0 && opts.fail_on_regression.is_none_or(|t| rel > t) {
            regressions.push(format!("{m} +{:.1}%", rel * 100.0));
        }
        metrics.push(MetricComparison {
            metric: (*m).into(),
            baseline_median: Some(mx),
            candidate_median: Some(my),
            baseline: None,
            candidate: None,
            relative_delta: rel,
            ci95: Some([lo, hi]),
            p_value: Some(p),
            significant: Some(significant),
            verdict: Some(verdict.into()),
            n: Some([x.seen, y.seen]),
            sampled: (!x.whole() || !y.whole()).then_some([x.kept.len(), y.kept.len()]),
            between_runs_p: between.map(|(q, _)| q),
            runs: between.map(|(_, n)| n),
        });
    }
    // the second throughput is of what the runs produce: output tokens, or inputs for runs
    // that embed or rank
    let volume = match (b.input_throughput, c.input_throughput) {
        (Some(x), Some(y)) => ("input_throughput", x, y),
        _ => ("output_token_throughput", b.output_token_throughput, c.output_token_throughput),
    };
    for (k, x, y) in [("request_throughput", b.request_throughput, c.request_throughput), volume] {
        let rel = if x > 0.0 { (y - x) / x } else { 0.0 };
        // one value per run: a test only between repeats
        let between = between_runs(b, c, Some(k));
        let significant = between.map(|(q, _)| q < opts.alpha);
        let verdict = significant.map(|sig| match (sig, rel < 0.0) {
            (true, true) => "lower (significant)",
            (true, false) => "higher (significant)",
            (false, _) => "no significant change",
        });
        if significant == Some(true)
            && rel < 0.0
            && opts.fail_on_regression.is_none_or(|t| -rel > t)
        {
            regressions.push(format!("{k} {:.1}%", rel * 100.0));
        }
        metrics.push(MetricComparison {
            metric: k.into(),
            baseline_median: None,
            candidate_median: None,
            baseline: Some(x),
            candidate: Some(y),
            relative_delta: rel,
            ci95: None,
            p_value: None,
            significant,
            verdict: verdict.map(String::from),
            n: None,
            sampled: None,
            between_runs_p: between.map(|(q, _)| q),
            runs: between.map(|(_, n)| n),
        });
    }
    Ok(CompareReport {
        baseline: b.path.clone(),
        candidate: c.path.clone(),
        alpha: opts.alpha,
        metrics,
        regressions,
        baseline_stale: stale,
        notes,
        regression_threshold: opts.fail_on_regression,
        headers: [b.header(), c.header()],
    })
}

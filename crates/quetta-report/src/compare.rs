//! `compare`: per-metric deltas of two runs, with bootstrap confidence intervals of the
//! difference of medians and Mann-Whitney U tests over their per-request values
//! (`quetta_metrics::stats`), a regression verdict, and `compare.json`.

use std::fmt::Write as _;
use std::time::Duration;

use quetta_metrics::stats::{bootstrap_median_delta, mann_whitney, median};
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
    pub notes: Vec<String>,
    /// The threshold of `fail_on_regression`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression_threshold: Option<f64>,
    /// The run headers shown by [`CompareReport::render`] (model, start, `--label` and
    /// `--metadata`).
    #[serde(skip)]
    pub headers: [String; 2],
}

impl CompareReport {
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

fn values(recs: &[RequestRecord], metric: &str) -> Vec<f64> {
    recs.iter()
        .filter(|r| r.ok())
        .filter_map(|r| match metric {
            "ttft_ms" => r.ttft_ms,
            "tpot_ms" => r.tpot_ms,
            "e2e_ms" => r.e2e_ms,
            "itl_request_mean_ms" => r.itl_mean_ms(),
            _ => None,
        })
        .collect()
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
fn context_notes(bs: &Summary, cs: &Summary, opts: &CompareOptions) -> (Vec<String>, bool) {
    let mut notes = Vec::new();
    if let (Some(a), Some(b)) = (&bs.client.host, &cs.client.host) {
        if a != b {
            notes.push(format!(
                "measured from different machines: {} ({}) vs {} ({})",
                a.hostname, a.cpu_model, b.hostname, b.cpu_model
            ));
        }
    }
    if bs.target.backend != cs.target.backend {
        notes.push(format!("different engines: {} vs {}", bs.target.backend, cs.target.backend));
    }
    if bs.target.model != cs.target.model {
        notes.push(format!("different models: {} vs {}", bs.target.model, cs.target.model));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let age = crate::unix_of(&bs.started_at).map(|t| now.saturating_sub(t));
    let stale = age.is_some_and(|x| x > opts.max_baseline_age.as_secs());
    if stale {
        notes.push(format!(
            "the baseline is stale: {} days old (older than {} days)",
            age.unwrap_or(0) / 86_400,
            opts.max_baseline_age.as_secs() / 86_400
        ));
    }
    (notes, stale)
}

/// Compare two runs: each per-request metric's medians with a bootstrap interval and a
/// Mann-Whitney U test, the throughputs, the settings that differ, and the regressions.
pub fn compare(
    baseline: &RunDir,
    candidate: &RunDir,
    opts: &CompareOptions,
) -> Result<CompareReport, ReportError> {
    let (bs, cs) = (baseline.read_summary()?, candidate.read_summary()?);
    let (br, cr) = (baseline.read_records()?.records, candidate.read_records()?.records);
    let diff = config_diff(&bs.config, &cs.config);
    if !diff.is_empty() && opts.strict {
        return Err(ReportError::Invalid(format!(
            "the runs' settings differ (strict): {}",
            diff.join("; ")
        )));
    }
    let (mut notes, stale) = context_notes(&bs, &cs, opts);
    if !diff.is_empty() {
        notes.insert(0, format!("the runs' settings differ: {}", diff.join("; ")));
    }
    let mut metrics = Vec::new();
    let mut regressions = Vec::new();
    for m in ["ttft_ms", "tpot_ms", "itl_request_mean_ms", "e2e_ms"] {
        let (x, y) = (values(&br, m), values(&cr, m));
        let (Some(mx), Some(my)) = (median(&x), median(&y)) else { continue };
        if x.len() < 2 || y.len() < 2 {
            continue;
        }
        let rel = if mx > 0.0 { (my - mx) / mx } else { 0.0 };
        let (lo, hi) = bootstrap_median_delta(&x, &y, opts.resamples, 42).unwrap_or((0.0, 0.0));
        let p = mann_whitney(&x, &y);
        let significant = p < opts.alpha && (lo > 0.0 || hi < 0.0);
        let verdict = match (significant, rel > 0.0) {
            (true, true) => "slower (significant)",
            (true, false) => "faster (significant)",
            (false, _) => "no significant change",
        };
        if significant && rel > 0.0 && opts.fail_on_regression.is_none_or(|t| rel > t) {
            regressions.push(format!("{m} +{:.1}%", rel * 100.0));
        }
        metrics.push(MetricComparison {
            metric: m.into(),
            baseline_median: Some(mx),
            candidate_median: Some(my),
            baseline: None,
            candidate: None,
            relative_delta: rel,
            ci95: Some([lo, hi]),
            p_value: Some(p),
            significant: Some(significant),
            verdict: Some(verdict.into()),
            n: Some([x.len(), y.len()]),
        });
    }
    for (k, x, y) in [
        ("request_throughput", bs.metrics.request_throughput, cs.metrics.request_throughput),
        (
            "output_token_throughput",
            bs.metrics.output_token_throughput,
            cs.metrics.output_token_throughput,
        ),
    ] {
        metrics.push(MetricComparison {
            metric: k.into(),
            baseline_median: None,
            candidate_median: None,
            baseline: Some(x),
            candidate: Some(y),
            relative_delta: if x > 0.0 { (y - x) / x } else { 0.0 },
            ci95: None,
            p_value: None,
            significant: None,
            verdict: None,
            n: None,
        });
    }
    let header = |s: &Summary| {
        let mut h = format!("{}, {}", s.target.model, s.started_at);
        if let Some(l) = &s.config.label {
            let _ = write!(h, ", label {l}");
        }
        for (k, v) in &s.config.metadata {
            let _ = write!(h, ", {k}={v}");
        }
        h
    };
    Ok(CompareReport {
        baseline: baseline.path().display().to_string(),
        candidate: candidate.path().display().to_string(),
        alpha: opts.alpha,
        metrics,
        regressions,
        baseline_stale: stale,
        notes,
        regression_threshold: opts.fail_on_regression,
        headers: [header(&bs), header(&cs)],
    })
}

//! `repeats.json`: a run repeated (`run-1/` … `run-N/`, each an ordinary run directory), and
//! each figure's mean, spread and 95 % confidence interval across the repeats
//! (docs/METRICS.md, Repeated runs).

use std::fmt::Write as _;

use quetta_metrics::stats::AcrossRuns;
use quetta_metrics::{MetricsSummary, Stats};
use serde::{Deserialize, Serialize};

use crate::summary::Summary;

/// One repeat: where it is and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatRun {
    /// Its run directory (empty when nothing was written).
    pub dir: String,
    pub seed: u64,
    pub completed: u64,
    pub failed: u64,
    /// Cut short (Ctrl-C, out of workload): its figures are not in the statistics.
    pub partial: bool,
}

impl RepeatRun {
    /// The row of a repeat written to `dir` with `seed`.
    pub fn of(dir: String, seed: u64, s: &Summary) -> Self {
        let m = &s.metrics;
        Self { dir, seed, completed: m.completed, failed: m.failed, partial: s.partial }
    }
}

/// One figure across the repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatFigure {
    /// Its key: a top-level figure of `summary.json` (`request_throughput`), a metric's
    /// statistic (`ttft_ms.p99`), or either over the steady window (`steady.ttft_ms.p99`).
    pub figure: String,
    /// Each whole repeat's value, in order (`null`: the repeat had none).
    pub values: Vec<Option<f64>>,
    /// Over the repeats that have one.
    #[serde(flatten)]
    pub across: AcrossRuns,
}

impl RepeatFigure {
    /// The interval as `[low, high]` with `num` formatting each bound (`-` without one).
    pub fn ci_text(&self, num: impl Fn(f64) -> String) -> String {
        match (self.across.ci95_low, self.across.ci95_high) {
            (Some(l), Some(h)) => format!("[{}, {}]", num(l), num(h)),
            _ => "-".into(),
        }
    }

    /// The coefficient of variation as a percentage (`-` without one).
    pub fn cv_text(&self) -> String {
        self.across.cv.map_or("-".into(), |c| format!("{:.1}%", c * 100.0))
    }
}

/// `repeats.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatsReport {
    pub schema_version: u32,
    /// Repeats asked for.
    pub planned: u32,
    pub runs: Vec<RepeatRun>,
    /// Whether every repeat sent the same prompts.
    pub same_prompts: bool,
    /// The figures across the whole (not partial) repeats.
    pub figures: Vec<RepeatFigure>,
    /// Every whole repeat's requests as one run: their aggregates merged, rates over the sum
    /// of their durations.
    pub pooled: Option<MetricsSummary>,
    /// Fewer repeats ran to their end than were planned (Ctrl-C).
    pub partial: bool,
    /// Repeats until the intervals are narrow enough (`planned` is then the most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ci: Option<UntilCi>,
}

/// Repeat until every one of `figures` has a 95 % interval whose half-width is at most
/// `half_width` of its mean (docs/METRICS.md, Repeated runs), from [`UntilCi::MIN_RUNS`]
/// repeats on, up to the planned number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UntilCi {
    /// The half-width asked for, a share of the mean (0.02: ±2 %).
    pub half_width: f64,
    pub figures: Vec<String>,
    /// Whether every figure's interval got that narrow.
    pub met: bool,
}

impl UntilCi {
    /// Fewest repeats before the intervals are judged: two values agreeing by chance give a
    /// narrow interval too often.
    pub const MIN_RUNS: usize = 3;

    /// The figures judged when none are named.
    pub const DEFAULT_FIGURES: [&'static str; 3] =
        ["request_throughput", "ttft_ms.p99", "tpot_ms.p99"];

    /// The figures of `r` still wider than asked (a figure without an interval counts).
    pub fn wide<'a>(half_width: f64, figures: &'a [String], r: &RepeatsReport) -> Vec<&'a str> {
        figures
            .iter()
            .filter(|f| {
                let Some(x) = r.figure(f) else { return true };
                let a = &x.across;
                match (a.ci95_low, a.ci95_high) {
                    (Some(l), Some(h)) if a.mean != 0.0 => {
                        (h - l) / 2.0 / a.mean.abs() > half_width
                    }
                    _ => true,
                }
            })
            .map(String::as_str)
            .collect()
    }
}

/// One statistic of a metric's figures.
type Stat = fn(&Stats) -> Option<f64>;

/// The statistics of each metric that `repeats.json` carries.
const STATS: [(&str, Stat); 4] =
    [("mean", |s| s.mean), ("p50", |s| s.p50), ("p90", |s| s.p90), ("p99", |s| s.p99)];

/// (key, value) of every figure of one set of figures.
fn figures_of(m: &MetricsSummary, prefix: &str) -> Vec<(String, Option<f64>)> {
    let mut v = vec![
        (format!("{prefix}request_throughput"), Some(m.request_throughput)),
        (format!("{prefix}output_token_throughput"), Some(m.output_token_throughput)),
    ];
    let metrics = [
        ("ttft_ms", &m.ttft_ms),
        ("tpot_ms", &m.tpot_ms),
        ("itl_ms", &m.itl_ms),
        ("e2e_ms", &m.e2e_ms),
    ];
    for (name, st) in metrics {
        for (k, f) in STATS {
            v.push((format!("{prefix}{name}.{k}"), f(st).filter(|_| st.count > 0)));
        }
    }
    v
}

impl RepeatsReport {
    /// The report of these repeats (`runs[i]` the row of `summaries[i]`).
    pub fn new(
        planned: u32,
        runs: Vec<RepeatRun>,
        summaries: &[&Summary],
        same_prompts: bool,
    ) -> Self {
        let whole: Vec<&Summary> =
            runs.iter().zip(summaries).filter(|(r, _)| !r.partial).map(|(_, s)| *s).collect();
        let mut keys: Vec<Vec<(String, Option<f64>)>> =
            whole.iter().map(|s| figures_of(&s.metrics, "")).collect();
        // the steady figures where every whole repeat has a steady window
        if !whole.is_empty() && whole.iter().all(|s| s.steady.is_some()) {
            for (k, s) in keys.iter_mut().zip(&whole) {
                k.extend(figures_of(&s.steady.as_ref().expect("checked").metrics, "steady."));
            }
        }
        let figures = match keys.first() {
            None => Vec::new(),
            Some(first) => (0..first.len())
                .filter_map(|i| {
                    let values: Vec<Option<f64>> = keys.iter().map(|k| k[i].1).collect();
                    let present: Vec<f64> = values.iter().flatten().copied().collect();
                    let across = AcrossRuns::of(&present)?;
                    Some(RepeatFigure { figure: first[i].0.clone(), values, across })
                })
                .collect(),
        };
        let pooled = whole.split_first().map(|(first, rest)| {
            let mut agg = first.aggregate.clone();
            for s in rest {
                agg.merge(&s.aggregate);
            }
            let secs: f64 = whole.iter().map(|s| s.metrics.duration_s).sum();
            (agg.window_start_ms, agg.window_end_ms) = (Some(0.0), Some(secs * 1e3));
            agg.summary(&[])
        });
        let partial = whole.len() < planned as usize;
        Self {
            schema_version: 1,
            planned,
            runs,
            same_prompts,
            figures,
            pooled,
            partial,
            until_ci: None,
        }
    }

    /// The keys of every figure a report can carry (whole run, then steady window).
    pub fn figure_names() -> Vec<String> {
        let m = quetta_metrics::Aggregate::new(None).summary(&[]);
        let mut v: Vec<String> = figures_of(&m, "").into_iter().map(|(k, _)| k).collect();
        v.extend(figures_of(&m, "steady.").into_iter().map(|(k, _)| k));
        v
    }

    /// A figure by its key.
    pub fn figure(&self, key: &str) -> Option<&RepeatFigure> {
        self.figures.iter().find(|f| f.figure == key)
    }

    /// The terminal table: each figure's mean, spread and interval.
    pub fn render(&self, dir: Option<&std::path::Path>) -> String {
        let whole = self.runs.iter().filter(|r| !r.partial).count();
        let mut s = match &self.until_ci {
            Some(_) => format!("\n== Quetta repeats: {whole} runs (at most {}) ==\n", self.planned),
            None => format!("\n== Quetta repeats: {whole} of {} runs ==\n", self.planned),
        };
        let _ = writeln!(
            s,
            "{:<32}{:>12}{:>12}{:>9}{:>26}",
            "figure", "mean", "stddev", "CV", "95% CI of the mean"
        );
        let num = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
        for f in &self.figures {
            let _ = writeln!(
                s,
                "{:<32}{:>12}{:>12}{:>9}{:>26}",
                f.figure,
                format!("{:.3}", f.across.mean),
                num(f.across.stddev),
                f.cv_text(),
                f.ci_text(|v| format!("{v:.3}"))
            );
        }
        if let Some(p) = &self.pooled {
            let _ = writeln!(
                s,
                "pooled     {} completed, {} failed, {:.2} req/s; TTFT p50 {} p99 {} ms; E2E p50 {} p99 {} ms",
                p.completed,
                p.failed,
                p.request_throughput,
                num(p.ttft_ms.p50),
                num(p.ttft_ms.p99),
                num(p.e2e_ms.p50),
                num(p.e2e_ms.p99)
            );
        }
        if let Some(u) = &self.until_ci {
            let _ = writeln!(
                s,
                "until-ci   ±{:.1}% on {}: {}",
                u.half_width * 100.0,
                u.figures.join(", "),
                if u.met { "met" } else { "NOT met within the planned repeats" }
            );
        }
        if self.partial {
            let _ = writeln!(s, "PARTIAL    {whole} of {} repeats ran to their end", self.planned);
        }
        if let Some(d) = dir {
            let _ = writeln!(s, "results    {}", d.display());
        }
        s
    }
}

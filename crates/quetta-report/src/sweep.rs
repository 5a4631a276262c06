//! `sweep.json` (a run per concurrency or rate) and `slo.json` (the search for the highest
//! load meeting run-level objectives): typed, with their terminal tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::chart::{figure, INPUT_SWEEP_COLUMNS, SWEEP_COLUMNS};
use crate::summary::Summary;

/// What a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SweepKind {
    /// Closed-loop steps at given concurrencies.
    Concurrency,
    /// Open-loop steps at given request rates.
    Rate,
}

impl SweepKind {
    /// The name of the varied value (`concurrency` or `rate`), as in the step rows.
    pub fn as_str(self) -> &'static str {
        match self {
            SweepKind::Concurrency => "concurrency",
            SweepKind::Rate => "rate",
        }
    }
}

/// One step of a sweep: the figures of its run (which is a whole run in `dir`).
///
/// ```
/// let s = quetta_report::SweepStep { concurrency: Some(8.0), request_throughput: 41.5, ..Default::default() };
/// assert_eq!((s.value(), s.column("request_throughput")), (8.0, Some(41.5)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// The step's concurrency (concurrency sweeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<f64>,
    /// The step's request rate (rate sweeps), requests/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// The step's run directory (empty when nothing was written).
    pub dir: String,
    pub completed: u64,
    pub failed: u64,
    /// The step's planned requests, when it had a count.
    #[serde(default)]
    pub planned: Option<u64>,
    pub request_throughput: f64,
    /// The same over the step's steady window (docs/METRICS.md, Steady state), when it has
    /// one: without its ramp-up and drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_request_throughput: Option<f64>,
    pub requests_per_minute: f64,
    pub output_token_throughput: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_output_token_throughput: Option<f64>,
    pub achieved_send_rate: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    #[serde(default)]
    pub tpot_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    #[serde(default)]
    pub itl_p99_ms: Option<f64>,
    pub errors: BTreeMap<String, u64>,
    /// The step was cut short (Ctrl-C, out of workload, stop-on-saturation).
    pub partial: bool,
    /// Steps that embed or rank: inputs per second (absent for generation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_throughput: Option<f64>,
    /// Steps that embed or rank: input tokens per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_token_throughput: Option<f64>,
    /// Steps that embed or rank: E2E per input, p50 and p99 (docs/METRICS.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_input_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_input_p99_ms: Option<f64>,
}

impl SweepStep {
    /// A step's row from its summary.
    pub fn of(kind: SweepKind, value: f64, dir: &str, s: &Summary) -> Self {
        let m = &s.metrics;
        let inputs = !s.target.kind.generates();
        let per_input = m.per_input_ms.as_ref().filter(|_| inputs);
        Self {
            concurrency: (kind == SweepKind::Concurrency).then_some(value),
            rate: (kind == SweepKind::Rate).then_some(value),
            dir: dir.to_owned(),
            completed: m.completed,
            failed: m.failed,
            planned: s.planned,
            request_throughput: m.request_throughput,
            steady_request_throughput: s.steady.as_ref().map(|w| w.metrics.request_throughput),
            requests_per_minute: (m.request_throughput * 60.0 * 10.0).round() / 10.0,
            output_token_throughput: m.output_token_throughput,
            steady_output_token_throughput: s
                .steady
                .as_ref()
                .map(|w| w.metrics.output_token_throughput),
            achieved_send_rate: s.achieved_send_rate,
            e2e_p50_ms: m.e2e_ms.p50,
            e2e_p99_ms: m.e2e_ms.p99,
            ttft_p50_ms: m.ttft_ms.p50,
            ttft_p99_ms: m.ttft_ms.p99,
            tpot_p50_ms: m.tpot_ms.p50,
            tpot_p99_ms: m.tpot_ms.p99,
            itl_p50_ms: m.itl_ms.p50,
            itl_p99_ms: m.itl_ms.p99,
            errors: m.errors.clone(),
            partial: s.partial,
            input_throughput: inputs.then_some(m.input_throughput),
            input_token_throughput: inputs.then_some(m.input_token_throughput),
            per_input_p50_ms: per_input.and_then(|p| p.p50),
            per_input_p99_ms: per_input.and_then(|p| p.p99),
        }
    }

    /// `PARTIAL: 6 of 100 planned` for a step cut short, as the table and the reports say.
    pub fn partial_label(&self) -> Option<String> {
        self.partial.then(|| crate::terminal::cut_short(self.completed + self.failed, self.planned))
    }

    /// What the step produced per second, as the reports' peak line says it: output
    /// tokens, or inputs for a step that embeds or ranks.
    pub fn volume(&self) -> String {
        match self.input_throughput {
            Some(i) => format!("{i:.1} inputs/s"),
            None => format!("{:.1} output tok/s", self.output_token_throughput),
        }
    }

    /// The step's throughput as the peak ranks it: over its steady window where it has one
    /// (ramp-up and drain lower a whole run's), else over the whole run.
    pub fn peak_throughput(&self) -> f64 {
        self.steady_request_throughput.unwrap_or(self.request_throughput)
    }

    /// The varied value (concurrency or rate).
    pub fn value(&self) -> f64 {
        self.concurrency.or(self.rate).unwrap_or(0.0)
    }

    /// A column of the step by its key (the second half of [`SWEEP_COLUMNS`]).
    pub fn column(&self, key: &str) -> Option<f64> {
        Some(match key {
            "concurrency" | "rate" => self.value(),
            "request_throughput" => self.request_throughput,
            "steady_request_throughput" => return self.steady_request_throughput,
            "requests_per_minute" => self.requests_per_minute,
            "output_token_throughput" => self.output_token_throughput,
            "e2e_p50_ms" => return self.e2e_p50_ms,
            "e2e_p99_ms" => return self.e2e_p99_ms,
            "ttft_p50_ms" => return self.ttft_p50_ms,
            "ttft_p99_ms" => return self.ttft_p99_ms,
            "tpot_p50_ms" => return self.tpot_p50_ms,
            "tpot_p99_ms" => return self.tpot_p99_ms,
            "itl_p50_ms" => return self.itl_p50_ms,
            "itl_p99_ms" => return self.itl_p99_ms,
            "input_throughput" => return self.input_throughput,
            "input_token_throughput" => return self.input_token_throughput,
            "per_input_p50_ms" => return self.per_input_p50_ms,
            "per_input_p99_ms" => return self.per_input_p99_ms,
            "completed" => self.completed as f64,
            "failed" => self.failed as f64,
            _ => return None,
        })
    }
}

/// `sweep.json`.
///
/// ```
/// use quetta_report::{SweepKind, SweepReport, SweepStep};
/// let step = |c: f64, t: f64| SweepStep { concurrency: Some(c), request_throughput: t, ..Default::default() };
/// let cut = SweepStep { partial: true, planned: Some(100), completed: 6, ..step(8.0, 90.0) };
/// let r = SweepReport::new(SweepKind::Concurrency, vec![step(1.0, 10.0), step(4.0, 30.0), cut], false, vec![]);
/// // the step cut short is no peak, and its row says how much of it ran
/// assert_eq!(r.peak.as_ref().unwrap().concurrency, Some(4.0));
/// assert!(r.table().contains("req/s") && r.table().contains("PARTIAL: 6 of 100 planned"));
/// // a step's steady window ranks it where it has one: ramp-up and drain lowered 28 to 25
/// let ramped = SweepStep { steady_request_throughput: Some(28.0), ..step(2.0, 25.0) };
/// let r = SweepReport::new(SweepKind::Concurrency, vec![step(4.0, 26.0), ramped], false, vec![]);
/// assert_eq!(r.peak.as_ref().unwrap().concurrency, Some(2.0));
/// assert!(r.render(None).contains("peak       28 req/s (steady window; whole run 25)"), "{}", r.render(None));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    pub schema_version: u32,
    pub kind: SweepKind,
    pub steps: Vec<SweepStep>,
    /// The step with the highest request throughput among those not cut short (over each
    /// step's steady window where it has one: [`SweepStep::peak_throughput`]).
    pub peak: Option<SweepStep>,
    pub total_errors: u64,
    /// Whether every step sent the same prompts.
    pub prompts: String,
    pub notes: Vec<crate::Note>,
    /// Why the sweep stopped before its last step: a step's workload ended on an error
    /// (the step is the last row); the sweep failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl SweepReport {
    /// A report of `steps` (the peak is the highest throughput of the steps that ran to
    /// their end: a step cut short is no peak).
    pub fn new(
        kind: SweepKind,
        steps: Vec<SweepStep>,
        same_prompts: bool,
        notes: Vec<crate::Note>,
    ) -> Self {
        let peak = steps
            .iter()
            .filter(|s| !s.partial)
            .max_by(|x, y| x.peak_throughput().total_cmp(&y.peak_throughput()))
            .cloned();
        Self {
            schema_version: 1,
            kind,
            total_errors: steps.iter().map(|s| s.failed).sum(),
            peak,
            steps,
            prompts: if same_prompts { "the same in every step" } else { "fresh in every step" }
                .into(),
            notes,
            failed: None,
        }
    }

    /// Whether the steps embed or rank (their rows count inputs, not tokens).
    pub fn counts_inputs(&self) -> bool {
        self.steps.iter().any(|s| s.input_throughput.is_some())
    }

    /// The columns of the table after the load column, as they apply to the steps:
    /// (header, key of [`SweepStep::column`]).
    pub fn columns(&self) -> &'static [(&'static str, &'static str)] {
        if self.counts_inputs() {
            &INPUT_SWEEP_COLUMNS
        } else {
            &SWEEP_COLUMNS
        }
    }

    /// The terminal table.
    pub fn table(&self) -> String {
        let label = self.kind.as_str();
        let mut s = String::new();
        let _ = write!(s, "{label:>12}");
        for (h, _) in self.columns() {
            let _ = write!(s, "{h:>11}");
        }
        s.push('\n');
        for st in &self.steps {
            let _ = write!(s, "{:>12}", figure(Some(st.value())));
            for (_, k) in self.columns() {
                let _ = write!(s, "{:>11}", figure(st.column(k)));
            }
            if let Some(p) = st.partial_label() {
                let _ = write!(s, "  {p}");
            }
            s.push('\n');
        }
        s.push_str("(latencies in ms)\n");
        s
    }

    /// The terminal summary: the table, the peak and the notes.
    pub fn render(&self, dir: Option<&std::path::Path>) -> String {
        let mut s = format!("\n== Quetta sweep ==\n{}", self.table());
        if let Some(p) = &self.peak {
            let inputs = p
                .input_throughput
                .map_or(String::new(), |i| format!(" ({} inputs/s)", figure(Some(i))));
            let over = match p.steady_request_throughput {
                Some(_) => {
                    format!(" (steady window; whole run {})", figure(Some(p.request_throughput)))
                }
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "peak       {} req/s{over}{inputs} at {} {}",
                figure(Some(p.peak_throughput())),
                self.kind.as_str(),
                figure(Some(p.value()))
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note       {n}");
        }
        if let Some(f) = &self.failed {
            let _ = writeln!(s, "FAILED     {f}");
        }
        if let Some(d) = dir {
            let _ = writeln!(s, "results    {}", d.display());
        }
        s
    }
}

/// One probe of an SLO search: a whole run at one load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloProbe {
    /// The probe's rate (req/s) or concurrency.
    pub value: f64,
    pub pass: bool,
    pub dir: String,
    /// Why it failed: the objectives missed, the errors, a client that could not keep up.
    pub why: Vec<String>,
    /// `errors`, `client` or `workload` when the probe failed for a reason other than
    /// latency (`workload`: its workload ended on an error, and the search stopped).
    pub limited_by: Option<String>,
    /// Each objective's value (ms), keyed `METRIC_ms_pNN` (e.g. `ttft_ms_p99`).
    #[serde(flatten)]
    pub values: BTreeMap<String, Option<f64>>,
}

/// `slo.json`.
///
/// ```no_run
/// let r = quetta_report::RunDir::open("results/slo-1")?.read_slo()?;
/// println!("{:?} {} meets {}", r.answer, r.search, r.objectives);
/// # Ok::<(), quetta_report::ReportError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloReport {
    pub schema_version: u32,
    /// `rate` or `concurrency`.
    pub search: String,
    /// The run-level objectives, e.g. `ttft:p99<500ms`.
    pub objectives: String,
    pub tolerance: f64,
    pub requests_per_probe: u64,
    /// The highest load that met every objective (`null`: even the first probe failed, or
    /// the search failed).
    pub answer: Option<f64>,
    /// The lowest load that failed (`null`: every probe up to the maximum passed, or the
    /// search failed).
    pub first_failing: Option<f64>,
    pub probes: Vec<SloProbe>,
    pub notes: Vec<crate::Note>,
    /// Why the search failed before it had an answer: a probe's workload ended on an error
    /// (the probe is the last row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl SloReport {
    /// The terminal summary.
    pub fn render(&self, dir: Option<&std::path::Path>) -> String {
        let mut s = format!("\n== Quetta SLO search: {} ==\n", self.objectives);
        let _ = writeln!(s, "{:>12}  {:<6} why", self.search, "result");
        for p in &self.probes {
            let _ = writeln!(
                s,
                "{:>12}  {:<6} {}",
                figure(Some(p.value)),
                if p.pass { "pass" } else { "FAIL" },
                p.why.join("; ")
            );
        }
        match (self.answer, &self.failed) {
            (_, Some(f)) => {
                let _ = writeln!(s, "answer     none: the search failed\nFAILED     {f}");
            }
            (Some(v), None) => {
                let _ = writeln!(
                    s,
                    "answer     {} {v} meets every objective{}",
                    self.search,
                    self.first_failing.map_or(String::new(), |h| format!(" ({h} does not)"))
                );
            }
            (None, None) => {
                let first = self.probes.first().map_or(0.0, |p| p.value);
                let _ = writeln!(s, "answer     none: even {first} fails");
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note       {n}");
        }
        if let Some(d) = dir {
            let _ = writeln!(s, "results    {}", d.display());
        }
        s
    }
}

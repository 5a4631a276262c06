//! [`Sweep`] (a run per concurrency or rate) and [`SloSearch`] (the highest load that meets
//! run-level objectives). Every step is an ordinary benchmark on one connected target: one
//! runtime, one connection pool, one embedded simulator for all of them; each step reports
//! its own client CPU and memory.

use std::path::PathBuf;
use std::sync::Arc;

use quetta_engine::setting::Setting as S;
use quetta_metrics::SloSet;
use quetta_report::{Note, RunDir, SloProbe, SloReport, SweepKind, SweepReport, SweepStep};

use crate::target::Connected;
use crate::{BenchReport, Benchmark, Error, Load, Result};

/// Called before each step of a sweep or search with what it is about to run.
///
/// ```
/// use quetta::{Benchmark, Step, Sweep, Target};
/// let say: quetta::OnStep = std::sync::Arc::new(|s: &Step| eprintln!("{s}"));
/// let mut s = Sweep::concurrencies(Benchmark::new(Target::simulator(Default::default())), vec![1, 2]);
/// s.on_step = Some(say);
/// let step = Step::Sweep { index: 2, of: 5, kind: quetta::report::SweepKind::Concurrency, value: 4.0 };
/// assert_eq!(step.to_string(), "sweep step 2/5: concurrency 4");
/// assert_eq!(step.short(), "step 2/5");
/// ```
pub type OnStep = Arc<dyn Fn(&Step) + Send + Sync>;

/// What a sweep or search is about to run.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// The closed-loop run that measures the maximum throughput before an automatic
    /// rate sweep.
    MaxThroughput { concurrency: usize },
    /// Step `index` (from 1) of `of`, at `value` (a concurrency or a rate).
    Sweep { index: usize, of: usize, kind: SweepKind, value: f64 },
    /// Probe `index` (from 1) of an SLO search, at `value` (a rate or a concurrency).
    Probe { index: usize, over: SearchOver, value: f64 },
    /// Repeat `index` (from 1) of `of` of a repeated run.
    Repeat { index: usize, of: usize },
}

impl Step {
    /// A few words naming the step (`step 2/5`, `slo probe 3`, `max throughput`).
    pub fn short(&self) -> String {
        match self {
            Step::MaxThroughput { .. } => "max throughput".into(),
            Step::Sweep { index, of, .. } => format!("step {index}/{of}"),
            Step::Probe { index, .. } => format!("slo probe {index}"),
            Step::Repeat { index, of } => format!("run {index}/{of}"),
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::MaxThroughput { concurrency } => {
                write!(f, "sweep: measuring the maximum throughput at concurrency {concurrency}")
            }
            Step::Sweep { index, of, kind, value } => {
                write!(f, "sweep step {index}/{of}: {} {value}", kind.as_str())
            }
            Step::Probe { index, over, value } => {
                let name = if *over == SearchOver::Rate { "rate" } else { "concurrency" };
                write!(f, "slo probe {index}: {name} {value}")
            }
            Step::Repeat { index, of } => write!(f, "repeat {index} of {of}"),
        }
    }
}

/// The steps of a sweep.
///
/// ```
/// use quetta::{Benchmark, Steps, Sweep, Target};
/// let s = Sweep::pow2(Benchmark::new(Target::openai("http://127.0.0.1:8000")), 32);
/// assert_eq!(s.steps, Steps::Concurrencies(vec![1, 2, 4, 8, 16, 32]));
/// let auto = Sweep::new(s.base, Steps::AutoRates { concurrency: 64, steps: 5 });
/// # let _ = auto;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Steps {
    /// Closed-loop steps at these concurrencies.
    Concurrencies(Vec<usize>),
    /// Open-loop steps at these rates (req/s), with the base benchmark's arrival process.
    Rates(Vec<f64>),
    /// Measure the maximum throughput first (closed loop at `concurrency`), then `steps`
    /// rates evenly up to it.
    AutoRates { concurrency: usize, steps: usize },
}

/// A run per concurrency or rate.
///
/// ```no_run
/// # async fn demo() -> quetta::Result<()> {
/// use quetta::{Benchmark, Sweep, Target};
/// let base = Benchmark::new(Target::openai("http://127.0.0.1:8000")).requests(200);
/// let report = Sweep::pow2(base, 64).run().await?;
/// for s in &report.steps {
///     println!("{} in flight: {:.1} req/s", s.value(), s.request_throughput);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sweep {
    pub base: Benchmark,
    pub steps: Steps,
    /// Send the same prompts in every step (by default each step draws fresh ones, so an
    /// earlier step does not warm the server's prefix cache).
    pub same_prompts: bool,
    pub on_step: Option<OnStep>,
}

impl std::fmt::Debug for Sweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweep")
            .field("steps", &self.steps)
            .field("same_prompts", &self.same_prompts)
            .finish_non_exhaustive()
    }
}

/// The seed of step `i` (fresh prompts unless the same ones are asked for).
pub(crate) fn step_seed(base: u64, i: usize, same: bool) -> u64 {
    if same {
        base
    } else {
        base.wrapping_add(i as u64 * 1_000_003)
    }
}

/// A sweep's or search's directory, made only once its first step has passed every check
/// (a refused configuration leaves nothing behind); nothing without an output directory.
pub(crate) struct OutDir {
    want: Option<(PathBuf, bool)>,
    made: Option<RunDir>,
}

impl OutDir {
    pub(crate) fn of(base: &Benchmark) -> Self {
        Self { want: base.output_dir.clone().map(|d| (d, base.overwrite)), made: None }
    }

    /// The directory, made now if it is not yet.
    pub(crate) fn get(&mut self) -> Result<Option<&RunDir>> {
        if self.made.is_none() {
            if let Some((d, overwrite)) = &self.want {
                self.made = Some(RunDir::create(d, *overwrite)?);
            }
        }
        Ok(self.made.as_ref())
    }
}

/// Run `b` on `c` in `out/name` (nothing written without a directory).
pub(crate) async fn step(
    b: &Benchmark,
    c: &Connected,
    out: &mut OutDir,
    name: &str,
) -> Result<(BenchReport, String)> {
    let mut b = b.clone();
    let p = b.prepare().await?;
    b.output_dir = out.get()?.map(|d| d.path().join(name));
    b.overwrite = true;
    let shown = b.output_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
    Ok((b.run_prepared(p, c).await?, shown))
}

impl Sweep {
    pub fn new(base: Benchmark, steps: Steps) -> Self {
        Self { base, steps, same_prompts: false, on_step: None }
    }

    /// Closed-loop steps at these concurrencies.
    pub fn concurrencies(base: Benchmark, cs: Vec<usize>) -> Self {
        Self::new(base, Steps::Concurrencies(cs))
    }

    /// Closed-loop steps at 1, 2, 4, … and `max` (llmperf's power-of-two steps).
    pub fn pow2(base: Benchmark, max: usize) -> Self {
        let mut v: Vec<usize> = std::iter::successors(Some(1usize), |c| c.checked_mul(2))
            .take_while(|c| *c < max)
            .collect();
        v.push(max);
        Self::concurrencies(base, v)
    }

    /// Open-loop steps at these rates.
    pub fn rates(base: Benchmark, rates: Vec<f64>) -> Self {
        Self::new(base, Steps::Rates(rates))
    }

    fn say(&self, step: Step) {
        if let Some(f) = &self.on_step {
            f(&step);
        }
    }

    /// The rates of an open-loop sweep (measuring the maximum first for `AutoRates`); none,
    /// and why in `failed`, when the max-throughput step's workload ended on an error.
    async fn rates_of(
        &self,
        c: &Connected,
        out: &mut OutDir,
        notes: &mut Vec<Note>,
        failed: &mut Option<String>,
    ) -> Result<Vec<f64>> {
        match &self.steps {
            Steps::Rates(r) => Ok(r.clone()),
            Steps::AutoRates { concurrency, steps } => {
                self.say(Step::MaxThroughput { concurrency: *concurrency });
                let mut b = self.base.clone().load(Load::closed(*concurrency));
                b.seed = step_seed(self.base.seed, 999, self.same_prompts);
                let (r, _) = step(&b, c, out, "max-throughput").await?;
                if let Some(why) = r.summary.workload_failure() {
                    *failed =
                        Some(format!("the max-throughput step (concurrency {concurrency}): {why}"));
                    return Ok(Vec::new());
                }
                // over its steady window where it has one: ramp-up and drain lower it
                let whole = r.summary.metrics.request_throughput;
                let max =
                    Some(r.summary.steady.as_ref().map_or(whole, |w| w.metrics.request_throughput))
                        .filter(|m| *m > 0.0)
                        .ok_or_else(|| Error::NothingCompleted {
                            step: format!("the max-throughput step (concurrency {concurrency})"),
                        })?;
                notes.push(Note::MaxThroughput { concurrency: *concurrency, req_per_s: max });
                let n = (*steps).max(1);
                Ok((1..=n).map(|i| (max * i as f64 / n as f64 * 1000.0).round() / 1000.0).collect())
            }
            Steps::Concurrencies(_) => Ok(Vec::new()),
        }
    }

    /// Run every step on one connected target; stop after a step when the run was stopped.
    pub async fn run(self) -> Result<SweepReport> {
        let c = self.base.target.connect().await?;
        let mut out = OutDir::of(&self.base);
        let mut notes = Vec::new();
        let mut failed = None;
        let (kind, values): (SweepKind, Vec<f64>) = match &self.steps {
            Steps::Concurrencies(cs) => {
                if cs.is_empty() || cs.contains(&0) {
                    return Err(Error::invalid(S::Concurrency, "give concurrencies of at least 1"));
                }
                (SweepKind::Concurrency, cs.iter().map(|&c| c as f64).collect())
            }
            _ => {
                let r = self.rates_of(&c, &mut out, &mut notes, &mut failed).await?;
                if r.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                    return Err(Error::invalid(S::RequestRate, "rates must be positive numbers"));
                }
                (SweepKind::Rate, r)
            }
        };
        let mut steps = Vec::new();
        for (i, v) in values.iter().enumerate() {
            if self.base.control.stopped() {
                notes.push(Note::StoppedAfterSteps { done: i, of: values.len() });
                break;
            }
            self.say(Step::Sweep { index: i + 1, of: values.len(), kind, value: *v });
            let mut b = self.base.clone();
            b.seed = step_seed(self.base.seed, i, self.same_prompts);
            b.load = Some(match (kind, &self.base.load) {
                (SweepKind::Concurrency, _) => Load::closed(*v as usize),
                (_, Some(Load::Open { arrival, max_concurrency, .. })) => {
                    Load::Open { rate: *v, arrival: *arrival, max_concurrency: *max_concurrency }
                }
                _ => Load::poisson(*v),
            });
            let (r, shown) =
                step(&b, &c, &mut out, &format!("step-{i:02}-{}-{v}", kind.as_str())).await?;
            steps.push(SweepStep::of(kind, *v, &shown, &r.summary));
            // every later step would build its requests the same way: stop, and say why
            if let Some(why) = r.summary.workload_failure() {
                failed = Some(format!(
                    "step {} of {} ({} {v}): {why}",
                    i + 1,
                    values.len(),
                    kind.as_str()
                ));
                break;
            }
        }
        let mut report = SweepReport::new(kind, steps, self.same_prompts, notes);
        report.failed = failed;
        if let Some(d) = out.get()? {
            d.write_sweep(&report)?;
        }
        Ok(report)
    }

    /// Run on a runtime of its own.
    pub fn run_blocking(self) -> Result<SweepReport> {
        crate::runtime(self.base.threads)?.block_on(self.run())
    }
}

/// What an SLO search varies.
///
/// ```
/// use quetta::{Benchmark, SearchOver, SloSearch, Target};
/// let mut s = SloSearch::new(Benchmark::new(Target::openai("http://127.0.0.1:8000")), "ttft:p99<500ms".parse().unwrap());
/// s.over = SearchOver::Concurrency;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SearchOver {
    /// The request rate of an open loop (the base benchmark's arrival process).
    Rate,
    /// The concurrency of a closed loop.
    Concurrency,
}

/// The highest request rate (or concurrency) meeting run-level objectives: double from
/// `start` until a probe fails (or `max`), then bisect to `tolerance`.
///
/// ```no_run
/// # async fn demo() -> quetta::Result<()> {
/// use quetta::{Benchmark, Load, SloSearch, Target};
/// let base = Benchmark::new(Target::openai("http://127.0.0.1:8000")).load(Load::constant(1.0));
/// let r = SloSearch::new(base, "ttft:p99<500ms,tpot:p99<40ms".parse()?).run().await?;
/// println!("{:?} req/s meets both", r.answer);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SloSearch {
    pub base: Benchmark,
    /// Run-level objectives only (`ttft:p99<500ms,tpot:p99<40ms`).
    pub objectives: SloSet,
    pub over: SearchOver,
    pub start: f64,
    pub max: f64,
    /// Stop bisecting when the bracket is narrower than this share of its upper end.
    pub tolerance: f64,
    pub requests_per_probe: u64,
    /// A probe with more failed requests than this share fails.
    pub max_error_rate: f64,
    pub max_probes: usize,
    pub on_step: Option<OnStep>,
}

impl std::fmt::Debug for SloSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SloSearch")
            .field("objectives", &self.objectives.to_string())
            .field("over", &self.over)
            .finish_non_exhaustive()
    }
}

/// Why a probe's run does not meet the objectives; `errors` or `client` when the reason is
/// not latency.
fn probe_verdict(
    s: &quetta_report::Summary,
    max_err: f64,
    rate: Option<f64>,
) -> (Vec<String>, Option<String>) {
    let mut why = Vec::new();
    let mut limit = None;
    for o in s.metrics.slo_verdict.iter().flat_map(|v| &v.objectives) {
        match o.value_ms {
            Some(_) if o.pass => {}
            Some(v) => why.push(format!(
                "{} {} {v:.3} ms ≥ {} ms",
                o.metric.metric().key(),
                quetta_metrics::percentile_key(o.percentile),
                o.threshold_ms
            )),
            None => why.push(format!("{} has no value", o.objective)),
        }
    }
    let share = 1.0 - s.metrics.success_rate();
    if share > max_err {
        why.push(format!("{:.1}% of requests failed", share * 100.0));
        limit = Some("errors".to_owned());
    }
    if let (Some(r), Some(ach)) = (rate, s.achieved_send_rate) {
        if ach < 0.95 * r {
            why.push(format!("the client sent only {ach:.2} of {r} req/s"));
            limit = Some("client".to_owned());
        }
    }
    (why, limit)
}

/// Whether the search failed: its last probe's workload ended on an error.
fn failed(probes: &[SloProbe]) -> bool {
    probes.last().is_some_and(|p| p.limited_by.as_deref() == Some("workload"))
}

impl SloSearch {
    /// A search over the request rate from 1 req/s, 200 requests per probe.
    pub fn new(base: Benchmark, objectives: SloSet) -> Self {
        Self {
            base,
            objectives,
            over: SearchOver::Rate,
            start: 1.0,
            max: 10_000.0,
            tolerance: 0.05,
            requests_per_probe: 200,
            max_error_rate: 0.01,
            max_probes: 24,
            on_step: None,
        }
    }

    fn check(&self) -> Result<()> {
        if self.objectives.has_per_request() || self.objectives.0.is_empty() {
            return Err(Error::missing(S::Slo, format!("an SLO search needs run-level objectives with a percentile, e.g. {} ttft:p99<500ms,tpot:p99<40ms", S::Slo)));
        }
        if !(self.tolerance > 0.0
            && self.tolerance < 1.0
            && self.start > 0.0
            && self.start <= self.max)
        {
            return Err(Error::invalid(
                S::SearchTolerance,
                format!("must be in (0, 1) and 0 < {} <= {}", S::SearchStart, S::SearchMax),
            ));
        }
        Ok(())
    }

    /// One probe at `x`: a whole run, its verdict and its row.
    async fn probe(&self, c: &Connected, out: &mut OutDir, i: usize, x: f64) -> Result<SloProbe> {
        let by_rate = self.over == SearchOver::Rate;
        let name = if by_rate { "rate" } else { "concurrency" };
        if let Some(f) = &self.on_step {
            f(&Step::Probe { index: i + 1, over: self.over, value: x });
        }
        let mut b = self.base.clone();
        b.seed = self.base.seed.wrapping_add(i as u64 * 7919);
        b.slos = Some(self.objectives.clone());
        b.requests = Some(self.requests_per_probe);
        b.duration = None;
        b.load = Some(if by_rate {
            match &self.base.load {
                Some(Load::Open { arrival, max_concurrency, .. }) => {
                    Load::Open { rate: x, arrival: *arrival, max_concurrency: *max_concurrency }
                }
                _ => Load::poisson(x),
            }
        } else {
            Load::closed(x as usize)
        });
        let (r, shown) = step(&b, c, out, &format!("probe-{i:02}-{name}-{x}")).await?;
        let s = &r.summary;
        let (why, limited_by) = match s.workload_failure() {
            Some(w) => (vec![w], Some("workload".to_owned())),
            None => probe_verdict(s, self.max_error_rate, by_rate.then_some(x)),
        };
        let values = s
            .metrics
            .slo_verdict
            .iter()
            .flat_map(|v| &v.objectives)
            .map(|o| {
                (
                    format!(
                        "{}_{}",
                        o.metric.metric().key(),
                        quetta_metrics::percentile_key(o.percentile)
                    ),
                    o.value_ms,
                )
            })
            .collect();
        Ok(SloProbe { value: x, pass: why.is_empty(), dir: shown, why, limited_by, values })
    }

    /// Bracket, then bisect.
    pub async fn run(self) -> Result<SloReport> {
        self.check()?;
        let c = self.base.target.connect().await?;
        let mut out = OutDir::of(&self.base);
        let by_rate = self.over == SearchOver::Rate;
        let round =
            |x: f64| if by_rate { (x * 1000.0).round() / 1000.0 } else { x.round().max(1.0) };
        let mut probes: Vec<SloProbe> = Vec::new();
        let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
        let mut x = round(self.start);
        while probes.len() < self.max_probes && !self.base.control.stopped() {
            let p = self.probe(&c, &mut out, probes.len(), x).await?;
            let pass = p.pass;
            probes.push(p);
            if failed(&probes) {
                break;
            }
            if !pass {
                hi = Some(x);
                break;
            }
            lo = Some(x);
            if x >= self.max {
                break;
            }
            x = round((x * 2.0).min(self.max));
        }
        while let (Some(l), Some(h)) = (lo, hi) {
            let narrow = if by_rate { (h - l) / h <= self.tolerance } else { h - l <= 1.0 };
            if narrow
                || probes.len() >= self.max_probes
                || self.base.control.stopped()
                || failed(&probes)
            {
                break;
            }
            let mid =
                round(if by_rate { f64::midpoint(l, h) } else { f64::midpoint(l, h).floor() });
            let p = self.probe(&c, &mut out, probes.len(), mid).await?;
            if p.pass {
                lo = Some(mid);
            } else {
                hi = Some(mid);
            }
            probes.push(p);
        }
        let report = self.report(probes, lo, hi);
        if let Some(d) = out.get()? {
            d.write_slo(&report)?;
        }
        Ok(report)
    }

    /// The report of `probes`; a search whose last probe's workload ended on an error has
    /// no answer (nor a first failing load) and says so in `failed`.
    fn report(&self, probes: Vec<SloProbe>, lo: Option<f64>, hi: Option<f64>) -> SloReport {
        let over = if self.over == SearchOver::Rate { "rate" } else { "concurrency" };
        let failed = probes
            .last()
            .filter(|_| failed(&probes))
            .map(|p| format!("probe {} ({over} {}): {}", probes.len(), p.value, p.why.join("; ")));
        let (lo, hi) = if failed.is_some() { (None, None) } else { (lo, hi) };
        let limited = |l: &str| probes.iter().any(|p| p.limited_by.as_deref() == Some(l));
        let mut notes = Vec::new();
        if limited("client") {
            notes.push(Note::ProbesClientLimited);
        }
        if limited("errors") {
            notes.push(Note::ProbesFailedOnErrors { max_error_pct: self.max_error_rate * 100.0 });
        }
        if hi.is_none() && failed.is_none() {
            notes.push(Note::EveryProbePassed { up_to: lo.unwrap_or(self.max) });
        }
        if lo.is_none() && failed.is_none() {
            notes.push(Note::FirstProbeFailed { start: self.start });
        }
        if self.base.control.stopped() {
            notes.push(Note::StoppedAfterProbes(probes.len()));
        }
        SloReport {
            schema_version: 1,
            search: over.into(),
            objectives: self.objectives.to_string(),
            tolerance: self.tolerance,
            requests_per_probe: self.requests_per_probe,
            answer: lo,
            first_failing: hi,
            probes,
            notes,
            failed,
        }
    }

    /// Run on a runtime of its own.
    pub fn run_blocking(self) -> Result<SloReport> {
        crate::runtime(self.base.threads)?.block_on(self.run())
    }
}

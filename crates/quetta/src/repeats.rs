//! [`Repeats`]: one run repeated, each an ordinary run directory (`run-1/` … `run-N/`), and
//! every figure's mean, spread and 95 % confidence interval across them in `repeats.json`
//! (docs/METRICS.md, Repeated runs).

use std::time::Duration;

use quetta_engine::setting::Setting as S;
use quetta_report::{RepeatRun, RepeatsReport, Summary, UntilCi};

use crate::sweep::{step, step_seed, OnStep, OutDir, Step};
use crate::{BenchReport, Benchmark, Error, Result};

/// A run repeated `runs` times on one connected target.
///
/// ```no_run
/// # async fn demo() -> quetta::Result<()> {
/// use quetta::{Benchmark, Repeats, Target};
/// let base = Benchmark::new(Target::openai("http://127.0.0.1:8000")).requests(200);
/// let r = Repeats::new(base, 5).run().await?;
/// let t = r.report.figure("ttft_ms.p99").unwrap();
/// println!("TTFT p99 {:.1} ms ± {:?}", t.across.mean, t.across.stddev);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Repeats {
    pub base: Benchmark,
    pub runs: usize,
    /// Send the same prompts in every repeat (by default each draws fresh ones).
    pub same_prompts: bool,
    /// Wait this long between repeats (a stop during it ends the repeats at once).
    pub pause: Duration,
    /// Stop before `runs` once every one of these figures' 95 % interval is at most this
    /// half-width (a share of its mean): `runs` is then the most. No figures:
    /// [`UntilCi::DEFAULT_FIGURES`].
    pub until_ci: Option<(f64, Vec<String>)>,
    pub on_step: Option<OnStep>,
}

impl std::fmt::Debug for Repeats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repeats")
            .field("runs", &self.runs)
            .field("same_prompts", &self.same_prompts)
            .field("pause", &self.pause)
            .finish_non_exhaustive()
    }
}

/// What a repeated run gives: the statistics and each repeat's own report.
#[derive(Debug)]
#[non_exhaustive]
pub struct RepeatsOutcome {
    pub report: RepeatsReport,
    pub runs: Vec<BenchReport>,
    /// The directory holding the repeats and `repeats.json`, when one was written.
    pub dir: Option<std::path::PathBuf>,
}

impl RepeatsOutcome {
    /// Why the repeated run failed, for an exit status: the first repeat that failed
    /// ([`quetta_report::Summary::failure`] with `min_success_rate`).
    pub fn failure(&self, min_success_rate: f64) -> Option<String> {
        self.runs.iter().enumerate().find_map(|(i, r)| {
            let why = r.summary.failure(min_success_rate)?;
            Some(format!("repeat {}: {why}", i + 1))
        })
    }
}

impl Repeats {
    pub fn new(base: Benchmark, runs: usize) -> Self {
        Self {
            base,
            runs,
            same_prompts: false,
            pause: Duration::ZERO,
            until_ci: None,
            on_step: None,
        }
    }

    /// Run every repeat; stop after a repeat (or during a pause) when the run was stopped,
    /// and after a repeat whose workload ended on an error (every later one would too).
    pub async fn run(mut self) -> Result<RepeatsOutcome> {
        if self.runs == 0 {
            return Err(Error::invalid(S::NumRuns, "give at least 1 run"));
        }
        if self.base.sharding.is_some() {
            let (a, b) = (S::NumRuns, S::Shards);
            return Err(Error::conflict(
                a,
                b,
                format!("{a} repeats one run: not a sharded one ({b})"),
            ));
        }
        if let Some((w, figures)) = &mut self.until_ci {
            if figures.is_empty() {
                *figures = UntilCi::DEFAULT_FIGURES.map(String::from).to_vec();
            }
            check_until_ci(*w, figures, self.runs)?;
        }
        let c = self.base.target.connect().await?;
        let mut out = OutDir::of(&self.base);
        let (mut rows, mut reports) = (Vec::new(), Vec::new());
        for i in 1..=self.runs {
            if i > 1 && !self.pause.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(self.pause) => {}
                    () = self.base.control.wait_stopped() => {}
                }
            }
            if self.base.control.stopped() {
                break;
            }
            if let Some(f) = &self.on_step {
                f(&Step::Repeat { index: i, of: self.runs });
            }
            let mut b = self.base.clone();
            b.seed = step_seed(self.base.seed, i - 1, self.same_prompts);
            let (r, shown) = step(&b, &c, &mut out, &format!("run-{i}")).await?;
            rows.push(RepeatRun::of(shown, b.seed, &r.summary));
            let ended = r.summary.workload_failure().is_some();
            reports.push(r);
            if ended || self.narrow_enough(&rows, &reports) {
                break;
            }
        }
        let summaries: Vec<&Summary> = reports.iter().map(|r| &r.summary).collect();
        let mut report = RepeatsReport::new(self.runs as u32, rows, &summaries, self.same_prompts);
        if let Some((w, figures)) = &self.until_ci {
            let met = UntilCi::wide(*w, figures, &report).is_empty();
            report.until_ci = Some(UntilCi { half_width: *w, figures: figures.clone(), met });
            // stopping early is no shortfall
            report.partial &= !met;
        }
        let dir = match out.get()? {
            Some(d) => {
                d.write_repeats(&report)?;
                Some(d.path().to_path_buf())
            }
            None => None,
        };
        Ok(RepeatsOutcome { report, runs: reports, dir })
    }

    /// With `until_ci`: whether the whole repeats so far give narrow enough intervals.
    fn narrow_enough(&self, rows: &[RepeatRun], reports: &[BenchReport]) -> bool {
        let Some((w, figures)) = &self.until_ci else { return false };
        if rows.iter().filter(|r| !r.partial).count() < UntilCi::MIN_RUNS {
            return false;
        }
        let summaries: Vec<&Summary> = reports.iter().map(|r| &r.summary).collect();
        let r = RepeatsReport::new(self.runs as u32, rows.to_vec(), &summaries, self.same_prompts);
        UntilCi::wide(*w, figures, &r).is_empty()
    }

    /// Run on a runtime of its own.
    pub fn run_blocking(self) -> Result<RepeatsOutcome> {
        crate::runtime(self.base.threads)?.block_on(self.run())
    }
}

/// The figures `until_ci` names must be figures a report carries, its half-width a share
/// above 0, and the repeats enough to judge.
fn check_until_ci(w: f64, figures: &[String], runs: usize) -> Result<()> {
    if !(w.is_finite() && w > 0.0) {
        return Err(Error::invalid(S::UntilCi, "give a half-width above 0, e.g. 2%"));
    }
    let known = RepeatsReport::figure_names();
    if let Some(f) = figures.iter().find(|f| !known.contains(f)) {
        let msg = format!("{f:?} is no figure of repeats.json (e.g. request_throughput, ttft_ms.p99, steady.e2e_ms.p50)");
        return Err(Error::invalid(S::UntilCi, msg));
    }
    if figures.is_empty() {
        return Err(Error::invalid(S::UntilCi, "name at least one figure"));
    }
    if runs < UntilCi::MIN_RUNS {
        let (a, b, n) = (S::UntilCi, S::NumRuns, UntilCi::MIN_RUNS);
        return Err(Error::conflict(a, b, format!("{a} needs {b} of {n} or more")));
    }
    Ok(())
}

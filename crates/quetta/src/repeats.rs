//! [`Repeats`]: one run repeated, each an ordinary run directory (`run-1/` … `run-N/`), and
//! every figure's mean, spread and 95 % confidence interval across them in `repeats.json`
//! (docs/METRICS.md, Repeated runs).

use std::time::Duration;

use quetta_engine::setting::Setting as S;
use quetta_report::{RepeatRun, RepeatsReport};

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

impl Repeats {
    pub fn new(base: Benchmark, runs: usize) -> Self {
        Self { base, runs, same_prompts: false, pause: Duration::ZERO, on_step: None }
    }

    /// Run every repeat; stop after a repeat (or during a pause) when the run was stopped,
    /// and after a repeat whose workload ended on an error (every later one would too).
    pub async fn run(self) -> Result<RepeatsOutcome> {
        if self.runs == 0 {
            return Err(Error::invalid(S::NumRuns, "give at least 1 run"));
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
            let s = &r.summary;
            let row = RepeatRun {
                dir: shown,
                seed: b.seed,
                completed: s.metrics.completed,
                failed: s.metrics.failed,
                partial: s.partial,
            };
            let ended = s.workload_failure().is_some();
            rows.push((row, s.clone()));
            reports.push(r);
            if ended {
                break;
            }
        }
        let report = RepeatsReport::new(self.runs as u32, rows, self.same_prompts);
        let dir = match out.get()? {
            Some(d) => {
                d.write_repeats(&report)?;
                Some(d.path().to_path_buf())
            }
            None => None,
        };
        Ok(RepeatsOutcome { report, runs: reports, dir })
    }

    /// Run on a runtime of its own.
    pub fn run_blocking(self) -> Result<RepeatsOutcome> {
        crate::runtime(self.base.threads)?.block_on(self.run())
    }
}

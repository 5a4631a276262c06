//! A dry run: what a benchmark would send, and when, from the very schedule and workload
//! the run itself would use; nothing is sent and nothing is written.

use std::fmt;
use std::time::Duration;

use quetta_loadgen::SessionConfig;
use quetta_workload::spec::BuiltWork;

use crate::{Benchmark, Result};

/// Lengths over the planned requests (the first 10,000); see [`Plan`].
///
/// ```
/// let s = quetta::LengthStats { mean: 10.0, min: 8.0, p50: 10.0, p99: 12.0, max: 12.0 };
/// assert_eq!(s.to_string(), "mean 10.0, min 8, p50 10, p99 12, max 12");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LengthStats {
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl LengthStats {
    fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
        Self {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            p50: q(0.5),
            p99: q(0.99),
            max: v[v.len() - 1],
        }
    }
}

impl fmt::Display for LengthStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mean {:.1}, min {}, p50 {}, p99 {}, max {}",
            self.mean, self.min, self.p50, self.p99, self.max
        )
    }
}

/// The sessions a dry run would start.
///
/// ```
/// # let rt = tokio::runtime::Runtime::new().unwrap();
/// use quetta::{Benchmark, Target, WorkloadSpec};
/// let b = Benchmark::new(Target::openai("http://127.0.0.1:9")).workload(WorkloadSpec::profile("mtbench-2turn"));
/// let plan = rt.block_on(b.plan())?;
/// let s = plan.sessions.unwrap();
/// assert_eq!((s.sessions, s.turns), (80, 160), "each of the 80 questions once, two turns each");
/// # Ok::<(), quetta::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionPlan {
    pub pacing: String,
    pub sessions: u64,
    pub turns: usize,
    pub new_prompt_tokens: u64,
    pub output_tokens: u64,
    /// The first five sessions: id, turns, new prompt tokens per turn.
    pub first: Vec<(String, usize, Vec<u32>)>,
}

/// What a benchmark would do: [`Benchmark::plan`], from the schedule and workload the run
/// would use. Nothing is sent (the target is not contacted) and nothing is written.
///
/// ```
/// # let rt = tokio::runtime::Runtime::new().unwrap();
/// use quetta::{Benchmark, Load, Target};
/// let b = Benchmark::new(Target::openai("http://127.0.0.1:9")).load(Load::constant(10.0)).requests(20);
/// let plan = rt.block_on(b.plan())?;
/// let o = plan.offsets.unwrap();
/// assert_eq!(o.len(), 20);
/// assert_eq!(o[19].as_millis(), 1900, "constant arrivals 100 ms apart");
/// # Ok::<(), quetta::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The load in words.
    pub load: String,
    /// Intended send offsets of the measured requests (open loops and replays).
    pub offsets: Option<Vec<Duration>>,
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
    pub input: LengthStats,
    pub output: LengthStats,
    /// Whether the input lengths are exact (a tokenizer) or estimates.
    pub exact: bool,
    pub sampled: usize,
    pub sessions: Option<SessionPlan>,
    pub notes: Vec<quetta_report::Note>,
}

impl Benchmark {
    /// What this benchmark would send and when, from the schedule and workload the run
    /// would use (a replay's warmup rows are skipped and its duration cuts it, as in the run).
    pub async fn plan(&self) -> Result<Plan> {
        let p = self.prepare().await?;
        let mut notes = p.notes.clone();
        let shard = p.cfg.shard;
        if !shard.is_whole() {
            let (k, n) = (shard.index(), shard.count());
            notes.push(quetta_report::Note::ShardOfPlan { index: k, count: n });
        }
        if let Some(sc) = &p.sessions {
            let sessions = session_plan(p.built.into_work(), sc);
            return Ok(Plan {
                load: format!("{:?}", sc.pacing),
                sessions,
                notes,
                ..Plan::default()
            });
        }
        let offsets = p.cfg.shard_offsets()?;
        let requests = p.cfg.shard_planned()?;
        let sample = requests.unwrap_or(0).clamp(1, 10_000);
        let (mut ins, mut outs, mut exact) = (Vec::new(), Vec::new(), true);
        let mut built = p.built;
        if let Some(w) = built.requests() {
            for i in 0..sample {
                let Some(r) = w.request(shard.nth_from(p.cfg.warmup, i)) else {
                    if let Some(e) = w.error() {
                        return Err(e.into());
                    }
                    break;
                };
                ins.push(f64::from(r.input_tokens));
                outs.push(f64::from(r.max_tokens));
                exact &= r.input_tokens_exact;
            }
        }
        let load = match &p.cfg.dispatch {
            quetta_loadgen::Dispatch::Closed { concurrency } => {
                format!("closed loop, {concurrency} requests in flight")
            }
            quetta_loadgen::Dispatch::Open { rate, arrival, max_concurrency } => format!(
                "open loop, {arrival:?} arrivals at {rate} req/s{}",
                max_concurrency.map_or(String::new(), |c| format!(", at most {c} in flight"))
            ),
            l => format!(
                "recorded send times{}",
                l.max_concurrency().map_or(String::new(), |c| format!(", at most {c} in flight"))
            ),
        };
        Ok(Plan {
            load,
            offsets,
            requests,
            duration: p.cfg.duration,
            sampled: ins.len(),
            input: LengthStats::of(ins),
            output: LengthStats::of(outs),
            exact,
            sessions: None,
            notes,
        })
    }
}

fn session_plan(work: BuiltWork, sc: &SessionConfig) -> Option<SessionPlan> {
    let mut s = work.into_sessions()?;
    let n = sc.num_sessions.or(s.distinct).unwrap_or(16);
    let mut plan = SessionPlan {
        pacing: format!("{:?}, think time {}", sc.pacing, sc.think),
        ..SessionPlan::default()
    };
    for i in 0..n {
        let Some(x) = s.source.session(i) else { break };
        if plan.first.len() < 5 {
            plan.first.push((
                x.id.clone(),
                x.turns.len(),
                x.turns.iter().map(|t| t.new_tokens).collect(),
            ));
        }
        plan.sessions += 1;
        plan.turns += x.turns.len();
        plan.new_prompt_tokens += x.turns.iter().map(|t| u64::from(t.new_tokens)).sum::<u64>();
        plan.output_tokens += x.turns.iter().map(|t| u64::from(t.max_tokens)).sum::<u64>();
    }
    Some(plan)
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dry run: nothing will be sent")?;
        if let Some(s) = &self.sessions {
            writeln!(f, "pacing     {}", s.pacing)?;
            for (id, turns, new) in &s.first {
                // A long session shows its first and last turns, and how many between.
                let shown = if new.len() > 12 {
                    let head = &new[..8];
                    let tail = &new[new.len() - 2..];
                    format!("{head:?} ... {} more ... {tail:?}", new.len() - 10)
                } else {
                    format!("{new:?}")
                };
                writeln!(f, "session    {id:<14} {turns} turns, new prompt tokens {shown}")?;
            }
            writeln!(
                f,
                "sessions   {}, {} turns, {} new prompt tokens, {} planned output tokens",
                s.sessions, s.turns, s.new_prompt_tokens, s.output_tokens
            )?;
        } else {
            writeln!(f, "load       {}", self.load)?;
            let n = self.requests.unwrap_or(0);
            match (&self.offsets, self.duration) {
                (Some(o), _) if o.len() > 1 => {
                    let span = o.last().copied().unwrap_or_default().as_secs_f64();
                    writeln!(
                        f,
                        "requests   {n} over {span:.3} s (mean rate {:.2} req/s)",
                        (n.saturating_sub(1)) as f64 / span.max(1e-9)
                    )?;
                }
                (_, Some(d)) => {
                    writeln!(f, "requests   as many as fit in {:.1} s", d.as_secs_f64())?;
                }
                _ => writeln!(f, "requests   {n}")?,
            }
            writeln!(
                f,
                "input      {} tokens{} (first {} requests)",
                self.input,
                if self.exact { "" } else { " (estimated)" },
                self.sampled
            )?;
            writeln!(f, "output     {} tokens (max_tokens)", self.output)?;
            if let Some(o) = &self.offsets {
                writeln!(f, "first sends:")?;
                for (i, t) in o.iter().take(10).enumerate() {
                    writeln!(f, "  #{i:<4} at {:>10.3} s", t.as_secs_f64())?;
                }
            }
        }
        for n in &self.notes {
            writeln!(f, "note       {n}")?;
        }
        Ok(())
    }
}

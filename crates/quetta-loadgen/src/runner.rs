//! The runner: one [`Runner`] for request workloads and sessions; closed and open loop,
//! warmup, stop conditions, drain and the policies around them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use quetta_engine::Engine;
use quetta_metrics::Observation;
use quetta_workload::session::SessionSource;
use quetta_workload::{PlannedRequest, Workload};
use tokio::sync::Semaphore;

use crate::config::{Dispatch, RunConfig};
use crate::control::RunControl;
use crate::error::RunError;
use crate::outcome::RunOutcome;
use crate::recorder::{Observer, RecordSink};
use crate::sessions::SessionConfig;
use crate::shared::{attempt, sleep_until, Done, Measured, Shared};
use crate::worker::{begin, Guard};

/// What a run sends: requests from a workload, or multi-turn sessions.
#[non_exhaustive]
pub enum Work {
    /// One request per workload index, timed by the run's load.
    Requests(Box<dyn Workload>),
    /// Multi-turn sessions from `source`, paced by `config`.
    Sessions { source: Box<dyn SessionSource>, config: SessionConfig },
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Work::Requests(_) => f.write_str("Work::Requests(..)"),
            Work::Sessions { config, .. } => {
                f.debug_struct("Work::Sessions").field("config", config).finish_non_exhaustive()
            }
        }
    }
}

/// Runs one load against one engine: a request workload or sessions, the same way (one
/// worker function, one recorder, the same stop, drain and policies). See the crate docs.
pub struct Runner {
    engine: Arc<dyn Engine>,
    cfg: RunConfig,
    sink: Option<Box<dyn RecordSink>>,
    observers: Vec<Arc<dyn Observer>>,
    control: Arc<RunControl>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("engine", &self.engine.name())
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// A run of `cfg` against `engine` (records go nowhere until [`Runner::sink`]).
    pub fn new(engine: Arc<dyn Engine>, cfg: RunConfig) -> Self {
        Self { engine, cfg, sink: None, observers: Vec::new(), control: RunControl::new() }
    }

    /// Append every record here as its request ends (e.g. a [`crate::JsonlSink`]).
    pub fn sink(mut self, sink: Box<dyn RecordSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Tell `observer` of every record (on the recorder thread).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers.push(observer);
        self
    }

    /// Control the run from outside: stop it (Ctrl-C), read its progress.
    pub fn control(mut self, control: Arc<RunControl>) -> Self {
        self.control = control;
        self
    }

    /// Run `work` to its end (or to a stop) and return what it produced.
    pub async fn run(self, work: Work) -> Result<RunOutcome, RunError> {
        let usage = crate::usage::Usage::start();
        let Runner { engine, cfg, sink, observers, control } = self;
        let sh = Shared::new(engine, cfg, control);
        let mut out = match work {
            Work::Requests(w) => run_requests(&sh, w, sink, observers).await?,
            Work::Sessions { source, config } => {
                crate::sessions::run(&sh, source, config, sink, observers).await?
            }
        };
        out.client = usage.finish(tokio::runtime::Handle::current().metrics().num_workers());
        Ok(out)
    }
}
/// A request workload: warmup (the same load shape, results counted only), the hook, then
/// the measured phase on the schedule of [`RunConfig::intended_offsets`].
async fn run_requests(
    sh: &Arc<Shared>,
    workload: Box<dyn Workload>,
    sink: Option<Box<dyn RecordSink>>,
    observers: Vec<Arc<dyn Observer>>,
) -> Result<RunOutcome, RunError> {
    let cfg = &sh.cfg;
    let offsets = cfg.shard_offsets()?;
    *sh.workload.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(workload);
    let mut warm = (0, 0);
    if cfg.warmup > 0 && !sh.control.stopped() {
        let conc = match &cfg.dispatch {
            Dispatch::Closed { concurrency } => *concurrency,
            load => load.max_concurrency().unwrap_or(cfg.warmup as usize),
        };
        let (tx, rx) = mpsc::channel::<Observation>();
        closed_loop(sh, 0, Some(cfg.warmup), None, conc, Instant::now(), tx).await;
        warm = sh.finish_warmup(&rx).await;
    }
    if let Some(h) = &cfg.before_measured {
        h.call().await?;
    }
    let (tx, rx) = mpsc::channel::<Observation>();
    let prog = &sh.control.progress;
    let known = cfg.shard_planned()?;
    // the counters from here on are the measured phase's (warmup requests have all ended)
    prog.completed.store(0, Ordering::Relaxed);
    prog.failed.store(0, Ordering::Relaxed);
    prog.recent_ttft_ms.clear();
    prog.planned.store(known.unwrap_or(0), Ordering::Relaxed);
    let ms = cfg.duration.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    prog.duration_ms.store(ms, Ordering::Relaxed);
    let m = Measured::begin(sh, rx, sink, observers, warm);
    let deadline = cfg.duration.map(|d| m.run_start + d);
    let planned = match (&cfg.dispatch, offsets) {
        (Dispatch::Closed { concurrency }, _) => {
            closed_loop(sh, cfg.warmup, cfg.num_requests, deadline, *concurrency, m.run_start, tx)
                .await;
            known
        }
        (load, offsets) => {
            let v = offsets.unwrap_or_default();
            let n = v.len() as u64;
            open_loop(sh, v, load.max_concurrency(), m.run_start, tx).await;
            Some(n)
        }
    };
    Ok(m.finish(sh, planned).await)
}
/// Closed loop over workload indices `first..first+count` (or until the deadline): this
/// shard's of them, at its share of `concurrency`.
async fn closed_loop(
    sh: &Arc<Shared>,
    first: u64,
    count: Option<u64>,
    deadline: Option<Instant>,
    concurrency: usize,
    run_start: Instant,
    tx: mpsc::Sender<Observation>,
) {
    let next = Arc::new(AtomicU64::new(0));
    let shard = sh.cfg.shard;
    let count = count.map(|c| shard.share_of(first, c));
    for _ in 0..shard.share_usize(concurrency).max(1) {
        let sh2 = sh.clone();
        let next = next.clone();
        let tx = tx.clone();
        sh.outstanding.fetch_add(1, Ordering::SeqCst);
        let h = tokio::spawn(async move {
            let sh = sh2;
            let _done = Done(sh.clone());
            // The slot's previous request's end, and when the slot began its first one.
            let mut prev_end: Option<Duration> = None;
            let mut slot_start: Option<Instant> = None;
            loop {
                if sh.control.stopped() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                if count.is_some_and(|c| k >= c) {
                    break;
                }
                let id = shard.nth_from(first, k);
                let Some(p) = sh.next_request(id) else { break };
                let input = p.input_tokens;
                let req = sh.cfg.engine_request(id, p);
                let now = Instant::now();
                let prog = &sh.control.progress;
                prog.dispatched.fetch_add(1, Ordering::Relaxed);
                prog.in_flight.fetch_add(1, Ordering::Relaxed);
                let mut o = begin(&req, input, now, now, run_start);
                o.turnaround = prev_end.map(|e| o.started.saturating_sub(e));
                slot_start.get_or_insert(now);
                let mut g = Guard::new(o, tx.clone(), run_start);
                let tail = attempt(&sh, req, run_start, g.obs.as_mut().expect("fresh guard")).await;
                prev_end = g.obs.as_ref().map(|o| o.end);
                prog.account(g);
                tail.finish().await;
            }
            if let Some(s) = slot_start {
                sh.add_busy(s.elapsed());
            }
        });
        sh.track(h.abort_handle());
    }
    drop(tx);
    // Return when every worker has ended, or at the deadline, or on stop; requests still
    // in flight are the caller's to drain.
    sh.idle_or_stop(deadline).await;
}
/// Open loop: a dispatcher thread releases each request at its intended time.
async fn open_loop(
    sh: &Arc<Shared>,
    offsets: Vec<Duration>,
    max_concurrency: Option<usize>,
    run_start: Instant,
    tx: mpsc::Sender<Observation>,
) {
    let handle = tokio::runtime::Handle::current();
    let shard = sh.cfg.shard;
    let sem = max_concurrency.map(|n| Arc::new(Semaphore::new(shard.share_usize(n).max(1))));
    let sh2 = sh.clone();
    // The dispatcher itself counts as outstanding until it has released everything.
    sh.outstanding.fetch_add(1, Ordering::SeqCst);
    // A producer thread builds requests ahead of time (prompts can take milliseconds to
    // build), so the dispatcher only waits and releases.
    let (ptx, prx) = mpsc::sync_channel::<(u64, PlannedRequest)>(256);
    let n_offsets = offsets.len() as u64;
    let sh_p = sh.clone();
    let producer = std::thread::Builder::new()
        .name("quetta-prepare".into())
        .spawn(move || {
            let first = sh_p.cfg.warmup;
            for k in 0..n_offsets {
                if sh_p.control.stopped() {
                    break;
                }
                let id = shard.nth_from(first, k);
                let Some(p) = sh_p.next_request(id) else { break };
                if ptx.send((id, p)).is_err() {
                    break;
                }
            }
        })
        .expect("spawn the producer thread");
    let dispatcher = std::thread::Builder::new()
        .name("quetta-dispatch".into())
        .spawn(move || {
            let sh = sh2;
            for off in &offsets {
                let Ok((id, p)) = prx.recv() else { break };
                let intended = run_start + *off;
                sleep_until(intended, &sh.control);
                if sh.control.stopped() {
                    break;
                }
                let input = p.input_tokens;
                let req = sh.cfg.engine_request(id, p);
                sh.outstanding.fetch_add(1, Ordering::SeqCst);
                sh.control.progress.dispatched.fetch_add(1, Ordering::Relaxed);
                let task_sh = sh.clone();
                let tx = tx.clone();
                let sem = sem.clone();
                let h = handle.spawn(async move {
                    let started = Instant::now();
                    let sh = task_sh;
                    let _done = Done(sh.clone());
                    let mut g =
                        Guard::new(begin(&req, input, intended, started, run_start), tx, run_start);
                    let permit = match &sem {
                        Some(s) => s.clone().acquire_owned().await.ok(),
                        None => None,
                    };
                    let prog = &sh.control.progress;
                    prog.in_flight.fetch_add(1, Ordering::Relaxed);
                    let tail =
                        attempt(&sh, req, run_start, g.obs.as_mut().expect("fresh guard")).await;
                    let released = Instant::now();
                    if let Some(o) = g.obs.as_mut() {
                        o.release = Some(released.saturating_duration_since(run_start + o.end));
                    }
                    prog.account(g);
                    sh.add_busy(released - started);
                    tail.finish().await;
                    drop(permit);
                });
                sh.track(h.abort_handle());
            }
            drop(prx);
            let _ = producer.join();
            sh.task_done();
        })
        .expect("spawn the dispatcher thread");
    // Wait for the dispatcher without blocking a runtime worker; Ctrl-C ends it early.
    let _ = tokio::task::spawn_blocking(move || dispatcher.join()).await;
}

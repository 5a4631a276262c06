//! The runner: one [`Runner`] for request workloads and sessions; closed and open loop,
//! warmup, stop conditions, drain and the policies around them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use quetta_engine::{Engine, EngineRequest};
use quetta_metrics::{Aggregate, ClientStats, Observation};
use quetta_workload::session::SessionSource;
use quetta_workload::{PlannedRequest, Workload, WorkloadError};
use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;

use crate::config::{Load, RunConfig};
use crate::recorder::{self, Observer, RecordSink};
use crate::sessions::{SessionConfig, SessionCounts};
use crate::worker::{begin, observe, Guard, Tail};

/// The future a [`BeforeMeasured`] hook returns.
pub type HookFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// An action run once between the warmup and the measured phase (e.g. resetting the
/// server's prefix cache); its error stops the run.
#[derive(Clone)]
pub struct BeforeMeasured(pub Arc<dyn Fn() -> HookFuture + Send + Sync>);

impl std::fmt::Debug for BeforeMeasured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeMeasured(..)")
    }
}

impl BeforeMeasured {
    pub(crate) async fn call(&self) -> Result<(), RunError> {
        (self.0)().await.map_err(RunError::BeforeMeasured)
    }
}

/// A run could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("invalid run configuration: {0}")]
    Config(String),
    #[error("the workload has no request {0}")]
    WorkloadExhausted(u64),
    #[error("before the measured phase: {0}")]
    BeforeMeasured(String),
}

/// Live counters, readable at any time (progress bars): those of the measured phase from
/// its start on.
///
/// ```
/// use std::sync::atomic::Ordering::Relaxed;
/// let c = quetta_loadgen::RunControl::new();
/// // a display reads them while the run goes on
/// let p = &c.progress;
/// let done = p.completed.load(Relaxed) + p.failed.load(Relaxed);
/// assert_eq!((done, p.planned.load(Relaxed)), (0, 0));
/// assert_eq!(p.recent_ttft_ms.median(), None);
/// ```
#[derive(Debug, Default)]
pub struct Progress {
    pub warmup_done: AtomicU64,
    pub dispatched: AtomicU64,
    pub in_flight: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    /// TTFTs of the last completed requests (the live TTFT p50 of a progress bar).
    pub recent_ttft_ms: quetta_metrics::live::RecentMedian,
    /// Measured requests planned, set when the measured phase starts (0: not known, as for
    /// sessions and duration-bounded closed loops).
    pub planned: AtomicU64,
    /// The run's duration limit in ms (0: none).
    pub duration_ms: AtomicU64,
}

impl Progress {
    /// One line for a progress display, `elapsed_s` into the run: done, in flight, errors and
    /// the rate of ended requests.
    pub fn line(&self, elapsed_s: f64) -> String {
        let (done, failed) =
            (self.completed.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed));
        let rate = if elapsed_s > 0.0 { (done + failed) as f64 / elapsed_s } else { 0.0 };
        let in_flight = self.in_flight.load(Ordering::Relaxed);
        format!("[{elapsed_s:6.1}s] {done} done, {in_flight} in flight, {failed} errors, {rate:.1} req/s")
    }

    /// A request has ended: deliver its observation and count it.
    pub(crate) fn account(&self, g: Guard) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let (ok, ttft) = g.finish();
        if ok {
            if let Some(t) = ttft {
                self.recent_ttft_ms.push(t.as_secs_f64() * 1e3);
            }
            self.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Controls a running run: `stop` ends sending (Ctrl-C) and lets requests in flight drain.
///
/// ```
/// let c = quetta_loadgen::RunControl::new();
/// c.stop(); // e.g. from a Ctrl-C handler: no new requests, those in flight drain
/// assert!(c.stopped());
/// assert!(c.progress.line(1.0).contains("0 done"));
/// ```
#[derive(Debug)]
pub struct RunControl {
    stop: AtomicBool,
    notify: Notify,
    pub progress: Progress,
}

impl Default for RunControl {
    fn default() -> Self {
        Self { stop: AtomicBool::new(false), notify: Notify::new(), progress: Progress::default() }
    }
}

impl RunControl {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    /// Stop sending new requests; requests in flight get the drain timeout to finish.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    pub aggregate: Aggregate,
    /// Measured requests the configuration asked for (`None` for duration-bounded closed
    /// loops and for sessions).
    pub planned: Option<u64>,
    /// Measured requests released by the load generator, counted by the runner itself as
    /// it released them (independently of the records).
    pub dispatched: u64,
    /// Records the recorder received (completed + failed); equal to `dispatched` unless a
    /// record was lost, which the summary would say.
    pub records: u64,
    /// Of those, requests actually handed to the engine.
    pub sent: u64,
    pub warmup_completed: u64,
    pub warmup_failed: u64,
    /// The run was stopped early (Ctrl-C) or ran out of workload.
    pub interrupted: bool,
    /// The error the workload ended on (a request it could not build), if it did.
    pub workload_error: Option<WorkloadError>,
    pub sink_error: Option<String>,
    /// Wall-clock time the measured phase started.
    pub started_at: SystemTime,
    /// Achieved send rate over the measured phase (requests/s between first and last send).
    pub achieved_send_rate: Option<f64>,
    /// Requests cancelled when the drain timeout expired.
    pub cancelled_in_drain: u64,
    /// The instant every `*_offset_ms` of the records counts from.
    pub run_start: Instant,
    /// Per second of the measured phase: sent, ended, completed, tokens, in flight, TTFT.
    pub series: Vec<quetta_metrics::series::Second>,
    /// Steady-state window and the over-saturation verdict.
    pub steadiness: Option<quetta_metrics::series::Steadiness>,
    /// The run was ended by the stop-on-saturation policy.
    pub stopped_on_saturation: bool,
    /// How the sessions of a session run ended.
    pub sessions: Option<SessionCounts>,
    /// The client's own CPU and memory over this run.
    pub client: ClientStats,
    /// Slot-seconds occupied (closed loop) or request-seconds in flight (open loop) in the
    /// measured phase, by the runner's own count (Little's law, docs/METRICS.md).
    pub busy_s: f64,
}

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

pub(crate) struct Shared {
    engine: Arc<dyn Engine>,
    /// `dispatched` of the progress when the measured phase started.
    measured_from: AtomicU64,
    pub(crate) cfg: RunConfig,
    pub(crate) control: Arc<RunControl>,
    /// The request workload (`None` for session runs, whose source lives elsewhere).
    workload: Mutex<Option<Box<dyn Workload>>>,
    pub(crate) outstanding: AtomicU64,
    idle: Notify,
    /// Tasks that may still be running, aborted when the drain timeout expires.
    tasks: Mutex<Vec<AbortHandle>>,
    exhausted: AtomicBool,
    /// Why the workload ended, when it ended on an error.
    workload_error: Mutex<Option<WorkloadError>>,
    /// Nanoseconds of slots occupied (closed loop) or requests in flight (open loop) in the
    /// measured phase: the runner's own count for Little's law.
    busy_ns: AtomicU64,
}

impl Shared {
    pub(crate) fn new(
        engine: Arc<dyn Engine>,
        cfg: RunConfig,
        control: Arc<RunControl>,
    ) -> Arc<Self> {
        // The run's timeouts, once, around whatever engine it drives.
        let engine = if crate::timeouts::any(&cfg.timeouts) {
            Arc::new(crate::timeouts::WithTimeouts::new(engine, cfg.timeouts)) as Arc<dyn Engine>
        } else {
            engine
        };
        Arc::new(Self {
            engine,
            measured_from: AtomicU64::new(0),
            cfg,
            control,
            workload: Mutex::new(None),
            outstanding: AtomicU64::new(0),
            idle: Notify::new(),
            tasks: Mutex::new(Vec::new()),
            exhausted: AtomicBool::new(false),
            workload_error: Mutex::new(None),
            busy_ns: AtomicU64::new(0),
        })
    }

    /// Count `d` of a slot occupied, or of a request in flight.
    pub(crate) fn add_busy(&self, d: Duration) {
        self.busy_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn next_request(&self, index: u64) -> Option<PlannedRequest> {
        let mut w = self.workload.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let p = w.as_mut().and_then(|w| w.request(index));
        if p.is_none() {
            if let Some(e) = w.as_ref().and_then(Workload::error) {
                self.workload_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get_or_insert(e);
            }
            self.exhausted.store(true, Ordering::SeqCst);
        }
        p
    }

    /// End a warmup phase: drain it, count its successes and failures (their records are
    /// left out of the results) and publish the count.
    pub(crate) async fn finish_warmup(&self, rx: &mpsc::Receiver<Observation>) -> (u64, u64) {
        self.drain(self.cfg.drain_timeout).await;
        let (mut ok, mut failed) = (0, 0);
        for o in rx.try_iter() {
            if o.error.is_none() {
                ok += 1;
            } else {
                failed += 1;
            }
        }
        self.control.progress.warmup_done.store(ok + failed, Ordering::Relaxed);
        (ok, failed)
    }

    /// Give the tasks in flight `timeout` to finish, then cancel the rest (recorded as
    /// cancelled). Returns how many were cancelled.
    pub(crate) async fn drain(&self, timeout: Duration) -> u64 {
        if self.wait_idle(Some(Instant::now() + timeout)).await {
            return 0;
        }
        let n = self.outstanding.load(Ordering::SeqCst);
        self.cancel_all();
        self.wait_idle(None).await;
        n
    }

    /// Wait until every task has ended, the run is stopped, or the deadline has passed.
    pub(crate) async fn idle_or_stop(&self, deadline: Option<Instant>) {
        let stop_or_deadline = async {
            loop {
                let notified = self.control.notify.notified();
                if self.control.stopped() {
                    return;
                }
                match deadline {
                    Some(d) => {
                        tokio::select! {
                            () = notified => {}
                            () = tokio::time::sleep_until(d.into()) => return,
                        }
                    }
                    None => notified.await,
                }
            }
        };
        tokio::select! {
            _ = self.wait_idle(None) => {}
            () = stop_or_deadline => {}
        }
    }

    pub(crate) fn track(&self, h: AbortHandle) {
        let mut t = self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Finished tasks' handles pin their task cells: prune them as the list doubles.
        if t.len() >= 1024 && t.len().is_power_of_two() {
            t.retain(|h| !h.is_finished());
        }
        t.push(h);
    }

    /// Abort every task still running; their guards record them as cancelled.
    fn cancel_all(&self) {
        for h in self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            h.abort();
        }
    }

    pub(crate) fn task_done(&self) {
        if self.outstanding.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    async fn wait_idle(&self, limit: Option<Instant>) -> bool {
        loop {
            let notified = self.idle.notified();
            if self.outstanding.load(Ordering::SeqCst) == 0 {
                return true;
            }
            match limit {
                Some(t) => {
                    if tokio::time::timeout_at(t.into(), notified).await.is_err() {
                        return self.outstanding.load(Ordering::SeqCst) == 0;
                    }
                }
                None => notified.await,
            }
        }
    }
}

/// Whether a failed attempt may be sent again: it failed before any token, for a reason
/// that a later attempt may not meet.
fn retryable(o: &Observation) -> bool {
    o.token_chunks == 0
        && o.error.as_ref().is_some_and(|e| {
            matches!(
                e.kind(),
                "connect"
                    | "http_429"
                    | "http_5xx"
                    | "throttled"
                    | "connection_closed"
                    | "timeout_connect"
                    | "timeout_first_byte"
            )
        })
}

/// Send a request, and again after retryable failures when the run allows retries. The
/// observation ends as the last attempt's, with `attempts` and the earlier errors recorded;
/// `started` and `intended` stay the first's, so latency from the intended time covers all.
/// Returns the last attempt's [`Tail`].
pub(crate) async fn attempt(
    sh: &Shared,
    req: EngineRequest,
    run_start: Instant,
    o: &mut Observation,
) -> Tail {
    if sh.cfg.retries == 0 {
        return observe(sh.engine.as_ref(), req, run_start, o).await;
    }
    let mut n = 0;
    loop {
        let tail = observe(sh.engine.as_ref(), req.clone(), run_start, o).await;
        if n >= sh.cfg.retries || !retryable(o) || sh.control.stopped() {
            o.attempts = n + 1;
            return tail;
        }
        tail.finish().await;
        n += 1;
        let err = o.error.take().expect("retryable implies an error");
        let retry_after = match &err {
            quetta_engine::EngineError::HttpStatus { retry_after: Some(v), .. } => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64),
            _ => None,
        };
        o.retry_errors.push(err.kind().to_owned());
        let backoff =
            sh.cfg.retry_backoff.saturating_mul(1 << (n - 1).min(16)).min(Duration::from_secs(30));
        tokio::time::sleep(retry_after.unwrap_or(backoff)).await;
        // A fresh attempt: keep when it was meant to go and started; forget the rest.
        let keep = (o.intended, o.started, std::mem::take(&mut o.retry_errors));
        *o = Observation {
            id: o.id,
            session_id: o.session_id.take(),
            intended: keep.0,
            started: keep.1,
            planned_input_tokens: o.planned_input_tokens,
            planned_output_tokens: o.planned_output_tokens,
            streamed: o.streamed,
            itl_us: std::mem::take(&mut o.itl_us),
            text: o.text.take().map(|mut t| {
                t.clear();
                t
            }),
            retry_errors: keep.2,
            ..Observation::default()
        };
        o.itl_us.clear();
    }
}

/// Marks a task finished when it ends, aborted or not.
pub(crate) struct Done(pub(crate) Arc<Shared>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.task_done();
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
        let conc = match &cfg.load {
            Load::Closed { concurrency } => *concurrency,
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
    let planned = match (&cfg.load, offsets) {
        (Load::Closed { concurrency }, _) => {
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

/// The measured phase of a run: its clock, its recorder and its policies.
pub(crate) struct Measured {
    rec: std::thread::JoinHandle<recorder::RecorderResult>,
    started_at: SystemTime,
    pub(crate) run_start: Instant,
    saturation: Option<tokio::task::JoinHandle<bool>>,
    warm: (u64, u64),
}

impl Measured {
    /// Start the measured phase now: the recorder on `rx`, the dispatch count from here, the
    /// stop-on-saturation policy when asked for. `warm` is the warmup's (completed, failed).
    pub(crate) fn begin(
        sh: &Shared,
        rx: mpsc::Receiver<Observation>,
        sink: Option<Box<dyn RecordSink>>,
        observers: Vec<Arc<dyn Observer>>,
        warm: (u64, u64),
    ) -> Self {
        // the clock first: a sharded run has just met its common start
        let (started_at, run_start) = (SystemTime::now(), Instant::now());
        let rec = recorder::spawn(rx, sink, observers, sh.cfg.slos.clone());
        sh.busy_ns.store(0, Ordering::SeqCst);
        sh.measured_from
            .store(sh.control.progress.dispatched.load(Ordering::SeqCst), Ordering::SeqCst);
        let saturation =
            sh.cfg.stop_on_saturation.then(|| crate::policy::watch(sh.control.clone()));
        Self { rec, started_at, run_start, saturation, warm }
    }

    /// End the run: drain, join the recorder and the policies, put the outcome together.
    pub(crate) async fn finish(self, sh: &Shared, planned: Option<u64>) -> RunOutcome {
        // Drain: requests in flight get the drain timeout, then are cancelled (and recorded).
        let cancelled_in_drain = sh.drain(sh.cfg.drain_timeout).await;
        let stopped_on_saturation = match self.saturation {
            Some(h) if h.is_finished() => h.await.unwrap_or(false),
            Some(h) => {
                h.abort();
                false
            }
            None => false,
        };
        let rec = self.rec;
        let r = tokio::task::spawn_blocking(move || rec.join().expect("recorder thread"))
            .await
            .expect("join recorder");
        let dispatched = sh
            .control
            .progress
            .dispatched
            .load(Ordering::SeqCst)
            .saturating_sub(sh.measured_from.load(Ordering::SeqCst));
        let series = r.series.finish();
        let steadiness = r.series.steadiness(&series);
        RunOutcome {
            series,
            steadiness,
            records: r.aggregate.completed + r.aggregate.failed,
            achieved_send_rate: quetta_metrics::rates::send_rate(
                r.sent,
                r.first_sent_ms,
                r.last_sent_ms,
            ),
            aggregate: r.aggregate,
            planned,
            dispatched,
            sent: r.sent,
            warmup_completed: self.warm.0,
            warmup_failed: self.warm.1,
            interrupted: sh.control.stopped() || sh.exhausted.load(Ordering::SeqCst),
            workload_error: sh
                .workload_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
            sink_error: r.sink_error,
            started_at: self.started_at,
            cancelled_in_drain,
            run_start: self.run_start,
            stopped_on_saturation,
            sessions: None,
            client: ClientStats::default(),
            busy_s: sh.busy_ns.load(Ordering::SeqCst) as f64 / 1e9,
        }
    }
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

/// Sleep until `target` on the OS timer, then spin the last few microseconds. Wakes at
/// least every 50 ms to notice a stop.
pub(crate) fn sleep_until(target: Instant, control: &RunControl) {
    const SPIN: Duration = Duration::from_micros(60);
    const SLICE: Duration = Duration::from_millis(50);
    loop {
        let now = Instant::now();
        if now >= target || control.stopped() {
            return;
        }
        let left = target - now;
        if left > SPIN {
            std::thread::sleep(left.checked_sub(SPIN).unwrap().min(SLICE));
        } else {
            std::hint::spin_loop();
        }
    }
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

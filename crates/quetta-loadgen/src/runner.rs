//! Load policies: closed loop and open loop, warmup, stop conditions and drain.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use quetta_engine::{Engine, EngineRequest, RequestParams};
use quetta_metrics::{Aggregate, Observation, SloSet};
use quetta_workload::arrival::{Arrival, Schedule};
use quetta_workload::{PlannedRequest, Workload};
use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;

use crate::recorder::{self, Observer, RecordSink};
use crate::worker::{begin, observe, Guard};

/// How load is applied.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Load {
    /// Keep `concurrency` requests in flight.
    Closed { concurrency: usize },
    /// Send at `rate` requests per second following `arrival`, optionally capped.
    Open { rate: f64, arrival: Arrival, max_concurrency: Option<usize> },
    /// Send request `i` at `offsets[i]` (trace replay), optionally capped.
    Scheduled { offsets: std::sync::Arc<Vec<Duration>>, max_concurrency: Option<usize> },
}

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

/// What one run does.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub load: Load,
    /// Stop after this many measured requests.
    pub num_requests: Option<u64>,
    /// Stop sending after this long (measured phase).
    pub duration: Option<Duration>,
    /// Requests sent first and left out of the results.
    pub warmup: u64,
    /// How long requests in flight may finish after the last send before they are cancelled.
    pub drain_timeout: Duration,
    /// Seed of the arrival process.
    pub seed: u64,
    pub slos: Option<SloSet>,
    /// Stream responses (the default); when false, TTFT equals E2E.
    pub stream: bool,
    /// Ask the server to ignore end-of-sequence.
    pub ignore_eos: bool,
    /// Ask for exactly the planned output length (`min_tokens = max_tokens` and `ignore_eos`).
    pub exact_output_length: bool,
    /// Sampling, extra body fields and extra headers: shared by every request of the run.
    pub params: Arc<RequestParams>,
    /// Keep generated text in the records.
    pub capture_text: bool,
    /// Send a failed request again up to this many times (0: never). Only failures before
    /// any token are retried: connect errors, HTTP 429 and 5xx, connections closed before
    /// the answer, connect and first-byte timeouts.
    pub retries: u32,
    /// First wait before a retry; it doubles with each attempt (at most 30 s), and a
    /// server's `Retry-After` takes precedence.
    pub retry_backoff: Duration,
    /// Run after the warmup, before the measured phase starts.
    pub before_measured: Option<BeforeMeasured>,
}

impl RunConfig {
    /// A closed-loop run of `n` requests at `concurrency`, with defaults for the rest.
    pub fn closed(concurrency: usize, n: u64) -> Self {
        Self {
            load: Load::Closed { concurrency },
            num_requests: Some(n),
            duration: None,
            warmup: 0,
            drain_timeout: Duration::from_secs(30),
            seed: 0,
            slos: None,
            stream: true,
            ignore_eos: false,
            exact_output_length: false,
            params: Arc::default(),
            capture_text: false,
            retries: 0,
            retry_backoff: Duration::from_millis(500),
            before_measured: None,
        }
    }

    /// An open-loop run of `n` requests at `rate`, with defaults for the rest.
    pub fn open(rate: f64, arrival: Arrival, n: u64) -> Self {
        Self { load: Load::Open { rate, arrival, max_concurrency: None }, ..Self::closed(1, n) }
    }

    fn validate(&self) -> Result<(), RunError> {
        let bad = |m: &str| Err(RunError::Config(m.to_owned()));
        match self.load {
            Load::Closed { concurrency: 0 } => return bad("concurrency must be at least 1"),
            Load::Open { rate, .. } if !(rate.is_finite() && rate > 0.0) => {
                return bad("request rate must be a positive number of requests per second")
            }
            Load::Open { max_concurrency: Some(0), .. } => {
                return bad("max concurrency must be at least 1")
            }
            _ => {}
        }
        if self.num_requests.is_none() && self.duration.is_none() {
            return bad("give a number of requests or a duration");
        }
        if self.num_requests == Some(0) {
            return bad("number of requests must be at least 1");
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return bad("duration must be positive");
        }
        Ok(())
    }

    pub(crate) fn engine_request(&self, id: u64, p: PlannedRequest) -> EngineRequest {
        let mut r = EngineRequest::new(id, p.prompt);
        r.max_tokens = Some(p.max_tokens);
        r.stream = self.stream;
        r.ignore_eos = self.ignore_eos || self.exact_output_length;
        if self.exact_output_length {
            r.min_tokens = Some(p.max_tokens);
        }
        r.params = self.params.clone();
        r.capture_text = self.capture_text;
        r
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

/// Live counters, readable at any time (progress bars).
#[derive(Debug, Default)]
pub struct Progress {
    pub warmup_done: AtomicU64,
    pub dispatched: AtomicU64,
    pub in_flight: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
}

impl Progress {
    /// A request has ended: deliver its observation and count it.
    pub(crate) fn account(&self, g: Guard) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if g.finish() {
            self.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Controls a running run: `stop` ends sending (Ctrl-C) and lets requests in flight drain.
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
    /// Measured requests the configuration asked for (`None` for duration-bounded closed loops).
    pub planned: Option<u64>,
    /// Measured requests released by the load generator (= completed + failed).
    pub dispatched: u64,
    /// Of those, requests actually handed to the engine.
    pub sent: u64,
    pub warmup_completed: u64,
    pub warmup_failed: u64,
    /// The run was stopped early (Ctrl-C) or ran out of workload.
    pub interrupted: bool,
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
}

pub(crate) struct Shared {
    engine: Arc<dyn Engine>,
    pub(crate) cfg: RunConfig,
    pub(crate) control: Arc<RunControl>,
    /// The request workload (`None` for session runs, whose source lives elsewhere).
    workload: Mutex<Option<Box<dyn Workload>>>,
    pub(crate) outstanding: AtomicU64,
    idle: Notify,
    /// Tasks that may still be running, aborted when the drain timeout expires.
    tasks: Mutex<Vec<AbortHandle>>,
    exhausted: AtomicBool,
}

impl Shared {
    pub(crate) fn new(
        engine: Arc<dyn Engine>,
        cfg: RunConfig,
        control: Arc<RunControl>,
    ) -> Arc<Self> {
        Arc::new(Self {
            engine,
            cfg,
            control,
            workload: Mutex::new(None),
            outstanding: AtomicU64::new(0),
            idle: Notify::new(),
            tasks: Mutex::new(Vec::new()),
            exhausted: AtomicBool::new(false),
        })
    }

    fn next_request(&self, index: u64) -> Option<PlannedRequest> {
        let p = self
            .workload
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_mut()
            .and_then(|w| w.request(index));
        if p.is_none() {
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
pub(crate) async fn attempt(
    sh: &Shared,
    req: EngineRequest,
    run_start: Instant,
    o: &mut Observation,
) {
    if sh.cfg.retries == 0 {
        observe(sh.engine.as_ref(), req, run_start, o).await;
        return;
    }
    let mut n = 0;
    loop {
        observe(sh.engine.as_ref(), req.clone(), run_start, o).await;
        if n >= sh.cfg.retries || !retryable(o) || sh.control.stopped() {
            o.attempts = n + 1;
            return;
        }
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

/// Run the workload against the engine. See the crate documentation.
pub async fn run(
    engine: Arc<dyn Engine>,
    workload: Box<dyn Workload>,
    cfg: RunConfig,
    sink: Option<Box<dyn RecordSink>>,
    observers: Vec<Arc<dyn Observer>>,
    control: Arc<RunControl>,
) -> Result<RunOutcome, RunError> {
    cfg.validate()?;
    let sh = Shared::new(engine, cfg.clone(), control.clone());
    *sh.workload.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(workload);

    // Warmup: same load shape, results discarded (counted only).
    let (mut warm_ok, mut warm_fail) = (0, 0);
    if cfg.warmup > 0 && !control.stopped() {
        let conc = match &cfg.load {
            Load::Closed { concurrency } => *concurrency,
            Load::Open { max_concurrency, .. } | Load::Scheduled { max_concurrency, .. } => {
                max_concurrency.unwrap_or(cfg.warmup as usize)
            }
        };
        let (tx, rx) = mpsc::channel::<Observation>();
        closed_loop(&sh, 0, Some(cfg.warmup), None, conc, Instant::now(), tx).await;
        (warm_ok, warm_fail) = sh.finish_warmup(&rx).await;
    }

    if let Some(h) = &cfg.before_measured {
        h.call().await?;
    }
    let (tx, rx) = mpsc::channel::<Observation>();
    let rec = recorder::spawn(rx, sink, observers, cfg.slos.clone());
    let started_at = SystemTime::now();
    let run_start = Instant::now();
    let deadline = cfg.duration.map(|d| run_start + d);
    let planned = match cfg.load.clone() {
        Load::Closed { concurrency } => {
            closed_loop(&sh, cfg.warmup, cfg.num_requests, deadline, concurrency, run_start, tx)
                .await;
            cfg.num_requests
        }
        Load::Scheduled { offsets, max_concurrency } => {
            // Measured requests follow the warmup ones; their schedule starts at zero.
            let skip = (cfg.warmup as usize).min(offsets.len());
            let base = offsets.get(skip).copied().unwrap_or_default();
            let mut v: Vec<Duration> =
                offsets[skip..].iter().map(|o| o.saturating_sub(base)).collect();
            if let Some(n) = cfg.num_requests {
                v.truncate(n as usize);
            }
            if let Some(d) = cfg.duration {
                v.retain(|o| *o < d);
            }
            let n = v.len() as u64;
            open_loop(&sh, v, max_concurrency, run_start, tx).await;
            Some(n)
        }
        Load::Open { rate, arrival, max_concurrency } => {
            let sched = Schedule::new(arrival, rate, cfg.seed)
                .map_err(|e| RunError::Config(e.to_string()))?;
            let offsets = match (cfg.num_requests, cfg.duration) {
                (Some(n), Some(d)) => sched.take_n(n).into_iter().take_while(|o| *o < d).collect(),
                (Some(n), None) => sched.take_n(n),
                (None, Some(d)) => sched.until(d),
                (None, None) => unreachable!("validated"),
            };
            let n = offsets.len() as u64;
            open_loop(&sh, offsets, max_concurrency, run_start, tx).await;
            Some(n)
        }
    };
    Ok(finish_run(&sh, rec, planned, started_at, run_start, (warm_ok, warm_fail)).await)
}

/// End a run: drain, join the recorder and put the outcome together.
pub(crate) async fn finish_run(
    sh: &Shared,
    rec: std::thread::JoinHandle<recorder::RecorderResult>,
    planned: Option<u64>,
    started_at: SystemTime,
    run_start: Instant,
    (warm_ok, warm_fail): (u64, u64),
) -> RunOutcome {
    // Drain: requests in flight get the drain timeout, then are cancelled (and recorded).
    let cancelled_in_drain = sh.drain(sh.cfg.drain_timeout).await;
    let r = tokio::task::spawn_blocking(move || rec.join().expect("recorder thread"))
        .await
        .expect("join recorder");
    let dispatched = r.aggregate.completed + r.aggregate.failed;
    let achieved_send_rate = match (r.first_sent_ms, r.last_sent_ms) {
        (Some(a), Some(b)) if b > a && r.sent > 1 => Some((r.sent - 1) as f64 / ((b - a) / 1e3)),
        _ => None,
    };
    let series = r.series.finish();
    let steadiness = r.series.steadiness(&series);
    RunOutcome {
        series,
        steadiness,
        aggregate: r.aggregate,
        planned,
        dispatched,
        sent: r.sent,
        warmup_completed: warm_ok,
        warmup_failed: warm_fail,
        interrupted: sh.control.stopped() || sh.exhausted.load(Ordering::SeqCst),
        sink_error: r.sink_error,
        started_at,
        achieved_send_rate,
        cancelled_in_drain,
        run_start,
    }
}

/// Closed loop over workload indices `first..first+count` (or until the deadline).
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
    for _ in 0..concurrency {
        let sh2 = sh.clone();
        let next = next.clone();
        let tx = tx.clone();
        sh.outstanding.fetch_add(1, Ordering::SeqCst);
        let h = tokio::spawn(async move {
            let sh = sh2;
            let _done = Done(sh.clone());
            loop {
                if sh.control.stopped() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                if count.is_some_and(|c| k >= c) {
                    break;
                }
                let Some(p) = sh.next_request(first + k) else { break };
                let input = p.input_tokens;
                let req = sh.cfg.engine_request(first + k, p);
                let now = Instant::now();
                let prog = &sh.control.progress;
                prog.dispatched.fetch_add(1, Ordering::Relaxed);
                prog.in_flight.fetch_add(1, Ordering::Relaxed);
                let mut g =
                    Guard::new(begin(&req, input, now, now, run_start), tx.clone(), run_start);
                attempt(&sh, req, run_start, g.obs.as_mut().expect("fresh guard")).await;
                prog.account(g);
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
    let sem = max_concurrency.map(|n| Arc::new(Semaphore::new(n)));
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
                let Some(p) = sh_p.next_request(first + k) else { break };
                if ptx.send((first + k, p)).is_err() {
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
                    attempt(&sh, req, run_start, g.obs.as_mut().expect("fresh guard")).await;
                    drop(permit);
                    prog.account(g);
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

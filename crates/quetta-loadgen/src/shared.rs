//! What every policy of a run shares: the engine, the configuration, the workload, the
//! tasks in flight and their drain; one attempt of a request with its retries; the
//! measured phase's clock and recorder; the dispatcher's sleep.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use quetta_engine::{Engine, EngineRequest};
use quetta_metrics::{ClientStats, Observation};
use quetta_workload::{PlannedRequest, Workload, WorkloadError};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::config::RunConfig;
use crate::control::RunControl;
use crate::outcome::RunOutcome;
use crate::recorder::{self, Observer, RecordSink};
use crate::worker::{observe, Tail};

pub(crate) struct Shared {
    engine: Arc<dyn Engine>,
    /// `dispatched` of the progress when the measured phase started.
    measured_from: AtomicU64,
    pub(crate) cfg: RunConfig,
    pub(crate) control: Arc<RunControl>,
    /// The request workload (`None` for session runs, whose source lives elsewhere).
    pub(crate) workload: Mutex<Option<Box<dyn Workload>>>,
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

    pub(crate) fn next_request(&self, index: u64) -> Option<PlannedRequest> {
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
            match deadline {
                Some(d) => {
                    tokio::select! {
                        () = self.control.wait_stopped() => {}
                        () = tokio::time::sleep_until(d.into()) => {}
                    }
                }
                None => self.control.wait_stopped().await,
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

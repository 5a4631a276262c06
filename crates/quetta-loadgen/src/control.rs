//! Controlling a run from outside: stop it, read its live counters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::worker::Guard;

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
    pub(crate) notify: Notify,
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

    /// Return once the run is stopped (at once when it is already).
    pub async fn wait_stopped(&self) {
        loop {
            // a `Notified` hears `notify_waiters` from its creation on, polled or not
            let woken = self.notify.notified();
            if self.stopped() {
                return;
            }
            woken.await;
        }
    }
}

//! Numbers for a live progress display, never written to a result file: the **live TTFT
//! p50** is the median TTFT of the last [`RecentMedian::WINDOW`] completed requests
//! (docs/METRICS.md). Results use the run's HdrHistograms ([`crate::Aggregate`]).

use std::collections::VecDeque;
use std::sync::Mutex;

/// The median of the most recent values (a fixed window), shared between threads.
///
/// ```
/// let m = quetta_metrics::live::RecentMedian::default();
/// assert_eq!(m.median(), None);
/// for v in [30.0, 10.0, 20.0] {
///     m.push(v);
/// }
/// assert_eq!(m.median(), Some(20.0));
/// m.clear();
/// assert_eq!(m.median(), None);
/// ```
#[derive(Debug, Default)]
pub struct RecentMedian {
    values: Mutex<VecDeque<f64>>,
}

impl RecentMedian {
    /// Values the median is taken over.
    pub const WINDOW: usize = 256;

    pub fn push(&self, v: f64) {
        let mut q = self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() == Self::WINDOW {
            q.pop_front();
        }
        q.push_back(v);
    }

    /// Forget every value (a new run or sweep step starts).
    pub fn clear(&self) {
        self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    /// The median of the window (the lower middle value of an even count).
    pub fn median(&self) -> Option<f64> {
        let q = self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<f64> = q.iter().copied().collect();
        drop(q);
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[(v.len() - 1) / 2])
    }
}

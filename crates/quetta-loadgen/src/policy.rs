//! Stop-on-saturation: a policy of the runner, not of any binary. Requests in flight are
//! sampled every second of the measured phase; after 10 s the run is stopped when the mean of
//! the last third of the samples exceeds 1.5 × the first third's (and by at least 4) and is
//! still rising: an open loop the server cannot keep up with.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::RunControl;

/// Whether a series of in-flight samples (one per second) shows a load the server does not
/// keep up with; the means of its first and last thirds.
pub fn saturated(v: &[f64]) -> Option<(f64, f64)> {
    if v.len() < 10 {
        return None;
    }
    let third = v.len() / 3;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&v[..third]), mean(&v[v.len() - third..]));
    let rising = v[v.len() - 1] >= v[v.len() - third];
    (last > first * 1.5 && last - first >= 4.0 && rising).then_some((first, last))
}

/// Watch the run; stop it when [`saturated`]. Returns true when it stopped the run.
pub(crate) fn watch(control: Arc<RunControl>) -> tokio::task::JoinHandle<bool> {
    tokio::spawn(async move {
        let mut v: Vec<f64> = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if control.stopped() {
                return false;
            }
            v.push(control.progress.in_flight.load(Ordering::Relaxed) as f64);
            if saturated(&v).is_some() {
                control.stop();
                return true;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rising_in_flight_is_saturation_and_a_steady_load_is_not() {
        let steady: Vec<f64> = (0..20).map(|i| 10.0 + f64::from(i % 3)).collect();
        assert_eq!(saturated(&steady), None);
        let rising: Vec<f64> = (0..12).map(|i| 2.0 + 3.0 * f64::from(i)).collect();
        assert!(saturated(&rising).is_some());
        assert_eq!(saturated(&rising[..9]), None, "not before 10 s");
    }
}

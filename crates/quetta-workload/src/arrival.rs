//! Arrival processes: the intended send times of an open-loop run.
//!
//! The schedule is absolute: offsets from the start of the measured phase, computed up front
//! from a seeded generator, so a late send never shifts later ones.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};

use crate::WorkloadError;

/// How inter-arrival gaps are drawn.
///
/// ```
/// use quetta_workload::arrival::{Arrival, Schedule};
/// let t = Schedule::new(Arrival::Constant, 4.0, 0).unwrap().take_n(3);
/// assert_eq!(t.iter().map(|d| d.as_millis()).collect::<Vec<_>>(), [0, 250, 500]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Arrival {
    /// Evenly spaced: every gap is `1/rate`.
    Constant,
    /// Exponential gaps with mean `1/rate`.
    Poisson,
    /// Gamma gaps with shape `burstiness` and mean `1/rate` (vLLM's `--burstiness`): shape 1
    /// is Poisson, below 1 burstier, above 1 more regular.
    Gamma { burstiness: f64 },
    /// The rate rises (or falls) linearly from `from` to the schedule's rate over `over`,
    /// then stays there. Arrivals are Poisson (`poisson`) or evenly spaced in the ramp's
    /// cumulative intensity.
    Ramp { from: f64, over: Duration, poisson: bool },
    /// Bursts of `size` simultaneous requests every `gap` (the rate is ignored).
    Bursts { size: u32, gap: Duration },
}

/// An open-loop schedule generator.
#[derive(Debug, Clone)]
pub struct Schedule {
    arrival: Arrival,
    rate: f64,
    rng: ChaCha8Rng,
    gamma: Option<Gamma<f64>>,
    next: f64,
    count: u64,
}

impl Schedule {
    /// A schedule of `rate` requests per second. The first arrival is at offset 0.
    pub fn new(arrival: Arrival, rate: f64, seed: u64) -> Result<Self, WorkloadError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(WorkloadError::Invalid {
                name: "request rate",
                reason: format!("must be a positive number of requests per second, got {rate}"),
            });
        }
        let gamma = match arrival {
            Arrival::Gamma { burstiness } => {
                if !(burstiness.is_finite() && burstiness > 0.0) {
                    return Err(WorkloadError::Invalid {
                        name: "burstiness",
                        reason: format!("must be positive, got {burstiness}"),
                    });
                }
                Some(Gamma::new(burstiness, 1.0 / (rate * burstiness)).map_err(|e| {
                    WorkloadError::Invalid { name: "burstiness", reason: e.to_string() }
                })?)
            }
            Arrival::Ramp { from, over, .. } => {
                if !(from.is_finite() && from >= 0.0) || over.is_zero() {
                    return Err(WorkloadError::Invalid {
                        name: "ramp",
                        reason: format!("needs a non-negative start rate and a positive length, got {from}/s over {over:?}"),
                    });
                }
                None
            }
            Arrival::Bursts { size, gap } => {
                if size == 0 || gap.is_zero() {
                    return Err(WorkloadError::Invalid {
                        name: "bursts",
                        reason: "need a size of at least 1 and a positive gap".into(),
                    });
                }
                None
            }
            _ => None,
        };
        Ok(Self { arrival, rate, rng: ChaCha8Rng::seed_from_u64(seed), gamma, next: 0.0, count: 0 })
    }

    fn gap(&mut self) -> f64 {
        match self.arrival {
            Arrival::Constant => 1.0 / self.rate,
            Arrival::Poisson => {
                let u: f64 = self.rng.gen::<f64>();
                -(1.0 - u).ln() / self.rate
            }
            Arrival::Gamma { .. } => self.gamma.as_ref().map_or(0.0, |g| g.sample(&mut self.rng)),
            // handled in next_offset
            Arrival::Ramp { .. } | Arrival::Bursts { .. } => 0.0,
        }
    }

    /// The first `n` intended send offsets.
    pub fn take_n(mut self, n: u64) -> Vec<Duration> {
        (0..n).map(|_| self.next_offset()).collect()
    }

    /// Every intended send offset before `horizon`.
    pub fn until(mut self, horizon: Duration) -> Vec<Duration> {
        let mut v = Vec::new();
        loop {
            let t = self.next_offset();
            if t >= horizon {
                return v;
            }
            v.push(t);
        }
    }

    fn next_offset(&mut self) -> Duration {
        match self.arrival {
            Arrival::Bursts { size, gap } => {
                let t = (self.count / u64::from(size)) as f64 * gap.as_secs_f64();
                self.count += 1;
                return Duration::from_secs_f64(t);
            }
            Arrival::Ramp { from, over, poisson } => {
                // Arrival k happens where the cumulative intensity reaches s_k: s_k = k for
                // even spacing, a unit-rate Poisson process for Poisson arrivals.
                let s = if poisson {
                    if self.count > 0 {
                        let u: f64 = self.rng.gen::<f64>();
                        self.next += -(1.0 - u).ln();
                    }
                    self.next
                } else {
                    self.count as f64
                };
                self.count += 1;
                return Duration::from_secs_f64(ramp_inverse(
                    s,
                    from,
                    self.rate,
                    over.as_secs_f64(),
                ));
            }
            _ => {}
        }
        let t = if self.count == 0 { 0.0 } else { self.next };
        self.count += 1;
        self.next = t + self.gap();
        Duration::from_secs_f64(t)
    }
}

/// The time at which the cumulative intensity of a linear ramp from `r0` to `r1` over `t`
/// seconds (then constant `r1`) reaches `s`.
fn ramp_inverse(s: f64, r0: f64, r1: f64, t: f64) -> f64 {
    let a = (r1 - r0) / t; // rate slope
    let total = r0 * t + a * t * t / 2.0;
    if s >= total {
        return t + (s - total) / r1;
    }
    if a.abs() < 1e-12 {
        return s / r0;
    }
    // r0 x + a x^2 / 2 = s
    (-r0 + (r0 * r0 + 2.0 * a * s).sqrt()) / a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_schedule_and_rate_is_right() {
        let a = Schedule::new(Arrival::Poisson, 100.0, 7).unwrap().take_n(20_000);
        let b = Schedule::new(Arrival::Poisson, 100.0, 7).unwrap().take_n(20_000);
        assert_eq!(a, b);
        let rate = (a.len() - 1) as f64 / a.last().unwrap().as_secs_f64();
        assert!((rate - 100.0).abs() < 2.0, "{rate}");
        let g = Schedule::new(Arrival::Gamma { burstiness: 0.5 }, 100.0, 7).unwrap().take_n(20_000);
        let rate = (g.len() - 1) as f64 / g.last().unwrap().as_secs_f64();
        assert!((rate - 100.0).abs() < 3.0, "{rate}");
        let c = Schedule::new(Arrival::Constant, 4.0, 0).unwrap().until(Duration::from_secs(1));
        assert_eq!(c.len(), 4);
        assert!(Schedule::new(Arrival::Poisson, 0.0, 0).is_err());
        assert!(Schedule::new(Arrival::Gamma { burstiness: -1.0 }, 1.0, 0).is_err());
    }

    #[test]
    fn ramp_and_bursts() {
        // 0 -> 100 req/s over 10 s: 500 arrivals in the ramp, rate ~ 10/s in its first second
        let over = Duration::from_secs(10);
        let r = Schedule::new(Arrival::Ramp { from: 0.0, over, poisson: false }, 100.0, 1)
            .unwrap()
            .until(Duration::from_secs(12));
        let in_ramp = r.iter().filter(|t| **t < over).count();
        assert!((499..=501).contains(&in_ramp), "{in_ramp}");
        let first_s = r.iter().filter(|t| t.as_secs_f64() < 1.0).count();
        assert!((4..=6).contains(&first_s), "{first_s} in the first second (expected ~5)");
        let last_s = r.iter().filter(|t| (11.0..12.0).contains(&t.as_secs_f64())).count();
        assert!((99..=101).contains(&last_s), "{last_s}");
        let p = Schedule::new(Arrival::Ramp { from: 10.0, over, poisson: true }, 10.0, 3)
            .unwrap()
            .take_n(5000);
        let rate = 4999.0 / p.last().unwrap().as_secs_f64();
        assert!((rate - 10.0).abs() < 0.5, "{rate}");
        let b = Schedule::new(Arrival::Bursts { size: 3, gap: Duration::from_secs(2) }, 1.0, 0)
            .unwrap()
            .take_n(7);
        let secs: Vec<u64> = b.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, vec![0, 0, 0, 2, 2, 2, 4]);
        assert!(Schedule::new(Arrival::Bursts { size: 0, gap: Duration::from_secs(1) }, 1.0, 0)
            .is_err());
    }
}

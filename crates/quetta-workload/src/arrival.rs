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
        let t = if self.count == 0 { 0.0 } else { self.next };
        self.count += 1;
        self.next = t + self.gap();
        Duration::from_secs_f64(t)
    }
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
}

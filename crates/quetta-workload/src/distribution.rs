//! Distributional replay: fit a trace's input lengths, output lengths and inter-arrival gaps,
//! save the fit as a versioned JSON file, and draw synthetic workloads from it.
//!
//! Each quantity keeps 1,001 empirical quantiles (sampling interpolates between them, which
//! reproduces the trace's distribution closely) and parametric fits (lognormal, gamma,
//! Weibull; moment estimators) ranked by their Kolmogorov-Smirnov distance to the data, so a
//! reader sees which family describes the trace and how well.

use std::path::Path;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Gamma, LogNormal, Weibull};

use crate::synthetic::SyntheticSpec;
use crate::trace::TraceRequest;
use crate::{PlannedRequest, Workload, WorkloadError};

/// The version of the distribution file format.
pub const DIST_SCHEMA_VERSION: u32 = 1;
const QUANTILES: usize = 1001;

/// A parametric fit and how far it is from the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// `lognormal` (mu, sigma of ln x), `gamma` (shape, rate) or `weibull` (shape, scale).
    pub family: String,
    pub params: [f64; 2],
    /// Kolmogorov-Smirnov distance between the fit and the data.
    pub ks: f64,
}

/// One fitted quantity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fitted {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Values at probabilities 0, 0.001, ..., 1.
    pub quantiles: Vec<f64>,
    /// Parametric fits, best (smallest KS distance) first.
    pub fits: Vec<Fit>,
}

/// The distribution file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub schema_version: u32,
    pub source: String,
    pub input_len: Fitted,
    pub output_len: Fitted,
    /// Seconds between consecutive arrivals.
    pub inter_arrival_s: Fitted,
}

fn ks_distance(sorted: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let n = sorted.len() as f64;
    sorted.iter().enumerate().fold(0.0, |d, (i, &x)| {
        let f = cdf(x);
        d.max((f - i as f64 / n).abs()).max(((i + 1) as f64 / n - f).abs())
    })
}

fn fit(values: &[f64]) -> Fitted {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let quantiles = (0..QUANTILES)
        .map(|k| {
            let pos = k as f64 / (QUANTILES - 1) as f64 * (v.len().saturating_sub(1)) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            let t = pos - lo as f64;
            v.get(lo).copied().unwrap_or(0.0) * (1.0 - t) + v.get(hi).copied().unwrap_or(0.0) * t
        })
        .collect();
    // Parametric families need positive values.
    let pos: Vec<f64> = v.iter().map(|x| x.max(1e-9)).collect();
    let logs: Vec<f64> = pos.iter().map(|x| x.ln()).collect();
    let lm = logs.iter().sum::<f64>() / n;
    let lsd = (logs.iter().map(|x| (x - lm).powi(2)).sum::<f64>() / n).sqrt().max(1e-9);
    let mut fits = Vec::new();
    if let Ok(d) = LogNormal::new(lm, lsd) {
        fits.push(Fit {
            family: "lognormal".into(),
            params: [lm, lsd],
            ks: ks_distance(&pos, |x| d.cdf(x)),
        });
    }
    if var > 0.0 {
        let (shape, rate) = (mean * mean / var, mean / var);
        if let Ok(d) = Gamma::new(shape, rate) {
            fits.push(Fit {
                family: "gamma".into(),
                params: [shape, rate],
                ks: ks_distance(&pos, |x| d.cdf(x)),
            });
        }
    }
    // Weibull from log-moments: ln X is Gumbel(min) with sd = pi / (k sqrt 6).
    let k = std::f64::consts::PI / (6f64.sqrt() * lsd);
    let scale = (lm + 0.577_215_664_9 / k).exp();
    if let Ok(d) = Weibull::new(k, scale) {
        fits.push(Fit {
            family: "weibull".into(),
            params: [k, scale],
            ks: ks_distance(&pos, |x| d.cdf(x)),
        });
    }
    fits.sort_by(|a, b| a.ks.total_cmp(&b.ks));
    Fitted {
        count: v.len(),
        mean,
        min: v.first().copied().unwrap_or(0.0),
        max: v.last().copied().unwrap_or(0.0),
        quantiles,
        fits,
    }
}

impl Fitted {
    /// Draw a value: inverse of the empirical CDF, interpolated between quantiles.
    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        let u: f64 = rng.gen::<f64>() * (self.quantiles.len() - 1) as f64;
        let (lo, t) = (u.floor() as usize, u.fract());
        let a = self.quantiles[lo];
        let b = self.quantiles.get(lo + 1).copied().unwrap_or(a);
        a + (b - a) * t
    }
}

impl Distribution {
    /// Fit a trace.
    pub fn fit(source: &str, trace: &[TraceRequest]) -> Result<Self, WorkloadError> {
        if trace.len() < 2 {
            return Err(WorkloadError::Invalid {
                name: "trace",
                reason: "fitting needs at least 2 requests".into(),
            });
        }
        let inputs: Vec<f64> = trace.iter().map(|r| f64::from(r.input_len)).collect();
        let outputs: Vec<f64> = trace.iter().map(|r| f64::from(r.output_len)).collect();
        let gaps: Vec<f64> = trace
            .windows(2)
            .map(|w| (w[1].timestamp.saturating_sub(w[0].timestamp)).as_secs_f64())
            .collect();
        Ok(Self {
            schema_version: DIST_SCHEMA_VERSION,
            source: source.to_owned(),
            input_len: fit(&inputs),
            output_len: fit(&outputs),
            inter_arrival_s: fit(&gaps),
        })
    }

    /// Write the distribution file (`docs/schema/distribution.schema.json`).
    pub fn save(&self, path: &Path) -> Result<(), WorkloadError> {
        let text = serde_json::to_string_pretty(self).expect("a distribution serialises") + "\n";
        std::fs::write(path, text).map_err(|e| WorkloadError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Read a distribution file.
    pub fn load(path: &Path) -> Result<Self, WorkloadError> {
        let text = std::fs::read_to_string(path).map_err(|e| WorkloadError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let d: Self = serde_json::from_str(&text).map_err(|e| WorkloadError::Parse {
            path: path.display().to_string(),
            line: e.line(),
            field: "(json)".into(),
            reason: e.to_string(),
        })?;
        if d.schema_version != DIST_SCHEMA_VERSION {
            return Err(WorkloadError::Parse {
                path: path.display().to_string(),
                line: 1,
                field: "schema_version".into(),
                reason: format!(
                    "version {} is not supported (expected {DIST_SCHEMA_VERSION})",
                    d.schema_version
                ),
            });
        }
        for (name, f) in [
            ("input_len", &d.input_len),
            ("output_len", &d.output_len),
            ("inter_arrival_s", &d.inter_arrival_s),
        ] {
            if f.quantiles.len() < 2 || f.quantiles.windows(2).any(|w| w[1] < w[0]) {
                return Err(WorkloadError::Parse {
                    path: path.display().to_string(),
                    line: 1,
                    field: format!("{name}.quantiles"),
                    reason: "needs at least 2 non-decreasing values".into(),
                });
            }
        }
        Ok(d)
    }

    /// `n` intended send offsets drawn from the inter-arrival distribution.
    pub fn offsets(&self, n: u64, seed: u64) -> Vec<Duration> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA11C_E5ED);
        let mut t = 0.0;
        (0..n)
            .map(|i| {
                if i > 0 {
                    t += self.inter_arrival_s.sample(&mut rng).max(0.0);
                }
                Duration::from_secs_f64(t)
            })
            .collect()
    }
}

impl Distribution {
    /// What `quetta-bench workload fit` prints: per quantity its mean, p50 and p99 and the
    /// parametric fits ranked by KS.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for (name, f) in [
            ("input length", &self.input_len),
            ("output length", &self.output_len),
            ("inter-arrival (s)", &self.inter_arrival_s),
        ] {
            let fits: Vec<String> =
                f.fits.iter().map(|x| format!("{} KS {:.3}", x.family, x.ks)).collect();
            let _ = writeln!(
                s,
                "  {name:<18} mean {:>10.3}  p50 {:>10.3}  p99 {:>10.3}  fits: {}",
                f.mean,
                f.quantiles[500],
                f.quantiles[990],
                fits.join(", ")
            );
        }
        s
    }
}

/// Synthetic requests whose lengths are drawn from a [`Distribution`].
#[derive(Debug, Clone)]
pub struct DistWorkload {
    pub dist: Distribution,
    pub base: SyntheticSpec,
}

impl DistWorkload {
    /// Lengths of request `index` (deterministic for the seed).
    pub fn lengths(&self, index: u64) -> (u32, u32) {
        let mut rng =
            ChaCha8Rng::seed_from_u64(self.base.seed ^ index.wrapping_mul(0xBF58_476D_1CE4_E5B9));
        let i = self.dist.input_len.sample(&mut rng).round().max(1.0) as u32;
        let o = self.dist.output_len.sample(&mut rng).round().max(1.0) as u32;
        (i, o)
    }
}

impl Workload for DistWorkload {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let (i, o) = self.lengths(index);
        let spec = SyntheticSpec {
            input_len: i,
            input_stddev: 0.0,
            output_len: o,
            output_stddev: 0.0,
            ..self.base.clone()
        };
        Some(spec.planned(index))
    }
}

//! One distribution of an aggregate: its histogram, CDF and statistics.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The distributions an [`Aggregate`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Metric {
    Ttft,
    Ttfo,
    Tpot,
    /// Pooled: every gap of every request.
    Itl,
    /// One value per request: the mean of its gaps.
    ItlRequestMean,
    E2e,
    Queue,
    ScheduleLag,
    TtftFromIntended,
    E2eFromIntended,
    /// Per request: the mean time its frames waited for the client after arriving.
    ReadLag,
    /// Closed loop, per request: the previous request's end in its slot → its start.
    Turnaround,
    /// Open loop, per request: its end → the client releasing it.
    Release,
    /// Requests with several inputs (embeddings, rankings): E2E / inputs.
    PerInput,
}

impl Metric {
    pub const ALL: [Metric; 14] = [
        Metric::Ttft,
        Metric::Ttfo,
        Metric::Tpot,
        Metric::Itl,
        Metric::ItlRequestMean,
        Metric::E2e,
        Metric::Queue,
        Metric::ScheduleLag,
        Metric::TtftFromIntended,
        Metric::E2eFromIntended,
        Metric::ReadLag,
        Metric::Turnaround,
        Metric::Release,
        Metric::PerInput,
    ];

    /// The key of this metric in `summary.json`.
    pub fn key(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft_ms",
            Metric::Ttfo => "ttfo_ms",
            Metric::Tpot => "tpot_ms",
            Metric::Itl => "itl_ms",
            Metric::ItlRequestMean => "itl_request_mean_ms",
            Metric::E2e => "e2e_ms",
            Metric::Queue => "queue_ms",
            Metric::ScheduleLag => "schedule_lag_ms",
            Metric::TtftFromIntended => "ttft_from_intended_ms",
            Metric::E2eFromIntended => "e2e_from_intended_ms",
            Metric::ReadLag => "read_lag_ms",
            Metric::Turnaround => "turnaround_ms",
            Metric::Release => "release_ms",
            Metric::PerInput => "per_input_ms",
        }
    }

    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|&m| m == self).unwrap_or(0)
    }
}

/// Highest value a histogram tracks: one hour, in microseconds.
pub(crate) const MAX_US: u64 = 3_600_000_000;

/// One distribution: an HdrHistogram in microseconds (3 significant digits) for
/// percentiles, plus exact count, sum, sum of squares, min and max.
#[derive(Debug, Clone)]
pub(crate) struct Dist {
    pub(crate) hist: Histogram<u64>,
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pub(crate) sumsq: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Default for Dist {
    fn default() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds"),
            count: 0,
            sum: 0.0,
            sumsq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Dist {
    pub(crate) fn add(&mut self, ms: f64) {
        let us = (ms * 1e3).round().clamp(1.0, MAX_US as f64) as u64;
        self.hist.saturating_record(us);
        self.count += 1;
        self.sum += ms;
        self.sumsq += ms * ms;
        self.min = self.min.min(ms);
        self.max = self.max.max(ms);
    }

    /// Whole microseconds, many at once (a request's gaps): the histogram records each, the
    /// sums are taken in integers and added once.
    pub(crate) fn add_us(&mut self, values: &[u32]) {
        if values.is_empty() {
            return;
        }
        let (mut sum, mut sumsq, mut lo, mut hi) = (0u64, 0u128, u32::MAX, 0u32);
        for &us in values {
            self.hist.saturating_record(u64::from(us).clamp(1, MAX_US));
            sum += u64::from(us);
            sumsq += u128::from(us) * u128::from(us);
            lo = lo.min(us);
            hi = hi.max(us);
        }
        self.count += values.len() as u64;
        self.sum += sum as f64 / 1e3;
        self.sumsq += sumsq as f64 / 1e6;
        self.min = self.min.min(f64::from(lo) / 1e3);
        self.max = self.max.max(f64::from(hi) / 1e3);
    }

    pub(crate) fn merge(&mut self, o: &Dist) {
        self.hist.add(&o.hist).expect("same histogram bounds");
        self.count += o.count;
        self.sum += o.sum;
        self.sumsq += o.sumsq;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// (value ms, share of values at or below it), rising in both, about `points` of them
    /// evenly spaced in share and the maximum last; each value is its histogram bucket's
    /// highest (3 significant digits, as the percentiles), kept within min and max.
    pub(crate) fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        if self.count == 0 {
            return Vec::new();
        }
        let total = self.hist.len().max(1);
        let step = (total / points.max(1) as u64).max(1);
        let (mut out, mut seen, mut next) = (Vec::new(), 0u64, 0u64);
        for v in self.hist.iter_recorded() {
            seen += v.count_at_value();
            if seen > next || seen == total {
                let ms = self.hist.highest_equivalent(v.value_iterated_to()) as f64 / 1e3;
                out.push((round3(ms.clamp(self.min, self.max)), seen as f64 / total as f64));
                next = seen - seen % step + step;
            }
        }
        if out.last().is_some_and(|l| l.0 < self.max) {
            out.push((round3(self.max), 1.0));
        }
        out
    }

    pub(crate) fn stats(&self, extra: &[f64]) -> Stats {
        if self.count == 0 {
            return Stats { count: 0, ..Stats::default() };
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = (self.sumsq / n - mean * mean).max(0.0);
        let q = |p: f64| {
            let v = self.hist.value_at_quantile(p / 100.0) as f64 / 1e3;
            Some(round3(v.clamp(self.min, self.max)))
        };
        Stats {
            count: self.count,
            mean: Some(round3(mean)),
            stddev: Some(round3(var.sqrt())),
            min: Some(round3(self.min)),
            p50: q(50.0),
            p90: q(90.0),
            p95: q(95.0),
            p99: q(99.0),
            p999: q(99.9),
            max: Some(round3(self.max)),
            // the standard ones are fields already: `--percentiles 99.9` must not write
            // `p999` twice (summary.json could not be read back)
            extra: extra
                .iter()
                .filter(|&&p| !STANDARD_PERCENTILES.iter().any(|s| (s - p).abs() < 1e-9))
                .map(|&p| (percentile_key(p), q(p)))
                .collect(),
        }
    }
}

pub(crate) fn round3(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

/// The percentiles every [`Stats`] has as fields (p50, p90, p95, p99, p99.9).
pub const STANDARD_PERCENTILES: [f64; 5] = [50.0, 90.0, 95.0, 99.0, 99.9];

/// `p50`, `p99`, `p999`, `p99_99`-style key for a percentile.
pub fn percentile_key(p: f64) -> String {
    if (p - 99.9).abs() < 1e-9 {
        "p999".into()
    } else if p.fract() == 0.0 {
        format!("p{}", p as u64)
    } else {
        format!("p{}", p.to_string().replace('.', "_"))
    }
}

/// Summary statistics of one metric, in milliseconds. Fields are `null` without samples.
///
/// ```
/// let s = quetta_metrics::Aggregate::default().summary(&[]);
/// assert_eq!((s.ttft_ms.count, s.ttft_ms.p99), (0, None));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub mean: Option<f64>,
    pub stddev: Option<f64>,
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    /// Percentiles asked for with `--percentiles` beyond the standard ones.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Option<f64>>,
}

/// The share of each slot's cycle spent in the client above which the client set the pace.
pub const CLIENT_SHARE_LIMIT: f64 = 0.10;
/// The read lag p99 (ms) above which the client set the pace.
pub const READ_LAG_LIMIT_MS: f64 = 1.0;

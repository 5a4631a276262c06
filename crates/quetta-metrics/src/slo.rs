//! Service-level objectives, one grammar for two kinds (docs/METRICS.md, "SLOs"):
//!
//! - `ttft:500ms` is a **per-request threshold**: a request meets it when its own TTFT is at
//!   most 500 ms; goodput counts the requests that meet every threshold;
//! - `ttft:p99<500ms` is a **run-level objective**: the run meets it when the p99 of TTFT over
//!   the run is below 500 ms; the summary's `slo_verdict` evaluates each one as written.
//!
//! Both kinds can be mixed in one set: `ttft:500ms,tpot:p99<40ms`. Metrics: `ttft`, `ttfo`,
//! `tpot`, `e2e` (or vLLM's `e2el`), `itl_mean` (a request's mean gap between tokens), and
//! `itl` (every gap of every request, pooled: only run-level, `itl:p99<50ms`). A bound without
//! a unit is in milliseconds (vLLM's `--goodput ttft:500`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Aggregate, Metric, RequestRecord};

/// A metric an SLO can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SloMetric {
    Ttft,
    Ttfo,
    Tpot,
    E2e,
    /// Every gap between tokens, pooled over the run (`itl_ms` in the summary): run-level
    /// objectives only.
    Itl,
    /// A request's mean gap between tokens (`itl_request_mean_ms` in the summary).
    ItlMean,
}

impl SloMetric {
    pub fn name(self) -> &'static str {
        match self {
            Self::Ttft => "ttft",
            Self::Ttfo => "ttfo",
            Self::Tpot => "tpot",
            Self::E2e => "e2e",
            Self::Itl => "itl",
            Self::ItlMean => "itl_mean",
        }
    }

    /// Whether requests of this kind have the metric: every request has an E2E, only
    /// requests that generate have a first token or gaps between tokens.
    pub fn applies_to(self, kind: quetta_engine::RequestKind) -> bool {
        self == Self::E2e || kind.generates()
    }

    /// The distribution of the summary this metric's run-level objectives read.
    pub fn metric(self) -> Metric {
        match self {
            Self::Ttft => Metric::Ttft,
            Self::Ttfo => Metric::Ttfo,
            Self::Tpot => Metric::Tpot,
            Self::E2e => Metric::E2e,
            Self::Itl => Metric::Itl,
            Self::ItlMean => Metric::ItlRequestMean,
        }
    }

    /// The request's value of this metric, in ms. `None` when the request has none (a failed
    /// request; TPOT or ITL of a one-token answer). `Itl` has no per-request value of its own;
    /// a per-request `itl` bound read from an older file means the request's mean gap.
    pub fn value(self, r: &RequestRecord) -> Option<f64> {
        match self {
            Self::Ttft => r.ttft_ms,
            Self::Ttfo => r.ttfo_ms,
            Self::Tpot => r.tpot_ms,
            Self::E2e => r.e2e_ms,
            Self::Itl | Self::ItlMean => r.itl_mean_ms(),
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "ttft" => Self::Ttft,
            "ttfo" => Self::Ttfo,
            "tpot" => Self::Tpot,
            "e2e" | "e2el" => Self::E2e,
            "itl" => Self::Itl,
            "itl_mean" => Self::ItlMean,
            _ => return None,
        })
    }
}

/// One objective.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub metric: SloMetric,
    /// The bound, in milliseconds.
    pub threshold_ms: f64,
    /// Run-level objectives: the percentile that must be under the bound (e.g. 99.0).
    /// `None`: a per-request threshold.
    pub percentile: Option<f64>,
}

impl Slo {
    /// Whether this is a run-level objective (`ttft:p99<500ms`).
    pub fn is_run_level(&self) -> bool {
        self.percentile.is_some()
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.percentile {
            Some(p) => write!(
                f,
                "{}:{}<{}ms",
                self.metric.name(),
                crate::percentile_key(p),
                self.threshold_ms
            ),
            None => write!(f, "{}:{}ms", self.metric.name(), self.threshold_ms),
        }
    }
}

/// A set of objectives, per request and run-level mixed.
///
/// ```
/// let s: quetta_metrics::SloSet = "ttft:500ms,tpot:p99<40ms".parse().unwrap();
/// assert!(s.has_per_request());
/// assert_eq!(s.run_level().count(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SloSet(pub Vec<Slo>);

/// An SLO string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SloError {
    #[error("invalid SLO {item:?}: {reason} (expected e.g. ttft:500ms,tpot:50ms,e2e:10s per request, or ttft:p99<500ms for the run)")]
    Invalid { item: String, reason: String },
}

/// Parse a duration such as `500ms`, `1.5s`, `250us`, `2m`, `12h`, `30d`; a bare number is
/// milliseconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    parse_duration_bare(s, "ms")
}

/// A duration of the command line and of configuration (`--duration 60`, `--request-timeout
/// 600`, `--think-time 2`): `500ms`, `30s`, `2m`, and a bare number is **seconds**, as in
/// vLLM and GuideLLM. (SLO thresholds keep vLLM's milliseconds: [`parse_duration`].)
///
/// ```
/// use std::time::Duration;
/// use quetta_metrics::slo::parse_duration_secs;
/// assert_eq!(parse_duration_secs("60"), Some(Duration::from_secs(60)));
/// assert_eq!(parse_duration_secs("0.5"), Some(Duration::from_millis(500)));
/// assert_eq!(parse_duration_secs("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_duration_secs("-1"), None);
/// ```
pub fn parse_duration_secs(s: &str) -> Option<Duration> {
    parse_duration_bare(s, "s")
}

fn parse_duration_bare(s: &str, bare: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) =
        s.find(|c: char| c.is_ascii_alphabetic()).map_or((s, bare), |i| s.split_at(i));
    let v: f64 = num.trim().parse().ok()?;
    if !(v.is_finite() && v >= 0.0) {
        return None;
    }
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86_400.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// `p99` → 99, `p999` → 99.9, `p99_9` or `p99.9` → 99.9, `p50` → 50.
fn parse_percentile(p: &str) -> Option<f64> {
    let digits = p.trim().strip_prefix('p')?;
    let v: f64 = if digits.contains(['_', '.']) {
        digits.replace('_', ".").parse().ok()?
    } else {
        let v: f64 = digits.parse().ok()?;
        // p999 means 99.9 and p9999 99.99, as in summary.json keys
        if v > 100.0 {
            v / 10f64.powi(digits.len() as i32 - 2)
        } else {
            v
        }
    };
    (v > 0.0 && v < 100.0).then_some(v)
}

impl std::str::FromStr for SloSet {
    type Err = SloError;

    fn from_str(s: &str) -> Result<Self, SloError> {
        let mut out = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = |reason: &str| SloError::Invalid {
                item: item.to_owned(),
                reason: reason.to_owned(),
            };
            let (name, rest) = item.split_once(':').ok_or_else(|| bad("missing ':'"))?;
            let metric = SloMetric::parse(name.trim())
                .ok_or_else(|| bad("unknown metric; use ttft, ttfo, tpot, e2e, itl_mean or itl"))?;
            let (percentile, bound) = match rest.split_once('<') {
                Some((p, b)) => (
                    Some(parse_percentile(p).ok_or_else(|| {
                        bad("the percentile must look like p50, p99, p999 or p99_9")
                    })?),
                    b,
                ),
                None => (None, rest),
            };
            if metric == SloMetric::Itl && percentile.is_none() {
                return Err(bad("itl is every gap pooled over the run: bound a percentile of it (itl:p99<50ms), or each request's mean gap (itl_mean:50ms)"));
            }
            let d = parse_duration(bound)
                .ok_or_else(|| bad("the bound must be a duration such as 500ms or 2s"))?;
            if d.is_zero() {
                return Err(bad("the bound must be positive"));
            }
            out.push(Slo { metric, threshold_ms: d.as_secs_f64() * 1e3, percentile });
        }
        if out.is_empty() {
            return Err(SloError::Invalid {
                item: s.to_owned(),
                reason: "no objective given".into(),
            });
        }
        Ok(Self(out))
    }
}

impl fmt::Display for SloSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

/// One run-level objective, evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveVerdict {
    /// As written, e.g. `ttft:p99<500ms`.
    pub objective: String,
    pub metric: SloMetric,
    pub percentile: f64,
    pub threshold_ms: f64,
    /// The run's value at that percentile; `null` when the run has no sample of the metric.
    pub value_ms: Option<f64>,
    /// The value is below the bound (a metric without samples does not pass).
    pub pass: bool,
}

/// The run-level objectives of a run, each evaluated as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloVerdict {
    /// The run-level objectives, e.g. `ttft:p99<500ms,tpot:p99<40ms`.
    pub slo: String,
    /// Every objective passed.
    pub pass: bool,
    pub objectives: Vec<ObjectiveVerdict>,
}

impl SloSet {
    /// The per-request thresholds (goodput), with their indexes in the set.
    pub fn per_request(&self) -> impl Iterator<Item = (usize, &Slo)> {
        self.0.iter().enumerate().filter(|(_, s)| !s.is_run_level())
    }

    /// The run-level objectives.
    pub fn run_level(&self) -> impl Iterator<Item = &Slo> {
        self.0.iter().filter(|s| s.is_run_level())
    }

    /// Whether the set holds per-request thresholds (so goodput is defined).
    pub fn has_per_request(&self) -> bool {
        self.per_request().next().is_some()
    }

    /// Whether one request meets objective `i` (a per-request threshold; run-level
    /// objectives are not about one request and are always met here). Failed requests meet
    /// none; a metric the request does not have (TPOT of a one-token answer) is met.
    pub fn met(&self, i: usize, r: &RequestRecord) -> bool {
        let s = &self.0[i];
        if s.is_run_level() {
            return true;
        }
        if !r.ok() {
            return false;
        }
        s.metric.value(r).is_none_or(|v| v <= s.threshold_ms)
    }

    /// Whether one request meets every per-request threshold.
    pub fn met_all(&self, r: &RequestRecord) -> bool {
        self.per_request().all(|(i, _)| self.met(i, r))
    }

    /// Evaluate the run-level objectives over a run's aggregate; `None` without any.
    pub fn verdict(&self, agg: &Aggregate) -> Option<SloVerdict> {
        let objectives: Vec<ObjectiveVerdict> = self
            .run_level()
            .map(|s| {
                let p = s.percentile.unwrap_or(99.0);
                let value = agg.percentile(s.metric.metric(), p).map(|v| (v * 1e3).round() / 1e3);
                ObjectiveVerdict {
                    objective: s.to_string(),
                    metric: s.metric,
                    percentile: p,
                    threshold_ms: s.threshold_ms,
                    value_ms: value,
                    pass: value.is_some_and(|v| v < s.threshold_ms),
                }
            })
            .collect();
        if objectives.is_empty() {
            return None;
        }
        let slo = SloSet(self.run_level().copied().collect()).to_string();
        Some(SloVerdict { slo, pass: objectives.iter().all(|o| o.pass), objectives })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms_and_rejects_garbage() {
        let s: SloSet = "ttft:500ms,tpot:50ms,e2e:10s".parse().unwrap();
        assert_eq!(s.0.len(), 3);
        assert_eq!(s.0[2].threshold_ms, 10_000.0);
        assert!(s.has_per_request() && s.run_level().next().is_none());
        let s: SloSet = "ttft:p99<500ms,tpot:p999<40ms,itl:p99_9<20ms,e2el:p50<2s".parse().unwrap();
        assert_eq!(s.0[0].percentile, Some(99.0));
        assert_eq!(s.0[1].percentile, Some(99.9));
        assert_eq!(s.0[2].percentile, Some(99.9));
        assert_eq!(s.0[3].metric, SloMetric::E2e);
        assert!(!s.has_per_request());
        assert_eq!(s.to_string(), "ttft:p99<500ms,tpot:p999<40ms,itl:p999<20ms,e2e:p50<2000ms");
        // vLLM's --goodput form: a bare number is milliseconds
        let s: SloSet = "ttft:500,itl_mean:30".parse().unwrap();
        assert_eq!(s.0[0].threshold_ms, 500.0);
        assert_eq!(s.0[1].metric, SloMetric::ItlMean);
        for bad in [
            "",
            "ttft",
            "foo:1s",
            "ttft:abc",
            "ttft:0ms",
            "ttft:-1ms",
            "ttft:q99<1s",
            "ttft:p100<1s",
            "itl:50ms",
        ] {
            assert!(bad.parse::<SloSet>().is_err(), "{bad}");
        }
        let e = "itl:50ms".parse::<SloSet>().unwrap_err().to_string();
        assert!(e.contains("itl_mean:50ms") && e.contains("itl:p99<50ms"), "{e}");
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(parse_duration("1e300s"), None, "a bound too large for a Duration is refused");
    }
}

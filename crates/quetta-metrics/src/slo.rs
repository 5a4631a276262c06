//! Service-level objectives: `ttft:500ms,tpot:50ms,e2e:10s` (per request, for goodput), or
//! with a percentile, `ttft:p99<500ms` (for SLO search over a whole run).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::RequestRecord;

/// A metric an SLO can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SloMetric {
    Ttft,
    Ttfo,
    Tpot,
    E2e,
    /// The request's mean inter-token latency.
    Itl,
}

impl SloMetric {
    pub fn name(self) -> &'static str {
        match self {
            Self::Ttft => "ttft",
            Self::Ttfo => "ttfo",
            Self::Tpot => "tpot",
            Self::E2e => "e2e",
            Self::Itl => "itl",
        }
    }

    /// The request's value of this metric, in ms. `None` when the request has none
    /// (a failed request; TPOT or ITL of a one-token answer).
    pub fn value(self, r: &RequestRecord) -> Option<f64> {
        match self {
            Self::Ttft => r.ttft_ms,
            Self::Ttfo => r.ttfo_ms,
            Self::Tpot => r.tpot_ms,
            Self::E2e => r.e2e_ms,
            Self::Itl => {
                (!r.itl_ms.is_empty()).then(|| r.itl_ms.iter().sum::<f64>() / r.itl_ms.len() as f64)
            }
        }
    }
}

/// One objective.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub metric: SloMetric,
    /// The bound, in milliseconds.
    pub threshold_ms: f64,
    /// For run-level SLOs: the percentile that must be under the bound (e.g. 99.0).
    pub percentile: Option<f64>,
}

/// A set of objectives.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SloSet(pub Vec<Slo>);

/// An SLO string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SloError {
    #[error("invalid SLO {item:?}: {reason} (expected e.g. ttft:500ms,tpot:50ms,e2e:10s or ttft:p99<500ms)")]
    Invalid { item: String, reason: String },
}

/// Parse a duration such as `500ms`, `1.5s`, `250us`, `2m`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) =
        s.find(|c: char| c.is_ascii_alphabetic()).map_or((s, "ms"), |i| s.split_at(i));
    let v: f64 = num.trim().parse().ok()?;
    if !(v.is_finite() && v >= 0.0) {
        return None;
    }
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
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
            let metric = match name.trim() {
                "ttft" => SloMetric::Ttft,
                "ttfo" => SloMetric::Ttfo,
                "tpot" => SloMetric::Tpot,
                "e2e" => SloMetric::E2e,
                "itl" => SloMetric::Itl,
                _ => return Err(bad("unknown metric; use ttft, ttfo, tpot, itl or e2e")),
            };
            let (percentile, bound) = match rest.split_once('<') {
                Some((p, b)) => {
                    let p = p
                        .trim()
                        .strip_prefix('p')
                        .ok_or_else(|| bad("percentile must look like p99"))?;
                    let p: f64 = p.parse().map_err(|_| bad("percentile must be a number"))?;
                    // p999 means 99.9, as in summary.json keys
                    let p = if p > 100.0 {
                        p / 10f64.powi((p.log10().floor() - 1.0) as i32)
                    } else {
                        p
                    };
                    if !(0.0..=100.0).contains(&p) {
                        return Err(bad("percentile must be between 0 and 100"));
                    }
                    (Some(p), b)
                }
                None => (None, rest),
            };
            let d = parse_duration(bound)
                .ok_or_else(|| bad("bound must be a duration such as 500ms or 2s"))?;
            if d.is_zero() {
                return Err(bad("bound must be positive"));
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
            match s.percentile {
                Some(p) => write!(f, "{}:p{p}<{}ms", s.metric.name(), s.threshold_ms)?,
                None => write!(f, "{}:{}ms", s.metric.name(), s.threshold_ms)?,
            }
        }
        Ok(())
    }
}

impl SloSet {
    /// Whether one request meets objective `i`. Failed requests meet none; a metric the
    /// request does not have (TPOT of a one-token answer) is met.
    pub fn met(&self, i: usize, r: &RequestRecord) -> bool {
        if !r.ok() {
            return false;
        }
        let s = &self.0[i];
        s.metric.value(r).is_none_or(|v| v <= s.threshold_ms)
    }

    /// Whether one request meets every objective.
    pub fn met_all(&self, r: &RequestRecord) -> bool {
        (0..self.0.len()).all(|i| self.met(i, r))
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
        let s: SloSet = "ttft:p99<500ms,tpot:p999<40ms".parse().unwrap();
        assert_eq!(s.0[0].percentile, Some(99.0));
        assert_eq!(s.0[1].percentile, Some(99.9));
        for bad in ["", "ttft", "foo:1s", "ttft:abc", "ttft:0ms", "ttft:-1ms", "ttft:q99<1s"] {
            assert!(bad.parse::<SloSet>().is_err(), "{bad}");
        }
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
    }
}

//! Figures per turn of multi-turn sessions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{round3, Dist, Stats};
use crate::{CachedSource, RequestRecord};

/// The per-turn part of an [`Aggregate`] (multi-turn runs).
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnAgg {
    pub(crate) ttft: Dist,
    pub(crate) tpot: Dist,
    pub(crate) e2e: Dist,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) input_tokens: u64,
    /// Cached tokens of completed requests, by where the count came from.
    pub(crate) cached: BTreeMap<CachedSource, (u64, u64)>,
    /// Input tokens of the completed requests that had a cached count, by source.
    pub(crate) cached_input: BTreeMap<CachedSource, u64>,
}

impl TurnAgg {
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        if !r.ok() {
            self.failed += 1;
            return;
        }
        self.completed += 1;
        for (d, v) in
            [(&mut self.ttft, r.ttft_ms), (&mut self.tpot, r.tpot_ms), (&mut self.e2e, r.e2e_ms)]
        {
            if let Some(v) = v {
                d.add(v);
            }
        }
        let input = r.input_tokens.unwrap_or(0);
        self.input_tokens = self.input_tokens.saturating_add(input);
        if let Some((n, src)) = r.cached() {
            let e = self.cached.entry(src).or_default();
            e.0 = e.0.saturating_add(if input > 0 { n.min(input) } else { n });
            e.1 += 1;
            let c = self.cached_input.entry(src).or_default();
            *c = c.saturating_add(input);
        }
    }

    pub(crate) fn merge(&mut self, o: &TurnAgg) {
        self.ttft.merge(&o.ttft);
        self.tpot.merge(&o.tpot);
        self.e2e.merge(&o.e2e);
        self.completed += o.completed;
        self.failed += o.failed;
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        for (k, v) in &o.cached {
            let e = self.cached.entry(*k).or_default();
            e.0 = e.0.saturating_add(v.0);
            e.1 += v.1;
        }
        for (k, v) in &o.cached_input {
            let c = self.cached_input.entry(*k).or_default();
            *c = c.saturating_add(*v);
        }
    }

    pub(crate) fn summary(&self, turn: u32, extra: &[f64]) -> TurnSummary {
        let mean = |sum: u64, n: u64| (n > 0).then(|| round3(sum as f64 / n as f64));
        // The server's count wins wherever some requests of the turn have it.
        let src = if self.cached.contains_key(&CachedSource::Usage) {
            Some(CachedSource::Usage)
        } else if self.cached.contains_key(&CachedSource::Estimate) {
            Some(CachedSource::Estimate)
        } else {
            None
        };
        let (cached_sum, cached_n) =
            src.and_then(|s| self.cached.get(&s).copied()).unwrap_or((0, 0));
        let cached_input = src.and_then(|s| self.cached_input.get(&s).copied()).unwrap_or(0);
        TurnSummary {
            turn,
            completed: self.completed,
            failed: self.failed,
            ttft_ms: self.ttft.stats(extra),
            tpot_ms: self.tpot.stats(extra),
            e2e_ms: self.e2e.stats(extra),
            input_tokens_mean: mean(self.input_tokens, self.completed),
            cached_tokens_mean: mean(cached_sum, cached_n),
            new_prefill_tokens_mean: (cached_n > 0)
                .then(|| round3(cached_input.saturating_sub(cached_sum) as f64 / cached_n as f64)),
            cache_hit_rate: crate::telemetry::hit_rate(cached_sum as f64, cached_input as f64)
                .map(|r| (r * 1e6).round() / 1e6),
            cached_token_source: match src {
                Some(CachedSource::Usage) => "usage",
                Some(CachedSource::Estimate) => "estimate",
                None => "none",
            }
            .into(),
        }
    }
}

/// One entry of `per_turn` in `summary.json`: the requests that were turn `turn` of their
/// session. Token figures are means over completed requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// 1-based turn index.
    pub turn: u32,
    pub completed: u64,
    pub failed: u64,
    pub ttft_ms: Stats,
    pub tpot_ms: Stats,
    pub e2e_ms: Stats,
    pub input_tokens_mean: Option<f64>,
    /// Input tokens the server had to compute: input − cached.
    pub new_prefill_tokens_mean: Option<f64>,
    pub cached_tokens_mean: Option<f64>,
    /// Cached ÷ input tokens, 0..=1.
    pub cache_hit_rate: Option<f64>,
    /// `usage` (the server's `prompt_tokens_details.cached_tokens`), `estimate` (the
    /// client's estimate from the previous turn) or `none`.
    pub cached_token_source: String,
}

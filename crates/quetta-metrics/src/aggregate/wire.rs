//! An aggregate's wire format: what shards send shard 0 and what `merge` reads (histograms
//! serialised, every count kept).

use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::{CachedSource, SloSet, TokenSource};

use super::{Aggregate, Dist, ErrorMessage, Metric, TurnAgg};

#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

/// The serialised form: counters as they are, histograms as base64 of HdrHistogram's V2
/// deflate encoding (readable by every HdrHistogram implementation).
#[derive(Serialize, Deserialize)]
pub(crate) struct Wire {
    pub(crate) version: u32,
    pub(crate) dists: BTreeMap<Metric, WireDist>,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) errors: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) error_messages: Vec<ErrorMessage>,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cached_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) inputs: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub(crate) audio_seconds: f64,
    pub(crate) input_sources: BTreeMap<TokenSource, u64>,
    pub(crate) output_sources: BTreeMap<TokenSource, u64>,
    pub(crate) window_start_ms: Option<f64>,
    pub(crate) window_end_ms: Option<f64>,
    pub(crate) non_streamed: u64,
    pub(crate) new_connections: u64,
    pub(crate) slos: Option<SloSet>,
    pub(crate) slo_met: Vec<u64>,
    pub(crate) slo_met_all: u64,
    #[serde(default)]
    pub(crate) prompt_delta_sum: i64,
    #[serde(default)]
    pub(crate) prompt_delta_count: u64,
    #[serde(default)]
    pub(crate) stale_connection_retries: u64,
    #[serde(default)]
    pub(crate) cycle_sum_ms: f64,
    #[serde(default)]
    pub(crate) turnaround_sum_ms: f64,
    #[serde(default)]
    pub(crate) turnaround_cycle_sum_ms: f64,
    #[serde(default)]
    pub(crate) server_prefill: (u64, f64, f64),
    #[serde(default)]
    pub(crate) server_tpot: (u64, f64, f64),
    #[serde(default)]
    pub(crate) server_ttft: (u64, f64, f64),
    #[serde(default)]
    pub(crate) server_e2e: (u64, f64, f64),
    #[serde(default)]
    pub(crate) retried_requests: u64,
    #[serde(default)]
    pub(crate) throttled_retries: u64,
    #[serde(default)]
    pub(crate) retry_attempts: u64,
    #[serde(default)]
    pub(crate) osl_planned: u64,
    #[serde(default)]
    pub(crate) osl_hits: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) per_turn: BTreeMap<u32, WireTurn>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct WireTurn {
    pub(crate) ttft: WireDist,
    pub(crate) tpot: WireDist,
    pub(crate) e2e: WireDist,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) input_tokens: u64,
    pub(crate) cached: BTreeMap<CachedSource, (u64, u64)>,
    pub(crate) cached_input: BTreeMap<CachedSource, u64>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct WireDist {
    pub(crate) hdr_v2_deflate_base64: String,
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pub(crate) sumsq: f64,
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
}

impl WireDist {
    pub(crate) fn from_dist(d: &Dist) -> Result<Self, String> {
        let mut buf = Vec::new();
        V2DeflateSerializer::new().serialize(&d.hist, &mut buf).map_err(|e| format!("{e:?}"))?;
        Ok(WireDist {
            hdr_v2_deflate_base64: base64::engine::general_purpose::STANDARD.encode(buf),
            count: d.count,
            sum: d.sum,
            sumsq: d.sumsq,
            min: d.min.is_finite().then_some(d.min),
            max: d.max.is_finite().then_some(d.max),
        })
    }

    pub(crate) fn into_dist(self) -> Result<Dist, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.hdr_v2_deflate_base64)
            .map_err(|e| e.to_string())?;
        let hist: Histogram<u64> =
            Deserializer::new().deserialize(&mut bytes.as_slice()).map_err(|e| e.to_string())?;
        let mut h = Dist::default().hist;
        h.add(&hist).map_err(|e| format!("{e:?}"))?;
        Ok(Dist {
            hist: h,
            count: self.count,
            sum: self.sum,
            sumsq: self.sumsq,
            min: self.min.unwrap_or(f64::INFINITY),
            max: self.max.unwrap_or(f64::NEG_INFINITY),
        })
    }
}

impl Serialize for Aggregate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut dists = BTreeMap::new();
        for (m, d) in Metric::ALL.iter().zip(&self.dists) {
            // (a metric of requests with several inputs only when there were some)
            if *m != Metric::PerInput || d.count > 0 {
                dists.insert(*m, WireDist::from_dist(d).map_err(S::Error::custom)?);
            }
        }
        let mut per_turn = BTreeMap::new();
        for (k, t) in &self.per_turn {
            let w = |d: &Dist| WireDist::from_dist(d).map_err(S::Error::custom);
            per_turn.insert(
                *k,
                WireTurn {
                    ttft: w(&t.ttft)?,
                    tpot: w(&t.tpot)?,
                    e2e: w(&t.e2e)?,
                    completed: t.completed,
                    failed: t.failed,
                    input_tokens: t.input_tokens,
                    cached: t.cached.clone(),
                    cached_input: t.cached_input.clone(),
                },
            );
        }
        Wire {
            version: 1,
            dists,
            completed: self.completed,
            failed: self.failed,
            errors: self.errors.clone(),
            error_messages: self.error_messages.values().cloned().collect(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_tokens: self.cached_tokens,
            inputs: self.inputs,
            audio_seconds: self.audio_seconds,
            input_sources: self.input_sources.clone(),
            output_sources: self.output_sources.clone(),
            window_start_ms: self.window_start_ms,
            window_end_ms: self.window_end_ms,
            non_streamed: self.non_streamed,
            new_connections: self.new_connections,
            slos: self.slos.clone(),
            slo_met: self.slo_met.clone(),
            slo_met_all: self.slo_met_all,
            prompt_delta_sum: self.prompt_delta_sum,
            prompt_delta_count: self.prompt_delta_count,
            cycle_sum_ms: self.cycle_sum_ms,
            turnaround_sum_ms: self.turnaround_sum_ms,
            turnaround_cycle_sum_ms: self.turnaround_cycle_sum_ms,
            server_prefill: self.server_prefill,
            server_tpot: self.server_tpot,
            server_ttft: self.server_ttft,
            server_e2e: self.server_e2e,
            stale_connection_retries: self.stale_connection_retries,
            retried_requests: self.retried_requests,
            throttled_retries: self.throttled_retries,
            retry_attempts: self.retry_attempts,
            osl_planned: self.osl_planned,
            osl_hits: self.osl_hits,
            per_turn,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Aggregate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let w = Wire::deserialize(d)?;
        if w.version != 1 {
            return Err(D::Error::custom(format!("unsupported aggregate version {}", w.version)));
        }
        let mut agg = Aggregate::new(w.slos);
        for (m, wd) in w.dists {
            agg.dists[m.index()] = wd.into_dist().map_err(D::Error::custom)?;
        }
        for (k, t) in w.per_turn {
            agg.per_turn.insert(
                k,
                TurnAgg {
                    ttft: t.ttft.into_dist().map_err(D::Error::custom)?,
                    tpot: t.tpot.into_dist().map_err(D::Error::custom)?,
                    e2e: t.e2e.into_dist().map_err(D::Error::custom)?,
                    completed: t.completed,
                    failed: t.failed,
                    input_tokens: t.input_tokens,
                    cached: t.cached,
                    cached_input: t.cached_input,
                },
            );
        }
        agg.osl_planned = w.osl_planned;
        agg.osl_hits = w.osl_hits;
        agg.completed = w.completed;
        agg.failed = w.failed;
        agg.errors = w.errors;
        agg.error_messages = w.error_messages.into_iter().map(|m| (m.message.clone(), m)).collect();
        agg.input_tokens = w.input_tokens;
        agg.output_tokens = w.output_tokens;
        agg.cached_tokens = w.cached_tokens;
        agg.inputs = w.inputs;
        agg.audio_seconds = w.audio_seconds;
        agg.input_sources = w.input_sources;
        agg.output_sources = w.output_sources;
        agg.window_start_ms = w.window_start_ms;
        agg.window_end_ms = w.window_end_ms;
        agg.non_streamed = w.non_streamed;
        agg.new_connections = w.new_connections;
        agg.slo_met = w.slo_met;
        agg.slo_met_all = w.slo_met_all;
        agg.prompt_delta_sum = w.prompt_delta_sum;
        agg.prompt_delta_count = w.prompt_delta_count;
        agg.stale_connection_retries = w.stale_connection_retries;
        agg.cycle_sum_ms = w.cycle_sum_ms;
        agg.turnaround_sum_ms = w.turnaround_sum_ms;
        agg.turnaround_cycle_sum_ms = w.turnaround_cycle_sum_ms;
        agg.server_prefill = w.server_prefill;
        agg.server_tpot = w.server_tpot;
        agg.server_ttft = w.server_ttft;
        agg.server_e2e = w.server_e2e;
        agg.retried_requests = w.retried_requests;
        agg.throttled_retries = w.throttled_retries;
        agg.retry_attempts = w.retry_attempts;
        Ok(agg)
    }
}

//! `recheck`: a calibrated model against its server now, and the model rescaled to the
//! server's present speed.
//!
//! A server's speed moves with its host (a shared VM's neighbours, clocks, thermal state):
//! the same llama.cpp server on one 2-vCPU VM decoded a seventh faster within an hour, and
//! on another VM calibrated to half the speed (docs/SIMULATOR.md). A full calibration takes
//! minutes; a recheck sends a few lone requests (fresh prompts of the lengths given, one after
//! another, `ignore_eos`) and compares each with what the model predicts for it alone:
//!
//! - decode: the request's median inter-token gap against the model's step of one sequence
//!   at its context (prompt + half the output); `decode_factor` is the median ratio;
//! - prefill: the TTFT less the model's fixed overheads (arrival, gather window) and its
//!   rescaled `base_ms`, against the model's prompt terms for that prompt;
//!   `prefill_factor` is the median ratio.
//!
//! The model's shape (its batch limits, context terms, what a mixed step costs) is the
//! calibration's; only its two speeds change ([`ServerModel::rescaled`]).

use std::time::Instant;

use quetta_sim::model::ServerModel;
use serde_json::json;

use crate::probes::{f, median, mix, ttft_ms, words, ProbeContext, ProbeError, ProbeOutput};

/// What `recheck` sends.
#[derive(Debug, Clone, PartialEq)]
pub struct RecheckOptions {
    /// Requests, one after another.
    pub requests: u32,
    /// Prompt lengths (words), taken in turn.
    pub prompt_words: Vec<u32>,
    /// Tokens each request generates.
    pub decode_tokens: u32,
}

impl Default for RecheckOptions {
    fn default() -> Self {
        Self { requests: 6, prompt_words: vec![128, 512], decode_tokens: 32 }
    }
}

/// One request of a recheck against the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecheckPoint {
    /// Prompt tokens the server computed (its `usage`, less what it reported cached).
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub ttft_ms: f64,
    pub model_ttft_ms: f64,
    /// Median inter-token gap.
    pub gap_ms: f64,
    pub model_gap_ms: f64,
    pub prefill_ratio: f64,
    pub decode_ratio: f64,
}

/// A recheck's result: the factors of this recheck (against the model given) and the
/// rescaled model.
#[derive(Debug, Clone)]
pub struct Rechecked {
    pub points: Vec<RecheckPoint>,
    pub prefill_factor: f64,
    pub decode_factor: f64,
    pub model: ServerModel,
    pub output: ProbeOutput,
}

/// Send the recheck's requests to `ctx`'s server and rescale `model` to what they show.
pub async fn recheck(
    ctx: &ProbeContext,
    model: &ServerModel,
    o: &RecheckOptions,
) -> Result<Rechecked, ProbeError> {
    if o.requests == 0 || o.prompt_words.is_empty() || o.decode_tokens < 8 {
        return Err(ProbeError::Invalid(
            "give a request or more, a prompt length and 8 decode tokens or more".into(),
        ));
    }
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let seed = mix(ctx.seed ^ salt ^ 0x4EC4);
    let t0 = Instant::now();
    ctx.send(0, words(8, seed), 2, t0).await?; // warm-up: the connection
    let step = &model.step;
    let fixed = model.arrival_overhead_ms + model.gather_ms;
    let mut raw = Vec::new();
    for i in 0..o.requests {
        let n = o.prompt_words[i as usize % o.prompt_words.len()].max(1);
        let id = 5_000 + u64::from(i);
        let obs = ctx.send(id, words(n, mix(seed ^ id)), o.decode_tokens, t0).await?;
        let ttft = ttft_ms(&obs)
            .ok_or_else(|| ProbeError::Request(format!("request {id} gave no token")))?;
        let mut gaps: Vec<f64> = obs.itl_us.iter().map(|g| f64::from(*g) / 1e3).collect();
        let gap = median(&mut gaps).ok_or_else(|| {
            ProbeError::Request(format!("request {id} streamed fewer than two tokens"))
        })?;
        let tokens = obs.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(n));
        let cached =
            obs.usage.and_then(|u| u.cached_tokens).unwrap_or(0).min(tokens.saturating_sub(1));
        let new = tokens - cached;
        let pairs = new as f64 * (cached as f64 + new as f64 / 2.0);
        // the prompt terms alone: a lone prefill step less its base
        let prompt_ms = step.ms(new, pairs, cached, 0, 0) - step.base_ms;
        let context = tokens + u64::from(o.decode_tokens) / 2;
        let model_gap = step.ms(0, 0.0, 0, 1, context);
        raw.push((tokens, cached, ttft, gap, prompt_ms, model_gap));
    }
    let mut dr: Vec<f64> = raw.iter().map(|r| r.3 / r.5).collect();
    let decode = median(&mut dr).unwrap_or(f64::NAN);
    let points: Vec<RecheckPoint> = raw
        .iter()
        .map(|&(tokens, cached, ttft, gap, prompt_ms, model_gap)| RecheckPoint {
            prompt_tokens: tokens - cached,
            cached_tokens: cached,
            ttft_ms: ttft,
            model_ttft_ms: fixed + step.base_ms + prompt_ms,
            gap_ms: gap,
            model_gap_ms: model_gap,
            prefill_ratio: (ttft - fixed - step.base_ms * decode) / prompt_ms,
            decode_ratio: gap / model_gap,
        })
        .collect();
    let mut pr: Vec<f64> = points.iter().map(|p| p.prefill_ratio).collect();
    let prefill = median(&mut pr).unwrap_or(f64::NAN);
    if !(prefill.is_finite() && prefill > 0.0 && decode.is_finite() && decode > 0.0) {
        return Err(ProbeError::Invalid(format!(
            "the server's times do not rescale the model (prefill ×{prefill:.3}, decode ×{decode:.3}): its TTFTs came out under the model's fixed overheads, or the model's prompt terms are 0; calibrate again"
        )));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let rescaled = model
        .clone()
        .rescaled(prefill, decode, o.requests, now)
        .map_err(|(f, m)| ProbeError::Invalid(format!("the rescaled model's {f}: {m}")))?;
    let output = output(&points, prefill, decode, o);
    Ok(Rechecked {
        points,
        prefill_factor: prefill,
        decode_factor: decode,
        model: rescaled,
        output,
    })
}

fn output(points: &[RecheckPoint], prefill: f64, decode: f64, o: &RecheckOptions) -> ProbeOutput {
    let rows = points
        .iter()
        .map(|p| {
            vec![
                p.prompt_tokens.to_string(),
                p.cached_tokens.to_string(),
                f(p.ttft_ms),
                f(p.model_ttft_ms),
                f(p.gap_ms),
                f(p.model_gap_ms),
                f(p.prefill_ratio),
                f(p.decode_ratio),
            ]
        })
        .collect();
    ProbeOutput {
        probe: "recheck",
        header: vec![
            "prompt_tokens",
            "cached_tokens",
            "ttft_ms",
            "model_ttft_ms",
            "gap_ms",
            "model_gap_ms",
            "prefill_ratio",
            "decode_ratio",
        ],
        rows,
        parameters: json!({
            "requests": o.requests, "prompt_words": o.prompt_words, "decode_tokens": o.decode_tokens,
        }),
        summary: json!({"prefill_factor": prefill, "decode_factor": decode}),
    }
}

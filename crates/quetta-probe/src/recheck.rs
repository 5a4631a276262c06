//! `recheck`: a calibrated model against its server now, and the model rescaled to the
//! server's present speed.
//!
//! A server's speed moves with its host (a shared VM's neighbours, clocks, thermal state):
//! the same llama.cpp server on one 2-vCPU VM decoded a seventh faster within an hour, and
//! on another VM calibrated to half the speed (docs/SIMULATOR.md). A full calibration takes
//! minutes; a recheck sends a few lone requests (fresh prompts of the lengths given, one after
//! another, `ignore_eos`) and compares each with what the model predicts for it alone:
//!
//! - decode: the request's TPOT as a load's record has it (docs/METRICS.md: its tokens, not
//!   its chunks, and the server's slow steps count) against the model's step of one sequence at its context
//!   (prompt + half the output). The step's terms move apart: on that VM
//!   the terms of its sequences (reading the weights, bound by memory a neighbour shares)
//!   ran at ×0.31 of a calibration while its context terms (attention, bound by the CPU)
//!   stayed at ×0.91. So per prompt length the requests' median TPOT is set against the model's
//!   median context part, and the line through them gives `decode_factor` (the sequences'
//!   terms) and `context_factor` (the context terms); where the model's context terms
//!   differ too little between the lengths to tell them apart ([`CONTEXT_SPAN`]), or the
//!   line needs a factor of 0 or less, both are the median ratio;
//! - prefill: the TTFT less the model's fixed overheads (arrival, gather window) and its
//!   rescaled `base_ms`, against the model's prompt terms for that prompt;
//!   `prefill_factor` is the median ratio.
//!
//! The model's shape (its batch limits, what a mixed step costs, where the context knee
//! lies) is the calibration's; only its speeds change ([`ServerModel::rescaled`]). Where the
//! requests say that the factors cannot be trusted, [`Rechecked::summary`]'s `warnings` say why in
//! words: the model names another served model; the ratio against the rescaled model
//! differs between prompt lengths by more than [`SHAPE_SPREAD`] (the model's shape no
//! longer fits the server, which no factor mends); or requests of one length differ by more
//! than [`NOISE_SPREAD`] (the server's speed moved during the recheck).

use std::time::Instant;

use quetta_metrics::RequestRecord;
use quetta_sim::model::ServerModel;

pub use crate::meta::RecheckOptions;
use crate::meta::{Findings, RecheckSummary};
use crate::probes::{f, median, mix, ols, words, ProbeContext, ProbeError, ProbeOutput};

/// Ratios of the model's error at two prompt lengths further apart than this (the higher
/// over the lower median, less one) make a shape warning.
pub const SHAPE_SPREAD: f64 = 0.15;
/// Ratios of requests of one prompt length further apart than this make a noise warning.
pub const NOISE_SPREAD: f64 = 0.25;
/// The model's context part of a lone step must differ between the shortest and the
/// longest prompt length by this share of its other terms or more for a recheck to tell the
/// context terms' speed from theirs (0.2: on the default lengths a context cost of about
/// 9 ms per 1,000 tokens beside a 23 ms step).
pub const CONTEXT_SPAN: f64 = 0.2;

/// One request of a recheck against the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecheckPoint {
    /// The prompt length asked for (words): the request's group.
    pub prompt_words: u32,
    /// Prompt tokens the server computed (its `usage`, less what it reported cached).
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub ttft_ms: f64,
    pub model_ttft_ms: f64,
    /// The request's TPOT (`RequestRecord::tpot_ms`): its mean time per output token.
    pub gap_ms: f64,
    pub model_gap_ms: f64,
    /// The part of `model_gap_ms` that grows with the context (its context terms).
    pub model_context_ms: f64,
    /// The rescaled model's gap.
    pub rescaled_gap_ms: f64,
    /// Against the model given.
    pub prefill_ratio: f64,
    /// Against the model given.
    pub decode_ratio: f64,
}

/// A recheck's result: its requests, its factors (against the model given), its doubts, and
/// the rescaled model.
#[derive(Debug, Clone)]
pub struct Rechecked {
    pub points: Vec<RecheckPoint>,
    /// The factors, their requests' ranges and why they may not hold (`warnings`, empty
    /// when nothing says so): the summary of recheck.meta.json.
    pub summary: RecheckSummary,
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
    let mut points = Vec::new();
    for i in 0..o.requests {
        let n = o.prompt_words[i as usize % o.prompt_words.len()].max(1);
        let id = 5_000 + u64::from(i);
        let obs = ctx.send(id, words(n, mix(seed ^ id)), o.decode_tokens, t0).await?;
        let usage = obs.usage;
        // TTFT and TPOT as a load's records have them (docs/METRICS.md): the twin is judged
        // on a load's TPOT, which counts tokens, not chunks, and the server's slow steps
        let record = RequestRecord::from_observation(obs);
        let ttft = record
            .ttft_ms
            .ok_or_else(|| ProbeError::Request(format!("request {id} gave no token")))?;
        let gap = record.tpot_ms.ok_or_else(|| {
            ProbeError::Request(format!("request {id} streamed fewer than two tokens"))
        })?;
        let tokens = usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(n));
        let cached = usage.and_then(|u| u.cached_tokens).unwrap_or(0).min(tokens.saturating_sub(1));
        let new = tokens - cached;
        let pairs = new as f64 * (cached as f64 + new as f64 / 2.0);
        // the prompt terms alone: a lone prefill step less its base
        let prompt_ms = step.ms(new, pairs, cached, 0, 0) - step.base_ms;
        let context = tokens + u64::from(o.decode_tokens) / 2;
        let (lone, context_ms) = step.lone_decode_ms(context);
        points.push(RecheckPoint {
            prompt_words: n,
            prompt_tokens: new,
            cached_tokens: cached,
            ttft_ms: ttft,
            model_ttft_ms: fixed + step.base_ms + prompt_ms,
            gap_ms: gap,
            model_gap_ms: lone + context_ms,
            model_context_ms: context_ms,
            rescaled_gap_ms: f64::NAN, // below, once the decode factors are known
            prefill_ratio: f64::NAN,   // likewise
            decode_ratio: gap / (lone + context_ms),
        });
    }
    let lone = step.lone_decode_ms(0).0;
    let (decode, context, one_factor_why) = match decode_factors(&points, lone) {
        Ok((d, c)) => (d, c, None),
        Err(why) => {
            let dr: Vec<f64> = points.iter().map(|p| p.decode_ratio).collect();
            let d = median(&dr).unwrap_or(f64::NAN);
            (d, d, Some(why))
        }
    };
    // the prompt terms alone: the TTFT less the fixed overheads and the step's base at the
    // server's present decode speed
    for p in &mut points {
        let prompt_ms = p.model_ttft_ms - fixed - step.base_ms;
        p.prefill_ratio = (p.ttft_ms - fixed - step.base_ms * decode) / prompt_ms;
        p.rescaled_gap_ms = lone * decode + p.model_context_ms * context;
    }
    let pr: Vec<f64> = points.iter().map(|p| p.prefill_ratio).collect();
    let prefill = median(&pr).unwrap_or(f64::NAN);
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
        .rescaled(prefill, decode, context, o.requests, now)
        .map_err(|(f, m)| ProbeError::Invalid(format!("the rescaled model's {f}: {m}")))?;
    let mut warnings = Vec::new();
    if model.model != ctx.model {
        warnings.push(format!(
            "the model file was calibrated on {:?} at {}; this server serves {:?}",
            model.model, model.server, ctx.model
        ));
    }
    warnings.extend(length_warning(model.decode_probe_tokens, o.decode_tokens));
    warnings.extend(doubts(&points, prefill));
    let prefill_range = range(points.iter().map(|p| p.prefill_ratio));
    let decode_range = range(points.iter().map(|p| p.decode_ratio));
    let summary = RecheckSummary {
        prefill_factor: prefill,
        decode_factor: decode,
        context_factor: context,
        context_apart: one_factor_why.is_none(),
        one_factor_why,
        prefill_range,
        decode_range,
        warnings,
    };
    let output = output(&points, summary.clone(), o);
    Ok(Rechecked { points, summary, model: rescaled, output })
}

/// A warning when the recheck's requests decode another number of tokens than the
/// calibration's decode probe did (`calibrated`, where the model file says): a request's
/// first gaps after its prefill are slower than the rest, so the shorter decode reads as a
/// slower server (llama.cpp on the 2-vCPU VM of docs/SIMULATOR.md, one model rechecked minutes
/// apart: decode ×1.117 with 32 tokens, ×1.024 with 64).
fn length_warning(calibrated: Option<u32>, asked: u32) -> Option<String> {
    calibrated.filter(|&c| c != asked).map(|c| {
        format!(
            "these requests decode {asked} tokens, the calibration's decode probe {c}: a request's first gaps after its prefill are slower than the rest, so the decode factor is biased (recheck with {} {c})",
            quetta_engine::setting::Setting::DecodeTokens
        )
    })
}

/// The requests by prompt length, shortest first.
fn by_length(points: &[RecheckPoint]) -> Vec<Vec<&RecheckPoint>> {
    let mut lengths: Vec<u32> = points.iter().map(|p| p.prompt_words).collect();
    lengths.sort_unstable();
    lengths.dedup();
    lengths.into_iter().map(|n| points.iter().filter(|p| p.prompt_words == n).collect()).collect()
}

/// The median of a field over a group's requests.
fn median_of(g: &[&RecheckPoint], field: impl Fn(&RecheckPoint) -> f64) -> Option<f64> {
    median(&g.iter().map(|p| field(p)).collect::<Vec<_>>())
}

/// The decode factors (of the sequences' terms, of the context terms) of the line through
/// each prompt length's median gap against the model's median context part there (least
/// squares); `lone` is the model's step of one sequence without its context terms. Why not,
/// where the requests are of one prompt length, those parts span less than
/// [`CONTEXT_SPAN`] of `lone`, or a factor comes out 0 or less.
fn decode_factors(points: &[RecheckPoint], lone: f64) -> Result<(f64, f64), String> {
    let (parts, gaps): (Vec<Vec<f64>>, Vec<f64>) = by_length(points)
        .iter()
        .filter_map(|g| {
            Some((vec![median_of(g, |p| p.model_context_ms)?], median_of(g, |p| p.gap_ms)?))
        })
        .unzip();
    if parts.len() < 2 {
        return Err("the requests were of one prompt length".into());
    }
    if lone.is_nan() || lone <= 0.0 {
        return Err(format!("the model's step of one sequence is {lone:.3} ms"));
    }
    let (lo, hi) = range(parts.iter().map(|k| k[0]));
    if hi - lo < CONTEXT_SPAN * lone {
        return Err(format!(
            "the model's context terms at the prompt lengths span {:.2} ms, under {CONTEXT_SPAN} of its {lone:.2} ms step of one sequence",
            hi - lo
        ));
    }
    // gap = decode · lone + context · part
    let (b, _) = ols(&parts, &gaps).ok_or("the line through the gaps is singular")?;
    let (decode, context) = (b[0] / lone, b[1]);
    if decode.is_finite() && context.is_finite() && decode > 0.0 && context > 0.0 {
        Ok((decode, context))
    } else {
        Err(format!(
            "the line through the gaps needs the sequence terms at ×{decode:.3} and the context terms at ×{context:.3}, and both must be above 0"
        ))
    }
}

fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

/// The shape and noise warnings of a recheck's requests (see the module's text); `prefill`
/// is the recheck's prefill factor. Shape is judged against the rescaled model, noise
/// against the model given.
fn doubts(points: &[RecheckPoint], prefill: f64) -> Vec<String> {
    let lengths = by_length(points);
    let mut out = Vec::new();
    for (what, terms) in
        [("prefill", "its attention term or fixed overheads"), ("decode", "its context terms")]
    {
        let decode = what == "decode";
        let rescaled = |p: &RecheckPoint| {
            if decode {
                p.gap_ms / p.rescaled_gap_ms
            } else {
                p.prefill_ratio / prefill
            }
        };
        let given = |p: &RecheckPoint| if decode { p.decode_ratio } else { p.prefill_ratio };
        // per length: (median prompt tokens, median ratio to the rescaled model, lowest and
        // highest ratio to the model given)
        let groups: Vec<(f64, f64, f64, f64)> = lengths
            .iter()
            .filter_map(|g| {
                let (lo, hi) = range(g.iter().map(|p| given(p)));
                Some((median_of(g, |p| p.prompt_tokens as f64)?, median_of(g, rescaled)?, lo, hi))
            })
            .collect();
        let (lo, hi) = (
            groups.iter().min_by(|a, b| a.1.total_cmp(&b.1)),
            groups.iter().max_by(|a, b| a.1.total_cmp(&b.1)),
        );
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if hi.1 > lo.1 * (1.0 + SHAPE_SPREAD) {
                out.push(format!(
                    "{what}: the server runs at ×{:.2} of the rescaled model at {:.0}-token prompts and ×{:.2} at {:.0}: the model's shape ({terms}) no longer fits it, and its factors cannot rescale it; calibrate again",
                    lo.1, lo.0, hi.1, hi.0
                ));
            }
        }
        for g in groups.iter().filter(|g| g.3 > g.2 * (1.0 + NOISE_SPREAD)) {
            out.push(format!(
                "{what}: requests of {:.0}-token prompts ran at ×{:.2} to ×{:.2} of the model: the server's speed moved during the recheck; recheck again, or on a quieter host",
                g.0, g.2, g.3
            ));
        }
    }
    out
}

fn output(points: &[RecheckPoint], summary: RecheckSummary, o: &RecheckOptions) -> ProbeOutput {
    let rows = points
        .iter()
        .map(|p| {
            vec![
                p.prompt_words.to_string(),
                p.prompt_tokens.to_string(),
                p.cached_tokens.to_string(),
                f(p.ttft_ms),
                f(p.model_ttft_ms),
                f(p.gap_ms),
                f(p.model_gap_ms),
                f(p.model_context_ms),
                f(p.rescaled_gap_ms),
                f(p.prefill_ratio),
                f(p.decode_ratio),
            ]
        })
        .collect();
    ProbeOutput {
        header: vec![
            "prompt_words",
            "prompt_tokens",
            "cached_tokens",
            "ttft_ms",
            "model_ttft_ms",
            "gap_ms",
            "model_gap_ms",
            "model_context_ms",
            "rescaled_gap_ms",
            "prefill_ratio",
            "decode_ratio",
        ],
        rows,
        findings: Findings::Recheck { parameters: o.clone(), summary },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(words: u32, tokens: u64, prefill: f64, decode: f64) -> RecheckPoint {
        RecheckPoint {
            prompt_words: words,
            prompt_tokens: tokens,
            cached_tokens: 0,
            ttft_ms: 0.0,
            model_ttft_ms: 0.0,
            gap_ms: decode,
            model_gap_ms: 1.0,
            model_context_ms: 0.0,
            rescaled_gap_ms: 1.0,
            prefill_ratio: prefill,
            decode_ratio: decode,
        }
    }

    /// Ratios steady within and across lengths: no warning.
    #[test]
    fn a_steady_recheck_has_no_doubts() {
        let p: Vec<_> =
            (0..6)
                .map(|i| {
                    if i % 2 == 0 {
                        point(128, 190, 1.05, 0.98)
                    } else {
                        point(512, 700, 1.10, 1.03)
                    }
                })
                .collect();
        assert!(doubts(&p, 1.07).is_empty(), "{:?}", doubts(&p, 1.07));
    }

    /// The recheck of 2026-12-05 11:42 against the 09:00 calibration: decode at ×0.85 of the
    /// model on ~190-token prompts and ×1.01 on ~700 (the model's context slope too flat),
    /// and one short request at ×1.14 among two at ×0.84: a shape and a noise warning for
    /// decode, none for prefill.
    #[test]
    fn a_shape_the_server_does_not_have_and_noise_are_named() {
        let p = [
            point(128, 191, 1.061, 0.838),
            point(512, 703, 1.088, 0.983),
            point(128, 202, 1.273, 1.142),
            point(512, 752, 1.187, 1.037),
            point(128, 188, 1.045, 0.847),
            point(512, 715, 1.060, 1.014),
        ];
        let d = doubts(&p, 1.07);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].starts_with("decode: the server runs at ×0.85 of the rescaled model at 191-token prompts and ×1.01 at 715"), "{d:?}");
        assert!(d[0].contains("context terms"), "{d:?}");
        assert!(
            d[1].starts_with("decode: requests of 191-token prompts ran at ×0.84 to ×1.14"),
            "{d:?}"
        );
    }

    #[test]
    fn a_decode_of_another_length_than_the_calibration_is_named() {
        assert_eq!(length_warning(None, 32), None);
        assert_eq!(length_warning(Some(48), 48), None);
        let w = length_warning(Some(48), 32).expect("32 against 48 tokens");
        assert!(
            w.contains("decode 32 tokens") && w.contains("RecheckOptions.decode_tokens 48"),
            "{w}"
        );
        // an embedder's defaults for a model decode as its calibration did, else 32
        let mut m: ServerModel =
            serde_json::from_str(include_str!("../../../fixtures/twin/llama-smollm2-4slots.json"))
                .unwrap();
        m.decode_probe_tokens = None;
        assert_eq!(RecheckOptions::for_model(&m).decode_tokens, 32);
        m.decode_probe_tokens = Some(48);
        assert_eq!(RecheckOptions::for_model(&m).decode_tokens, 48);
    }

    /// The recheck of 2026-12-06 03:22 before Poisson 90 % (three of its first four requests
    /// in a slow spell): both lengths' requests scatter, and each is named (the twin it
    /// rescaled predicted that load's TTFT p50 +148 %).
    #[test]
    fn every_noisy_length_is_named() {
        let mk = |words: u32, tokens: u64, prefill: f64, gap: f64, rescaled: f64, ratio: f64| {
            RecheckPoint {
                gap_ms: gap,
                rescaled_gap_ms: rescaled,
                ..point(words, tokens, prefill, ratio)
            }
        };
        let p = [
            mk(128, 177, 0.982, 12.055, 9.006, 1.420),
            mk(768, 1030, 1.005, 22.139, 20.806, 1.526),
            mk(128, 188, 0.991, 8.980, 9.145, 1.049),
            mk(768, 1024, 1.002, 20.709, 20.709, 1.432),
            mk(128, 181, 0.995, 9.062, 9.062, 1.064),
            mk(768, 1018, 1.000, 15.661, 20.640, 1.086),
        ];
        let d = doubts(&p, 0.997);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("decode: requests of 181-token prompts ran at ×1.05 to ×1.42"),
            "{d:?}"
        );
        assert!(
            d[1].starts_with("decode: requests of 1024-token prompts ran at ×1.09 to ×1.53"),
            "{d:?}"
        );
        assert!(
            d.iter().all(|w| w.contains("the server's speed moved during the recheck")),
            "{d:?}"
        );
    }

    /// The recheck of 2026-12-05 13:25 before closed loop 8 (calibration of 12:50: lone
    /// step 23.34 ms without its context terms, 15.32 ms per 1,000 tokens of context): the
    /// sequences' terms ran at ×0.46 of the model, its context terms at ×1.03; one median
    /// factor (×0.60) had left the twin's TPOT 12 % low where four streams held ~2,700
    /// tokens of context. Context parts that barely differ, or a line that needs a
    /// negative base, give no pair (the median ratio instead), and say why.
    #[test]
    fn the_decode_terms_and_the_context_terms_are_told_apart() {
        let lone = 8.3727 + 14.9669;
        let mk = |words: u32, context: u64, gap: f64, scale: f64| {
            let k = 15.3154 * context as f64 / 1e3 * scale;
            RecheckPoint {
                gap_ms: gap,
                model_gap_ms: lone + k,
                model_context_ms: k,
                decode_ratio: gap / (lone + k),
                ..point(words, context, 1.0, 0.0)
            }
        };
        let rows = [
            (128, 229, 14.401),
            (512, 747, 24.673),
            (128, 226, 15.528),
            (512, 727, 21.485),
            (128, 224, 14.157),
            (512, 745, 22.579),
        ];
        let p: Vec<_> = rows.iter().map(|&(w, c, g)| mk(w, c, g, 1.0)).collect();
        let (d, c) = decode_factors(&p, lone).expect("two factors");
        assert!((d - 0.464).abs() < 0.005 && (c - 1.029).abs() < 0.005, "{d} {c}");
        let flat: Vec<_> = rows.iter().map(|&(w, c, g)| mk(w, c, g, 0.1)).collect();
        let why = decode_factors(&flat, lone).expect_err("context parts 0.8 ms apart");
        assert!(why.contains("span 0.79 ms, under 0.2 of its 23.34 ms"), "{why}");
        let steep: Vec<_> = rows
            .iter()
            .map(|&(w, c, g)| mk(w, c, if w == 128 { 5.0 } else { g + 10.0 }, 1.0))
            .collect();
        let why = decode_factors(&steep, lone).expect_err("a negative base");
        assert!(why.contains("both must be above 0"), "{why}");
        let one: Vec<_> = p.iter().filter(|q| q.prompt_words == 128).copied().collect();
        let why = decode_factors(&one, lone).expect_err("one prompt length");
        assert!(why.contains("one prompt length"), "{why}");
    }
}

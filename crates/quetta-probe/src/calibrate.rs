//! `calibrate`: the probes a twin needs, and the [`ServerModel`] fitted from them.
//!
//! 1. **Batch slots**: `seqs_probe` short requests sent at once; those whose first token
//!    came before the first of them ended were running together: `max_seqs`.
//! 2. **Prefill**: single requests with prompts of each length (twice), one output token
//!    asked for two; TTFT = intercept + `prefill_token_ms`·n + `prefill_pair_mt_ms`·n²/2/10⁶,
//!    n the server's prompt tokens (`usage`); a negative attention term refits without it.
//! 3. **Decode**: `B` streams at once for B in {1, max/2, max} and two context lengths; the
//!    median gap while every stream decodes = `base_ms` + `decode_seq_ms`·B +
//!    `context_kt_ms`·C/1000, C the streams' tokens in cache. The prefill intercept less
//!    `base_ms` is the arrival overhead.
//! 4. **Prefix cache**: a prompt, then the same prompt with a few more words; the second's
//!    TTFT against the model's cold prediction gives `cached_token_ms`.
//!
//! A fit that explains too little of its data (R² below [`MIN_R2`]), a negative cost, or a
//! failed request refuses the model, saying why.

use std::time::Instant;

use quetta_sim::model::{FitQuality, Fits, ServerModel, StepTime, SERVER_MODEL_VERSION};
use serde_json::json;

use crate::probes::{
    f, join_all, lstsq, median, mix, r_squared, ttft_ms, words, ProbeContext, ProbeError,
    ProbeOutput,
};

/// The least R² a fit must reach for the model to be written.
pub const MIN_R2: f64 = 0.9;

/// What `calibrate` probes.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrateOptions {
    /// The longest prompt + output one sequence may hold (the server's context per slot).
    pub max_context: u32,
    /// Prompt lengths (words) of the prefill probe.
    pub prefill_lengths: Vec<u32>,
    pub repeats: u32,
    /// Context lengths (words) of the decode probe.
    pub decode_contexts: Vec<u32>,
    pub decode_tokens: u32,
    /// Requests sent at once to find the batch slots.
    pub seqs_probe: u32,
    /// Tokens one step may carry (llama.cpp `n_batch`, vLLM `max_num_batched_tokens`).
    pub max_batch_tokens: u32,
    pub block_tokens: u32,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        Self {
            max_context: 2048,
            prefill_lengths: vec![32, 256, 512, 1024],
            repeats: 2,
            decode_contexts: vec![32, 256],
            decode_tokens: 32,
            seqs_probe: 16,
            max_batch_tokens: 2048,
            block_tokens: 16,
        }
    }
}

/// A fitted model and the measurements behind it.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub model: ServerModel,
    /// One row per measurement with the model's prediction beside it.
    pub output: ProbeOutput,
    /// How many times the decode grid was measured (more than once when a round's fit was
    /// too noisy; its points are then the medians).
    pub decode_rounds: usize,
}

fn quality(measured: &[f64], predicted: &[f64], r2: f64) -> FitQuality {
    let n = measured.len();
    let sse: f64 = measured.iter().zip(predicted).map(|(m, p)| (m - p).powi(2)).sum();
    let rel = measured
        .iter()
        .zip(predicted)
        .map(|(m, p)| if *m > 0.0 { (m - p).abs() / m } else { 0.0 })
        .fold(0.0, f64::max);
    FitQuality { points: n, r2, rmse_ms: (sse / n.max(1) as f64).sqrt(), max_rel_residual: rel }
}

/// The batch slots: how many of `n` requests sent at once started before the first ended.
async fn max_seqs(ctx: &ProbeContext, n: u32, t0: Instant) -> Result<u32, ProbeError> {
    let futs: Vec<_> = (0..n)
        .map(|i| {
            ctx.send(1_000 + u64::from(i), words(16, mix(ctx.seed ^ 0x5107 ^ u64::from(i))), 24, t0)
        })
        .collect();
    let mut obs = Vec::new();
    for r in join_all(futs).await {
        obs.push(r?);
    }
    let first_end = obs.iter().map(|o| o.end).min().unwrap_or_default();
    Ok(obs.iter().filter(|o| o.first_token.is_some_and(|f| f < first_end)).count() as u32)
}

struct Point {
    what: &'static str,
    x: Vec<f64>,
    y: f64,
    /// Prefill points: the server's prompt tokens less its `/tokenize` count of the text.
    extra: Option<i64>,
    /// Prefill points: the prompt tokens the server reported cached (a template prefix
    /// every prompt shares); `x` counts the others.
    cached: u64,
}

/// TTFT of single requests: (prompt tokens, TTFT ms).
async fn prefill(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
    t0: Instant,
) -> Result<Vec<Point>, ProbeError> {
    let mut out = Vec::new();
    for (k, &n) in o.prefill_lengths.iter().enumerate() {
        let n = n.min(o.max_context.saturating_sub(8)).max(1);
        for rep in 0..o.repeats {
            let id = 2_000 + (k as u64) * 100 + u64::from(rep);
            let text = words(n, mix(ctx.seed ^ id ^ 0x9F11));
            let own = server_tokens(&ctx.base_url, None, &ctx.model, &text).await;
            let obs = ctx.send(id, text, 2, t0).await?;
            let tokens = obs.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(n));
            let extra = own.map(|o| tokens as i64 - o as i64);
            let y = ttft_ms(&obs)
                .ok_or_else(|| ProbeError::Request(format!("request {id} gave no token")))?;
            // llama.cpp reuses the template's system prompt from a slot's last request: those
            // tokens are not computed, and the computed ones attend to them
            let cached =
                obs.usage.and_then(|u| u.cached_tokens).unwrap_or(0).min(tokens.saturating_sub(1));
            let (n, c) = ((tokens - cached) as f64, cached as f64);
            out.push(Point {
                what: "prefill",
                x: vec![n, n * (c + n / 2.0) / 1e6],
                y,
                extra,
                cached,
            });
        }
    }
    Ok(out)
}

/// Steady gaps of `b` streams of `context` words: (B, C tokens, median gap ms).
async fn decode(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
    batches: &[u32],
    t0: Instant,
) -> Result<Vec<Point>, ProbeError> {
    let mut out = Vec::new();
    let mut id = 3_000u64;
    for &b in batches {
        for &c in &o.decode_contexts {
            let c = c.min(o.max_context.saturating_sub(o.decode_tokens + 8)).max(1);
            let futs: Vec<_> = (0..u64::from(b))
                .map(|i| {
                    ctx.send(
                        id + i,
                        words(c, mix(ctx.seed ^ (id + i) ^ 0xDEC0)),
                        o.decode_tokens,
                        t0,
                    )
                })
                .collect();
            id += u64::from(b);
            let mut obs = Vec::new();
            for r in join_all(futs).await {
                obs.push(r?);
            }
            let mut meds = crate::probes::steady_gaps(&obs).per_req;
            let Some(gap) = median(&mut meds) else {
                return Err(ProbeError::Request(format!(
                    "{b} streams of {c} words never decoded together: the server ran them one after another (fewer slots than {b}?)"
                )));
            };
            let prompt: u64 = obs
                .iter()
                .map(|o| o.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(c)))
                .sum();
            let context = prompt as f64 + f64::from(b) * f64::from(o.decode_tokens) / 2.0;
            out.push(Point {
                what: "decode",
                x: vec![f64::from(b), context],
                y: gap,
                extra: None,
                cached: 0,
            });
        }
    }
    Ok(out)
}

/// The prefix-cache probe: (cached tokens reported or assumed, new tokens, warm TTFT).
async fn prefix(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
    t0: Instant,
) -> Result<(u64, u64, f64), ProbeError> {
    let n = 512.min(o.max_context.saturating_sub(64)).max(16);
    let base = words(n, mix(ctx.seed ^ 0xCAC4E));
    let cold = ctx.send(4_000, base.clone(), 2, t0).await?;
    let warm =
        ctx.send(4_001, format!("{base} {}", words(16, mix(ctx.seed ^ 0xCAC4F))), 2, t0).await?;
    let prompt = warm.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(n + 16));
    let cached = warm
        .usage
        .and_then(|u| u.cached_tokens)
        .unwrap_or_else(|| cold.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(n)));
    let y = ttft_ms(&warm)
        .ok_or_else(|| ProbeError::Request("the prefix probe gave no token".into()))?;
    Ok((cached.min(prompt), prompt - cached.min(prompt), y))
}

/// A fit with an intercept that minimises the *relative* residuals (each point weighted by
/// 1 / measured): a twin is judged by its relative error, and a few long prompts would
/// otherwise decide the cost of every short one. R² is of the unweighted data.
fn rel_fit(x: &[Vec<f64>], y: &[f64]) -> Option<(Vec<f64>, f64)> {
    let rows: Vec<Vec<f64>> =
        x.iter().map(|r| std::iter::once(1.0).chain(r.iter().copied()).collect()).collect();
    let w: Vec<Vec<f64>> =
        rows.iter().zip(y).map(|(r, &yi)| r.iter().map(|v| v / yi.max(1e-9)).collect()).collect();
    let ones = vec![1.0; y.len()];
    let beta = lstsq(&w, &ones)?;
    Some((beta.clone(), r_squared(&rows, y, &beta)))
}

/// A relative fit; refused only when singular.
fn fit(what: &str, x: &[Vec<f64>], y: &[f64]) -> Result<(Vec<f64>, f64), ProbeError> {
    rel_fit(x, y).ok_or_else(|| {
        ProbeError::Invalid(format!("the {what} fit is singular: its probe did not vary enough"))
    })
}

/// Refuse a fit whose R² is under [`MIN_R2`], listing the measurements.
fn refuse_noisy(what: &str, x: &[Vec<f64>], y: &[f64], r2: f64) -> Result<(), ProbeError> {
    if r2 < MIN_R2 {
        let points: Vec<String> = x
            .iter()
            .zip(y)
            .map(|(x, y)| {
                let x: Vec<String> = x.iter().map(|v| format!("{v:.0}")).collect();
                format!("({}) {y:.1} ms", x.join(", "))
            })
            .collect();
        return Err(ProbeError::Invalid(format!(
            "the {what} fit explains too little of its data (R² {r2:.3} < {MIN_R2}): the server's times are too noisy for a model (is something else loading it?); measured: {}",
            points.join("; ")
        )));
    }
    Ok(())
}

/// The decode grid at most this many times: a grid whose fit is under [`MIN_R2`] is measured
/// again, and each point is the median of its rounds (a point's one slow round, another
/// process or the server's own hiccup, no longer decides the fit).
pub const DECODE_ROUNDS: usize = 3;

/// Each grid point's median gap over the rounds (its batch and context their mean).
fn median_rounds(rounds: &[Vec<Point>]) -> Vec<Point> {
    let n = rounds.len() as f64;
    (0..rounds[0].len())
        .map(|i| {
            let mut ys: Vec<f64> = rounds.iter().map(|r| r[i].y).collect();
            let x = (0..rounds[0][i].x.len())
                .map(|j| rounds.iter().map(|r| r[i].x[j]).sum::<f64>() / n)
                .collect();
            let y = crate::probes::median(&mut ys).unwrap_or(f64::NAN);
            Point { what: "decode", x, y, extra: None, cached: 0 }
        })
        .collect()
}

/// The decode fit: base + d·B + c·C, or base + c·C with one slot (`[base, 0, c]`).
fn decode_fit(dec: &[Point], batches: usize) -> Result<(Vec<f64>, f64), ProbeError> {
    let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
    if batches >= 2 {
        let dx: Vec<Vec<f64>> = dec.iter().map(|p| p.x.clone()).collect();
        fit("decode", &dx, &dy)
    } else {
        let x1: Vec<Vec<f64>> = dec.iter().map(|p| vec![p.x[1]]).collect();
        let (b, r2) = fit("decode", &x1, &dy)?;
        Ok((vec![b[0], 0.0, b[1]], r2))
    }
}

/// The decode grid measured and fitted, again while its fit is too noisy (up to
/// [`DECODE_ROUNDS`]); refused if it still is. Returns (points, fit, R², rounds).
async fn decode_measured(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
    batches: &[u32],
    t0: Instant,
) -> Result<(Vec<Point>, Vec<f64>, f64, usize), ProbeError> {
    let mut rounds = Vec::new();
    loop {
        rounds.push(decode(ctx, o, batches, t0).await?);
        let dec = median_rounds(&rounds);
        let (b, r2) = decode_fit(&dec, batches.len())?;
        if r2 >= MIN_R2 || rounds.len() >= DECODE_ROUNDS {
            let dx: Vec<Vec<f64>> = dec.iter().map(|p| p.x.clone()).collect();
            let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
            refuse_noisy("decode", &dx, &dy, r2)?;
            return Ok((dec, b, r2, rounds.len()));
        }
    }
}

/// The prefill fit, given the step's base: TTFT − base = overhead + p·n + q·n²/2/10⁶
/// (relative residuals); a negative attention term q is dropped, a negative overhead is
/// taken as none, and a negative p beside a positive q drops q (all refitted). Returns (overhead, [_, p, q], R²).
fn fit_prefill(pre: &[Point], base: f64) -> Result<(f64, Vec<f64>, f64), ProbeError> {
    let y: Vec<f64> = pre.iter().map(|p| p.y).collect();
    let solve = |cols: &dyn Fn(&Point) -> Vec<f64>| -> Result<Vec<f64>, ProbeError> {
        let rows: Vec<Vec<f64>> =
            pre.iter().map(|p| cols(p).into_iter().map(|v| v / p.y.max(1e-9)).collect()).collect();
        let t: Vec<f64> = pre.iter().map(|p| (p.y - base) / p.y.max(1e-9)).collect();
        lstsq(&rows, &t).ok_or_else(|| {
            ProbeError::Invalid("the prefill fit is singular: its probe did not vary enough".into())
        })
    };
    let mut b = solve(&|p| vec![1.0, p.x[0], p.x[1]])?;
    if b[2] < 0.0 {
        let v = solve(&|p| vec![1.0, p.x[0]])?;
        b = vec![v[0], v[1], 0.0];
    }
    if b[0] < 0.0 {
        let v = solve(&|p| vec![p.x[0], p.x[1]])?;
        b = if v[1] < 0.0 {
            vec![0.0, solve(&|p| vec![p.x[0]])?[0], 0.0]
        } else {
            vec![0.0, v[0], v[1]]
        };
    }
    if b[1] <= 0.0 && b[2] > 0.0 {
        // three lengths let a steep attention term buy a negative per-token cost: with
        // noisy times the linear model (a prompt's tokens cost alike) is the one to trust
        let v = solve(&|p| vec![1.0, p.x[0]])?;
        b = if v[0] < 0.0 {
            vec![0.0, solve(&|p| vec![p.x[0]])?[0], 0.0]
        } else {
            vec![v[0], v[1], 0.0]
        };
    }
    let measured = || {
        let v: Vec<String> = pre.iter().map(|p| format!("({:.0}) {:.1} ms", p.x[0], p.y)).collect();
        v.join("; ")
    };
    if b[1] <= 0.0 {
        return Err(ProbeError::Invalid(format!(
            "prefill cost per token came out {:.4} ms: longer prompts were not slower; measured: {}",
            b[1],
            measured()
        )));
    }
    let rows: Vec<Vec<f64>> = pre.iter().map(|p| vec![1.0, p.x[0], p.x[1]]).collect();
    let shifted: Vec<f64> = y.iter().map(|v| v - base).collect();
    let r2 = r_squared(&rows, &shifted, &b);
    if r2 < MIN_R2 {
        return Err(ProbeError::Invalid(format!(
            "the prefill fit explains too little of its data (R² {r2:.3} < {MIN_R2}): the server's times are too noisy for a model (is something else loading it?); measured: {}",
            measured()
        )));
    }
    Ok((b[0], b, r2))
}

/// The tokens the server adds to a prompt: the median over the prefill probe of its usage
/// less its own count of the text (0 without a `/tokenize`).
fn extra_tokens(pre: &[Point]) -> u32 {
    let mut v: Vec<f64> = pre.iter().filter_map(|p| p.extra).map(|e| e as f64).collect();
    median(&mut v).map_or(0, |m| m.max(0.0).round() as u32)
}

/// The prompt tokens every request finds cached: the median the server reported over the
/// prefill probe's unique prompts (their shared template prefix; 0 when it reports none).
fn template_cached(pre: &[Point]) -> u32 {
    let mut v: Vec<f64> = pre.iter().map(|p| p.cached as f64).collect();
    median(&mut v).map_or(0, |m| m.round() as u32)
}

/// Run the calibration probes against `ctx`'s server and fit its model.
pub async fn calibrate(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
) -> Result<Calibration, ProbeError> {
    if o.prefill_lengths.len() < 2
        || o.decode_contexts.is_empty()
        || o.repeats == 0
        || o.decode_tokens < 8
        || o.seqs_probe < 2
    {
        return Err(ProbeError::Invalid(
            "give two prompt lengths or more, a decode context, a repeat, 8 decode tokens or more and a slot probe of 2 or more".into(),
        ));
    }
    // Prompts unique to this calibration: a server keeps earlier runs' prompts in its
    // prefix cache, and a cached prompt's TTFT is not a prefill.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut c = ctx.clone();
    c.seed = mix(ctx.seed ^ salt);
    let ctx = &c;
    let t0 = Instant::now();
    ctx.send(0, words(8, ctx.seed), 2, t0).await?; // warm-up: connections, first-use costs
    let slots = max_seqs(ctx, o.seqs_probe, t0).await?.max(1);
    let pre = prefill(ctx, o, t0).await?;
    let mut batches = vec![1, slots.div_ceil(2), slots];
    batches.dedup();
    let (dec, db, dr2, decode_rounds) = decode_measured(ctx, o, &batches, t0).await?;
    let py: Vec<f64> = pre.iter().map(|p| p.y).collect();
    let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
    // base + d·B: a gap must cost something; tiny negative slopes (noise) are taken as 0
    let (base, d, c) = (db[0].max(0.0), db[1].max(0.0), (db[2] * 1e3).max(0.0));
    if base + d <= 0.0 {
        return Err(ProbeError::Invalid("decode steps came out free".into()));
    }
    let (overhead, pb, pr2) = fit_prefill(&pre, base)?;
    let (cached, new, warm) = prefix(ctx, o, t0).await?;
    let cold = |n: u64| pb[1] * n as f64 + pb[2] * (n as f64).powi(2) / 2.0 / 1e6;
    let cold_warm = overhead + base + cold(cached + new);
    let prefix_cache = cached > 0 && warm < 0.5 * cold_warm;
    let cached_ms = if prefix_cache {
        let new_pairs = new as f64 * (cached as f64 + new as f64 / 2.0);
        ((warm - overhead - base - pb[1] * new as f64 - pb[2] * new_pairs / 1e6) / cached as f64)
            .max(0.0)
    } else {
        0.0
    };
    let step = StepTime {
        base_ms: base,
        prefill_token_ms: pb[1],
        prefill_pair_mt_ms: pb[2],
        cached_token_ms: cached_ms,
        decode_seq_ms: d,
        context_kt_ms: c,
    };
    let ppred: Vec<f64> = pre
        .iter()
        .map(|p| overhead + step.ms(p.x[0] as u64, p.x[1] * 1e6, p.cached, 0, 0))
        .collect();
    let extra = extra_tokens(&pre);
    let dpred: Vec<f64> =
        dec.iter().map(|p| step.ms(0, 0.0, 0, p.x[0] as u64, p.x[1] as u64)).collect();
    let model = ServerModel {
        schema_version: SERVER_MODEL_VERSION,
        server: ctx.base_url.clone(),
        model: ctx.model.clone(),
        calibrated_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        step,
        max_seqs: slots,
        kv_tokens: u64::from(slots) * u64::from(o.max_context),
        max_batch_tokens: o.max_batch_tokens,
        prefix_cache,
        block_tokens: o.block_tokens,
        prompt_extra_tokens: extra,
        template_cached_tokens: template_cached(&pre).min(extra),
        arrival_overhead_ms: overhead,
        emit_overhead_ms: 0.0,
        fits: Fits {
            prefill: quality(&py, &ppred, pr2),
            decode: quality(&dy, &dpred, dr2),
            max_seqs_observed: slots,
            max_seqs_probe: o.seqs_probe,
        },
    };
    model.check().map_err(|(f, m)| ProbeError::Invalid(format!("the fitted model's {f}: {m}")))?;
    let mut rows = Vec::new();
    for (p, pred) in pre.iter().chain(&dec).zip(ppred.iter().chain(&dpred)) {
        let (b, ctxt) = if p.what == "prefill" { (0.0, p.x[0]) } else { (p.x[0], p.x[1]) };
        rows.push(vec![p.what.to_string(), f(b), f(ctxt), f(p.y), f(*pred)]);
    }
    rows.push(vec![
        "prefix".into(),
        f(0.0),
        f((cached + new) as f64),
        f(warm),
        f(overhead + step.ms(new, new as f64 * (cached as f64 + new as f64 / 2.0), cached, 0, 0)),
    ]);
    let summary = json!({
        "max_seqs": slots, "seqs_probe": o.seqs_probe,
        "step": {"base_ms": base, "prefill_token_ms": pb[1], "prefill_pair_mt_ms": pb[2], "cached_token_ms": cached_ms, "decode_seq_ms": d, "context_kt_ms": c},
        "arrival_overhead_ms": overhead, "prefix_cache": prefix_cache, "prompt_extra_tokens": extra,
        "template_cached_tokens": template_cached(&pre).min(extra),
        "prefill_r2": pr2, "decode_r2": dr2, "decode_rounds": decode_rounds,
    });
    let output = ProbeOutput {
        probe: "calibrate",
        header: vec!["probe", "batch", "tokens", "measured_ms", "model_ms"],
        rows,
        parameters: json!({
            "max_context": o.max_context, "prefill_lengths": o.prefill_lengths, "repeats": o.repeats,
            "decode_contexts": o.decode_contexts, "decode_tokens": o.decode_tokens,
            "seqs_probe": o.seqs_probe, "max_batch_tokens": o.max_batch_tokens, "block_tokens": o.block_tokens,
        }),
        summary,
    };
    Ok(Calibration { model, output, decode_rounds })
}

/// The context one sequence may hold, as the server reports it: llama.cpp's `/props`
/// (`default_generation_settings.n_ctx`, per slot) or vLLM's `/v1/models`
/// (`max_model_len`). `None` when neither says.
pub async fn server_context(base_url: &str, bearer: Option<&str>) -> Option<u32> {
    let base = base_url.trim_end_matches('/');
    let timeout = std::time::Duration::from_secs(5);
    let read = |b: Vec<u8>| serde_json::from_slice::<serde_json::Value>(&b).ok();
    if let Some(v) = quetta_http::fetch::get(&format!("{base}/props"), bearer, timeout, 1 << 20)
        .await
        .ok()
        .and_then(read)
    {
        if let Some(n) =
            v.pointer("/default_generation_settings/n_ctx").and_then(serde_json::Value::as_u64)
        {
            return u32::try_from(n).ok();
        }
    }
    let v = quetta_http::fetch::get(&format!("{base}/v1/models"), bearer, timeout, 1 << 20)
        .await
        .ok()
        .and_then(read)?;
    v.pointer("/data/0/max_model_len")
        .and_then(serde_json::Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

/// Tokens of `text` alone, by the server's own `/tokenize` (llama.cpp: `content`; vLLM:
/// `prompt` and `model`, no special tokens). `None` when it has none.
pub async fn server_tokens(
    base_url: &str,
    bearer: Option<&str>,
    model: &str,
    text: &str,
) -> Option<u64> {
    let url = format!("{}/tokenize", base_url.trim_end_matches('/'));
    let timeout = std::time::Duration::from_secs(10);
    for body in [
        json!({"content": text, "add_special": false}),
        json!({"model": model, "prompt": text, "add_special_tokens": false}),
    ] {
        let Ok(b) =
            quetta_http::fetch::post_json(&url, bearer, body.to_string().into_bytes(), timeout)
                .await
        else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&b) else { continue };
        if let Some(n) = v.get("count").and_then(serde_json::Value::as_u64) {
            return Some(n);
        }
        if let Some(t) = v.get("tokens").and_then(serde_json::Value::as_array) {
            return Some(t.len() as u64);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode grid from base 10 + 5·B + 0.01·C ms, `noise` added to point `bad`.
    fn grid(bad: usize, noise: f64) -> Vec<Point> {
        let pts =
            [(1.0, 100.0), (1.0, 400.0), (2.0, 200.0), (2.0, 800.0), (4.0, 400.0), (4.0, 1600.0)];
        pts.iter()
            .enumerate()
            .map(|(i, &(b, c))| {
                let y = 10.0 + 5.0 * b + 0.01 * c + if i == bad { noise } else { 0.0 };
                Point { what: "decode", x: vec![b, c], y, extra: None, cached: 0 }
            })
            .collect()
    }

    /// One slow point in one round spoils its fit; the median of three rounds, each with a
    /// different slow point, is the clean grid, and its fit finds the model again.
    #[test]
    fn the_median_of_rounds_outvotes_one_slow_point() {
        let (_, r2) = decode_fit(&grid(2, 25.0), 3).unwrap();
        assert!(r2 < MIN_R2, "one slow point: R² {r2}");
        let rounds = [grid(2, 25.0), grid(4, 30.0), grid(5, -20.0)];
        let dec = median_rounds(&rounds);
        let (b, r2) = decode_fit(&dec, 3).unwrap();
        assert!(r2 > 0.999, "R² {r2}");
        assert!((b[0] - 10.0).abs() < 0.01 && (b[1] - 5.0).abs() < 0.01, "{b:?}");
        assert!((b[2] - 0.01).abs() < 1e-5, "{b:?}");
        assert!(refuse_noisy("decode", &[vec![1.0]], &[1.0], 0.5).is_err());
    }
}

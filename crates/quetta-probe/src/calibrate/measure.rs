//! The calibration's measurements: prefill, decode, prefix cache, the gather window and
//! mixed steps, each against the live server.

use std::time::Instant;

use quetta_sim::model::StepTime;
use serde_json::json;

pub use crate::meta::{CalibrateOptions, GatherPair};
use crate::probes::{join_all, median, mix, ttft_ms, words, ProbeContext, ProbeError};

pub(crate) struct Point {
    pub(crate) what: &'static str,
    pub(crate) x: Vec<f64>,
    pub(crate) y: f64,
    /// Prefill points: the server's prompt tokens less its `/tokenize` count of the text.
    pub(crate) extra: Option<i64>,
    /// Prefill points: the prompt tokens the server reported cached (a template prefix
    /// every prompt shares); `x` counts the others.
    pub(crate) cached: u64,
}

/// TTFT of single requests: (prompt tokens, TTFT ms).
pub(crate) async fn prefill(
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

/// Steady gaps of `b` streams of `context` words: (B, C tokens, the median over the streams
/// of each one's mean gap, ms).
pub(crate) async fn decode(
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
            let means = crate::probes::steady_gaps(&obs).per_req_mean;
            let Some(gap) = median(&means) else {
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
pub(crate) async fn prefix(
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

/// Delays (ms) between the two prompts of the gather probe.
pub const GATHER_DELAYS_MS: [u64; 4] = [0, 10, 25, 50];

/// Pairs of the gather probe at each delay.
pub const GATHER_REPEATS: u64 = 3;

/// The gather window of an idle server: pairs of 64-word prompts sent each delay apart
/// ([`GATHER_REPEATS`] each); a pair shared the server's first step when their first tokens
/// came within a quarter of the first prompt's TTFT of each other (apart, one waits for the
/// other's whole prefill). The window is midway between the longest delay at which most
/// pairs, and most pairs of every shorter delay, shared a step and the next delay (the
/// longest delay itself when all did; 0 when most pairs sent at once did not: which of two
/// simultaneous requests a server sees first is a race).
pub(crate) async fn gather(
    ctx: &ProbeContext,
    t0: Instant,
) -> Result<(f64, Vec<GatherPair>), ProbeError> {
    let mut pairs = Vec::new();
    let mut id = 5_000u64;
    for rep in 0..GATHER_REPEATS {
        for &d in &GATHER_DELAYS_MS {
            let one = |k: u64, delay: u64| async move {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                ctx.send(id + k, words(64, mix(ctx.seed ^ (id + k) ^ 0x6A7E ^ rep)), 2, t0).await
            };
            let got = join_all(vec![one(0, 0), one(1, d)]).await;
            id += 2;
            let (a, b) = match (&got[0], &got[1]) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => return Err(ProbeError::Request(e.to_string())),
            };
            let (Some(fa), Some(fb), Some(ttft)) = (a.first_token, b.first_token, ttft_ms(a))
            else {
                return Err(ProbeError::Request("a gather probe request gave no token".into()));
            };
            let apart_ms = (fb.as_secs_f64() - fa.as_secs_f64()) * 1e3;
            pairs.push(GatherPair { delay_ms: d, apart_ms, shared: apart_ms.abs() < ttft / 4.0 });
        }
    }
    let most_shared = |d: u64| {
        let at: Vec<bool> = pairs.iter().filter(|p| p.delay_ms == d).map(|p| p.shared).collect();
        2 * at.iter().filter(|&&s| s).count() > at.len()
    };
    let mut window = 0.0;
    for (i, &d) in GATHER_DELAYS_MS.iter().enumerate() {
        if !most_shared(d) {
            break;
        }
        window = match GATHER_DELAYS_MS.get(i + 1) {
            Some(&next) => (d + next) as f64 / 2.0,
            None => d as f64,
        };
    }
    Ok((window, pairs))
}

/// Repeats of the mixed-step probe.
pub const MIXED_REPEATS: u64 = 3;

/// The fixed cost of a step that prefills, which every sequence in the step waits out
/// (`prefill_step_ms`), apart from the arrival overhead, which delays only its own request:
/// a lone prompt's TTFT holds both. One stream decodes while a prompt of `n` words arrives;
/// the stream's gap that ends with the prompt's first token is the step that prefilled it
/// beside one decode, and what it took beyond `step` (with no such cost) is the cost.
/// [`MIXED_REPEATS`] times; the median of the steps found (a step is found when the
/// prompt's first token came within a quarter of that gap of the stream's token). Returns
/// (median extra ms, the extras measured).
pub(crate) async fn mixed(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
    step: &StepTime,
    lone_ttft: impl Fn(u64) -> f64,
    t0: Instant,
) -> Result<(f64, Vec<f64>), ProbeError> {
    let n = 128.min(o.max_batch_tokens / 2).min(o.max_context / 4).max(8);
    let (stream_words, delay_ms) = (32u32, 300.0);
    // the stream lasts past the prompt's first token: its wait, its prefill (twice the lone
    // estimate), and as long again
    let one = step.ms(0, 0.0, 0, 1, u64::from(stream_words) * 2).max(0.1);
    let need = ((lone_ttft(u64::from(stream_words)) + delay_ms + 2.0 * lone_ttft(u64::from(n)))
        * 1.5
        / one)
        .ceil() as u32;
    let max_tokens = need.clamp(16, o.max_context.saturating_sub(stream_words * 2).max(16));
    let mut extras = Vec::new();
    let mut id = 6_000u64;
    for rep in 0..MIXED_REPEATS {
        let a =
            ctx.send(id, words(stream_words, mix(ctx.seed ^ id ^ 0x313D ^ rep)), max_tokens, t0);
        let b = async {
            // after the stream's own prefill, while it decodes
            let wait = lone_ttft(u64::from(stream_words)) + delay_ms;
            tokio::time::sleep(std::time::Duration::from_secs_f64(wait / 1e3)).await;
            ctx.send(id + 1, words(n, mix(ctx.seed ^ (id + 1) ^ 0x313E ^ rep)), 2, t0).await
        };
        let (a, b) = tokio::join!(a, b);
        id += 2;
        let (a, b) = (a?, b?);
        let times = crate::probes::token_times(&a);
        let Some(fb) = b.first_token.map(|d| d.as_secs_f64() * 1e3) else { continue };
        let Some(k) = (1..times.len())
            .min_by(|&i, &j| (times[i] - fb).abs().total_cmp(&(times[j] - fb).abs()))
        else {
            continue;
        };
        let gap = times[k] - times[k - 1];
        if (times[k] - fb).abs() > gap / 4.0 {
            continue; // the prompt was not prefilled beside the stream (it ended first?)
        }
        let prompt = b.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(n));
        let cached =
            b.usage.and_then(|u| u.cached_tokens).unwrap_or(0).min(prompt.saturating_sub(1));
        let new = prompt - cached;
        let pairs = new as f64 * (cached as f64 + new as f64 / 2.0);
        let context =
            a.usage.and_then(|u| u.prompt_tokens).unwrap_or(u64::from(stream_words)) + k as u64;
        extras.push(gap - step.ms(new, pairs, cached, 1, context));
    }
    let v = extras.clone();
    Ok((median(&v).unwrap_or(0.0), extras))
}

/// The context one sequence may hold, as the server reports it: llama.cpp's `/props`
/// (`default_generation_settings.n_ctx`, per slot) or vLLM's `/v1/models`
/// (`max_model_len`). `None` when neither says.
pub async fn server_context(
    base_url: &str,
    bearer: Option<&quetta_http::fetch::ApiKey>,
) -> Option<u32> {
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
    bearer: Option<&quetta_http::fetch::ApiKey>,
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

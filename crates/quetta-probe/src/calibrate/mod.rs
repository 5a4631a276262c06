//! `calibrate`: the probes a twin needs, and the [`ServerModel`] fitted from them.
//!
//! 1. **Batch slots**: `seqs_probe` short requests sent at once; those whose first token
//!    came before the first of them ended were running together: `max_seqs`.
//! 2. **Prefill**: single requests with prompts of each length (twice), one output token
//!    asked for two; TTFT = intercept + `prefill_token_ms`·n + `prefill_pair_mt_ms`·n²/2/10⁶,
//!    n the server's prompt tokens (`usage`); a negative attention term refits without it.
//! 3. **Decode**: `B` streams at once for every B up to the slots ([`EVERY_BATCH_UP_TO`];
//!    beyond, max/2 and max) and each context length; the mean gap while every stream
//!    decodes (each stream's mean, the median over the streams: a twin's TPOT is a mean, slow
//!    steps and all) = `base_ms` + `decode_seq_ms`·B + `context_kt_ms`·C/1000 [+
//!    `context_over_kt_ms`·max(0, C − knee)/1000, where the knee pays for itself], C the
//!    streams' tokens in cache; and each B's own line in C (`decode_by_seqs`), which the
//!    twin's steps use. The prefill intercept less `base_ms` is the arrival overhead.
//! 4. **Prefix cache**: a prompt, then the same prompt with a few more words; the second's
//!    TTFT against the model's cold prediction gives `cached_token_ms`.
//! 5. **Gather**: pairs of short prompts sent 0–50 ms apart to the idle server; the longest
//!    gap at which they shared its first step is `gather_ms`, taken out of the prefill
//!    intercept (a lone request waits it out too).
//! 6. **Mixed step**: one stream decodes while a prompt arrives; the stream's gap that ends
//!    with the prompt's first token, beyond what the fits say of that step, is
//!    `prefill_step_ms`, the fixed cost of a step that prefills, which the decoding streams
//!    wait out too. It is taken out of the intercept; the rest is the arrival overhead.
//!
//! A fit that explains too little of its data (R² below [`MIN_R2`]), a negative cost, or a
//! failed request refuses the model, saying why.

use std::time::Instant;

use quetta_sim::model::{FitQuality, Fits, ServerModel, StepTime, SERVER_MODEL_VERSION};

pub use crate::meta::{CalibrateOptions, GatherPair};
use crate::meta::{CalibrateSummary, Findings};
use crate::probes::{f, join_all, median, mix, words, ProbeContext, ProbeError, ProbeOutput};

mod fit;
mod measure;

pub use fit::*;
pub use measure::*;

/// A fitted model and the measurements behind it.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub model: ServerModel,
    /// One row per measurement with the model's prediction beside it.
    pub output: ProbeOutput,
    /// How many times the decode grid was measured (more than once when a round's fit was
    /// too noisy; its points are then the medians).
    pub decode_rounds: usize,
    /// The mixed-step probe's measurements: each prefill step's cost beyond the fits, ms.
    pub mixed_step_extra_ms: Vec<f64>,
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

/// The tokens the server adds to a prompt: the median over the prefill probe of its usage
/// less its own count of the text (0 without a `/tokenize`).
fn extra_tokens(pre: &[Point]) -> u32 {
    let v: Vec<f64> = pre.iter().filter_map(|p| p.extra).map(|e| e as f64).collect();
    median(&v).map_or(0, |m| m.max(0.0).round() as u32)
}

/// The prompt tokens every request finds cached: the median the server reported over the
/// prefill probe's unique prompts (their shared template prefix; 0 when it reports none).
fn template_cached(pre: &[Point]) -> u32 {
    let v: Vec<f64> = pre.iter().map(|p| p.cached as f64).collect();
    median(&v).map_or(0, |m| m.round() as u32)
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
    let batches = decode_batches(slots);
    let (dec, df, decoded, decode_rounds) = decode_measured(ctx, o, &batches, t0).await?;
    let dr2 = df.r2;
    // the fit and its quality on each length's median, as the decode grid's on each point's
    let pre_med = median_repeats(&pre, o.repeats as usize);
    let py: Vec<f64> = pre_med.iter().map(|p| p.y).collect();
    let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
    // base + d·B: a gap must cost something; tiny negative slopes (noise) are taken as 0
    let base = decoded.base_ms;
    if base + decoded.decode_seq_ms <= 0.0 {
        return Err(ProbeError::Invalid("decode steps came out free".into()));
    }
    let (intercept, pb, pr2) = fit_prefill(&pre_med, base)?;
    let (cached, new, warm) = prefix(ctx, o, t0).await?;
    // a lone request's TTFT holds the gather window: the fitted intercept is the arrival
    // overhead and the window together (an intercept under the window, a few ms of TTFTs of
    // seconds, is noise: the window is measured, the intercept fitted)
    let (gather_ms, gather_pairs) = gather(ctx, t0).await?;
    let mut step = StepTime { prefill_token_ms: pb[1], prefill_pair_mt_ms: pb[2], ..decoded };
    let lone = |n: u64| intercept + step.ms(n, n as f64 * n as f64 / 2.0, 0, 0, 0);
    let (mixed_extra, mixed_extras) = mixed(ctx, o, &step, lone, t0).await?;
    // the intercept holds the gather window, the arrival overhead and the prefill step's
    // fixed cost: the step is measured (up to the whole intercept: a lone prompt's TTFT
    // stays what the prefill fit says), the window too (its grid is coarse: a few ms), and
    // the overhead is what is left
    // the intercept's own size against their spread: a server whose mixed steps scatter
    // wider than that cannot say which part blocks (llama.cpp on one CPU thread: -392 to
    // +590 ms in one calibration), and then all of it is taken as arrival overhead
    let spread = mixed_extras.iter().copied().fold(f64::MIN, f64::max)
        - mixed_extras.iter().copied().fold(f64::MAX, f64::min);
    let prefill_step = if mixed_extras.is_empty() || spread > intercept.max(0.0) {
        0.0
    } else {
        mixed_extra.clamp(0.0, intercept.max(0.0))
    };
    let overhead = (intercept - gather_ms - prefill_step).max(0.0);
    let cold = |n: u64| pb[1] * n as f64 + pb[2] * (n as f64).powi(2) / 2.0 / 1e6;
    let cold_warm = intercept + base + cold(cached + new);
    let prefix_cache = cached > 0 && warm < 0.5 * cold_warm;
    let cached_ms = if prefix_cache {
        let new_pairs = new as f64 * (cached as f64 + new as f64 / 2.0);
        ((warm - intercept - base - pb[1] * new as f64 - pb[2] * new_pairs / 1e6) / cached as f64)
            .max(0.0)
    } else {
        0.0
    };
    step.cached_token_ms = cached_ms;
    step.prefill_step_ms = prefill_step;
    // a lone prompt: its arrival overhead and the gather window, then its step
    let before = overhead + gather_ms;
    let lone_ttft = |p: &Point| before + step.ms(p.x[0] as u64, p.x[1] * 1e6, p.cached, 0, 0);
    let ppred: Vec<f64> = pre.iter().map(lone_ttft).collect();
    let ppred_med: Vec<f64> = pre_med.iter().map(lone_ttft).collect();
    let extra = extra_tokens(&pre);
    let dpred = decode_predicted(&dec, &step);
    let model = ServerModel {
        schema_version: SERVER_MODEL_VERSION,
        server: ctx.base_url.clone(),
        model: ctx.model.clone(),
        calibrated_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        step: step.clone(),
        max_seqs: slots,
        kv_tokens: u64::from(slots) * u64::from(o.max_context),
        max_batch_tokens: o.max_batch_tokens,
        prefix_cache,
        block_tokens: o.block_tokens,
        prompt_extra_tokens: extra,
        template_cached_tokens: template_cached(&pre).min(extra),
        arrival_overhead_ms: overhead,
        emit_overhead_ms: 0.0,
        gather_ms,
        fits: Fits {
            prefill: quality(&py, &ppred_med, pr2),
            decode: quality(&dy, &dpred, dr2),
            max_seqs_observed: slots,
            max_seqs_probe: o.seqs_probe,
        },
        decode_probe_tokens: Some(o.decode_tokens),
        rechecked: None,
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
        f(before + step.ms(new, new as f64 * (cached as f64 + new as f64 / 2.0), cached, 0, 0)),
    ]);
    let summary = CalibrateSummary {
        max_seqs: slots,
        seqs_probe: o.seqs_probe,
        step,
        arrival_overhead_ms: overhead,
        gather_ms,
        mixed_step_extra_ms: mixed_extras.clone(),
        gather_pairs,
        prefix_cache,
        prompt_extra_tokens: extra,
        template_cached_tokens: model.template_cached_tokens,
        prefill_r2: pr2,
        decode_r2: dr2,
        decode_rounds,
    };
    let output = ProbeOutput {
        header: vec!["probe", "batch", "tokens", "measured_ms", "model_ms"],
        rows,
        findings: Findings::Calibrate { parameters: o.clone(), summary: Box::new(summary) },
    };
    Ok(Calibration { model, output, decode_rounds, mixed_step_extra_ms: mixed_extras })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode grid from base 10 + 5·B + 0.01·C ms, `noise` added to point `bad`.
    /// Decode-grid points of (streams, context tokens, measured step ms).
    fn decode_points(grid: &[(f64, f64, f64)]) -> Vec<Point> {
        grid.iter()
            .map(|&(b, c, y)| Point { what: "decode", x: vec![b, c], y, extra: None, cached: 0 })
            .collect()
    }

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

    /// Every batch size up to the slots is measured (then half and all of them), and each
    /// gets its own row: llama.cpp's measured steps at 300-token prompts, three sequences as
    /// slow as four, are what the rows give back, where the line through them misses three
    /// sequences by a fifth.
    #[test]
    fn each_batch_size_gets_its_own_decode_row() {
        assert_eq!(decode_batches(4), [1, 2, 3, 4]);
        assert_eq!(decode_batches(1), [1]);
        assert_eq!(decode_batches(64), [1, 2, 3, 4, 5, 6, 7, 8, 32, 64]);
        // rows of (B, ms at no context, ms per 1,000 tokens): 3 as slow as 4
        let rows = [(1.0, 18.0, 7.0), (2.0, 25.0, 8.4), (3.0, 36.0, 20.4), (4.0, 40.0, 9.1)];
        let mut grid = Vec::new();
        for (b, step, kt) in rows {
            for per_seq in [60.0, 320.0, 1100.0] {
                let c: f64 = b * per_seq;
                grid.push((b, c, step + kt * c / 1e3));
            }
        }
        let dec = decode_points(&grid);
        let line = decode_fit(&dec, 4).unwrap();
        let got = decode_rows(&dec, &line);
        assert_eq!(got.len(), 4);
        for (r, (b, step, kt)) in got.iter().zip(rows) {
            assert_eq!(f64::from(r.seqs), b);
            assert!(
                (r.step_ms - step).abs() < 1e-6 && (r.context_kt_ms - kt).abs() < 1e-6,
                "{r:?}"
            );
        }
        let step = decode_step(&line, got);
        let three = step.ms(0, 0.0, 0, 3, 960);
        assert!((three - (36.0 + 20.4 * 0.96)).abs() < 1e-6, "{three}");
        let by_line = line.at(3.0, 960.0);
        assert!((by_line / three - 1.0).abs() > 0.1, "the line alone misses it: {by_line}");
        // one context: the line's slope, through that point
        let one = decode_points(&[(1.0, 100.0, 20.0), (2.0, 250.0, 30.0), (3.0, 300.0, 45.0)]);
        let line = decode_fit(&one, 3).unwrap();
        for (r, p) in decode_rows(&one, &line).iter().zip(&one) {
            let at = r.step_ms + r.context_kt_ms * p.x[1] / 1e3;
            assert!((at - p.y).abs() < 1e-6, "{r:?} through {:?}", p.y);
        }
    }

    /// One slow point in one round spoils its fit; the median of three rounds, each with a
    /// different slow point, is the clean grid, and its fit finds the model again.
    #[test]
    fn the_median_of_rounds_outvotes_one_slow_point() {
        let r2 = decode_fit(&grid(2, 25.0), 3).unwrap().r2;
        assert!(r2 < MIN_R2, "one slow point: R² {r2}");
        let rounds = [grid(2, 25.0), grid(4, 30.0), grid(5, -20.0)];
        let dec = median_rounds(&rounds);
        let f = decode_fit(&dec, 3).unwrap();
        assert!(f.r2 > 0.999, "{f:?}");
        assert!((f.base - 10.0).abs() < 0.01 && (f.d - 5.0).abs() < 0.01, "{f:?}");
        assert!((f.c - 0.01).abs() < 1e-5, "{f:?}");
        assert_eq!(f.over, 0.0, "a straight grid has no knee: {f:?}");
        assert!(refuse_noisy("decode", &[vec![1.0]], &[1.0], 0.5).is_err());
    }

    /// The one-round grid of 2026-12-05 (llama.cpp, 2-vCPU VM: the two-stream step at 221
    /// tokens of context 43.3 ms, at 804 34.9 ms) passes R² 0.9 and is still measured again,
    /// as a point misses its fit by more than a tenth; a straight grid is not.
    #[test]
    fn a_grid_whose_fit_misses_a_point_by_a_tenth_is_measured_again() {
        let measured = [
            (1.0, 109.0, 22.747),
            (1.0, 405.0, 21.808),
            (1.0, 1432.0, 42.623),
            (2.0, 221.0, 43.290),
            (2.0, 804.0, 34.903),
            (2.0, 2833.0, 53.046),
            (4.0, 443.0, 48.853),
            (4.0, 1608.0, 79.968),
            (4.0, 5727.0, 98.616),
        ];
        let dec = decode_points(&measured);
        let f = decode_fit(&dec, 3).unwrap();
        assert!(f.r2 >= MIN_R2, "R² {} passes alone", f.r2);
        // the line judges the grid (the measuring loop's test), whatever the rows then say
        let steady = |dec: &[Point]| {
            let f = decode_fit(dec, 3).unwrap();
            let line: Vec<f64> = dec.iter().map(|p| f.at(p.x[0], p.x[1])).collect();
            decode_steady(dec, &line, f.r2)
        };
        assert!(!steady(&dec), "{f:?}");
        assert!(steady(&grid(0, 0.0)));
    }

    /// Three repeats of four prompt lengths, one request of two lengths slow by half or by
    /// a fifth (the host's hiccup): through every request the fit bends (R² under 0.99);
    /// through each length's median it is the server's 10 ms a token and 100 ms again.
    #[test]
    fn the_median_of_repeats_outvotes_one_slow_prefill() {
        let mut pre = Vec::new();
        for (k, n) in [64.0, 350.0, 680.0, 1360.0].into_iter().enumerate() {
            for rep in 0..3u8 {
                let slow = match (k, rep) {
                    (3, 0) => 1.5,
                    (1, 2) => 1.2,
                    _ => 1.0,
                };
                let n = n + f64::from(rep);
                let x = vec![n, n * n / 2.0 / 1e6];
                let y = (100.0 + 10.0 * x[0]) * slow;
                pre.push(Point { what: "prefill", x, y, extra: None, cached: 0 });
            }
        }
        let (_, _, raw_r2) = fit_prefill(&pre, 0.0).unwrap();
        assert!(raw_r2 < 0.99, "the slow requests bend the fit through all: R² {raw_r2}");
        let med = median_repeats(&pre, 3);
        assert_eq!(med.len(), 4);
        let (intercept, b, r2) = fit_prefill(&med, 0.0).unwrap();
        assert!(r2 > 0.9999, "R² {r2}");
        assert!((b[1] - 10.0).abs() < 0.01 && (intercept - 100.0).abs() < 1.0, "{intercept} {b:?}");
        // of two repeats, their mean
        let two = median_repeats(&pre[..2], 2);
        assert!((two[0].y - f64::midpoint(pre[0].y, pre[1].y)).abs() < 1e-9);
        assert!((two[0].x[0] - 64.5).abs() < 1e-9);
    }

    /// The decode grid the real llama.cpp server gave `quetta-probe calibrate` on 2026-12-03
    /// (SmolLM2-135M, 4 slots, one CPU thread): one stream decoded a step in 12.9 ms where
    /// the line through all nine points says 15.3, and four short streams in 53.4 where it
    /// says 61.3. The fit takes the multi-sequence term (about 10 ms), and every point is
    /// then within 11 % (the line: 17 %).
    #[test]
    fn one_stream_alone_is_cheaper_than_the_line_through_more() {
        let grid = [
            (1.0, 109.0, 12.889),
            (1.0, 404.0, 18.105),
            (1.0, 1406.0, 23.738),
            (2.0, 224.0, 33.829),
            (2.0, 815.0, 38.917),
            (2.0, 2839.0, 67.665),
            (4.0, 448.0, 53.353),
            (4.0, 1632.0, 66.698),
            (4.0, 5687.0, 125.049),
        ];
        let dec = decode_points(&grid);
        let f = decode_fit(&dec, 3).unwrap();
        assert!((7.0..14.0).contains(&f.multi), "{f:?}");
        let worst = |f: &DecodeFit| {
            dec.iter().map(|p| (f.at(p.x[0], p.x[1]) / p.y - 1.0).abs()).fold(0.0, f64::max)
        };
        assert!(worst(&f) < 0.11, "{f:?}: {}", worst(&f));
        let (line, _) = decode_model(&dec, 3, Terms { multi: false, knee: None }).unwrap();
        assert!(worst(&line) > 0.16, "{line:?}");
    }

    /// A 3×3 grid like llama.cpp's on a CPU (B 1, 2, 4; contexts of 70, 330 and 1,250
    /// tokens a stream), its step 2 + 9·B + 0.003·C ms plus 0.02 ms a token beyond 1,200
    /// tokens of context, each point ±2 % (alternating): the knee is found near 1,200 and the
    /// longest point predicted within 3 %, where a line through the grid misses it.
    #[test]
    fn a_knee_in_the_context_cost_is_found() {
        let mut dec = Vec::new();
        for (i, (b, per)) in
            [1.0, 2.0, 4.0].iter().flat_map(|&b| [70.0, 330.0, 1250.0].map(|c| (b, c))).enumerate()
        {
            let c: f64 = b * per;
            let y = (2.0 + 9.0 * b + 0.003 * c + 0.02 * (c - 1200.0).max(0.0))
                * if i % 2 == 0 { 1.02 } else { 0.98 };
            dec.push(Point { what: "decode", x: vec![b, c], y, extra: None, cached: 0 });
        }
        let f = decode_fit(&dec, 3).unwrap();
        assert!((900.0..=1330.0).contains(&f.knee), "{f:?}");
        assert!((0.014..=0.026).contains(&f.over), "{f:?}");
        let truth = 2.0 + 36.0 + 0.003 * 5000.0 + 0.02 * 3800.0;
        assert!((f.at(4.0, 5000.0) / truth - 1.0).abs() < 0.03, "{f:?} against {truth}");
        let t = Terms { multi: false, knee: None };
        let x: Vec<Vec<f64>> = dec.iter().map(|p| decode_cols(p, 3, t)).collect();
        let y: Vec<f64> = dec.iter().map(|p| p.y).collect();
        let (line, _) = fit("decode", &x, &y).unwrap();
        let by_line = line[0] + 4.0 * line[1] + 5000.0 * line[2];
        assert!((by_line / truth - 1.0).abs() > 0.1, "the line: {by_line} against {truth}");
    }
}

//! The calibration's fits: each measurement's medians, the decode model with its knee, the
//! prefill model, and the quality every fit must reach.

use std::time::Instant;

use quetta_sim::model::{SeqsStep, StepTime};

pub use crate::meta::CalibrateOptions;
use crate::probes::{lstsq, median, r_squared, ProbeContext, ProbeError};

use super::{decode, Point};

/// The least R² a fit must reach for the model to be written.
pub const MIN_R2: f64 = 0.9;

/// A fit with an intercept that minimises the *relative* residuals (each point weighted by
/// 1 / measured): a twin is judged by its relative error, and a few long prompts would
/// otherwise decide the cost of every short one. R² is of the unweighted data.
pub(crate) fn rel_fit(x: &[Vec<f64>], y: &[f64]) -> Option<(Vec<f64>, f64)> {
    let rows: Vec<Vec<f64>> =
        x.iter().map(|r| std::iter::once(1.0).chain(r.iter().copied()).collect()).collect();
    let w: Vec<Vec<f64>> =
        rows.iter().zip(y).map(|(r, &yi)| r.iter().map(|v| v / yi.max(1e-9)).collect()).collect();
    let ones = vec![1.0; y.len()];
    let beta = lstsq(&w, &ones)?;
    Some((beta.clone(), r_squared(&rows, y, &beta)))
}

/// A relative fit; refused only when singular.
pub(crate) fn fit(what: &str, x: &[Vec<f64>], y: &[f64]) -> Result<(Vec<f64>, f64), ProbeError> {
    rel_fit(x, y).ok_or_else(|| {
        ProbeError::Invalid(format!("the {what} fit is singular: its probe did not vary enough"))
    })
}

/// Refuse a fit whose R² is under [`MIN_R2`], listing the measurements.
pub(crate) fn refuse_noisy(
    what: &str,
    x: &[Vec<f64>],
    y: &[f64],
    r2: f64,
) -> Result<(), ProbeError> {
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

/// Each prompt length's median TTFT over its repeats (of an even count the mean of the middle
/// two, tokens too): one slow request among three, a hiccup of the server or its host, no
/// longer pulls the prefill fit (a calibration of 2026-12-05 on llama.cpp: a 1,362-token
/// prompt in 18.2 s beside 12.2 and 12.4 s, and a 339-token one in 4.1 s beside 3.4 and 3.2,
/// gave a fit of R² 0.90 through every request). `pre` holds each length's repeats together.
pub(crate) fn median_repeats(pre: &[Point], repeats: usize) -> Vec<Point> {
    pre.chunks(repeats.max(1))
        .map(|c| {
            let mut v: Vec<&Point> = c.iter().collect();
            v.sort_by(|a, b| a.y.total_cmp(&b.y));
            let m = v.len() / 2;
            let (a, b) = if v.len() % 2 == 1 { (v[m], v[m]) } else { (v[m - 1], v[m]) };
            Point {
                what: a.what,
                x: a.x.iter().zip(&b.x).map(|(p, q)| f64::midpoint(*p, *q)).collect(),
                y: f64::midpoint(a.y, b.y),
                extra: a.extra,
                cached: u64::midpoint(a.cached, b.cached),
            }
        })
        .collect()
}

/// The decode grid at most this many times (or `repeats`, if more): a grid whose fit is under
/// [`MIN_R2`], or misses a point by more than [`DECODE_WORST`], is measured again, and each
/// point is the median of its rounds (a point's one slow round, another process or the
/// server's own hiccup, no longer decides the fit).
pub const DECODE_ROUNDS: usize = 3;

/// The decode fit's worst relative residual above which the grid is measured again. One
/// round of 2026-12-05 (llama.cpp, 2-vCPU VM) gave a two-stream step of 43.3 ms at 221
/// tokens of context and 34.9 ms at 804: R² 0.907 passed [`MIN_R2`] with a point 23.7 % off
/// and a fit without its multi-sequence term.
pub const DECODE_WORST: f64 = 0.10;

/// Each grid point's median gap over the rounds (its batch and context their mean).
pub(crate) fn median_rounds(rounds: &[Vec<Point>]) -> Vec<Point> {
    let n = rounds.len() as f64;
    (0..rounds[0].len())
        .map(|i| {
            let ys: Vec<f64> = rounds.iter().map(|r| r[i].y).collect();
            let x = (0..rounds[0][i].x.len())
                .map(|j| rounds.iter().map(|r| r[i].x[j]).sum::<f64>() / n)
                .collect();
            let y = crate::probes::median(&ys).unwrap_or(f64::NAN);
            Point { what: "decode", x, y, extra: None, cached: 0 }
        })
        .collect()
}

/// A fitted decode step: `base + d·B + multi·[B ≥ 2] + c·C + over·max(0, C − knee)` ms, C
/// in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DecodeFit {
    pub(crate) base: f64,
    pub(crate) d: f64,
    /// A step of two decoding sequences or more costs this much more (0: no such term).
    pub(crate) multi: f64,
    /// Per context token (not per thousand).
    pub(crate) c: f64,
    /// Per context token beyond the knee (0: linear).
    pub(crate) over: f64,
    pub(crate) knee: f64,
    pub(crate) r2: f64,
}

impl DecodeFit {
    pub(crate) fn at(&self, b: f64, ctx: f64) -> f64 {
        self.base
            + self.d * b
            + if b >= 1.5 { self.multi } else { 0.0 }
            + self.c * ctx
            + self.over * (ctx - self.knee).max(0.0)
    }
}

/// The optional terms of one decode model: the multi-sequence step cost, and a knee.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Terms {
    pub(crate) multi: bool,
    pub(crate) knee: Option<f64>,
}

/// The decode fit's columns (the intercept aside): [B, [B ≥ 2],] C[, max(0, C − knee)].
pub(crate) fn decode_cols(p: &Point, batches: usize, t: Terms) -> Vec<f64> {
    let mut v = if batches >= 2 { vec![p.x[0]] } else { Vec::new() };
    if t.multi {
        v.push(if p.x[0] >= 1.5 { 1.0 } else { 0.0 });
    }
    v.push(p.x[1]);
    if let Some(k) = t.knee {
        v.push((p.x[1] - k).max(0.0));
    }
    v
}

/// The knees worth trying: each grid context and the midpoints between them, leaving at
/// least three points at or below the knee and two above it (a slope beyond the knee from
/// one point would fit that point's noise).
pub(crate) fn knee_candidates(dec: &[Point]) -> Vec<f64> {
    let mut cs: Vec<f64> = dec.iter().map(|p| p.x[1]).collect();
    cs.sort_by(f64::total_cmp);
    cs.dedup();
    let mut out = Vec::new();
    for (i, &c) in cs.iter().enumerate() {
        out.push(c);
        if let Some(&next) = cs.get(i + 1) {
            out.push(f64::midpoint(c, next));
        }
    }
    out.retain(|&k| {
        dec.iter().filter(|p| p.x[1] <= k).count() >= 3
            && dec.iter().filter(|p| p.x[1] > k).count() >= 2
    });
    out
}

/// One decode model fitted (relative residuals), and its Bayesian information criterion
/// n·ln(RSS/n) + k·ln n (a knee's place counts as a parameter).
pub(crate) fn decode_model(
    dec: &[Point],
    batches: usize,
    t: Terms,
) -> Result<(DecodeFit, f64), ProbeError> {
    let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
    let x: Vec<Vec<f64>> = dec.iter().map(|p| decode_cols(p, batches, t)).collect();
    let (b, _) = fit("decode", &x, &dy)?;
    let mut it = b.iter().copied();
    let base = it.next().unwrap_or(0.0);
    let d = if batches >= 2 { it.next().unwrap_or(0.0) } else { 0.0 };
    let multi = if t.multi { it.next().unwrap_or(0.0) } else { 0.0 };
    let c = it.next().unwrap_or(0.0);
    let over = it.next().unwrap_or(0.0);
    let f = DecodeFit { base, d, multi, c, over, knee: t.knee.unwrap_or(0.0), r2: 0.0 };
    let n = dec.len() as f64;
    let rss: f64 = dec.iter().map(|p| ((p.y - f.at(p.x[0], p.x[1])) / p.y.max(1e-9)).powi(2)).sum();
    let k = b.len() as f64 + if t.knee.is_some() { 1.0 } else { 0.0 };
    Ok((f, n * (rss / n).max(1e-12).ln() + k * n.ln()))
}

/// The decode fit: base + d·B + c·C (base + c·C with one slot), with either or both of two
/// terms where they pay for their parameters (the lowest Bayesian information criterion of
/// the relative residuals) and come out positive: a cost of every step that decodes two
/// sequences or more (llama.cpp on a CPU decodes one sequence alone far cheaper than the
/// slope through more predicts; needs three batch sizes and nine points), and a knee in
/// the context cost (a server whose KV reads outgrow its fast memory, a CPU's last-level
/// cache, decodes long contexts slower than a line through short ones).
pub(crate) fn decode_fit(dec: &[Point], batches: usize) -> Result<DecodeFit, ProbeError> {
    let mut sizes: Vec<u64> = dec.iter().map(|p| p.x[0].round() as u64).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let (mut best, mut bic) = decode_model(dec, batches, Terms { multi: false, knee: None })?;
    let knees = knee_candidates(dec);
    // nine points or more: with two contexts, the two points of one stream alone set its
    // cost by themselves, and a server whose speed drifts by a third between minutes (the
    // llama.cpp server of the CI test: 15 to 22 ms a step) then sets it from noise
    let multis: &[bool] =
        if sizes.len() >= 3 && batches >= 2 && dec.len() >= 9 { &[false, true] } else { &[false] };
    for &multi in multis {
        for knee in std::iter::once(None).chain(knees.iter().copied().map(Some)) {
            let t = Terms { multi, knee };
            let Ok((f, b)) = decode_model(dec, batches, t) else { continue };
            let fits = (!multi || f.multi > 0.0) && (knee.is_none() || f.over > 0.0) && f.c >= 0.0;
            if fits && b < bic {
                (best, bic) = (f, b);
            }
        }
    }
    let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
    let pred: Vec<f64> = dec.iter().map(|p| best.at(p.x[0], p.x[1])).collect();
    best.r2 = r_squared_of(&dy, &pred);
    Ok(best)
}

/// The decode grid measures every batch size from 1 to the server's slots up to this many
/// (then half the slots and all of them): llama.cpp on a CPU decodes three sequences of
/// 300-token prompts as slowly as four, so a line through 1, 2 and 4 sequences made a closed
/// loop of 3 decode 21 % faster than the server.
pub const EVERY_BATCH_UP_TO: u32 = 8;

/// The decode grid's batch sizes for a server of `slots` slots.
pub(crate) fn decode_batches(slots: u32) -> Vec<u32> {
    let mut b: Vec<u32> = (1..=slots.clamp(1, EVERY_BATCH_UP_TO)).collect();
    b.extend([slots.div_ceil(2), slots]);
    b.sort_unstable();
    b.dedup();
    b
}

/// Each batch size's own step: a line in the context through its points (relative
/// residuals), its slope the decode line's where it has one context or its slope comes out
/// negative (noise; then the step is the points' median).
pub(crate) fn decode_rows(dec: &[Point], line: &DecodeFit) -> Vec<SeqsStep> {
    let mut sizes: Vec<u32> = dec.iter().map(|p| p.x[0].round() as u32).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter(|&b| b >= 1)
        .map(|b| {
            let pts: Vec<&Point> = dec.iter().filter(|p| p.x[0].round() as u32 == b).collect();
            let x: Vec<Vec<f64>> = pts.iter().map(|p| vec![p.x[1]]).collect();
            let y: Vec<f64> = pts.iter().map(|p| p.y).collect();
            let mut contexts: Vec<f64> = x.iter().map(|v| v[0]).collect();
            contexts.sort_by(f64::total_cmp);
            contexts.dedup();
            let line_slope = |c: f64| line.at(f64::from(b), c + 1.0) - line.at(f64::from(b), c);
            let (step, slope) = match rel_fit(&x, &y) {
                Some((beta, _)) if contexts.len() >= 2 && beta[1] >= 0.0 => (beta[0], beta[1]),
                Some(_) if contexts.len() >= 2 => (median(&y).unwrap_or(f64::NAN), 0.0),
                _ => {
                    let s = line_slope(pts[0].x[1]).max(0.0);
                    (y[0] - s * pts[0].x[1], s)
                }
            };
            SeqsStep { seqs: b, step_ms: step.max(0.01), context_kt_ms: slope.max(0.0) * 1e3 }
        })
        .collect()
}

/// The decode step of a fitted line and its batch sizes' rows (the prompt terms 0).
pub(crate) fn decode_step(line: &DecodeFit, rows: Vec<SeqsStep>) -> StepTime {
    StepTime {
        base_ms: line.base.max(0.0),
        prefill_token_ms: 0.0,
        prefill_pair_mt_ms: 0.0,
        cached_token_ms: 0.0,
        decode_seq_ms: line.d.max(0.0),
        context_kt_ms: (line.c * 1e3).max(0.0),
        context_knee_tokens: line.knee.round() as u64,
        context_over_kt_ms: line.over * 1e3,
        multi_seq_ms: line.multi,
        prefill_step_ms: 0.0,
        decode_by_seqs: rows,
    }
}

/// The step a decode model predicts at each grid point.
pub(crate) fn decode_predicted(dec: &[Point], step: &StepTime) -> Vec<f64> {
    dec.iter().map(|p| step.ms(0, 0.0, 0, p.x[0] as u64, p.x[1] as u64)).collect()
}

/// A decode grid steady enough to stop measuring: its model's (`pred`'s) R² of [`MIN_R2`] or
/// more and no point off by more than [`DECODE_WORST`].
pub(crate) fn decode_steady(dec: &[Point], pred: &[f64], r2: f64) -> bool {
    let worst = dec
        .iter()
        .zip(pred)
        .map(|(p, q)| if p.y > 0.0 { (p.y - q).abs() / p.y } else { 0.0 })
        .fold(0.0, f64::max);
    r2 >= MIN_R2 && worst <= DECODE_WORST
}

/// R² of predictions against measurements.
pub(crate) fn r_squared_of(y: &[f64], pred: &[f64]) -> f64 {
    let rows: Vec<Vec<f64>> = pred.iter().map(|&p| vec![p]).collect();
    r_squared(&rows, y, &[1.0])
}

/// The decode grid measured `repeats` times and fitted on each point's median (the line and
/// each batch size's row), again while the line says it is too noisy ([`MIN_R2`],
/// [`DECODE_WORST`]; up to [`DECODE_ROUNDS`] or `repeats` rounds); refused if the rows then
/// explain less than [`MIN_R2`]. Returns (points, the line with the rows' R², its step,
/// rounds).
pub(crate) async fn decode_measured(
    ctx: &ProbeContext,
    o: &CalibrateOptions,
    batches: &[u32],
    t0: Instant,
) -> Result<(Vec<Point>, DecodeFit, StepTime, usize), ProbeError> {
    let least = (o.repeats as usize).max(1);
    let most = DECODE_ROUNDS.max(least);
    let mut rounds = Vec::new();
    loop {
        rounds.push(decode(ctx, o, batches, t0).await?);
        if rounds.len() < least {
            continue;
        }
        let dec = median_rounds(&rounds);
        let mut fit = decode_fit(&dec, batches.len())?;
        // the line judges the grid's noise (a row of two contexts passes through both its
        // points, whatever they are); the rows, the model the twin runs, are judged by R²
        let line: Vec<f64> = dec.iter().map(|p| fit.at(p.x[0], p.x[1])).collect();
        if decode_steady(&dec, &line, fit.r2) || rounds.len() >= most {
            let step = decode_step(&fit, decode_rows(&dec, &fit));
            let dy: Vec<f64> = dec.iter().map(|p| p.y).collect();
            fit.r2 = r_squared_of(&dy, &decode_predicted(&dec, &step));
            let dx: Vec<Vec<f64>> = dec.iter().map(|p| p.x.clone()).collect();
            refuse_noisy("decode", &dx, &dy, fit.r2)?;
            return Ok((dec, fit, step, rounds.len()));
        }
    }
}

/// The prefill fit, given the step's base: TTFT − base = overhead + p·n + q·n²/2/10⁶
/// (relative residuals); a negative attention term q is dropped, a negative overhead is
/// taken as none, and a negative p beside a positive q drops q (all refitted). Returns (overhead, [_, p, q], R²).
pub(crate) fn fit_prefill(pre: &[Point], base: f64) -> Result<(f64, Vec<f64>, f64), ProbeError> {
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

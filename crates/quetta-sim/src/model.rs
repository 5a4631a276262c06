//! A model of a real server, fitted by `quetta-probe calibrate` and run by the
//! iteration-level [`crate::engine::Engine`]: step times, batch and KV limits, prefix cache,
//! fixed overheads. docs/SIMULATOR.md documents every field; `docs/schema/server_model.schema.json`
//! pins the file.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The version of the server-model file this build writes and reads.
pub const SERVER_MODEL_VERSION: u32 = 1;

/// How long one engine step takes, in milliseconds:
/// `base_ms + prefill_step_ms·[P > 0] + prefill_token_ms·P + prefill_pair_mt_ms·Q/10⁶ +
/// cached_token_ms·K + decode_seq_ms·B + multi_seq_ms·[B ≥ 2] + context_kt_ms·C/1000 +
/// context_over_kt_ms·max(0, C − context_knee_tokens)/1000`,
/// where P is the prompt tokens computed in the step, Q the token pairs their attention
/// covers (a chunk of n tokens after c already in cache: n·(c + n/2)), K the cached prompt
/// tokens of sequences whose prefill starts in it, B the sequences decoding one token, and C
/// the tokens in the KV cache of those B sequences (what their attention reads). The knee is
/// where the KV the step reads outgrows the fast memory (a CPU's last-level cache): each
/// context token beyond it costs `context_over_kt_ms` more per thousand.
///
/// Where `decode_by_seqs` has rows, a step of B ≥ 1 decoding sequences takes its decode
/// terms from them instead (see [`SeqsStep`]): `base_ms + decode_seq_ms·B + multi_seq_ms·[B ≥
/// 2]` becomes the row's `step_ms` and the context terms its `context_kt_ms·C/1000`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepTime {
    pub base_ms: f64,
    pub prefill_token_ms: f64,
    #[serde(default)]
    pub prefill_pair_mt_ms: f64,
    pub cached_token_ms: f64,
    pub decode_seq_ms: f64,
    pub context_kt_ms: f64,
    /// Decode context (tokens) beyond which each token costs `context_over_kt_ms` more per
    /// thousand (0 with `context_over_kt_ms` 0: the context cost is linear).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub context_knee_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub context_over_kt_ms: f64,
    /// A step that decodes two sequences or more costs this much more than the line through
    /// `decode_seq_ms` says (llama.cpp on a CPU decodes one sequence alone cheaper).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub multi_seq_ms: f64,
    /// A step that computes prompt tokens costs this much more (a prefill batch's fixed
    /// cost, which the sequences decoding beside it wait out too).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub prefill_step_ms: f64,
    /// The decode step measured at each batch size, in increasing `seqs`: llama.cpp on a
    /// CPU decodes three sequences of 300-token prompts as slowly as four (20.0, 28.0, 40.3,
    /// 44.9 ms a step at 32-token prompts, 21.9, 32.5, 56.6, 54.6 at 300), which no line in
    /// B holds. Empty: the line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode_by_seqs: Vec<SeqsStep>,
}

/// One batch size's decode step: `step_ms + context_kt_ms·C/1000` for `seqs` sequences
/// decoding one token each, C the tokens in their KV cache. Between two rows the step is
/// interpolated in B; beyond the last, the last row plus the line's `decode_seq_ms` per
/// sequence more (and its context terms' growth).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeqsStep {
    pub seqs: u32,
    /// The step at no context, ms (the step's base included).
    pub step_ms: f64,
    /// Per 1,000 tokens of the batch's context, ms.
    pub context_kt_ms: f64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

impl StepTime {
    /// The prompt terms (`prefill_token_ms`, `prefill_pair_mt_ms`, `cached_token_ms`,
    /// `prefill_step_ms`) times `prefill`, the decode terms of the step's sequences
    /// (`base_ms`, `decode_seq_ms`, `multi_seq_ms`, the rows' `step_ms`) times `decode`, and
    /// its decode context terms (`context_kt_ms`, `context_over_kt_ms`, the rows'
    /// `context_kt_ms`) times `context`.
    pub fn scale(&mut self, prefill: f64, decode: f64, context: f64) {
        for v in [
            &mut self.prefill_token_ms,
            &mut self.prefill_pair_mt_ms,
            &mut self.cached_token_ms,
            &mut self.prefill_step_ms,
        ] {
            *v *= prefill;
        }
        for v in [&mut self.base_ms, &mut self.decode_seq_ms, &mut self.multi_seq_ms] {
            *v *= decode;
        }
        for v in [&mut self.context_kt_ms, &mut self.context_over_kt_ms] {
            *v *= context;
        }
        for r in &mut self.decode_by_seqs {
            r.step_ms *= decode;
            r.context_kt_ms *= context;
        }
    }

    /// The line's decode terms for `b` sequences at `context` tokens, base included.
    fn line_decode_ms(&self, b: u64, context: u64) -> f64 {
        self.base_ms
            + self.decode_seq_ms * b as f64
            + self.context_kt_ms * context as f64 / 1e3
            + self.context_over_kt_ms * context.saturating_sub(self.context_knee_tokens) as f64
                / 1e3
            + if b >= 2 { self.multi_seq_ms } else { 0.0 }
    }

    /// The decode terms of a step of `b ≥ 1` sequences at `context` tokens, base included:
    /// from `decode_by_seqs` where it has rows, else the line.
    pub fn decode_ms(&self, b: u64, context: u64) -> f64 {
        let rows = &self.decode_by_seqs;
        let at = |r: &SeqsStep, c: u64| r.step_ms + r.context_kt_ms * c as f64 / 1e3;
        let Some(last) = rows.last() else { return self.line_decode_ms(b, context) };
        if b > u64::from(last.seqs) {
            // the last row at its sequences' share of the context, and the line's growth
            // from there to `b` sequences
            let n = u64::from(last.seqs);
            let c = context * n / b;
            return at(last, c) + self.line_decode_ms(b, context) - self.line_decode_ms(n, c);
        }
        match rows.iter().position(|r| u64::from(r.seqs) >= b) {
            Some(0) | None => at(&rows[0], context),
            Some(i) => {
                let (lo, hi) = (&rows[i - 1], &rows[i]);
                let f = (b - u64::from(lo.seqs)) as f64 / f64::from(hi.seqs - lo.seqs).max(1.0);
                at(lo, context) + (at(hi, context) - at(lo, context)) * f
            }
        }
    }

    /// A lone sequence's decode step at `context` tokens, split in what does not grow with
    /// the context (`base_ms`, `decode_seq_ms`) and what does (the context terms).
    pub fn lone_decode_ms(&self, context: u64) -> (f64, f64) {
        let fixed = self.ms(0, 0.0, 0, 1, 0);
        (fixed, self.ms(0, 0.0, 0, 1, context) - fixed)
    }

    /// The step's duration in milliseconds; `pairs` is Q.
    pub fn ms(&self, prefill: u64, pairs: f64, cached: u64, decode: u64, context: u64) -> f64 {
        let decode_ms = if decode == 0 {
            // a step of prompts alone: its base (and the context of nothing decoding)
            self.line_decode_ms(0, context)
        } else {
            self.decode_ms(decode, context)
        };
        decode_ms
            + self.prefill_token_ms * prefill as f64
            + self.prefill_pair_mt_ms * pairs / 1e6
            + self.cached_token_ms * cached as f64
            + if prefill > 0 { self.prefill_step_ms } else { 0.0 }
    }
}

/// How well a fit explains the probe data it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitQuality {
    /// Measurements the fit used.
    pub points: usize,
    /// Coefficient of determination.
    pub r2: f64,
    /// Root-mean-square residual, ms.
    pub rmse_ms: f64,
    /// The largest |residual| / measured value over the points.
    pub max_rel_residual: f64,
}

/// The fits a model was made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fits {
    /// TTFT of single requests against the prompt tokens computed.
    pub prefill: FitQuality,
    /// Steady inter-token latency against the batch size and its context.
    pub decode: FitQuality,
    /// Requests sent at once: how many started before the first of them ended.
    pub max_seqs_observed: u32,
    /// Requests of that probe.
    pub max_seqs_probe: u32,
}

/// A twin's description of one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerModel {
    pub schema_version: u32,
    /// What was calibrated: the base URL and the served model.
    pub server: String,
    pub model: String,
    /// When the calibration ran (Unix seconds).
    pub calibrated_unix_s: u64,
    pub step: StepTime,
    /// Sequences the server runs at once (its batch slots).
    pub max_seqs: u32,
    /// Tokens the KV cache holds over all running sequences; a sequence that needs a block
    /// more than is free preempts the newest running one (recomputed later).
    pub kv_tokens: u64,
    /// Tokens one step may carry (decode tokens first, then chunks of prompts: chunked
    /// prefill); llama.cpp's `n_batch`, vLLM's `max_num_batched_tokens`.
    pub max_batch_tokens: u32,
    /// Whether a repeated prefix is served from cache.
    pub prefix_cache: bool,
    /// Tokens per prefix-cache block (only whole blocks are reused).
    pub block_tokens: u32,
    /// Tokens the server adds to every prompt it is sent (chat template, default system
    /// prompt, BOS): the twin counts them on top of the prompt's own.
    #[serde(default)]
    pub prompt_extra_tokens: u32,
    /// Of those, the tokens the server serves from its cache in every request: a template
    /// prefix every prompt begins with (llama.cpp reuses its default system prompt from a
    /// slot's previous request); never computed.
    #[serde(default)]
    pub template_cached_tokens: u32,
    /// From the request's arrival at the server to the scheduler seeing it (HTTP, JSON,
    /// tokenisation), ms.
    pub arrival_overhead_ms: f64,
    /// From a token's step ending to its chunk leaving the server, ms.
    pub emit_overhead_ms: f64,
    /// An idle server starts its first step this long after the first request reaches its
    /// scheduler, and requests that reach it meanwhile share that step (llama.cpp put two
    /// prompts sent 20 ms apart into one step), ms.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub gather_ms: f64,
    /// Tokens each stream of the calibration's decode probe generated. `quetta-probe
    /// recheck` decodes as many unless told otherwise: a request's first gaps after its
    /// prefill are slower than the rest, so its TPOT depends on its length (absent: a file
    /// from before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_probe_tokens: Option<u32>,
    pub fits: Fits,
    /// The last `quetta-probe recheck` that rescaled the calibrated step times to the
    /// server's speed of that moment (absent: the calibration's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rechecked: Option<Recheck>,
}

/// A rescale of a calibrated model to its server's present speed (`quetta-probe recheck`):
/// the prompt terms of [`StepTime`] (`prefill_token_ms`, `prefill_pair_mt_ms`,
/// `cached_token_ms`, `prefill_step_ms`) were multiplied by `prefill_factor`, the decode
/// terms of its sequences (`base_ms`, `decode_seq_ms`, `multi_seq_ms`, each
/// `decode_by_seqs` row's `step_ms`) by `decode_factor` and its decode context terms
/// (`context_kt_ms`, `context_over_kt_ms`, each row's `context_kt_ms`) by `context_factor`;
/// all against the calibration, over every recheck since.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recheck {
    /// When the last recheck ran (Unix seconds).
    pub unix_s: u64,
    /// Requests that recheck measured.
    pub requests: u32,
    pub prefill_factor: f64,
    pub decode_factor: f64,
    /// Absent (a file of a recheck that took one decode factor): `decode_factor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_factor: Option<f64>,
}

impl Recheck {
    /// The decode context terms' factor against the calibration.
    pub fn context(&self) -> f64 {
        self.context_factor.unwrap_or(self.decode_factor)
    }
}

/// A server model that cannot be read or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: line {line}, column {column}: {message}")]
    Parse { path: String, line: usize, column: usize, message: String },
    #[error("{path}: field {field}: {message}")]
    Field { path: String, field: &'static str, message: String },
    /// A what-if change that makes no model (`--speed 0`).
    #[error("{path}: what-if {field}: {message}")]
    WhatIf { path: String, field: &'static str, message: String },
}

/// What-if changes to a model (`--max-seqs`, `--kv-tokens`, `--speed`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WhatIf {
    pub max_seqs: Option<u32>,
    pub kv_tokens: Option<u64>,
    /// Steps take `1 / speed` of their modelled time (2.0: twice as fast).
    pub speed: Option<f64>,
}

impl ServerModel {
    /// Read and check a model file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ModelError::Read { path: p.clone(), source })?;
        let m: Self = serde_json::from_str(&text).map_err(|e| ModelError::Parse {
            path: p.clone(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        m.check().map_err(|(field, message)| ModelError::Field { path: p, field, message })?;
        Ok(m)
    }

    /// Read and check a model file, then apply the what-if changes (the one way the
    /// binaries and embedders open a twin's model).
    pub fn load_with(path: &Path, what_if: WhatIf) -> Result<Self, ModelError> {
        Self::load(path)?.with(what_if).map_err(|(field, message)| ModelError::WhatIf {
            path: path.display().to_string(),
            field,
            message,
        })
    }

    /// The first field that would make the engine meaningless, and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.schema_version != SERVER_MODEL_VERSION {
            return Err((
                "schema_version",
                format!("{} (this build reads {SERVER_MODEL_VERSION})", self.schema_version),
            ));
        }
        let s = &self.step;
        for (f, v) in [
            ("step.base_ms", s.base_ms),
            ("step.prefill_token_ms", s.prefill_token_ms),
            ("step.prefill_pair_mt_ms", s.prefill_pair_mt_ms),
            ("step.cached_token_ms", s.cached_token_ms),
            ("step.decode_seq_ms", s.decode_seq_ms),
            ("step.context_kt_ms", s.context_kt_ms),
            ("step.context_over_kt_ms", s.context_over_kt_ms),
            ("step.multi_seq_ms", s.multi_seq_ms),
            ("step.prefill_step_ms", s.prefill_step_ms),
            ("arrival_overhead_ms", self.arrival_overhead_ms),
            ("emit_overhead_ms", self.emit_overhead_ms),
            ("gather_ms", self.gather_ms),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err((f, format!("{v} is not a time of 0 ms or more")));
            }
        }
        let mut seqs = 0;
        for r in &s.decode_by_seqs {
            if r.seqs <= seqs {
                return Err((
                    "step.decode_by_seqs",
                    format!("seqs {} after {seqs}: rows go up in batch size from 1", r.seqs),
                ));
            }
            seqs = r.seqs;
            // a step takes time; its context slope may be 0
            if !(r.step_ms.is_finite() && r.step_ms > 0.0) {
                return Err((
                    "step.decode_by_seqs",
                    format!(
                        "step_ms {} at {} sequences is not a time above 0 ms",
                        r.step_ms, r.seqs
                    ),
                ));
            }
            if !(r.context_kt_ms.is_finite() && r.context_kt_ms >= 0.0) {
                return Err((
                    "step.decode_by_seqs",
                    format!(
                        "context_kt_ms {} at {} sequences is not a time of 0 ms or more",
                        r.context_kt_ms, r.seqs
                    ),
                ));
            }
        }
        if s.ms(1, 0.0, 0, 0, 0) <= 0.0 || s.ms(0, 0.0, 0, 1, 0) <= 0.0 {
            return Err(("step", "a step that takes no time would run forever".into()));
        }
        if self.max_seqs == 0 {
            return Err(("max_seqs", "must be at least 1".into()));
        }
        if self.max_batch_tokens == 0 {
            return Err(("max_batch_tokens", "must be at least 1".into()));
        }
        if self.block_tokens == 0 {
            return Err(("block_tokens", "must be at least 1".into()));
        }
        if self.template_cached_tokens > self.prompt_extra_tokens {
            return Err((
                "template_cached_tokens",
                format!(
                    "{} is more than the {} tokens the server adds (prompt_extra_tokens)",
                    self.template_cached_tokens, self.prompt_extra_tokens
                ),
            ));
        }
        if self.kv_tokens < u64::from(self.max_batch_tokens.min(16)) {
            return Err(("kv_tokens", format!("{} tokens hold no request", self.kv_tokens)));
        }
        Ok(())
    }

    /// This model with the what-if changes applied.
    pub fn with(mut self, w: WhatIf) -> Result<Self, (&'static str, String)> {
        if let Some(n) = w.max_seqs {
            self.max_seqs = n;
        }
        if let Some(k) = w.kv_tokens {
            self.kv_tokens = k;
        }
        if let Some(x) = w.speed {
            if !(x.is_finite() && x > 0.0) {
                return Err(("speed", format!("{x} is not a positive factor")));
            }
            self.step.scale(1.0 / x, 1.0 / x, 1.0 / x);
        }
        self.check()?;
        Ok(self)
    }

    /// This model at its server's present speed: prompt terms times `prefill`, the decode
    /// terms of its sequences times `decode`, its decode context terms times `context` (see
    /// [`Recheck`]); `rechecked` records the factors against the calibration, `requests` and
    /// `unix_s` the recheck.
    pub fn rescaled(
        mut self,
        prefill: f64,
        decode: f64,
        context: f64,
        requests: u32,
        unix_s: u64,
    ) -> Result<Self, (&'static str, String)> {
        for (f, x) in
            [("prefill_factor", prefill), ("decode_factor", decode), ("context_factor", context)]
        {
            if !(x.is_finite() && x > 0.0) {
                return Err((f, format!("{x} is not a positive factor")));
            }
        }
        self.step.scale(prefill, decode, context);
        let (p0, d0, c0) = self
            .rechecked
            .map_or((1.0, 1.0, 1.0), |r| (r.prefill_factor, r.decode_factor, r.context()));
        self.rechecked = Some(Recheck {
            unix_s,
            requests,
            prefill_factor: p0 * prefill,
            decode_factor: d0 * decode,
            context_factor: Some(c0 * context),
        });
        self.check()?;
        Ok(self)
    }

    /// The file's JSON (pretty).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a server model serialises") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rescaling splits the decode terms: the sequences' terms by one factor, the context
    /// terms by another; a second rescale multiplies onto the first, and a file of a recheck
    /// that wrote no context factor reads it as its decode factor.
    #[test]
    fn a_rescale_keeps_the_decode_context_terms_apart() {
        let mut m = crate::engine::tests::model(4, 8192);
        m.step.context_kt_ms = 10.0;
        m.step.multi_seq_ms = 2.0;
        let r = m.clone().rescaled(2.0, 0.5, 1.0, 6, 7).unwrap();
        assert_eq!(
            (r.step.prefill_token_ms, r.step.base_ms, r.step.decode_seq_ms, r.step.multi_seq_ms),
            (0.2, 5.0, 0.5, 1.0)
        );
        assert_eq!(r.step.context_kt_ms, 10.0);
        // one stream at 1,000 tokens of context: 5 + 0.5 + 10
        assert_eq!(r.step.lone_decode_ms(1_000), (5.5, 10.0));
        let r2 = r.rescaled(1.0, 2.0, 0.5, 6, 8).unwrap();
        let re = r2.rechecked.unwrap();
        assert_eq!((re.prefill_factor, re.decode_factor, re.context()), (2.0, 1.0, 0.5));
        assert_eq!(r2.step.context_kt_ms, 5.0);
        assert!(m.clone().rescaled(1.0, 1.0, 0.0, 6, 7).is_err(), "a context factor of 0");
        let old: Recheck = serde_json::from_str(
            r#"{"unix_s": 1, "requests": 6, "prefill_factor": 1.1, "decode_factor": 0.9}"#,
        )
        .unwrap();
        assert_eq!(old.context(), 0.9);
    }

    /// A step's decode terms come from its batch size's row: a row's own, between two rows
    /// the straight line between them, beyond the last the line's growth from there; the
    /// prompt terms add as before; rescaling scales the rows; rows out of order are refused.
    #[test]
    fn a_step_takes_its_decode_terms_from_its_batch_size_row() {
        let mut m = crate::engine::tests::model(8, 8192);
        // the line: 10 + 1·B + 2 ms per 1,000 tokens of context
        m.step.base_ms = 10.0;
        m.step.decode_seq_ms = 1.0;
        m.step.context_kt_ms = 2.0;
        let line = m.step.ms(0, 0.0, 0, 3, 1_000);
        assert!((line - 15.0).abs() < 1e-9, "{line}");
        m.step.decode_by_seqs = vec![
            SeqsStep { seqs: 1, step_ms: 12.0, context_kt_ms: 3.0 },
            SeqsStep { seqs: 2, step_ms: 14.0, context_kt_ms: 4.0 },
            SeqsStep { seqs: 4, step_ms: 30.0, context_kt_ms: 8.0 },
        ];
        let at = |m: &ServerModel, b: u64, c: u64| m.step.ms(0, 0.0, 0, b, c);
        assert!((at(&m, 1, 1_000) - 15.0).abs() < 1e-9); // 12 + 3
        assert!((at(&m, 2, 2_000) - 22.0).abs() < 1e-9); // 14 + 8
                                                         // 3: midway between 2 (14 + 4·1.5 = 20) and 4 (30 + 8·1.5 = 42) at 1,500 tokens
        assert!((at(&m, 3, 1_500) - 31.0).abs() < 1e-9, "{}", at(&m, 3, 1_500));
        // 6 at 3,000: the row of 4 at its share, 2,000 tokens (46), and the line's growth
        // from 4 at 2,000 (18) to 6 at 3,000 (22)
        assert!((at(&m, 6, 3_000) - 50.0).abs() < 1e-9, "{}", at(&m, 6, 3_000));
        // a step of prompts alone: the base and the prompt terms, no row
        assert!((m.step.ms(100, 0.0, 0, 0, 0) - (10.0 + 0.1 * 100.0)).abs() < 1e-9);
        // prompt tokens beside two decodes: the row and the prompt terms
        assert!((m.step.ms(100, 0.0, 0, 2, 0) - (14.0 + 10.0)).abs() < 1e-9);
        let r = m.clone().rescaled(1.0, 0.5, 2.0, 6, 7).unwrap();
        assert_eq!(
            r.step.decode_by_seqs[2],
            SeqsStep { seqs: 4, step_ms: 15.0, context_kt_ms: 16.0 }
        );
        let mut bad = m.clone();
        bad.step.decode_by_seqs.swap(0, 1);
        assert_eq!(bad.check().unwrap_err().0, "step.decode_by_seqs");
        // the file holds the rows and reads them back
        let back: ServerModel = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(back, m);
    }
}

//! `<probe>.meta.json`: what a probe ran with, against which server, and what it found,
//! each probe's parameters and summary a typed struct (`docs/schema/probe_meta.schema.json`,
//! [`META_SCHEMA`]).
//!
//! A figure a probe could not measure (a request that gave no token, a server that keeps no
//! TTFT histogram) is `null`, never a number made up; a fit or count a probe could not make
//! at all is a summary of one field, `error`, in words.

use std::collections::BTreeMap;

use quetta_sim::model::{ServerModel, StepTime};
use serde::{Deserialize, Serialize};

/// The meta.json schema version.
pub const META_SCHEMA_VERSION: u32 = 1;

/// The JSON Schema of every `<probe>.meta.json`.
pub const META_SCHEMA: &str = include_str!("../../../docs/schema/probe_meta.schema.json");

/// One `<probe>.meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeMeta {
    pub schema_version: u32,
    /// `probe`, `parameters` and `summary`.
    #[serde(flatten)]
    pub findings: Findings,
    pub server: MetaServer,
    /// The served model the probe's requests named.
    pub model: String,
    pub tool: String,
    pub tool_version: String,
    pub time_unix_s: u64,
    pub host: MetaHost,
}

/// The server a probe ran against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaServer {
    pub base_url: String,
    /// What its metrics say it is (`vllm`, `llama.cpp`, …), `unknown` without metrics.
    pub kind: String,
}

/// The machine the probe ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaHost {
    pub name: String,
    pub os: String,
    pub arch: String,
    pub cpus: usize,
}

/// A probe's parameters and summary, by probe (`probe` names it in the file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "probe", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Findings {
    Ttft { parameters: TtftParameters, summary: TtftSummary },
    DecodeGrid { parameters: DecodeGridParameters, summary: DecodeGridSummary },
    Herd { parameters: HerdParameters, summary: HerdSummary },
    KvCapacity { parameters: KvCapacityParameters, summary: KvCapacitySummary },
    StageSplit { parameters: StageSplitParameters, summary: StageSplitSummary },
    Calibrate { parameters: CalibrateOptions, summary: Box<CalibrateSummary> },
    Recheck { parameters: RecheckOptions, summary: RecheckSummary },
}

impl Findings {
    /// The probe's name: its files are `<probe>.csv` and `<probe>.meta.json`.
    pub fn probe(&self) -> &'static str {
        match self {
            Self::Ttft { .. } => "ttft",
            Self::DecodeGrid { .. } => "decode-grid",
            Self::Herd { .. } => "herd",
            Self::KvCapacity { .. } => "kv-capacity",
            Self::StageSplit { .. } => "stage-split",
            Self::Calibrate { .. } => "calibrate",
            Self::Recheck { .. } => "recheck",
        }
    }

    /// The summary as pretty JSON, as the file holds it.
    pub fn summary_json(&self) -> String {
        serde_json::to_value(self)
            .and_then(|v| serde_json::to_string_pretty(&v["summary"]))
            .unwrap_or_default()
    }
}

/// A finite figure, or `None` (`null` in the file) where it could not be measured.
pub(crate) fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// `ttft`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtftParameters {
    pub new_tokens: Vec<u32>,
    pub cached_tokens: Vec<u32>,
    pub repeats: u32,
}

/// `ttft`'s fit, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TtftSummary {
    Fit(TtftFit),
    Failed { error: String },
}

/// `ttft_ms = floor_ms + per_new_token_ms · new + per_cached_token_ms · cached`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TtftFit {
    /// The fitted formula in words.
    pub model: String,
    pub floor_ms: f64,
    pub per_new_token_ms: f64,
    pub per_cached_token_ms: f64,
    pub r2: f64,
    pub samples: usize,
    /// `usage` where the server reports its cached tokens, else what the probe planned.
    pub cached_tokens_from: String,
}

/// `decode-grid`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeGridParameters {
    pub batches: Vec<usize>,
    pub contexts: Vec<u32>,
    pub output_tokens: u32,
}

/// `decode-grid`'s cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeGridSummary {
    pub cells: Vec<GridCell>,
}

/// One cell of the decode grid: the median of its streams' median gaps (`null` when no
/// gap fell inside the window where all decoded).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GridCell {
    pub batch: usize,
    pub context: u32,
    pub itl_ms: Option<f64>,
}

/// `herd`'s parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HerdParameters {
    pub n: usize,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// `herd`'s TTFTs: the client's (over the requests that gave a token) and the server's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HerdSummary {
    pub client_ttft_mean_ms: Option<f64>,
    pub client_ttft_p50_ms: Option<f64>,
    pub client_ttft_max_ms: Option<f64>,
    pub server_ttft_mean_ms: Option<f64>,
    /// Where `server_ttft_mean_ms` comes from, or why it is `null`.
    pub server_ttft_from: String,
}

/// `kv-capacity`'s parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvCapacityParameters {
    pub prompts: u32,
    pub prompt_tokens: u32,
}

/// `kv-capacity`'s pool, or why it could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KvCapacitySummary {
    Counted {
        hits_before_first_miss: u32,
        usable_kv_tokens: u64,
        /// Every probe hit: the pool is at least this.
        lower_bound: bool,
    },
    Failed {
        error: String,
    },
}

/// `stage-split`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageSplitParameters {
    pub n: u32,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub metrics_url: String,
}

/// `stage-split`'s stages (queue, prefill, ttft, decode, e2e).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSplitSummary {
    /// The server's kind, from its metrics.
    pub server: String,
    pub stages: BTreeMap<String, StageTimes>,
}

/// One stage's mean per request, by the server's metrics and by the client.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageTimes {
    pub server_ms: Option<f64>,
    pub client_ms: Option<f64>,
}

/// `calibrate`'s fit (the model file holds the same figures; this adds the probes' own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrateSummary {
    pub max_seqs: u32,
    pub seqs_probe: u32,
    pub step: StepTime,
    pub arrival_overhead_ms: f64,
    pub gather_ms: f64,
    /// The mixed-step probe: each prefill step's cost beyond the fits.
    pub mixed_step_extra_ms: Vec<f64>,
    pub gather_pairs: Vec<GatherPair>,
    pub prefix_cache: bool,
    pub prompt_extra_tokens: u32,
    pub template_cached_tokens: u32,
    pub prefill_r2: f64,
    pub decode_r2: f64,
    /// Times the decode grid was measured.
    pub decode_rounds: usize,
}

/// `recheck`'s factors against the model given, and its doubts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecheckSummary {
    pub prefill_factor: f64,
    /// The factor of the decode terms of the step's sequences.
    pub decode_factor: f64,
    /// The factor of the decode context terms.
    pub context_factor: f64,
    /// Whether the two decode factors were told apart (else both are the median ratio).
    pub context_apart: bool,
    /// Why they were not (absent when they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_factor_why: Option<String>,
    /// The lowest and highest ratio of one request.
    pub prefill_range: (f64, f64),
    pub decode_range: (f64, f64),
    pub warnings: Vec<String>,
}

/// What `calibrate` probes (the `parameters` of calibrate.meta.json).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrateOptions {
    /// The longest prompt + output one sequence may hold (the server's context per slot).
    pub max_context: u32,
    /// Prompt lengths (words) of the prefill probe.
    pub prefill_lengths: Vec<u32>,
    /// Requests of each prompt length, and rounds of the decode grid at least; the fits take
    /// each length's and each grid point's median (three: one slow request does not pull it).
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
            decode_contexts: vec![32, 256, 1024],
            decode_tokens: 32,
            seqs_probe: 16,
            max_batch_tokens: 2048,
            block_tokens: 16,
        }
    }
}

/// One pair of the gather probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GatherPair {
    pub delay_ms: u64,
    /// The second prompt's first token after the first's, ms.
    pub apart_ms: f64,
    /// Whether they came from one step (within a quarter of the first's TTFT).
    pub shared: bool,
}

/// What `recheck` sends (the `parameters` of recheck.meta.json).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

impl RecheckOptions {
    /// The defaults for rechecking `model`: its requests decode as many tokens as the
    /// calibration's decode probe did (`decode_probe_tokens`, where the file says), since a
    /// request's first gaps are its slowest and another length biases the decode factor.
    pub fn for_model(model: &ServerModel) -> Self {
        let d = Self::default();
        Self { decode_tokens: model.decode_probe_tokens.unwrap_or(d.decode_tokens), ..d }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn findings() -> Vec<Findings> {
        let step = StepTime {
            base_ms: 6.5,
            prefill_token_ms: 0.25,
            prefill_pair_mt_ms: 0.0,
            cached_token_ms: 0.0,
            decode_seq_ms: 3.0,
            context_kt_ms: 1.5,
            context_knee_tokens: 0,
            context_over_kt_ms: 0.0,
            multi_seq_ms: 2.0,
            decode_by_seqs: Vec::new(),
            prefill_step_ms: 0.0,
        };
        let stages = [("ttft", Some(12.5), Some(13.0)), ("queue", None, None)]
            .into_iter()
            .map(|(k, s, c)| (k.to_owned(), StageTimes { server_ms: s, client_ms: c }))
            .collect();
        vec![
            Findings::Ttft {
                parameters: TtftParameters {
                    new_tokens: vec![32, 64],
                    cached_tokens: vec![0, 256],
                    repeats: 2,
                },
                summary: TtftSummary::Fit(TtftFit {
                    model: "ttft_ms = …".into(),
                    floor_ms: 4.5,
                    per_new_token_ms: 0.5,
                    per_cached_token_ms: 0.0,
                    r2: 0.75,
                    samples: 8,
                    cached_tokens_from: "usage".into(),
                }),
            },
            Findings::Ttft {
                parameters: TtftParameters {
                    new_tokens: vec![32],
                    cached_tokens: vec![0],
                    repeats: 1,
                },
                summary: TtftSummary::Failed { error: "the fit is singular".into() },
            },
            Findings::DecodeGrid {
                parameters: DecodeGridParameters {
                    batches: vec![1, 4],
                    contexts: vec![32],
                    output_tokens: 16,
                },
                summary: DecodeGridSummary {
                    cells: vec![
                        GridCell { batch: 1, context: 32, itl_ms: Some(10.5) },
                        GridCell { batch: 4, context: 32, itl_ms: None },
                    ],
                },
            },
            Findings::Herd {
                parameters: HerdParameters { n: 4, prompt_tokens: 64, output_tokens: 8 },
                summary: HerdSummary {
                    client_ttft_mean_ms: Some(20.5),
                    client_ttft_p50_ms: Some(20.0),
                    client_ttft_max_ms: Some(22.0),
                    server_ttft_mean_ms: None,
                    server_ttft_from: "not available".into(),
                },
            },
            Findings::KvCapacity {
                parameters: KvCapacityParameters { prompts: 8, prompt_tokens: 256 },
                summary: KvCapacitySummary::Counted {
                    hits_before_first_miss: 3,
                    usable_kv_tokens: 768,
                    lower_bound: false,
                },
            },
            Findings::KvCapacity {
                parameters: KvCapacityParameters { prompts: 8, prompt_tokens: 256 },
                summary: KvCapacitySummary::Failed { error: "no cached tokens".into() },
            },
            Findings::StageSplit {
                parameters: StageSplitParameters {
                    n: 3,
                    prompt_tokens: 64,
                    output_tokens: 8,
                    metrics_url: "http://127.0.0.1:1/metrics".into(),
                },
                summary: StageSplitSummary { server: "llama.cpp".into(), stages },
            },
            Findings::Calibrate {
                parameters: CalibrateOptions::default(),
                summary: Box::new(CalibrateSummary {
                    max_seqs: 4,
                    seqs_probe: 16,
                    step,
                    arrival_overhead_ms: 1.0,
                    gather_ms: 0.0,
                    mixed_step_extra_ms: vec![-2.5, 4.0],
                    gather_pairs: vec![GatherPair { delay_ms: 10, apart_ms: 3.5, shared: true }],
                    prefix_cache: true,
                    prompt_extra_tokens: 9,
                    template_cached_tokens: 0,
                    prefill_r2: 0.999,
                    decode_r2: 0.98,
                    decode_rounds: 3,
                }),
            },
            Findings::Recheck {
                parameters: RecheckOptions::default(),
                summary: RecheckSummary {
                    prefill_factor: 1.25,
                    decode_factor: 0.75,
                    context_factor: 1.0,
                    context_apart: true,
                    one_factor_why: None,
                    prefill_range: (1.0, 1.5),
                    decode_range: (0.5, 1.0),
                    warnings: vec!["decode: …".into()],
                },
            },
            Findings::Recheck {
                parameters: RecheckOptions::default(),
                summary: RecheckSummary {
                    prefill_factor: 1.25,
                    decode_factor: 0.75,
                    context_factor: 0.75,
                    context_apart: false,
                    one_factor_why: Some("the requests were of one prompt length".into()),
                    prefill_range: (1.0, 1.5),
                    decode_range: (0.5, 1.0),
                    warnings: Vec::new(),
                },
            },
        ]
    }

    fn meta_of(findings: Findings) -> ProbeMeta {
        ProbeMeta {
            schema_version: META_SCHEMA_VERSION,
            findings,
            server: MetaServer { base_url: "http://127.0.0.1:1".into(), kind: "vllm".into() },
            model: "m".into(),
            tool: "quetta-probe".into(),
            tool_version: "0.1.0".into(),
            time_unix_s: 1,
            host: MetaHost { name: "h".into(), os: "linux".into(), arch: "x86_64".into(), cpus: 2 },
        }
    }

    /// Every probe's meta.json, with figures and without (`null`, `error`), is valid against
    /// the schema and reads back as what was written; a summary of another probe is not.
    #[test]
    fn every_probes_meta_matches_its_schema_and_reads_back() {
        let schema: serde_json::Value = serde_json::from_str(META_SCHEMA).unwrap();
        let val = jsonschema::validator_for(&schema).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for f in findings() {
            seen.insert(f.probe());
            let meta = meta_of(f.clone());
            let v = serde_json::to_value(&meta).unwrap();
            let errs: Vec<String> = val.iter_errors(&v).map(|e| e.to_string()).collect();
            assert!(errs.is_empty(), "{}: {errs:?}\n{v:#}", f.probe());
            assert_eq!(v["probe"], f.probe());
            let printed: serde_json::Value = serde_json::from_str(&f.summary_json()).unwrap();
            assert_eq!(printed, v["summary"], "{}", f.probe());
            let back: ProbeMeta = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(back, meta);
            // the probe's name decides which summary is valid
            let mut wrong = v.clone();
            wrong["probe"] = if f.probe() == "herd" { "ttft" } else { "herd" }.into();
            assert!(!val.is_valid(&wrong), "{} as another probe", f.probe());
        }
        assert_eq!(seen.len(), 7, "{seen:?}");
        // a recheck's file says why it took one decode factor exactly when it did
        for (apart, why) in [(false, None), (true, Some("a reason"))] {
            let mut f = findings().pop().expect("a recheck last");
            let Findings::Recheck { summary, .. } = &mut f else { panic!("a recheck last") };
            summary.context_apart = apart;
            summary.one_factor_why = why.map(Into::into);
            let v = serde_json::to_value(meta_of(f)).unwrap();
            assert!(!val.is_valid(&v), "context_apart {apart} with one_factor_why {why:?}");
        }
    }
}

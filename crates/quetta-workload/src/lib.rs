//! `quetta-workload`: what a benchmark sends and when.
//!
//! Pure and seeded: no async runtime, no network, no terminal. The same seed gives the same
//! schedule and the same prompts on any machine (ChaCha8 streams, explicit per-request seeds).
//! Every file error names the file, the line and the field.
//!
//! # Guide
//!
//! A workload has two halves: **what** to send, a [`Workload`] that yields a
//! [`PlannedRequest`] (prompt, planned input length, `max_tokens`) for each index, and
//! **when**, a list of intended send offsets from an [`arrival::Schedule`] (or a trace's own
//! timestamps). The load generator (`quetta-loadgen`) pairs them; nothing here sends.
//!
//! | what | module |
//! |---|---|
//! | synthetic prompts of a given length (words, or exact with a tokenizer) | [`synthetic`] |
//! | real tokenizers, exact-length text, token-id prompts | [`tokenizer`] |
//! | ShareGPT, JSONL and text datasets with length filters | [`dataset`] |
//! | Mooncake, Azure and any CSV/JSONL traces; prefix-sharing prompts from `hash_ids` | [`trace`] |
//! | lengths and gaps fitted from a trace, sampled back | [`distribution`] |
//! | constant, Poisson, gamma, ramp and burst arrivals | [`arrival`] |
//! | multi-turn sessions: ShareGPT, tool-call and question-set conversations, synthesis | [`session`] |
//! | named and user (TOML) profiles | [`profiles`] |
//! | all of the above as data, built in one call for a run or a dry run | [`spec`] |
//!
//! ```
//! use quetta_workload::arrival::{Arrival, Schedule};
//! use quetta_workload::synthetic::SyntheticSpec;
//! use quetta_workload::Workload;
//!
//! // 10 requests per second, Poisson, seed 7: the first five intended send times.
//! let times = Schedule::new(Arrival::Poisson, 10.0, 7).unwrap().take_n(5);
//! assert_eq!(times[0].as_secs_f64(), 0.0);
//! assert!(times.windows(2).all(|w| w[0] <= w[1]));
//!
//! // 256-token prompts (words, without a tokenizer), 128 tokens out.
//! let mut w = SyntheticSpec {
//!     input_len: 256, input_stddev: 0.0, output_len: 128, output_stddev: 0.0, chat: true, seed: 7,
//!     ..SyntheticSpec::default()
//! };
//! let first = w.request(0).unwrap();
//! assert_eq!((first.input_tokens, first.max_tokens), (256, 128));
//! assert!(!first.input_tokens_exact, "words only estimate tokens");
//! // the same seed gives the same request, anywhere
//! assert_eq!(w.request(0).unwrap(), first);
//! ```
//!
//! For exact lengths, load a tokenizer ([`tokenizer::Tokenizer::resolve`]) and use
//! [`synthetic::ExactSynthetic`]; `examples/plan.rs` builds a workload from a named profile
//! and prints its first requests with their intended send times.

pub mod arrival;
pub mod audio;
pub mod batch;
pub mod dataset;
pub mod distribution;
pub mod note;
pub mod prefetch;
pub mod profiles;
pub mod session;
pub mod spec;
pub mod synthetic;
pub mod tokenizer;
pub mod trace;
pub mod vision;

use quetta_engine::Prompt;

/// One request as planned by a workload, before the load generator times it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRequest {
    /// Index of the request in the workload (0-based).
    pub index: u64,
    pub prompt: Prompt,
    /// The number of prompt tokens the workload intended.
    pub input_tokens: u32,
    /// Whether `input_tokens` is exact (counted with the server's tokenizer) or an estimate.
    pub input_tokens_exact: bool,
    /// `max_tokens` to request.
    pub max_tokens: u32,
}

/// A source of planned requests, asked for them by index: in order by one process, and a
/// shard of a plan split across processes asks only for its own indices.
pub trait Workload: Send {
    /// The request with this index, or `None` when the workload is exhausted.
    fn request(&mut self, index: u64) -> Option<PlannedRequest>;

    /// Why `request` returned `None`, when that was an error (a prompt that could not be
    /// built) rather than the workload's end: the runner reports it and the run fails.
    fn error(&self) -> Option<WorkloadError> {
        None
    }
}

impl<W: Workload + ?Sized> Workload for Box<W> {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        (**self).request(index)
    }

    fn error(&self) -> Option<WorkloadError> {
        (**self).error()
    }
}

/// A workload input was invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// A parameter is out of range.
    #[error("invalid {name}: {reason}")]
    Invalid { name: &'static str, reason: String },
    /// A file could not be read.
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    /// A row of a file is malformed.
    #[error("{path}:{line}: field {field}: {reason}")]
    Parse { path: String, line: usize, field: String, reason: String },
    /// A tokenizer could not be loaded.
    #[error("tokenizer {source_name}: {reason}")]
    Tokenizer { source_name: String, reason: String },
    /// One request of a workload could not be built.
    #[error("request {index}: {source}")]
    Request { index: u64, source: Box<WorkloadError> },
}

/// A parse error naming the file, the line and the field.
pub(crate) fn parse_err(
    path: &std::path::Path,
    line: usize,
    field: &str,
    reason: impl Into<String>,
) -> WorkloadError {
    WorkloadError::Parse {
        path: path.display().to_string(),
        line,
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// Read a whole file as bytes, naming it in the error.
pub(crate) fn read_bytes(path: &std::path::Path) -> Result<Vec<u8>, WorkloadError> {
    std::fs::read(path)
        .map_err(|e| WorkloadError::Io { path: path.display().to_string(), reason: e.to_string() })
}

/// Read a whole file, naming it in the error.
pub(crate) fn read(path: &std::path::Path) -> Result<String, WorkloadError> {
    std::fs::read_to_string(path)
        .map_err(|e| WorkloadError::Io { path: path.display().to_string(), reason: e.to_string() })
}

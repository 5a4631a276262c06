//! `quetta-workload`: what a benchmark sends and when.
//!
//! Pure and seeded: no async runtime, no network, no terminal. The same seed gives the same
//! schedule and the same prompts on any machine (ChaCha8 streams, explicit per-request seeds).
//!
//! - [`arrival`]: intended send times of an open-loop run (constant, Poisson, gamma).
//! - [`synthetic`]: prompts of a requested length with a requested output length.
//!
//! A workload yields [`PlannedRequest`]s; the load generator decides when to send them.

pub mod arrival;
pub mod dataset;
pub mod distribution;
pub mod profiles;
pub mod synthetic;
pub mod tokenizer;
pub mod trace;

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

/// A source of planned requests. `next` is called once per request, in order.
pub trait Workload: Send {
    /// The request with this index, or `None` when the workload is exhausted.
    fn request(&mut self, index: u64) -> Option<PlannedRequest>;
}

impl<W: Workload + ?Sized> Workload for Box<W> {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        (**self).request(index)
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

/// Read a whole file, naming it in the error.
pub(crate) fn read(path: &std::path::Path) -> Result<String, WorkloadError> {
    std::fs::read_to_string(path)
        .map_err(|e| WorkloadError::Io { path: path.display().to_string(), reason: e.to_string() })
}

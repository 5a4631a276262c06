//! Why a run could not start.

/// A run could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("invalid run configuration: {0}")]
    Config(String),
    #[error("the workload has no request {0}")]
    WorkloadExhausted(u64),
    #[error("before the measured phase: {0}")]
    BeforeMeasured(String),
}

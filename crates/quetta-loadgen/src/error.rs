//! Why a run could not start.

use quetta_engine::setting::Setting;

use crate::shard::ShardError;

/// A run could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// One setting's value cannot be used (named as the process names settings).
    #[error("{setting}: {reason}")]
    Invalid { setting: Setting, reason: String },
    /// Nothing bounds the run: neither a number of `what` (requests, sessions) nor a
    /// duration.
    #[error("give a number of {what} or a duration")]
    Unbounded { what: &'static str },
    /// The load cannot be split across the shards.
    #[error(transparent)]
    Split(#[from] ShardError),
    #[error("the workload has no request {0}")]
    WorkloadExhausted(u64),
    #[error("before the measured phase: {0}")]
    BeforeMeasured(String),
}

impl RunError {
    pub(crate) fn invalid(setting: Setting, reason: impl Into<String>) -> Self {
        Self::Invalid { setting, reason: reason.into() }
    }
}

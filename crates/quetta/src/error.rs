//! The facade's one error type: every layer's errors, each with its own words.

/// A benchmark, sweep, search or comparison could not be done.
///
/// ```
/// use quetta::{Benchmark, Error, Target};
/// let mut b = Benchmark::new(Target::simulator(Default::default()));
/// b.percentiles = vec![150.0];
/// match b.run_blocking() {
///     Err(Error::Config(m)) => assert!(m.contains("between 0 and 100")),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The settings contradict each other or are out of range.
    #[error("{0}")]
    Config(String),
    /// The workload could not be built (a file, a line, a field).
    #[error(transparent)]
    Workload(#[from] quetta_workload::WorkloadError),
    /// The target could not be reached or configured (in the server's own words when it
    /// answered).
    #[error("{0}")]
    Target(String),
    /// The run could not start or its hook failed.
    #[error(transparent)]
    Run(#[from] quetta_loadgen::RunError),
    /// A results directory could not be written or read.
    #[error(transparent)]
    Report(#[from] quetta_report::ReportError),
    /// A twin's server model could not be read or changed as asked.
    #[error(transparent)]
    ServerModel(#[from] quetta_sim::model::ModelError),
    /// An SLO could not be parsed.
    #[error(transparent)]
    Slo(#[from] quetta_metrics::SloError),
}

impl Error {
    pub(crate) fn config(m: impl Into<String>) -> Self {
        Self::Config(m.into())
    }
}

/// The facade's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

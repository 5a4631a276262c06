//! The facade's one error type: every layer's errors, each with its own words.

use quetta_engine::setting::Setting;

/// A benchmark, sweep, search or comparison could not be done. Settings are named as
/// values ([`Setting`]); their words are the process's ([`quetta_engine::setting::name_settings`]).
///
/// ```
/// use quetta::{Benchmark, Error, Target};
/// use quetta::engine::setting::Setting;
/// let mut b = Benchmark::new(Target::simulator(Default::default()));
/// b.percentiles = vec![150.0];
/// match b.run_blocking() {
///     Err(Error::Invalid { setting: Setting::Percentiles, reason }) => {
///         assert!(reason.contains("between 0 and 100"))
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One setting's value cannot be used (out of range, malformed).
    #[error("{setting}: {reason}")]
    Invalid { setting: Setting, reason: String },
    /// Two settings (or a setting and what the target or workload is) contradict each
    /// other; `reason` says why, naming both.
    #[error("{reason}")]
    Conflict { a: Setting, b: Setting, reason: String },
    /// A setting the others need was not given; `reason` says what needs it.
    #[error("{reason}")]
    Missing { setting: Setting, reason: String },
    /// A step that had to complete requests completed none (its run holds its errors).
    #[error("{step} completed nothing")]
    NothingCompleted { step: String },
    /// The async runtime could not be started.
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A file written outside a run directory (a downloaded tokenizer) could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write { path: std::path::PathBuf, source: std::io::Error },
    /// A value could not be encoded for a file or a shard's message (JSON, YAML).
    #[error("encoding {what}: {source}")]
    Encode { what: &'static str, source: Box<dyn std::error::Error + Send + Sync> },
    /// A state the library's own checks rule out was reached: a bug in Quetta, reported
    /// instead of a panic.
    #[error("internal error (a bug in Quetta, please report it): {0}")]
    Internal(&'static str),
    /// The workload could not be built (a file, a line, a field).
    #[error(transparent)]
    Workload(#[from] quetta_workload::WorkloadError),
    /// The target could not be started, set up, reached or checked.
    #[error(transparent)]
    Target(#[from] TargetError),
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
    /// The shards of a sharded run could not meet, or one broke off.
    #[error("sharded run: {0}")]
    Shard(#[from] quetta_shard::ShardError),
}

/// Why the target could not be used, in the server's own words when it answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The embedded simulator could not start.
    #[error("starting the embedded simulator: {0}")]
    Simulator(#[source] quetta_sim::SimError),
    /// A managed endpoint's adapter could not be set up (region, credentials, model family).
    #[error("setting up the {provider} adapter: {source}")]
    Adapter { provider: &'static str, source: Box<dyn std::error::Error + Send + Sync> },
    /// No model to ask for: none given and the server lists none, or it has not the one
    /// given.
    #[error("{reason}")]
    Model { url: String, reason: String },
    /// The server at `url` failed the pre-flight (a refused key, a request it could not
    /// serve, no answer in time), before anything was measured.
    #[error("{reason}")]
    Preflight { url: String, reason: String },
    /// The client for the target could not be built (TLS roots, headers, addresses).
    #[error("building the client: {0}")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A tokenizer named by its model id is neither cached nor downloadable.
    #[error("{} {spec}: not in the local Hugging Face cache, and downloading {url} failed ({source}); offline? give a tokenizer.json path", Setting::Tokenizer)]
    Download { spec: String, url: String, source: quetta_engine::EngineError },
}

impl Error {
    pub(crate) fn encode(what: &'static str) -> impl FnOnce(serde_json::Error) -> Self {
        move |e| Self::Encode { what, source: Box::new(e) }
    }

    pub(crate) fn client(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Target(TargetError::Client(Box::new(e)))
    }

    pub(crate) fn invalid(setting: Setting, reason: impl Into<String>) -> Self {
        Self::Invalid { setting, reason: reason.into() }
    }

    pub(crate) fn conflict(a: Setting, b: Setting, reason: impl Into<String>) -> Self {
        Self::Conflict { a, b, reason: reason.into() }
    }

    pub(crate) fn missing(setting: Setting, reason: impl Into<String>) -> Self {
        Self::Missing { setting, reason: reason.into() }
    }

    pub(crate) fn preflight(url: &str, reason: impl Into<String>) -> Self {
        Self::Target(TargetError::Preflight { url: url.to_owned(), reason: reason.into() })
    }
}

/// The facade's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

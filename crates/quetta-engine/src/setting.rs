//! The settings a library message names, as values: a library says "[`Setting::Tokenizer`]
//! needs …", never a command-line flag. A binary names them in its own words once, at start
//! ([`name_settings`]: `quetta-bench` renders each as its flag, `--tokenizer`); an embedder
//! that names none reads the library's own name for each (`WorkloadSpec.tokenizer`).
//!
//! ```
//! use quetta_engine::setting::Setting;
//! assert_eq!(Setting::Tokenizer.library_name(), "WorkloadSpec.tokenizer");
//! // with no names given, a message names the setting as the library knows it
//! assert_eq!(format!("{} needs {}", Setting::TokenIds, Setting::Tokenizer),
//!            "WorkloadSpec.token_ids needs WorkloadSpec.tokenizer");
//! ```

use std::sync::OnceLock;

/// A setting of a benchmark, a target, a workload, a sweep or a probe that a message may
/// name. Its `Display` is the name the process gave it ([`name_settings`]) or
/// [`Setting::library_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Setting {
    // the target
    BaseUrl,
    Backend,
    Model,
    Endpoint,
    Preflight,
    SagemakerPayload,
    VertexApi,
    VertexEndpointId,
    // the workload
    Sessions,
    Trace,
    TraceSpeed,
    Dataset,
    Distribution,
    Profile,
    TokenIds,
    Tokenizer,
    Modality,
    Pacing,
    InputsPerRequest,
    // the load and the run
    NumRequests,
    NumRuns,
    UntilCi,
    Duration,
    Concurrency,
    RequestRate,
    MaxConcurrency,
    SessionConcurrency,
    SessionRate,
    Threads,
    Retries,
    Percentiles,
    StopOnSaturation,
    ResetPrefixCache,
    ServerMetrics,
    MetricsUrl,
    DecodeTokens,
    OutputDir,
    ServerModel,
    Protocols,
    Rounds,
    // sharded runs
    Shards,
    Coordinator,
    JobName,
    // SLO searches
    Slo,
    SearchStart,
    SearchMax,
    SearchTolerance,
}

impl Setting {
    /// Where an embedder sets it in the library.
    pub fn library_name(self) -> &'static str {
        use Setting as S;
        match self {
            S::BaseUrl => "Target's base URL",
            S::Backend => "Target's kind",
            S::Model => "Target.model",
            S::Endpoint => "Target.protocol",
            S::Preflight => "Target.preflight = false",
            S::SagemakerPayload => "SageMakerConfig.payload",
            S::VertexApi => "VertexConfig.api",
            S::VertexEndpointId => "VertexConfig.endpoint_id",
            S::Sessions => "WorkloadSpec.source (a sessions file)",
            S::Trace => "WorkloadSpec.source (a trace)",
            S::TraceSpeed => "WorkloadSpec.replay_speed",
            S::Dataset => "WorkloadSpec.source (a dataset)",
            S::Distribution => "WorkloadSpec.source (a distribution file)",
            S::Profile => "the workload profile",
            S::TokenIds => "WorkloadSpec.token_ids",
            S::Tokenizer => "WorkloadSpec.tokenizer",
            S::Modality => "WorkloadSpec.vision",
            S::Pacing => "the sessions' pacing",
            S::InputsPerRequest => "WorkloadSpec.inputs_per_request",
            S::NumRequests => "Benchmark.requests",
            S::NumRuns => "Repeats.runs",
            S::UntilCi => "Repeats.until_ci",
            S::Duration => "Benchmark.duration",
            S::Concurrency => "Benchmark.load (a closed loop's concurrency)",
            S::RequestRate => "Benchmark.load (an open loop's rate)",
            S::MaxConcurrency => "Benchmark.load (its max_concurrency)",
            S::SessionConcurrency => "SessionOptions.max_concurrency",
            S::SessionRate => "the session rate (Benchmark.load)",
            S::Threads => "Benchmark.threads",
            S::Retries => "Benchmark.retries",
            S::Percentiles => "Benchmark.percentiles",
            S::StopOnSaturation => "Benchmark.stop_on_saturation",
            S::ResetPrefixCache => "Benchmark.reset_prefix_cache",
            S::ServerMetrics => "Telemetry.server_metrics",
            S::MetricsUrl => "ProbeContext.metrics_url",
            S::DecodeTokens => "RecheckOptions.decode_tokens",
            S::OutputDir => "Benchmark.output_dir",
            S::ServerModel => "the twin's server model",
            S::Protocols => "ProtocolCost.protocols",
            S::Rounds => "ProtocolCost.rounds",
            S::Shards => "Sharding.shard (the shard count)",
            S::Coordinator => "Sharding.coordinator",
            S::JobName => "the Kubernetes job's name",
            S::Slo => "SloSearch.objectives",
            S::SearchStart => "SloSearch.start",
            S::SearchMax => "SloSearch.max",
            S::SearchTolerance => "SloSearch.tolerance",
        }
    }
}

/// How this process names settings (`None`: the library's name).
pub type SettingNames = fn(Setting) -> Option<&'static str>;

static NAMES: OnceLock<SettingNames> = OnceLock::new();

/// Name every setting in this process's own words from now on (a binary's flags); the first
/// call wins. Returns whether this call set them.
pub fn name_settings(names: SettingNames) -> bool {
    NAMES.set(names).is_ok()
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let given = NAMES.get().and_then(|n| n(*self));
        f.write_str(given.unwrap_or_else(|| self.library_name()))
    }
}

//! `quetta-cli`: the command line that Quetta's binaries share: the flags of `run` (which
//! `sweep`, `slo` and `quetta-sim predict` take too), their value parsers, and their one
//! conversion to a [`quetta::Benchmark`]. It is the binaries' code (clap, anyhow), kept in
//! one package so that no binary compiles another's source; embedders use `quetta`.

mod args;
mod convert;
mod values;

pub use args::{ManagedArgs, RunArgs};
pub use convert::SHARD_SECRET_ENV;
pub use values::*;

use quetta::engine::setting::Setting;

/// Each setting a library message names, as the binaries' flag; set once at start with
/// `quetta::engine::setting::name_settings(quetta_cli::flag_name)`.
pub fn flag_name(s: Setting) -> Option<&'static str> {
    use Setting as S;
    Some(match s {
        S::BaseUrl => "--base-url",
        S::Backend => "--backend",
        S::Model => "--model",
        S::Endpoint => "--endpoint",
        S::Preflight => "--no-preflight",
        S::SagemakerPayload => "--sagemaker-payload",
        S::VertexApi => "--vertex-api",
        S::VertexEndpointId => "--vertex-endpoint-id",
        S::Sessions => "--sessions",
        S::Trace => "--trace",
        S::TraceSpeed => "--trace-speed",
        S::Dataset => "--dataset",
        S::Distribution => "--workload",
        S::Profile => "--profile",
        S::TokenIds => "--token-ids",
        S::Tokenizer => "--tokenizer",
        S::Modality => "--modality",
        S::Pacing => "--pacing",
        S::InputsPerRequest => "--random-batch-size",
        S::NumRequests => "--num-requests",
        S::NumRuns => "--num-runs",
        S::UntilCi => "--until-ci",
        S::Duration => "--duration",
        S::Concurrency => "--concurrency",
        S::RequestRate => "--request-rate",
        S::MaxConcurrency => "--max-concurrency",
        S::SessionConcurrency => "--session-concurrency",
        S::SessionRate => "--session-rate",
        S::Threads => "--threads",
        S::Retries => "--retries",
        S::Percentiles => "--percentiles",
        S::StopOnSaturation => "--stop-on-saturation",
        S::ResetPrefixCache => "--reset-prefix-cache",
        S::ServerMetrics => "--server-metrics",
        S::MetricsUrl => "--metrics-url",
        S::DecodeTokens => "--decode-tokens",
        S::OutputDir => "--output-dir",
        S::ServerModel => "--server-model",
        S::Protocols => "--protocols",
        S::Rounds => "--rounds",
        S::Shards => "--shards",
        S::Coordinator => "--coordinator",
        S::JobName => "--name",
        S::Slo => "--slo",
        S::SearchStart => "--start",
        S::SearchMax => "--max",
        S::SearchTolerance => "--tolerance",
        _ => return None,
    })
}

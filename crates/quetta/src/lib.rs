//! # Quetta as a library
//!
//! Load-test and profile LLM inference servers from Rust, with the timing `quetta-bench`
//! has: every token stamped with the kernel's arrival time before any parsing, open-loop
//! load on an absolute seeded schedule, latency from the intended send time as well as the
//! actual one, no request or error dropped.
//!
//! The API boundary is plain data with public fields — no `serde_json::Value` in results,
//! no hyper or tokio types in signatures:
//!
//! - [`Target`] (OpenAI-compatible servers, LiteLLM, SageMaker, Bedrock, Vertex AI, the embedded
//!   simulator, or an [`engine::Engine`] of your own) and its one [`Target::connect`];
//! - [`WorkloadSpec`] (synthetic, profiles, datasets, traces, fitted distributions,
//!   sessions, stress, vision) and [`Load`];
//! - [`Benchmark`] → [`BenchReport`] with the typed [`Summary`] (its fields named as in
//!   `summary.json`); [`Benchmark::plan`] for a dry run;
//! - [`Sweep`] → [`SweepReport`], [`SloSearch`] → [`SloReport`];
//! - [`compare()`] → [`CompareReport`], [`export`] (CSV, Parquet, vLLM's result JSON);
//! - [`correctness::Correctness`], and the crates underneath: [`engine`], [`workload`],
//!   [`metrics`], [`loadgen`], [`report`].
//!
//! ```no_run
//! use quetta::{Benchmark, Load, Sweep, Target};
//!
//! # fn main() -> quetta::Result<()> {
//! // 100 requests at 16 in flight against the embedded simulator (no server needed)
//! let report = Benchmark::new(Target::simulator(Default::default())).run_blocking()?;
//! println!("TTFT p99 {:?} ms", report.summary.ttft_ms.p99);
//!
//! // the same at 1, 2 and 4 in flight, on one simulator and one connection pool
//! let base = Benchmark::new(Target::simulator(Default::default())).requests(50);
//! for step in Sweep::concurrencies(base, vec![1, 2, 4]).run_blocking()?.steps {
//!     println!("{:>3}: {:?} ms", step.value(), step.ttft_p99_ms);
//! }
//! # let _ = Load::closed(1);
//! # Ok(()) }
//! ```

mod bench;
pub mod correctness;
mod error;
pub mod hub;
pub mod k8s;
mod load;
mod plan;
mod predict;
mod preflight;
pub mod protocol_cost;
mod repeats;
mod shard;
mod summary;
mod sweep;
mod target;
mod telemetry;
mod twin;

pub use bench::{BenchReport, Benchmark, SessionOptions, Telemetry, DEFAULT_REQUESTS};
pub use error::{Error, Result, TargetError};
pub use load::Load;
pub use plan::{LengthStats, Plan, SessionPlan};
pub use protocol_cost::{ProtocolCost, ProtocolCostReport};
pub use quetta_engine::RequestKind;
pub use repeats::{Repeats, RepeatsOutcome};
pub use shard::{ShardSecret, Sharding};
pub use sweep::{OnStep, SearchOver, SloSearch, Step, Steps, Sweep};
pub use target::{Connected, Protocol, ProtocolOptions, Target, TargetKind};

pub use quetta_engine as engine;
pub use quetta_loadgen as loadgen;
pub use quetta_metrics as metrics;
pub use quetta_protocols as protocols;
pub use quetta_report as report;
pub use quetta_sim as sim;
pub use quetta_workload as workload;

pub use quetta_http::fetch::ApiKey;
pub use quetta_loadgen::{History, Progress, RunControl, Shard, ThinkTime};
pub use quetta_metrics::{SloSet, Stats};
pub use quetta_report::{
    compare, compare_sides, merge, CompareOptions, CompareReport, CompareSide, MergeOptions,
    RunDir, SloReport, Summary, SweepReport, SweepStep, Tool,
};
pub use quetta_sim::SimConfig;
pub use quetta_workload::arrival::Arrival;
pub use quetta_workload::spec::WorkloadSpec;
pub use twin::{token_counter, Twin};

/// The adapters' own configurations, for [`Target::sagemaker`], [`Target::bedrock`] and
/// [`Target::vertex`].
pub mod managed {
    #[cfg(feature = "aws")]
    pub use quetta_aws::{BedrockApi, BedrockConfig, Family, Payload, SageMakerConfig};
    #[cfg(feature = "vertex")]
    pub use quetta_vertex::{VertexApi, VertexConfig};
}

/// Exports of a run's records: CSV, Parquet, and the result JSON of `vllm bench serve`.
pub mod export {
    pub use quetta_report::export::{
        csv, parquet, vllm, vllm_file_name, write_vllm, VllmResult, CSV_COLUMNS,
    };
}

/// A multi-threaded tokio runtime with `threads` workers (default: one per CPU): the one
/// that [`Benchmark::run_blocking`] and the binaries drive runs on.
pub fn runtime(threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let n = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(n.max(1))
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

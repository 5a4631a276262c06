//! `quetta-loadgen`: the embeddable load generator.
//!
//! It owns time. A [`Runner`] takes an engine (`quetta_engine::Engine`), a [`RunConfig`]
//! and the [`Work`] to send — requests from a workload (`quetta_workload::Workload`), or
//! multi-turn sessions — sends exactly the load asked for and turns every request into one
//! [`RequestRecord`](quetta_metrics::RequestRecord):
//!
//! - **closed loop** (`Dispatch::Closed`): N workers, each sends its next request when its
//!   previous one ends;
//! - **open loop** (`Dispatch::Open`): intended send times are computed up front from a seeded
//!   arrival process; a dedicated dispatcher thread waits for each on the OS's
//!   high-resolution sleep (absolute deadlines, so nothing accumulates) and hands the request
//!   to the runtime. A late request is sent late and its lateness recorded (schedule lag),
//!   never dropped; a concurrency cap makes requests wait, and the wait is recorded (queue
//!   time), so latency from the intended start can be reported beside latency from the send.
//!
//! One worker function ([`observe`]) serves every policy; it returns at the terminal event
//! with the stream's [`Tail`], which the policy reads to its end once the record is
//! delivered and before the request's slot is given back (so an HTTP connection goes back
//! to the pool before the next request). On the hot path a request
//! touches no lock and allocates nothing per token: token gaps go into a buffer sized from
//! `max_tokens`. Finished observations go over a channel to a recorder thread, which derives
//! records, appends them to the sink as they arrive (so nothing measured is lost), folds
//! them into the aggregate and calls observers; workers never wait for it, nor wake it: it
//! polls the channel (every 0.5 ms while records come, backing off to 16 ms when idle).
//!
//! Around every policy: warmup, a hook before the measured phase, the count or duration
//! stop, the bounded drain, Ctrl-C ([`RunControl::stop`]), per-phase timeouts around any
//! engine ([`WithTimeouts`]), stop-on-saturation ([`policy`]) and the client's own CPU and
//! memory over the run ([`usage`]). [`RunConfig::intended_offsets`] is the one schedule the
//! run and a dry run both use.
//!
//! ```no_run
//! # async fn demo(engine: std::sync::Arc<dyn quetta_engine::Engine>) {
//! use quetta_loadgen::{RunConfig, Runner, Work};
//! use quetta_workload::synthetic::SyntheticSpec;
//!
//! let workload = SyntheticSpec {
//!     input_len: 128, input_stddev: 0.0, output_len: 64, output_stddev: 0.0, chat: true, seed: 0,
//!     ..SyntheticSpec::default()
//! };
//! // 8 requests in flight, 100 requests
//! let out = Runner::new(engine, RunConfig::closed(8, 100))
//!     .run(Work::Requests(Box::new(workload)))
//!     .await
//!     .unwrap();
//! println!("{} completed, TTFT p99 {:?} ms", out.aggregate.completed,
//!     out.aggregate.summary(&[]).ttft_ms.p99);
//! # }
//! ```

mod config;
mod control;
mod error;
mod outcome;
pub mod policy;
mod recorder;
mod runner;
mod sessions;
mod shard;
mod shared;
mod timeouts;
mod timer;
pub mod usage;
mod worker;

pub use config::{BeforeMeasured, HookFuture};
pub use config::{Dispatch, RunConfig};
pub use control::{Progress, RunControl};
pub use error::RunError;
pub use outcome::{RunOutcome, SessionCounts};
pub use recorder::{JsonlSink, Observer, RecordSink};
pub use runner::{Runner, Work};
pub use sessions::{History, Pacing, SessionConfig, ThinkTime};
pub use shard::{Shard, ShardError};
pub use timeouts::WithTimeouts;
pub use worker::{execute, observe, Tail};

//! `quetta-loadgen`: the embeddable load generator.
//!
//! It owns time. Given an [`Engine`], a [`Workload`] and a [`RunConfig`], [`run`] sends
//! exactly the load asked for and turns every request into one
//! [`RequestRecord`](quetta_metrics::RequestRecord):
//!
//! - **closed loop** (`Load::Closed`): N workers, each sends its next request when its
//!   previous one ends;
//! - **open loop** (`Load::Open`): intended send times are computed up front from a seeded
//!   arrival process; a dedicated dispatcher thread waits for each on the OS's
//!   high-resolution sleep (absolute deadlines, so nothing accumulates) and hands the request
//!   to the runtime. A late request is sent late and its lateness recorded (schedule lag),
//!   never dropped; a concurrency cap makes requests wait, and the wait is recorded (queue
//!   time), so latency from the intended start can be reported beside latency from the send.
//!
//! One worker function ([`observe`]) serves every policy. On the hot path a request
//! touches no lock and allocates nothing per token: token gaps go into a buffer sized from
//! `max_tokens`. Finished observations go over a channel to a recorder thread, which derives
//! records, appends them to the sink as they arrive (so nothing measured is lost), folds
//! them into the aggregate and calls observers; workers never wait for it, nor wake it: it
//! polls the channel (every 0.5 ms while records come, backing off to 16 ms when idle).

mod recorder;
mod runner;
mod sessions;
mod timer;
mod worker;

pub use recorder::{JsonlSink, Observer, RecordSink};
pub use runner::{
    run, BeforeMeasured, Load, Progress, RunConfig, RunControl, RunError, RunOutcome,
};
pub use sessions::{run_sessions, History, Pacing, SessionConfig, SessionCounts, ThinkTime};
pub use worker::{execute, observe};

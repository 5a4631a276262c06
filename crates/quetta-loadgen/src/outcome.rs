//! What a run produced.

use std::time::{Instant, SystemTime};

use quetta_metrics::{Aggregate, ClientStats};
use quetta_workload::WorkloadError;

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    pub aggregate: Aggregate,
    /// Measured requests the configuration asked for (`None` for duration-bounded closed
    /// loops and for sessions).
    pub planned: Option<u64>,
    /// Measured requests released by the load generator, counted by the runner itself as
    /// it released them (independently of the records).
    pub dispatched: u64,
    /// Records the recorder received (completed + failed); equal to `dispatched` unless a
    /// record was lost, which the summary would say.
    pub records: u64,
    /// Of those, requests actually handed to the engine.
    pub sent: u64,
    pub warmup_completed: u64,
    pub warmup_failed: u64,
    /// The run was stopped early (Ctrl-C) or ran out of workload.
    pub interrupted: bool,
    /// The error the workload ended on (a request it could not build), if it did.
    pub workload_error: Option<WorkloadError>,
    pub sink_error: Option<String>,
    /// Wall-clock time the measured phase started.
    pub started_at: SystemTime,
    /// Achieved send rate over the measured phase (requests/s between first and last send).
    pub achieved_send_rate: Option<f64>,
    /// Requests cancelled when the drain timeout expired.
    pub cancelled_in_drain: u64,
    /// The instant every `*_offset_ms` of the records counts from.
    pub run_start: Instant,
    /// Per second of the measured phase: sent, ended, completed, tokens, in flight, TTFT.
    pub series: Vec<quetta_metrics::series::Second>,
    /// Steady-state window and the over-saturation verdict.
    pub steadiness: Option<quetta_metrics::series::Steadiness>,
    /// The run was ended by the stop-on-saturation policy.
    pub stopped_on_saturation: bool,
    /// How the sessions of a session run ended.
    pub sessions: Option<SessionCounts>,
    /// The client's own CPU and memory over this run.
    pub client: ClientStats,
    /// Slot-seconds occupied (closed loop) or request-seconds in flight (open loop) in the
    /// measured phase, by the runner's own count (Little's law, docs/METRICS.md).
    pub busy_s: f64,
}

/// How the sessions of a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionCounts {
    pub started: u64,
    /// Every turn completed.
    pub completed: u64,
    /// A turn failed, which ended the session.
    pub failed: u64,
    /// Stopped early: the duration or request limit was reached, or the run was stopped.
    pub truncated: u64,
    /// Turns sent (measured requests).
    pub turns: u64,
}

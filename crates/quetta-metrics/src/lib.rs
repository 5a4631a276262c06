//! `quetta-metrics`: what Quetta measures, defined once.
//!
//! Every metric is defined in `docs/METRICS.md`, and this crate implements exactly those
//! definitions:
//! - [`Observation`] is what the load generator saw of one request (instants as offsets
//!   from the start of the measured phase, the token gaps, usage, the error);
//! - [`RequestRecord::from_observation`] derives the per-request metrics (TTFT, TTFO,
//!   TPOT, E2E, ITL, queue time, schedule lag, token counts and their sources);
//! - [`Aggregate`] folds records into HdrHistograms (microsecond resolution, 3 significant
//!   digits) plus exact counters, merges with other aggregates, and serialises;
//! - [`Aggregate::summary`] gives the numbers `summary.json` reports, with goodput and the
//!   run-level SLO verdict ([`slo`]: one grammar for per-request thresholds and run-level
//!   objectives);
//! - [`stats`]: median, Mann-Whitney U, bootstrap intervals (what `compare` reports);
//! - [`series`]: the per-second series, steady state and over-saturation;
//! - [`telemetry`]: the server's own metrics and its GPUs' energy, as typed reports, energy
//!   per output token and hit rates; [`client`]: the client's own resource use;
//! - [`rates`]: the achieved send rate; [`live`]: the live TTFT p50 of progress displays.
//!
//! No async runtime, no I/O.

mod aggregate;
pub mod client;
pub mod live;
mod record;
pub mod series;
pub mod slo;
pub mod stats;
pub mod steady;
pub mod telemetry;

pub use aggregate::{
    percentile_key, Aggregate, ClientOverhead, ErrorMessage, Goodput, Metric, MetricsSummary,
    ServerTimingSummary, Stats, TurnSummary,
};
pub use client::{ClientStats, Host};
pub use quetta_engine::RequestKind;
pub use record::{CachedSource, Observation, RequestRecord, TokenSource};
pub use slo::{ObjectiveVerdict, Slo, SloError, SloMetric, SloSet, SloVerdict};
pub use telemetry::{GpuReport, ServerReport};

/// Rates over a run.
pub mod rates {
    /// The achieved send rate (requests/s): `sent − 1` intervals between the first and the
    /// last send (offsets in ms). `None` with fewer than two sends or no time between them.
    pub fn send_rate(
        sent: u64,
        first_sent_ms: Option<f64>,
        last_sent_ms: Option<f64>,
    ) -> Option<f64> {
        match (first_sent_ms, last_sent_ms) {
            (Some(a), Some(b)) if b > a && sent > 1 => Some((sent - 1) as f64 / ((b - a) / 1e3)),
            _ => None,
        }
    }
}

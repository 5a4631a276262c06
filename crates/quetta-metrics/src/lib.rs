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
//! - [`Aggregate::summary`] gives the numbers `summary.json` reports.
//!
//! No async runtime, no I/O.

mod aggregate;
mod record;
pub mod series;

pub use aggregate::{percentile_key, Aggregate, Metric, MetricsSummary, Stats, TurnSummary};
pub use record::{CachedSource, Observation, RequestRecord, TokenSource};
pub mod slo;
pub use slo::{Slo, SloError, SloMetric, SloSet};

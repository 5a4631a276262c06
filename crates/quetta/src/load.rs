//! [`Load`]: how a benchmark applies its requests (or sessions) over time.

use std::sync::Arc;
use std::time::Duration;

use quetta_loadgen::{Dispatch, Pacing};
use quetta_report::{ArrivalKind, LoadKind};
use quetta_workload::arrival::Arrival;

use quetta_engine::setting::Setting;

use crate::{Error, Result};

/// How requests (or, for multi-turn workloads, sessions) are sent.
///
/// ```
/// use quetta::Load;
/// let closed = Load::closed(32);
/// let open = Load::poisson(10.0).max_concurrency(64);
/// assert_eq!(open, Load::Open { rate: 10.0, arrival: quetta::Arrival::Poisson, max_concurrency: Some(64) });
/// # let _ = closed;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Load {
    /// Closed loop: keep `concurrency` requests in flight (sessions: run `concurrency`
    /// sessions at a time, each sending its next turn when its reply has arrived).
    Closed { concurrency: usize },
    /// Open loop: `rate` requests (sessions) per second following `arrival`, at most
    /// `max_concurrency` requests in flight (waiting is queue time).
    Open { rate: f64, arrival: Arrival, max_concurrency: Option<usize> },
    /// The workload's own send times: a trace's timestamps, gaps drawn from a fitted
    /// distribution, sessions' recorded starts.
    Recorded { max_concurrency: Option<usize> },
    /// Sessions in lock-step groups of `sessions`: turn k of every session is sent together
    /// (a herd, for comparison with tools that do it).
    Interleaved { sessions: usize },
}

impl Load {
    pub fn closed(concurrency: usize) -> Self {
        Load::Closed { concurrency }
    }

    pub fn open(rate: f64, arrival: Arrival) -> Self {
        Load::Open { rate, arrival, max_concurrency: None }
    }

    pub fn poisson(rate: f64) -> Self {
        Self::open(rate, Arrival::Poisson)
    }

    pub fn constant(rate: f64) -> Self {
        Self::open(rate, Arrival::Constant)
    }

    /// Gamma inter-arrival gaps of shape `burstiness` (vLLM's `--burstiness`).
    pub fn gamma(rate: f64, burstiness: f64) -> Self {
        Self::open(rate, Arrival::Gamma { burstiness })
    }

    /// The workload's recorded send times.
    pub fn recorded() -> Self {
        Load::Recorded { max_concurrency: None }
    }

    /// Cap the requests in flight of an open loop or a replay.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        if let Load::Open { max_concurrency, .. } | Load::Recorded { max_concurrency } = &mut self {
            *max_concurrency = Some(n);
        }
        self
    }

    /// The load as `summary.json` names it.
    pub(crate) fn kind(&self) -> LoadKind {
        match self {
            Load::Closed { .. } | Load::Interleaved { .. } => LoadKind::Closed,
            Load::Open { .. } => LoadKind::Open,
            Load::Recorded { .. } => LoadKind::Trace,
        }
    }

    /// The arrival as `summary.json` names it.
    pub(crate) fn arrival_kind(&self) -> Option<ArrivalKind> {
        match self {
            Load::Open { arrival, .. } => Some(match arrival {
                Arrival::Poisson => ArrivalKind::Poisson,
                Arrival::Constant => ArrivalKind::Constant,
                Arrival::Ramp { .. } => ArrivalKind::Ramp,
                Arrival::Bursts { .. } => ArrivalKind::Bursts,
                _ => ArrivalKind::Gamma,
            }),
            _ => None,
        }
    }

    /// The load of a request workload; `offsets` are the workload's own times.
    pub(crate) fn for_requests(&self, offsets: Option<Vec<Duration>>) -> Result<Dispatch> {
        Ok(match self {
            Load::Closed { concurrency } => Dispatch::Closed { concurrency: *concurrency },
            Load::Open { rate, arrival, max_concurrency } => {
                Dispatch::Open { rate: *rate, arrival: *arrival, max_concurrency: *max_concurrency }
            }
            Load::Recorded { max_concurrency } => Dispatch::Scheduled {
                offsets: Arc::new(offsets.ok_or_else(|| {
                    Error::missing(
                        Setting::Trace,
                        "a recorded load needs a workload with its own send times (a trace, or a distribution file)",
                    )
                })?),
                max_concurrency: *max_concurrency,
            },
            Load::Interleaved { .. } => {
                return Err(Error::missing(
                    Setting::Sessions,
                    "interleaved pacing is for multi-turn sessions",
                ))
            }
        })
    }

    /// The pacing of a session workload; `starts` are the sessions' recorded starts.
    pub(crate) fn for_sessions(
        &self,
        starts: Option<Vec<Duration>>,
    ) -> Result<(Pacing, Option<usize>)> {
        Ok(match self {
            Load::Closed { concurrency } => (Pacing::PerSession { sessions: *concurrency }, None),
            Load::Interleaved { sessions } => (Pacing::Interleaved { sessions: *sessions }, None),
            Load::Open { rate, arrival, max_concurrency } => {
                (Pacing::Open { rate: *rate, arrival: *arrival }, *max_concurrency)
            }
            Load::Recorded { max_concurrency } => {
                let offsets = starts.ok_or_else(|| {
                    Error::conflict(
                        Setting::Pacing,
                        Setting::Sessions,
                        format!(
                            "{} recorded: every session of the file needs a start_ms",
                            Setting::Pacing
                        ),
                    )
                })?;
                (Pacing::Scheduled { offsets: Arc::new(offsets) }, *max_concurrency)
            }
        })
    }
}

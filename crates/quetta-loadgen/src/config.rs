//! What one run does: the load, its stop conditions, the request settings every request
//! shares, and the one function that turns them into intended send times
//! ([`RunConfig::intended_offsets`]), used by the run itself and by a dry run.

use std::sync::Arc;
use std::time::Duration;

use quetta_engine::setting::Setting;
use quetta_engine::{EngineRequest, RequestParams, Timeouts};
use quetta_metrics::SloSet;
use quetta_workload::arrival::{Arrival, Schedule};
use quetta_workload::PlannedRequest;

use crate::error::RunError;
use crate::shard::Shard;

/// The future a [`BeforeMeasured`] hook returns.
pub type HookFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// An action run once between the warmup and the measured phase (e.g. resetting the
/// server's prefix cache); its error stops the run.
#[derive(Clone)]
pub struct BeforeMeasured(pub Arc<dyn Fn() -> HookFuture + Send + Sync>);

impl std::fmt::Debug for BeforeMeasured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeMeasured(..)")
    }
}

impl BeforeMeasured {
    pub(crate) async fn call(&self) -> Result<(), RunError> {
        (self.0)().await.map_err(RunError::BeforeMeasured)
    }
}

/// When the runner sends each request: a load resolved to what the runner needs (a
/// replay's send times filled in). The one load concept users set is `quetta::Load`
/// (closed, open, recorded, interleaved); it resolves to a `Dispatch` for requests and to a
/// [`crate::Pacing`] for sessions.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Dispatch {
    /// Keep `concurrency` requests in flight.
    Closed { concurrency: usize },
    /// Send at `rate` requests per second following `arrival`, optionally capped.
    Open { rate: f64, arrival: Arrival, max_concurrency: Option<usize> },
    /// Send request `i` at `offsets[i]` (trace replay, fitted gaps), optionally capped.
    Scheduled { offsets: Arc<Vec<Duration>>, max_concurrency: Option<usize> },
}

impl Dispatch {
    /// The cap on requests in flight of an open loop or a replay.
    pub fn max_concurrency(&self) -> Option<usize> {
        match self {
            Dispatch::Closed { .. } => None,
            Dispatch::Open { max_concurrency, .. }
            | Dispatch::Scheduled { max_concurrency, .. } => *max_concurrency,
        }
    }
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// When requests are sent.
    pub dispatch: Dispatch,
    /// Stop after this many measured requests (a replay without it sends its whole schedule).
    pub num_requests: Option<u64>,
    /// Stop sending after this long (measured phase).
    pub duration: Option<Duration>,
    /// Requests sent first and left out of the results.
    pub warmup: u64,
    /// How long requests in flight may finish after the last send before they are cancelled.
    pub drain_timeout: Duration,
    /// Seed of the arrival process.
    pub seed: u64,
    pub slos: Option<SloSet>,
    /// Stream responses (the default); when false, TTFT equals E2E.
    pub stream: bool,
    /// Ask the server to ignore end-of-sequence.
    pub ignore_eos: bool,
    /// Ask for exactly the planned output length (`min_tokens = max_tokens` and `ignore_eos`).
    pub exact_output_length: bool,
    /// Sampling, extra body fields and extra headers: shared by every request of the run.
    pub params: Arc<RequestParams>,
    /// Keep generated text in the records.
    pub capture_text: bool,
    /// Send a failed request again up to this many times (0: never). Only failures before
    /// any token are retried: connect errors, HTTP 429 and 5xx, connections closed before
    /// the answer, connect and first-byte timeouts.
    pub retries: u32,
    /// First wait before a retry; it doubles with each attempt (at most 30 s), and a
    /// server's `Retry-After` takes precedence.
    pub retry_backoff: Duration,
    /// Per-phase limits the runner applies around any engine (first byte, first token,
    /// idle between events, total); the connect phase is the adapter's own.
    pub timeouts: Timeouts,
    /// End the run early when requests in flight keep rising (an open loop the server cannot
    /// keep up with); the outcome says so.
    pub stop_on_saturation: bool,
    /// Run after the warmup, before the measured phase starts.
    pub before_measured: Option<BeforeMeasured>,
    /// The part of the plan this process runs ([`Shard`]; the whole plan by default).
    pub shard: Shard,
}

impl RunConfig {
    /// A closed-loop run of `n` requests at `concurrency`, with defaults for the rest.
    pub fn closed(concurrency: usize, n: u64) -> Self {
        Self {
            dispatch: Dispatch::Closed { concurrency },
            num_requests: Some(n),
            duration: None,
            warmup: 0,
            drain_timeout: Duration::from_secs(30),
            seed: 0,
            slos: None,
            stream: true,
            ignore_eos: false,
            exact_output_length: false,
            params: Arc::default(),
            capture_text: false,
            retries: 0,
            retry_backoff: Duration::from_millis(500),
            timeouts: Timeouts::default(),
            stop_on_saturation: false,
            before_measured: None,
            shard: Shard::WHOLE,
        }
    }

    /// An open-loop run of `n` requests at `rate`, with defaults for the rest.
    pub fn open(rate: f64, arrival: Arrival, n: u64) -> Self {
        Self {
            dispatch: Dispatch::Open { rate, arrival, max_concurrency: None },
            ..Self::closed(1, n)
        }
    }

    /// A replay of `offsets` (every one, unless `num_requests` or `duration` cut it short).
    pub fn scheduled(offsets: Vec<Duration>) -> Self {
        Self {
            dispatch: Dispatch::Scheduled { offsets: Arc::new(offsets), max_concurrency: None },
            num_requests: None,
            ..Self::closed(1, 1)
        }
    }

    pub(crate) fn validate(&self) -> Result<(), RunError> {
        let bad = |s: Setting, m: &str| Err(RunError::invalid(s, m));
        match self.dispatch {
            Dispatch::Closed { concurrency: 0 } => {
                return bad(Setting::Concurrency, "concurrency must be at least 1")
            }
            Dispatch::Open { rate, .. } if !(rate.is_finite() && rate > 0.0) => {
                return bad(
                    Setting::RequestRate,
                    "request rate must be a positive number of requests per second",
                )
            }
            _ => {}
        }
        if self.dispatch.max_concurrency() == Some(0) {
            return bad(Setting::MaxConcurrency, "max concurrency must be at least 1");
        }
        let split = match self.dispatch {
            Dispatch::Closed { concurrency } => self.shard.check_split("concurrency", concurrency),
            _ => match self.dispatch.max_concurrency() {
                Some(c) => self.shard.check_split("max concurrency", c),
                None => Ok(()),
            },
        };
        split?;
        // A replay brings its own count; other loads need a count or a duration.
        let scheduled = matches!(self.dispatch, Dispatch::Scheduled { .. });
        if !scheduled && self.num_requests.is_none() && self.duration.is_none() {
            return Err(RunError::Unbounded { what: "requests" });
        }
        if self.num_requests == Some(0) {
            return bad(Setting::NumRequests, "number of requests must be at least 1");
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return bad(Setting::Duration, "duration must be positive");
        }
        Ok(())
    }

    /// The intended send offsets of the measured requests, from the start of the measured
    /// phase: for an open loop the seeded arrival process (the first `num_requests`, those
    /// before `duration`), for a replay the schedule after its `warmup` requests, rebased to
    /// zero and cut the same way; `None` for a closed loop, whose sends follow the answers.
    /// The run and a dry run both take their schedule from here.
    pub fn intended_offsets(&self) -> Result<Option<Vec<Duration>>, RunError> {
        self.validate()?;
        Ok(match &self.dispatch {
            Dispatch::Closed { .. } => None,
            Dispatch::Scheduled { offsets, .. } => {
                let skip = (self.warmup as usize).min(offsets.len());
                let base = offsets.get(skip).copied().unwrap_or_default();
                let mut v: Vec<Duration> =
                    offsets[skip..].iter().map(|o| o.saturating_sub(base)).collect();
                if let Some(n) = self.num_requests {
                    v.truncate(usize::try_from(n).unwrap_or(usize::MAX));
                }
                if let Some(d) = self.duration {
                    v.retain(|o| *o < d);
                }
                Some(v)
            }
            Dispatch::Open { rate, arrival, .. } => {
                Some(arrival_offsets(*arrival, *rate, self.seed, self.num_requests, self.duration)?)
            }
        })
    }

    /// This shard's part of [`RunConfig::intended_offsets`]: the offsets of the measured
    /// requests it owns (request `j` of the measured phase has the global index
    /// `warmup + j`), in order; the whole schedule for an unsharded run.
    pub fn shard_offsets(&self) -> Result<Option<Vec<Duration>>, RunError> {
        Ok(self.intended_offsets()?.map(|v| {
            if self.shard.is_whole() {
                v
            } else {
                self.shard.pick(self.warmup, &v)
            }
        }))
    }

    /// The measured requests this shard is to send, where the plan says (`None`: a closed
    /// loop bounded by duration alone, or sessions).
    pub fn shard_planned(&self) -> Result<Option<u64>, RunError> {
        Ok(match self.shard_offsets()? {
            Some(v) => Some(v.len() as u64),
            None => self.num_requests.map(|n| self.shard.share_of(self.warmup, n)),
        })
    }

    pub(crate) fn engine_request(&self, id: u64, p: PlannedRequest) -> EngineRequest {
        let mut r = EngineRequest::new(id, p.prompt);
        r.max_tokens = Some(p.max_tokens);
        r.stream = self.stream;
        r.ignore_eos = self.ignore_eos || self.exact_output_length;
        if self.exact_output_length {
            r.min_tokens = Some(p.max_tokens);
        }
        r.params = self.params.clone();
        r.capture_text = self.capture_text;
        r
    }
}

/// Send offsets of a seeded arrival process at `rate`: the first `n`, those before
/// `duration`, or both cuts.
pub(crate) fn arrival_offsets(
    arrival: Arrival,
    rate: f64,
    seed: u64,
    n: Option<u64>,
    duration: Option<Duration>,
) -> Result<Vec<Duration>, RunError> {
    let sched = Schedule::new(arrival, rate, seed)
        .map_err(|e| RunError::invalid(Setting::RequestRate, e.to_string()))?;
    Ok(match (n, duration) {
        (Some(n), Some(d)) => sched.take_n(n).into_iter().take_while(|o| *o < d).collect(),
        (Some(n), None) => sched.take_n(n),
        (None, Some(d)) => sched.until(d),
        (None, None) => return Err(RunError::Unbounded { what: "requests" }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn a_refused_configuration_names_its_setting() {
        let invalid = |c: &RunConfig| match c.validate() {
            Err(RunError::Invalid { setting, .. }) => Some(setting),
            _ => None,
        };
        assert_eq!(invalid(&RunConfig::closed(0, 10)), Some(Setting::Concurrency));
        let mut c = RunConfig::closed(2, 10);
        c.duration = Some(Duration::ZERO);
        assert_eq!(invalid(&c), Some(Setting::Duration));
        c = RunConfig::closed(4, 10);
        c.num_requests = None;
        assert_eq!(c.validate(), Err(RunError::Unbounded { what: "requests" }));
        c = RunConfig::closed(1, 10);
        c.shard = "0/2".parse().unwrap();
        assert!(matches!(c.validate(), Err(RunError::Split(_))), "{:?}", c.validate());
    }

    #[test]
    fn a_replay_skips_its_warmup_rebases_and_cuts() {
        let mut c = RunConfig::scheduled(ms(&[0, 100, 250, 400, 1000, 1200]));
        assert_eq!(c.intended_offsets().unwrap().unwrap().len(), 6, "the whole schedule");
        c.warmup = 2;
        assert_eq!(c.intended_offsets().unwrap().unwrap(), ms(&[0, 150, 750, 950]));
        c.duration = Some(Duration::from_millis(800));
        assert_eq!(c.intended_offsets().unwrap().unwrap(), ms(&[0, 150, 750]));
        c.num_requests = Some(2);
        assert_eq!(c.intended_offsets().unwrap().unwrap(), ms(&[0, 150]));
        assert_eq!(RunConfig::closed(4, 10).intended_offsets().unwrap(), None);
        let mut o = RunConfig::open(10.0, Arrival::Constant, 5);
        assert_eq!(o.intended_offsets().unwrap().unwrap(), ms(&[0, 100, 200, 300, 400]));
        o.num_requests = None;
        assert!(o.intended_offsets().is_err(), "an open loop needs a count or a duration");
    }
}

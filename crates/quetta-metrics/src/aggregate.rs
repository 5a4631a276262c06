use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::{CachedSource, RequestRecord, SloSet, TokenSource};

/// The distributions an [`Aggregate`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Metric {
    Ttft,
    Ttfo,
    Tpot,
    /// Pooled: every gap of every request.
    Itl,
    /// One value per request: the mean of its gaps.
    ItlRequestMean,
    E2e,
    Queue,
    ScheduleLag,
    TtftFromIntended,
    E2eFromIntended,
    /// Per request: the mean time its frames waited for the client after arriving.
    ReadLag,
    /// Closed loop, per request: the previous request's end in its slot → its start.
    Turnaround,
    /// Open loop, per request: its end → the client releasing it.
    Release,
    /// Requests with several inputs (embeddings, rankings): E2E / inputs.
    PerInput,
}

impl Metric {
    pub const ALL: [Metric; 14] = [
        Metric::Ttft,
        Metric::Ttfo,
        Metric::Tpot,
        Metric::Itl,
        Metric::ItlRequestMean,
        Metric::E2e,
        Metric::Queue,
        Metric::ScheduleLag,
        Metric::TtftFromIntended,
        Metric::E2eFromIntended,
        Metric::ReadLag,
        Metric::Turnaround,
        Metric::Release,
        Metric::PerInput,
    ];

    /// The key of this metric in `summary.json`.
    pub fn key(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft_ms",
            Metric::Ttfo => "ttfo_ms",
            Metric::Tpot => "tpot_ms",
            Metric::Itl => "itl_ms",
            Metric::ItlRequestMean => "itl_request_mean_ms",
            Metric::E2e => "e2e_ms",
            Metric::Queue => "queue_ms",
            Metric::ScheduleLag => "schedule_lag_ms",
            Metric::TtftFromIntended => "ttft_from_intended_ms",
            Metric::E2eFromIntended => "e2e_from_intended_ms",
            Metric::ReadLag => "read_lag_ms",
            Metric::Turnaround => "turnaround_ms",
            Metric::Release => "release_ms",
            Metric::PerInput => "per_input_ms",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|&m| m == self).unwrap_or(0)
    }
}

/// Highest value a histogram tracks: one hour, in microseconds.
const MAX_US: u64 = 3_600_000_000;

/// One distribution: an HdrHistogram in microseconds (3 significant digits) for
/// percentiles, plus exact count, sum, sum of squares, min and max.
#[derive(Debug, Clone)]
struct Dist {
    hist: Histogram<u64>,
    count: u64,
    sum: f64,
    sumsq: f64,
    min: f64,
    max: f64,
}

impl Default for Dist {
    fn default() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds"),
            count: 0,
            sum: 0.0,
            sumsq: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Dist {
    fn add(&mut self, ms: f64) {
        let us = (ms * 1e3).round().clamp(1.0, MAX_US as f64) as u64;
        self.hist.saturating_record(us);
        self.count += 1;
        self.sum += ms;
        self.sumsq += ms * ms;
        self.min = self.min.min(ms);
        self.max = self.max.max(ms);
    }

    /// Whole microseconds, many at once (a request's gaps): the histogram records each, the
    /// sums are taken in integers and added once.
    fn add_us(&mut self, values: &[u32]) {
        if values.is_empty() {
            return;
        }
        let (mut sum, mut sumsq, mut lo, mut hi) = (0u64, 0u128, u32::MAX, 0u32);
        for &us in values {
            self.hist.saturating_record(u64::from(us).clamp(1, MAX_US));
            sum += u64::from(us);
            sumsq += u128::from(us) * u128::from(us);
            lo = lo.min(us);
            hi = hi.max(us);
        }
        self.count += values.len() as u64;
        self.sum += sum as f64 / 1e3;
        self.sumsq += sumsq as f64 / 1e6;
        self.min = self.min.min(f64::from(lo) / 1e3);
        self.max = self.max.max(f64::from(hi) / 1e3);
    }

    fn merge(&mut self, o: &Dist) {
        self.hist.add(&o.hist).expect("same histogram bounds");
        self.count += o.count;
        self.sum += o.sum;
        self.sumsq += o.sumsq;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// (value ms, share of values at or below it), rising in both, about `points` of them
    /// evenly spaced in share and the maximum last; each value is its histogram bucket's
    /// highest (3 significant digits, as the percentiles), kept within min and max.
    fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        if self.count == 0 {
            return Vec::new();
        }
        let total = self.hist.len().max(1);
        let step = (total / points.max(1) as u64).max(1);
        let (mut out, mut seen, mut next) = (Vec::new(), 0u64, 0u64);
        for v in self.hist.iter_recorded() {
            seen += v.count_at_value();
            if seen > next || seen == total {
                let ms = self.hist.highest_equivalent(v.value_iterated_to()) as f64 / 1e3;
                out.push((round3(ms.clamp(self.min, self.max)), seen as f64 / total as f64));
                next = seen - seen % step + step;
            }
        }
        if out.last().is_some_and(|l| l.0 < self.max) {
            out.push((round3(self.max), 1.0));
        }
        out
    }

    fn stats(&self, extra: &[f64]) -> Stats {
        if self.count == 0 {
            return Stats { count: 0, ..Stats::default() };
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = (self.sumsq / n - mean * mean).max(0.0);
        let q = |p: f64| {
            let v = self.hist.value_at_quantile(p / 100.0) as f64 / 1e3;
            Some(round3(v.clamp(self.min, self.max)))
        };
        Stats {
            count: self.count,
            mean: Some(round3(mean)),
            stddev: Some(round3(var.sqrt())),
            min: Some(round3(self.min)),
            p50: q(50.0),
            p90: q(90.0),
            p95: q(95.0),
            p99: q(99.0),
            p999: q(99.9),
            max: Some(round3(self.max)),
            // the standard ones are fields already: `--percentiles 99.9` must not write
            // `p999` twice (summary.json could not be read back)
            extra: extra
                .iter()
                .filter(|&&p| !STANDARD_PERCENTILES.iter().any(|s| (s - p).abs() < 1e-9))
                .map(|&p| (percentile_key(p), q(p)))
                .collect(),
        }
    }
}

/// The per-turn part of an [`Aggregate`] (multi-turn runs).
#[derive(Debug, Clone, Default)]
struct TurnAgg {
    ttft: Dist,
    tpot: Dist,
    e2e: Dist,
    completed: u64,
    failed: u64,
    input_tokens: u64,
    /// Cached tokens of completed requests, by where the count came from.
    cached: BTreeMap<CachedSource, (u64, u64)>,
    /// Input tokens of the completed requests that had a cached count, by source.
    cached_input: BTreeMap<CachedSource, u64>,
}

impl TurnAgg {
    fn add(&mut self, r: &RequestRecord) {
        if !r.ok() {
            self.failed += 1;
            return;
        }
        self.completed += 1;
        for (d, v) in
            [(&mut self.ttft, r.ttft_ms), (&mut self.tpot, r.tpot_ms), (&mut self.e2e, r.e2e_ms)]
        {
            if let Some(v) = v {
                d.add(v);
            }
        }
        let input = r.input_tokens.unwrap_or(0);
        self.input_tokens = self.input_tokens.saturating_add(input);
        if let Some((n, src)) = r.cached() {
            let e = self.cached.entry(src).or_default();
            e.0 = e.0.saturating_add(if input > 0 { n.min(input) } else { n });
            e.1 += 1;
            let c = self.cached_input.entry(src).or_default();
            *c = c.saturating_add(input);
        }
    }

    fn merge(&mut self, o: &TurnAgg) {
        self.ttft.merge(&o.ttft);
        self.tpot.merge(&o.tpot);
        self.e2e.merge(&o.e2e);
        self.completed += o.completed;
        self.failed += o.failed;
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        for (k, v) in &o.cached {
            let e = self.cached.entry(*k).or_default();
            e.0 = e.0.saturating_add(v.0);
            e.1 += v.1;
        }
        for (k, v) in &o.cached_input {
            let c = self.cached_input.entry(*k).or_default();
            *c = c.saturating_add(*v);
        }
    }

    fn summary(&self, turn: u32, extra: &[f64]) -> TurnSummary {
        let mean = |sum: u64, n: u64| (n > 0).then(|| round3(sum as f64 / n as f64));
        // The server's count wins wherever some requests of the turn have it.
        let src = if self.cached.contains_key(&CachedSource::Usage) {
            Some(CachedSource::Usage)
        } else if self.cached.contains_key(&CachedSource::Estimate) {
            Some(CachedSource::Estimate)
        } else {
            None
        };
        let (cached_sum, cached_n) =
            src.and_then(|s| self.cached.get(&s).copied()).unwrap_or((0, 0));
        let cached_input = src.and_then(|s| self.cached_input.get(&s).copied()).unwrap_or(0);
        TurnSummary {
            turn,
            completed: self.completed,
            failed: self.failed,
            ttft_ms: self.ttft.stats(extra),
            tpot_ms: self.tpot.stats(extra),
            e2e_ms: self.e2e.stats(extra),
            input_tokens_mean: mean(self.input_tokens, self.completed),
            cached_tokens_mean: mean(cached_sum, cached_n),
            new_prefill_tokens_mean: (cached_n > 0)
                .then(|| round3(cached_input.saturating_sub(cached_sum) as f64 / cached_n as f64)),
            cache_hit_rate: crate::telemetry::hit_rate(cached_sum as f64, cached_input as f64)
                .map(|r| (r * 1e6).round() / 1e6),
            cached_token_source: match src {
                Some(CachedSource::Usage) => "usage",
                Some(CachedSource::Estimate) => "estimate",
                None => "none",
            }
            .into(),
        }
    }
}

/// One entry of `per_turn` in `summary.json`: the requests that were turn `turn` of their
/// session. Token figures are means over completed requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// 1-based turn index.
    pub turn: u32,
    pub completed: u64,
    pub failed: u64,
    pub ttft_ms: Stats,
    pub tpot_ms: Stats,
    pub e2e_ms: Stats,
    pub input_tokens_mean: Option<f64>,
    /// Input tokens the server had to compute: input − cached.
    pub new_prefill_tokens_mean: Option<f64>,
    pub cached_tokens_mean: Option<f64>,
    /// Cached ÷ input tokens, 0..=1.
    pub cache_hit_rate: Option<f64>,
    /// `usage` (the server's `prompt_tokens_details.cached_tokens`), `estimate` (the
    /// client's estimate from the previous turn) or `none`.
    pub cached_token_source: String,
}

fn round3(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

/// The percentiles every [`Stats`] has as fields (p50, p90, p95, p99, p99.9).
pub const STANDARD_PERCENTILES: [f64; 5] = [50.0, 90.0, 95.0, 99.0, 99.9];

/// `p50`, `p99`, `p999`, `p99_99`-style key for a percentile.
pub fn percentile_key(p: f64) -> String {
    if (p - 99.9).abs() < 1e-9 {
        "p999".into()
    } else if p.fract() == 0.0 {
        format!("p{}", p as u64)
    } else {
        format!("p{}", p.to_string().replace('.', "_"))
    }
}

/// Summary statistics of one metric, in milliseconds. Fields are `null` without samples.
///
/// ```
/// let s = quetta_metrics::Aggregate::default().summary(&[]);
/// assert_eq!((s.ttft_ms.count, s.ttft_ms.p99), (0, None));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub mean: Option<f64>,
    pub stddev: Option<f64>,
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    /// Percentiles asked for with `--percentiles` beyond the standard ones.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Option<f64>>,
}

/// The share of each slot's cycle spent in the client above which the client set the pace.
pub const CLIENT_SHARE_LIMIT: f64 = 0.10;
/// The read lag p99 (ms) above which the client set the pace.
pub const READ_LAG_LIMIT_MS: f64 = 1.0;

/// The server's own timing beside the client's (docs/METRICS.md, Server-side timing): means
/// over the completed requests that carried it. Where time goes between the server and
/// the user: TTFT − the server's prompt time is the queue before it, the network, the
/// gateway and the client; TPOT − the server's per-token time the same per token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTimingSummary {
    pub requests_with_prefill: u64,
    pub server_prefill_ms_mean: Option<f64>,
    pub ttft_minus_server_prefill_ms_mean: Option<f64>,
    pub requests_with_tpot: u64,
    pub server_tpot_ms_mean: Option<f64>,
    pub tpot_minus_server_tpot_ms_mean: Option<f64>,
    /// The service's time to first byte (Bedrock's `firstByteLatency`) against TTFT.
    #[serde(default)]
    pub requests_with_ttft: u64,
    #[serde(default)]
    pub server_ttft_ms_mean: Option<f64>,
    #[serde(default)]
    pub ttft_minus_server_ttft_ms_mean: Option<f64>,
    /// The service's whole time (Bedrock's `latencyMs`, `invocationLatency`) against E2E.
    #[serde(default)]
    pub requests_with_e2e: u64,
    #[serde(default)]
    pub server_e2e_ms_mean: Option<f64>,
    #[serde(default)]
    pub e2e_minus_server_e2e_ms_mean: Option<f64>,
}

/// How much of the run the client itself took (docs/METRICS.md, Client overhead).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientOverhead {
    /// Per request: the mean time its frames waited for the client after their bytes arrived.
    pub read_lag_ms: Stats,
    /// Closed loop, per request: the previous request's end in its slot → its start.
    pub turnaround_ms: Stats,
    /// Open loop, per request: its end → the client releasing it (recorded, its task free).
    #[serde(default)]
    pub release_ms: Stats,
    /// Closed loop: Σ turnaround / Σ (turnaround + queue + E2E), over the requests with a
    /// turnaround: the share of each slot's cycle spent in the client. Null in open loop.
    pub client_share: Option<f64>,
    /// The client set the pace: `client_share` over 10 %, or read lag p99 over 1 ms.
    pub paced_by_client: bool,
    /// Little's law: Σ (queue + E2E + turnaround or release) over the window = throughput ×
    /// the mean time a request (with its turnaround) held a slot or a task.
    pub in_flight_from_latency: Option<f64>,
    /// The runner's own time-averaged count of occupied slots (closed loop) or requests in
    /// flight (open loop) over the window; equals `in_flight_from_latency` when every
    /// request and every moment of a slot is accounted for.
    pub in_flight_runner: Option<f64>,
}

impl ClientOverhead {
    /// Add the runner's own count: `busy_s` slot-seconds (or request-seconds) occupied,
    /// over a window of `duration_s`.
    pub fn with_runner_busy(mut self, busy_s: f64, duration_s: f64) -> Self {
        self.in_flight_runner =
            (duration_s > 0.0 && busy_s > 0.0).then(|| round3(busy_s / duration_s));
        self
    }

    /// What the client should change when it set the pace, in words; `None` when it did not.
    pub fn warning(&self) -> Option<String> {
        if !self.paced_by_client {
            return None;
        }
        let mut why = Vec::new();
        if let Some(s) = self.client_share.filter(|s| *s > CLIENT_SHARE_LIMIT) {
            why.push(format!("{:.0}% of each slot's cycle was spent in the client", s * 100.0));
        }
        if let Some(p) = self.read_lag_ms.p99.filter(|p| *p > READ_LAG_LIMIT_MS) {
            why.push(format!(
                "answers waited up to {p:.2} ms (read lag p99) for the client to read them"
            ));
        }
        Some(format!(
            "the client set the pace: {}; latencies are still stamped at arrival, but the load is lower than planned. Give it more {}, fewer streams per client process, or split the load across shards",
            why.join(", "),
            quetta_engine::setting::Setting::Threads
        ))
    }
}

/// Distinct error messages an aggregate keeps (a bound on its size whatever the run).
pub const MAX_ERROR_MESSAGES: usize = 64;
/// Characters of an error message kept.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 500;
/// Error messages a summary shows.
pub const TOP_ERRORS: usize = 3;

/// Failed requests that ended with one error message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// The error kind (docs/METRICS.md), e.g. `http_5xx`.
    pub kind: String,
    /// The message: the server's own text where it gave one (first 500 characters).
    pub message: String,
    pub count: u64,
}

/// Mergeable, serialisable aggregate of request records.
#[derive(Debug, Clone)]
pub struct Aggregate {
    dists: Vec<Dist>,
    pub completed: u64,
    pub failed: u64,
    pub errors: BTreeMap<String, u64>,
    /// Failed requests per distinct error message (the server's own text), at most
    /// [`MAX_ERROR_MESSAGES`] distinct ones; later new messages are counted by kind only.
    pub error_messages: BTreeMap<String, ErrorMessage>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// Inputs of completed requests that carry several (embeddings, rankings).
    pub inputs: u64,
    /// Seconds of audio of completed transcriptions.
    pub audio_seconds: f64,
    pub input_sources: BTreeMap<TokenSource, u64>,
    pub output_sources: BTreeMap<TokenSource, u64>,
    /// Earliest intended send time of a measured request (ms offset).
    pub window_start_ms: Option<f64>,
    /// Latest end of a measured request (ms offset).
    pub window_end_ms: Option<f64>,
    pub non_streamed: u64,
    pub new_connections: u64,
    pub slos: Option<SloSet>,
    pub slo_met: Vec<u64>,
    pub slo_met_all: u64,
    /// Sum and count of (server prompt tokens − planned prompt tokens), over completed
    /// requests whose input count came from usage.
    pub prompt_delta_sum: i64,
    pub prompt_delta_count: u64,
    /// Requests sent again after a stale pooled connection.
    pub stale_connection_retries: u64,
    /// Σ (end − start + turnaround) over measured requests, ms: their slot time.
    pub cycle_sum_ms: f64,
    /// Over the requests with a turnaround: Σ turnaround and Σ (end − start + turnaround), ms.
    pub turnaround_sum_ms: f64,
    pub turnaround_cycle_sum_ms: f64,
    /// Completed requests with the server's prompt time, Σ of it and Σ (TTFT − it), ms; the
    /// same for the server's per-token time against TPOT.
    pub server_prefill: (u64, f64, f64),
    pub server_tpot: (u64, f64, f64),
    /// The same for the service's time to first byte against TTFT, and its whole time
    /// against E2E (Bedrock's `firstByteLatency`, `latencyMs`).
    pub server_ttft: (u64, f64, f64),
    pub server_e2e: (u64, f64, f64),
    /// Requests retried with `--retries`, and the extra attempts they took.
    pub retried_requests: u64,
    pub retry_attempts: u64,
    /// Attempts the provider throttled that were sent again (`--retries`): throttling a
    /// retry hid from the final count of `throttled` failures.
    pub throttled_retries: u64,
    /// Measured requests with a planned output length, and those whose output length
    /// equalled it (`osl_hit_rate`).
    pub osl_planned: u64,
    pub osl_hits: u64,
    per_turn: BTreeMap<u32, TurnAgg>,
}

impl Default for Aggregate {
    fn default() -> Self {
        Self::new(None)
    }
}

/// Goodput: requests meeting every SLO, per second of the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    pub slo: String,
    /// Requests per second meeting every objective.
    pub request_rate: f64,
    pub requests_meeting_all: u64,
    /// Share of measured requests (completed + failed) meeting every objective, 0..=1.
    pub share_meeting_all: f64,
    /// Share of measured requests meeting each objective, by objective.
    pub share_meeting: BTreeMap<String, f64>,
}

/// The run-level numbers of `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsSummary {
    pub completed: u64,
    pub failed: u64,
    /// Measured window: first intended send to last end, in seconds.
    pub duration_s: f64,
    pub request_throughput: f64,
    pub input_token_throughput: f64,
    pub output_token_throughput: f64,
    pub total_token_throughput: f64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub total_cached_tokens: u64,
    /// Where output token counts came from: usage, tokenizer, chunks or mixed.
    pub token_count_source: String,
    pub input_token_source: String,
    /// Some requests were not streamed: their TTFT equals their E2E.
    pub ttft_equals_e2e_for_non_streamed: u64,
    /// Measured requests that went over a new connection (docs/METRICS.md, Connections).
    pub new_connections: u64,
    /// Requests sent a second time, on a new connection, because their pooled connection
    /// provably never delivered them: the server had closed it (or its keep-alive timeout
    /// had passed) before a byte was written, or it reset them unread.
    pub stale_connection_retries: u64,
    /// Requests retried with `--retries` (their final attempt decides success) and the extra
    /// attempts they took; a retried request that succeeded counts as completed.
    pub retried_requests: u64,
    pub retry_attempts: u64,
    /// Attempts the provider throttled that were sent again (`--retries`): throttling a
    /// retry hid from the final count of `throttled` failures.
    #[serde(default)]
    pub throttled_retries: u64,
    /// How much of the run the client itself took, and whether it set the pace.
    #[serde(default)]
    pub client_overhead: ClientOverhead,
    /// The server's own per-request timing beside the client's, where the server reports
    /// one (llama.cpp's `timings`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<ServerTimingSummary>,
    /// Mean of (server-counted prompt tokens − planned prompt tokens) per request: the chat
    /// template and special tokens, or the error of an estimated plan. Null without usage.
    pub prompt_tokens_over_plan: Option<f64>,
    /// Share of measured requests whose output length equalled the planned `max_tokens`,
    /// 0..=1 (null when no request had a plan).
    pub osl_hit_rate: Option<f64>,
    pub ttft_ms: Stats,
    pub ttfo_ms: Stats,
    pub tpot_ms: Stats,
    pub itl_ms: Stats,
    pub itl_request_mean_ms: Stats,
    pub e2e_ms: Stats,
    pub queue_ms: Stats,
    pub schedule_lag_ms: Stats,
    pub ttft_from_intended_ms: Stats,
    pub e2e_from_intended_ms: Stats,
    /// Inputs of the completed requests that carry several (a batch's texts, a ranking's
    /// documents); 0 for generation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_inputs: u64,
    /// Inputs per second of the measured window.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub input_throughput: f64,
    /// Per request: E2E divided by its inputs (docs/METRICS.md); absent for generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_input_ms: Option<Stats>,
    /// Seconds of audio of the completed transcriptions; 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub total_audio_s: f64,
    /// Inverse real-time factor: seconds of audio transcribed per second of the measured
    /// window (vLLM's `rtfx`); 0 without audio.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub rtfx: f64,
    pub errors: BTreeMap<String, u64>,
    /// The most frequent error messages (the server's own text), at most 3, most frequent
    /// first: what a failed run says first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_errors: Vec<ErrorMessage>,
    /// Goodput of the per-request thresholds of `--slo` (none without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    /// The run-level objectives of `--slo` (`ttft:p99<500ms`), each evaluated as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_verdict: Option<crate::slo::SloVerdict>,
    /// Multi-turn runs: one entry per turn index, in order (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_turn: Vec<TurnSummary>,
}

impl MetricsSummary {
    /// **Success rate**: completed / (completed + failed) of the measured requests, 0..=1;
    /// 0 when none was measured (docs/METRICS.md). `--min-success-rate` and an SLO search's
    /// error limit read it.
    ///
    /// ```
    /// let mut m = quetta_metrics::Aggregate::new(None).summary(&[]);
    /// assert_eq!(m.success_rate(), 0.0);
    /// (m.completed, m.failed) = (99, 1);
    /// assert_eq!(m.success_rate(), 0.99);
    /// ```
    /// Why a run failed as a measurement, in the server's own words (the most frequent
    /// error message): nothing was measured, nothing succeeded, or the success rate is
    /// below `min` (docs/METRICS.md); `None` for a run that passes.
    ///
    /// ```
    /// let mut m = quetta_metrics::Aggregate::new(None).summary(&[]);
    /// assert_eq!(m.failure(0.9).unwrap(), "no request was measured");
    /// (m.completed, m.failed) = (95, 5);
    /// assert_eq!(m.failure(0.9), None);
    /// assert!(m.failure(0.99).unwrap().starts_with("success rate 95.0% is below 99.0%"));
    /// ```
    pub fn failure(&self, min: f64) -> Option<String> {
        let why = self
            .top_errors
            .first()
            .map_or(String::new(), |e| format!("; most often {}: {}", e.kind, e.message));
        match (self.completed, self.failed) {
            (0, 0) => Some("no request was measured".into()),
            (0, n) => Some(format!("all {n} measured requests failed{why}")),
            _ if self.success_rate() < min => Some(format!(
                "success rate {:.1}% is below {:.1}%{why}",
                self.success_rate() * 100.0,
                min * 100.0
            )),
            _ => None,
        }
    }

    pub fn success_rate(&self) -> f64 {
        let measured = self.completed + self.failed;
        if measured == 0 {
            0.0
        } else {
            self.completed as f64 / measured as f64
        }
    }
}

fn source_label(m: &BTreeMap<TokenSource, u64>) -> String {
    let used: Vec<_> = m.iter().filter(|(_, &n)| n > 0).collect();
    match used.as_slice() {
        [] => "none".into(),
        [(s, _)] => s.as_str().into(),
        _ => "mixed".into(),
    }
}

impl Aggregate {
    /// An empty aggregate; `slos` enables goodput.
    pub fn new(slos: Option<SloSet>) -> Self {
        let n = slos.as_ref().map_or(0, |s| s.0.len());
        Self {
            dists: Metric::ALL.iter().map(|_| Dist::default()).collect(),
            completed: 0,
            failed: 0,
            errors: BTreeMap::new(),
            error_messages: BTreeMap::new(),
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            inputs: 0,
            audio_seconds: 0.0,
            input_sources: BTreeMap::new(),
            output_sources: BTreeMap::new(),
            window_start_ms: None,
            window_end_ms: None,
            non_streamed: 0,
            new_connections: 0,
            slos,
            slo_met: vec![0; n],
            slo_met_all: 0,
            prompt_delta_sum: 0,
            prompt_delta_count: 0,
            stale_connection_retries: 0,
            cycle_sum_ms: 0.0,
            turnaround_sum_ms: 0.0,
            turnaround_cycle_sum_ms: 0.0,
            server_prefill: (0, 0.0, 0.0),
            server_tpot: (0, 0.0, 0.0),
            server_ttft: (0, 0.0, 0.0),
            server_e2e: (0, 0.0, 0.0),
            retried_requests: 0,
            throttled_retries: 0,
            retry_attempts: 0,
            osl_planned: 0,
            osl_hits: 0,
            per_turn: BTreeMap::new(),
        }
    }

    fn dist(&mut self, m: Metric) -> &mut Dist {
        &mut self.dists[m.index()]
    }

    /// Fold one measured request in.
    pub fn add(&mut self, r: &RequestRecord) {
        self.window_start_ms = Some(
            self.window_start_ms.map_or(r.intended_offset_ms, |w| w.min(r.intended_offset_ms)),
        );
        self.window_end_ms =
            Some(self.window_end_ms.map_or(r.end_offset_ms, |w| w.max(r.end_offset_ms)));
        if r.connection_reused == Some(false) {
            self.new_connections += 1;
        }
        if r.stale_connection_retry {
            self.stale_connection_retries += 1;
        }
        if r.attempts > 1 {
            self.retried_requests += 1;
            self.retry_attempts += u64::from(r.attempts - 1);
            self.throttled_retries +=
                r.retry_errors.iter().filter(|k| k.as_str() == "throttled").count() as u64;
        }
        self.dist(Metric::Queue).add(r.queue_ms);
        self.dist(Metric::ScheduleLag).add(r.schedule_lag_ms);
        let held = (r.end_offset_ms - r.started_offset_ms).max(0.0);
        self.cycle_sum_ms += held + r.turnaround_ms.unwrap_or(0.0) + r.release_ms.unwrap_or(0.0);
        if let Some(t) = r.release_ms {
            self.dist(Metric::Release).add(t);
        }
        if let Some(t) = r.turnaround_ms {
            self.dist(Metric::Turnaround).add(t);
            self.turnaround_sum_ms += t;
            self.turnaround_cycle_sum_ms += held + t;
        }
        if let Some(l) = r.read_lag_ms {
            self.dist(Metric::ReadLag).add(l);
        }
        // of the completed requests only: a failed one says nothing of the output length;
        // a transcription's cap is no length it should reach
        if r.planned_output_tokens > 0 && r.ok() && r.audio_s.is_none() {
            self.osl_planned += 1;
            self.osl_hits += u64::from(r.output_matches_plan());
        }
        if let Some(t) = r.turn {
            self.per_turn.entry(t).or_default().add(r);
        }
        if let Some(slos) = &self.slos {
            let met: Vec<bool> = (0..slos.0.len()).map(|i| slos.met(i, r)).collect();
            for (i, m) in met.iter().enumerate() {
                self.slo_met[i] += u64::from(*m);
            }
            self.slo_met_all += u64::from(met.iter().all(|&m| m));
        }
        if !r.ok() {
            self.failed += 1;
            let kind = r.error_kind.clone().unwrap_or_default();
            self.count_message(&kind, r.error.as_deref().unwrap_or(""), 1);
            *self.errors.entry(kind).or_default() += 1;
            return;
        }
        self.completed += 1;
        if !r.streamed {
            self.non_streamed += 1;
        }
        for (m, v) in [
            (Metric::Ttft, r.ttft_ms),
            (Metric::Ttfo, r.ttfo_ms),
            (Metric::Tpot, r.tpot_ms),
            (Metric::E2e, r.e2e_ms),
            (Metric::TtftFromIntended, r.ttft_from_intended_ms),
            (Metric::E2eFromIntended, r.e2e_from_intended_ms),
        ] {
            if let Some(v) = v {
                self.dist(m).add(v);
            }
        }
        self.dist(Metric::Itl).add_us(&r.itl_us);
        self.audio_seconds += r.audio_s.unwrap_or(0.0);
        if let Some(p) = r.per_input_ms() {
            self.inputs += u64::from(r.inputs.unwrap_or(0));
            self.dist(Metric::PerInput).add(p);
        }
        if let Some(m) = r.itl_mean_ms() {
            self.dist(Metric::ItlRequestMean).add(m);
        }
        if let (Some(t), Some(s)) = (r.ttft_ms, r.server_prefill_ms) {
            self.server_prefill.0 += 1;
            self.server_prefill.1 += s;
            self.server_prefill.2 += t - s;
        }
        for (acc, client, server) in [
            (&mut self.server_tpot, r.tpot_ms, r.server_tpot_ms),
            (&mut self.server_ttft, r.ttft_ms, r.server_ttft_ms),
            (&mut self.server_e2e, r.e2e_ms, r.server_e2e_ms),
        ] {
            if let (Some(t), Some(s)) = (client, server) {
                acc.0 += 1;
                acc.1 += s;
                acc.2 += t - s;
            }
        }
        // Token counts are the server's (usage) or read from a file: they add saturating, so
        // an absurd count shows as the largest number rather than wrapping to a small one.
        // (a recording's tokens have no planned count to be compared with)
        if let (TokenSource::Usage, Some(n), None) =
            (r.input_token_source, r.input_tokens, r.audio_s)
        {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            self.prompt_delta_sum = self
                .prompt_delta_sum
                .saturating_add(n.saturating_sub(i64::from(r.planned_input_tokens)));
            self.prompt_delta_count += 1;
        }
        self.input_tokens = self.input_tokens.saturating_add(r.input_tokens.unwrap_or(0));
        self.output_tokens = self.output_tokens.saturating_add(r.output_tokens.unwrap_or(0));
        self.cached_tokens = self.cached_tokens.saturating_add(r.cached_tokens.unwrap_or(0));
        *self.input_sources.entry(r.input_token_source).or_default() += 1;
        *self.output_sources.entry(r.output_token_source).or_default() += 1;
    }

    fn count_message(&mut self, kind: &str, message: &str, n: u64) {
        let message: String = message.chars().take(MAX_ERROR_MESSAGE_CHARS).collect();
        let full = self.error_messages.len() >= MAX_ERROR_MESSAGES;
        match self.error_messages.get_mut(&message) {
            Some(m) => m.count += n,
            None if !full => {
                let m = ErrorMessage { kind: kind.to_owned(), message: message.clone(), count: n };
                self.error_messages.insert(message, m);
            }
            None => {}
        }
    }

    /// The most frequent error messages, most frequent first (ties: by message), at most `n`.
    pub fn top_errors(&self, n: usize) -> Vec<ErrorMessage> {
        let mut v: Vec<ErrorMessage> = self.error_messages.values().cloned().collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.message.cmp(&b.message)));
        v.truncate(n);
        v
    }

    /// Merge another aggregate (another worker, machine or run segment) into this one.
    /// Both must use the same SLOs; windows are joined, which assumes one clock.
    pub fn merge(&mut self, o: &Aggregate) {
        for (a, b) in self.dists.iter_mut().zip(&o.dists) {
            a.merge(b);
        }
        self.completed += o.completed;
        self.failed += o.failed;
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        for m in o.error_messages.values() {
            self.count_message(&m.kind, &m.message, m.count);
        }
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(o.cached_tokens);
        self.inputs += o.inputs;
        self.audio_seconds += o.audio_seconds;
        for (k, v) in &o.input_sources {
            *self.input_sources.entry(*k).or_default() += v;
        }
        for (k, v) in &o.output_sources {
            *self.output_sources.entry(*k).or_default() += v;
        }
        self.window_start_ms = match (self.window_start_ms, o.window_start_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.window_end_ms = match (self.window_end_ms, o.window_end_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.non_streamed += o.non_streamed;
        self.new_connections += o.new_connections;
        for (a, b) in self.slo_met.iter_mut().zip(&o.slo_met) {
            *a += b;
        }
        self.slo_met_all += o.slo_met_all;
        self.prompt_delta_sum = self.prompt_delta_sum.saturating_add(o.prompt_delta_sum);
        self.prompt_delta_count += o.prompt_delta_count;
        self.stale_connection_retries += o.stale_connection_retries;
        self.cycle_sum_ms += o.cycle_sum_ms;
        self.turnaround_sum_ms += o.turnaround_sum_ms;
        self.turnaround_cycle_sum_ms += o.turnaround_cycle_sum_ms;
        for (a, b) in [
            (&mut self.server_prefill, o.server_prefill),
            (&mut self.server_tpot, o.server_tpot),
            (&mut self.server_ttft, o.server_ttft),
            (&mut self.server_e2e, o.server_e2e),
        ] {
            a.0 += b.0;
            a.1 += b.1;
            a.2 += b.2;
        }
        self.retried_requests += o.retried_requests;
        self.throttled_retries += o.throttled_retries;
        self.retry_attempts += o.retry_attempts;
        self.osl_planned += o.osl_planned;
        self.osl_hits += o.osl_hits;
        for (k, t) in &o.per_turn {
            self.per_turn.entry(*k).or_default().merge(t);
        }
    }

    /// How much of the run the client itself took (docs/METRICS.md, Client overhead); the
    /// runner's own in-flight count is added with [`ClientOverhead::with_runner_busy`].
    fn client_overhead(&self, extra_percentiles: &[f64]) -> ClientOverhead {
        let read_lag_ms = self.stats(Metric::ReadLag, extra_percentiles);
        let turnaround_ms = self.stats(Metric::Turnaround, extra_percentiles);
        let release_ms = self.stats(Metric::Release, extra_percentiles);
        let client_share = (self.turnaround_cycle_sum_ms > 0.0)
            .then(|| round3(self.turnaround_sum_ms / self.turnaround_cycle_sum_ms * 1e3) / 1e3);
        let dur = self.duration_s();
        ClientOverhead {
            paced_by_client: client_share.is_some_and(|s| s > CLIENT_SHARE_LIMIT)
                || read_lag_ms.p99.is_some_and(|p| p > READ_LAG_LIMIT_MS),
            read_lag_ms,
            turnaround_ms,
            release_ms,
            client_share,
            in_flight_from_latency: (dur > 0.0 && self.cycle_sum_ms > 0.0)
                .then(|| round3(self.cycle_sum_ms / 1e3 / dur)),
            in_flight_runner: None,
        }
    }

    /// The server's own timing beside the client's (docs/METRICS.md, Server-side timing).
    fn server_timing(&self) -> Option<ServerTimingSummary> {
        let mean = |n: u64, s: f64| (n > 0).then(|| round3(s / n as f64));
        let (p, t) = (self.server_prefill, self.server_tpot);
        let (f, e) = (self.server_ttft, self.server_e2e);
        (p.0 + t.0 + f.0 + e.0 > 0).then(|| ServerTimingSummary {
            requests_with_prefill: p.0,
            server_prefill_ms_mean: mean(p.0, p.1),
            ttft_minus_server_prefill_ms_mean: mean(p.0, p.2),
            requests_with_tpot: t.0,
            server_tpot_ms_mean: mean(t.0, t.1),
            tpot_minus_server_tpot_ms_mean: mean(t.0, t.2),
            requests_with_ttft: f.0,
            server_ttft_ms_mean: mean(f.0, f.1),
            ttft_minus_server_ttft_ms_mean: mean(f.0, f.2),
            requests_with_e2e: e.0,
            server_e2e_ms_mean: mean(e.0, e.1),
            e2e_minus_server_e2e_ms_mean: mean(e.0, e.2),
        })
    }

    /// The measured window in seconds.
    pub fn duration_s(&self) -> f64 {
        match (self.window_start_ms, self.window_end_ms) {
            (Some(a), Some(b)) if b > a => (b - a) / 1e3,
            _ => 0.0,
        }
    }

    /// Summary statistics of one metric.
    pub fn stats(&self, m: Metric, extra_percentiles: &[f64]) -> Stats {
        self.dists[m.index()].stats(extra_percentiles)
    }

    /// A metric's distribution for a CDF chart: about `points` (value ms, share) points from
    /// its histogram, in memory that does not grow with the number of requests.
    pub fn cdf(&self, m: Metric, points: usize) -> Vec<(f64, f64)> {
        self.dists[m.index()].cdf(points)
    }

    /// The value of a metric at a percentile (ms), for SLO checks.
    pub fn percentile(&self, m: Metric, p: f64) -> Option<f64> {
        let d = &self.dists[m.index()];
        (d.count > 0)
            .then(|| (d.hist.value_at_quantile(p / 100.0) as f64 / 1e3).clamp(d.min, d.max))
    }

    /// The run-level numbers.
    pub fn summary(&self, extra_percentiles: &[f64]) -> MetricsSummary {
        let dur = self.duration_s();
        let per_s = |x: f64| if dur > 0.0 { (x / dur * 1e3).round() / 1e3 } else { 0.0 };
        let s = |m| self.stats(m, extra_percentiles);
        let measured = self.completed + self.failed;
        let goodput = self.slos.as_ref().filter(|s| s.has_per_request()).map(|slos| Goodput {
            slo: SloSet(slos.per_request().map(|(_, s)| *s).collect()).to_string(),
            request_rate: per_s(self.slo_met_all as f64),
            requests_meeting_all: self.slo_met_all,
            share_meeting_all: if measured > 0 {
                self.slo_met_all as f64 / measured as f64
            } else {
                0.0
            },
            share_meeting: slos
                .per_request()
                .map(|(i, o)| (o, self.slo_met[i]))
                .map(|(o, n)| {
                    (
                        o.metric.name().to_owned(),
                        if measured > 0 { n as f64 / measured as f64 } else { 0.0 },
                    )
                })
                .collect(),
        });
        MetricsSummary {
            completed: self.completed,
            failed: self.failed,
            duration_s: round3(dur),
            request_throughput: per_s(self.completed as f64),
            input_token_throughput: per_s(self.input_tokens as f64),
            output_token_throughput: per_s(self.output_tokens as f64),
            total_token_throughput: per_s(self.input_tokens as f64 + self.output_tokens as f64),
            total_input_tokens: self.input_tokens,
            total_output_tokens: self.output_tokens,
            total_cached_tokens: self.cached_tokens,
            token_count_source: source_label(&self.output_sources),
            input_token_source: source_label(&self.input_sources),
            ttft_equals_e2e_for_non_streamed: self.non_streamed,
            new_connections: self.new_connections,
            stale_connection_retries: self.stale_connection_retries,
            retried_requests: self.retried_requests,
            throttled_retries: self.throttled_retries,
            retry_attempts: self.retry_attempts,
            client_overhead: self.client_overhead(extra_percentiles),
            server_timing: self.server_timing(),
            prompt_tokens_over_plan: (self.prompt_delta_count > 0)
                .then(|| round3(self.prompt_delta_sum as f64 / self.prompt_delta_count as f64)),
            osl_hit_rate: (self.osl_planned > 0)
                .then(|| round3(self.osl_hits as f64 / self.osl_planned as f64 * 1e3) / 1e3),
            ttft_ms: s(Metric::Ttft),
            ttfo_ms: s(Metric::Ttfo),
            tpot_ms: s(Metric::Tpot),
            itl_ms: s(Metric::Itl),
            itl_request_mean_ms: s(Metric::ItlRequestMean),
            e2e_ms: s(Metric::E2e),
            queue_ms: s(Metric::Queue),
            schedule_lag_ms: s(Metric::ScheduleLag),
            ttft_from_intended_ms: s(Metric::TtftFromIntended),
            e2e_from_intended_ms: s(Metric::E2eFromIntended),
            total_inputs: self.inputs,
            input_throughput: per_s(self.inputs as f64),
            per_input_ms: (self.inputs > 0).then(|| s(Metric::PerInput)),
            total_audio_s: round3(self.audio_seconds),
            rtfx: if dur > 0.0 { round3(self.audio_seconds / dur) } else { 0.0 },
            errors: self.errors.clone(),
            top_errors: self.top_errors(TOP_ERRORS),
            goodput,
            slo_verdict: self.slos.as_ref().and_then(|s| s.verdict(self)),
            per_turn: self.per_turn.iter().map(|(t, a)| a.summary(*t, extra_percentiles)).collect(),
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

/// The serialised form: counters as they are, histograms as base64 of HdrHistogram's V2
/// deflate encoding (readable by every HdrHistogram implementation).
#[derive(Serialize, Deserialize)]
struct Wire {
    version: u32,
    dists: BTreeMap<Metric, WireDist>,
    completed: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    error_messages: Vec<ErrorMessage>,
    input_tokens: u64,
    output_tokens: u64,
    cached_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    inputs: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    audio_seconds: f64,
    input_sources: BTreeMap<TokenSource, u64>,
    output_sources: BTreeMap<TokenSource, u64>,
    window_start_ms: Option<f64>,
    window_end_ms: Option<f64>,
    non_streamed: u64,
    new_connections: u64,
    slos: Option<SloSet>,
    slo_met: Vec<u64>,
    slo_met_all: u64,
    #[serde(default)]
    prompt_delta_sum: i64,
    #[serde(default)]
    prompt_delta_count: u64,
    #[serde(default)]
    stale_connection_retries: u64,
    #[serde(default)]
    cycle_sum_ms: f64,
    #[serde(default)]
    turnaround_sum_ms: f64,
    #[serde(default)]
    turnaround_cycle_sum_ms: f64,
    #[serde(default)]
    server_prefill: (u64, f64, f64),
    #[serde(default)]
    server_tpot: (u64, f64, f64),
    #[serde(default)]
    server_ttft: (u64, f64, f64),
    #[serde(default)]
    server_e2e: (u64, f64, f64),
    #[serde(default)]
    retried_requests: u64,
    #[serde(default)]
    throttled_retries: u64,
    #[serde(default)]
    retry_attempts: u64,
    #[serde(default)]
    osl_planned: u64,
    #[serde(default)]
    osl_hits: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    per_turn: BTreeMap<u32, WireTurn>,
}

#[derive(Serialize, Deserialize)]
struct WireTurn {
    ttft: WireDist,
    tpot: WireDist,
    e2e: WireDist,
    completed: u64,
    failed: u64,
    input_tokens: u64,
    cached: BTreeMap<CachedSource, (u64, u64)>,
    cached_input: BTreeMap<CachedSource, u64>,
}

#[derive(Serialize, Deserialize)]
struct WireDist {
    hdr_v2_deflate_base64: String,
    count: u64,
    sum: f64,
    sumsq: f64,
    min: Option<f64>,
    max: Option<f64>,
}

impl WireDist {
    fn from_dist(d: &Dist) -> Result<Self, String> {
        let mut buf = Vec::new();
        V2DeflateSerializer::new().serialize(&d.hist, &mut buf).map_err(|e| format!("{e:?}"))?;
        Ok(WireDist {
            hdr_v2_deflate_base64: base64::engine::general_purpose::STANDARD.encode(buf),
            count: d.count,
            sum: d.sum,
            sumsq: d.sumsq,
            min: d.min.is_finite().then_some(d.min),
            max: d.max.is_finite().then_some(d.max),
        })
    }

    fn into_dist(self) -> Result<Dist, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.hdr_v2_deflate_base64)
            .map_err(|e| e.to_string())?;
        let hist: Histogram<u64> =
            Deserializer::new().deserialize(&mut bytes.as_slice()).map_err(|e| e.to_string())?;
        let mut h = Dist::default().hist;
        h.add(&hist).map_err(|e| format!("{e:?}"))?;
        Ok(Dist {
            hist: h,
            count: self.count,
            sum: self.sum,
            sumsq: self.sumsq,
            min: self.min.unwrap_or(f64::INFINITY),
            max: self.max.unwrap_or(f64::NEG_INFINITY),
        })
    }
}

impl Serialize for Aggregate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut dists = BTreeMap::new();
        for (m, d) in Metric::ALL.iter().zip(&self.dists) {
            // (a metric of requests with several inputs only when there were some)
            if *m != Metric::PerInput || d.count > 0 {
                dists.insert(*m, WireDist::from_dist(d).map_err(S::Error::custom)?);
            }
        }
        let mut per_turn = BTreeMap::new();
        for (k, t) in &self.per_turn {
            let w = |d: &Dist| WireDist::from_dist(d).map_err(S::Error::custom);
            per_turn.insert(
                *k,
                WireTurn {
                    ttft: w(&t.ttft)?,
                    tpot: w(&t.tpot)?,
                    e2e: w(&t.e2e)?,
                    completed: t.completed,
                    failed: t.failed,
                    input_tokens: t.input_tokens,
                    cached: t.cached.clone(),
                    cached_input: t.cached_input.clone(),
                },
            );
        }
        Wire {
            version: 1,
            dists,
            completed: self.completed,
            failed: self.failed,
            errors: self.errors.clone(),
            error_messages: self.error_messages.values().cloned().collect(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_tokens: self.cached_tokens,
            inputs: self.inputs,
            audio_seconds: self.audio_seconds,
            input_sources: self.input_sources.clone(),
            output_sources: self.output_sources.clone(),
            window_start_ms: self.window_start_ms,
            window_end_ms: self.window_end_ms,
            non_streamed: self.non_streamed,
            new_connections: self.new_connections,
            slos: self.slos.clone(),
            slo_met: self.slo_met.clone(),
            slo_met_all: self.slo_met_all,
            prompt_delta_sum: self.prompt_delta_sum,
            prompt_delta_count: self.prompt_delta_count,
            cycle_sum_ms: self.cycle_sum_ms,
            turnaround_sum_ms: self.turnaround_sum_ms,
            turnaround_cycle_sum_ms: self.turnaround_cycle_sum_ms,
            server_prefill: self.server_prefill,
            server_tpot: self.server_tpot,
            server_ttft: self.server_ttft,
            server_e2e: self.server_e2e,
            stale_connection_retries: self.stale_connection_retries,
            retried_requests: self.retried_requests,
            throttled_retries: self.throttled_retries,
            retry_attempts: self.retry_attempts,
            osl_planned: self.osl_planned,
            osl_hits: self.osl_hits,
            per_turn,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Aggregate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let w = Wire::deserialize(d)?;
        if w.version != 1 {
            return Err(D::Error::custom(format!("unsupported aggregate version {}", w.version)));
        }
        let mut agg = Aggregate::new(w.slos);
        for (m, wd) in w.dists {
            agg.dists[m.index()] = wd.into_dist().map_err(D::Error::custom)?;
        }
        for (k, t) in w.per_turn {
            agg.per_turn.insert(
                k,
                TurnAgg {
                    ttft: t.ttft.into_dist().map_err(D::Error::custom)?,
                    tpot: t.tpot.into_dist().map_err(D::Error::custom)?,
                    e2e: t.e2e.into_dist().map_err(D::Error::custom)?,
                    completed: t.completed,
                    failed: t.failed,
                    input_tokens: t.input_tokens,
                    cached: t.cached,
                    cached_input: t.cached_input,
                },
            );
        }
        agg.osl_planned = w.osl_planned;
        agg.osl_hits = w.osl_hits;
        agg.completed = w.completed;
        agg.failed = w.failed;
        agg.errors = w.errors;
        agg.error_messages = w.error_messages.into_iter().map(|m| (m.message.clone(), m)).collect();
        agg.input_tokens = w.input_tokens;
        agg.output_tokens = w.output_tokens;
        agg.cached_tokens = w.cached_tokens;
        agg.inputs = w.inputs;
        agg.audio_seconds = w.audio_seconds;
        agg.input_sources = w.input_sources;
        agg.output_sources = w.output_sources;
        agg.window_start_ms = w.window_start_ms;
        agg.window_end_ms = w.window_end_ms;
        agg.non_streamed = w.non_streamed;
        agg.new_connections = w.new_connections;
        agg.slo_met = w.slo_met;
        agg.slo_met_all = w.slo_met_all;
        agg.prompt_delta_sum = w.prompt_delta_sum;
        agg.prompt_delta_count = w.prompt_delta_count;
        agg.stale_connection_retries = w.stale_connection_retries;
        agg.cycle_sum_ms = w.cycle_sum_ms;
        agg.turnaround_sum_ms = w.turnaround_sum_ms;
        agg.turnaround_cycle_sum_ms = w.turnaround_cycle_sum_ms;
        agg.server_prefill = w.server_prefill;
        agg.server_tpot = w.server_tpot;
        agg.server_ttft = w.server_ttft;
        agg.server_e2e = w.server_e2e;
        agg.retried_requests = w.retried_requests;
        agg.throttled_retries = w.throttled_retries;
        agg.retry_attempts = w.retry_attempts;
        Ok(agg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Observation, RequestRecord};
    use quetta_engine::{EngineError, Usage};
    use std::time::Duration;

    fn rec(i: u64, ttft_ms: u64, fail: bool) -> RequestRecord {
        let d = Duration::from_millis;
        RequestRecord::from_observation(Observation {
            id: i,
            intended: d(i * 10),
            started: d(i * 10),
            sent: Some(d(i * 10)),
            first_token: Some(d(i * 10 + ttft_ms)),
            first_output: Some(d(i * 10 + ttft_ms)),
            end: d(i * 10 + ttft_ms + 90),
            itl_us: vec![10_000; 9],
            token_chunks: 10,
            usage: Some(Usage::tokens(Some(5), Some(10))),
            streamed: true,
            error: fail.then_some(EngineError::Incomplete),
            ..Observation::default()
        })
    }

    #[test]
    fn output_length_hits_count_completed_requests_and_errors_keep_their_words() {
        let mut agg = Aggregate::new(None);
        for i in 0..60 {
            let mut r = rec(i, 50, i == 59);
            r.planned_output_tokens = 10;
            if i == 59 {
                r.error = Some("HTTP 500: {\"error\":\"boom\"}".into());
                r.error_kind = Some("http_5xx".into());
            }
            agg.add(&r);
        }
        let s = agg.summary(&[]);
        assert_eq!(s.osl_hit_rate, Some(1.0), "59 of 59 completed, not 59 of 60");
        assert_eq!(s.top_errors.len(), 1);
        assert_eq!((s.top_errors[0].count, s.top_errors[0].kind.as_str()), (1, "http_5xx"));
        assert!(s.top_errors[0].message.contains("boom"));
        // merged and read back, the messages stay
        let back: Aggregate = serde_json::from_str(&serde_json::to_string(&agg).unwrap()).unwrap();
        let mut twice = back.clone();
        twice.merge(&back);
        assert_eq!(twice.summary(&[]).top_errors[0].count, 2);
    }

    #[test]
    fn summary_goodput_merge_and_round_trip() {
        let slos: SloSet = "ttft:100ms".parse().unwrap();
        let mut a = Aggregate::new(Some(slos.clone()));
        let mut b = Aggregate::new(Some(slos));
        for i in 0..100 {
            let r = rec(i, if i % 2 == 0 { 50 } else { 150 }, i % 10 == 9);
            if i < 50 {
                a.add(&r);
            } else {
                b.add(&r);
            }
        }
        a.merge(&b);
        let s = a.summary(&[75.0]);
        assert_eq!((s.completed, s.failed), (90, 10));
        assert_eq!(s.errors["incomplete"], 10);
        assert_eq!(s.ttft_ms.count, 90);
        assert_eq!(s.ttft_ms.min, Some(50.0));
        assert_eq!(s.ttft_ms.max, Some(150.0));
        assert!(s.ttft_ms.extra.contains_key("p75"));
        assert_eq!(s.tpot_ms.p50, Some(10.0));
        assert_eq!(s.token_count_source, "usage");
        // even ids have TTFT 50ms and never fail (failures are i % 10 == 9, odd)
        let g = s.goodput.clone().unwrap();
        assert_eq!(g.requests_meeting_all, 50);
        assert!((g.share_meeting_all - 0.5).abs() < 1e-9);
        // window: intended 0ms .. last end (990 + 150 + 90)
        assert!((s.duration_s - 1.23).abs() < 1e-9, "{}", s.duration_s);
        let json = serde_json::to_string(&a).unwrap();
        let back: Aggregate = serde_json::from_str(&json).unwrap();
        assert_eq!(back.summary(&[75.0]), s);
    }

    /// One grammar, both kinds: per-request thresholds count towards goodput, run-level
    /// objectives are evaluated on the run's percentiles, each as written.
    #[test]
    fn per_request_thresholds_and_run_level_objectives() {
        let slos: SloSet = "ttft:60ms,ttft:p50<60ms,ttft:p99<60ms".parse().unwrap();
        let mut a = Aggregate::new(Some(slos));
        for i in 1..=100 {
            a.add(&rec(i, i, false));
        }
        let s = a.summary(&[]);
        let g = s.goodput.unwrap();
        assert_eq!(g.slo, "ttft:60ms");
        assert_eq!(g.requests_meeting_all, 60, "TTFT 1..=60 ms meet the per-request bound");
        let v = s.slo_verdict.unwrap();
        assert_eq!(v.slo, "ttft:p50<60ms,ttft:p99<60ms");
        assert!(!v.pass);
        assert!(v.objectives[0].pass, "{:?}", v.objectives[0]);
        assert!((v.objectives[0].value_ms.unwrap() - 50.0).abs() < 0.1);
        assert!(!v.objectives[1].pass);
        assert!((v.objectives[1].value_ms.unwrap() - 99.0).abs() < 0.1);
        // only run-level objectives: no goodput, a verdict
        let mut b = Aggregate::new(Some("e2e:p90<1s".parse().unwrap()));
        b.add(&rec(0, 10, false));
        let s = b.summary(&[]);
        assert!(s.goodput.is_none());
        assert!(s.slo_verdict.unwrap().pass);
    }

    #[test]
    fn per_turn_cache_and_osl() {
        let d = Duration::from_millis;
        let obs = |id: u64, turn: u32, cached: Option<u64>, est: Option<u64>, out: u64| {
            RequestRecord::from_observation(Observation {
                id,
                turn: Some(turn),
                sent: Some(d(0)),
                first_token: Some(d(10)),
                end: d(20),
                token_chunks: 3,
                streamed: true,
                planned_output_tokens: 3,
                usage: Some(Usage::tokens(Some(100), Some(out)).with_cached(cached)),
                cached_tokens_estimate: est,
                ..Observation::default()
            })
        };
        let mut a = Aggregate::default();
        a.add(&obs(0, 1, Some(0), None, 3));
        a.add(&obs(1, 2, Some(64), Some(90), 3));
        a.add(&obs(2, 2, Some(80), Some(90), 2));
        let mut b = Aggregate::default();
        b.add(&obs(3, 3, None, Some(50), 3));
        a.merge(&b);
        let back: Aggregate = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        let s = back.summary(&[]);
        assert_eq!(s, a.summary(&[]));
        assert_eq!(s.per_turn.len(), 3);
        let t2 = &s.per_turn[1];
        assert_eq!((t2.turn, t2.completed), (2, 2));
        assert_eq!(t2.cached_token_source, "usage", "the server's count wins over the estimate");
        assert_eq!(t2.cached_tokens_mean, Some(72.0));
        assert_eq!(t2.new_prefill_tokens_mean, Some(28.0));
        assert_eq!(t2.cache_hit_rate, Some(0.72));
        assert_eq!(s.per_turn[2].cached_token_source, "estimate");
        assert_eq!(s.per_turn[2].cached_tokens_mean, Some(50.0));
        assert_eq!(s.osl_hit_rate, Some(0.75));
    }
}

#[cfg(test)]
mod cdf_tests {
    use super::*;

    /// The chart's CDF from the histogram against the exact one from every value: each
    /// point's share is exact for its value, its value within 0.1 % (3 significant digits)
    /// of the exact quantile at that share; about 400 points whatever the count.
    #[test]
    fn a_cdf_from_the_histogram_is_the_exact_one_to_three_digits() {
        let mut d = Dist::default();
        let mut vals: Vec<f64> = Vec::new();
        let mut x: u64 = 7;
        for _ in 0..100_000 {
            // a long-tailed spread of microsecond values, 0.05 ms to about 5 s
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let ms = (0.05 * (1e5f64).powf(u) * 1e3).round() / 1e3;
            vals.push(ms);
            d.add(ms);
        }
        vals.sort_by(f64::total_cmp);
        let c = d.cdf(400);
        assert!((400..=402).contains(&c.len()), "{}", c.len());
        assert_eq!(c.last().copied(), Some((vals[vals.len() - 1], 1.0)));
        for w in c.windows(2) {
            assert!(w[0].0 <= w[1].0 && w[0].1 < w[1].1, "{w:?}");
        }
        let n = vals.len() as f64;
        for &(v, q) in &c {
            let at_or_below = vals.partition_point(|&x| x <= v) as f64 / n;
            assert!(at_or_below >= q - 1e-12, "({v}, {q}): {at_or_below} at or below");
            let exact = vals[((q * n).ceil() as usize).clamp(1, vals.len()) - 1];
            assert!((v - exact).abs() <= exact * 1e-3 + 1e-3, "({v}, {q}): exact {exact}");
        }
        assert!(Dist::default().cdf(400).is_empty());
    }
}

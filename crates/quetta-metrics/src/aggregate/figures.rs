//! The summary of an aggregate: every figure a run reports (`MetricsSummary`), the server's
//! timing beside the client's, the client's overhead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    is_zero, is_zero_f64, round3, Stats, TurnSummary, CLIENT_SHARE_LIMIT, READ_LAG_LIMIT_MS,
};
use crate::TokenSource;

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

pub(crate) fn source_label(m: &BTreeMap<TokenSource, u64>) -> String {
    let used: Vec<_> = m.iter().filter(|(_, &n)| n > 0).collect();
    match used.as_slice() {
        [] => "none".into(),
        [(s, _)] => s.as_str().into(),
        _ => "mixed".into(),
    }
}

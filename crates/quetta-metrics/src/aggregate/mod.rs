use std::collections::BTreeMap;

use crate::{RequestRecord, SloSet, TokenSource};

mod dist;
mod figures;
mod turns;
mod wire;

pub use dist::*;
pub use figures::*;
pub use turns::*;
use wire::{is_zero, is_zero_f64};

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

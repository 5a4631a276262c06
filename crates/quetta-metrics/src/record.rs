use std::time::Duration;

use quetta_engine::{ConnectionInfo, EngineError, Usage};
use serde::{Deserialize, Serialize};

/// Where a token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage` block.
    Usage,
    /// Counted with a tokenizer on the client.
    Tokenizer,
    /// Counted as token-bearing chunks (one chunk = one token; an estimate).
    Chunks,
    /// The workload's planned length (input only; exact only with the server's tokenizer).
    Planned,
}

impl TokenSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Usage => "usage",
            Self::Tokenizer => "tokenizer",
            Self::Chunks => "chunks",
            Self::Planned => "planned",
        }
    }
}

/// Where a cached-token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CachedSource {
    /// `usage.prompt_tokens_details.cached_tokens`.
    Usage,
    /// Estimated by the client from the previous turn of the session.
    Estimate,
}

/// What the load generator observed of one request. Times are offsets from the start of
/// the measured phase, taken on the monotonic clock.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    pub id: u64,
    pub session_id: Option<String>,
    /// The scheduled send time (closed loop: when a slot freed up).
    pub intended: Duration,
    /// When the request's task started running (after the dispatcher released it).
    pub started: Duration,
    /// When the request was handed to the engine.
    pub sent: Option<Duration>,
    pub headers: Option<Duration>,
    pub first_byte: Option<Duration>,
    /// First content, reasoning or tool-call chunk.
    pub first_token: Option<Duration>,
    /// First content (non-reasoning) chunk.
    pub first_output: Option<Duration>,
    /// The `End` or `Error` event.
    pub end: Duration,
    /// Gaps between consecutive token-bearing chunks, in microseconds.
    pub itl_us: Vec<u32>,
    /// Token-bearing chunks (content + reasoning + tool call).
    pub token_chunks: u32,
    pub reasoning_chunks: u32,
    pub usage: Option<Usage>,
    /// Output tokens counted with a tokenizer, when the client has one.
    pub tokenizer_output_tokens: Option<u64>,
    pub planned_input_tokens: u32,
    pub planned_output_tokens: u32,
    pub status: Option<u16>,
    pub finish_reason: Option<String>,
    pub streamed: bool,
    pub connection: Option<ConnectionInfo>,
    pub error: Option<EngineError>,
    /// The generated text, when captured.
    pub text: Option<String>,
    /// Attempts made (0 or 1: one).
    pub attempts: u32,
    /// Error kinds of the attempts that were retried.
    pub retry_errors: Vec<String>,
    /// 1-based turn index within its session (multi-turn runs).
    pub turn: Option<u32>,
    /// Client-side estimate of the prompt tokens a prefix cache could serve (the previous
    /// turn's prompt and reply), for servers that do not report cached tokens.
    pub cached_tokens_estimate: Option<u64>,
    /// Response headers the adapter was asked to keep (e.g. `x-litellm-*`).
    pub response_headers: Vec<(String, String)>,
    /// Sum over the answer's frames of (when the client handled the frame − when its bytes
    /// arrived), and the number of frames: the read lag (docs/METRICS.md).
    pub read_lag_sum: Duration,
    pub read_lag_frames: u32,
    /// Closed loop: from the previous request's end in the same slot to this one's start.
    pub turnaround: Option<Duration>,
    /// Open loop: from this request's end to the client releasing it (recorded, its task free).
    pub release: Option<Duration>,
    /// The server's own timing of the request, where it reports one.
    pub server_timing: Option<quetta_engine::ServerTiming>,
    /// What the request asked of the server.
    pub kind: quetta_engine::RequestKind,
    /// The inputs it carried (a batch's texts, a ranking's documents; one otherwise).
    pub inputs: u32,
    /// Seconds of audio it carried (a transcription).
    pub audio_s: Option<f64>,
}

fn ms(d: Duration) -> f64 {
    (d.as_nanos() as f64 / 1e3).round() / 1e3
}

fn round3(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

fn ms_between(a: Duration, b: Duration) -> f64 {
    ms(b.saturating_sub(a))
}

/// One line of `requests.jsonl`: a request's timeline and its derived metrics.
///
/// Offsets (`*_offset_ms`) count from the start of the measured phase. All durations are
/// milliseconds with microsecond resolution, but for the gaps between tokens: integer
/// microseconds (`itl_us`, schema 2). A record of schema 1 spelled them as milliseconds
/// (`itl_ms`); it is read into `itl_us` without loss, as they were whole microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct RequestRecord {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// 1-based turn within the session (multi-turn runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    pub intended_offset_ms: f64,
    pub started_offset_ms: f64,
    pub sent_offset_ms: Option<f64>,
    pub first_token_offset_ms: Option<f64>,
    pub end_offset_ms: f64,
    /// sent -> first token-bearing chunk.
    pub ttft_ms: Option<f64>,
    /// sent -> first content chunk.
    pub ttfo_ms: Option<f64>,
    /// (E2E - TTFT) / (output_tokens - 1).
    pub tpot_ms: Option<f64>,
    /// sent -> end of stream.
    pub e2e_ms: Option<f64>,
    /// intended -> first token-bearing chunk (no coordinated omission).
    pub ttft_from_intended_ms: Option<f64>,
    /// intended -> end of stream (no coordinated omission).
    pub e2e_from_intended_ms: Option<f64>,
    /// started -> sent: waiting for a concurrency slot.
    pub queue_ms: f64,
    /// intended -> started: how late the client released the request.
    pub schedule_lag_ms: f64,
    /// Gaps between consecutive token-bearing chunks, in microseconds.
    #[serde(default, deserialize_with = "gaps_us")]
    pub itl_us: Vec<u32>,
    /// Schema 1's `itl_ms` while a record is read; moved into `itl_us` at once.
    #[serde(default, rename = "itl_ms", skip_serializing, deserialize_with = "gaps_ms_as_us")]
    legacy_itl_ms: Option<Vec<u32>>,
    pub token_chunks: u32,
    pub input_tokens: Option<u64>,
    pub input_token_source: TokenSource,
    pub output_tokens: Option<u64>,
    pub output_token_source: TokenSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// The client's estimate of cached prompt tokens (previous turn's prompt + reply), kept
    /// apart from the server's count; see docs/METRICS.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens_estimate: Option<u64>,
    pub planned_input_tokens: u32,
    pub planned_output_tokens: u32,
    pub streamed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_reused: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ms: Option<f64>,
    /// Sent again after a stale pooled connection (see docs/METRICS.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale_connection_retry: bool,
    /// `null` for a success; a stable label (docs/METRICS.md) for a failure.
    pub error_kind: Option<String>,
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Attempts made, when the request was retried (see `--retries`).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub attempts: u32,
    /// Error kinds of the retried attempts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_errors: Vec<String>,
    /// Response headers kept with `--record-header` (or `--backend litellm`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub response_headers: std::collections::BTreeMap<String, String>,
    /// Mean over the answer's frames of the time between a frame's bytes arriving and the
    /// client handling it (docs/METRICS.md, Client overhead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lag_ms: Option<f64>,
    /// Closed loop: the previous request's end in the same slot → this request's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turnaround_ms: Option<f64>,
    /// Open loop: this request's end → the client releasing it (recorded, its task free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_ms: Option<f64>,
    /// The server's own prompt time (llama.cpp's `timings.prompt_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_prefill_ms: Option<f64>,
    /// The server's own time per generated token (`timings.predicted_per_token_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tpot_ms: Option<f64>,
    /// The service's own time to the answer's first byte (Bedrock's `firstByteLatency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_ttft_ms: Option<f64>,
    /// The service's own time for the whole request (Bedrock's `latencyMs`,
    /// `invocationLatency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_e2e_ms: Option<f64>,
    /// Requests that embed or rank: how many inputs (texts, documents) they carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<u32>,
    /// A transcription: the seconds of audio it carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_s: Option<f64>,
}

fn one() -> u32 {
    1
}

/// The gaps of a record (most of its bytes) read from their text at once: a list of
/// integers is scanned in one loop, anything else (spaces aside) left to serde's own reading
/// of the list, which refuses what is not a list of whole microseconds.
fn gaps_us<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    use serde::de::Error;
    let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
    let text = raw.get();
    if let Some(v) = scan_gaps(text.as_bytes()) {
        return Ok(v);
    }
    serde_json::from_str(text).map_err(|e| D::Error::custom(format!("itl_us: {e}")))
}

/// `[1,2, 3]` as whole numbers that fit 32 bits, in one pass over the bytes; `None` for
/// anything else (a leading zero, a sign, a fraction, an empty item).
fn scan_gaps(b: &[u8]) -> Option<Vec<u32>> {
    let inner = b.trim_ascii().strip_prefix(b"[")?.strip_suffix(b"]")?;
    let (n, mut i) = (inner.len(), 0);
    let skip_spaces = |mut i: usize| {
        while i < n && inner[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut out = Vec::with_capacity(n / 5 + 1);
    if skip_spaces(0) == n {
        return Some(out);
    }
    loop {
        i = skip_spaces(i);
        let (start, mut v) = (i, 0u64);
        while i < n {
            let d = inner[i].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v * 10 + u64::from(d);
            i += 1;
        }
        let len = i - start;
        if len == 0 || len > 10 || (len > 1 && inner[start] == b'0') {
            return None;
        }
        out.push(u32::try_from(v).ok()?);
        i = skip_spaces(i);
        if i == n {
            return Some(out);
        }
        if inner[i] != b',' {
            return None;
        }
        i += 1;
    }
}

/// Schema 1's gaps (milliseconds, written from whole microseconds) as microseconds.
fn gaps_ms_as_us<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u32>>, D::Error> {
    use serde::de::Error;
    let ms: Vec<f64> = Vec::deserialize(d)?;
    ms.iter()
        .map(|&g| {
            let us = (g * 1e3).round();
            if (0.0..=f64::from(u32::MAX)).contains(&us) {
                Ok(us as u32)
            } else {
                Err(D::Error::custom(format!("itl_ms: {g} ms is not a gap between tokens")))
            }
        })
        .collect::<Result<Vec<u32>, _>>()
        .map(Some)
}

impl Serialize for RequestRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RequestRecord::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for RequestRecord {
    /// Either spelling of the gaps, never both.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut r = RequestRecord::deserialize(d)?;
        if let Some(g) = r.legacy_itl_ms.take() {
            if !r.itl_us.is_empty() {
                return Err(D::Error::custom(
                    "both itl_us and itl_ms (schema 1): a record has one spelling of its gaps",
                ));
            }
            r.itl_us = g;
        }
        Ok(r)
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_one(v: &u32) -> bool {
    *v == 1
}

/// The longest a run's offsets may reach, either side of the measured phase's start (31
/// days): what a record read back from a file may hold. A larger offset (a corrupt file)
/// would ask the time series for more seconds than memory holds.
pub const MAX_OFFSET_MS: f64 = 31.0 * 86_400_000.0;

impl RequestRecord {
    /// Whether every offset is a finite time within [`MAX_OFFSET_MS`] of the start; else
    /// the first field that is not, and why.
    pub fn check_offsets(&self) -> Result<(), (&'static str, String)> {
        for (field, v) in [
            ("intended_offset_ms", Some(self.intended_offset_ms)),
            ("started_offset_ms", Some(self.started_offset_ms)),
            ("sent_offset_ms", self.sent_offset_ms),
            ("first_token_offset_ms", self.first_token_offset_ms),
            ("end_offset_ms", Some(self.end_offset_ms)),
        ] {
            if let Some(v) = v.filter(|v| v.is_nan() || v.abs() > MAX_OFFSET_MS) {
                return Err((
                    field,
                    format!("{v:e} ms is not a time within 31 days of the run's start"),
                ));
            }
        }
        Ok(())
    }

    /// Move every offset `ms` later (a shard's records onto the clock of a merged run: its
    /// start after the earliest shard's), kept to the microsecond as records are. Durations
    /// do not change.
    pub fn shift_offsets(&mut self, ms: f64) {
        let by = |v: f64| ((v + ms) * 1e3).round() / 1e3;
        self.intended_offset_ms = by(self.intended_offset_ms);
        self.started_offset_ms = by(self.started_offset_ms);
        self.sent_offset_ms = self.sent_offset_ms.map(by);
        self.first_token_offset_ms = self.first_token_offset_ms.map(by);
        self.end_offset_ms = by(self.end_offset_ms);
    }

    /// Derive the record of one request. This is the definition of every per-request metric.
    pub fn from_observation(o: Observation) -> Self {
        let ok = o.error.is_none();
        let sent = o.sent;
        let ttft = sent.zip(o.first_token).map(|(s, f)| ms_between(s, f));
        let ttfo = sent.zip(o.first_output).map(|(s, f)| ms_between(s, f));
        let e2e = sent.filter(|_| ok).map(|s| ms_between(s, o.end));
        let (output_tokens, output_token_source) =
            match (o.usage.and_then(|u| u.completion_tokens), o.tokenizer_output_tokens) {
                (Some(n), _) => (Some(n), TokenSource::Usage),
                (None, Some(n)) => (Some(n), TokenSource::Tokenizer),
                (None, None) => (Some(u64::from(o.token_chunks)), TokenSource::Chunks),
            };
        let (input_tokens, input_token_source) = match o.usage.and_then(|u| u.prompt_tokens) {
            Some(n) => (Some(n), TokenSource::Usage),
            None => (Some(u64::from(o.planned_input_tokens)), TokenSource::Planned),
        };
        let tpot = match (e2e, ttft, output_tokens) {
            (Some(e), Some(t), Some(n)) if n > 1 && o.streamed => {
                Some(((e - t) / (n - 1) as f64 * 1e3).round() / 1e3)
            }
            _ => None,
        };
        let conn = o.connection;
        Self {
            id: o.id,
            session_id: o.session_id,
            turn: o.turn,
            intended_offset_ms: ms(o.intended),
            started_offset_ms: ms(o.started),
            sent_offset_ms: sent.map(ms),
            first_token_offset_ms: o.first_token.map(ms),
            end_offset_ms: ms(o.end),
            ttft_ms: ttft,
            ttfo_ms: ttfo,
            tpot_ms: tpot,
            e2e_ms: e2e,
            ttft_from_intended_ms: o.first_token.map(|f| ms_between(o.intended, f)),
            e2e_from_intended_ms: ok.then(|| ms_between(o.intended, o.end)),
            queue_ms: sent
                .map_or_else(|| ms_between(o.started, o.end), |s| ms_between(o.started, s)),
            schedule_lag_ms: ms_between(o.intended, o.started),
            itl_us: o.itl_us,
            legacy_itl_ms: None,
            token_chunks: o.token_chunks,
            input_tokens,
            input_token_source,
            output_tokens: if ok { output_tokens } else { Some(u64::from(o.token_chunks)) },
            output_token_source: if ok { output_token_source } else { TokenSource::Chunks },
            cached_tokens: o.usage.and_then(|u| u.cached_tokens),
            cached_tokens_estimate: o.cached_tokens_estimate,
            planned_input_tokens: o.planned_input_tokens,
            planned_output_tokens: o.planned_output_tokens,
            streamed: o.streamed,
            status: o.status,
            finish_reason: o.finish_reason,
            connection_reused: conn.map(|c| c.reused),
            connect_ms: conn.and_then(|c| c.connect).map(ms),
            tls_ms: conn.and_then(|c| c.tls).map(ms),
            stale_connection_retry: conn.is_some_and(|c| c.retried_stale),
            error_kind: o.error.as_ref().map(|e| e.kind().to_owned()),
            error: o.error.as_ref().map(ToString::to_string),
            text: o.text,
            attempts: o.attempts.max(1),
            retry_errors: o.retry_errors,
            response_headers: o.response_headers.into_iter().collect(),
            read_lag_ms: (o.read_lag_frames > 0).then(|| ms(o.read_lag_sum / o.read_lag_frames)),
            turnaround_ms: o.turnaround.map(ms),
            release_ms: o.release.map(ms),
            server_prefill_ms: o.server_timing.and_then(|t| t.prompt_ms).map(round3),
            server_tpot_ms: o.server_timing.and_then(|t| t.per_token_ms).map(round3),
            server_ttft_ms: o.server_timing.and_then(|t| t.first_token_ms).map(round3),
            server_e2e_ms: o.server_timing.and_then(|t| t.total_ms).map(round3),
            inputs: (!o.kind.generates()).then_some(o.inputs),
            audio_s: o.audio_s.map(round3),
        }
    }

    /// E2E per input of a request that embeds or ranks several (docs/METRICS.md, E2E per
    /// input): its E2E divided by its inputs; none for generation.
    pub fn per_input_ms(&self) -> Option<f64> {
        let n = self.inputs.filter(|n| *n > 0)?;
        Some(self.e2e_ms? / f64::from(n))
    }

    /// The request's mean gap between token-bearing chunks (ms): the one definition of
    /// `itl_mean` (the per-request mean ITL; `itl` is every gap, pooled over the run).
    /// `None` without gaps (one chunk, or not streamed).
    pub fn itl_mean_ms(&self) -> Option<f64> {
        (!self.itl_us.is_empty()).then(|| {
            self.itl_us.iter().map(|&g| u64::from(g)).sum::<u64>() as f64
                / self.itl_us.len() as f64
                / 1e3
        })
    }

    /// The gaps between token-bearing chunks in milliseconds, in order.
    pub fn itl_ms(&self) -> impl ExactSizeIterator<Item = f64> + '_ {
        self.itl_us.iter().map(|&g| f64::from(g) / 1e3)
    }

    /// Whether the request completed.
    pub fn ok(&self) -> bool {
        self.error_kind.is_none()
    }

    /// Cached prompt tokens and where the count came from: the server's
    /// `usage.prompt_tokens_details.cached_tokens`, else the client's estimate.
    pub fn cached(&self) -> Option<(u64, CachedSource)> {
        match (self.cached_tokens, self.cached_tokens_estimate) {
            (Some(n), _) => Some((n, CachedSource::Usage)),
            (None, Some(n)) => Some((n, CachedSource::Estimate)),
            (None, None) => None,
        }
    }

    /// Whether the output length equals the planned one (`max_tokens`).
    pub fn output_matches_plan(&self) -> bool {
        self.ok()
            && self.planned_output_tokens > 0
            && self.output_tokens == Some(u64::from(self.planned_output_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn definitions() {
        let o = Observation {
            id: 1,
            intended: d(100),
            started: d(102),
            sent: Some(d(110)),
            first_token: Some(d(160)),
            first_output: Some(d(170)),
            end: d(260),
            itl_us: vec![10_000; 10],
            token_chunks: 11,
            usage: Some(Usage::tokens(Some(7), Some(11))),
            streamed: true,
            ..Observation::default()
        };
        let r = RequestRecord::from_observation(o.clone());
        assert_eq!(r.ttft_ms, Some(50.0));
        assert_eq!(r.ttfo_ms, Some(60.0));
        assert_eq!(r.e2e_ms, Some(150.0));
        assert_eq!(r.tpot_ms, Some(10.0)); // (150 - 50) / (11 - 1)
        assert_eq!(r.schedule_lag_ms, 2.0);
        assert_eq!(r.queue_ms, 8.0);
        assert_eq!(r.ttft_from_intended_ms, Some(60.0));
        assert_eq!(r.e2e_from_intended_ms, Some(160.0));
        assert_eq!((r.output_tokens, r.output_token_source), (Some(11), TokenSource::Usage));
        let r = RequestRecord::from_observation(Observation { usage: None, ..o.clone() });
        assert_eq!((r.output_tokens, r.output_token_source), (Some(11), TokenSource::Chunks));
        assert_eq!(r.input_token_source, TokenSource::Planned);
        let r = RequestRecord::from_observation(Observation {
            error: Some(EngineError::Incomplete),
            ..o
        });
        assert!(!r.ok());
        assert_eq!(r.e2e_ms, None);
        assert_eq!(r.ttft_ms, Some(50.0), "partial timings of failed requests are kept");
        assert_eq!(r.error_kind.as_deref(), Some("incomplete"));
    }

    /// Schema 2 writes the gaps as integer microseconds; schema 1's milliseconds read back
    /// to the same record; both spellings at once are refused.
    #[test]
    fn gaps_in_microseconds_and_the_old_spelling() {
        let o = Observation {
            sent: Some(d(1)),
            first_token: Some(d(2)),
            end: d(9),
            itl_us: vec![5_012, 1, 4_294_967_295],
            token_chunks: 4,
            streamed: true,
            ..Observation::default()
        };
        let r = RequestRecord::from_observation(o);
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""itl_us":[5012,1,4294967295]"#), "{line}");
        assert!(!line.contains("itl_ms"), "{line}");
        assert_eq!(serde_json::from_str::<RequestRecord>(&line).unwrap(), r);
        let old = line
            .replace(r#""itl_us":[5012,1,4294967295]"#, r#""itl_ms":[5.012,0.001,4294967.295]"#);
        assert_eq!(serde_json::from_str::<RequestRecord>(&old).unwrap(), r);
        assert_eq!(r.itl_ms().collect::<Vec<_>>(), vec![5.012, 0.001, 4_294_967.295]);
        let both = line.replace(r#""itl_us""#, r#""itl_ms":[1.0],"itl_us""#);
        let e = serde_json::from_str::<RequestRecord>(&both).unwrap_err().to_string();
        assert!(e.contains("both itl_us and itl_ms"), "{e}");
        let bad = line.replace(r#""itl_us":[5012,1,4294967295]"#, r#""itl_ms":[-3.0]"#);
        assert!(serde_json::from_str::<RequestRecord>(&bad).is_err());
        // the fast reading of the list and serde's agree: spaces, empty, and refusals
        let with = |list: &str| {
            let l = line.replace("[5012,1,4294967295]", list);
            serde_json::from_str::<RequestRecord>(&l).map(|r| r.itl_us).map_err(|e| e.to_string())
        };
        assert_eq!(with(" [ 7 , 0,12 ] "), Ok(vec![7, 0, 12]));
        assert_eq!(with("[]"), Ok(vec![]));
        assert_eq!(with("[ ]"), Ok(vec![]));
        for bad in ["[4294967296]", "[1.5]", "[-1]", "[1e3]", "null", "[\"1\"]", "{}"] {
            let e = with(bad).unwrap_err();
            assert!(e.contains("itl_us"), "{bad}: {e}");
        }
        for not_json in ["[1,,2]", "[01]", "[1"] {
            assert!(with(not_json).is_err(), "{not_json}");
        }
        assert_eq!(scan_gaps(b"[1,2,3]"), Some(vec![1, 2, 3]));
        assert_eq!(scan_gaps(b" [ 0 , 10,4294967295 ]"), Some(vec![0, 10, u32::MAX]));
        for b in [&b"[1,2,3"[..], b"[1,]", b"[,1]", b"[1 2]", b"[01]", b"[4294967296]", b"[1,,2]"] {
            assert_eq!(scan_gaps(b), None, "{}", String::from_utf8_lossy(b));
        }
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(serde_json::from_value::<RequestRecord>(v).unwrap(), r, "from a Value too");
    }
}

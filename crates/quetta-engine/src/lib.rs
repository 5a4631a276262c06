//! The engine trait every Quetta backend implements.
//!
//! This crate is deliberately small and has no HTTP or async-runtime dependency in its
//! public API: an [`Engine`] takes an [`EngineRequest`] and returns a stream of
//! [`TimedEvent`]s. Every event carries the [`Instant`] at which the bytes that completed it
//! arrived, taken *before* those bytes were parsed, and the index of the body frame that
//! carried them.
//!
//! Invariants an implementation must keep (the load generator and the metrics rely on them):
//! - a stream yields at most one `Headers`, at most one `FirstByte`, and ends with exactly one
//!   terminal event: [`EventKind::End`] or [`EventKind::Error`]; no event follows it;
//! - the terminal event goes out as soon as the answer is complete (or failed). A consumer
//!   may poll on until the stream returns `None`, and an adapter may use those polls to
//!   finish its connection (an HTTP body read to its end, so the connection is reused);
//!   it must then return `None` within a bounded time;
//! - timestamps never decrease along a stream;
//! - an event's timestamp is the arrival time of the frame that completed it.
//!
//! What an adapter author gets besides the trait:
//! - [`stream::events`] turns an async block that sends events into an [`EventStream`]
//!   (and [`stream::channel`] a channel), keeping the invariants above for the author: stamps
//!   never go backwards, exactly one terminal event ends the stream;
//! - [`testing::check_contract`] and [`testing::check_engine`] check a stream (or an engine
//!   answering one request) against every rule, for the author's own tests;
//! - constructors ([`Usage::tokens`], [`Delta::text`], [`TimedEvent::new`], ...) so that new
//!   fields do not break adapters; the structs that may grow are `#[non_exhaustive]`;
//! - timeouts: [`Timeouts`] are applied by the load generator around any engine (a stream
//!   that goes silent is ended with [`EngineError::Timeout`]); the connect limit is an
//!   HTTP adapter's own setting, the one phase only it can see.
//!
//! See `examples/echo_engine.rs` for a custom adapter written against this crate alone.

pub mod setting;
pub mod stream;
pub mod testing;
pub mod tool;

use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_core::Stream;
use serde::{Deserialize, Serialize};

/// The stream of timed events an engine returns for one request.
pub type EventStream = Pin<Box<dyn Stream<Item = TimedEvent> + Send + 'static>>;

/// A backend that sends inference requests and reports what came back, timed.
///
/// Implementations must be cheap to share between tasks (`Send + Sync`); the load generator
/// holds one engine behind an `Arc` and calls [`Engine::send`] from many tasks at once.
pub trait Engine: Send + Sync + 'static {
    /// A short name of the backend (`openai-chat`, `sagemaker`, ...), written into results.
    fn name(&self) -> &str;

    /// What its requests ask of the server, which decides what they measure: generation
    /// (the default) has a first token and tokens after it; an embedding or a ranking is one
    /// answer.
    fn kind(&self) -> RequestKind {
        RequestKind::Generate
    }

    /// Send one request. The returned stream must end with `End` or `Error`.
    ///
    /// The request is sent when the stream is first polled, so a caller that records the
    /// send time right before polling measures from the moment the request left its hands.
    fn send(&self, request: EngineRequest) -> EventStream;
}

/// One message part of a chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentPart {
    /// Plain text.
    Text { text: String },
    /// An image, as an `https://` URL or a `data:` URL with base64 content. Serialises in
    /// OpenAI's shape: `{"type": "image_url", "image_url": {"url": ...}}`.
    ImageUrl { image_url: ImageRef },
}

/// Where an image is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    pub url: String,
}

/// The content of a chat message: plain text or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    pub content: MessageContent,
}

impl Message {
    /// A message with plain-text content.
    pub fn text(role: impl Into<String>, text: impl Into<String>) -> Self {
        Self { role: role.into(), content: MessageContent::Text(text.into()) }
    }

    /// The message's text: the text itself, or its text parts joined by spaces (images are
    /// left out).
    pub fn text_content(&self) -> String {
        match &self.content {
            MessageContent::Text(t) => t.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// What a request asks of the server, which decides what it measures (docs/METRICS.md):
/// generation has a first token and tokens after it; an embedding, a ranking or a
/// transcription is one answer to a batch of inputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestKind {
    /// Text generation (chat, completions, Responses, Messages, the engines' generate APIs).
    #[default]
    Generate,
    /// Embeddings or pooled outputs of inputs.
    Embed,
    /// Scores of documents against a query (rerank, score).
    Rank,
    /// Text from audio.
    Transcribe,
}

impl RequestKind {
    /// The kind's name in results (`generate`, `embed`, `rank`, `transcribe`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generate => "generate",
            Self::Embed => "embed",
            Self::Rank => "rank",
            Self::Transcribe => "transcribe",
        }
    }

    /// Whether requests of this kind generate tokens (TTFT, TPOT and ITL apply).
    pub fn generates(self) -> bool {
        matches!(self, Self::Generate | Self::Transcribe)
    }

    /// Whether this is text generation (the default, left out of result files).
    #[allow(clippy::trivially_copy_pass_by_ref)]
    pub fn is_generate(&self) -> bool {
        *self == Self::Generate
    }
}

/// What the model is asked to continue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Prompt {
    /// A chat conversation (chat-completions style endpoints).
    Chat(Vec<Message>),
    /// A raw text prompt (completions style endpoints).
    Text(String),
    /// A prompt given as token ids (completions endpoints of vLLM, SGLang, llama.cpp).
    TokenIds(Vec<u32>),
    /// A batch of texts in one request (embeddings, pooling).
    Inputs(Vec<String>),
    /// A query and the documents to score against it (rerank, score).
    Rank { query: String, documents: Vec<String> },
    /// A recording to transcribe.
    Audio(AudioInput),
}

/// An audio file to transcribe: its bytes (shared, not copied per request), its file name
/// and media type as uploaded, and its length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AudioInput {
    pub data: Arc<[u8]>,
    pub file_name: String,
    /// `audio/wav`, `audio/flac`, ...
    pub mime: String,
    /// Seconds of audio (from its header).
    pub seconds: f64,
    /// A prompt to guide the transcription (Whisper's `prompt`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

impl Prompt {
    /// Seconds of audio the request carries (a transcription's recording).
    pub fn audio_seconds(&self) -> Option<f64> {
        match self {
            Prompt::Audio(a) => Some(a.seconds),
            _ => None,
        }
    }

    /// How many inputs the request carries: the texts of a batch, the documents of a
    /// ranking, else one.
    pub fn input_count(&self) -> u32 {
        let n = match self {
            Prompt::Inputs(v) => v.len(),
            Prompt::Rank { documents, .. } => documents.len(),
            _ => 1,
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// Sampling parameters; `None` leaves the server's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
}

/// Settings every request of a run shares (sampling, extra body fields and headers): built
/// once per run and shared, never copied into each request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestParams {
    pub sampling: Sampling,
    /// Extra top-level JSON body fields, merged over the adapter's own.
    pub extra_body: BTreeMap<String, serde_json::Value>,
    /// Extra HTTP headers (name, value).
    pub extra_headers: Vec<(String, String)>,
}

/// A backend-neutral inference request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EngineRequest {
    /// Unique id of this request within a run.
    pub request_id: u64,
    /// The session this request belongs to, if any (multi-turn runs; sticky routing).
    pub session_id: Option<String>,
    pub prompt: Prompt,
    /// Upper bound on generated tokens.
    pub max_tokens: Option<u32>,
    /// Ask the server to keep generating past end-of-sequence (vLLM, SGLang, llama.cpp).
    pub ignore_eos: bool,
    /// Ask the server to generate at least this many tokens (vLLM, SGLang).
    pub min_tokens: Option<u32>,
    /// Stream the response (the default); when false, TTFT equals E2E.
    pub stream: bool,
    /// Keep the text of deltas in the events. Off on the load-generation hot path unless a
    /// consumer (multi-turn history, correctness checks) needs it; an adapter must fill
    /// [`Delta::text`] exactly when this is set.
    pub capture_text: bool,
    /// Sampling, extra body fields and extra headers, shared by the run's requests.
    pub params: Arc<RequestParams>,
}

impl EngineRequest {
    /// A streaming request with defaults for everything but the prompt.
    pub fn new(request_id: u64, prompt: Prompt) -> Self {
        Self {
            request_id,
            session_id: None,
            prompt,
            max_tokens: None,
            ignore_eos: false,
            min_tokens: None,
            stream: true,
            capture_text: false,
            params: Arc::default(),
        }
    }

    /// The run's shared settings (sampling, extra body, extra headers).
    pub fn with_params(mut self, params: Arc<RequestParams>) -> Self {
        self.params = params;
        self
    }

    /// Sampling parameters (shared by the run's requests).
    pub fn sampling(&self) -> &Sampling {
        &self.params.sampling
    }
}

/// One event of a response, stamped when the bytes that completed it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedEvent {
    /// Arrival time of the body frame that completed this event (before any parsing).
    pub at: Instant,
    /// Index of that body frame (0 = first frame of the body). Headers use 0 too.
    pub frame: u64,
    pub kind: EventKind,
}

impl TimedEvent {
    /// An event of frame `frame` whose bytes arrived at `at`.
    pub fn new(at: Instant, frame: u64, kind: EventKind) -> Self {
        Self { at, frame, kind }
    }
}

/// How a connection was obtained for a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The request went over a pooled connection that had served an earlier request.
    pub reused: bool,
    /// TCP connect time of a new connection.
    pub connect: Option<Duration>,
    /// TLS handshake time of a new connection (after TCP connect).
    pub tls: Option<Duration>,
    /// HTTP/2 was used.
    pub http2: bool,
    /// The first attempt went over a pooled connection the server had already closed
    /// (it failed before any response byte) and the request was sent again on a new
    /// connection; the time of both attempts is in the request's latency.
    #[serde(default)]
    pub retried_stale: bool,
}

impl ConnectionInfo {
    /// A pooled connection that served an earlier request.
    pub fn reused() -> Self {
        Self { reused: true, ..Self::default() }
    }

    /// A new connection: its TCP connect and TLS handshake times.
    pub fn new_connection(connect: Option<Duration>, tls: Option<Duration>) -> Self {
        Self { connect, tls, ..Self::default() }
    }
}

/// A piece of generated output.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delta {
    /// Number of bytes of text in this delta (known even when the text is not captured).
    pub bytes: u32,
    /// The text, when the request asked for `capture_text`.
    pub text: Option<String>,
}

impl Delta {
    /// A delta of `text`, kept when `capture` (the request's `capture_text`) is set.
    pub fn of(text: &str, capture: bool) -> Self {
        Self {
            bytes: u32::try_from(text.len()).unwrap_or(u32::MAX),
            text: capture.then(|| text.to_owned()),
        }
    }

    /// A delta whose text is kept.
    pub fn text(text: impl Into<String>) -> Self {
        let text = text.into();
        Self { bytes: u32::try_from(text.len()).unwrap_or(u32::MAX), text: Some(text) }
    }

    /// A delta of `bytes` bytes whose text is not kept.
    pub fn bytes(bytes: u32) -> Self {
        Self { bytes, text: None }
    }
}

/// The server's own timing of one request, where it reports one (llama.cpp's `timings`,
/// Bedrock's `latencyMs` and invocation metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServerTiming {
    /// Time the server spent on the prompt (llama.cpp: `prompt_ms`; with batched prefill it
    /// covers the whole batch the prompt was processed in).
    pub prompt_ms: Option<f64>,
    /// Prompt tokens the server processed (not served from its cache).
    pub prompt_n: Option<u64>,
    /// The server's time per generated token (llama.cpp: `predicted_per_token_ms`).
    pub per_token_ms: Option<f64>,
    /// Tokens the server generated.
    pub predicted_n: Option<u64>,
    /// The service's time to the answer's first byte (Bedrock: `firstByteLatency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_ms: Option<f64>,
    /// The service's time for the whole request (Bedrock: `latencyMs`, `invocationLatency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<f64>,
}

impl ServerTiming {
    /// A timing with the prompt time and the per-token time.
    pub fn new(prompt_ms: Option<f64>, per_token_ms: Option<f64>) -> Self {
        Self { prompt_ms, per_token_ms, ..Self::default() }
    }

    /// A service's latencies: to the first byte and for the whole request.
    pub fn latency(first_token_ms: Option<f64>, total_ms: Option<f64>) -> Self {
        Self { first_token_ms, total_ms, ..Self::default() }
    }

    /// The same timing with the token counts.
    pub fn with_counts(mut self, prompt_n: Option<u64>, predicted_n: Option<u64>) -> Self {
        self.prompt_n = prompt_n;
        self.predicted_n = predicted_n;
        self
    }
}

/// Token counts reported by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when the server reports it.
    pub cached_tokens: Option<u64>,
    /// Reasoning tokens, when the server reports them separately.
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Prompt and completion token counts, either of which may be unknown.
    pub fn tokens(prompt: Option<u64>, completion: Option<u64>) -> Self {
        Self { prompt_tokens: prompt, completion_tokens: completion, ..Self::default() }
    }

    /// The same counts with the prompt tokens the server served from its prefix cache.
    pub fn with_cached(mut self, cached: Option<u64>) -> Self {
        self.cached_tokens = cached;
        self
    }

    /// The same counts with the reasoning tokens the server reported apart.
    pub fn with_reasoning(mut self, reasoning: Option<u64>) -> Self {
        self.reasoning_tokens = reasoning;
        self
    }
}

/// What an event says.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// The request's first byte was handed to the kernel (the write syscall that carried it
    /// began at `at`). Optional: an adapter that cannot see its socket omits it, and the
    /// caller's own send stamp stands. When present it comes before `Headers`.
    RequestWritten,
    /// Response headers arrived.
    Headers { status: u16, connection: ConnectionInfo, headers: Vec<(String, String)> },
    /// The connection a request went over when it failed before its response headers
    /// (which carry it otherwise). Optional; comes just before the `Error`.
    Connection(ConnectionInfo),
    /// The first body byte arrived.
    FirstByte,
    /// A chunk with generated answer text.
    Content(Delta),
    /// A chunk with reasoning text (`reasoning_content` / `reasoning`).
    Reasoning(Delta),
    /// A chunk with a tool-call delta.
    ToolCall(Delta),
    /// A chunk that carries no token: role-only, empty content, or a bare finish reason.
    Empty,
    /// Token usage reported by the server.
    Usage(Usage),
    /// The server's own timing of the request (llama.cpp's `timings`).
    ServerTiming(ServerTiming),
    /// The response ended normally.
    End { finish_reason: Option<String>, streamed: bool },
    /// The response failed. Terminal.
    Error(EngineError),
}

impl EventKind {
    /// Whether this event carries generated tokens (content, reasoning or tool call).
    pub fn is_token(&self) -> bool {
        matches!(self, Self::Content(_) | Self::Reasoning(_) | Self::ToolCall(_))
    }

    /// Whether this event ends the stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::End { .. } | Self::Error(_))
    }
}

/// The phase of a request a timeout applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// Establishing the TCP (and TLS) connection.
    Connect,
    /// From send to the first event of the answer (its response headers).
    FirstByte,
    /// From send to the first generated token.
    FirstToken,
    /// Between two consecutive events, once the answer started.
    Idle,
    /// The whole request.
    Total,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::FirstByte => "first_byte",
            Self::FirstToken => "first_token",
            Self::Idle => "idle",
            Self::Total => "total",
        })
    }
}

/// Per-phase time limits of a request, applied by the load generator around any engine
/// (`quetta_loadgen::WithTimeouts`). `None` means no limit. The connect limit is not here:
/// it is an HTTP adapter's own setting (`connect_timeout`), the one phase only it sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub first_byte: Option<Duration>,
    pub first_token: Option<Duration>,
    pub idle: Option<Duration>,
    pub total: Option<Duration>,
}

/// Why a request failed. Terminal; carried in [`EventKind::Error`].
///
/// Messages never contain credentials: adapters must not put request headers into them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The TCP connection could not be established.
    #[error("connect error: {0}")]
    Connect(String),
    /// The TLS handshake failed (including certificate verification).
    #[error("TLS error: {0}")]
    Tls(String),
    /// The server answered with a non-success HTTP status.
    #[error("HTTP {status}: {body_excerpt}")]
    HttpStatus { status: u16, body_excerpt: String, retry_after: Option<String> },
    /// A phase took longer than its limit.
    #[error("timeout in phase {0}")]
    Timeout(TimeoutPhase),
    /// The response violated the streaming protocol (bad JSON, bad UTF-8, oversized event).
    #[error("stream protocol error: {0}")]
    Protocol(String),
    /// The server sent an error object inside a successful stream.
    #[error("server error in stream: {0}")]
    ServerError(String),
    /// The connection broke while the response was being read.
    #[error("connection closed: {0}")]
    ConnectionClosed(String),
    /// The stream ended without its end marker (e.g. no `data: [DONE]`).
    #[error("stream ended without end marker")]
    Incomplete,
    /// The request could not be built or sent (bad URL, bad header value).
    #[error("request error: {0}")]
    Request(String),
    /// The caller cancelled the request.
    #[error("cancelled")]
    Cancelled,
    /// A managed provider rejected the credentials, token or signature (SageMaker's
    /// `InvalidSignatureException`, a 401/403 from Vertex AI).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// A managed provider throttled the request (SageMaker `ThrottlingException`, Vertex
    /// `RESOURCE_EXHAUSTED`).
    #[error("throttled: {0}")]
    Throttled(String),
    /// The model container failed on the request (SageMaker `ModelError`,
    /// `ModelStreamError`).
    #[error("model error: {0}")]
    Model(String),
    /// The provider rejected the request as invalid (SageMaker `ValidationError`, Vertex
    /// `INVALID_ARGUMENT`).
    #[error("validation error: {0}")]
    Validation(String),
    /// The provider's stream failed mid-response (SageMaker `InternalStreamFailure`).
    #[error("stream failure: {0}")]
    StreamFailure(String),
}

impl EngineError {
    /// A stable, machine-readable label for the error's kind (used as `error_kind` in
    /// results; documented in docs/METRICS.md).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Connect(_) => "connect",
            Self::Tls(_) => "tls",
            Self::HttpStatus { status: 429, .. } => "http_429",
            Self::HttpStatus { status, .. } if *status >= 500 => "http_5xx",
            Self::HttpStatus { .. } => "http_4xx",
            Self::Timeout(TimeoutPhase::Connect) => "timeout_connect",
            Self::Timeout(TimeoutPhase::FirstByte) => "timeout_first_byte",
            Self::Timeout(TimeoutPhase::FirstToken) => "timeout_first_token",
            Self::Timeout(TimeoutPhase::Idle) => "timeout_idle",
            Self::Timeout(TimeoutPhase::Total) => "timeout_total",
            Self::Protocol(_) => "protocol",
            Self::ServerError(_) => "server_error",
            Self::ConnectionClosed(_) => "connection_closed",
            Self::Incomplete => "incomplete",
            Self::Request(_) => "request",
            Self::Cancelled => "cancelled",
            Self::Auth(_) => "auth",
            Self::Throttled(_) => "throttled",
            Self::Model(_) => "model_error",
            Self::Validation(_) => "validation",
            Self::StreamFailure(_) => "stream_failure",
        }
    }
}

/// A stream that yields a fixed list of events, for engines that compute their whole answer
/// at once (fakes, replays, tests).
#[derive(Debug)]
pub struct VecStream {
    events: std::vec::IntoIter<TimedEvent>,
}

impl VecStream {
    pub fn new(events: Vec<TimedEvent>) -> Self {
        Self { events: events.into_iter() }
    }
}

impl Stream for VecStream {
    type Item = TimedEvent;
    fn poll_next(
        mut self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<TimedEvent>> {
        std::task::Poll::Ready(self.events.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_are_distinct_labels() {
        let errs = [
            EngineError::Connect("x".into()),
            EngineError::Tls("x".into()),
            EngineError::HttpStatus { status: 429, body_excerpt: String::new(), retry_after: None },
            EngineError::HttpStatus { status: 503, body_excerpt: String::new(), retry_after: None },
            EngineError::HttpStatus { status: 400, body_excerpt: String::new(), retry_after: None },
            EngineError::Timeout(TimeoutPhase::Idle),
            EngineError::Protocol("x".into()),
            EngineError::ServerError("x".into()),
            EngineError::ConnectionClosed("x".into()),
            EngineError::Incomplete,
            EngineError::Cancelled,
            EngineError::Auth("x".into()),
            EngineError::Throttled("x".into()),
            EngineError::Model("x".into()),
            EngineError::Validation("x".into()),
            EngineError::StreamFailure("x".into()),
        ];
        let mut kinds: Vec<_> = errs.iter().map(EngineError::kind).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), errs.len());
    }

    #[test]
    fn chat_message_serialises_as_openai_expects() {
        let m = Message {
            role: "user".into(),
            content: MessageContent::Parts(vec![
                ContentPart::Text { text: "what is this".into() },
                ContentPart::ImageUrl {
                    image_url: ImageRef { url: "data:image/png;base64,AAAA".into() },
                },
            ]),
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["content"][0]["type"], "text");
        assert_eq!(v["content"][1]["type"], "image_url");
        assert_eq!(v["content"][1]["image_url"]["url"], "data:image/png;base64,AAAA");
        assert_eq!(m.text_content(), "what is this");
        assert_eq!(Message::text("user", "hi").content, MessageContent::Text("hi".into()));
    }
}

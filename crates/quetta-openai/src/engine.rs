use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_core::Stream;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, Uri};
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use quetta_engine::{
    Engine, EngineError, EngineRequest, EventKind, EventStream, Message, Prompt, TimedEvent,
    TimeoutPhase, Timeouts,
};
use serde_json::{json, Map, Value};
use tokio::time::Sleep;

use crate::connect::{ConnMeta, ConnectError, TimedConnector};
use crate::decode::{excerpt, ChunkDecoder};
use crate::sse::SseParser;
use crate::BuildError;

/// Which OpenAI API the adapter speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completions,
}

/// An API key. Its `Debug` and `Display` never show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
    /// The key itself, for building the header. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Configuration of an [`OpenAiEngine`].
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Server root, with or without a trailing `/v1` (`http://127.0.0.1:8000`).
    pub base_url: String,
    pub api: Api,
    /// Overrides the path derived from `api` (e.g. `/openai/v1/chat/completions`).
    pub endpoint_path: Option<String>,
    pub model: String,
    /// Sent as `Authorization: Bearer`.
    pub api_key: Option<ApiKey>,
    /// Use HTTP/2 over cleartext with prior knowledge (https negotiates it by ALPN anyway).
    pub http2: bool,
    pub timeouts: Timeouts,
    /// Largest single SSE event accepted; a larger one is a protocol error.
    pub max_event_bytes: usize,
    /// Send `stream_options.include_usage`.
    pub include_usage: bool,
    /// Accept any TLS certificate (prints a warning in the binaries).
    pub insecure: bool,
    /// An extra CA certificate (PEM) to trust.
    pub ca_cert: Option<PathBuf>,
    /// Header that carries the session id (sticky routing), if any.
    pub session_header: Option<String>,
    /// Body field that carries the session id, if any.
    pub session_body_field: Option<String>,
    /// Header that carries Quetta's request id (the simulator uses it to join records).
    pub request_id_header: Option<String>,
    /// Name of the output-length field (`max_tokens`, or `max_completion_tokens`).
    pub max_tokens_field: String,
    /// Response headers to copy into the `Headers` event (lower-case names or prefixes
    /// ending in `*`, e.g. `x-litellm-*`).
    pub record_headers: Vec<String>,
}

impl OpenAiConfig {
    /// Defaults for a server at `base_url`.
    pub fn new(base_url: impl Into<String>, api: Api, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api,
            endpoint_path: None,
            model: model.into(),
            api_key: None,
            http2: false,
            timeouts: Timeouts::default(),
            max_event_bytes: crate::sse::DEFAULT_MAX_EVENT_BYTES,
            include_usage: true,
            insecure: false,
            ca_cert: None,
            session_header: Some("x-session-id".into()),
            session_body_field: Some("user".into()),
            request_id_header: Some("x-quetta-request-id".into()),
            max_tokens_field: "max_tokens".into(),
            record_headers: Vec::new(),
        }
    }
}

type HttpClient = Client<TimedConnector, Full<Bytes>>;

/// The OpenAI-compatible engine. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct OpenAiEngine {
    client: HttpClient,
    uri: Uri,
    auth: Option<HeaderValue>,
    cfg: OpenAiConfig,
    session_header: Option<HeaderName>,
    request_id_header: Option<HeaderName>,
    name: &'static str,
}

/// Parse and check a base URL; join it with `path` (`/v1` is not doubled).
pub(crate) fn join_url(base: &str, path: &str) -> Result<Uri, BuildError> {
    let bad = |reason: &str| BuildError::Url { url: base.to_owned(), reason: reason.to_owned() };
    let base = base.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(bad("it must start with http:// or https://"));
    }
    let path = if base.ends_with("/v1") { path.strip_prefix("/v1").unwrap_or(path) } else { path };
    let uri: Uri =
        format!("{base}{path}").parse().map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    if uri.host().is_none() {
        return Err(bad("no host"));
    }
    Ok(uri)
}

/// A client with default settings (TLS verified unless `insecure`).
pub(crate) fn build_client_for(insecure: bool) -> Result<HttpClient, BuildError> {
    let mut cfg = OpenAiConfig::new("http://localhost", Api::Chat, "");
    cfg.insecure = insecure;
    build_client(&cfg)
}

fn build_client(cfg: &OpenAiConfig) -> Result<HttpClient, BuildError> {
    let tls = crate::tls::client_config(cfg.insecure, cfg.ca_cert.as_deref(), true)?;
    let connector = TimedConnector {
        tls: Some(tokio_rustls::TlsConnector::from(Arc::new(tls))),
        connect_timeout: cfg.timeouts.connect,
    };
    let mut b = Client::builder(TokioExecutor::new());
    b.pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(Duration::from_secs(90))
        .timer(TokioTimer::new());
    b.pool_timer(TokioTimer::new());
    // hyper-util would resend some requests on a closed pooled connection silently; the
    // adapter does it itself so every resend is marked in the request's record.
    b.retry_canceled_requests(false);
    if cfg.http2 {
        b.http2_only(true);
    }
    Ok(b.build(connector))
}

impl OpenAiEngine {
    /// Build the engine. Fails on a malformed URL, an unreadable CA file or a bad header.
    pub fn new(cfg: OpenAiConfig) -> Result<Self, BuildError> {
        let path = cfg.endpoint_path.clone().unwrap_or_else(|| {
            match cfg.api {
                Api::Chat => "/v1/chat/completions",
                Api::Completions => "/v1/completions",
            }
            .to_owned()
        });
        let uri = join_url(&cfg.base_url, &path)?;
        let auth = match &cfg.api_key {
            Some(k) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", k.expose()))
                    .map_err(|_| BuildError::Header("authorization (value not shown)".into()))?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let hname = |n: &Option<String>| -> Result<Option<HeaderName>, BuildError> {
            n.as_deref()
                .map(|n| {
                    HeaderName::from_bytes(n.as_bytes())
                        .map_err(|_| BuildError::Header(n.to_owned()))
                })
                .transpose()
        };
        let session_header = hname(&cfg.session_header)?;
        let request_id_header = hname(&cfg.request_id_header)?;
        let client = build_client(&cfg)?;
        let name = match cfg.api {
            Api::Chat => "openai-chat",
            Api::Completions => "openai-completions",
        };
        Ok(Self { client, uri, auth, cfg, session_header, request_id_header, name })
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.cfg
    }

    /// The JSON body for a request (public for tests and `--dry-run`).
    pub fn body(&self, req: &EngineRequest) -> Result<Value, EngineError> {
        let mut b = Map::new();
        b.insert("model".into(), Value::String(self.cfg.model.clone()));
        match (&req.prompt, self.cfg.api) {
            (Prompt::Chat(msgs), Api::Chat) => {
                let msgs =
                    serde_json::to_value(msgs).map_err(|e| EngineError::Request(e.to_string()))?;
                b.insert("messages".into(), msgs);
            }
            (Prompt::Text(t), Api::Chat) => {
                b.insert("messages".into(), json!([{"role": "user", "content": t}]));
            }
            (Prompt::Text(t), Api::Completions) => {
                b.insert("prompt".into(), Value::String(t.clone()));
            }
            (Prompt::TokenIds(ids), Api::Completions) => {
                b.insert("prompt".into(), json!(ids));
            }
            (Prompt::Chat(msgs), Api::Completions) => {
                let text: Vec<String> = msgs.iter().map(Message::text_content).collect();
                b.insert("prompt".into(), Value::String(text.join("\n")));
            }
            (Prompt::TokenIds(_), Api::Chat) => {
                return Err(EngineError::Request(
                    "a prompt given as token ids needs the completions endpoint".into(),
                ))
            }
            (other, _) => {
                return Err(EngineError::Request(format!(
                    "this adapter cannot send a prompt like {other:?}"
                )))
            }
        }
        b.insert("stream".into(), Value::Bool(req.stream));
        if req.stream && self.cfg.include_usage {
            b.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if let Some(n) = req.max_tokens {
            b.insert(self.cfg.max_tokens_field.clone(), json!(n));
        }
        if req.ignore_eos {
            b.insert("ignore_eos".into(), Value::Bool(true));
        }
        if let Some(n) = req.min_tokens {
            b.insert("min_tokens".into(), json!(n));
        }
        if let Some(t) = req.sampling.temperature {
            b.insert("temperature".into(), json!(t));
        }
        if let Some(p) = req.sampling.top_p {
            b.insert("top_p".into(), json!(p));
        }
        if let Some(s) = req.sampling.seed {
            b.insert("seed".into(), json!(s));
        }
        if let (Some(sid), Some(field)) = (&req.session_id, &self.cfg.session_body_field) {
            b.insert(field.clone(), Value::String(sid.clone()));
        }
        for (k, v) in &req.extra_body {
            b.insert(k.clone(), v.clone());
        }
        Ok(Value::Object(b))
    }

    fn build_request(&self, req: &EngineRequest) -> Result<Request<Full<Bytes>>, EngineError> {
        let body = serde_json::to_vec(&self.body(req)?)
            .map_err(|e| EngineError::Request(e.to_string()))?;
        let mut r = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(
                http::header::ACCEPT,
                if req.stream { "text/event-stream" } else { "application/json" },
            );
        if let Some(a) = &self.auth {
            r = r.header(AUTHORIZATION, a.clone());
        }
        if let Some(h) = &self.request_id_header {
            r = r.header(h, req.request_id);
        }
        if let (Some(h), Some(sid)) = (&self.session_header, &req.session_id) {
            r = r.header(h, sid.as_str());
        }
        for (k, v) in &req.extra_headers {
            r = r.header(k.as_str(), v.as_str());
        }
        r.body(Full::new(Bytes::from(body)))
            .map_err(|e| EngineError::Request(format!("cannot build request: {e}")))
    }
}

impl Engine for OpenAiEngine {
    fn name(&self) -> &str {
        self.name
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let built = self.build_request(&request);
        // A copy for one resend if a pooled connection turns out to be closed (cheap: the
        // body is reference-counted).
        let spare = built.as_ref().ok().map(clone_request);
        Box::pin(ResponseStream {
            client: self.client.clone(),
            spare,
            retried_stale: false,
            state: match built {
                Ok(r) => State::Start(r),
                Err(e) => State::Failed(Some(e)),
            },
            timeouts: self.cfg.timeouts,
            sleep: None,
            deadline: None,
            sent: Instant::now(),
            last_frame: Instant::now(),
            first_token_seen: false,
            frame: 0,
            parser: SseParser::new(self.cfg.max_event_bytes),
            decoder: ChunkDecoder::new(request.capture_text),
            pending: VecDeque::with_capacity(4),
            streaming: request.stream,
            body_buf: Vec::new(),
            status: 200,
            retry_after: None,
            end: None,
            finished: false,
            record_headers: self.cfg.record_headers.clone(),
        })
    }
}

enum State {
    Start(Request<Full<Bytes>>),
    Failed(Option<EngineError>),
    Waiting(ResponseFuture),
    Body(Incoming),
    /// Reading the body of an error response.
    ErrorBody(Incoming),
    /// `[DONE]` seen; reading the rest of the body so the connection can be reused.
    Draining(Incoming),
    Done,
}

const MAX_FULL_BODY: usize = 64 << 20;
const MAX_ERROR_BODY: usize = 4096;
/// How long to wait for the end of the body after `[DONE]` (so the connection can be
/// reused) before giving up on it; the `End` event keeps the `[DONE]` frame's time.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

struct ResponseStream {
    client: HttpClient,
    /// A copy of the request for one resend after a stale pooled connection.
    spare: Option<Request<Full<Bytes>>>,
    retried_stale: bool,
    state: State,
    timeouts: Timeouts,
    sleep: Option<Pin<Box<Sleep>>>,
    deadline: Option<(Instant, TimeoutPhase)>,
    sent: Instant,
    last_frame: Instant,
    first_token_seen: bool,
    frame: u64,
    parser: SseParser,
    decoder: ChunkDecoder,
    pending: VecDeque<TimedEvent>,
    streaming: bool,
    body_buf: Vec<u8>,
    status: u16,
    retry_after: Option<String>,
    /// The `End` event, held back while the body drains.
    end: Option<TimedEvent>,
    finished: bool,
    record_headers: Vec<String>,
}

pub(crate) fn connect_error(e: &hyper_util::client::legacy::Error) -> EngineError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(ce) = s.downcast_ref::<ConnectError>() {
            return match ce {
                ConnectError::Tcp(m) => EngineError::Connect(m.clone()),
                ConnectError::Tls(m) => EngineError::Tls(m.clone()),
                ConnectError::Timeout => EngineError::Timeout(TimeoutPhase::Connect),
            };
        }
        if let Some(he) = s.downcast_ref::<hyper::Error>() {
            return body_error(he, "before the response headers");
        }
        src = s.source();
    }
    if e.is_connect() {
        EngineError::Connect(e.to_string())
    } else {
        EngineError::ConnectionClosed(format!("{e}"))
    }
}

fn body_error(e: &hyper::Error, when: &str) -> EngineError {
    if e.is_parse() {
        EngineError::Protocol(format!("{e} ({when})"))
    } else {
        let mut msg = e.to_string();
        if let Some(s) = std::error::Error::source(e) {
            msg = format!("{msg}: {s}");
        }
        EngineError::ConnectionClosed(format!("{msg} ({when})"))
    }
}

fn clone_request(r: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut c = Request::new(r.body().clone());
    *c.method_mut() = r.method().clone();
    *c.uri_mut() = r.uri().clone();
    *c.headers_mut() = r.headers().clone();
    *c.version_mut() = r.version();
    c
}

fn header_matches(name: &str, wanted: &[String]) -> bool {
    wanted.iter().any(|w| match w.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == w,
    })
}

impl ResponseStream {
    fn emit(&mut self, at: Instant, kind: EventKind) {
        self.pending.push_back(TimedEvent { at, frame: self.frame, kind });
    }

    fn fail(&mut self, at: Instant, e: EngineError) {
        self.emit(at, EventKind::Error(e));
        self.state = State::Done;
        self.finished = true;
    }

    /// Recompute the nearest deadline of the current phase; reset the timer if it moved.
    fn arm(&mut self) {
        let t = &self.timeouts;
        let mut best: Option<(Instant, TimeoutPhase)> = None;
        let mut consider = |d: Option<Duration>, from: Instant, phase: TimeoutPhase| {
            if let Some(d) = d {
                let at = from + d;
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, phase));
                }
            }
        };
        consider(t.total, self.sent, TimeoutPhase::Total);
        match self.state {
            State::Waiting(_) => consider(t.first_byte, self.sent, TimeoutPhase::FirstByte),
            State::Body(_) | State::ErrorBody(_) => {
                consider(t.idle, self.last_frame, TimeoutPhase::Idle);
            }
            State::Draining(_) => {
                let grace = t.idle.map_or(DRAIN_GRACE, |i| i.min(DRAIN_GRACE));
                consider(Some(grace), self.last_frame, TimeoutPhase::Idle);
            }
            _ => {}
        }
        if !self.first_token_seen && matches!(self.state, State::Waiting(_) | State::Body(_)) {
            consider(t.first_token, self.sent, TimeoutPhase::FirstToken);
        }
        if best.map(|b| b.0) == self.deadline.map(|d| d.0) {
            self.deadline = best;
            return;
        }
        self.deadline = best;
        match (best, self.sleep.as_mut()) {
            (Some((at, _)), Some(s)) => s.as_mut().reset(at.into()),
            (Some((at, _)), None) => {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(at.into())));
            }
            (None, _) => {}
        }
    }

    /// Poll the timer; on expiry, fail with the phase's timeout.
    fn poll_timeout(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(s), Some((_, phase))) = (self.sleep.as_mut(), self.deadline) else {
            return false;
        };
        if s.as_mut().poll(cx).is_ready() {
            if matches!(self.state, State::Draining(_)) {
                // The answer is complete; only the connection's tail is missing.
                self.state = State::Done;
                self.finished = true;
                if let Some(end) = self.end.take() {
                    self.pending.push_back(end);
                }
            } else {
                self.fail(Instant::now(), EngineError::Timeout(phase));
            }
            return true;
        }
        false
    }

    fn on_data(&mut self, at: Instant, data: &[u8]) {
        if self.frame == 0 {
            self.emit(at, EventKind::FirstByte);
        }
        if !self.streaming {
            if self.body_buf.len() + data.len() > MAX_FULL_BODY {
                self.fail(
                    at,
                    EngineError::Protocol(format!("response body over {MAX_FULL_BODY} bytes")),
                );
            } else {
                self.body_buf.extend_from_slice(data);
            }
            return;
        }
        let frame = self.frame;
        let Self { parser, decoder, pending, first_token_seen, .. } = self;
        let mut err = None;
        let r = parser.feed(data, |et, d| {
            if err.is_some() || decoder.done {
                return;
            }
            let mut push = |kind: EventKind| {
                if kind.is_token() {
                    *first_token_seen = true;
                }
                pending.push_back(TimedEvent { at, frame, kind });
            };
            if let Err(e) = decoder.on_event(et, d, &mut push) {
                err = Some(e);
            }
        });
        if let Err(e) = r {
            err = Some(EngineError::Protocol(e.to_string()));
        }
        if let Some(e) = err {
            self.fail(at, e);
        } else if self.decoder.done {
            self.end = Some(TimedEvent {
                at,
                frame,
                kind: EventKind::End {
                    finish_reason: self.decoder.finish_reason.clone(),
                    streamed: true,
                },
            });
            let State::Body(body) = std::mem::replace(&mut self.state, State::Done) else {
                unreachable!("on_data is only called while reading the body")
            };
            self.state = State::Draining(body);
        }
    }

    fn on_body_end(&mut self, at: Instant) {
        if !self.streaming {
            let mut events = Vec::new();
            let r = self.decoder.decode_full(&self.body_buf, &mut |k| events.push(k));
            match r {
                Ok(()) => {
                    for k in events {
                        self.emit(at, k);
                    }
                    let fr = self.decoder.finish_reason.clone();
                    self.emit(at, EventKind::End { finish_reason: fr, streamed: false });
                    self.state = State::Done;
                    self.finished = true;
                }
                Err(e) => self.fail(at, e),
            }
            return;
        }
        let frame = self.frame;
        let Self { parser, decoder, pending, .. } = self;
        let mut err = None;
        let r = parser.finish(|et, d| {
            if err.is_some() || decoder.done {
                return;
            }
            if let Err(e) = decoder.on_event(et, d, &mut |kind| {
                pending.push_back(TimedEvent { at, frame, kind });
            }) {
                err = Some(e);
            }
        });
        if let Err(e) = r {
            err = Some(EngineError::Protocol(e.to_string()));
        }
        if let Some(e) = err {
            return self.fail(at, e);
        }
        if self.decoder.done || self.decoder.finish_reason.is_some() {
            let fr = self.decoder.finish_reason.clone();
            self.emit(at, EventKind::End { finish_reason: fr, streamed: true });
            self.state = State::Done;
            self.finished = true;
        } else {
            self.fail(at, EngineError::Incomplete);
        }
    }
}

impl Stream for ResponseStream {
    type Item = TimedEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TimedEvent>> {
        let this = self.get_mut();
        loop {
            if let Some(ev) = this.pending.pop_front() {
                return Poll::Ready(Some(ev));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match &mut this.state {
                State::Start(_) => {
                    let State::Start(req) = std::mem::replace(&mut this.state, State::Done) else {
                        unreachable!()
                    };
                    this.sent = Instant::now();
                    this.state = State::Waiting(this.client.request(req));
                    this.arm();
                }
                State::Failed(e) => {
                    let e = e.take().unwrap_or(EngineError::Cancelled);
                    this.fail(Instant::now(), e);
                }
                State::Waiting(fut) => match Pin::new(fut).poll(cx) {
                    Poll::Ready(Ok(resp)) => {
                        let at = Instant::now();
                        let status = resp.status().as_u16();
                        let mut connection = resp
                            .extensions()
                            .get::<ConnMeta>()
                            .map(ConnMeta::claim)
                            .unwrap_or_default();
                        connection.retried_stale = this.retried_stale;
                        this.spare = None;
                        let headers: Vec<(String, String)> = if this.record_headers.is_empty() {
                            Vec::new()
                        } else {
                            resp.headers()
                                .iter()
                                .filter(|(n, _)| header_matches(n.as_str(), &this.record_headers))
                                .map(|(n, v)| {
                                    (
                                        n.to_string(),
                                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                    )
                                })
                                .collect()
                        };
                        this.status = status;
                        this.retry_after = resp
                            .headers()
                            .get(RETRY_AFTER)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        this.last_frame = at;
                        this.emit(at, EventKind::Headers { status, connection, headers });
                        let body = resp.into_body();
                        this.state = if (200..300).contains(&status) {
                            State::Body(body)
                        } else {
                            State::ErrorBody(body)
                        };
                        this.arm();
                    }
                    Poll::Ready(Err(e)) => {
                        let err = connect_error(&e);
                        // A pooled connection the server closed as we reused it (llama.cpp
                        // closes after every streamed response while advertising keep-alive):
                        // nothing came back, so the server did not take the request. Send it
                        // once more, on a new connection, as Go's net/http does.
                        // Only a connection that had served a request before is ambiguous; a
                        // new connection closed on us is the server's error.
                        let reused = e.connect_info().is_some_and(|c| {
                            let mut x = http::Extensions::new();
                            c.get_extras(&mut x);
                            x.get::<ConnMeta>().is_some_and(ConnMeta::served_before)
                        });
                        // This future resolves at the response headers, so any closed
                        // connection here happened before a response byte.
                        let stale = reused && matches!(err, EngineError::ConnectionClosed(_));
                        match (stale, this.spare.take()) {
                            (true, Some(req)) => {
                                this.retried_stale = true;
                                this.state = State::Waiting(this.client.request(req));
                            }
                            _ => this.fail(Instant::now(), err),
                        }
                    }
                    Poll::Pending => {
                        if !this.poll_timeout(cx) {
                            return Poll::Pending;
                        }
                    }
                },
                State::Body(body) => match Pin::new(body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        let at = Instant::now(); // before any parsing
                        this.last_frame = at;
                        if let Ok(data) = frame.into_data() {
                            this.on_data(at, &data);
                            this.frame += 1;
                        }
                        if !this.finished {
                            this.arm();
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        let err = body_error(&e, "while streaming the body");
                        this.fail(Instant::now(), err);
                    }
                    Poll::Ready(None) => this.on_body_end(Instant::now()),
                    Poll::Pending => {
                        if !this.poll_timeout(cx) {
                            return Poll::Pending;
                        }
                    }
                },
                State::ErrorBody(body) => {
                    let done = match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(Some(Ok(frame))) => {
                            if let Ok(d) = frame.into_data() {
                                let room = MAX_ERROR_BODY.saturating_sub(this.body_buf.len());
                                this.body_buf.extend_from_slice(&d[..d.len().min(room)]);
                            }
                            this.body_buf.len() >= MAX_ERROR_BODY
                        }
                        Poll::Ready(Some(Err(_)) | None) => true,
                        Poll::Pending => {
                            if this.poll_timeout(cx) {
                                continue;
                            }
                            return Poll::Pending;
                        }
                    };
                    if done {
                        let text = String::from_utf8_lossy(&this.body_buf);
                        let body_excerpt = excerpt(text.trim(), 512);
                        let e = EngineError::HttpStatus {
                            status: this.status,
                            body_excerpt,
                            retry_after: this.retry_after.take(),
                        };
                        this.fail(Instant::now(), e);
                    }
                }
                State::Draining(body) => {
                    let done = match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(Some(Ok(_))) => false,
                        Poll::Ready(Some(Err(_)) | None) => true,
                        Poll::Pending => {
                            if this.poll_timeout(cx) {
                                continue;
                            }
                            return Poll::Pending;
                        }
                    };
                    if done {
                        this.state = State::Done;
                        this.finished = true;
                        if let Some(end) = this.end.take() {
                            this.pending.push_back(end);
                        }
                    }
                }
                State::Done => {
                    this.finished = true;
                }
            }
        }
    }
}

/// `GET /v1/models` and return the model ids, for a default `--model`.
pub async fn list_models(
    base_url: &str,
    api_key: Option<&ApiKey>,
    insecure: bool,
    timeout: Duration,
) -> Result<Vec<String>, EngineError> {
    let mut cfg = OpenAiConfig::new(base_url, Api::Chat, "");
    cfg.insecure = insecure;
    let uri = join_url(base_url, "/v1/models").map_err(|e| EngineError::Request(e.to_string()))?;
    let client = build_client(&cfg).map_err(|e| EngineError::Request(e.to_string()))?;
    let mut req = Request::builder().method(Method::GET).uri(uri);
    if let Some(k) = api_key {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", k.expose()))
            .map_err(|_| EngineError::Request("invalid API key characters".into()))?;
        v.set_sensitive(true);
        req = req.header(AUTHORIZATION, v);
    }
    let req = req.body(Full::new(Bytes::new())).map_err(|e| EngineError::Request(e.to_string()))?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| connect_error(&e))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| body_error(&e, "reading /v1/models"))?
            .to_bytes();
        if status != 200 {
            return Err(EngineError::HttpStatus {
                status,
                body_excerpt: excerpt(&String::from_utf8_lossy(&body), 512),
                retry_after: None,
            });
        }
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| EngineError::Protocol(format!("bad /v1/models JSON: {e}")))?;
        Ok(v["data"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default())
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| EngineError::Timeout(TimeoutPhase::Total))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_without_doubling_v1_and_need_a_scheme() {
        assert_eq!(
            join_url("http://h:8000", "/v1/completions").unwrap().to_string(),
            "http://h:8000/v1/completions"
        );
        assert_eq!(
            join_url("http://h:8000/v1/", "/v1/completions").unwrap().to_string(),
            "http://h:8000/v1/completions"
        );
        assert!(matches!(join_url("localhost:8000", "/v1/x"), Err(BuildError::Url { .. })));
    }

    #[test]
    fn api_key_never_shows_in_debug() {
        let mut cfg = OpenAiConfig::new("http://127.0.0.1:1", Api::Chat, "m");
        cfg.api_key = Some(ApiKey::new("sk-canary-123"));
        let e = OpenAiEngine::new(cfg).unwrap();
        assert!(!format!("{e:?}").contains("canary"));
    }

    #[test]
    fn body_has_vllm_fields_and_token_ids() {
        let cfg = OpenAiConfig::new("http://127.0.0.1:1", Api::Completions, "m");
        let e = OpenAiEngine::new(cfg).unwrap();
        let mut r = EngineRequest::new(7, Prompt::TokenIds(vec![1, 2, 3]));
        r.max_tokens = Some(16);
        r.ignore_eos = true;
        r.min_tokens = Some(16);
        r.sampling.seed = Some(42);
        r.session_id = Some("s1".into());
        let b = e.body(&r).unwrap();
        assert_eq!(b["prompt"], json!([1, 2, 3]));
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["min_tokens"], 16);
        assert_eq!(b["seed"], 42);
        assert_eq!(b["max_tokens"], 16);
        assert_eq!(b["user"], "s1");
    }
}

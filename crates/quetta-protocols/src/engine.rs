//! [`HttpEngine`]: one engine for every HTTP protocol of this crate. What differs per
//! protocol is a [`Wire`]: where a request goes, its JSON body, its authentication header
//! and how its answer is decoded; the transport, its timing and everything else are shared.

use std::fmt;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::{Method, Request, Uri};
use http_body_util::Full;
use quetta_engine::{Engine, EngineError, EngineRequest, EventStream, RequestKind};
use quetta_http::{BodyDecoder, BuildError, StatusErrorFn, StreamOptions, Transport};
use quetta_openai::{join_url, OpenAiConfig};
use serde_json::{Map, Value};

/// How a protocol carries the API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyHeader {
    /// `Authorization: Bearer KEY` (OpenAI, vLLM, SGLang, TGI, llama.cpp, Triton).
    Bearer,
    /// The key alone in a header of its own (Anthropic's `x-api-key`).
    Named(&'static str),
}

/// What a request body is built from besides the request itself.
#[derive(Debug, Clone, Copy)]
pub struct BodyContext<'a> {
    /// The model the run asks for.
    pub model: &'a str,
    /// Ask a streamed answer to carry its token usage (where the protocol needs asking).
    pub include_usage: bool,
    /// The body field that carries the session id, where the protocol has one.
    pub session_body_field: Option<&'a str>,
    /// The name of the output-length field, where the user chose one (`max_tokens` or
    /// `max_completion_tokens` for OpenAI's APIs).
    pub max_tokens_field: &'a str,
}

/// A request body as it goes on the wire.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub body: Vec<u8>,
    pub content_type: String,
}

/// One HTTP protocol: how a request is addressed and written, and how its answer is read.
/// Implement it to run a protocol of one's own through [`HttpEngine`].
pub trait Wire: Send + Sync + fmt::Debug + 'static {
    /// The engine's name in results (`openai-responses`, `anthropic`, ...).
    fn name(&self) -> &'static str;
    /// The request's path after the base URL, for a streamed answer or a whole one (some
    /// servers have one path for each).
    fn path(&self, model: &str, stream: bool) -> String;
    /// The request's JSON body (the run's extra body fields are merged over it after).
    fn body(
        &self,
        ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError>;
    /// The request's body as sent: by default the JSON of [`Wire::body`] with the run's
    /// extra body fields merged over it (a protocol that uploads files encodes its own).
    fn encode(&self, ctx: &BodyContext<'_>, req: &EngineRequest) -> Result<Encoded, EngineError> {
        let mut b = self.body(ctx, req)?;
        for (k, v) in &req.params.extra_body {
            b.insert(k.clone(), v.clone());
        }
        let body = serde_json::to_vec(&Value::Object(b))
            .map_err(|e| EngineError::Request(e.to_string()))?;
        Ok(Encoded { body, content_type: "application/json".into() })
    }
    /// The decoder of one request's answer; `max_event_bytes` bounds one streamed event.
    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder>;
    /// How the API key is sent.
    fn key_header(&self) -> KeyHeader {
        KeyHeader::Bearer
    }
    /// Headers every request of the protocol carries (Anthropic's `anthropic-version`).
    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// Names the errors of the protocol's non-success answers (default: the status and
    /// the start of the body).
    fn status_error(&self) -> Option<StatusErrorFn> {
        None
    }
    /// Whether the protocol can stream an answer at all (embeddings cannot).
    fn streams(&self) -> bool {
        true
    }
    /// What its requests ask of the server.
    fn kind(&self) -> RequestKind {
        RequestKind::Generate
    }
}

/// An engine over any [`Wire`]. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct HttpEngine {
    transport: Transport,
    uri_stream: Uri,
    uri_whole: Uri,
    key: Option<(HeaderName, HeaderValue)>,
    fixed: Vec<(HeaderName, HeaderValue)>,
    cfg: OpenAiConfig,
    session_header: Option<HeaderName>,
    request_id_header: Option<HeaderName>,
    wire: Box<dyn Wire>,
    opts: StreamOptions,
}

fn header_name(n: &str) -> Result<HeaderName, BuildError> {
    HeaderName::from_bytes(n.as_bytes()).map_err(|_| BuildError::Header(n.to_owned()))
}

impl HttpEngine {
    /// An engine speaking `wire` to the server of `cfg` (its base URL, model, key, TLS,
    /// session and request-id headers; `cfg.api` is not read, the wire says what to send;
    /// `cfg.endpoint_path` replaces the wire's path for both streamed and whole answers).
    pub fn new(cfg: OpenAiConfig, wire: Box<dyn Wire>) -> Result<Self, BuildError> {
        let path =
            |stream| cfg.endpoint_path.clone().unwrap_or_else(|| wire.path(&cfg.model, stream));
        let uri_stream = join_url(&cfg.base_url, &path(true))?;
        let uri_whole = join_url(&cfg.base_url, &path(false))?;
        let key = match &cfg.api_key {
            None => None,
            Some(k) => Some(match wire.key_header() {
                KeyHeader::Bearer => (
                    http::header::AUTHORIZATION,
                    k.bearer().map_err(|_| {
                        BuildError::Header("authorization (value not shown)".into())
                    })?,
                ),
                KeyHeader::Named(n) => (
                    header_name(n)?,
                    k.value().map_err(|_| BuildError::Header(format!("{n} (value not shown)")))?,
                ),
            }),
        };
        let fixed = wire
            .fixed_headers()
            .iter()
            .map(|(k, v)| Ok((header_name(k)?, HeaderValue::from_static(v))))
            .collect::<Result<Vec<_>, BuildError>>()?;
        let session_header = cfg.session_header.as_deref().map(header_name).transpose()?;
        let request_id_header = cfg.request_id_header.as_deref().map(header_name).transpose()?;
        let transport = Transport::new(&cfg.transport())?;
        let opts = StreamOptions {
            streaming: true,
            record_headers: cfg.record_headers.clone().into(),
            status_error: wire.status_error(),
        };
        Ok(Self {
            transport,
            uri_stream,
            uri_whole,
            key,
            fixed,
            cfg,
            session_header,
            request_id_header,
            wire,
            opts,
        })
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.cfg
    }

    fn context(&self) -> BodyContext<'_> {
        BodyContext {
            model: &self.cfg.model,
            include_usage: self.cfg.include_usage,
            session_body_field: self.cfg.session_body_field.as_deref(),
            max_tokens_field: &self.cfg.max_tokens_field,
        }
    }

    /// The JSON body of a request, the run's extra body fields merged over it (public for
    /// tests and dry runs).
    pub fn body(&self, req: &EngineRequest) -> Result<Value, EngineError> {
        let mut b = self.wire.body(&self.context(), req)?;
        for (k, v) in &req.params.extra_body {
            b.insert(k.clone(), v.clone());
        }
        Ok(Value::Object(b))
    }

    fn build_request(&self, req: &EngineRequest) -> Result<Request<Full<Bytes>>, EngineError> {
        let stream = req.stream && self.wire.streams();
        let Encoded { body, content_type } = self.wire.encode(&self.context(), req)?;
        let uri = if stream { &self.uri_stream } else { &self.uri_whole };
        let mut r = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(CONTENT_TYPE, content_type)
            .header(ACCEPT, if stream { "text/event-stream" } else { "application/json" });
        if let Some((k, v)) = &self.key {
            r = r.header(k, v.clone());
        }
        for (k, v) in &self.fixed {
            r = r.header(k, v.clone());
        }
        if let Some(h) = &self.request_id_header {
            r = r.header(h, req.request_id);
        }
        if let (Some(h), Some(sid)) = (&self.session_header, &req.session_id) {
            r = r.header(h, sid.as_str());
        }
        for (k, v) in &req.params.extra_headers {
            r = r.header(k.as_str(), v.as_str());
        }
        r.body(Full::new(Bytes::from(body)))
            .map_err(|e| EngineError::Request(format!("cannot build request: {e}")))
    }
}

impl Engine for HttpEngine {
    fn name(&self) -> &str {
        self.wire.name()
    }

    fn kind(&self) -> RequestKind {
        self.wire.kind()
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let built = self.build_request(&request);
        let body = self.wire.decoder(&request, self.cfg.max_event_bytes);
        let opts =
            StreamOptions { streaming: request.stream && self.wire.streams(), ..self.opts.clone() };
        self.transport.stream(built, body, &opts)
    }
}

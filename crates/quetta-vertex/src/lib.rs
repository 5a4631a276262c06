//! Google Vertex AI adapter for Quetta.
//!
//! Three APIs ([`VertexApi`]):
//! - `gemini`: `…/publishers/google/models/MODEL:streamGenerateContent?alt=sse` (and
//!   `:generateContent` when not streaming); usage from `usageMetadata`.
//! - `openai`: the OpenAI-compatible endpoint of Model Garden (`…/endpoints/openapi/chat/completions`)
//!   or of a self-deployed model (`…/endpoints/ID/chat/completions`).
//! - `predict`: `…/endpoints/ID:predict` for custom endpoints. Never streamed: TTFT equals
//!   E2E and the summary says so; no inter-token latency is invented.
//!
//! Requests carry `Authorization: Bearer` with a token from application default
//! credentials ([`auth`]), fetched before the run and refreshed before it expires. Body
//! chunks are stamped on arrival by the shared transport, before any parsing.

pub mod auth;
pub mod gemini;

use std::path::PathBuf;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request, Uri};
use http_body_util::Full;
use quetta_engine::setting::Setting;
use quetta_engine::{
    Delta, Engine, EngineError, EngineRequest, EventKind, EventStream, Message, Prompt,
};
use quetta_http::refresh::Refreshing;
use quetta_http::{BodyDecoder, ErrorAnswer, SseBody, StreamOptions, Transport, TransportConfig};
use quetta_openai::decode::ChunkDecoder;
use quetta_openai::{Api, OpenAiConfig};
use serde_json::{json, Value};

pub use auth::{AuthError, Source};
pub use gemini::GeminiDecoder;

/// Which Vertex AI API to call.
///
/// ```
/// let mut c = quetta_vertex::VertexConfig::new("my-project", "us-central1", "gemini-2.0-flash-001");
/// c.api = quetta_vertex::VertexApi::OpenAi;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VertexApi {
    Gemini,
    OpenAi,
    Predict,
}

/// Configuration of a [`VertexEngine`].
///
/// ```
/// let c = quetta_vertex::VertexConfig::new("my-project", "global", "gemini-2.0-flash-001");
/// assert_eq!(c.api, quetta_vertex::VertexApi::Gemini);
/// ```
#[derive(Debug, Clone)]
pub struct VertexConfig {
    pub project: String,
    /// Region (`us-central1`) or `global`.
    pub location: String,
    /// Gemini model (`gemini-2.0-flash-001`), or the OpenAI endpoint's `model`
    /// (`google/gemini-2.0-flash-001`, `meta/llama-3.1-8b-instruct-maas`).
    pub model: String,
    /// A deployed endpoint's id (self-deployed OpenAI-compatible or predict endpoints).
    pub endpoint_id: Option<String>,
    pub api: VertexApi,
    /// Override of `https://LOCATION-aiplatform.googleapis.com` (a local fake, a proxy).
    pub endpoint_url: Option<String>,
    /// A credentials file instead of application default credentials discovery.
    pub credentials_file: Option<PathBuf>,
    pub scope: String,
    pub transport: TransportConfig,
    pub max_event_bytes: usize,
    pub record_headers: Vec<String>,
}

impl VertexConfig {
    pub fn new(
        project: impl Into<String>,
        location: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            project: project.into(),
            location: location.into(),
            model: model.into(),
            endpoint_id: None,
            api: VertexApi::Gemini,
            endpoint_url: None,
            credentials_file: None,
            scope: auth::CLOUD_PLATFORM.into(),
            transport: TransportConfig::default(),
            max_event_bytes: 1 << 20,
            record_headers: Vec::new(),
        }
    }
}

/// The adapter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VertexError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Build(#[from] quetta_http::BuildError),
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("{} {api} needs {}", Setting::VertexApi, Setting::VertexEndpointId)]
    NeedsEndpointId { api: &'static str },
}

/// The Vertex AI engine. Build it inside a tokio runtime (it fetches the first token and
/// keeps refreshing it).
#[derive(Debug)]
pub struct VertexEngine {
    transport: Transport,
    token: Refreshing<String>,
    stream_uri: Uri,
    full_uri: Uri,
    openai: OpenAiConfig,
    opts: StreamOptions,
    cfg: VertexConfig,
    source: String,
}

impl VertexEngine {
    /// Find credentials, fetch a token, and resolve the URLs.
    pub async fn new(cfg: VertexConfig) -> Result<Self, VertexError> {
        let transport = Transport::new(&cfg.transport)?;
        let source = auth::discover(cfg.credentials_file.as_deref())?;
        let described = source.describe();
        let token = auth::token_provider(source, transport.clone(), cfg.scope.clone()).await?;
        Self::with_token(cfg, transport, token, described)
    }

    /// Build with a token provider the caller made.
    pub fn with_token(
        cfg: VertexConfig,
        transport: Transport,
        token: Refreshing<String>,
        source: String,
    ) -> Result<Self, VertexError> {
        let base = cfg.endpoint_url.clone().unwrap_or_else(|| {
            if cfg.location == "global" {
                "https://aiplatform.googleapis.com".into()
            } else {
                format!("https://{}-aiplatform.googleapis.com", cfg.location)
            }
        });
        let base = base.trim_end_matches('/');
        let root = format!("{base}/v1/projects/{}/locations/{}", cfg.project, cfg.location);
        let (stream, full) = match cfg.api {
            VertexApi::Gemini => {
                let m =
                    if cfg.model.starts_with("publishers/") || cfg.model.starts_with("projects/") {
                        cfg.model.clone()
                    } else {
                        format!("publishers/google/models/{}", cfg.model)
                    };
                let m = m
                    .strip_prefix(&format!("projects/{}/locations/{}/", cfg.project, cfg.location))
                    .map_or(m.clone(), str::to_owned);
                (
                    format!("{root}/{m}:streamGenerateContent?alt=sse"),
                    format!("{root}/{m}:generateContent"),
                )
            }
            VertexApi::OpenAi => {
                let id = cfg.endpoint_id.as_deref().unwrap_or("openapi");
                let u = format!("{root}/endpoints/{id}/chat/completions");
                (u.clone(), u)
            }
            VertexApi::Predict => {
                let id = cfg
                    .endpoint_id
                    .as_deref()
                    .ok_or(VertexError::NeedsEndpointId { api: "predict" })?;
                let u = format!("{root}/endpoints/{id}:predict");
                (u.clone(), u)
            }
        };
        let parse = |u: String| -> Result<Uri, VertexError> {
            if !u.starts_with("http://") && !u.starts_with("https://") {
                return Err(VertexError::Url {
                    url: u,
                    reason: "it must start with http:// or https://".into(),
                });
            }
            u.parse().map_err(|e: http::uri::InvalidUri| VertexError::Url {
                url: u.clone(),
                reason: e.to_string(),
            })
        };
        let mut openai = OpenAiConfig::new(base, Api::Chat, cfg.model.clone());
        openai.session_body_field = None;
        let opts = StreamOptions {
            streaming: true,
            record_headers: cfg.record_headers.clone().into(),
            status_error: Some(std::sync::Arc::new(status_error)),
        };
        Ok(Self {
            opts,
            transport,
            token,
            stream_uri: parse(stream)?,
            full_uri: parse(full)?,
            openai,
            cfg,
            source,
        })
    }

    /// Where the tokens come from (no secret).
    pub fn credentials_source(&self) -> &str {
        &self.source
    }

    /// How many tokens were fetched so far (the first included).
    pub fn token_fetches(&self) -> u64 {
        self.token.fetches()
    }

    /// The JSON body sent for `req`.
    pub fn body(&self, req: &EngineRequest) -> Result<Value, EngineError> {
        match self.cfg.api {
            VertexApi::Gemini => gemini::body(req),
            VertexApi::OpenAi => quetta_openai::request_body(&self.openai, req),
            VertexApi::Predict => {
                let text = match &req.prompt {
                    Prompt::Text(t) => t.clone(),
                    Prompt::Chat(m) => {
                        m.iter().map(Message::text_content).collect::<Vec<_>>().join("\n")
                    }
                    other => {
                        return Err(EngineError::Request(format!(
                            "predict cannot take a prompt like {other:?}"
                        )))
                    }
                };
                let mut inst = json!({"prompt": text});
                if let Some(n) = req.max_tokens {
                    inst["max_tokens"] = json!(n);
                }
                if let Some(t) = req.params.sampling.temperature {
                    inst["temperature"] = json!(t);
                }
                let mut b = json!({"instances": [inst]});
                for (k, v) in &req.params.extra_body {
                    b[k] = v.clone();
                }
                Ok(b)
            }
        }
    }

    fn build(&self, req: &EngineRequest) -> Result<Request<Full<Bytes>>, EngineError> {
        let body = serde_json::to_vec(&self.body(req)?)
            .map_err(|e| EngineError::Request(e.to_string()))?;
        let token = self.token.current().map_err(|e| EngineError::Auth(e.to_string()))?;
        let auth = quetta_http::fetch::ApiKey::new(token).bearer().map_err(|_| {
            EngineError::Auth("the access token has characters a header cannot carry".into())
        })?;
        let uri = if req.stream { &self.stream_uri } else { &self.full_uri };
        let mut r = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(AUTHORIZATION, auth)
            .header("x-quetta-request-id", req.request_id);
        for (k, v) in &req.params.extra_headers {
            r = r.header(k.as_str(), v.as_str());
        }
        r.body(Full::new(Bytes::from(body)))
            .map_err(|e| EngineError::Request(format!("cannot build request: {e}")))
    }

    fn decoder(&self, req: &EngineRequest) -> Box<dyn BodyDecoder> {
        let inner: Box<dyn BodyDecoder> = match self.cfg.api {
            VertexApi::Gemini => Box::new(SseBody::new(
                self.cfg.max_event_bytes,
                GeminiDecoder::new(req.capture_text),
            )),
            VertexApi::OpenAi => Box::new(SseBody::new(
                self.cfg.max_event_bytes,
                ChunkDecoder::new(req.capture_text),
            )),
            VertexApi::Predict => Box::new(Predictions { capture: req.capture_text }),
        };
        inner
    }
}

/// `{"predictions": [...]}`: the first prediction's text (a string, or an object's
/// `content`/`generated_text`/`text`).
struct Predictions {
    capture: bool,
}

impl BodyDecoder for Predictions {
    fn on_data(&mut self, _d: &[u8], _out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        Err(EngineError::Protocol("predict answers are not streamed".into()))
    }
    fn on_end(&mut self, _out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        Ok(())
    }
    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| EngineError::Protocol(format!("the predict answer is not JSON ({e})")))?;
        let p = v
            .pointer("/predictions/0")
            .ok_or_else(|| EngineError::Protocol("no predictions in the answer".into()))?;
        let text = p
            .as_str()
            .or_else(|| {
                ["content", "generated_text", "text", "output"]
                    .iter()
                    .find_map(|k| p.get(*k).and_then(Value::as_str))
            })
            .unwrap_or("");
        out(EventKind::Content(Delta::of(text, self.capture)));
        Ok(())
    }
    fn is_done(&self) -> bool {
        false
    }
    fn finish_reason(&self) -> Option<String> {
        None
    }
}

/// The typed error of a Google error answer (`{"error": {"code", "message", "status"}}`, or
/// a list of them as `streamGenerateContent` without SSE sends).
pub fn status_error(a: &ErrorAnswer<'_>) -> EngineError {
    let v: Option<Value> = serde_json::from_slice(a.body).ok();
    match v.as_ref().and_then(|v| v.get("error").or_else(|| v.pointer("/0/error"))) {
        Some(e) => {
            let mut err = gemini::google_error(e, a.status);
            if let EngineError::HttpStatus { retry_after: r, .. } = &mut err {
                r.clone_from(&a.retry_after);
            }
            err
        }
        None => match a.status {
            401 | 403 => EngineError::Auth(a.excerpt()),
            429 => EngineError::Throttled(a.excerpt()),
            _ => a.http_status(),
        },
    }
}

impl Engine for VertexEngine {
    fn name(&self) -> &'static str {
        match self.cfg.api {
            VertexApi::Gemini => "vertex-gemini",
            VertexApi::OpenAi => "vertex-openai",
            VertexApi::Predict => "vertex-predict",
        }
    }

    fn send(&self, mut request: EngineRequest) -> EventStream {
        if self.cfg.api == VertexApi::Predict {
            request.stream = false;
        }
        let built = self.build(&request);
        let opts = StreamOptions { streaming: request.stream, ..self.opts.clone() };
        self.transport.stream(built, self.decoder(&request), &opts)
    }
}

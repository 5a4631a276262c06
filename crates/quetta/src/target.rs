//! [`Target`]: where a benchmark sends its requests, and [`Target::connect`], the one place
//! an engine is built for every binary and every embedder.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::setting::Setting as S;
use quetta_engine::{Engine, EngineError};
#[cfg(any(feature = "aws", feature = "vertex"))]
use quetta_http::TransportConfig;
use quetta_openai::{list_models, ApiKey, LiteLlmConfig, LiteLlmEngine, OpenAiConfig};
use quetta_sim::{SimConfig, Simulator};

pub use quetta_protocols::{Options as ProtocolOptions, Protocol};

use crate::preflight::{kserve_preflight, preflight_reason, preflight_request};
use quetta_report::Note;

use crate::{Error, Result, TargetError};

/// What kind of endpoint a [`Target`] is.
///
/// ```
/// use quetta::{Target, TargetKind};
/// match Target::litellm("http://127.0.0.1:4000").kind {
///     TargetKind::LiteLlm { base_url } => assert_eq!(base_url, "http://127.0.0.1:4000"),
///     _ => unreachable!(),
/// }
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum TargetKind {
    /// A server speaking one of the HTTP protocols ([`Target::protocol`]: OpenAI chat or
    /// completions by default; vLLM, SGLang, TGI, llama.cpp, Triton, OpenAI, Anthropic).
    Http { base_url: String },
    /// A LiteLLM proxy: OpenAI's protocol, the proxy's key, its `x-litellm-*` headers kept.
    LiteLlm { base_url: String },
    /// An Amazon SageMaker endpoint (SigV4, the AWS credential chain).
    #[cfg(feature = "aws")]
    SageMaker(Box<quetta_aws::SageMakerConfig>),
    /// Amazon Bedrock's runtime (Converse or Invoke; SigV4, the AWS credential chain).
    #[cfg(feature = "aws")]
    Bedrock(Box<quetta_aws::BedrockConfig>),
    /// Google Vertex AI (application default credentials).
    #[cfg(feature = "vertex")]
    Vertex(Box<quetta_vertex::VertexConfig>),
    /// Quetta's embedded simulator, started by [`Target::connect`] (no server needed).
    Simulator(Box<SimConfig>),
    /// An engine of the embedder's own.
    Engine(Arc<dyn Engine>),
}

/// Where a benchmark sends its requests, and how: plain data with public fields, built with
/// the constructors and chained setters.
///
/// ```
/// use quetta::Target;
/// let t = Target::openai("http://127.0.0.1:8000").model("llama").api_key("sk-x").http2(true);
/// assert_eq!(t.model.as_deref(), Some("llama"));
/// assert!(!format!("{t:?}").contains("sk-x"), "the key is never shown");
/// ```
#[derive(Clone)]
pub struct Target {
    pub kind: TargetKind,
    /// The protocol spoken to an HTTP server or the embedded simulator (chat by default).
    pub protocol: Protocol,
    /// How the protocol is spoken (Responses: chain a session's turns by response id).
    pub protocol_options: ProtocolOptions,
    /// The path requests go to, where it is not the protocol's own (a proxy's route).
    pub path: Option<String>,
    /// The model; without one, the first model the server lists (`GET /v1/models`).
    pub model: Option<String>,
    /// Sent as `Authorization: Bearer`, only to the target itself; never written anywhere.
    pub api_key: Option<ApiKey>,
    /// Accept any TLS certificate (testing only).
    pub insecure: bool,
    /// An extra CA certificate (PEM) to trust.
    pub ca_cert: Option<PathBuf>,
    /// HTTP/2 with prior knowledge over cleartext (https negotiates it by ALPN anyway).
    pub http2: bool,
    /// Extra request headers (name, value).
    pub headers: Vec<(String, String)>,
    /// Limit on establishing a connection (TCP and TLS).
    pub connect_timeout: Option<Duration>,
    /// Response headers kept in each record (names, or prefixes ending in `*`).
    pub record_headers: Vec<String>,
    /// Header carrying each request's session id for sticky routing (`None`: no header).
    pub session_header: Option<String>,
    /// Body field carrying the session id (`None`: no field).
    pub session_body_field: Option<String>,
    /// Before anything is measured, check the server (`GET /v1/models`, then one request
    /// for a single token) and stop at once with its own message when the key, the model
    /// or the server behind a proxy is wrong. Off by default for embedders (whose servers
    /// may count every request); `quetta-bench` turns it on unless `--no-preflight`.
    pub preflight: bool,
}

impl std::fmt::Debug for TargetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetKind::Http { base_url } => write!(f, "Http({base_url})"),
            TargetKind::LiteLlm { base_url } => write!(f, "LiteLlm({base_url})"),
            #[cfg(feature = "aws")]
            TargetKind::SageMaker(c) => write!(f, "SageMaker({})", c.endpoint_name),
            #[cfg(feature = "aws")]
            TargetKind::Bedrock(c) => write!(f, "Bedrock({})", c.model_id),
            #[cfg(feature = "vertex")]
            TargetKind::Vertex(c) => write!(f, "Vertex({}/{})", c.project, c.location),
            TargetKind::Simulator(_) => f.write_str("Simulator"),
            TargetKind::Engine(e) => write!(f, "Engine({})", e.name()),
        }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("kind", &self.kind)
            .field("protocol", &self.protocol)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("headers", &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Target {
    fn of(kind: TargetKind) -> Self {
        Self {
            kind,
            protocol: Protocol::Chat,
            protocol_options: ProtocolOptions::default(),
            path: None,
            model: None,
            api_key: None,
            insecure: false,
            ca_cert: None,
            http2: false,
            headers: Vec::new(),
            connect_timeout: None,
            record_headers: Vec::new(),
            session_header: Some("x-session-id".into()),
            session_body_field: Some("user".into()),
            preflight: false,
        }
    }

    /// An OpenAI-compatible server at `base_url` (`http://host:port`, with or without `/v1`),
    /// chat API.
    pub fn openai(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Chat)
    }

    /// A server at `base_url` speaking `protocol`.
    pub fn http(base_url: impl Into<String>, protocol: Protocol) -> Self {
        Self::of(TargetKind::Http { base_url: base_url.into() }).protocol(protocol)
    }

    /// A KServe v2 server over gRPC (Triton with TensorRT-LLM or vLLM, KServe) at
    /// `grpc://HOST:PORT` (`grpcs://` with TLS).
    ///
    /// ```
    /// let t = quetta::Target::kserve_grpc("grpc://127.0.0.1:8001").model("ensemble");
    /// assert_eq!(t.protocol, quetta::Protocol::KserveGrpc);
    /// ```
    pub fn kserve_grpc(url: impl Into<String>) -> Self {
        Self::http(url, Protocol::KserveGrpc)
    }

    /// OpenAI's Responses API (`/v1/responses`).
    pub fn responses(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Responses)
    }

    /// Anthropic's Messages API (`/v1/messages`; the key goes in `x-api-key`).
    pub fn anthropic(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Messages)
    }

    /// llama.cpp's native `/completion`.
    pub fn llamacpp(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::LlamaCpp)
    }

    /// Hugging Face TGI's native `/generate_stream`.
    pub fn tgi(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Tgi)
    }

    /// SGLang's native `/generate`.
    pub fn sglang(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Sglang)
    }

    /// Triton's generate extension with TensorRT-LLM's ensemble
    /// (`/v2/models/{model}/generate_stream`; the model defaults to `ensemble`).
    pub fn tensorrt_llm(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::TensorRtLlm)
    }

    /// OpenAI embeddings (`/v1/embeddings`; a batch of inputs a request with
    /// `WorkloadSpec::inputs_per_request`).
    pub fn embeddings(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Embeddings)
    }

    /// Rerank, the Cohere/Jina shape vLLM and llama.cpp serve (`/v1/rerank`).
    pub fn rerank(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Rerank)
    }

    /// Audio transcription (`/v1/audio/transcriptions`; recordings from
    /// `quetta_workload::spec::Source::Audio`).
    pub fn transcription(base_url: impl Into<String>) -> Self {
        Self::http(base_url, Protocol::Transcription)
    }

    /// Speak `protocol` (to an HTTP server or the embedded simulator).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// A LiteLLM proxy at `base_url`.
    pub fn litellm(base_url: impl Into<String>) -> Self {
        Self::of(TargetKind::LiteLlm { base_url: base_url.into() })
    }

    /// An Amazon SageMaker endpoint.
    #[cfg(feature = "aws")]
    pub fn sagemaker(cfg: quetta_aws::SageMakerConfig) -> Self {
        Self::of(TargetKind::SageMaker(Box::new(cfg)))
    }

    /// Amazon Bedrock's runtime.
    #[cfg(feature = "aws")]
    pub fn bedrock(cfg: quetta_aws::BedrockConfig) -> Self {
        Self::of(TargetKind::Bedrock(Box::new(cfg)))
    }

    /// Google Vertex AI.
    #[cfg(feature = "vertex")]
    pub fn vertex(cfg: quetta_vertex::VertexConfig) -> Self {
        Self::of(TargetKind::Vertex(Box::new(cfg)))
    }

    /// Quetta's embedded simulator; `SimConfig::default()` is what `quetta-bench run` uses
    /// with no target (TTFT 20 ms, ITL 5 ms).
    pub fn simulator(cfg: SimConfig) -> Self {
        Self::of(TargetKind::Simulator(Box::new(cfg)))
    }

    /// An engine of the embedder's own.
    pub fn engine(engine: Arc<dyn Engine>) -> Self {
        Self::of(TargetKind::Engine(engine))
    }

    /// Ask for this model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Send this API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into()).filter(|k: &String| !k.is_empty()).map(ApiKey::new);
        self
    }

    /// Use the completions API (`/v1/completions`).
    pub fn completions(self) -> Self {
        self.protocol(Protocol::Completions)
    }

    /// Use HTTP/2 with prior knowledge over cleartext.
    pub fn http2(mut self, on: bool) -> Self {
        self.http2 = on;
        self
    }

    /// Accept any TLS certificate (testing only).
    pub fn insecure(mut self, on: bool) -> Self {
        self.insecure = on;
        self
    }

    /// Trust an extra CA certificate (PEM).
    pub fn ca_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_cert = Some(path.into());
        self
    }

    /// Add a request header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The embedded simulator's configuration, when the target is one.
    pub fn sim_config(&self) -> Option<&SimConfig> {
        match &self.kind {
            TargetKind::Simulator(s) => Some(s),
            _ => None,
        }
    }

    /// What the target's requests ask of the server (its protocol's kind; an engine of the
    /// embedder's own says).
    pub fn request_kind(&self) -> quetta_engine::RequestKind {
        match &self.kind {
            TargetKind::Engine(e) => e.kind(),
            TargetKind::Http { .. } | TargetKind::Simulator(_) => self.protocol.kind(),
            _ => quetta_engine::RequestKind::Generate,
        }
    }

    /// Whether the target is the embedded simulator.
    pub fn is_simulator(&self) -> bool {
        matches!(self.kind, TargetKind::Simulator(_))
    }

    /// The base URL of an HTTP or LiteLLM target.
    pub fn base_url(&self) -> Option<&str> {
        match &self.kind {
            TargetKind::Http { base_url } | TargetKind::LiteLlm { base_url } => Some(base_url),
            _ => None,
        }
    }

    /// Whether requests to this target can carry images.
    pub fn takes_images(&self) -> bool {
        match &self.kind {
            #[cfg(feature = "aws")]
            TargetKind::SageMaker(c) => matches!(c.payload, quetta_aws::Payload::OpenAi),
            #[cfg(feature = "aws")]
            TargetKind::Bedrock(_) => false,
            #[cfg(feature = "vertex")]
            TargetKind::Vertex(c) => c.api != quetta_vertex::VertexApi::Predict,
            _ => self.protocol.takes_messages(),
        }
    }

    #[cfg(any(feature = "aws", feature = "vertex"))]
    fn transport(&self) -> TransportConfig {
        TransportConfig {
            insecure: self.insecure,
            ca_cert: self.ca_cert.clone(),
            http2: self.http2,
            connect_timeout: self.connect_timeout,
            keeps_streams: false,
        }
    }

    /// A managed endpoint's transport: AWS's and Google's front ends keep a connection
    /// after a streamed answer, so the transport need not learn it (and the pre-flight
    /// need not pay a second request to teach it).
    fn managed_transport(&self) -> TransportConfig {
        TransportConfig { keeps_streams: true, ..self.transport() }
    }

    /// Build the engine: start the embedded simulator, find the model (`/v1/models` when
    /// none is given), load credentials for managed endpoints. Per-phase timeouts other
    /// than connect are the runner's ([`crate::Benchmark::timeouts`]), around any engine.
    pub async fn connect(&self) -> Result<Connected> {
        match &self.kind {
            TargetKind::Http { base_url } | TargetKind::LiteLlm { base_url } => {
                self.connect_http(base_url, None).await
            }
            TargetKind::Simulator(cfg) => {
                let sim = Simulator::start((**cfg).clone())
                    .map_err(|e| Error::Target(TargetError::Simulator(e)))?;
                let url = sim.base_url();
                let model = self.model.clone().unwrap_or_else(|| cfg.model.clone());
                let mut c = self.connect_http(&url, Some(model)).await?;
                // a twin's timing is its model's (its own note says whose)
                c.notes.push(match &cfg.server_model {
                    Some(_) => Note::EmbeddedTwin,
                    None => Note::EmbeddedSimulator {
                        ttft_ms: cfg.ttft.as_secs_f64() * 1e3,
                        itl_ms: self
                            .protocol
                            .kind()
                            .generates()
                            .then_some(cfg.itl.as_secs_f64() * 1e3),
                    },
                });
                c.embedded_simulator = true;
                c.simulator = Some(Arc::new(sim));
                Ok(c)
            }
            TargetKind::Engine(e) => Ok(Connected {
                engine: e.clone(),
                model: self.model.clone().unwrap_or_else(|| e.name().to_owned()),
                base_url: format!("engine:{}", e.name()),
                backend: e.name().to_owned(),
                protocol: self.protocol,
                embedded_simulator: false,
                notes: Vec::new(),
                simulator: None,
                api_key: None,
                insecure: self.insecure,
            }),
            #[cfg(feature = "aws")]
            TargetKind::SageMaker(cfg) => self.connect_sagemaker(cfg).await,
            #[cfg(feature = "aws")]
            TargetKind::Bedrock(cfg) => self.connect_bedrock(cfg).await,
            #[cfg(feature = "vertex")]
            TargetKind::Vertex(cfg) => self.connect_vertex(cfg).await,
        }
    }

    /// The model: the one given, else the first the server lists (`GET /v1/models`, for
    /// the protocols whose servers list them) or the protocol's own default; with the
    /// pre-flight on, the list is also its first check. Whether the server listed it.
    async fn find_model(
        &self,
        base_url: &str,
        given: Option<String>,
        key: Option<&ApiKey>,
    ) -> Result<(String, bool)> {
        let embedded = matches!(self.kind, TargetKind::Simulator(_));
        let litellm = matches!(self.kind, TargetKind::LiteLlm { .. });
        // Servers of the other protocols may list their models too (llama.cpp, vLLM), but
        // their own services need not (Anthropic's takes its key in another header): only
        // a run that names no model asks them.
        let lists = self.protocol.lists_models() || litellm;
        let given = match (given, self.protocol.default_model()) {
            (None, Some(d)) if !lists => Some(d.to_owned()),
            (g, _) => g,
        };
        // The model list: needed without a model, and the pre-flight's first check with one.
        let listing = if given.is_none() || (lists && self.preflight && !embedded) {
            Some(list_models(base_url, key, self.insecure, Duration::from_secs(15)).await)
        } else {
            None
        };
        Ok(match (given, listing) {
            (None, Some(Ok(list))) => (
                list.into_iter().next().ok_or_else(|| {
                    model_error(
                        base_url,
                        format!("no {} given and /v1/models lists no model", S::Model),
                    )
                })?,
                true,
            ),
            (None, Some(Err(e))) => {
                return Err(model_error(
                    base_url,
                    format!(
                        "no {} given and GET {base_url}/v1/models failed: {}",
                        S::Model,
                        preflight_reason(&e)
                    ),
                ))
            }
            (None, None) => unreachable!("a run without a model lists them"),
            (Some(m), Some(Ok(list))) => {
                let known = list.contains(&m);
                if litellm && !known && !list.is_empty() {
                    return Err(model_error(base_url, format!(
                        "pre-flight: the LiteLLM proxy at {base_url} has no model {m:?}; it serves {}",
                        list.join(", ")
                    )));
                }
                (m, known)
            }
            // 401/403 is a wrong key whatever the model; another failure (no model list,
            // as on some servers) leaves the check to the pre-flight request
            (Some(m), Some(Err(e))) => {
                // (the model list is fetched without --header's headers, which may carry
                // a gateway's own credentials: then the request below decides)
                let refused = matches!(e, EngineError::HttpStatus { status: 401 | 403, .. });
                if refused && self.headers.is_empty() {
                    return Err(Error::preflight(
                        base_url,
                        format!(
                            "pre-flight: GET {base_url}/v1/models was refused: {}",
                            preflight_reason(&e)
                        ),
                    ));
                }
                (m, false)
            }
            (Some(m), None) => (m, false),
        })
    }

    async fn connect_http(&self, base_url: &str, model: Option<String>) -> Result<Connected> {
        let given = base_url;
        // gRPC is HTTP/2: grpc:// is h2c, grpcs:// TLS (the KServe protocol's own schemes)
        let grpc = self.protocol == Protocol::KserveGrpc;
        let mapped = match (base_url.split_once("://"), grpc) {
            (Some(("grpc", rest)), true) => format!("http://{rest}"),
            (Some(("grpcs", rest)), true) => format!("https://{rest}"),
            (Some(("grpc" | "grpcs", _)), false) => {
                return Err(Error::conflict(S::BaseUrl, S::Endpoint, format!(
                    "{base_url:?} is a gRPC address: the {} protocol is spoken over HTTP (gRPC is the kserve-grpc protocol)",
                    self.protocol
                )));
            }
            _ => base_url.to_owned(),
        };
        let base_url = mapped.as_str();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(Error::invalid(
                S::BaseUrl,
                format!(
                    "{base_url:?} must start with http:// or https://{}",
                    if grpc { " (or grpc://, grpcs://)" } else { "" }
                ),
            ));
        }
        let key = self.api_key.clone();
        let embedded = matches!(self.kind, TargetKind::Simulator(_));
        let (model, listed) =
            self.find_model(base_url, model.or_else(|| self.model.clone()), key.as_ref()).await?;
        let mut cfg = OpenAiConfig::new(base_url, quetta_openai::Api::Chat, &model);
        cfg.api_key = key;
        cfg.http2 = self.http2 || grpc;
        cfg.insecure = self.insecure;
        // the simulator is Quetta's own: it keeps a connection after a streamed answer
        cfg.keeps_streams = embedded;
        cfg.ca_cert.clone_from(&self.ca_cert);
        cfg.session_header.clone_from(&self.session_header);
        cfg.session_body_field.clone_from(&self.session_body_field);
        cfg.record_headers = self.record_headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        cfg.connect_timeout = self.connect_timeout;
        cfg.endpoint_path.clone_from(&self.path);
        let mut notes = Vec::new();
        let engine: Arc<dyn Engine> = if matches!(self.kind, TargetKind::LiteLlm { .. }) {
            if !model.contains('/') && !listed {
                notes.push(Note::LiteLlmNoProviderPrefix { model: model.clone() });
            }
            cfg.api = if self.protocol == Protocol::Completions {
                quetta_openai::Api::Completions
            } else {
                quetta_openai::Api::Chat
            };
            Arc::new(LiteLlmEngine::new(LiteLlmConfig { openai: cfg }).map_err(Error::client)?)
        } else {
            if grpc && self.preflight && !embedded {
                kserve_preflight(&cfg, given, self.protocol_options.kserve_tensors).await?;
            }
            quetta_protocols::engine(self.protocol, cfg, self.protocol_options)
                .map_err(Error::client)?
        };
        if self.preflight && !embedded {
            preflight_request(engine.as_ref(), base_url, self.protocol, &self.headers, true)
                .await?;
        }
        Ok(Connected {
            backend: engine.name().to_owned(),
            engine,
            model,
            base_url: given.to_owned(),
            protocol: self.protocol,
            embedded_simulator: false,
            notes,
            simulator: None,
            api_key: self.api_key.clone(),
            insecure: self.insecure,
        })
    }

    /// A managed provider's engine, connected: it speaks chat, in its own words, and takes
    /// no API key of Quetta's (its credentials are the provider's).
    #[cfg(any(feature = "aws", feature = "vertex"))]
    fn managed(
        &self,
        engine: Arc<dyn Engine>,
        model: String,
        base_url: String,
        notes: Vec<Note>,
    ) -> Connected {
        Connected {
            backend: engine.name().to_owned(),
            engine,
            model,
            base_url,
            protocol: Protocol::Chat,
            embedded_simulator: false,
            notes,
            simulator: None,
            api_key: None,
            insecure: self.insecure,
        }
    }

    #[cfg(feature = "aws")]
    async fn connect_sagemaker(&self, cfg: &quetta_aws::SageMakerConfig) -> Result<Connected> {
        let mut c = cfg.clone();
        c.model = self.model.clone().unwrap_or_else(|| c.endpoint_name.clone());
        c.transport = self.managed_transport();
        c.record_headers = self.record_headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        c.session_body_field.clone_from(&self.session_body_field);
        let payload = match &c.payload {
            quetta_aws::Payload::OpenAi => "openai",
            quetta_aws::Payload::JumpStart => "jumpstart",
            _ => "template",
        };
        let (name, url, model) = (c.endpoint_name.clone(), c.endpoint_url.clone(), c.model.clone());
        let e =
            quetta_aws::SageMakerEngine::new(c).await.map_err(|e| adapter_error("SageMaker", e))?;
        let base = url
            .unwrap_or_else(|| format!("https://runtime.sagemaker.{}.amazonaws.com", e.region()));
        let note = Note::SageMaker {
            endpoint: name.clone(),
            region: e.region().to_string(),
            payload: payload.to_string(),
        };
        Ok(self.managed(Arc::new(e), model, format!("{base}/endpoints/{name}"), vec![note]))
    }

    #[cfg(feature = "aws")]
    async fn connect_bedrock(&self, cfg: &quetta_aws::BedrockConfig) -> Result<Connected> {
        let mut c = cfg.clone();
        if let Some(m) = &self.model {
            c.model_id.clone_from(m);
        }
        if c.model_id.is_empty() {
            return Err(Error::missing(
                S::Model,
                "Bedrock needs a model: a model id, an inference profile id or an ARN",
            ));
        }
        c.transport = self.managed_transport();
        c.record_headers = self.record_headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        let (model, api) = (c.model_id.clone(), c.api);
        let e = quetta_aws::BedrockEngine::new(c).await.map_err(|e| adapter_error("Bedrock", e))?;
        let body = match e.family() {
            Some(f) => format!("the {} family's own body", f.name),
            None => "Converse's body".into(),
        };
        let notes = vec![Note::Bedrock {
            model: model.clone(),
            region: e.region().to_string(),
            api: api.name().to_string(),
            body,
        }];
        let base = e.base_url().to_owned();
        if self.preflight {
            preflight_request(&e, &base, Protocol::Chat, &self.headers, false).await?;
        }
        Ok(self.managed(Arc::new(e), model, base, notes))
    }

    #[cfg(feature = "vertex")]
    async fn connect_vertex(&self, cfg: &quetta_vertex::VertexConfig) -> Result<Connected> {
        use quetta_vertex::VertexApi;
        let mut c = cfg.clone();
        c.model = match (&self.model, c.api) {
            (Some(m), _) => m.clone(),
            (None, VertexApi::Predict) => c.endpoint_id.clone().unwrap_or_default(),
            (None, _) if !c.model.is_empty() => c.model.clone(),
            (None, _) => {
                return Err(Error::missing(
                    S::Model,
                    format!("Vertex AI needs a model ({}, e.g. gemini-2.0-flash-001)", S::Model),
                ))
            }
        };
        c.transport = self.managed_transport();
        c.record_headers = self.record_headers.iter().map(|h| h.to_ascii_lowercase()).collect();
        let api = match c.api {
            VertexApi::Gemini => "gemini",
            VertexApi::OpenAi => "openai",
            _ => "predict",
        };
        let base = c
            .endpoint_url
            .clone()
            .unwrap_or_else(|| format!("https://{}-aiplatform.googleapis.com", c.location));
        let (location, model, predict) =
            (c.location.clone(), c.model.clone(), c.api == VertexApi::Predict);
        let e =
            quetta_vertex::VertexEngine::new(c).await.map_err(|e| adapter_error("Vertex AI", e))?;
        let mut notes = vec![Note::Vertex {
            api: api.to_string(),
            location,
            credentials: e.credentials_source().to_string(),
        }];
        if predict {
            notes.push(Note::VertexPredictNotStreamed);
        }
        Ok(self.managed(Arc::new(e), model, base, notes))
    }
}

/// A target, connected: the engine every request goes through, what it is, and (for the
/// embedded simulator) the simulator it keeps running. Cheap to clone; every clone shares
/// one engine (one connection pool) and one simulator.
///
/// ```
/// # let rt = tokio::runtime::Runtime::new().unwrap();
/// let c = rt.block_on(quetta::Target::simulator(Default::default()).connect())?;
/// assert!(c.embedded_simulator);
/// assert_eq!((c.backend.as_str(), c.endpoint()), ("openai-chat", "chat"));
/// # Ok::<(), quetta::Error>(())
/// ```
#[derive(Clone)]
pub struct Connected {
    pub engine: Arc<dyn Engine>,
    pub model: String,
    /// The endpoint's URL (for the summary's target).
    pub base_url: String,
    /// The engine's name (`openai-chat`, `litellm-chat`, `anthropic`, `sagemaker`, ...).
    pub backend: String,
    /// The protocol spoken (chat for the managed endpoints, whatever their wire format).
    pub protocol: Protocol,
    pub embedded_simulator: bool,
    /// What a reader of the results must know about the target.
    pub notes: Vec<Note>,
    pub simulator: Option<Arc<Simulator>>,
    api_key: Option<ApiKey>,
    insecure: bool,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("backend", &self.backend)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Connected {
    /// The target's own API key, for requests to the same origin (a cache reset, the
    /// server's `/metrics`).
    pub(crate) fn same_origin_key(&self) -> Option<&ApiKey> {
        self.api_key.as_ref()
    }

    /// Whether TLS certificates go unchecked (as the target was told).
    pub(crate) fn insecure(&self) -> bool {
        self.insecure
    }

    /// The endpoint type results record (`chat`, `completions`, `responses`, ...).
    pub fn endpoint(&self) -> &'static str {
        self.protocol.endpoint()
    }
}

fn model_error(url: &str, reason: String) -> Error {
    Error::Target(TargetError::Model { url: url.to_owned(), reason })
}

fn adapter_error(
    provider: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Target(TargetError::Adapter { provider, source: Box::new(e) })
}

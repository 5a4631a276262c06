use quetta_http::fetch::ApiKey;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request, Uri};
use http_body_util::Full;
use quetta_engine::{Engine, EngineError, EngineRequest, EventStream, Message, Prompt};
use serde_json::{json, Map, Value};

use crate::decode::{excerpt, ChunkDecoder};
use quetta_http::{BuildError, SseBody, StatusErrorFn, StreamOptions, Transport, TransportConfig};

/// Which OpenAI API the adapter speaks.
///
/// ```
/// use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};
/// let e = OpenAiEngine::new(OpenAiConfig::new("http://127.0.0.1:8000", Api::Completions, "m")).unwrap();
/// assert_eq!(quetta_engine::Engine::name(&e), "openai-completions");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completions,
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
    /// Limit on establishing a connection (TCP and TLS); the other phases are the runner's.
    pub connect_timeout: Option<std::time::Duration>,
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
    /// The server is known to keep a connection after a streamed response (see
    /// [`TransportConfig::keeps_streams`]).
    pub keeps_streams: bool,
}

impl OpenAiConfig {
    /// The transport settings of this configuration.
    pub fn transport(&self) -> TransportConfig {
        TransportConfig {
            insecure: self.insecure,
            ca_cert: self.ca_cert.clone(),
            http2: self.http2,
            connect_timeout: self.connect_timeout,
            keeps_streams: self.keeps_streams,
        }
    }

    /// Defaults for a server at `base_url`.
    pub fn new(base_url: impl Into<String>, api: Api, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api,
            endpoint_path: None,
            model: model.into(),
            api_key: None,
            http2: false,
            connect_timeout: None,
            max_event_bytes: quetta_http::sse::DEFAULT_MAX_EVENT_BYTES,
            include_usage: true,
            insecure: false,
            ca_cert: None,
            session_header: Some("x-session-id".into()),
            session_body_field: Some("user".into()),
            request_id_header: Some("x-quetta-request-id".into()),
            max_tokens_field: "max_tokens".into(),
            record_headers: Vec::new(),
            keeps_streams: false,
        }
    }
}

/// The OpenAI-compatible engine. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct OpenAiEngine {
    transport: Transport,
    uri: Uri,
    auth: Option<HeaderValue>,
    cfg: OpenAiConfig,
    session_header: Option<HeaderName>,
    request_id_header: Option<HeaderName>,
    name: &'static str,
    /// What every request's response stream is read with (per request only `streaming`
    /// changes).
    opts: StreamOptions,
}

/// Parse and check a base URL; join it with `path` (`/v1` is not doubled).
pub fn join_url(base: &str, path: &str) -> Result<Uri, BuildError> {
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
            Some(k) => Some(
                k.bearer()
                    .map_err(|_| BuildError::Header("authorization (value not shown)".into()))?,
            ),
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
        let transport = Transport::new(&cfg.transport())?;
        let name = match cfg.api {
            Api::Chat => "openai-chat",
            Api::Completions => "openai-completions",
        };
        let opts = StreamOptions {
            streaming: true,
            record_headers: cfg.record_headers.clone().into(),
            status_error: None,
        };
        Ok(Self { transport, uri, auth, cfg, session_header, request_id_header, name, opts })
    }

    /// Name this engine's error answers with `f` (an adapter over a proxy with its own error
    /// objects, e.g. LiteLLM) and report it as `name`.
    pub(crate) fn customised(mut self, name: &'static str, f: StatusErrorFn) -> Self {
        self.name = name;
        self.opts.status_error = Some(f);
        self
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &OpenAiConfig {
        &self.cfg
    }

    /// The JSON body for a request (public for tests and `--dry-run`).
    pub fn body(&self, req: &EngineRequest) -> Result<Value, EngineError> {
        request_body(&self.cfg, req)
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
        for (k, v) in &req.params.extra_headers {
            r = r.header(k.as_str(), v.as_str());
        }
        r.body(Full::new(Bytes::from(body)))
            .map_err(|e| EngineError::Request(format!("cannot build request: {e}")))
    }
}

/// The OpenAI JSON body of a request under `cfg` (also used by adapters that carry OpenAI
/// bodies over another protocol: SageMaker's messages API, Vertex AI's OpenAI endpoint).
pub fn request_body(cfg: &OpenAiConfig, req: &EngineRequest) -> Result<Value, EngineError> {
    let mut b = Map::new();
    b.insert("model".into(), Value::String(cfg.model.clone()));
    match (&req.prompt, cfg.api) {
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
    if req.stream && cfg.include_usage {
        b.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(n) = req.max_tokens {
        b.insert(cfg.max_tokens_field.clone(), json!(n));
    }
    if req.ignore_eos {
        b.insert("ignore_eos".into(), Value::Bool(true));
    }
    if let Some(n) = req.min_tokens {
        b.insert("min_tokens".into(), json!(n));
    }
    if let Some(t) = req.params.sampling.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.params.sampling.top_p {
        b.insert("top_p".into(), json!(p));
    }
    if let Some(s) = req.params.sampling.seed {
        b.insert("seed".into(), json!(s));
    }
    if let (Some(sid), Some(field)) = (&req.session_id, &cfg.session_body_field) {
        b.insert(field.clone(), Value::String(sid.clone()));
    }
    for (k, v) in &req.params.extra_body {
        b.insert(k.clone(), v.clone());
    }
    Ok(Value::Object(b))
}

impl Engine for OpenAiEngine {
    fn name(&self) -> &str {
        self.name
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let built = self.build_request(&request);
        let body = SseBody::new(self.cfg.max_event_bytes, ChunkDecoder::new(request.capture_text));
        let opts = StreamOptions { streaming: request.stream, ..self.opts.clone() };
        self.transport.stream(built, Box::new(body), &opts)
    }
}

/// `GET /v1/models` and return the model ids, for a default `--model`.
pub async fn list_models(
    base_url: &str,
    api_key: Option<&ApiKey>,
    insecure: bool,
    timeout: Duration,
) -> Result<Vec<String>, EngineError> {
    let uri = join_url(base_url, "/v1/models").map_err(|e| EngineError::Request(e.to_string()))?;
    let transport = Transport::new(&TransportConfig { insecure, ..TransportConfig::default() })
        .map_err(|e| EngineError::Request(e.to_string()))?;
    let mut req = Request::builder().method(Method::GET).uri(uri);
    if let Some(k) = api_key {
        req = req.header(AUTHORIZATION, k.bearer()?);
    }
    let req = req.body(Full::new(Bytes::new())).map_err(|e| EngineError::Request(e.to_string()))?;
    let r = transport.fetch(req, timeout, 16 << 20).await?;
    if r.status != 200 {
        return Err(EngineError::HttpStatus {
            status: r.status,
            body_excerpt: excerpt(&String::from_utf8_lossy(&r.body), 512),
            retry_after: None,
        });
    }
    parse_models(&r.body)
}

/// The model ids of a `/v1/models` answer (`{"data": [{"id": …}, …]}`).
pub fn parse_models(body: &[u8]) -> Result<Vec<String>, EngineError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| EngineError::Protocol(format!("bad /v1/models JSON: {e}")))?;
    Ok(v["data"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default())
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
        r.params = std::sync::Arc::new(quetta_engine::RequestParams {
            sampling: quetta_engine::Sampling { seed: Some(42), ..Default::default() },
            ..Default::default()
        });
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

//! Amazon Bedrock's runtime, signed for the service `bedrock`.
//!
//! - The Converse API (the default): `ConverseStream` (`POST /model/ID/converse-stream`)
//!   and, when not streaming, `Converse`: one body for every model (`messages`, `system`,
//!   `inferenceConfig`), answered in typed events.
//! - The Invoke API: `InvokeModelWithResponseStream` (`/model/ID/invoke-with-response-stream`)
//!   and `InvokeModel` (`/invoke`), with the model provider's own body, from its
//!   [`Family`] (told from the model id, or given).
//!
//! The model id may be a base model id, a cross-region inference profile id
//! (`us.anthropic.…`) or an ARN (foundation model, inference profile, provisioned
//! throughput); it is percent-encoded into the path. The answers are the AWS event stream
//! ([`crate::eventstream`]), decoded by [`decode`].

pub mod decode;
mod family;

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Full;
use quetta_engine::{Engine, EngineError, EngineRequest, EventStream, Prompt};
use quetta_http::{BodyDecoder, SseBody, StreamOptions, Transport, TransportConfig};
use serde_json::{json, Map, Value};

pub use family::{Family, FAMILIES};

use crate::eventstream::EventStreamBody;
use crate::sigv4::{self, CredentialSource, Signer};
use crate::{payload, status_error, AwsError};
use decode::{ConverseEvents, InvokeChunks, WholeInvoke};

/// Which of Bedrock's APIs requests go to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BedrockApi {
    /// `ConverseStream` / `Converse`: one request shape for every model.
    #[default]
    Converse,
    /// `InvokeModelWithResponseStream` / `InvokeModel`: the model's own body.
    Invoke,
}

impl BedrockApi {
    /// `converse` or `invoke`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Converse => "converse",
            Self::Invoke => "invoke",
        }
    }
}

/// Configuration of a [`BedrockEngine`].
///
/// ```
/// let mut c = quetta_aws::BedrockConfig::new("us.meta.llama3-3-70b-instruct-v1:0");
/// c.api = quetta_aws::BedrockApi::Invoke;
/// assert_eq!(c.family().unwrap().name, "llama");
/// ```
#[derive(Debug, Clone)]
pub struct BedrockConfig {
    /// A model id, an inference profile id, or an ARN.
    pub model_id: String,
    pub api: BedrockApi,
    /// The body family for [`BedrockApi::Invoke`]; else told from the model id.
    pub family: Option<Family>,
    /// Region; else `AWS_REGION`, `AWS_DEFAULT_REGION` or the profile's.
    pub region: Option<String>,
    /// Profile in the shared config and credentials files; else `AWS_PROFILE` or `default`.
    pub profile: Option<String>,
    /// Endpoint override (`http://127.0.0.1:PORT` for a local fake, a VPC endpoint); else
    /// `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, `AWS_ENDPOINT_URL`, or the regional endpoint.
    pub endpoint_url: Option<String>,
    pub credentials: CredentialSource,
    pub transport: TransportConfig,
    pub max_event_bytes: usize,
    /// Response headers to copy into each record (names, or prefixes ending in `*`).
    pub record_headers: Vec<String>,
}

impl BedrockConfig {
    pub fn new(model_id: impl Into<String>) -> Self {
        Self {
            model_id: model_id.into(),
            api: BedrockApi::Converse,
            family: None,
            region: None,
            profile: None,
            endpoint_url: None,
            credentials: CredentialSource::Chain,
            transport: TransportConfig::default(),
            max_event_bytes: 1 << 20,
            record_headers: Vec::new(),
        }
    }

    /// The body family the Invoke API would use: the given one, else the model id's.
    pub fn family(&self) -> Result<Family, AwsError> {
        match &self.family {
            Some(f) => Ok(f.clone()),
            None => Family::for_model(&self.model_id).ok_or_else(|| AwsError::UnknownFamily {
                model: self.model_id.clone(),
                known: FAMILIES.join(", "),
            }),
        }
    }
}

/// The Bedrock engine. Build it inside a tokio runtime (it fetches credentials and keeps
/// refreshing them).
#[derive(Debug)]
pub struct BedrockEngine {
    transport: Transport,
    signer: Signer,
    base: String,
    stream_uri: Uri,
    whole_uri: Uri,
    /// The Invoke API's family (`None` for Converse).
    family: Option<Family>,
    opts: StreamOptions,
    cfg: BedrockConfig,
}

impl BedrockEngine {
    /// Resolve the region, endpoint and (for Invoke) the body family; fetch credentials
    /// once and start refreshing them.
    pub async fn new(cfg: BedrockConfig) -> Result<Self, AwsError> {
        let family = match cfg.api {
            BedrockApi::Invoke => Some(cfg.family()?),
            BedrockApi::Converse => None,
        };
        let signer =
            Signer::new(&cfg.credentials, cfg.region.as_deref(), cfg.profile.as_deref(), "bedrock")
                .await?;
        let base = sigv4::base_url(
            cfg.endpoint_url.as_deref(),
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
            signer.chain_endpoint_url.as_deref(),
            "bedrock-runtime",
            signer.region(),
        )?;
        let id = quetta_http::fetch::percent_encode(&cfg.model_id);
        let (stream, whole) = match cfg.api {
            BedrockApi::Converse => ("converse-stream", "converse"),
            BedrockApi::Invoke => ("invoke-with-response-stream", "invoke"),
        };
        let stream_uri = sigv4::uri(&base, &format!("/model/{id}/{stream}"))?;
        let whole_uri = sigv4::uri(&base, &format!("/model/{id}/{whole}"))?;
        let transport = Transport::new(&cfg.transport)?;
        let opts = StreamOptions {
            streaming: true,
            record_headers: cfg.record_headers.clone().into(),
            status_error: Some(Arc::new(status_error)),
        };
        Ok(Self { transport, signer, base, stream_uri, whole_uri, family, opts, cfg })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        self.signer.region()
    }

    /// The runtime endpoint's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The Invoke API's body family (`None` with Converse).
    pub fn family(&self) -> Option<&Family> {
        self.family.as_ref()
    }

    /// How many times credentials were fetched so far (the first fetch included).
    pub fn credential_fetches(&self) -> u64 {
        self.signer.fetches()
    }

    /// The JSON body sent for `req`.
    pub fn body(&self, req: &EngineRequest) -> Result<Value, EngineError> {
        let mut b = match &self.family {
            Some(f) => payload::fill_template(&f.body, req)?,
            None => converse_body(req)?,
        };
        for (k, v) in &req.params.extra_body {
            b[k] = v.clone();
        }
        Ok(b)
    }

    fn build(&self, req: &EngineRequest) -> Result<Request<Full<Bytes>>, EngineError> {
        let body = serde_json::to_vec(&self.body(req)?)
            .map_err(|e| EngineError::Request(e.to_string()))?;
        let uri = if req.stream { &self.stream_uri } else { &self.whole_uri };
        let mut headers: Vec<(&str, String)> = vec![
            ("content-type", "application/json".into()),
            ("accept", "application/json".into()),
            ("x-quetta-request-id", req.request_id.to_string()),
        ];
        for (k, v) in &req.params.extra_headers {
            headers.push((k.as_str(), v.clone()));
        }
        self.signer.post(uri, &headers, body)
    }

    fn decoder(&self, req: &EngineRequest) -> Box<dyn BodyDecoder> {
        let max = self.cfg.max_event_bytes;
        match (&self.family, req.stream) {
            (None, true) => Box::new(EventStreamBody::typed(
                Box::new(ConverseEvents::new(req.capture_text)),
                max,
            )),
            (None, false) => Box::new(SseBody::new(max, ConverseEvents::new(req.capture_text))),
            (Some(f), true) => Box::new(EventStreamBody::typed(
                Box::new(InvokeChunks::new(f.clone(), req.capture_text)),
                max,
            )),
            (Some(f), false) => {
                Box::new(WholeInvoke::new(InvokeChunks::new(f.clone(), req.capture_text)))
            }
        }
    }
}

/// Converse's body: the conversation with its system prompt apart, content as blocks;
/// sampling in `inferenceConfig`.
fn converse_body(req: &EngineRequest) -> Result<Value, EngineError> {
    let messages = match &req.prompt {
        Prompt::Chat(m) => m.clone(),
        Prompt::Text(t) => vec![quetta_engine::Message::text("user", t.clone())],
        other => {
            return Err(EngineError::Request(format!(
                "Bedrock's Converse API takes a conversation, not a prompt like {other:?}"
            )))
        }
    };
    let (system, chat): (Vec<_>, Vec<_>) = messages.iter().partition(|m| m.role == "system");
    let mut b = Map::new();
    b.insert(
        "messages".into(),
        chat.iter()
            .map(|m| json!({"role": m.role, "content": [{"text": m.text_content()}]}))
            .collect(),
    );
    if !system.is_empty() {
        b.insert(
            "system".into(),
            system.iter().map(|m| json!({"text": m.text_content()})).collect(),
        );
    }
    let mut ic = Map::new();
    if let Some(n) = req.max_tokens {
        ic.insert("maxTokens".into(), json!(n));
    }
    let s = req.sampling();
    if let Some(t) = s.temperature {
        ic.insert("temperature".into(), json!(t));
    }
    if let Some(p) = s.top_p {
        ic.insert("topP".into(), json!(p));
    }
    if !ic.is_empty() {
        b.insert("inferenceConfig".into(), Value::Object(ic));
    }
    Ok(Value::Object(b))
}

impl Engine for BedrockEngine {
    fn name(&self) -> &'static str {
        match self.cfg.api {
            BedrockApi::Converse => "bedrock-converse",
            BedrockApi::Invoke => "bedrock-invoke",
        }
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let built = self.build(&request);
        let opts = StreamOptions { streaming: request.stream, ..self.opts.clone() };
        self.transport.stream(built, self.decoder(&request), &opts)
    }
}

//! Amazon SageMaker: `InvokeEndpointWithResponseStream`
//! (`POST /endpoints/NAME/invocations-response-stream`) and, when not streaming,
//! `InvokeEndpoint` (`/invocations`), signed for the service `sagemaker`. The event stream's
//! payload parts are re-buffered into the container's own framing ([`crate::payload`]).

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Full;
use quetta_engine::{Engine, EngineError, EngineRequest, EventStream};
use quetta_http::{BodyDecoder, SseBody, StreamOptions, Transport, TransportConfig};
use quetta_openai::decode::ChunkDecoder;
use quetta_openai::{Api, OpenAiConfig};
use serde_json::Value;

use crate::payload::{self, JsonLines, Payload};
use crate::sigv4::{self, CredentialSource, Signer};
use crate::{eventstream, status_error, AwsError};

/// Configuration of a [`SageMakerEngine`].
///
/// ```
/// let mut c = quetta_aws::SageMakerConfig::new("my-llm");
/// c.region = Some("us-east-1".into());
/// c.inference_component = Some("ic-1".into());
/// assert_eq!(c.payload, quetta_aws::Payload::OpenAi);
/// ```
#[derive(Debug, Clone)]
pub struct SageMakerConfig {
    /// The endpoint's name.
    pub endpoint_name: String,
    /// `InferenceComponentName` (endpoints hosting inference components).
    pub inference_component: Option<String>,
    /// `TargetVariant`.
    pub target_variant: Option<String>,
    /// `CustomAttributes`, passed to the container verbatim.
    pub custom_attributes: Option<String>,
    /// Region; else `AWS_REGION`, `AWS_DEFAULT_REGION` or the profile's.
    pub region: Option<String>,
    /// Profile in the shared config and credentials files; else `AWS_PROFILE` or `default`.
    pub profile: Option<String>,
    /// Endpoint override (`http://127.0.0.1:PORT` for a local fake); else
    /// `AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`, `AWS_ENDPOINT_URL`, or the regional endpoint.
    pub endpoint_url: Option<String>,
    pub payload: Payload,
    /// The `model` field of an OpenAI body (containers usually ignore it).
    pub model: String,
    pub credentials: CredentialSource,
    pub transport: TransportConfig,
    pub max_event_bytes: usize,
    /// Response headers to copy into each record (names, or prefixes ending in `*`).
    pub record_headers: Vec<String>,
    /// Body field for the session id (OpenAI payload), if any.
    pub session_body_field: Option<String>,
}

impl SageMakerConfig {
    pub fn new(endpoint_name: impl Into<String>) -> Self {
        Self {
            endpoint_name: endpoint_name.into(),
            inference_component: None,
            target_variant: None,
            custom_attributes: None,
            region: None,
            profile: None,
            endpoint_url: None,
            payload: Payload::OpenAi,
            model: "sagemaker".into(),
            credentials: CredentialSource::Chain,
            transport: TransportConfig::default(),
            max_event_bytes: 1 << 20,
            record_headers: Vec::new(),
            session_body_field: Some("user".into()),
        }
    }
}

/// The SageMaker engine. Build it inside a tokio runtime (it fetches credentials and keeps
/// refreshing them).
#[derive(Debug)]
pub struct SageMakerEngine {
    transport: Transport,
    signer: Signer,
    stream_uri: Uri,
    invoke_uri: Uri,
    openai: OpenAiConfig,
    opts: StreamOptions,
    cfg: SageMakerConfig,
}

impl SageMakerEngine {
    /// Resolve the region and endpoint, fetch credentials once and start refreshing them.
    pub async fn new(cfg: SageMakerConfig) -> Result<Self, AwsError> {
        let signer = Signer::new(
            &cfg.credentials,
            cfg.region.as_deref(),
            cfg.profile.as_deref(),
            "sagemaker",
        )
        .await?;
        let base = sigv4::base_url(
            cfg.endpoint_url.as_deref(),
            "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
            signer.chain_endpoint_url.as_deref(),
            "runtime.sagemaker",
            signer.region(),
        )?;
        let name = quetta_http::fetch::percent_encode(&cfg.endpoint_name);
        let stream_uri =
            sigv4::uri(&base, &format!("/endpoints/{name}/invocations-response-stream"))?;
        let invoke_uri = sigv4::uri(&base, &format!("/endpoints/{name}/invocations"))?;
        let transport = Transport::new(&cfg.transport)?;
        let mut openai = OpenAiConfig::new(base.clone(), Api::Chat, cfg.model.clone());
        openai.session_body_field.clone_from(&cfg.session_body_field);
        // The event stream carries the container's whole answer; usage is in its last chunk.
        openai.include_usage = true;
        let opts = StreamOptions {
            streaming: true,
            record_headers: cfg.record_headers.clone().into(),
            status_error: Some(Arc::new(status_error)),
        };
        Ok(Self { transport, signer, stream_uri, invoke_uri, openai, opts, cfg })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        self.signer.region()
    }

    /// How many times credentials were fetched so far (the first fetch included).
    pub fn credential_fetches(&self) -> u64 {
        self.signer.fetches()
    }

    /// The JSON body sent for `req`.
    pub fn body(&self, req: &EngineRequest) -> Result<Value, EngineError> {
        match &self.cfg.payload {
            Payload::OpenAi => quetta_openai::request_body(&self.openai, req),
            Payload::JumpStart => payload::jumpstart_body(req),
            Payload::Template { body, .. } => payload::fill_template(body, req),
        }
    }

    fn build(&self, req: &EngineRequest) -> Result<Request<Full<Bytes>>, EngineError> {
        let body = serde_json::to_vec(&self.body(req)?)
            .map_err(|e| EngineError::Request(e.to_string()))?;
        let uri = if req.stream { &self.stream_uri } else { &self.invoke_uri };
        let mut headers: Vec<(&str, String)> = vec![("content-type", "application/json".into())];
        if let Some(v) = &self.cfg.inference_component {
            headers.push(("x-amzn-sagemaker-inference-component", v.clone()));
        }
        if let Some(v) = &self.cfg.target_variant {
            headers.push(("x-amzn-sagemaker-target-variant", v.clone()));
        }
        if let Some(v) = &self.cfg.custom_attributes {
            headers.push(("x-amzn-sagemaker-custom-attributes", v.clone()));
        }
        headers.push(("x-quetta-request-id", req.request_id.to_string()));
        self.signer.post(uri, &headers, body)
    }

    fn decoder(&self, req: &EngineRequest) -> Box<dyn BodyDecoder> {
        let max = self.cfg.max_event_bytes;
        let inner: Box<dyn BodyDecoder> = match &self.cfg.payload {
            Payload::OpenAi => Box::new(SseBody::new(
                self.cfg.max_event_bytes,
                ChunkDecoder::new(req.capture_text),
            )),
            Payload::JumpStart => Box::new(JsonLines::new("/token/text", req.capture_text, max)),
            Payload::Template { text_pointer, .. } => {
                Box::new(JsonLines::new(text_pointer.clone(), req.capture_text, max))
            }
        };
        let framing: Box<dyn BodyDecoder> = if req.stream {
            Box::new(eventstream::EventStreamBody::new(inner, self.cfg.max_event_bytes))
        } else if matches!(self.cfg.payload, Payload::JumpStart) {
            Box::new(JsonLines::new("/generated_text", req.capture_text, max))
        } else {
            inner
        };
        framing
    }
}

impl Engine for SageMakerEngine {
    fn name(&self) -> &'static str {
        "sagemaker"
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let built = self.build(&request);
        let opts = StreamOptions { streaming: request.stream, ..self.opts.clone() };
        self.transport.stream(built, self.decoder(&request), &opts)
    }
}

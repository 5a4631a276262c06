//! Amazon SageMaker adapter for Quetta.
//!
//! Streams with `InvokeEndpointWithResponseStream` (`POST /endpoints/NAME/invocations-response-stream`)
//! and, when not streaming, calls `InvokeEndpoint` (`/invocations`). Every request is signed
//! with SigV4 (`aws-sigv4`, service `sagemaker`) with credentials from the standard AWS chain
//! (`aws-config`: environment, shared credentials and config files with profiles, SSO, web
//! identity, container and instance metadata, credential processes). Credentials are
//! fetched once before the run and refreshed in the background before they expire
//! ([`quetta_http::refresh`]), never per request.
//!
//! The response body is the AWS binary event stream ([`eventstream`]); its payload parts are
//! re-buffered into the container's own framing ([`payload`]). Each body chunk is stamped on
//! arrival by the shared transport before any of this decoding, as for every backend.
//! Errors map to typed kinds: `auth`, `throttled`, `model_error`, `validation`,
//! `stream_failure` (see docs/METRICS.md).

pub mod eventstream;
pub mod payload;

use std::sync::Arc;
use std::time::SystemTime;

use aws_config::BehaviorVersion;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::{Method, Request, Uri};
use http_body_util::Full;
use quetta_engine::{Engine, EngineError, EngineRequest, EventStream};
use quetta_http::refresh::{Expiring, Refreshing};
use quetta_http::{
    excerpt, BodyDecoder, ErrorAnswer, SseBody, StreamOptions, Transport, TransportConfig,
};
use quetta_openai::decode::ChunkDecoder;
use quetta_openai::{Api, OpenAiConfig};
use serde_json::Value;

pub use payload::{JsonLines, Payload};

/// Where the credentials come from.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum CredentialSource {
    /// The standard AWS chain, with an optional profile.
    #[default]
    Chain,
    /// Fixed credentials (tests, embedders that manage their own).
    Static(Credentials),
}

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Chain => "Chain",
            Self::Static(_) => "Static(<redacted>)",
        })
    }
}

/// Configuration of a [`SageMakerEngine`].
///
/// ```
/// let mut c = quetta_sagemaker::SageMakerConfig::new("my-llm");
/// c.region = Some("us-east-1".into());
/// c.inference_component = Some("ic-1".into());
/// assert_eq!(c.payload, quetta_sagemaker::Payload::OpenAi);
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

/// The adapter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SageMakerError {
    #[error("no AWS region: pass --aws-region or set AWS_REGION (or a region in the profile)")]
    NoRegion,
    #[error("no AWS credentials provider could be configured")]
    NoCredentialsProvider,
    #[error("AWS credentials: {0}")]
    Credentials(String),
    #[error(transparent)]
    Build(#[from] quetta_http::BuildError),
    #[error("invalid endpoint URL {url:?}: {reason}")]
    Url { url: String, reason: String },
}

/// The SageMaker engine. Build it inside a tokio runtime (it fetches credentials and keeps
/// refreshing them).
#[derive(Debug)]
pub struct SageMakerEngine {
    transport: Transport,
    creds: Refreshing<Credentials>,
    region: String,
    stream_uri: Uri,
    invoke_uri: Uri,
    openai: OpenAiConfig,
    opts: StreamOptions,
    cfg: SageMakerConfig,
}

/// An error and its sources, by their `Display` only: the SDK's `Debug` output includes raw
/// responses (an IMDS session token, a credentials body), which must not reach a log.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let m = x.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = x.source();
    }
    s
}

/// Loads the region and a credentials provider from the standard chain. The chain's own
/// HTTP calls (STS, SSO, metadata) use rustls with the ring provider, the same as the rest
/// of Quetta.
async fn load_chain(
    cfg: &SageMakerConfig,
) -> Result<
    (String, aws_credential_types::provider::SharedCredentialsProvider, Option<String>),
    SageMakerError,
> {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring))
        .build_https();
    let mut l = aws_config::defaults(BehaviorVersion::latest()).http_client(http);
    if let Some(p) = &cfg.profile {
        l = l.profile_name(p);
    }
    if let Some(r) = &cfg.region {
        l = l.region(aws_config::Region::new(r.clone()));
    }
    let sdk = l.load().await;
    let region = sdk.region().map(ToString::to_string).ok_or(SageMakerError::NoRegion)?;
    let provider = sdk.credentials_provider().ok_or(SageMakerError::NoCredentialsProvider)?;
    Ok((region, provider, sdk.endpoint_url().map(str::to_owned)))
}

impl SageMakerEngine {
    /// Resolve the region and endpoint, fetch credentials once and start refreshing them.
    pub async fn new(cfg: SageMakerConfig) -> Result<Self, SageMakerError> {
        let (region, creds, env_url) = match &cfg.credentials {
            CredentialSource::Static(c) => {
                let region = cfg
                    .region
                    .clone()
                    .or_else(|| std::env::var("AWS_REGION").ok())
                    .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
                    .ok_or(SageMakerError::NoRegion)?;
                (region, Refreshing::fixed(c.clone()), None)
            }
            CredentialSource::Chain => {
                let (region, provider, env_url) = load_chain(&cfg).await?;
                let creds = Refreshing::start(move || {
                    let p = provider.clone();
                    async move {
                        let c = p.provide_credentials().await.map_err(|e| error_chain(&e))?;
                        Ok(Expiring { expires: c.expiry(), value: c })
                    }
                })
                .await
                .map_err(SageMakerError::Credentials)?;
                (region, creds, env_url)
            }
        };
        let base = cfg
            .endpoint_url
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME").ok())
            .or(env_url)
            .unwrap_or_else(|| {
                let suffix =
                    if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
                format!("https://runtime.sagemaker.{region}.{suffix}")
            });
        let name = quetta_http::fetch::percent_encode(&cfg.endpoint_name);
        let uri = |path: &str| -> Result<Uri, SageMakerError> {
            let u = format!("{}/endpoints/{name}/{path}", base.trim_end_matches('/'));
            u.parse().map_err(|e: http::uri::InvalidUri| SageMakerError::Url {
                url: u.clone(),
                reason: e.to_string(),
            })
        };
        let (stream_uri, invoke_uri) = (uri("invocations-response-stream")?, uri("invocations")?);
        if !base.starts_with("http://") && !base.starts_with("https://") {
            return Err(SageMakerError::Url {
                url: base,
                reason: "it must start with http:// or https://".into(),
            });
        }
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
        Ok(Self { transport, creds, region, stream_uri, invoke_uri, openai, opts, cfg })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// How many times credentials were fetched so far (the first fetch included).
    pub fn credential_fetches(&self) -> u64 {
        self.creds.fetches()
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
        let creds = self.creds.current().map_err(EngineError::Auth)?;
        let identity: Identity = creds.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("sagemaker")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| EngineError::Request(format!("SigV4 parameters: {e}")))?
            .into();
        let uri_s = uri.to_string();
        let signable = SignableRequest::new(
            "POST",
            &uri_s,
            headers.iter().map(|(k, v)| (*k, v.as_str())),
            SignableBody::Bytes(&body),
        )
        .map_err(|e| EngineError::Request(format!("SigV4: {e}")))?;
        let (instructions, _sig) = sign(signable, &params)
            .map_err(|e| EngineError::Request(format!("SigV4: {e}")))?
            .into_parts();
        let mut r = Request::builder().method(Method::POST).uri(uri.clone());
        for (k, v) in &headers {
            r = r.header(*k, v.as_str());
        }
        let mut r = r
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| EngineError::Request(format!("cannot build request: {e}")))?;
        instructions.apply_to_request_http1x(&mut r);
        for name in ["authorization", "x-amz-security-token"] {
            if let Some(v) = r.headers_mut().get_mut(name) {
                v.set_sensitive(true);
            }
        }
        Ok(r)
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

/// The error kind for an AWS error type (`ThrottlingException:http://…` → `throttled`).
pub fn classify(status: u16, error_type: Option<&str>, message: String) -> EngineError {
    let t = error_type.map_or("", |t| t.split(':').next().unwrap_or(t));
    let msg = if t.is_empty() { message } else { format!("{t}: {message}") };
    match t {
        "ThrottlingException" | "TooManyRequestsException" => EngineError::Throttled(msg),
        "ModelError" | "ModelNotReadyException" | "ModelStreamError" => EngineError::Model(msg),
        "ValidationError" | "ValidationException" => EngineError::Validation(msg),
        "InvalidSignatureException"
        | "UnrecognizedClientException"
        | "AccessDeniedException"
        | "ExpiredTokenException"
        | "IncompleteSignature"
        | "MissingAuthenticationToken"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch" => EngineError::Auth(msg),
        _ => match status {
            401 | 403 => EngineError::Auth(msg),
            429 => EngineError::Throttled(msg),
            _ => EngineError::HttpStatus { status, body_excerpt: msg, retry_after: None },
        },
    }
}

/// The typed error of a SageMaker error answer: `x-amzn-ErrorType` and the JSON `message`.
pub fn status_error(a: &ErrorAnswer<'_>) -> EngineError {
    let v: Option<Value> = serde_json::from_slice(a.body).ok();
    let msg = v
        .as_ref()
        .and_then(|v| v.get("message").or_else(|| v.get("Message")))
        .and_then(Value::as_str)
        .map_or_else(|| a.excerpt(), |m| excerpt(m, 512));
    let t = a.headers.get("x-amzn-errortype").and_then(|v| v.to_str().ok());
    let mut e = classify(a.status, t, msg);
    if let EngineError::HttpStatus { retry_after: r, .. } = &mut e {
        r.clone_from(&a.retry_after);
    }
    e
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

/// Static test credentials, as the AWS documentation's examples use.
pub fn static_credentials(
    access_key: &str,
    secret: &str,
    session_token: Option<&str>,
) -> Credentials {
    Credentials::new(access_key, secret, session_token.map(str::to_owned), None, "quetta-static")
}

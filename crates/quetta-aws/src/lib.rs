//! Amazon Web Services adapters for Quetta: the AWS transport family.
//!
//! - [`sagemaker`]: SageMaker endpoints (`InvokeEndpointWithResponseStream`, `InvokeEndpoint`).
//! - [`bedrock`]: Bedrock's runtime (`ConverseStream`, `Converse`,
//!   `InvokeModelWithResponseStream`, `InvokeModel`).
//!
//! What they share, written once: SigV4 signing with credentials from the standard AWS chain
//! (`aws-config`: environment, shared credentials and config files with profiles, SSO, web
//! identity, container and instance metadata, credential processes), fetched once before
//! the run and refreshed in the background before they expire, never per request
//! ([`sigv4`]); the binary event stream ([`eventstream`]); the typed errors of AWS error
//! answers ([`status_error`]). Each body chunk is stamped on arrival by the shared transport
//! before any of this decoding, as for every backend. Errors map to typed kinds: `auth`,
//! `throttled`, `model_error`, `validation`, `stream_failure` (see docs/METRICS.md).

pub mod bedrock;
pub mod eventstream;
pub mod payload;
pub mod sagemaker;
pub mod sigv4;

use quetta_engine::EngineError;
use quetta_http::{excerpt, ErrorAnswer};
use serde_json::Value;

pub use bedrock::{BedrockApi, BedrockConfig, BedrockEngine, Family};
pub use payload::{JsonLines, Payload};
pub use sagemaker::{SageMakerConfig, SageMakerEngine};
pub use sigv4::{static_credentials, CredentialSource};

/// An AWS adapter could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwsError {
    #[error("no AWS region: give one, or set AWS_REGION (or a region in the profile)")]
    NoRegion,
    #[error("no AWS credentials provider could be configured")]
    NoCredentialsProvider,
    #[error("AWS credentials: {0}")]
    Credentials(String),
    #[error(transparent)]
    Build(#[from] quetta_http::BuildError),
    #[error("invalid endpoint URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// The Bedrock model's request body family cannot be told from its id.
    #[error("cannot tell the request body of Bedrock model {model:?} from its id ({known} are known by their ids); name its family, or use the Converse API, which needs none")]
    UnknownFamily { model: String, known: String },
    /// A family named that is not one of the built-in ones.
    #[error("no Bedrock model family {name:?} (known: {known})")]
    NoSuchFamily { name: String, known: String },
    /// A template payload's file could not be read.
    #[error("reading {}: {source}", path.display())]
    TemplateRead { path: std::path::PathBuf, source: std::io::Error },
    /// A template payload's file is not JSON (its line and column are in `source`).
    #[error("{}: line {}, column {}: not JSON: {source}", path.display(), source.line(), source.column())]
    TemplateJson { path: std::path::PathBuf, source: serde_json::Error },
}

/// The error kind for an AWS error type (`ThrottlingException:http://…` → `throttled`).
pub fn classify(status: u16, error_type: Option<&str>, message: String) -> EngineError {
    let t = error_type.map_or("", |t| t.split(':').next().unwrap_or(t));
    let msg = if t.is_empty() { message } else { format!("{t}: {message}") };
    match t {
        "ThrottlingException" | "TooManyRequestsException" | "ServiceQuotaExceededException" => {
            EngineError::Throttled(msg)
        }
        "ModelError"
        | "ModelErrorException"
        | "ModelNotReadyException"
        | "ModelStreamError"
        | "ModelStreamErrorException"
        | "ModelTimeoutException" => EngineError::Model(msg),
        "ValidationError" | "ValidationException" | "ResourceNotFoundException" => {
            EngineError::Validation(msg)
        }
        "InvalidSignatureException"
        | "UnrecognizedClientException"
        | "AccessDeniedException"
        | "ExpiredTokenException"
        | "IncompleteSignature"
        | "MissingAuthenticationToken"
        | "MissingAuthenticationTokenException"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch" => EngineError::Auth(msg),
        _ => match status {
            401 | 403 => EngineError::Auth(msg),
            429 => EngineError::Throttled(msg),
            _ => EngineError::HttpStatus { status, body_excerpt: msg, retry_after: None },
        },
    }
}

/// The typed error of an AWS error answer: `x-amzn-ErrorType` and the JSON `message`.
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

//! OpenAI-compatible adapters for Quetta: `/v1/chat/completions` and `/v1/completions`,
//! streaming (SSE) and not, over hyper 1.x with a pooled client, HTTP/1.1 and HTTP/2, and
//! https through rustls with certificate verification on.
//!
//! Every body frame is stamped with [`std::time::Instant::now`] the moment hyper hands it
//! over, before the SSE parser or JSON decoder touch it; the events it completes carry that
//! stamp and the frame's index.

mod connect;
pub mod decode;
mod engine;
mod fast;
pub mod fetch;
pub mod refresh;
pub mod sse;
mod tls;
pub mod transport;

pub use connect::ConnectError;
pub use engine::{join_url, list_models, request_body, Api, ApiKey, OpenAiConfig, OpenAiEngine};
pub use transport::{
    BodyDecoder, ErrorAnswer, EventDecoder, Fetched, SseBody, StatusErrorFn, StreamOptions,
    Transport, TransportConfig,
};

/// The adapter could not be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The base URL is malformed or has no `http`/`https` scheme.
    #[error("invalid base URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    /// TLS could not be configured (unreadable CA file, bad PEM).
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// A header name or value is not valid HTTP.
    #[error("invalid header {0:?}")]
    Header(String),
}

//! `quetta-http`: the HTTP transport every Quetta adapter shares (OpenAI, LiteLLM,
//! SageMaker, Vertex AI) and the Prometheus scraper uses.
//!
//! - [`Transport`]: hyper 1.x's pooled client (HTTP/1.1, HTTP/2 by ALPN or prior knowledge)
//!   over a connector that times TCP connect and TLS separately and stamps every socket read
//!   with the kernel's arrival time ([`quetta_net`]); one response state machine
//!   ([`Transport::stream`]) that stamps each body frame before any parsing, enforces the
//!   per-phase timeouts, resends once on a stale pooled connection and drains after the end
//!   marker;
//! - what differs per backend plugs in: a [`BodyDecoder`] (bytes → events), an
//!   [`EventDecoder`] inside [`SseBody`] for server-sent events, and an optional error mapper
//!   ([`StreamOptions::status_error`]);
//! - [`refresh::Refreshing`]: an expiring secret (AWS credentials, Google tokens) kept fresh
//!   in the background; [`fetch`]: small requests (hub files, cache resets, metrics).
//!
//! External types in the public API: `http`, `bytes`, `http_body_util::Full` (request
//! bodies) and `quetta_engine`'s events; nothing of hyper's, tokio's or rustls's.

mod connect;
pub mod fetch;
pub mod refresh;
pub mod sse;
mod tls;
pub mod transport;

pub use connect::ConnectError;
pub use transport::{
    BodyDecoder, ErrorAnswer, EventDecoder, Fetched, SseBody, StatusErrorFn, StreamOptions,
    Transport, TransportConfig,
};

/// The transport could not be configured.
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

/// At most `max` bytes of `s`, cut on a character boundary (error messages quote the start
/// of a server's answer).
pub fn excerpt(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

//! A LiteLLM proxy: OpenAI's protocol in front of many providers, with its own conventions.
//!
//! What the adapter adds to [`OpenAiEngine`]: the proxy's `x-litellm-*` response headers
//! (model id, cost, call id, retries) are kept with every request; its error objects
//! (`{"error": {"message", "type", "param", "code"}}`, messages prefixed `litellm.`) are
//! named by kind with the proxy's own message — a rejected key is `auth`, a rate limit
//! `throttled`, a bad request `validation` — instead of an HTTP status and a JSON excerpt;
//! and it reports itself as `litellm-chat` or `litellm-completions`.

use std::sync::Arc;

use quetta_engine::{Engine, EngineError, EngineRequest, EventStream};
use quetta_http::{BuildError, ErrorAnswer};

use crate::{Api, OpenAiConfig, OpenAiEngine};

/// Configuration of a [`LiteLlmEngine`]: the OpenAI settings of the proxy's endpoint.
#[derive(Debug, Clone)]
pub struct LiteLlmConfig {
    pub openai: OpenAiConfig,
}

impl LiteLlmConfig {
    /// Defaults for a proxy at `base_url` (the proxy's master or virtual key goes in
    /// `openai.api_key`).
    pub fn new(base_url: impl Into<String>, api: Api, model: impl Into<String>) -> Self {
        Self { openai: OpenAiConfig::new(base_url, api, model) }
    }
}

/// The LiteLLM adapter. Cheap to share: clone the `Arc` it lives in.
#[derive(Debug)]
pub struct LiteLlmEngine {
    inner: OpenAiEngine,
}

/// The response headers LiteLLM adds (kept in every request's record).
pub const LITELLM_HEADERS: &str = "x-litellm-*";

impl LiteLlmEngine {
    /// Build the engine. Fails on a malformed URL, an unreadable CA file or a bad header.
    pub fn new(cfg: LiteLlmConfig) -> Result<Self, BuildError> {
        let mut o = cfg.openai;
        if !o.record_headers.iter().any(|h| h == LITELLM_HEADERS) {
            o.record_headers.push(LITELLM_HEADERS.into());
        }
        let name = match o.api {
            Api::Chat => "litellm-chat",
            Api::Completions => "litellm-completions",
        };
        let inner = OpenAiEngine::new(o)?.customised(name, Arc::new(proxy_error));
        Ok(Self { inner })
    }

    /// The OpenAI configuration the engine was built with.
    pub fn config(&self) -> &OpenAiConfig {
        self.inner.config()
    }
}

impl Engine for LiteLlmEngine {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        self.inner.send(request)
    }
}

/// The message of a LiteLLM (or OpenAI-shaped) error object, if the body is one.
fn proxy_message(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let e = v.get("error")?;
    let msg = e.get("message").and_then(serde_json::Value::as_str).or_else(|| e.as_str())?;
    Some(quetta_http::excerpt(msg.trim(), 512))
}

/// Name a non-success answer of the proxy by its kind, in the proxy's own words.
fn proxy_error(a: &ErrorAnswer<'_>) -> EngineError {
    let Some(msg) = proxy_message(a.body) else { return a.http_status() };
    match a.status {
        401 | 403 => EngineError::Auth(format!("HTTP {}: {msg}", a.status)),
        429 => EngineError::Throttled(format!("HTTP 429: {msg}")),
        400 | 422 => EngineError::Validation(format!("HTTP {}: {msg}", a.status)),
        status => EngineError::HttpStatus {
            status,
            body_excerpt: msg,
            retry_after: a.retry_after.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> EngineError {
        let headers = http::HeaderMap::new();
        proxy_error(&ErrorAnswer {
            status,
            headers: &headers,
            body: body.as_bytes(),
            retry_after: None,
        })
    }

    #[test]
    fn proxy_errors_are_named_in_the_proxy_words() {
        let auth = r#"{"error":{"message":"Authentication Error, Invalid proxy server token passed. Received API Key = sk-...1234","type":"auth_error","param":"None","code":"401"}}"#;
        let e = answer(401, auth);
        assert_eq!(e.kind(), "auth");
        assert!(e.to_string().contains("Invalid proxy server token"), "{e}");
        let e = answer(
            429,
            r#"{"error":{"message":"litellm.RateLimitError: slow down","type":"None","param":null,"code":"429"}}"#,
        );
        assert_eq!(e.kind(), "throttled");
        let e = answer(
            400,
            r#"{"error":{"message":"litellm.BadRequestError: Invalid model name passed in model=nope","type":"invalid_request_error","param":"model","code":"400"}}"#,
        );
        assert_eq!(e.kind(), "validation");
        assert!(e.to_string().contains("model=nope"), "{e}");
        let e = answer(
            500,
            r#"{"error":{"message":"litellm.APIConnectionError: upstream refused","type":null,"param":null,"code":"500"}}"#,
        );
        assert_eq!(e.kind(), "http_5xx");
        assert!(e.to_string().contains("upstream refused"), "{e}");
        // not an error object: the generic status error with the body's start
        let e = answer(502, "<html>bad gateway</html>");
        assert_eq!(e.kind(), "http_5xx");
        assert!(e.to_string().contains("bad gateway"), "{e}");
    }

    #[test]
    fn the_engine_keeps_litellm_headers_and_names_itself() {
        let e =
            LiteLlmEngine::new(LiteLlmConfig::new("http://127.0.0.1:1", Api::Chat, "m")).unwrap();
        assert_eq!(e.name(), "litellm-chat");
        assert_eq!(e.config().record_headers, vec![LITELLM_HEADERS.to_owned()]);
    }
}

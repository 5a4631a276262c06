//! A small HTTP(S) GET with redirects, a size limit and a deadline, over the same client
//! stack as the adapters (used to fetch tokenizer files from a model hub).

use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, LOCATION};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use quetta_engine::EngineError;

use crate::engine::{build_client_for, connect_error};

/// `Authorization: Bearer TOKEN`, marked sensitive (never logged by hyper).
fn bearer_value(token: &str) -> Result<HeaderValue, EngineError> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| EngineError::Request("invalid token characters".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

/// The error for a non-success answer: its status and an excerpt of its body.
fn status_error(status: http::StatusCode, body: &[u8]) -> EngineError {
    EngineError::HttpStatus {
        status: status.as_u16(),
        body_excerpt: crate::decode::excerpt(&String::from_utf8_lossy(body), 200),
        retry_after: None,
    }
}

/// GET `url`, following up to 5 redirects, with an optional bearer token (sent only to the
/// first host), failing after `timeout` or beyond `max_bytes`.
pub async fn get(
    url: &str,
    bearer: Option<&str>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Vec<u8>, EngineError> {
    let fut = async {
        let client = build_client_for(false).map_err(|e| EngineError::Request(e.to_string()))?;
        let mut uri: Uri =
            url.parse().map_err(|e| EngineError::Request(format!("bad URL {url}: {e}")))?;
        let first_host = uri.host().map(str::to_owned);
        for _ in 0..6 {
            let mut req = Request::builder().method(Method::GET).uri(uri.clone());
            if let (Some(t), true) = (bearer, uri.host().map(str::to_owned) == first_host) {
                req = req.header(AUTHORIZATION, bearer_value(t)?);
            }
            let req = req
                .body(Full::new(Bytes::new()))
                .map_err(|e| EngineError::Request(e.to_string()))?;
            let resp = client.request(req).await.map_err(|e| connect_error(&e))?;
            let status = resp.status();
            if status.is_redirection() {
                let loc =
                    resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()).ok_or_else(
                        || EngineError::Protocol("redirect without a Location".into()),
                    )?;
                uri = if loc.starts_with('/') {
                    let base = format!(
                        "{}://{}",
                        uri.scheme_str().unwrap_or("https"),
                        uri.authority().map_or("", |a| a.as_str())
                    );
                    format!("{base}{loc}").parse()
                } else {
                    loc.parse()
                }
                .map_err(|e| EngineError::Protocol(format!("bad redirect {loc}: {e}")))?;
                continue;
            }
            let body = Limited::new(resp.into_body(), max_bytes)
                .collect()
                .await
                .map_err(|e| EngineError::Protocol(format!("reading the body: {e}")))?
                .to_bytes();
            if !status.is_success() {
                return Err(status_error(status, &body));
            }
            return Ok(body.to_vec());
        }
        Err(EngineError::Protocol("too many redirects".into()))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| EngineError::Timeout(quetta_engine::TimeoutPhase::Total))?
}

/// POST to `url` with an empty body (e.g. vLLM's `/reset_prefix_cache`, SGLang's
/// `/flush_cache`), with an optional bearer token; any 2xx answer is success, anything else
/// an error carrying the status and an excerpt of the body.
pub async fn post_empty(
    url: &str,
    bearer: Option<&str>,
    insecure: bool,
    timeout: Duration,
) -> Result<Vec<u8>, EngineError> {
    let fut = async {
        let client = build_client_for(insecure).map_err(|e| EngineError::Request(e.to_string()))?;
        let uri: Uri =
            url.parse().map_err(|e| EngineError::Request(format!("bad URL {url}: {e}")))?;
        let mut req = Request::builder().method(Method::POST).uri(uri);
        if let Some(t) = bearer {
            req = req.header(AUTHORIZATION, bearer_value(t)?);
        }
        let req =
            req.body(Full::new(Bytes::new())).map_err(|e| EngineError::Request(e.to_string()))?;
        let resp = client.request(req).await.map_err(|e| connect_error(&e))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| EngineError::Protocol(format!("reading the body: {e}")))?
            .to_bytes();
        if !status.is_success() {
            return Err(status_error(status, &body));
        }
        Ok(body.to_vec())
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| EngineError::Timeout(quetta_engine::TimeoutPhase::Total))?
}

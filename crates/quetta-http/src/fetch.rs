//! Small HTTP(S) requests over the same client stack as the adapters: a GET with redirects
//! (tokenizer files from a model hub) and an empty POST (cache-reset endpoints).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{AUTHORIZATION, LOCATION};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use quetta_engine::{EngineError, TimeoutPhase};

use crate::transport::{Fetched, Transport, TransportConfig};

/// A secret key for a server or a provider. Its `Debug` never shows the key; it leaves the
/// process only as a header value marked sensitive, built here.
///
/// ```
/// let k = quetta_http::fetch::ApiKey::new("sk-secret");
/// assert_eq!(format!("{k:?}"), "ApiKey(<redacted>)");
/// assert!(k.bearer().unwrap().is_sensitive());
/// assert_eq!(k.bearer().unwrap(), "Bearer sk-secret");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for a signature or a token exchange. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `Authorization: Bearer KEY`'s value.
    pub fn bearer(&self) -> Result<HeaderValue, EngineError> {
        bearer_value(&self.0)
    }

    /// The key as a header's whole value (`x-api-key: KEY`), marked sensitive.
    pub fn value(&self) -> Result<HeaderValue, EngineError> {
        let mut v = HeaderValue::from_str(&self.0)
            .map_err(|_| EngineError::Request("invalid key characters".into()))?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// `Authorization: Bearer TOKEN`, marked sensitive (never logged by hyper): the one place a
/// bearer header is made ([`ApiKey::bearer`]).
fn bearer_value(token: &str) -> Result<HeaderValue, EngineError> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| EngineError::Request("invalid token characters".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

/// Percent-encode everything but RFC 3986's unreserved characters (a path segment, a form
/// value).
pub fn percent_encode(s: &str) -> String {
    use std::fmt::Write as _;
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// One request with an optional bearer token and an empty body.
fn request(
    method: Method,
    uri: Uri,
    bearer: Option<&ApiKey>,
) -> Result<Request<Full<Bytes>>, EngineError> {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(k) = bearer {
        req = req.header(AUTHORIZATION, k.bearer()?);
    }
    req.body(Full::new(Bytes::new())).map_err(|e| EngineError::Request(e.to_string()))
}

/// The body of a 2xx answer; anything else is an error with the status and a body excerpt.
fn success(r: Fetched) -> Result<Vec<u8>, EngineError> {
    if (200..300).contains(&r.status) {
        return Ok(r.body.to_vec());
    }
    Err(EngineError::HttpStatus {
        status: r.status,
        body_excerpt: crate::excerpt(&String::from_utf8_lossy(&r.body), 200),
        retry_after: None,
    })
}

fn transport(insecure: bool) -> Result<Transport, EngineError> {
    Transport::new(&TransportConfig { insecure, ..TransportConfig::default() })
        .map_err(|e| EngineError::Request(e.to_string()))
}

fn parse(url: &str) -> Result<Uri, EngineError> {
    url.parse().map_err(|e| EngineError::Request(format!("bad URL {url}: {e}")))
}

/// The origin of a URI: scheme, host and port (the scheme's default when none is written).
/// A credential goes only to the origin it was given for.
pub fn origin(uri: &Uri) -> (String, String, u16) {
    let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
    let default = if scheme == "https" { 443 } else { 80 };
    let host = uri.host().unwrap_or("").to_ascii_lowercase();
    (scheme, host, uri.port_u16().unwrap_or(default))
}

/// GET `url`, following up to 5 redirects, with an optional bearer token (sent only to the
/// first URL's origin: same scheme, host and port; a redirect elsewhere goes without it),
/// failing after `timeout` or beyond `max_bytes`.
pub async fn get(
    url: &str,
    bearer: Option<&ApiKey>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Vec<u8>, EngineError> {
    let deadline = Instant::now() + timeout;
    let t = transport(false)?;
    let mut uri = parse(url)?;
    let first = origin(&uri);
    for _ in 0..6 {
        let token = bearer.filter(|_| origin(&uri) == first);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(EngineError::Timeout(TimeoutPhase::Total));
        }
        let r = t.fetch(request(Method::GET, uri.clone(), token)?, left, max_bytes).await?;
        if (300..400).contains(&r.status) {
            let loc = r
                .headers
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| EngineError::Protocol("redirect without a Location".into()))?;
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
        return success(r);
    }
    Err(EngineError::Protocol("too many redirects".into()))
}

/// POST to `url` with an empty body (e.g. vLLM's `/reset_prefix_cache`, SGLang's
/// `/flush_cache`), with an optional bearer token; any 2xx answer is success, anything else
/// an error carrying the status and an excerpt of the body.
pub async fn post_empty(
    url: &str,
    bearer: Option<&ApiKey>,
    insecure: bool,
    timeout: Duration,
) -> Result<Vec<u8>, EngineError> {
    let t = transport(insecure)?;
    success(t.fetch(request(Method::POST, parse(url)?, bearer)?, timeout, 1 << 20).await?)
}

/// POST a JSON body to `url` (e.g. a server's `/tokenize`), with an optional bearer token;
/// the body of a 2xx answer, anything else an error carrying the status and an excerpt.
pub async fn post_json(
    url: &str,
    bearer: Option<&ApiKey>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, EngineError> {
    let t = transport(false)?;
    let mut req = request(Method::POST, parse(url)?, bearer)?;
    *req.body_mut() = Full::new(Bytes::from(body));
    req.headers_mut()
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    success(t.fetch(req, timeout, 1 << 22).await?)
}

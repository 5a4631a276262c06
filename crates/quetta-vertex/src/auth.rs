//! Google access tokens from application default credentials, in the order Google's
//! libraries use, with one addition first:
//!
//! 1. `GOOGLE_OAUTH_ACCESS_TOKEN` (a token the user already has; never refreshed);
//! 2. the file named by `--vertex-credentials` or `GOOGLE_APPLICATION_CREDENTIALS`;
//! 3. gcloud's well-known file (`$CLOUDSDK_CONFIG` or `~/.config/gcloud`,
//!    `application_default_credentials.json`);
//! 4. the metadata server (`GCE_METADATA_HOST`, else `metadata.google.internal`).
//!
//! A file is a service-account key (`"type": "service_account"`: an RS256-signed JWT is
//! exchanged at its `token_uri`) or gcloud user credentials (`"type": "authorized_user"`: the
//! refresh token is exchanged). Signing uses `ring`, the crypto provider Quetta's TLS already
//! uses. Tokens are refreshed in the background before expiry ([`quetta_http::refresh`]).
//! No token, key or secret is ever put into an error message.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use quetta_http::refresh::{Expiring, Refreshing};
use quetta_http::Transport;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde::Deserialize;

/// The OAuth scope Vertex AI needs.
pub const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Credentials could not be found or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{path}: the private key cannot be used: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("Google access token: {0}")]
    Token(String),
}

/// Where tokens come from.
pub enum Source {
    /// A fixed token (`GOOGLE_OAUTH_ACCESS_TOKEN`).
    Token(String),
    ServiceAccount {
        email: String,
        key_id: Option<String>,
        key: Arc<RsaKeyPair>,
        token_uri: String,
    },
    User {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
    Metadata {
        host: String,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::ServiceAccount { email, token_uri, .. } => {
                write!(f, "ServiceAccount({email}, token_uri {token_uri})")
            }
            Self::User { token_uri, .. } => write!(f, "User(token_uri {token_uri})"),
            Self::Metadata { host } => write!(f, "Metadata({host})"),
        }
    }
}

impl Source {
    /// A short description for the run's notes (no secrets).
    pub fn describe(&self) -> String {
        match self {
            Self::Token(_) => "GOOGLE_OAUTH_ACCESS_TOKEN".into(),
            Self::ServiceAccount { email, .. } => format!("service account {email}"),
            Self::User { .. } => "gcloud user credentials".into(),
            Self::Metadata { host } => format!("metadata server {host}"),
        }
    }
}

#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
}

/// Read a credentials file (service account key or authorized user).
pub fn from_file(path: &Path) -> Result<Source, AuthError> {
    let file_err = |reason: String| AuthError::File { path: path.to_owned(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
    let k: KeyFile = serde_json::from_str(&text).map_err(|e| {
        file_err(format!(
            "not a Google credentials JSON file (line {}, column {}): {}",
            e.line(),
            e.column(),
            format!("{:?} error", e.classify()).to_lowercase()
        ))
    })?;
    let need = |v: Option<String>, field: &str| {
        v.ok_or_else(|| file_err(format!("field `{field}` is missing")))
    };
    match k.kind.as_deref() {
        Some("service_account") => {
            let pem = need(k.private_key, "private_key")?;
            let der = rustls_pemfile::private_key(&mut pem.as_bytes()).ok().flatten().ok_or_else(
                || AuthError::Key {
                    path: path.to_owned(),
                    reason: "field `private_key` holds no PEM private key".into(),
                },
            )?;
            let key = RsaKeyPair::from_pkcs8(der.secret_der())
                .map_err(|e| AuthError::Key { path: path.to_owned(), reason: e.to_string() })?;
            Ok(Source::ServiceAccount {
                email: need(k.client_email, "client_email")?,
                key_id: k.private_key_id,
                key: Arc::new(key),
                token_uri: k.token_uri.unwrap_or_else(|| DEFAULT_TOKEN_URI.into()),
            })
        }
        Some("authorized_user") => Ok(Source::User {
            client_id: need(k.client_id, "client_id")?,
            client_secret: need(k.client_secret, "client_secret")?,
            refresh_token: need(k.refresh_token, "refresh_token")?,
            token_uri: k.token_uri.unwrap_or_else(|| DEFAULT_TOKEN_URI.into()),
        }),
        other => Err(file_err(format!(
            "field `type` is {other:?}; expected \"service_account\" or \"authorized_user\""
        ))),
    }
}

/// Find application default credentials (see the module documentation for the order).
pub fn discover(explicit_file: Option<&Path>) -> Result<Source, AuthError> {
    if let Ok(t) = std::env::var("GOOGLE_OAUTH_ACCESS_TOKEN") {
        if !t.trim().is_empty() {
            return Ok(Source::Token(t.trim().to_owned()));
        }
    }
    if let Some(p) = explicit_file {
        return from_file(p);
    }
    if let Some(p) = std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").filter(|p| !p.is_empty()) {
        return from_file(Path::new(&p));
    }
    let well_known = std::env::var_os("CLOUDSDK_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/gcloud")))
        .map(|d| d.join("application_default_credentials.json"));
    if let Some(p) = well_known.filter(|p| p.is_file()) {
        return from_file(&p);
    }
    let host =
        std::env::var("GCE_METADATA_HOST").unwrap_or_else(|_| "metadata.google.internal".into());
    Ok(Source::Metadata { host })
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = quetta_http::fetch::percent_encode;
    pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

/// The signed JWT assertion of a service account (RS256, one hour).
pub fn jwt_assertion(
    email: &str,
    key_id: Option<&str>,
    key: &RsaKeyPair,
    token_uri: &str,
    scope: &str,
    now: SystemTime,
) -> Result<String, AuthError> {
    let iat = now
        .duration_since(UNIX_EPOCH)
        .map_err(|e| AuthError::Token(format!("the clock is before 1970: {e}")))?
        .as_secs();
    let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
    if let Some(k) = key_id {
        header["kid"] = serde_json::json!(k);
    }
    let claims = serde_json::json!({"iss": email, "scope": scope, "aud": token_uri, "iat": iat, "exp": iat + 3600});
    let signing_input = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let mut sig = vec![0; key.public().modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut sig)
        .map_err(|_| AuthError::Token("RSA signing failed".into()))?;
    Ok(format!("{signing_input}.{}", b64url(&sig)))
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    expires_in: Option<u64>,
    error: Option<String>,
    error_description: Option<String>,
}

async fn exchange(
    transport: &Transport,
    req: Request<Full<Bytes>>,
    what: &str,
) -> Result<Expiring<String>, String> {
    let r =
        transport.fetch(req, FETCH_TIMEOUT, 1 << 20).await.map_err(|e| format!("{what}: {e}"))?;
    let a: Option<TokenAnswer> = serde_json::from_slice(&r.body).ok();
    match a {
        Some(TokenAnswer { access_token: Some(t), expires_in, .. }) if r.status == 200 => {
            Ok(Expiring {
                value: t,
                expires: expires_in.map(|s| SystemTime::now() + Duration::from_secs(s)),
            })
        }
        Some(a) => Err(format!(
            "{what}: HTTP {} {}{}",
            r.status,
            a.error.unwrap_or_default(),
            a.error_description.map(|d| format!(": {d}")).unwrap_or_default()
        )),
        None => Err(format!("{what}: HTTP {} with no token in the answer", r.status)),
    }
}

fn post_form(uri: &str, body: String) -> Result<Request<Full<Bytes>>, String> {
    Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("token request to {uri}: {e}"))
}

/// Fetch one access token from `source`.
pub async fn fetch_token(
    source: &Source,
    transport: &Transport,
    scope: &str,
) -> Result<Expiring<String>, AuthError> {
    fetch_words(source, transport, scope).await.map_err(AuthError::Token)
}

async fn fetch_words(
    source: &Source,
    transport: &Transport,
    scope: &str,
) -> Result<Expiring<String>, String> {
    match source {
        Source::Token(t) => Ok(Expiring { value: t.clone(), expires: None }),
        Source::ServiceAccount { email, key_id, key, token_uri } => {
            let jwt =
                jwt_assertion(email, key_id.as_deref(), key, token_uri, scope, SystemTime::now())
                    .map_err(|e| e.to_string())?;
            let body = form_encode(&[
                ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
                ("assertion", &jwt),
            ]);
            exchange(
                transport,
                post_form(token_uri, body)?,
                &format!("service-account token from {token_uri}"),
            )
            .await
        }
        Source::User { client_id, client_secret, refresh_token, token_uri } => {
            let body = form_encode(&[
                ("grant_type", "refresh_token"),
                ("client_id", client_id),
                ("client_secret", client_secret),
                ("refresh_token", refresh_token),
            ]);
            exchange(
                transport,
                post_form(token_uri, body)?,
                &format!("user token from {token_uri}"),
            )
            .await
        }
        Source::Metadata { host } => {
            let uri =
                format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/token");
            let req = Request::builder()
                .method(Method::GET)
                .uri(&uri)
                .header("metadata-flavor", "Google")
                .body(Full::new(Bytes::new()))
                .map_err(|e| format!("metadata request: {e}"))?;
            exchange(
                transport,
                req,
                &format!("metadata server token from {host} (no credentials file was found)"),
            )
            .await
        }
    }
}

/// Fetch the first token and keep it fresh.
pub async fn token_provider(
    source: Source,
    transport: Transport,
    scope: String,
) -> Result<Refreshing<String>, AuthError> {
    if let Source::Token(t) = &source {
        return Ok(Refreshing::fixed(t.clone()));
    }
    let source = Arc::new(source);
    Refreshing::start(move || {
        let (s, t, sc) = (source.clone(), transport.clone(), scope.clone());
        async move { fetch_words(&s, &t, &sc).await }
    })
    .await
    .map_err(|e| AuthError::Token(e.to_string()))
}

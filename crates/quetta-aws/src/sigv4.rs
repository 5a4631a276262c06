//! What every AWS adapter shares: credentials from the standard chain (or fixed ones),
//! fetched once and refreshed in the background before they expire, and SigV4 signing of
//! each request with `aws-sigv4`.

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
use quetta_engine::EngineError;
use quetta_http::refresh::{Expiring, Refreshing};

use crate::AwsError;

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
    region: Option<&str>,
    profile: Option<&str>,
) -> Result<
    (String, aws_credential_types::provider::SharedCredentialsProvider, Option<String>),
    AwsError,
> {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring))
        .build_https();
    let mut l = aws_config::defaults(BehaviorVersion::latest()).http_client(http);
    if let Some(p) = profile {
        l = l.profile_name(p);
    }
    if let Some(r) = region {
        l = l.region(aws_config::Region::new(r.to_owned()));
    }
    let sdk = l.load().await;
    let region = sdk.region().map(ToString::to_string).ok_or(AwsError::NoRegion)?;
    let provider = sdk.credentials_provider().ok_or(AwsError::NoCredentialsProvider)?;
    Ok((region, provider, sdk.endpoint_url().map(str::to_owned)))
}

/// Signs requests for one service in one region with credentials that stay fresh.
#[derive(Debug)]
pub struct Signer {
    creds: Refreshing<Credentials>,
    region: String,
    service: &'static str,
    /// `AWS_ENDPOINT_URL` (or the profile's `endpoint_url`), if the chain names one.
    pub chain_endpoint_url: Option<String>,
}

impl Signer {
    /// Resolves the region, fetches credentials once and starts refreshing them. Build it
    /// inside a tokio runtime.
    pub async fn new(
        source: &CredentialSource,
        region: Option<&str>,
        profile: Option<&str>,
        service: &'static str,
    ) -> Result<Self, AwsError> {
        let (region, creds, chain_endpoint_url) = match source {
            CredentialSource::Static(c) => {
                let region = region
                    .map(str::to_owned)
                    .or_else(|| std::env::var("AWS_REGION").ok())
                    .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
                    .ok_or(AwsError::NoRegion)?;
                (region, Refreshing::fixed(c.clone()), None)
            }
            CredentialSource::Chain => {
                let (region, provider, env_url) = load_chain(region, profile).await?;
                let creds = Refreshing::start(move || {
                    let p = provider.clone();
                    async move {
                        let c = p.provide_credentials().await.map_err(|e| error_chain(&e))?;
                        Ok::<_, String>(Expiring { expires: c.expiry(), value: c })
                    }
                })
                .await
                .map_err(|e| AwsError::Credentials(e.to_string()))?;
                (region, creds, env_url)
            }
        };
        Ok(Self { creds, region, service, chain_endpoint_url })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// How many times credentials were fetched so far (the first fetch included).
    pub fn fetches(&self) -> u64 {
        self.creds.fetches()
    }

    /// A signed POST of `body` to `uri` with `headers`; the signature and session token are
    /// marked sensitive, so no log of the request shows them.
    pub fn post(
        &self,
        uri: &Uri,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<Request<Full<Bytes>>, EngineError> {
        let creds = self.creds.current().map_err(|e| EngineError::Auth(e.to_string()))?;
        let identity: Identity = creds.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.service)
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
        for (k, v) in headers {
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
}

/// Static test credentials, as the AWS documentation's examples use.
pub fn static_credentials(
    access_key: &str,
    secret: &str,
    session_token: Option<&str>,
) -> Credentials {
    Credentials::new(access_key, secret, session_token.map(str::to_owned), None, "quetta-static")
}

/// The base URL of a service endpoint: the configured one, else the service's environment
/// variable (`AWS_ENDPOINT_URL_<SERVICE>`), else the chain's, else the regional endpoint.
pub(crate) fn base_url(
    configured: Option<&str>,
    env_var: &str,
    chain: Option<&str>,
    host_prefix: &str,
    region: &str,
) -> Result<String, AwsError> {
    let base = configured
        .map(str::to_owned)
        .or_else(|| std::env::var(env_var).ok().filter(|v| !v.is_empty()))
        .or_else(|| chain.map(str::to_owned))
        .unwrap_or_else(|| {
            let suffix =
                if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
            format!("https://{host_prefix}.{region}.{suffix}")
        });
    if !base.starts_with("http://") && !base.starts_with("https://") {
        return Err(AwsError::Url {
            url: base,
            reason: "it must start with http:// or https://".into(),
        });
    }
    Ok(base.trim_end_matches('/').to_owned())
}

/// `base` + `path` as a URI, or an error naming it.
pub(crate) fn uri(base: &str, path: &str) -> Result<Uri, AwsError> {
    let u = format!("{base}{path}");
    u.parse()
        .map_err(|e: http::uri::InvalidUri| AwsError::Url { url: u.clone(), reason: e.to_string() })
}

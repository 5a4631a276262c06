//! The AWS fake's credentials and its own SigV4 check (independent of the SDK under test).

use super::*;

/// Container credentials (`AWS_CONTAINER_CREDENTIALS_FULL_URI` → `/ecs-credentials`) and the
/// instance metadata service (IMDSv2: a session token, the role name, the role's
/// credentials), both issuing the configured key with an expiry `token_lifetime` from now
/// (the Google lifetime if set, else an hour). Each issue is counted in [`ProviderFake::issued`].
pub(super) fn aws_credentials(
    parts: &http::request::Parts,
    path: &str,
    sh: &Shared,
) -> Option<Result<Reply, Refusal>> {
    let key = sh.cfg.aws.as_ref()?;
    let creds = |grant: &str| {
        let life = sh.cfg.aws_credentials_lifetime;
        let now = SystemTime::now();
        let exp = now + life;
        let mut t = sh.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = t.len() + 1;
        t.insert(
            format!("aws-{grant}-{n}"),
            Issued { issued: now, expires: exp, grant: grant.to_owned() },
        );
        let secs = exp.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        json!({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": key.access_key_id, "SecretAccessKey": key.secret_access_key,
               "Token": format!("fake-session-{n}"), "Expiration": rfc3339(secs)})
    };
    let ok = |v: Value| {
        Ok(Reply::Done(Box::new(full(StatusCode::OK, "application/json", v.to_string()))))
    };
    match (&parts.method, path) {
        (&Method::GET, "/ecs-credentials") => Some(ok(creds("container"))),
        (&Method::PUT, "/latest/api/token") => {
            let mut r = full(StatusCode::OK, "text/plain", "imds-session-token");
            r.headers_mut()
                .insert("x-aws-ec2-metadata-token-ttl-seconds", "21600".parse().expect("static"));
            Some(Ok(Reply::Done(Box::new(r))))
        }
        (&Method::GET, p) if p.starts_with("/latest/meta-data/iam/security-credentials") => {
            if parts.headers.get("x-aws-ec2-metadata-token").and_then(|v| v.to_str().ok())
                != Some("imds-session-token")
            {
                return Some(Err((StatusCode::UNAUTHORIZED, vec![], String::new())));
            }
            let role = p
                .trim_start_matches("/latest/meta-data/iam/security-credentials")
                .trim_matches('/');
            if role.is_empty() {
                Some(Ok(Reply::Done(Box::new(full(StatusCode::OK, "text/plain", "quetta-role")))))
            } else {
                Some(ok(creds("imds")))
            }
        }
        _ => None,
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (UTC).
pub(super) fn rfc3339(secs: u64) -> String {
    let t = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339).expect("a UTC time in years 0-9999")
}

// ---------------------------------------------------------------- SigV4 (independent)

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut o, x| {
        let _ = write!(o, "{x:02x}");
        o
    })
}

pub(super) fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), msg).as_ref().to_vec()
}

pub(super) fn sha256_hex(b: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, b).as_ref())
}

/// Non-S3 services sign the path URI-encoded twice: encode the (once-encoded) path again.
pub(super) fn canonical_uri(path: &str) -> String {
    let mut o = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

pub(super) fn check_sigv4(
    parts: &http::request::Parts,
    body: &[u8],
    sh: &Shared,
    service: &str,
) -> Result<(), Refusal> {
    let Some(key) = &sh.cfg.aws else { return Ok(()) };
    let deny = |t: &str, m: &str| -> Refusal {
        (
            StatusCode::FORBIDDEN,
            vec![(
                "x-amzn-errortype",
                format!("{t}:http://internal.amazon.com/coral/com.amazon.coral.service/"),
            )],
            json!({"message": m}).to_string(),
        )
    };
    let h = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
    let auth = h("authorization").ok_or_else(|| {
        deny("MissingAuthenticationTokenException", "Missing Authentication Token")
    })?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| deny("IncompleteSignatureException", "not AWS4-HMAC-SHA256"))?;
    let mut cred = "";
    let mut signed = "";
    let mut sig = "";
    for f in rest.split(',') {
        let f = f.trim();
        if let Some(x) = f.strip_prefix("Credential=") {
            cred = x;
        } else if let Some(x) = f.strip_prefix("SignedHeaders=") {
            signed = x;
        } else if let Some(x) = f.strip_prefix("Signature=") {
            sig = x;
        }
    }
    let scope: Vec<&str> = cred.split('/').collect();
    if scope.len() != 5 || scope[4] != "aws4_request" {
        return Err(deny("IncompleteSignatureException", "bad Credential scope"));
    }
    if scope[0] != key.access_key_id {
        return Err(deny(
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ));
    }
    if scope[2] != key.region || scope[3] != service {
        return Err(deny(
            "InvalidSignatureException",
            "Credential should be scoped to a valid region and service",
        ));
    }
    let amz_date =
        h("x-amz-date").ok_or_else(|| deny("IncompleteSignatureException", "no X-Amz-Date"))?;
    if !amz_date.starts_with(scope[1]) {
        return Err(deny("InvalidSignatureException", "date does not match the credential scope"));
    }
    if !signed.split(';').any(|n| n == "host") || !signed.split(';').any(|n| n == "x-amz-date") {
        return Err(deny("InvalidSignatureException", "host and x-amz-date must be signed"));
    }
    let mut canon_headers = String::new();
    for n in signed.split(';') {
        let v = parts
            .headers
            .get_all(n)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join(",");
        if v.is_empty() && n != "host" {
            return Err(deny(
                "InvalidSignatureException",
                &format!("signed header {n} is missing"),
            ));
        }
        let v = if n == "host" && v.is_empty() {
            parts.uri.authority().map(ToString::to_string).unwrap_or_default()
        } else {
            v
        };
        let _ = writeln!(canon_headers, "{n}:{v}");
    }
    let query = parts.uri.query().unwrap_or("");
    let mut q: Vec<&str> = query.split('&').filter(|s| !s.is_empty()).collect();
    q.sort_unstable();
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        parts.method,
        canonical_uri(parts.uri.path()),
        q.join("&"),
        canon_headers,
        signed,
        sha256_hex(body)
    );
    let sts = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}/{}/{}/aws4_request\n{}",
        scope[1],
        scope[2],
        scope[3],
        sha256_hex(canonical.as_bytes())
    );
    let k = hmac(format!("AWS4{}", key.secret_access_key).as_bytes(), scope[1].as_bytes());
    let k = hmac(&k, scope[2].as_bytes());
    let k = hmac(&k, scope[3].as_bytes());
    let k = hmac(&k, b"aws4_request");
    let want = hex(&hmac(&k, sts.as_bytes()));
    if want != sig {
        return Err(deny("InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."));
    }
    Ok(())
}

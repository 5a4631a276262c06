//! The Google fake: OAuth token exchange (service-account JWTs and refresh tokens), bearer
//! checks, and Vertex AI's Gemini, OpenAI-compatible and predict answers.

use super::*;

pub(super) fn b64url(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s.trim_end_matches('=')).ok()
}

pub(super) fn form(body: &[u8]) -> HashMap<String, String> {
    fn dec(s: &str) -> String {
        let b = s.as_bytes();
        let mut o = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => o.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let h = std::str::from_utf8(&b[i + 1..i + 3])
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok());
                    match h {
                        Some(x) => {
                            o.push(x);
                            i += 2;
                        }
                        None => o.push(b'%'),
                    }
                }
                x => o.push(x),
            }
            i += 1;
        }
        String::from_utf8_lossy(&o).into_owned()
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (dec(k), dec(v)))
        .collect()
}

pub(super) fn oauth_error(e: &str, d: &str) -> Refusal {
    (StatusCode::BAD_REQUEST, vec![], json!({"error": e, "error_description": d}).to_string())
}

pub(super) fn token(body: &[u8], sh: &Shared) -> Result<Response<Body>, Refusal> {
    let Some(g) = &sh.cfg.google else {
        return Err(oauth_error("invalid_client", "no Google auth configured"));
    };
    let f = form(body);
    match f.get("grant_type").map(String::as_str) {
        Some("urn:ietf:params:oauth:grant-type:jwt-bearer") => {
            let a =
                f.get("assertion").ok_or_else(|| oauth_error("invalid_request", "no assertion"))?;
            let parts: Vec<&str> = a.split('.').collect();
            if parts.len() != 3 {
                return Err(oauth_error("invalid_grant", "not a JWT"));
            }
            let header: Value = b64url(parts[0])
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| oauth_error("invalid_grant", "bad JWT header"))?;
            if header["alg"] != "RS256" {
                return Err(oauth_error("invalid_grant", "alg must be RS256"));
            }
            let sig = b64url(parts[2])
                .ok_or_else(|| oauth_error("invalid_grant", "bad signature encoding"))?;
            let signed = format!("{}.{}", parts[0], parts[1]);
            let key = ring::signature::UnparsedPublicKey::new(
                &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                &g.public_key_der,
            );
            key.verify(signed.as_bytes(), &sig)
                .map_err(|_| oauth_error("invalid_grant", "Invalid JWT Signature."))?;
            let claims: Value = b64url(parts[1])
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| oauth_error("invalid_grant", "bad JWT claims"))?;
            let now =
                SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
            let base = sh.base.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if claims["iss"] != g.client_email.as_str() {
                return Err(oauth_error("invalid_grant", "iss is not the service account"));
            }
            if claims["aud"] != format!("{base}/token").as_str() {
                return Err(oauth_error("invalid_grant", "aud is not this token endpoint"));
            }
            if claims["scope"].as_str().is_none_or(str::is_empty) {
                return Err(oauth_error("invalid_scope", "no scope"));
            }
            let (iat, exp) =
                (claims["iat"].as_i64().unwrap_or(0), claims["exp"].as_i64().unwrap_or(0));
            if iat > now + 60 || exp <= now || exp - iat > 3600 {
                return Err(oauth_error("invalid_grant", "Invalid JWT: iat/exp out of range"));
            }
            Ok(issue(sh, "jwt-bearer"))
        }
        Some("refresh_token") => {
            let ok = g.user.as_ref().is_some_and(|(id, secret, rt)| {
                f.get("client_id") == Some(id)
                    && f.get("client_secret") == Some(secret)
                    && f.get("refresh_token") == Some(rt)
            });
            if ok {
                Ok(issue(sh, "refresh_token"))
            } else {
                Err(oauth_error("invalid_grant", "Bad Request"))
            }
        }
        _ => Err(oauth_error("unsupported_grant_type", "unknown grant type")),
    }
}

pub(super) fn issue(sh: &Shared, grant: &str) -> Response<Body> {
    let life = sh.cfg.google.as_ref().map_or(Duration::from_secs(3600), |g| g.token_lifetime);
    let mut t = sh.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let tok = format!(
        "ya29.fake-{}-{}",
        t.len() + 1,
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
    );
    let now = SystemTime::now();
    t.insert(tok.clone(), Issued { issued: now, expires: now + life, grant: grant.to_owned() });
    full(
        StatusCode::OK,
        "application/json",
        json!({"access_token": tok, "expires_in": life.as_secs(), "token_type": "Bearer"})
            .to_string(),
    )
}

pub(super) fn check_bearer(parts: &http::request::Parts, sh: &Shared) -> Result<(), Refusal> {
    if sh.cfg.google.is_none() {
        return Ok(());
    }
    let tok = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let t = sh.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match tok.and_then(|k| t.get(k)) {
        Some(i) if i.expires > SystemTime::now() => Ok(()),
        Some(_) => Err(google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials: the access token expired.",
        )),
        None => Err(google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials.",
        )),
    }
}

pub(super) fn gemini_stream(v: &Value, cfg: &FakeConfig) -> Reply {
    let n = n_tokens(v, cfg);
    let p = prompt_words(v);
    let mut frames = Vec::new();
    for i in 0..n {
        let last = i + 1 == n;
        let mut c =
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": word(i)}]}}]});
        if last {
            c["candidates"][0]["finishReason"] = json!("MAX_TOKENS");
            c["usageMetadata"] = json!({"promptTokenCount": p, "candidatesTokenCount": n, "totalTokenCount": p + u64::from(n)});
        }
        frames.push((at(cfg, i), Bytes::from(format!("data: {c}\r\n\r\n")), true));
    }
    Reply::Stream { ct: "text/event-stream", frames, headers: vec![] }
}

pub(super) fn gemini_full(v: &Value, cfg: &FakeConfig) -> Response<Body> {
    let n = n_tokens(v, cfg);
    let p = prompt_words(v);
    let text: String = (0..n).map(word).collect();
    let c = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "MAX_TOKENS"}],
                   "usageMetadata": {"promptTokenCount": p, "candidatesTokenCount": n, "totalTokenCount": p + u64::from(n)}});
    full(StatusCode::OK, "application/json", c.to_string())
}

pub(super) fn openai_stream(v: &Value, cfg: &FakeConfig) -> Reply {
    let n = n_tokens(v, cfg);
    let mut frames: Vec<(Duration, Bytes, bool)> = (0..n)
        .map(|i| {
            (at(cfg, i), Bytes::from(format!("data: {}\n\n", openai_chunk(&word(i), None))), true)
        })
        .collect();
    let usage = json!({"prompt_tokens": prompt_words(v), "completion_tokens": n});
    let tail = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        openai_chunk("", Some("length")),
        json!({"choices": [], "usage": usage})
    );
    frames.push((at(cfg, n.saturating_sub(1)), Bytes::from(tail), false));
    Reply::Stream { ct: "text/event-stream", frames, headers: vec![] }
}

pub(super) fn predict(v: &Value, cfg: &FakeConfig) -> Response<Body> {
    let n = n_tokens(v, cfg);
    let text: String = (0..n).map(word).collect();
    full(
        StatusCode::OK,
        "application/json",
        json!({"predictions": [text], "deployedModelId": "1"}).to_string(),
    )
}

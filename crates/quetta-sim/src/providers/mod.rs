//! Strict local fakes of managed providers, for testing adapters over real sockets:
//!
//! - Amazon SageMaker runtime: `POST /endpoints/NAME/invocations-response-stream` and
//!   `/invocations`. Every request's SigV4 signature is recomputed here (an implementation
//!   written for the fake, independent of the adapter's `aws-sigv4`) for the configured
//!   test credentials; a wrong one is answered 403 `InvalidSignatureException`. Streams are
//!   AWS event-stream frames (prelude and message CRC-32), each SSE event or JSON line split
//!   over two payload parts, optionally delivered one byte per body chunk, with an optional
//!   corrupted CRC or a `ModelStreamError` exception.
//! - Amazon Bedrock runtime: `POST /model/ID/converse-stream`, `/converse`,
//!   `/invoke-with-response-stream` and `/invoke`, signed for `bedrock` and checked as
//!   above; bodies checked strictly and answered in event-stream frames (see `providers/bedrock.rs`).
//!   Optionally every Nth AWS request is throttled (429 `ThrottlingException`) or a stream
//!   ends in an exception event.
//! - Google: an OAuth token endpoint (`POST /token`) that verifies the RS256 signature of a
//!   service account's JWT assertion (or a refresh token) and issues short-lived tokens, a
//!   metadata-server token route, and Vertex AI routes (`:streamGenerateContent?alt=sse`,
//!   `:generateContent`, the OpenAI-compatible `…/chat/completions`, `:predict`) that reject
//!   unknown or expired tokens with 401.
//!
//! Tokens are generated every `itl` after `ttft`; the time each token's bytes were handed to
//! hyper is recorded, so a client's timestamps can be compared with them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::time::Sleep;

use crate::SimError;

mod aws;
mod bedrock;
mod google;

use aws::{aws_credentials, check_sigv4};
use google::{check_bearer, gemini_full, gemini_stream, issue, openai_stream, predict, token};

/// AWS credentials the fake accepts.
#[derive(Clone)]
pub struct AwsKey {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
}

impl std::fmt::Debug for AwsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKey")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The Google service account (and user) the fake's token endpoint accepts.
#[derive(Clone, Debug)]
pub struct GoogleAuth {
    /// The service account's RSA public key, PKCS#1 `RSAPublicKey` DER.
    pub public_key_der: Vec<u8>,
    pub client_email: String,
    /// Lifetime of issued access tokens.
    pub token_lifetime: Duration,
    /// `(client_id, client_secret, refresh_token)` of an authorized user, if any.
    pub user: Option<(String, String, String)>,
}

/// Configuration of a [`ProviderFake`].
#[derive(Clone, Debug)]
pub struct FakeConfig {
    pub ttft: Duration,
    pub itl: Duration,
    /// Tokens when the request names no limit.
    pub default_tokens: u32,
    pub aws: Option<AwsKey>,
    pub google: Option<GoogleAuth>,
    /// Deliver every SageMaker stream one byte per body chunk.
    pub split_every_byte: bool,
    /// Corrupt the message CRC of the frame that carries this token (0-based).
    pub bad_crc_at: Option<u32>,
    /// Send a `ModelStreamError` exception instead of this token (0-based).
    pub model_stream_error_at: Option<u32>,
    /// Answer every SageMaker and Bedrock request with this status and `x-amzn-ErrorType`
    /// (after the signature check), e.g. `(429, "ThrottlingException")`, `(424, "ModelError")`.
    pub aws_error: Option<(u16, String)>,
    /// Answer every Nth SageMaker or Bedrock request (1-based: N, 2N, …) with 429
    /// `ThrottlingException`, as an account over its quota is.
    pub throttle_every: Option<u64>,
    /// Send this Bedrock exception event (`throttlingException`, `modelStreamErrorException`,
    /// …) instead of this token (0-based).
    pub bedrock_exception_at: Option<(u32, String)>,
    /// Lifetime of AWS credentials issued by the container and IMDS routes.
    pub aws_credentials_lifetime: Duration,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            ttft: Duration::from_millis(20),
            itl: Duration::from_millis(2),
            default_tokens: 16,
            aws: None,
            google: None,
            split_every_byte: false,
            bad_crc_at: None,
            model_stream_error_at: None,
            aws_error: None,
            throttle_every: None,
            bedrock_exception_at: None,
            aws_credentials_lifetime: Duration::from_secs(3600),
        }
    }
}

/// What the fake saw and did for one request.
#[derive(Debug, Clone)]
pub struct FakeRecord {
    pub path: String,
    pub status: u16,
    pub error: Option<String>,
    pub request_id: Option<u64>,
    pub arrival: Instant,
    /// When each token's bytes were handed to hyper.
    pub chunks: Vec<Instant>,
    /// The request's headers (names lower-case), to check what reached the wire.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// A token the fake issued.
#[derive(Debug, Clone)]
pub struct Issued {
    pub issued: SystemTime,
    pub expires: SystemTime,
    pub grant: String,
}

struct Shared {
    cfg: FakeConfig,
    /// SageMaker and Bedrock requests whose signature was accepted.
    aws_requests: std::sync::atomic::AtomicU64,
    records: Mutex<Vec<FakeRecord>>,
    tokens: Mutex<HashMap<String, Issued>>,
    base: Mutex<String>,
}

/// A running fake on 127.0.0.1; stops when dropped.
pub struct ProviderFake {
    addr: SocketAddr,
    sh: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ProviderFake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderFake").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for ProviderFake {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl ProviderFake {
    /// Start on an ephemeral 127.0.0.1 port, on its own thread and runtime.
    pub fn start(cfg: FakeConfig) -> Result<Self, SimError> {
        Self::start_on(cfg, "127.0.0.1:0".parse().expect("static address"))
    }

    /// Start on `bind`, on its own thread and runtime.
    pub fn start_on(cfg: FakeConfig, bind: SocketAddr) -> Result<Self, SimError> {
        let l = std::net::TcpListener::bind(bind)
            .map_err(|source| SimError::Bind { addr: bind, source })?;
        l.set_nonblocking(true).map_err(SimError::Runtime)?;
        let addr = l.local_addr().map_err(SimError::Runtime)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("quetta-fake")
            .enable_all()
            .build()
            .map_err(SimError::Runtime)?;
        let sh = Arc::new(Shared {
            cfg,
            aws_requests: std::sync::atomic::AtomicU64::new(0),
            records: Mutex::new(Vec::new()),
            tokens: Mutex::new(HashMap::new()),
            base: Mutex::new(format!("http://{addr}")),
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let sh2 = sh.clone();
        let thread = std::thread::Builder::new()
            .name("quetta-fake-main".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(l) else { return };
                    crate::answer::accept_loop(listener, rx, move |req| handle(req, sh2.clone()))
                        .await;
                });
            })
            .map_err(SimError::Runtime)?;
        Ok(Self { addr, sh, stop: Some(tx), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token endpoint (`token_uri` of a test service-account key).
    pub fn token_url(&self) -> String {
        format!("{}/token", self.base_url())
    }

    pub fn records(&self) -> Vec<FakeRecord> {
        self.sh.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Every token issued so far, oldest first.
    pub fn issued(&self) -> Vec<Issued> {
        let t = self.sh.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<Issued> = t.values().cloned().collect();
        v.sort_by_key(|i| i.issued);
        v
    }
}

type Body = Either<Full<Bytes>, Timed>;

fn full(status: StatusCode, ct: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, ct.parse().expect("static"));
    r
}

const WORDS: &[&str] = &["the", "model", "streams", "tokens", "to", "a", "careful", "client"];

fn word(i: u32) -> String {
    format!("{} ", WORDS[i as usize % WORDS.len()])
}

async fn handle(req: Request<Incoming>, sh: Arc<Shared>) -> Result<Response<Body>, std::io::Error> {
    let arrival = Instant::now();
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, 16 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(full(StatusCode::BAD_REQUEST, "text/plain", "unreadable body")),
    };
    let path = parts.uri.path().to_owned();
    let mut rec = FakeRecord {
        path: parts.uri.to_string(),
        status: 200,
        error: None,
        request_id: parts
            .headers
            .get("x-quetta-request-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse().ok()),
        arrival,
        chunks: Vec::new(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned())
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let resp = route(&parts, &path, &body, &sh, &mut rec);
    let resp = match resp {
        Ok(Reply::Done(r)) => {
            let r = *r;
            rec.status = r.status().as_u16();
            push(&sh, rec);
            r
        }
        Ok(Reply::Stream { ct, frames, headers }) => {
            let mut r = Response::new(Either::Right(Timed::new(
                frames,
                rec,
                sh.clone(),
                sh.cfg.split_every_byte && ct == EVENT_STREAM,
            )));
            r.headers_mut().insert(http::header::CONTENT_TYPE, ct.parse().expect("static"));
            for (k, v) in headers {
                r.headers_mut().insert(k, v.parse().expect("ascii header"));
            }
            r
        }
        Err((status, headers, body)) => {
            rec.status = status.as_u16();
            rec.error = Some(body.clone());
            push(&sh, rec);
            let mut r = full(status, "application/json", body);
            for (k, v) in headers {
                r.headers_mut().insert(k, v.parse().expect("ascii header"));
            }
            r
        }
    };
    Ok(resp)
}

fn push(sh: &Shared, rec: FakeRecord) {
    sh.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(rec);
}

const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

enum Reply {
    Done(Box<Response<Body>>),
    /// (delay after arrival, bytes, whether the frame completes a token)
    Stream {
        ct: &'static str,
        frames: Vec<(Duration, Bytes, bool)>,
        /// Further response headers.
        headers: Vec<(&'static str, String)>,
    },
}

type Refusal = (StatusCode, Vec<(&'static str, String)>, String);

fn route(
    parts: &http::request::Parts,
    path: &str,
    body: &[u8],
    sh: &Shared,
    rec: &mut FakeRecord,
) -> Result<Reply, Refusal> {
    let _ = rec;
    if let Some(r) = aws_credentials(parts, path, sh) {
        return r;
    }
    if parts.method == Method::POST && path == "/token" {
        return token(body, sh).map(|r| Reply::Done(Box::new(r)));
    }
    if parts.method == Method::GET
        && path == "/computeMetadata/v1/instance/service-accounts/default/token"
    {
        if parts.headers.get("metadata-flavor").and_then(|v| v.to_str().ok()) != Some("Google") {
            return Err((StatusCode::FORBIDDEN, vec![], "missing Metadata-Flavor: Google".into()));
        }
        return Ok(Reply::Done(Box::new(issue(sh, "metadata"))));
    }
    if let Some(rest) = path.strip_prefix("/model/") {
        check_sigv4(parts, body, sh, "bedrock")?;
        aws_refusal(sh)?;
        return bedrock::route(rest, body, &sh.cfg);
    }
    if let Some(rest) = path.strip_prefix("/endpoints/") {
        check_sigv4(parts, body, sh, "sagemaker")?;
        aws_refusal(sh)?;
        let v: Value = serde_json::from_slice(body).map_err(|_| {
            (
                StatusCode::BAD_REQUEST,
                vec![("x-amzn-errortype", "ValidationError:".to_owned())],
                json!({"message": "body is not JSON"}).to_string(),
            )
        })?;
        return if rest.ends_with("/invocations-response-stream") {
            Ok(sagemaker_stream(&v, &sh.cfg))
        } else if rest.ends_with("/invocations") {
            Ok(sagemaker_full(&v, &sh.cfg))
        } else {
            Err((StatusCode::NOT_FOUND, vec![], "{}".into()))
        };
    }
    if path.starts_with("/v1/projects/") {
        check_bearer(parts, sh)?;
        let v: Value = serde_json::from_slice(body)
            .map_err(|_| google_error(400, "INVALID_ARGUMENT", "body is not JSON"))?;
        return if path.ends_with(":streamGenerateContent") {
            Ok(gemini_stream(&v, &sh.cfg))
        } else if path.ends_with(":generateContent") {
            Ok(Reply::Done(Box::new(gemini_full(&v, &sh.cfg))))
        } else if path.ends_with("/chat/completions") {
            Ok(openai_stream(&v, &sh.cfg))
        } else if path.ends_with(":predict") || path.ends_with(":rawPredict") {
            Ok(Reply::Done(Box::new(predict(&v, &sh.cfg))))
        } else {
            Err(google_error(404, "NOT_FOUND", "no such method"))
        };
    }
    Err((StatusCode::NOT_FOUND, vec![], "{}".into()))
}

/// The configured error answer, or the quota's throttling, of a signed AWS request.
fn aws_refusal(sh: &Shared) -> Result<(), Refusal> {
    let n = sh.aws_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let throttled = sh.cfg.throttle_every.is_some_and(|e| e > 0 && n % e == 0);
    let err = match &sh.cfg.aws_error {
        Some((code, t)) => Some((*code, t.as_str())),
        None if throttled => Some((429, "ThrottlingException")),
        None => None,
    };
    let Some((code, t)) = err else { return Ok(()) };
    let msg = match t {
        "ModelError" => {
            json!({"OriginalStatusCode": 500, "OriginalMessage": "CUDA out of memory", "message": "Received server error (500) from primary with message \"CUDA out of memory\"."})
        }
        "ThrottlingException" => {
            json!({"message": "Too many requests, please wait before trying again."})
        }
        _ => json!({"message": format!("simulated {t}")}),
    };
    Err((
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
        vec![(
            "x-amzn-errortype",
            format!("{t}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        )],
        msg.to_string(),
    ))
}

fn google_error(code: u16, status: &str, msg: &str) -> Refusal {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
        vec![],
        json!({"error": {"code": code, "message": msg, "status": status}}).to_string(),
    )
}

// ---------------------------------------------------------------- event stream (independent)

/// One event-stream message with string headers.
pub fn frame(headers: &[(&str, &str)], payload: &[u8], corrupt_crc: bool) -> Vec<u8> {
    let mut hb = Vec::new();
    for (k, v) in headers {
        hb.push(k.len() as u8);
        hb.extend_from_slice(k.as_bytes());
        hb.push(7); // string
        hb.extend_from_slice(&(v.len() as u16).to_be_bytes());
        hb.extend_from_slice(v.as_bytes());
    }
    let total = 12 + hb.len() + payload.len() + 4;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_be_bytes());
    m.extend_from_slice(&(hb.len() as u32).to_be_bytes());
    let pc = crc32fast::hash(&m);
    m.extend_from_slice(&pc.to_be_bytes());
    m.extend_from_slice(&hb);
    m.extend_from_slice(payload);
    let mut mc = crc32fast::hash(&m);
    if corrupt_crc {
        mc ^= 0xdead_beef;
    }
    m.extend_from_slice(&mc.to_be_bytes());
    m
}

fn payload_part(p: &[u8], corrupt: bool) -> Vec<u8> {
    frame(
        &[
            (":message-type", "event"),
            (":event-type", "PayloadPart"),
            (":content-type", "application/octet-stream"),
        ],
        p,
        corrupt,
    )
}

/// A container answer split over two payload parts, at a point that is not a line end.
fn two_parts(p: &[u8], corrupt: bool) -> Bytes {
    let mid = p.len() / 2;
    let mut v = payload_part(&p[..mid], false);
    v.extend(payload_part(&p[mid..], corrupt));
    Bytes::from(v)
}

fn n_tokens(v: &Value, cfg: &FakeConfig) -> u32 {
    [
        "/max_tokens",
        "/parameters/max_new_tokens",
        "/generationConfig/maxOutputTokens",
        "/instances/0/max_tokens",
    ]
    .iter()
    .find_map(|p| v.pointer(p).and_then(Value::as_u64))
    .map_or(cfg.default_tokens, |n| n as u32)
}

fn prompt_words(v: &Value) -> u64 {
    fn walk(v: &Value) -> u64 {
        match v {
            Value::String(s) => s.split_whitespace().count() as u64,
            Value::Array(a) => a.iter().map(walk).sum(),
            Value::Object(o) => o
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "role" | "model" | "mimeType" | "data"))
                .map(|(_, x)| walk(x))
                .sum(),
            _ => 0,
        }
    }
    ["messages", "inputs", "contents", "instances", "system", "prompt", "inputText"]
        .iter()
        .filter_map(|k| v.get(*k))
        .map(walk)
        .sum()
}

fn at(cfg: &FakeConfig, i: u32) -> Duration {
    cfg.ttft + cfg.itl * i
}

fn openai_chunk(text: &str, finish: Option<&str>) -> String {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}).to_string()
}

fn sagemaker_stream(v: &Value, cfg: &FakeConfig) -> Reply {
    let n = n_tokens(v, cfg);
    let openai = v.get("messages").is_some();
    let mut frames = Vec::new();
    let mut text = String::new();
    for i in 0..n {
        let t = at(cfg, i);
        if cfg.model_stream_error_at == Some(i) {
            let p =
                json!({"Message": "the model failed while generating", "ErrorCode": "ModelError"})
                    .to_string();
            let f = frame(
                &[
                    (":message-type", "exception"),
                    (":exception-type", "ModelStreamError"),
                    (":content-type", "application/json"),
                ],
                p.as_bytes(),
                false,
            );
            frames.push((t, Bytes::from(f), false));
            return Reply::Stream { ct: EVENT_STREAM, frames, headers: vec![] };
        }
        let w = word(i);
        text.push_str(&w);
        let line = if openai {
            format!("data: {}\n\n", openai_chunk(&w, None))
        } else {
            format!(
                "{}\n",
                json!({"token": {"id": i, "text": w, "special": false}, "generated_text": null, "details": null})
            )
        };
        frames.push((t, two_parts(line.as_bytes(), cfg.bad_crc_at == Some(i)), true));
    }
    let t = at(cfg, n.saturating_sub(1));
    let tail = if openai {
        let usage = json!({"prompt_tokens": prompt_words(v), "completion_tokens": n, "total_tokens": prompt_words(v) + u64::from(n)});
        format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            openai_chunk("", Some("length")),
            json!({"object": "chat.completion.chunk", "choices": [], "usage": usage})
        )
    } else {
        format!(
            "{}\n",
            json!({"token": {"id": n, "text": "</s>", "special": true}, "generated_text": text, "details": {"finish_reason": "length", "generated_tokens": n}})
        )
    };
    frames.push((t, two_parts(tail.as_bytes(), false), false));
    Reply::Stream { ct: EVENT_STREAM, frames, headers: vec![] }
}

fn sagemaker_full(v: &Value, cfg: &FakeConfig) -> Reply {
    let n = n_tokens(v, cfg);
    let text: String = (0..n).map(word).collect();
    let body = if v.get("messages").is_some() {
        json!({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
               "usage": {"prompt_tokens": prompt_words(v), "completion_tokens": n}})
    } else {
        json!([{"generated_text": text}])
    };
    Reply::Stream {
        ct: "application/json",
        frames: vec![(at(cfg, n.saturating_sub(1)), Bytes::from(body.to_string()), true)],
        headers: vec![],
    }
}

// ---------------------------------------------------------------- timed body

/// A body that hands each frame to hyper at its time (after the request's arrival) and
/// records when token frames went out.
pub(crate) struct Timed {
    frames: std::collections::VecDeque<(Instant, Bytes, bool)>,
    sleep: Option<Pin<Box<Sleep>>>,
    rec: Option<FakeRecord>,
    sh: Arc<Shared>,
    every_byte: bool,
    /// Bytes of the current frame still to send one at a time.
    rest: Bytes,
}

impl Timed {
    fn new(
        frames: Vec<(Duration, Bytes, bool)>,
        rec: FakeRecord,
        sh: Arc<Shared>,
        every_byte: bool,
    ) -> Self {
        let a = rec.arrival;
        Self {
            frames: frames.into_iter().map(|(d, b, m)| (a + d, b, m)).collect(),
            sleep: None,
            rec: Some(rec),
            sh,
            every_byte,
            rest: Bytes::new(),
        }
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        if let Some(mut r) = self.rec.take() {
            if !self.frames.is_empty() {
                r.error = Some("client went away".into());
            }
            push(&self.sh, r);
        }
    }
}

impl http_body::Body for Timed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            let b = this.rest.split_to(1);
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        let Some(&(due, _, _)) = this.frames.front() else { return Poll::Ready(None) };
        if Instant::now() < due {
            let s =
                this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due.into())));
            s.as_mut().reset(due.into());
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let (_, bytes, mark) = this.frames.pop_front().expect("front exists");
        if mark {
            if let Some(r) = this.rec.as_mut() {
                r.chunks.push(Instant::now());
            }
        }
        if this.every_byte && bytes.len() > 1 {
            let mut b = bytes;
            let first = b.split_to(1);
            this.rest = b;
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }
}

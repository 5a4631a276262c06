//! The HTTP side of the simulator.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::time::Sleep;

use crate::{OutputLen, Rng, Shared, SimRecord, WORDS};

type Body = Either<Full<Bytes>, SimStream>;

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    sh: Arc<Shared>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let sh = sh.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(req, sh.clone()));
            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, content_type.parse().expect("static header"));
    r
}

fn json_error(status: StatusCode, msg: &str) -> Response<Body> {
    let v = json!({"error": {"message": msg, "type": "invalid_request_error", "code": status.as_u16()}});
    full(status, "application/json", v.to_string())
}

async fn handle(req: Request<Incoming>, sh: Arc<Shared>) -> Result<Response<Body>, Infallible> {
    let arrival = Instant::now();
    let path = req.uri().path().to_owned();
    Ok(match (req.method().clone(), path.as_str()) {
        (Method::GET, "/health") => full(StatusCode::OK, "text/plain", "ok"),
        (Method::GET, "/v1/models") => {
            let v = json!({"object": "list", "data": [{"id": sh.cfg.model, "object": "model", "created": 0, "owned_by": "quetta-sim"}]});
            full(StatusCode::OK, "application/json", v.to_string())
        }
        (Method::GET, "/metrics") => {
            full(StatusCode::OK, "text/plain; version=0.0.4", sh.metrics.render(&sh.cfg.model))
        }
        (Method::POST, "/v1/chat/completions") => generate(req, sh, arrival, true).await,
        (Method::POST, "/v1/completions") => generate(req, sh, arrival, false).await,
        _ => json_error(StatusCode::NOT_FOUND, &format!("no route for {path}")),
    })
}

/// Count prompt tokens the simulator's way: words of text, or the length of token ids.
fn count_prompt(v: &Value) -> u64 {
    fn words(s: &str) -> u64 {
        s.split_whitespace().count() as u64
    }
    fn content(c: &Value) -> u64 {
        match c {
            Value::String(s) => words(s),
            Value::Array(parts) => {
                parts.iter().map(|p| p.get("text").and_then(Value::as_str).map_or(0, words)).sum()
            }
            _ => 0,
        }
    }
    if let Some(msgs) = v.get("messages").and_then(Value::as_array) {
        return msgs.iter().map(|m| m.get("content").map_or(0, content)).sum();
    }
    match v.get("prompt") {
        Some(Value::String(s)) => words(s),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => a.len() as u64,
        Some(Value::Array(a)) => a.iter().map(|p| p.as_str().map_or(0, words)).sum(),
        _ => 0,
    }
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

struct Plan {
    n_tokens: u32,
    first_at: Instant,
    rng: Rng,
}

fn plan(sh: &Shared, body: &Value, seq: u64, prompt_tokens: u64, arrival: Instant) -> Plan {
    let cfg = &sh.cfg;
    let mut rng = Rng::new(cfg.seed.wrapping_add(seq.wrapping_mul(0x2545_F491_4F6C_DD1D)));
    let max = body
        .get("max_tokens")
        .or_else(|| body.get("max_completion_tokens"))
        .and_then(Value::as_u64)
        .map_or(cfg.default_max_tokens, |m| m as u32)
        .max(1);
    let ignore_eos = body.get("ignore_eos").and_then(Value::as_bool).unwrap_or(false);
    let min = body.get("min_tokens").and_then(Value::as_u64).unwrap_or(0) as u32;
    let drawn = if ignore_eos {
        max
    } else {
        match cfg.output_len {
            OutputLen::MaxTokens => max,
            OutputLen::Fixed(n) => n,
            OutputLen::Uniform { min, max } => {
                let span = u64::from(max.saturating_sub(min)) + 1;
                min + (rng.next_u64() % span) as u32
            }
            OutputLen::Normal { mean, stddev } => {
                let (u1, u2) = (rng.f64().max(1e-12), rng.f64());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mean + stddev * z).round().max(1.0) as u32
            }
        }
    };
    let n_tokens = drawn.max(min).min(max).max(1);
    let prefill =
        cfg.prefill_per_token.saturating_mul(prompt_tokens.min(u64::from(u32::MAX)) as u32);
    Plan { n_tokens, first_at: arrival + cfg.ttft + prefill, rng }
}

fn header_str(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

async fn generate(
    req: Request<Incoming>,
    sh: Arc<Shared>,
    arrival: Instant,
    chat: bool,
) -> Response<Body> {
    let seq = sh.seq.fetch_add(1, Ordering::Relaxed);
    sh.metrics.on_start();
    let request_id = header_str(&req, "x-quetta-request-id").and_then(|s| s.parse().ok());
    let mut session_id = header_str(&req, "x-session-id");
    let endpoint = req.uri().path().to_owned();
    let mut rec = SimRecord {
        seq,
        request_id,
        session_id: None,
        endpoint,
        stream: false,
        status: 200,
        prompt_tokens: 0,
        completion_tokens: 0,
        arrival,
        headers_sent: arrival,
        chunks: Vec::new(),
        chunk_tokens: Vec::new(),
        end: arrival,
        text: String::new(),
        error: None,
    };
    let body = match Limited::new(req.into_body(), 64 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            rec.status = 400;
            rec.error = Some(format!("cannot read body: {e}"));
            rec.end = Instant::now();
            rec.session_id = session_id;
            sh.finish(rec);
            return json_error(StatusCode::BAD_REQUEST, "cannot read request body");
        }
    };
    let parsed: Option<Value> = serde_json::from_slice(&body).ok().filter(Value::is_object);
    let Some(v) = parsed else {
        {
            rec.status = 400;
            rec.error = Some("body is not a JSON object".into());
            rec.end = Instant::now();
            rec.session_id = session_id;
            sh.finish(rec);
            return json_error(StatusCode::BAD_REQUEST, "request body must be a JSON object");
        }
    };
    if session_id.is_none() {
        session_id = v.get("user").and_then(Value::as_str).map(str::to_owned);
    }
    rec.session_id = session_id;
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage =
        v.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    rec.stream = stream;
    rec.prompt_tokens = count_prompt(&v);
    let plan = plan(&sh, &v, seq, rec.prompt_tokens, arrival);
    let model_json =
        serde_json::to_string(v.get("model").and_then(Value::as_str).unwrap_or(&sh.cfg.model))
            .unwrap_or_else(|_| "\"quetta-sim\"".into());
    let mut st = SimStream {
        sh: sh.clone(),
        chat,
        include_usage,
        id: if chat { format!("chatcmpl-sim-{seq}") } else { format!("cmpl-sim-{seq}") },
        model_json,
        created: now_unix(),
        n_tokens: plan.n_tokens,
        sent_tokens: 0,
        next_at: plan.first_at,
        word_rng: Rng::new(sh.cfg.seed ^ seq.rotate_left(17)),
        rng: plan.rng,
        sleep: None,
        rec: Some(rec),
        stream,
        prefix: String::new(),
    };
    st.prefix = if chat {
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"",
            st.id, st.created, st.model_json
        )
    } else {
        format!(
            "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"text\":\"",
            st.id, st.created, st.model_json
        )
    };
    if !stream {
        // Generate every token "inside" the server, then answer at once.
        let mut last = st.next_at;
        let mut text = String::new();
        let mut sent = 0;
        while sent < st.n_tokens {
            let k = st.sh.cfg.tokens_per_chunk.max(1).min(st.n_tokens - sent);
            if !text.is_empty() {
                text.push(' ');
            }
            st.push_words(&mut text, k);
            sent += k;
            if sent < st.n_tokens {
                last += st.gap();
            }
        }
        tokio::time::sleep_until(last.into()).await;
        let finish = if st.n_tokens >= 1 { "length" } else { "stop" };
        let usage = json!({"prompt_tokens": st.prompt_tokens(), "completion_tokens": st.n_tokens, "total_tokens": st.prompt_tokens() + u64::from(st.n_tokens)});
        let body = if chat {
            json!({"id": st.id, "object": "chat.completion", "created": st.created, "model": v.get("model"),
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                   "usage": usage})
        } else {
            json!({"id": st.id, "object": "text_completion", "created": st.created, "model": v.get("model"),
                   "choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": usage})
        };
        let mut rec = st.rec.take().expect("record present");
        let now = Instant::now();
        rec.headers_sent = now;
        rec.end = now;
        rec.completion_tokens = u64::from(st.n_tokens);
        rec.text = text;
        sh.finish(rec);
        return full(StatusCode::OK, "application/json", body.to_string());
    }
    let mut r = Response::new(Either::Right(st));
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, "text/event-stream".parse().expect("static"));
    r.headers_mut().insert(http::header::CACHE_CONTROL, "no-cache".parse().expect("static"));
    if let Either::Right(s) = r.body_mut() {
        if let Some(rec) = s.rec.as_mut() {
            rec.headers_sent = Instant::now();
        }
    }
    r
}

/// The streamed body of one response.
pub(crate) struct SimStream {
    sh: Arc<Shared>,
    chat: bool,
    include_usage: bool,
    id: String,
    model_json: String,
    created: u64,
    n_tokens: u32,
    sent_tokens: u32,
    next_at: Instant,
    rng: Rng,
    word_rng: Rng,
    sleep: Option<Pin<Box<Sleep>>>,
    rec: Option<SimRecord>,
    stream: bool,
    /// The JSON of a chunk up to the generated text.
    prefix: String,
}

impl SimStream {
    fn prompt_tokens(&self) -> u64 {
        self.rec.as_ref().map_or(0, |r| r.prompt_tokens)
    }

    fn gap(&mut self) -> Duration {
        let cfg = &self.sh.cfg;
        if cfg.itl_jitter.is_zero() {
            return cfg.itl;
        }
        let j = cfg.itl_jitter.as_secs_f64() * (2.0 * self.rng.f64() - 1.0);
        Duration::from_secs_f64((cfg.itl.as_secs_f64() + j).max(0.0))
    }

    /// Append `k` generated words, space-separated (no leading space).
    fn push_words(&mut self, out: &mut String, k: u32) {
        for i in 0..k {
            let w = WORDS[(self.word_rng.next_u64() % WORDS.len() as u64) as usize];
            if i > 0 {
                out.push(' ');
            }
            out.push_str(w);
        }
    }

    /// One SSE event carrying `text` (generated words: ASCII, nothing to escape).
    fn chunk_event(&self, out: &mut String, text: &str, finish: Option<&str>) {
        out.push_str(&self.prefix);
        out.push_str(text);
        match finish {
            None => out.push_str(if self.chat {
                "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
            } else {
                "\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
            }),
            Some(f) => {
                out.push_str(if self.chat {
                    "\"},\"logprobs\":null,\"finish_reason\":\""
                } else {
                    "\",\"logprobs\":null,\"finish_reason\":\""
                });
                out.push_str(f);
                out.push_str("\"}]}\n\n");
            }
        }
    }
}

impl http_body::Body for SimStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.rec.is_none() {
            return Poll::Ready(None);
        }
        if this.sent_tokens < this.n_tokens {
            if Instant::now() < this.next_at {
                let at = this.next_at.into();
                match this.sleep.as_mut() {
                    Some(s) => s.as_mut().reset(at),
                    None => this.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
                }
                if let Some(s) = this.sleep.as_mut() {
                    if s.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
            }
            let k = this.sh.cfg.tokens_per_chunk.max(1).min(this.n_tokens - this.sent_tokens);
            let mut text = String::with_capacity(16 * k as usize);
            if this.sent_tokens > 0 {
                text.push(' ');
            }
            this.push_words(&mut text, k);
            let last = this.sent_tokens + k == this.n_tokens;
            let mut frame = String::with_capacity(this.prefix.len() + text.len() + 64);
            if this.chat && this.sent_tokens == 0 {
                // vLLM and llama.cpp open with a role-only chunk, sent with the first token.
                let _ = write!(
                    frame,
                    "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    this.id, this.created, this.model_json
                );
            }
            this.chunk_event(&mut frame, &text, last.then_some("length"));
            this.sent_tokens += k;
            let gap = this.gap();
            let stamp = Instant::now();
            // Absolute schedule; if the server fell more than one gap behind, restart from now
            // rather than bursting to catch up.
            this.next_at =
                if stamp > this.next_at + gap { stamp + gap } else { this.next_at + gap };
            if let Some(r) = this.rec.as_mut() {
                r.text.push_str(&text);
                r.chunks.push(stamp);
                r.chunk_tokens.push(k);
            }
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(frame)))));
        }
        let mut frame = String::new();
        if this.include_usage {
            let p = this.prompt_tokens();
            let n = u64::from(this.n_tokens);
            let _ = write!(
                frame,
                "data: {{\"id\":\"{}\",\"object\":\"{}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\n",
                this.id,
                if this.chat { "chat.completion.chunk" } else { "text_completion" },
                this.created,
                this.model_json,
                p + n
            );
        }
        frame.push_str("data: [DONE]\n\n");
        if let Some(mut rec) = this.rec.take() {
            rec.completion_tokens = u64::from(this.n_tokens);
            rec.end = Instant::now();
            this.sh.finish(rec);
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(frame)))))
    }

    fn is_end_stream(&self) -> bool {
        self.rec.is_none()
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        if let Some(mut rec) = self.rec.take() {
            rec.completion_tokens = u64::from(self.sent_tokens);
            rec.end = Instant::now();
            rec.error =
                Some(if self.stream { "client disconnected".into() } else { "dropped".into() });
            self.sh.finish(rec);
        }
    }
}

//! The HTTP side of the simulator.

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
use quetta_net::{StampedTcp, Stamps};
use serde_json::{json, Value};

use crate::dialect::{self, Dialect, Refusal, Route};
use crate::faults::Fault;
use crate::{OutputLen, Rng, Shared, SimRecord, WORDS};

pub(crate) type Body = Either<Either<Full<Bytes>, crate::grpc::GrpcWhole>, SimStream>;

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    sh: Arc<Shared>,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    accept_loop(listener, shutdown, move |req| handle(req, sh.clone())).await;
}

/// Serve HTTP/1.1 and HTTP/2 connections with `handle` until `shutdown` fires (shared by the
/// simulator and the provider fakes).
pub(crate) async fn accept_loop<F, Fut, B>(
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
    handle: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, std::io::Error>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let handle = handle.clone();
        // The socket records when each read's bytes arrived (the kernel's stamp on Linux);
        // every request on the connection can ask (see `request_arrival`).
        let stamps = Stamps::new();
        let io = StampedTcp::new(stream, stamps.clone());
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnStamps(stamps.clone()));
                handle(req)
            });
            let _ = builder.serve_connection(TokioIo::new(io), service).await;
        });
    }
}

/// The receive record of the connection a request came on.
#[derive(Clone)]
pub(crate) struct ConnStamps(Arc<Stamps>);

/// A request's HTTP version and its connection's receive record (for [`request_arrival`]).
pub(crate) fn conn_of(req: &Request<Incoming>) -> (http::Version, Option<ConnStamps>) {
    (req.version(), req.extensions().get::<ConnStamps>().cloned())
}

/// A request's record as it starts: its order, the client's ids, the path.
pub(crate) fn new_record(seq: u64, req: &Request<Incoming>, handled: Instant) -> SimRecord {
    SimRecord {
        seq,
        request_id: header_str(req, "x-quetta-request-id").and_then(|s| s.parse().ok()),
        session_id: header_str(req, "x-session-id"),
        endpoint: req.uri().path().to_owned(),
        stream: false,
        status: 200,
        prompt_tokens: 0,
        cached_tokens: 0,
        completion_tokens: 0,
        arrival: handled,
        headers_sent: handled,
        chunks: Vec::new(),
        chunk_tokens: Vec::new(),
        end: handled,
        text: String::new(),
        error: None,
    }
}

/// When a request's bytes arrived: over HTTP/1.1 (one request at a time on a connection),
/// the arrival of the connection's last read so far, that is of the request's last byte once
/// its body has been read; `fallback` (when the handler started) over HTTP/2 or without a
/// record. Never later than now.
pub(crate) fn request_arrival(
    version: http::Version,
    conn: Option<&ConnStamps>,
    fallback: Instant,
) -> Instant {
    let kernel = conn.filter(|_| version != http::Version::HTTP_2).and_then(|c| c.0.last_arrival());
    kernel.map_or(fallback, |a| a.min(Instant::now()))
}

pub(crate) fn full(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(Either::Left(Either::Left(Full::new(body.into()))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, content_type.parse().expect("static header"));
    r
}

fn json_error(status: StatusCode, msg: &str) -> Response<Body> {
    let v = json!({"error": {"message": msg, "type": "invalid_request_error", "code": status.as_u16()}});
    full(status, "application/json", v.to_string())
}

async fn handle(req: Request<Incoming>, sh: Arc<Shared>) -> Result<Response<Body>, std::io::Error> {
    let arrival = Instant::now();
    let path = req.uri().path().to_owned();
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/health") => Ok(full(StatusCode::OK, "text/plain", "ok")),
        (Method::GET, "/v1/models") => {
            let v = json!({"object": "list", "data": [{"id": sh.cfg.model, "object": "model", "created": 0, "owned_by": "quetta-sim"}]});
            Ok(full(StatusCode::OK, "application/json", v.to_string()))
        }
        (Method::GET, "/metrics") => {
            Ok(full(StatusCode::OK, "text/plain; version=0.0.4", sh.metrics.render(&sh.cfg.model)))
        }
        (Method::POST, "/reset_prefix_cache" | "/flush_cache") => {
            sh.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
            Ok(full(StatusCode::OK, "text/plain", "ok"))
        }
        (Method::POST, p) if crate::pooling::route(p).is_some() => {
            let pool = crate::pooling::route(p).expect("a pooling route");
            crate::pooling::handle(req, sh, pool, arrival).await
        }
        (Method::POST, p)
            if p.strip_prefix(crate::grpc::PREFIX)
                .is_some_and(|m| !matches!(m, "ModelStreamInfer" | "ModelInfer")) =>
        {
            grpc_other(req, &sh, &path).await
        }
        (Method::POST, p) => match dialect::route(p, &sh.cfg.model) {
            Some(Ok(route)) => generate(req, sh, arrival, route).await,
            Some(Err(r)) => Ok(full(r.status, "application/json", Dialect::Triton.error_body(&r))),
            None => Ok(json_error(StatusCode::NOT_FOUND, &format!("no route for {path}"))),
        },
        _ => Ok(json_error(StatusCode::NOT_FOUND, &format!("no route for {path}"))),
    }
}

/// Count prompt tokens the simulator's way: words of text, or the length of token ids.
fn count_prompt(v: &Value, image_tokens: u64, counter: Option<&crate::TokenCounter>) -> u64 {
    let words = |s: &str| -> u64 {
        match counter {
            Some(c) => (c.0)(s),
            None => s.split_whitespace().count() as u64,
        }
    };
    let content = |c: &Value| -> u64 {
        match c {
            Value::String(s) => words(s),
            Value::Array(parts) => parts
                .iter()
                .map(|p| match p.get("type").and_then(Value::as_str) {
                    Some("image_url") => image_tokens,
                    _ => p.get("text").and_then(Value::as_str).map_or(0, &words),
                })
                .sum(),
            _ => 0,
        }
    };
    if let Some(msgs) = v.get("messages").and_then(Value::as_array) {
        return msgs.iter().map(|m| m.get("content").map_or(0, content)).sum();
    }
    match v.get("prompt") {
        Some(Value::String(s)) => words(s),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => a.len() as u64,
        Some(Value::Array(a)) => a.iter().map(|p| p.as_str().map_or(0, &words)).sum(),
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

fn plan(
    sh: &Shared,
    body: &Value,
    seq: u64,
    prompt_tokens: u64,
    cached_tokens: u64,
    arrival: Instant,
) -> Plan {
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
    let computed = prompt_tokens.saturating_sub(cached_tokens);
    let prefill = cfg.prefill_per_token.saturating_mul(computed.min(u64::from(u32::MAX)) as u32);
    Plan { n_tokens, first_at: arrival + cfg.ttft + prefill, rng }
}

/// The configured extra response headers (invalid names or values are skipped).
fn add_headers(sh: &Shared, r: &mut Response<Body>) {
    for (k, v) in &sh.cfg.response_headers {
        if let (Ok(k), Ok(v)) =
            (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v))
        {
            r.headers_mut().insert(k, v);
        }
    }
}

fn header_str(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// A request the simulator cannot take: recorded with its reason, answered in the
/// protocol's own error shape.
pub(crate) fn refuse(sh: &Shared, mut rec: SimRecord, d: Dialect, r: &Refusal) -> Response<Body> {
    rec.status = r.status.as_u16();
    rec.error = Some(r.message.clone());
    rec.end = Instant::now();
    let stream = rec.stream;
    sh.finish(rec);
    if d == Dialect::Grpc {
        return grpc_answer(crate::grpc::refusal_answer(r, stream));
    }
    full(r.status, "application/json", d.error_body(r))
}

/// A gRPC answer: HTTP 200, `application/grpc`, the status in the trailers (or, for a call
/// with no message, in the headers).
fn grpc_answer(mut w: crate::grpc::GrpcWhole) -> Response<Body> {
    let headers = w.headers_only.take();
    let mut r = Response::new(Either::Left(Either::Right(w)));
    r.headers_mut().insert(http::header::CONTENT_TYPE, "application/grpc".parse().expect("static"));
    if let Some(h) = headers {
        r.headers_mut().extend(h);
    }
    r
}

/// The gRPC service's calls other than inference (liveness, readiness, metadata).
async fn grpc_other(
    req: Request<Incoming>,
    sh: &Shared,
    path: &str,
) -> Result<Response<Body>, std::io::Error> {
    if let Err(r) = Dialect::Grpc.check_headers(req.headers(), sh.cfg.api_key.as_deref()) {
        return Ok(grpc_answer(crate::grpc::refusal_answer(&r, false)));
    }
    let body = Limited::new(req.into_body(), 1 << 20)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let method = path.strip_prefix(crate::grpc::PREFIX).unwrap_or(path);
    Ok(grpc_answer(crate::grpc::other_call(method, &body, &sh.cfg.model).unwrap_or_else(|| {
        crate::grpc::GrpcWhole::status_only(12, &format!("unknown method {method}"))
    })))
}

/// A non-streamed answer: every token generated "inside" the server, then the whole body.
async fn whole(mut st: SimStream, v: &Value) -> Response<Body> {
    let sh = st.sh.clone();
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
    if let Some(rx) = st.twin.as_mut() {
        for _ in 0..st.n_tokens {
            match rx.recv().await {
                Some(at) => last = at,
                None => break,
            }
        }
    }
    tokio::time::sleep_until(last.into()).await;
    let finish = if st.n_tokens >= 1 { "length" } else { "stop" };
    let usage: Value = serde_json::from_str(&st.usage_json()).unwrap_or(Value::Null);
    st.cache_reply(&text);
    st.store_response(&text);
    let body = match st.dialect {
        Dialect::Chat => {
            json!({"id": st.id, "object": "chat.completion", "created": st.created, "model": v.get("model"),
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
               "usage": usage})
        }
        Dialect::Completions => {
            json!({"id": st.id, "object": "text_completion", "created": st.created, "model": v.get("model"),
               "choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": usage})
        }
        d => d.whole(&st.sim_frame(st.n_tokens, ""), &text),
    };
    let mut rec = st.rec.take().expect("record present");
    let now = Instant::now();
    rec.headers_sent = now;
    rec.end = now;
    rec.completion_tokens = u64::from(st.n_tokens);
    rec.text = text;
    sh.finish(rec);
    if st.dialect == Dialect::Grpc {
        // ModelInfer's answer, or ModelStreamInfer's one final response (`stream` false)
        let text = body.get("text_output").and_then(Value::as_str).unwrap_or("");
        let call = v.get("grpc_stream_call").and_then(Value::as_bool).unwrap_or(false);
        let mut r = grpc_answer(crate::grpc::GrpcWhole::unary(&sh.cfg.model, &st.id, text, call));
        add_headers(&sh, &mut r);
        return r;
    }
    let mut r = full(StatusCode::OK, "application/json", body.to_string());
    add_headers(&sh, &mut r);
    r
}

/// A generation request read and checked: its body in the internal shape and its dialect,
/// or the answer refusing it (already recorded).
async fn read_request(
    req: Request<Incoming>,
    sh: &Shared,
    route: Route,
    rec: &mut SimRecord,
    handled: Instant,
) -> Result<(Value, Dialect), Response<Body>> {
    let (version, stamps) = conn_of(&req);
    let header_check = route.dialect.check_headers(req.headers(), sh.cfg.api_key.as_deref());
    let content_type = header_str(&req, "content-type");
    let body = match Limited::new(req.into_body(), 64 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let r = dialect::bad_request(format!("cannot read request body: {e}"));
            return Err(refuse(sh, rec.clone(), route.dialect, &r));
        }
    };
    // The request is complete: it arrived with its last byte, which may be well before this
    // runtime got to it. TTFT counts from there, as the model would start then.
    let arrival = request_arrival(version, stamps.as_ref(), handled);
    rec.arrival = arrival;
    rec.headers_sent = arrival;
    rec.end = arrival;
    if let Err(r) = header_check {
        return Err(refuse(sh, rec.clone(), route.dialect, &r));
    }
    if route.dialect == Dialect::Grpc {
        rec.stream = route.stream.unwrap_or(false);
        if let Err(r) = header_check {
            return Err(refuse(sh, rec.clone(), Dialect::Grpc, &r));
        }
        let stream = route.stream.unwrap_or(false);
        let v = crate::grpc::request_body(&body, &sh.cfg.model, stream).and_then(|v| {
            let empty_final = v.get("empty_final").cloned();
            let mut n = Dialect::Grpc.normalize(v, Some(stream))?;
            n["empty_final"] = empty_final.unwrap_or(Value::Bool(false));
            n["grpc_stream_call"] = Value::Bool(stream);
            Ok(n)
        });
        return match v {
            Ok(v) => Ok((v, Dialect::Grpc)),
            Err(r) => Err(refuse(sh, rec.clone(), Dialect::Grpc, &r)),
        };
    }
    if route.dialect == Dialect::Transcription {
        return match crate::audio::normalize(content_type.as_deref(), body, rec.seq).await {
            Ok(v) => Ok((v, Dialect::Transcription)),
            Err(r) => Err(refuse(sh, rec.clone(), Dialect::Transcription, &r)),
        };
    }
    let parsed: Option<Value> = serde_json::from_slice(&body).ok().filter(Value::is_object);
    let Some(v) = parsed else {
        let r = dialect::bad_request("request body must be a JSON object".into());
        return Err(refuse(sh, rec.clone(), route.dialect, &r));
    };
    let d = route.dialect.settle(&v);
    let mut v = match d.normalize(v, route.stream) {
        Ok(v) => v,
        Err(r) => return Err(refuse(sh, rec.clone(), d, &r)),
    };
    if let Some(prev) = v.get("previous_response_id").and_then(Value::as_str) {
        let stored = sh
            .responses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(prev)
            .cloned();
        let Some(mut history) = stored else {
            let r = dialect::bad_request(format!("Previous response with id '{prev}' not found."));
            return Err(refuse(sh, rec.clone(), d, &r));
        };
        if let Some(Value::Array(new)) = v.get("messages") {
            history.extend(new.iter().cloned());
        }
        v["messages"] = Value::Array(history);
    }
    Ok((v, d))
}

async fn generate(
    req: Request<Incoming>,
    sh: Arc<Shared>,
    handled: Instant,
    route: Route,
) -> Result<Response<Body>, std::io::Error> {
    let seq = sh.seq.fetch_add(1, Ordering::Relaxed);
    sh.metrics.on_start();
    let mut rec = new_record(seq, &req, handled);
    let mut session_id = rec.session_id.clone();
    let (v, d) = match read_request(req, &sh, route, &mut rec, handled).await {
        Ok(x) => x,
        Err(answer) => return Ok(answer),
    };
    let arrival = rec.arrival;
    if session_id.is_none() {
        session_id = v.get("user").and_then(Value::as_str).map(str::to_owned);
    }
    rec.session_id = session_id;
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = !d.usage_on_request()
        || v.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    rec.stream = stream;
    rec.prompt_tokens =
        count_prompt(&v, u64::from(sh.cfg.image_tokens), sh.cfg.token_counter.as_ref());
    if let Some(m) = &sh.cfg.server_model {
        // the server's template tokens, as its usage counts them
        rec.prompt_tokens += u64::from(m.prompt_extra_tokens);
    }
    let fault = crate::faults::pick(&sh.cfg.faults, sh.cfg.seed, seq);
    match fault {
        Some(Fault::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let kind = if code == 429 { "rate_limit_error" } else { "server_error" };
            let r = Refusal { status, kind, message: format!("simulated HTTP {code}") };
            let mut resp = refuse(&sh, rec, d, &r);
            if code == 429 {
                resp.headers_mut().insert(http::header::RETRY_AFTER, "1".parse().expect("static"));
            }
            return Ok(resp);
        }
        Some(Fault::ResetBeforeHeaders) => {
            rec.error = Some("fault: reset before headers".into());
            rec.end = Instant::now();
            sh.finish(rec);
            return Err(std::io::Error::other("simulated fault: reset before headers"));
        }
        _ => {}
    }
    let cache_on = sh.cfg.prefix_cache_blocks > 0;
    let cache_tokens = if cache_on { cache_lookup(&sh, &v, &mut rec) } else { Vec::new() };
    // A server with a batch limit: requests beyond it wait (FIFO) for a running one to end;
    // the model starts on a request when it gets a slot.
    let slot = match &sh.slots {
        Some(sem) => sem.clone().acquire_owned().await.ok(),
        None => None,
    };
    let started = if slot.is_some() { Instant::now().max(arrival) } else { arrival };
    let plan = plan(&sh, &v, seq, rec.prompt_tokens, rec.cached_tokens, started);
    let twin_rx = submit_to_twin(&sh, seq, arrival, &rec, plan.n_tokens);
    let model_json =
        serde_json::to_string(v.get("model").and_then(Value::as_str).unwrap_or(&sh.cfg.model))
            .unwrap_or_else(|_| "\"quetta-sim\"".into());
    let mut st = SimStream {
        sh: sh.clone(),
        dialect: d,
        include_usage,
        id: match d {
            Dialect::Chat => format!("chatcmpl-sim-{seq}"),
            Dialect::Completions => format!("cmpl-sim-{seq}"),
            Dialect::Responses => format!("resp_sim{seq}"),
            Dialect::Messages => format!("msg_sim{seq}"),
            _ => format!("sim-{seq}"),
        },
        model_json,
        created: now_unix(),
        n_tokens: plan.n_tokens,
        sent_tokens: 0,
        next_at: plan.first_at,
        word_rng: Rng::new(sh.cfg.seed ^ seq.rotate_left(17)),
        rng: plan.rng,
        sleep: crate::precise::Deadline::new(),
        opened: false,
        prompt_ms: plan.first_at.saturating_duration_since(started).as_secs_f64() * 1e3,
        last_flushed: false,
        twin: twin_rx,
        twin_due: None,
        rec: Some(rec),
        stream,
        prefix: String::new(),
        fault,
        fault_fired: false,
        stall_until: None,
        linger_until: None,
        drip: Bytes::new(),
        drip_at: arrival,
        cache_tokens,
        cache_on,
        history: v
            .get("store")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .then(|| v.get("messages").and_then(Value::as_array).cloned().unwrap_or_default()),
        _slot: slot,
        grpc_empty_final: v.get("empty_final").and_then(Value::as_bool).unwrap_or(false),
        grpc_end: 0,
    };
    st.prefix = match d {
        Dialect::Chat => format!(
            "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"",
            st.id, st.created, st.model_json
        ),
        Dialect::Completions => format!(
            "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"text\":\"",
            st.id, st.created, st.model_json
        ),
        // the start of a generic event (the faults that break one in the middle)
        _ => "data: {\"text\":\"".into(),
    };
    if !stream {
        return Ok(whole(st, &v).await);
    }
    let grpc = st.dialect == Dialect::Grpc;
    let mut r = Response::new(Either::Right(st));
    let content_type = if grpc { "application/grpc" } else { "text/event-stream" };
    r.headers_mut().insert(http::header::CONTENT_TYPE, content_type.parse().expect("static"));
    add_headers(&sh, &mut r);
    r.headers_mut().insert(http::header::CACHE_CONTROL, "no-cache".parse().expect("static"));
    if let Either::Right(s) = r.body_mut() {
        if let Some(rec) = s.rec.as_mut() {
            rec.headers_sent = Instant::now();
        }
    }
    Ok(r)
}

/// Prefix cache: look up, then store the prompt's blocks (as computed by this request); the
/// reply's blocks are stored when it has been generated. The prompt's cache tokens.
fn cache_lookup(sh: &Shared, v: &Value, rec: &mut SimRecord) -> Vec<u64> {
    let cache_tokens = crate::cache::body_tokens(v, u64::from(sh.cfg.image_tokens));
    let mut c = sh.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let blocks = c.blocks(&cache_tokens);
    let hit = c.lookup(&blocks, cache_tokens.len());
    c.insert(&blocks);
    // in the prompt's own tokens (a tokenizer's, or the server's template tokens added)
    rec.cached_tokens = crate::cache::cached_share(rec.prompt_tokens, hit, cache_tokens.len());
    cache_tokens
}

/// A request for the live twin's engine (when serving a server model): its token instants.
fn submit_to_twin(
    sh: &Shared,
    seq: u64,
    arrival: Instant,
    rec: &SimRecord,
    n_tokens: u32,
) -> Option<tokio::sync::mpsc::UnboundedReceiver<Instant>> {
    let tx = sh.twin.as_ref()?;
    let m = sh.cfg.server_model.as_ref()?;
    let (t_tx, t_rx) = tokio::sync::mpsc::unbounded_channel();
    let overhead = Duration::from_secs_f64(m.arrival_overhead_ms / 1e3);
    let req = crate::engine::EngineRequest {
        id: seq,
        at_ns: sh.ns(arrival + overhead),
        prompt_tokens: u32::try_from(rec.prompt_tokens).unwrap_or(u32::MAX),
        cached_tokens: u32::try_from(rec.cached_tokens).unwrap_or(u32::MAX),
        output_tokens: n_tokens,
    };
    tx.send(crate::twin::Submit { req, order: rec.request_id, tokens: t_tx }).ok()?;
    Some(t_rx)
}

/// The streamed body of one response.
pub(crate) struct SimStream {
    sh: Arc<Shared>,
    dialect: Dialect,
    include_usage: bool,
    id: String,
    model_json: String,
    created: u64,
    n_tokens: u32,
    sent_tokens: u32,
    next_at: Instant,
    rng: Rng,
    word_rng: Rng,
    sleep: crate::precise::Deadline,
    /// The protocol's opening events (sent with the headers) have gone out.
    opened: bool,
    /// From the start of the request's work to its first token (its server-side prompt
    /// time, as llama.cpp reports it).
    prompt_ms: f64,
    /// The last token's frame has been handed to hyper and the body yielded once, so it
    /// was written before the closing frame is made.
    last_flushed: bool,
    /// The twin engine's token instants for this request (live twin only).
    twin: Option<tokio::sync::mpsc::UnboundedReceiver<Instant>>,
    /// The next token's instant, received and not yet sent.
    twin_due: Option<Instant>,
    rec: Option<SimRecord>,
    stream: bool,
    /// The JSON of a chunk up to the generated text.
    prefix: String,
    fault: Option<Fault>,
    fault_fired: bool,
    stall_until: Option<Instant>,
    /// `linger`: the body ends only at this time, after `[DONE]`.
    linger_until: Option<Instant>,
    drip: Bytes,
    drip_at: Instant,
    /// The prompt's prefix-cache tokens; the reply's are appended when it is done.
    cache_tokens: Vec<u64>,
    cache_on: bool,
    /// A stored Response's conversation (`store: true`), kept with its reply at the end.
    history: Option<Vec<Value>>,
    /// The batch slot this request holds until its response ends (or is dropped).
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// gRPC: the client asked for an empty final response, and how far the call's end
    /// has gone (0: not yet; 1: the final response went out; 2: the trailers too).
    grpc_empty_final: bool,
    grpc_end: u8,
}

impl SimStream {
    /// The next frame as it goes on the wire: the protocol's events, or for gRPC those
    /// events as protobuf responses, then the empty final response (where asked for) and
    /// the status in the trailers.
    fn next_wire(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.dialect != Dialect::Grpc {
            return self.next_frame(cx).map(|f| f.map(|r| r.map(Frame::data)));
        }
        let model = self.sh.cfg.model.clone();
        match self.grpc_end {
            0 => {}
            1 => {
                self.grpc_end = 2;
                return Poll::Ready(Some(Ok(Frame::trailers(crate::grpc::status_headers(0, "")))));
            }
            _ => return Poll::Ready(None),
        }
        match self.next_frame(cx) {
            Poll::Ready(Some(Ok(events))) => {
                let last = self.sent_tokens == self.n_tokens && !self.grpc_empty_final;
                let wire = crate::grpc::frames(&events, &model, &self.id, last);
                Poll::Ready(Some(Ok(Frame::data(wire))))
            }
            Poll::Ready(None) => {
                self.grpc_end = 1;
                if self.grpc_empty_final {
                    let m = quetta_protocols::kserve::pb::ModelStreamInferResponse {
                        error_message: String::new(),
                        infer_response: Some(crate::grpc::response(&model, &self.id, None, true)),
                    };
                    let frame = quetta_protocols::kserve::frame(&m);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(frame)))));
                }
                self.next_wire(cx)
            }
            other => other.map(|f| f.map(|r| r.map(Frame::data))),
        }
    }

    fn prompt_tokens(&self) -> u64 {
        self.rec.as_ref().map_or(0, |r| r.prompt_tokens)
    }

    /// The usage object's JSON.
    fn usage_json(&self) -> String {
        let p = self.prompt_tokens();
        let n = u64::from(self.n_tokens);
        let mut s =
            format!("{{\"prompt_tokens\":{p},\"completion_tokens\":{n},\"total_tokens\":{}", p + n);
        if self.cache_on {
            let c = self.rec.as_ref().map_or(0, |r| r.cached_tokens);
            let _ = write!(s, ",\"prompt_tokens_details\":{{\"cached_tokens\":{c}}}");
        }
        s.push('}');
        s
    }

    /// What the protocol's frames are made from, `total` tokens long.
    fn sim_frame<'a>(&'a self, total: u32, text_so_far: &'a str) -> dialect::Frame<'a> {
        dialect::Frame {
            id: &self.id,
            created: self.created,
            model_json: &self.model_json,
            prompt_tokens: self.prompt_tokens(),
            cached_tokens: self.rec.as_ref().map_or(0, |r| r.cached_tokens),
            sent: self.sent_tokens,
            total,
            text_so_far,
            prompt_ms: self.prompt_ms,
            per_token_ms: self.sh.cfg.itl.as_secs_f64() * 1e3,
            include_usage: self.include_usage,
        }
    }

    /// A stored Response: its conversation and reply, under its id.
    fn store_response(&mut self, reply: &str) {
        if let Some(mut h) = self.history.take() {
            h.push(json!({"role": "assistant", "content": reply}));
            let mut map =
                self.sh.responses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            map.insert(self.id.clone(), h);
        }
    }

    /// A finished reply: store the blocks of the prompt followed by the reply (tagged as
    /// the assistant's, as the next turn will send it).
    fn cache_reply(&mut self, text: &str) {
        if !self.cache_on {
            return;
        }
        let mut t = std::mem::take(&mut self.cache_tokens);
        t.extend(text.split_whitespace().map(|w| crate::cache::word_token("assistant", w)));
        let mut c = self.sh.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let blocks = c.blocks(&t);
        c.insert(&blocks);
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
        let chat = self.dialect == Dialect::Chat;
        if !matches!(self.dialect, Dialect::Chat | Dialect::Completions) {
            let f =
                self.sim_frame(self.n_tokens, self.rec.as_ref().map_or("", |r| r.text.as_str()));
            self.dialect.tokens(out, &f, text, finish.is_some());
            return;
        }
        out.push_str(&self.prefix);
        out.push_str(text);
        match finish {
            None => out.push_str(if chat {
                "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
            } else {
                "\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
            }),
            Some(f) => {
                out.push_str(if chat {
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
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if let Some(at) = this.linger_until {
            if !this.wait_until(at, cx) {
                return Poll::Pending;
            }
            this.linger_until = None;
            return Poll::Ready(None);
        }
        // Slow drip: every frame leaves one byte at a time, 1 ms apart.
        if !this.drip.is_empty() {
            if !this.wait_until(Instant::now().max(this.drip_at), cx) {
                return Poll::Pending;
            }
            let b = this.drip.split_to(1);
            this.drip_at = Instant::now() + Duration::from_millis(1);
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match this.next_wire(cx) {
            Poll::Ready(Some(Ok(frame))) if this.fault == Some(Fault::SlowDrip) => {
                match frame.into_data() {
                    Ok(mut bytes) if bytes.len() > 1 => {
                        this.drip = bytes.split_off(1);
                        this.drip_at = Instant::now() + Duration::from_millis(1);
                        Poll::Ready(Some(Ok(Frame::data(bytes))))
                    }
                    Ok(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                    Err(frame) => Poll::Ready(Some(Ok(frame))),
                }
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rec.is_none()
            && self.drip.is_empty()
            && self.linger_until.is_none()
            && (self.dialect != Dialect::Grpc || self.grpc_end == 2)
    }
}

impl SimStream {
    /// Wait until `at` (a timerfd: to the microsecond, not tokio's millisecond); true once
    /// it has passed.
    fn wait_until(&mut self, at: Instant, cx: &mut Context<'_>) -> bool {
        self.sleep.poll_until(at, cx).is_ready()
    }

    /// End the record with a fault and fail the body (hyper then drops the connection).
    fn abort(&mut self, what: &str) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        self.end_with_error(what);
        Poll::Ready(Some(Err(std::io::Error::other(format!("simulated fault: {what}")))))
    }

    fn end_with_error(&mut self, what: &str) {
        if let Some(mut rec) = self.rec.take() {
            rec.completion_tokens = u64::from(self.sent_tokens);
            rec.end = Instant::now();
            rec.error = Some(format!("fault: {what}"));
            self.sh.finish(rec);
        }
    }

    /// A fault that fires halfway through the stream, once.
    fn midstream_fault(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Option<Poll<Option<Result<Bytes, std::io::Error>>>> {
        let mid = (self.n_tokens / 2).max(1);
        if self.sent_tokens != mid || self.fault_fired {
            return None;
        }
        let fault = self.fault?;
        let bad = |this: &mut Self, bytes: Vec<u8>, what: &str| {
            this.fault_fired = true;
            this.end_with_error(what);
            Some(Poll::Ready(Some(Ok(Bytes::from(bytes)))))
        };
        match fault {
            Fault::ResetMidStream => {
                // When the next chunk is due, so the chunks before it have left the buffer.
                if self.wait_until(self.next_at, cx) {
                    Some(self.abort("reset mid-stream"))
                } else {
                    Some(Poll::Pending)
                }
            }
            Fault::Stall(t) => {
                if self.stall_until.is_none() {
                    self.stall_until = Some(Instant::now() + t);
                }
                if self.wait_until(self.stall_until.unwrap_or_else(Instant::now), cx) {
                    self.fault_fired = true;
                    self.next_at = Instant::now();
                    None
                } else {
                    Some(Poll::Pending)
                }
            }
            Fault::BadJson => bad(
                self,
                b"data: {\"choices\": [{\"delta\": {\"content\": \"x\"\n\n".to_vec(),
                "bad JSON",
            ),
            Fault::InvalidUtf8 => {
                let mut v = self.prefix.clone().into_bytes();
                v.extend_from_slice(b"\xff\xfe\xfd");
                v.extend_from_slice(b"\"},\"finish_reason\":null}]}\n\n");
                bad(self, v, "invalid UTF-8")
            }
            Fault::HugeEvent => {
                let mut v = self.prefix.clone().into_bytes();
                v.extend(std::iter::repeat_n(b'x', 1_536 * 1024));
                v.extend_from_slice(b"\"},\"finish_reason\":null}]}\n\n");
                bad(self, v, "event over 1 MiB")
            }
            Fault::ErrorEvent => bad(self, self.dialect.error_event().to_vec(), "error event"),
            _ => None,
        }
    }

    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        let this = self;
        if this.rec.is_none() {
            return Poll::Ready(None);
        }
        if this.fault == Some(Fault::ResetAfterHeaders) {
            return this.abort("reset after headers");
        }
        if !this.opened {
            // Events some protocols send before any token (Responses' `response.created`,
            // Messages' `message_start`), at once.
            this.opened = true;
            let open = this.dialect.open(&this.sim_frame(this.n_tokens, ""));
            if !open.is_empty() {
                return Poll::Ready(Some(Ok(Bytes::from(open))));
            }
        }
        if let Some(p) = this.midstream_fault(cx) {
            return p;
        }
        if this.sent_tokens < this.n_tokens {
            if let Some(rx) = this.twin.as_mut() {
                if this.twin_due.is_none() {
                    match rx.poll_recv(cx) {
                        Poll::Ready(Some(at)) => this.twin_due = Some(at),
                        Poll::Ready(None) => return this.abort("the twin's engine stopped"),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                let due = this.twin_due.unwrap_or_else(Instant::now);
                if !this.wait_until(due, cx) {
                    return Poll::Pending;
                }
                this.twin_due = None;
            } else if !this.wait_until(this.next_at, cx) {
                return Poll::Pending;
            }
            let per_chunk =
                if this.twin.is_some() { 1 } else { this.sh.cfg.tokens_per_chunk.max(1) };
            let k = per_chunk.min(this.n_tokens - this.sent_tokens);
            let mut text = String::with_capacity(16 * k as usize);
            if this.sent_tokens > 0 {
                text.push(' ');
            }
            this.push_words(&mut text, k);
            let last = this.sent_tokens + k == this.n_tokens;
            let mut frame = String::with_capacity(this.prefix.len() + text.len() + 64);
            if this.dialect == Dialect::Chat && this.sent_tokens == 0 {
                // vLLM and llama.cpp open with a role-only chunk, sent with the first token.
                let _ = write!(
                    frame,
                    "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
                    this.id, this.created, this.model_json
                );
            }
            let finish = (last && this.fault != Some(Fault::NoDone)).then_some("length");
            this.chunk_event(&mut frame, &text, finish);
            this.sent_tokens += k;
            let gap = this.gap();
            let stamp = Instant::now();
            // Absolute schedule, so the mean ITL is the configured one: a late chunk is made up
            // for over the next ones, but no two chunks of a stream leave closer than half a
            // gap (a burst of catch-up chunks would leave a client half a gap or less to read
            // each before the next arrives and the kernel merges them). More than one gap
            // behind, the schedule restarts from this send.
            this.next_at = if stamp > this.next_at + gap {
                stamp + gap
            } else {
                (this.next_at + gap).max(stamp + gap / 2)
            };
            if let Some(r) = this.rec.as_mut() {
                r.text.push_str(&text);
                r.chunks.push(stamp);
                r.chunk_tokens.push(k);
            }
            return Poll::Ready(Some(Ok(Bytes::from(frame))));
        }
        if this.fault == Some(Fault::NoDone) {
            // The stream just stops: no finish_reason, no usage, no [DONE].
            this.end_with_error("no [DONE]");
            return Poll::Ready(None);
        }
        if !this.last_flushed {
            // hyper polls the body again before it writes: without this the last token would
            // leave only after the record and the prefix cache are done (50-100 µs later).
            this.last_flushed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut frame = String::new();
        let text = this.rec.as_ref().map(|r| r.text.clone()).unwrap_or_default();
        if !matches!(this.dialect, Dialect::Chat | Dialect::Completions) {
            this.dialect.close(&mut frame, &this.sim_frame(this.n_tokens, ""), &text);
        } else if this.include_usage && this.fault != Some(Fault::NoUsage) {
            let _ = write!(
                frame,
                "data: {{\"id\":\"{}\",\"object\":\"{}\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{}}}\n\n",
                this.id,
                if this.dialect == Dialect::Chat { "chat.completion.chunk" } else { "text_completion" },
                this.created,
                this.model_json,
                this.usage_json()
            );
        }
        if matches!(this.dialect, Dialect::Chat | Dialect::Completions) {
            frame.push_str("data: [DONE]\n\n");
        }
        if this.cache_on {
            this.cache_reply(&text);
        }
        this.store_response(&text);
        if let Some(mut rec) = this.rec.take() {
            rec.completion_tokens = u64::from(this.n_tokens);
            rec.end = Instant::now();
            this.sh.finish(rec);
        }
        if let Some(Fault::Linger(t)) = this.fault {
            this.linger_until = Some(Instant::now() + t);
        }
        if frame.is_empty() {
            // a protocol without closing events (TGI, Triton): the body just ends
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Bytes::from(frame))))
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

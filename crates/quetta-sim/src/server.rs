//! The HTTP side of the simulator.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::answer::{
    accept_loop, conn_of, full, grpc_answer, header_str, new_record, refuse, request_arrival, Body,
};
use crate::dialect::{self, Dialect, Refusal, Route};
use crate::faults::Fault;
use crate::stream::SimStream;
use crate::{OutputLen, Rng, Shared, SimRecord};

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    sh: Arc<Shared>,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    accept_loop(listener, shutdown, move |req| handle(req, sh.clone())).await;
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
    sh.first_arrival.get_or_init(|| arrival);
    let (slow, wait) = (sh.slowdown(arrival), cfg.ttft + prefill);
    // exact without a warm-up: no round trip through seconds as a float
    let wait = if slow > 1.0 { wait.mul_f64(slow) } else { wait };
    Plan { n_tokens, first_at: arrival + wait, rng }
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

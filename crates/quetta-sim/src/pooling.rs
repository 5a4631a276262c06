//! Embeddings, pooling, rerank and score, served strictly: the key where the service takes
//! it, the fields it requires, one result per input, usage as vLLM counts it (a ranking
//! reads the query with each document). The answer comes after the base time to first
//! token plus the prefill of every input's tokens, one batch; the request holds a batch
//! slot like any other.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::dialect::{bad_request, Dialect, Refusal};
use crate::faults::Fault;
use crate::{Rng, Shared};

/// What a pooling route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    /// OpenAI's `/v1/embeddings` (its chat form too), Infinity's `/embeddings`.
    Embeddings,
    /// vLLM's `/pooling`.
    Pooling,
    /// `/v1/rerank`, `/v2/rerank`, `/rerank` (TEI's when the body has `texts`).
    Rerank,
    /// vLLM's `/score`.
    Score,
}

/// The pooling route of a POST path.
pub(crate) fn route(path: &str) -> Option<Pool> {
    Some(match path {
        "/v1/embeddings" | "/embeddings" => Pool::Embeddings,
        "/pooling" => Pool::Pooling,
        "/v1/rerank" | "/v2/rerank" | "/rerank" => Pool::Rerank,
        "/score" | "/v1/score" => Pool::Score,
        _ => return None,
    })
}

/// What a checked request asks: the inputs' token counts, and the ranking's query.
struct Asked {
    /// Tokens per input (per document of a ranking: the document's alone).
    inputs: Vec<u64>,
    query_tokens: u64,
    /// TEI's rerank shape (an array of scores, no usage).
    tei: bool,
    model: Value,
}

fn count(sh: &Shared, s: &str) -> u64 {
    match &sh.cfg.token_counter {
        Some(c) => (c.0)(s),
        None => s.split_whitespace().count() as u64,
    }
}

fn strings(v: Option<&Value>, field: &str) -> Result<Vec<String>, Refusal> {
    match v {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => {
            Ok(a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        }
        _ => Err(bad_request(format!(
            "{field}: a string or a non-empty list of strings is required"
        ))),
    }
}

fn check(sh: &Shared, pool: Pool, v: &Value) -> Result<Asked, Refusal> {
    let model = match v.get("model") {
        Some(Value::String(m)) if !m.is_empty() => Value::String(m.clone()),
        _ if pool == Pool::Rerank && v.get("texts").is_some() => {
            Value::String(sh.cfg.model.clone())
        }
        _ => return Err(bad_request("model: field required".into())),
    };
    let words = |s: &str| count(sh, s);
    match pool {
        Pool::Embeddings | Pool::Pooling => {
            if let Some(Value::Array(m)) = v.get("messages") {
                let text: u64 = m
                    .iter()
                    .filter_map(|m| m.get("content"))
                    .map(|c| match c {
                        Value::String(s) => words(s),
                        Value::Array(p) => {
                            p.iter().filter_map(|p| p.get("text")?.as_str()).map(&words).sum()
                        }
                        _ => 0,
                    })
                    .sum();
                return Ok(Asked { inputs: vec![text], query_tokens: 0, tei: false, model });
            }
            let inputs = match v.get("input") {
                Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_u64) => {
                    vec![a.len() as u64]
                }
                Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_array) => {
                    a.iter().map(|x| x.as_array().map_or(0, |x| x.len() as u64)).collect()
                }
                other => strings(other, "input")?.iter().map(|s| words(s)).collect(),
            };
            Ok(Asked { inputs, query_tokens: 0, tei: false, model })
        }
        Pool::Rerank | Pool::Score => {
            let (qf, df) =
                if pool == Pool::Score { ("text_1", "text_2") } else { ("query", "documents") };
            let tei = pool == Pool::Rerank && v.get("texts").is_some();
            let df = if tei { "texts" } else { df };
            let Some(Value::String(q)) = v.get(qf) else {
                return Err(bad_request(format!("{qf}: field required")));
            };
            let docs = strings(v.get(df), df)?;
            Ok(Asked {
                inputs: docs.iter().map(|d| words(d)).collect(),
                query_tokens: words(q),
                tei,
                model,
            })
        }
    }
}

/// A vector of `dim` numbers in [-1, 1), seeded.
fn vector(rng: &mut Rng, dim: usize) -> Vec<f64> {
    (0..dim).map(|_| ((rng.f64() * 2.0 - 1.0) * 1e4).round() / 1e4).collect()
}

fn answer(pool: Pool, a: &Asked, id: &str, rng: &mut Rng, dim: usize) -> Value {
    let prompt: u64 = match pool {
        Pool::Rerank | Pool::Score => a.inputs.iter().map(|d| d + a.query_tokens).sum(),
        _ => a.inputs.iter().sum(),
    };
    let usage = json!({"prompt_tokens": prompt, "total_tokens": prompt});
    match pool {
        Pool::Embeddings => json!({"id": id, "object": "list", "model": a.model, "usage": usage,
            "data": a.inputs.iter().enumerate().map(|(i, _)| json!({"object": "embedding", "index": i, "embedding": vector(rng, dim)})).collect::<Vec<_>>()}),
        Pool::Pooling => json!({"id": id, "object": "list", "model": a.model, "usage": usage,
            "data": a.inputs.iter().enumerate().map(|(i, _)| json!({"object": "pooling", "index": i, "data": vector(rng, dim)})).collect::<Vec<_>>()}),
        Pool::Rerank if a.tei => Value::Array(
            a.inputs
                .iter()
                .enumerate()
                .map(|(i, _)| json!({"index": i, "score": rng.f64()}))
                .collect(),
        ),
        Pool::Rerank => {
            let mut r: Vec<(usize, f64)> = (0..a.inputs.len()).map(|i| (i, rng.f64())).collect();
            r.sort_by(|x, y| y.1.total_cmp(&x.1));
            json!({"id": id, "model": a.model, "usage": usage,
                "results": r.iter().map(|(i, s)| json!({"index": i, "relevance_score": s})).collect::<Vec<_>>()})
        }
        Pool::Score => json!({"id": id, "object": "list", "model": a.model, "usage": usage,
            "data": (0..a.inputs.len()).map(|i| json!({"index": i, "object": "score", "score": rng.f64()})).collect::<Vec<_>>()}),
    }
}

/// Serve one pooling request.
pub(crate) async fn handle(
    req: Request<Incoming>,
    sh: Arc<Shared>,
    pool: Pool,
    handled: Instant,
) -> Result<Response<crate::answer::Body>, std::io::Error> {
    let seq = sh.seq.fetch_add(1, Ordering::Relaxed);
    sh.metrics.on_start();
    let mut rec = crate::answer::new_record(seq, &req, handled);
    let (version, stamps) = crate::answer::conn_of(&req);
    let header_check = Dialect::Chat.check_headers(req.headers(), sh.cfg.api_key.as_deref());
    let body = Limited::new(req.into_body(), 64 << 20).collect().await;
    let arrival = crate::answer::request_arrival(version, stamps.as_ref(), handled);
    rec.arrival = arrival;
    rec.headers_sent = arrival;
    rec.end = arrival;
    let refuse = |rec, r: &Refusal| Ok(crate::answer::refuse(&sh, rec, Dialect::Chat, r));
    let body = match body {
        Ok(b) => b.to_bytes(),
        Err(e) => return refuse(rec, &bad_request(format!("cannot read request body: {e}"))),
    };
    if let Err(r) = header_check {
        return refuse(rec, &r);
    }
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return refuse(rec, &bad_request("request body must be a JSON object".into())),
    };
    let asked = match check(&sh, pool, &v) {
        Ok(a) => a,
        Err(r) => return refuse(rec, &r),
    };
    rec.prompt_tokens = match pool {
        Pool::Rerank | Pool::Score => asked.inputs.iter().map(|d| d + asked.query_tokens).sum(),
        _ => asked.inputs.iter().sum(),
    };
    let fault = crate::faults::pick(&sh.cfg.faults, sh.cfg.seed, seq);
    if let Some(Fault::Status(code)) = fault {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let r = Refusal { status, kind: "server_error", message: format!("simulated HTTP {code}") };
        return refuse(rec, &r);
    }
    let slot = match &sh.slots {
        Some(sem) => sem.clone().acquire_owned().await.ok(),
        None => None,
    };
    let started = if slot.is_some() { Instant::now().max(arrival) } else { arrival };
    let prefill = sh
        .cfg
        .prefill_per_token
        .saturating_mul(u32::try_from(rec.prompt_tokens).unwrap_or(u32::MAX));
    tokio::time::sleep_until((started + sh.cfg.ttft + prefill).into()).await;
    let mut rng = Rng::new(sh.cfg.seed ^ seq.rotate_left(29));
    let text = match fault {
        Some(Fault::BadJson) => "{\"object\": \"list\", \"data\": [{\"embedding\": [0.1,".to_owned(),
        Some(Fault::ErrorEvent) => json!({"error": {"message": "simulated engine failure", "type": "InternalServerError", "code": 500}}).to_string(),
        _ => answer(pool, &asked, &format!("sim-{seq}"), &mut rng, sh.cfg.embedding_dim).to_string(),
    };
    let now = Instant::now();
    rec.headers_sent = now;
    rec.end = now;
    drop(slot);
    sh.finish(rec);
    Ok(crate::answer::full(StatusCode::OK, "application/json", text))
}

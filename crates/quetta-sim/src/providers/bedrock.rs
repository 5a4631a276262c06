//! The fake's Bedrock runtime: `POST /model/ID/converse-stream`, `/converse`,
//! `/invoke-with-response-stream` and `/invoke`, after the SigV4 check (service `bedrock`).
//!
//! Written from Bedrock's API reference and its model parameter pages, apart from the
//! adapter: Converse bodies are checked as the service checks them (known top-level keys
//! only, a conversation that starts with the user and alternates, text blocks, a positive
//! `maxTokens`); Invoke bodies by the model family its id names (Anthropic's
//! `anthropic_version` and `max_tokens`, Llama's and Mistral's `prompt`, Titan's
//! `inputText`, Nova's `messages`). A refused body is 400 `ValidationException`.
//!
//! Streams are event-stream frames, one event per frame as the service sends them, each
//! with the `p` padding field Bedrock adds: Converse's `messageStart`, a
//! `contentBlockDelta` per token, `contentBlockStop`, `messageStop` and `metadata` (usage,
//! `latencyMs`); Invoke's `chunk`s, `{"bytes": base64}` of the family's own JSON, the last
//! with `amazon-bedrock-invocationMetrics`. The latencies the fake reports are its planned
//! times: TTFT for `firstByteLatency`, the last token's for `latencyMs` and
//! `invocationLatency`.

use base64::Engine as _;
use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::{at, frame, prompt_words, word, FakeConfig, Refusal, Reply, EVENT_STREAM};

fn invalid(msg: &str) -> Refusal {
    (
        StatusCode::BAD_REQUEST,
        vec![(
            "x-amzn-errortype",
            "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/".to_owned(),
        )],
        json!({"message": msg}).to_string(),
    )
}

/// Bedrock's model families, as the fake tells them from a model id.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Anthropic,
    Llama,
    Mistral,
    Titan,
    Nova,
}

/// The family of a model id; the fake's provisioned-throughput models are named after
/// the family they serve (`…:provisioned-model/anthropic-…`).
fn family(model_id: &str) -> Option<Family> {
    if let Some((_, name)) = model_id.split_once(":provisioned-model/") {
        return [
            ("anthropic-", Family::Anthropic),
            ("llama-", Family::Llama),
            ("mistral-", Family::Mistral),
            ("titan-", Family::Titan),
            ("nova-", Family::Nova),
        ]
        .into_iter()
        .find(|(k, _)| name.starts_with(k))
        .map(|(_, f)| f);
    }
    [
        ("anthropic.", Family::Anthropic),
        ("meta.llama", Family::Llama),
        ("mistral.", Family::Mistral),
        ("amazon.titan-text", Family::Titan),
        ("amazon.nova", Family::Nova),
    ]
    .into_iter()
    .find(|(k, _)| model_id.contains(k))
    .map(|(_, f)| f)
}

/// Percent-decoding of the path's model id (ARNs arrive as `arn%3Aaws%3A…%2F…`).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn route(rest: &str, body: &[u8], cfg: &FakeConfig) -> Result<Reply, Refusal> {
    let (id, op) = rest.rsplit_once('/').ok_or_else(|| invalid("no operation"))?;
    if id.contains('/') {
        return Err(invalid("the model id must be percent-encoded in the path"));
    }
    let id = decode(id);
    let v: Value = serde_json::from_slice(body).map_err(|_| invalid("Malformed input request"))?;
    match op {
        "converse-stream" | "converse" => {
            let max = check_converse(&v)?;
            let n = max.unwrap_or(cfg.default_tokens);
            let words = prompt_words(&v);
            Ok(if op == "converse" {
                converse_whole(n, words, cfg)
            } else {
                converse_stream(n, words, cfg)
            })
        }
        "invoke-with-response-stream" | "invoke" => {
            let f = family(&id).ok_or_else(|| {
                invalid(&format!("The provided model identifier is invalid: {id}"))
            })?;
            check_invoke(f, &v)?;
            let n = [
                "/max_tokens",
                "/max_gen_len",
                "/textGenerationConfig/maxTokenCount",
                "/inferenceConfig/maxTokens",
            ]
            .iter()
            .find_map(|p| v.pointer(p).and_then(Value::as_u64))
            .map_or(cfg.default_tokens, |x| x as u32);
            let words = prompt_words(&v);
            Ok(if op == "invoke" {
                invoke_whole(f, n, words, cfg)
            } else {
                invoke_stream(f, n, words, cfg)
            })
        }
        _ => Err((
            StatusCode::NOT_FOUND,
            vec![],
            json!({"message": "unknown operation"}).to_string(),
        )),
    }
}

const CONVERSE_KEYS: [&str; 10] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "promptVariables",
    "additionalModelResponseFieldPaths",
    "requestMetadata",
    "performanceConfig",
];

/// Converse's checks; the `maxTokens` asked for.
fn check_converse(v: &Value) -> Result<Option<u32>, Refusal> {
    let o = v.as_object().ok_or_else(|| invalid("the body must be an object"))?;
    if let Some(k) = o.keys().find(|k| !CONVERSE_KEYS.contains(&k.as_str())) {
        return Err(invalid(&format!("extraneous key [{k}] is not permitted")));
    }
    let msgs = v.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty());
    let msgs = msgs
        .ok_or_else(|| invalid("messages: a conversation of at least one message is required"))?;
    for (i, m) in msgs.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err(invalid("A conversation must start with a user message and alternate between user and assistant roles."));
        }
        let blocks = m.get("content").and_then(Value::as_array).filter(|c| !c.is_empty());
        let ok = blocks.is_some_and(|c| {
            c.iter().all(|b| b.get("text").and_then(Value::as_str).is_some_and(|t| !t.is_empty()))
        });
        if !ok {
            return Err(invalid(&format!(
                "messages.{i}.content: a list of non-empty text blocks is required"
            )));
        }
    }
    if let Some(s) = v.get("system") {
        let ok = s
            .as_array()
            .is_some_and(|a| a.iter().all(|b| b.get("text").and_then(Value::as_str).is_some()));
        if !ok {
            return Err(invalid("system: a list of text blocks is required"));
        }
    }
    match v.pointer("/inferenceConfig/maxTokens") {
        None => Ok(None),
        Some(x) => match x.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n as u32)),
            _ => Err(invalid("inferenceConfig.maxTokens: must be at least 1")),
        },
    }
}

/// The family's own checks of an Invoke body.
fn check_invoke(f: Family, v: &Value) -> Result<(), Refusal> {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).is_some_and(|t| !t.is_empty());
    match f {
        Family::Anthropic => {
            if v.get("anthropic_version").and_then(Value::as_str) != Some("bedrock-2023-05-31") {
                return Err(invalid("anthropic_version: bedrock-2023-05-31 is required"));
            }
            if v.get("max_tokens").and_then(Value::as_u64).is_none() {
                return Err(invalid("max_tokens: Field required"));
            }
            const KEYS: [&str; 10] = [
                "anthropic_version",
                "max_tokens",
                "messages",
                "system",
                "temperature",
                "top_p",
                "top_k",
                "stop_sequences",
                "tools",
                "tool_choice",
            ];
            if let Some(k) =
                v.as_object().and_then(|o| o.keys().find(|k| !KEYS.contains(&k.as_str())))
            {
                return Err(invalid(&format!("{k}: Extra inputs are not permitted")));
            }
            let m = v.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty());
            let m = m.ok_or_else(|| invalid("messages: Field required"))?;
            if m.iter().any(|m| m.get("role").and_then(Value::as_str) == Some("system")) {
                return Err(invalid("messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role."));
            }
            Ok(())
        }
        Family::Llama | Family::Mistral if !s("/prompt") => Err(invalid("prompt: Field required")),
        Family::Titan if !s("/inputText") => Err(invalid("inputText: Field required")),
        Family::Nova if v.get("messages").and_then(Value::as_array).is_none_or(Vec::is_empty) => {
            Err(invalid("messages: Field required"))
        }
        _ => Ok(()),
    }
}

/// One event frame with Bedrock's padding field.
fn event(kind: &str, mut payload: Value) -> Bytes {
    payload["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"[..(kind.len() % 7) + 3]);
    Bytes::from(frame(
        &[(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        payload.to_string().as_bytes(),
        false,
    ))
}

fn exception(kind: &str) -> Bytes {
    Bytes::from(frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({"message": format!("simulated {kind}")}).to_string().as_bytes(),
        false,
    ))
}

fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

fn converse_stream(n: u32, words: u64, cfg: &FakeConfig) -> Reply {
    let mut frames = vec![(at(cfg, 0), event("messageStart", json!({"role": "assistant"})), false)];
    for i in 0..n {
        if let Some((_, kind)) = cfg.bedrock_exception_at.as_ref().filter(|(k, _)| *k == i) {
            frames.push((at(cfg, i), exception(kind), false));
            return Reply::Stream { ct: EVENT_STREAM, frames, headers: vec![] };
        }
        let e =
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": word(i)}}));
        frames.push((at(cfg, i), e, true));
    }
    let last = at(cfg, n.saturating_sub(1));
    frames.push((last, event("contentBlockStop", json!({"contentBlockIndex": 0})), false));
    frames.push((last, event("messageStop", json!({"stopReason": "max_tokens"})), false));
    let meta = json!({"usage": {"inputTokens": words, "outputTokens": n, "totalTokens": words + u64::from(n)},
                      "metrics": {"latencyMs": ms(last)}});
    frames.push((last, event("metadata", meta), false));
    Reply::Stream { ct: EVENT_STREAM, frames, headers: vec![] }
}

fn converse_whole(n: u32, words: u64, cfg: &FakeConfig) -> Reply {
    let text: String = (0..n).map(word).collect();
    let last = at(cfg, n.saturating_sub(1));
    let body = json!({"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
                      "stopReason": "max_tokens",
                      "usage": {"inputTokens": words, "outputTokens": n, "totalTokens": words + u64::from(n)},
                      "metrics": {"latencyMs": ms(last)}});
    Reply::Stream {
        ct: "application/json",
        frames: vec![(last, Bytes::from(body.to_string()), true)],
        headers: vec![],
    }
}

fn metrics(n: u32, words: u64, cfg: &FakeConfig) -> Value {
    json!({"inputTokenCount": words, "outputTokenCount": n,
           "invocationLatency": ms(at(cfg, n.saturating_sub(1))), "firstByteLatency": ms(cfg.ttft)})
}

/// The family's JSON objects of a stream of `n` tokens: (before the first token?, object,
/// carries a token?).
fn family_chunks(f: Family, n: u32, words: u64, cfg: &FakeConfig) -> Vec<(Value, bool)> {
    let mut v: Vec<(Value, bool)> = Vec::new();
    let tok = |i: u32| -> Value {
        let w = word(i);
        match f {
            Family::Anthropic => {
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}})
            }
            Family::Llama => {
                json!({"generation": w, "prompt_token_count": if i == 0 { json!(words) } else { Value::Null }, "generation_token_count": i + 1, "stop_reason": null})
            }
            Family::Mistral => json!({"outputs": [{"text": w, "stop_reason": null}]}),
            Family::Titan => {
                json!({"outputText": w, "index": 0, "totalOutputTextTokenCount": i + 1, "completionReason": null, "inputTextTokenCount": words})
            }
            Family::Nova => {
                json!({"contentBlockDelta": {"delta": {"text": w}, "contentBlockIndex": 0}})
            }
        }
    };
    match f {
        Family::Anthropic => {
            v.push((json!({"type": "message_start", "message": {"id": "msg_bdrk_fake", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": words, "output_tokens": 1}}}), false));
            v.push((json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}), false));
        }
        Family::Nova => v.push((json!({"messageStart": {"role": "assistant"}}), false)),
        _ => {}
    }
    for i in 0..n {
        v.push((tok(i), true));
    }
    let m = metrics(n, words, cfg);
    let tail: Vec<Value> = match f {
        Family::Anthropic => vec![
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null}, "usage": {"output_tokens": n}}),
            json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": m}),
        ],
        Family::Llama => vec![
            json!({"generation": "", "prompt_token_count": null, "generation_token_count": n, "stop_reason": "length", "amazon-bedrock-invocationMetrics": m}),
        ],
        Family::Mistral => vec![
            json!({"outputs": [{"text": "", "stop_reason": "length"}], "amazon-bedrock-invocationMetrics": m}),
        ],
        Family::Titan => vec![
            json!({"outputText": "", "index": 0, "totalOutputTextTokenCount": n, "completionReason": "LENGTH", "inputTextTokenCount": words, "amazon-bedrock-invocationMetrics": m}),
        ],
        Family::Nova => vec![
            json!({"contentBlockStop": {"contentBlockIndex": 0}}),
            json!({"messageStop": {"stopReason": "max_tokens"}}),
            json!({"metadata": {"usage": {"inputTokens": words, "outputTokens": n}}, "amazon-bedrock-invocationMetrics": m}),
        ],
    };
    v.extend(tail.into_iter().map(|x| (x, false)));
    v
}

fn invoke_stream(f: Family, n: u32, words: u64, cfg: &FakeConfig) -> Reply {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut frames = Vec::new();
    let mut i = 0u32;
    for (obj, token) in family_chunks(f, n, words, cfg) {
        let t = at(cfg, i.min(n.saturating_sub(1)));
        if token {
            if let Some((_, kind)) = cfg.bedrock_exception_at.as_ref().filter(|(k, _)| *k == i) {
                frames.push((t, exception(kind), false));
                return Reply::Stream { ct: EVENT_STREAM, frames, headers: vec![] };
            }
        }
        frames.push((t, event("chunk", json!({"bytes": b64.encode(obj.to_string())})), token));
        i += u32::from(token);
    }
    Reply::Stream {
        ct: EVENT_STREAM,
        frames,
        headers: vec![("x-amzn-bedrock-content-type", "application/json".into())],
    }
}

fn invoke_whole(f: Family, n: u32, words: u64, cfg: &FakeConfig) -> Reply {
    let text: String = (0..n).map(word).collect();
    let body = match f {
        Family::Anthropic => {
            json!({"id": "msg_bdrk_fake", "type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
                                    "stop_reason": "max_tokens", "usage": {"input_tokens": words, "output_tokens": n}})
        }
        Family::Llama => {
            json!({"generation": text, "prompt_token_count": words, "generation_token_count": n, "stop_reason": "length"})
        }
        Family::Mistral => json!({"outputs": [{"text": text, "stop_reason": "length"}]}),
        Family::Titan => {
            json!({"inputTextTokenCount": words, "results": [{"tokenCount": n, "outputText": text, "completionReason": "LENGTH"}]})
        }
        Family::Nova => {
            json!({"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": "max_tokens",
                               "usage": {"inputTokens": words, "outputTokens": n}})
        }
    };
    let last = at(cfg, n.saturating_sub(1));
    Reply::Stream {
        ct: "application/json",
        frames: vec![(last, Bytes::from(body.to_string()), true)],
        headers: vec![
            ("x-amzn-bedrock-input-token-count", words.to_string()),
            ("x-amzn-bedrock-output-token-count", n.to_string()),
            ("x-amzn-bedrock-invocation-latency", ms(last).to_string()),
        ],
    }
}

//! The protocols the simulator serves, each strictly, in its own words.
//!
//! A request is checked as the real service checks it (the key where that service takes
//! it, its required headers and fields, its value ranges) and refused in the service's own
//! error shape; what it asks is then put into one internal shape (OpenAI's: `messages` or
//! `prompt`, `max_tokens`, `ignore_eos`, `min_tokens`, `stream`), so that prompt counting,
//! the prefix cache, the schedule and the twin are the same for every protocol. The answer
//! is framed in the protocol's own events: bookkeeping events before the first token where
//! the service sends them (Responses' `response.created`, Messages' `message_start`), one
//! event per token where the engine streams so (llama.cpp, TGI, Triton), the text so far
//! where it does (SGLang), usage where the service puts it, and errors mid-stream as the
//! service sends them.

use std::fmt::Write as _;

use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

/// A protocol the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Chat,
    Completions,
    Responses,
    Messages,
    LlamaCpp,
    Tgi,
    Sglang,
    Triton,
    /// Audio transcription (a multipart upload; vLLM's stream shape).
    Transcription,
    /// KServe v2 over gRPC: Triton's ensemble, its events carried as protobuf responses
    /// (`crate::grpc`).
    Grpc,
}

/// A request refused: its status, the service's error type and message.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
}

/// A 400 in the words given.
pub(crate) fn bad_request(message: String) -> Refusal {
    bad(message)
}

fn bad(message: impl Into<String>) -> Refusal {
    Refusal {
        status: StatusCode::BAD_REQUEST,
        kind: "invalid_request_error",
        message: message.into(),
    }
}

/// What a route tells of a request before its body is read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    pub dialect: Dialect,
    /// Whether the path itself says streamed or not (TGI, Triton).
    pub stream: Option<bool>,
}

/// The route of a POST path, and for `/generate` (TGI's and SGLang's) the body decides.
pub(crate) fn route(path: &str, model: &str) -> Option<Result<Route, Refusal>> {
    let r = |dialect, stream| Some(Ok(Route { dialect, stream }));
    match path {
        "/v1/chat/completions" => r(Dialect::Chat, None),
        "/v1/completions" => r(Dialect::Completions, None),
        "/v1/responses" => r(Dialect::Responses, None),
        "/v1/messages" => r(Dialect::Messages, None),
        "/completion" | "/completions" => r(Dialect::LlamaCpp, None),
        "/generate_stream" => r(Dialect::Tgi, Some(true)),
        "/generate" => r(Dialect::Sglang, None),
        "/v1/audio/transcriptions" | "/v1/audio/translations" => r(Dialect::Transcription, None),
        "/inference.GRPCInferenceService/ModelStreamInfer" => r(Dialect::Grpc, Some(true)),
        "/inference.GRPCInferenceService/ModelInfer" => r(Dialect::Grpc, Some(false)),
        _ => {
            let rest = path.strip_prefix("/v2/models/")?;
            let (m, op) = rest.rsplit_once('/')?;
            let stream = match op {
                "generate_stream" => true,
                "generate" => false,
                _ => return None,
            };
            if m != model {
                return Some(Err(Refusal {
                    status: StatusCode::NOT_FOUND,
                    kind: "not_found",
                    message: format!("Request for unknown model: '{m}' is not found"),
                }));
            }
            r(Dialect::Triton, Some(stream))
        }
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

impl Dialect {
    /// The key, where the service takes it, and the headers it requires.
    pub(crate) fn check_headers(self, h: &HeaderMap, key: Option<&str>) -> Result<(), Refusal> {
        if self == Dialect::Messages && header(h, "anthropic-version").is_none() {
            return Err(bad("anthropic-version: header is required"));
        }
        let Some(key) = key else { return Ok(()) };
        let given = match self {
            Dialect::Messages => header(h, "x-api-key"),
            _ => header(h, "authorization").and_then(|a| a.strip_prefix("Bearer ")),
        };
        if given == Some(key) {
            return Ok(());
        }
        let message = match (self, given) {
            (Dialect::Messages, None) => "x-api-key header is required".to_owned(),
            (Dialect::Messages, Some(_)) => "invalid x-api-key".to_owned(),
            (_, None) => "You didn't provide an API key.".to_owned(),
            (_, Some(_)) => "Incorrect API key provided.".to_owned(),
        };
        Err(Refusal { status: StatusCode::UNAUTHORIZED, kind: "authentication_error", message })
    }

    /// The dialect of `/generate`: TGI's body has `inputs`, SGLang's `text` or `input_ids`.
    pub(crate) fn settle(self, v: &Value) -> Dialect {
        if self == Dialect::Sglang && v.get("inputs").is_some() {
            Dialect::Tgi
        } else {
            self
        }
    }

    /// Check the body as the service does and put it into the internal shape.
    pub(crate) fn normalize(self, v: Value, stream: Option<bool>) -> Result<Value, Refusal> {
        let Value::Object(b) = v else { return Err(bad("request body must be a JSON object")) };
        match self {
            Dialect::Chat | Dialect::Completions => Ok(Value::Object(b)),
            Dialect::Responses => responses(b),
            Dialect::Messages => messages(b),
            Dialect::LlamaCpp => llamacpp(b),
            Dialect::Tgi => tgi(b, stream.unwrap_or(false)),
            Dialect::Sglang => sglang(b),
            Dialect::Triton | Dialect::Grpc => triton(b, stream.unwrap_or(false)),
            // its body is a multipart upload, put into the internal shape by `crate::audio`
            Dialect::Transcription => Ok(Value::Object(b)),
        }
    }

    /// The body of an error answer, in the service's shape.
    pub(crate) fn error_body(self, r: &Refusal) -> String {
        let code = r.status.as_u16();
        match self {
            Dialect::Messages => {
                json!({"type": "error", "error": {"type": r.kind, "message": r.message}})
            }
            Dialect::Tgi => json!({"error": r.message, "error_type": r.kind}),
            Dialect::Triton | Dialect::Grpc => json!({"error": r.message}),
            Dialect::LlamaCpp => {
                json!({"error": {"code": code, "message": r.message, "type": r.kind}})
            }
            _ => json!({"error": {"message": r.message, "type": r.kind, "code": code}}),
        }
        .to_string()
    }

    /// An engine failure in the middle of a stream, as the service sends it.
    pub(crate) fn error_event(self) -> &'static [u8] {
        match self {
            Dialect::Chat | Dialect::Completions | Dialect::Transcription => b"data: {\"error\": {\"message\": \"simulated engine failure\", \"type\": \"InternalServerError\", \"code\": 500}}\n\ndata: [DONE]\n\n",
            Dialect::Responses => b"event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"simulated engine failure\",\"param\":null}\n\n",
            Dialect::Messages => b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            Dialect::LlamaCpp => b"data: {\"error\":{\"code\":500,\"message\":\"simulated engine failure\",\"type\":\"server_error\"}}\n\n",
            Dialect::Tgi => b"data:{\"error\":\"simulated engine failure\",\"error_type\":\"generation\"}\n\n",
            Dialect::Sglang => b"data: {\"error\":{\"message\":\"simulated engine failure\"}}\n\n",
            Dialect::Triton | Dialect::Grpc => b"data: {\"error\":\"simulated engine failure\"}\n\n",
        }
    }

    /// Whether the service counts its answer's usage only when asked
    /// (`stream_options.include_usage`); the others always give it.
    pub(crate) fn usage_on_request(self) -> bool {
        matches!(self, Dialect::Chat | Dialect::Completions | Dialect::Transcription)
    }
}

fn positive_int(b: &Map<String, Value>, k: &str) -> Result<Option<u64>, Refusal> {
    match b.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(bad(format!("{k}: must be a positive integer, got {v}"))),
        },
    }
}

fn model(b: &Map<String, Value>) -> Result<Value, Refusal> {
    match b.get("model") {
        Some(Value::String(m)) if !m.is_empty() => Ok(Value::String(m.clone())),
        _ => Err(bad("model: field required")),
    }
}

/// The internal shape: the prompt, and what every protocol asks alike.
fn internal(
    prompt: (&str, Value),
    model: Value,
    max: Option<u64>,
    stream: bool,
) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert(prompt.0.into(), prompt.1);
    o.insert("model".into(), model);
    if let Some(n) = max {
        o.insert("max_tokens".into(), json!(n));
    }
    o.insert("stream".into(), Value::Bool(stream));
    o
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[(&str, &str)]) {
    for (f, t) in keys {
        if let Some(v) = from.get(*f).filter(|v| !v.is_null()) {
            to.insert((*t).into(), v.clone());
        }
    }
}

fn stream_flag(b: &Map<String, Value>) -> Result<bool, Refusal> {
    match b.get("stream") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(s)) => Ok(*s),
        Some(v) => Err(bad(format!("stream: must be a boolean, got {v}"))),
    }
}

/// A Responses content part in OpenAI's chat shape.
fn responses_part(p: &Value) -> Result<Value, Refusal> {
    match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text") => {
            Ok(json!({"type": "text", "text": p.get("text").and_then(Value::as_str).unwrap_or("")}))
        }
        Some("input_image") => Ok(
            json!({"type": "image_url", "image_url": {"url": p.get("image_url").and_then(Value::as_str).unwrap_or("")}}),
        ),
        other => Err(bad(format!("input: unsupported content part type {other:?}"))),
    }
}

fn responses(b: Map<String, Value>) -> Result<Value, Refusal> {
    let model = model(&b)?;
    let msgs = match b.get("input") {
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for it in items {
                let role = it
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("input: each item needs a role"))?;
                if !matches!(role, "user" | "assistant" | "system" | "developer") {
                    return Err(bad(format!("input: invalid role {role:?}")));
                }
                let content = match it.get("content") {
                    Some(Value::String(s)) => Value::String(s.clone()),
                    Some(Value::Array(parts)) => {
                        Value::Array(parts.iter().map(responses_part).collect::<Result<_, _>>()?)
                    }
                    _ => return Err(bad("input: each item needs content")),
                };
                out.push(json!({"role": role, "content": content}));
            }
            out
        }
        _ => return Err(bad("input: field required (a string or a list of messages)")),
    };
    if let Some(instr) = b.get("instructions").and_then(Value::as_str) {
        let mut m = vec![json!({"role": "system", "content": instr})];
        m.extend(msgs);
        return finish_responses(&b, m, model);
    }
    finish_responses(&b, msgs, model)
}

fn finish_responses(
    b: &Map<String, Value>,
    msgs: Vec<Value>,
    model: Value,
) -> Result<Value, Refusal> {
    let max = positive_int(b, "max_output_tokens")?;
    let mut o = internal(("messages", Value::Array(msgs)), model, max, stream_flag(b)?);
    copy(
        b,
        &mut o,
        &[
            ("ignore_eos", "ignore_eos"),
            ("min_tokens", "min_tokens"),
            ("user", "user"),
            ("previous_response_id", "previous_response_id"),
            ("store", "store"),
        ],
    );
    Ok(Value::Object(o))
}

fn messages(b: Map<String, Value>) -> Result<Value, Refusal> {
    let model = model(&b)?;
    let max = positive_int(&b, "max_tokens")?.ok_or_else(|| bad("max_tokens: field required"))?;
    let Some(Value::Array(items)) = b.get("messages") else {
        return Err(bad("messages: field required"));
    };
    if items.is_empty() {
        return Err(bad("messages: at least one message is required"));
    }
    let mut msgs = Vec::with_capacity(items.len() + 1);
    match b.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => msgs.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => msgs.push(json!({"role": "system", "content": blocks.iter().filter_map(|x| x.get("text")).map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()})),
        Some(v) => return Err(bad(format!("system: must be a string or text blocks, got {v}"))),
    }
    for m in items {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            return Err(bad(format!("messages: Unexpected role {role:?}. The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role.")));
        }
        let content = match m.get("content") {
            Some(Value::String(s)) => Value::String(s.clone()),
            Some(Value::Array(blocks)) => {
                Value::Array(blocks.iter().map(anthropic_block).collect::<Result<_, _>>()?)
            }
            _ => return Err(bad("messages: each message needs content")),
        };
        msgs.push(json!({"role": role, "content": content}));
    }
    let mut o = internal(("messages", Value::Array(msgs)), model, Some(max), stream_flag(&b)?);
    copy(&b, &mut o, &[("ignore_eos", "ignore_eos"), ("min_tokens", "min_tokens")]);
    if let Some(u) = b.get("metadata").and_then(|m| m.get("user_id")) {
        o.insert("user".into(), u.clone());
    }
    Ok(Value::Object(o))
}

fn anthropic_block(x: &Value) -> Result<Value, Refusal> {
    match x.get("type").and_then(Value::as_str) {
        Some("text") => {
            Ok(json!({"type": "text", "text": x.get("text").and_then(Value::as_str).unwrap_or("")}))
        }
        Some("image") => {
            let s = x.get("source").ok_or_else(|| bad("image: source required"))?;
            let url = match s.get("type").and_then(Value::as_str) {
                Some("base64") => format!(
                    "data:{};base64,{}",
                    s.get("media_type").and_then(Value::as_str).unwrap_or(""),
                    s.get("data").and_then(Value::as_str).unwrap_or("")
                ),
                Some("url") => s.get("url").and_then(Value::as_str).unwrap_or("").to_owned(),
                other => return Err(bad(format!("image: unsupported source type {other:?}"))),
            };
            Ok(json!({"type": "image_url", "image_url": {"url": url}}))
        }
        other => Err(bad(format!("messages: unsupported content block type {other:?}"))),
    }
}

/// A prompt that is a string or a list of token ids.
fn text_or_ids(
    b: &Map<String, Value>,
    text: &str,
    ids: Option<&str>,
) -> Result<(String, Value), Refusal> {
    if let Some(Value::String(s)) = b.get(text) {
        return Ok(("prompt".into(), Value::String(s.clone())));
    }
    let id_field = ids.unwrap_or(text);
    match b.get(id_field) {
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_u64) => {
            Ok(("prompt".into(), Value::Array(a.clone())))
        }
        _ => Err(bad(format!(
            "{text}: field required (a string{})",
            if ids.is_some() || text == "prompt" { " or token ids" } else { "" }
        ))),
    }
}

fn llamacpp(b: Map<String, Value>) -> Result<Value, Refusal> {
    let (k, p) = text_or_ids(&b, "prompt", None)?;
    let max = match b.get("n_predict") {
        Some(v) if v.as_i64() == Some(-1) => None,
        _ => positive_int(&b, "n_predict")?,
    };
    let mut o = internal((&k, p), Value::String("default".into()), max, stream_flag(&b)?);
    copy(&b, &mut o, &[("ignore_eos", "ignore_eos")]);
    Ok(Value::Object(o))
}

fn tgi(b: Map<String, Value>, stream_path: bool) -> Result<Value, Refusal> {
    let Some(Value::String(inputs)) = b.get("inputs") else {
        return Err(Refusal {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            kind: "validation",
            message:
                "Failed to deserialize the JSON body into the target type: missing field `inputs`"
                    .into(),
        });
    };
    let empty = Map::new();
    let p = b.get("parameters").and_then(Value::as_object).unwrap_or(&empty);
    let invalid = |m: String| Refusal {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        kind: "validation",
        message: m,
    };
    if let Some(t) = p.get("temperature").and_then(Value::as_f64) {
        if t <= 0.0 {
            return Err(invalid(format!(
                "Input validation error: `temperature` must be strictly positive, got {t}"
            )));
        }
    }
    if let Some(t) = p.get("top_p").and_then(Value::as_f64) {
        if t <= 0.0 || t >= 1.0 {
            return Err(invalid(format!(
                "Input validation error: `top_p` must be > 0.0 and < 1.0, got {t}"
            )));
        }
    }
    let max = positive_int(p, "max_new_tokens").map_err(|r| invalid(r.message))?;
    let stream = stream_path || stream_flag(&b)?;
    let o = internal(
        ("prompt", Value::String(inputs.clone())),
        Value::String("default".into()),
        max,
        stream,
    );
    Ok(Value::Object(o))
}

fn sglang(b: Map<String, Value>) -> Result<Value, Refusal> {
    let (k, p) = text_or_ids(&b, "text", Some("input_ids"))?;
    let empty = Map::new();
    let sp = b.get("sampling_params").and_then(Value::as_object).unwrap_or(&empty);
    let max = positive_int(sp, "max_new_tokens")?;
    let mut o = internal((&k, p), Value::String("default".into()), max, stream_flag(&b)?);
    copy(sp, &mut o, &[("ignore_eos", "ignore_eos"), ("min_new_tokens", "min_tokens")]);
    Ok(Value::Object(o))
}

fn triton(b: Map<String, Value>, stream_path: bool) -> Result<Value, Refusal> {
    let Some(Value::String(text)) = b.get("text_input") else {
        return Err(bad("input 'text_input' is required"));
    };
    let max = positive_int(&b, "max_tokens")?;
    // the ensemble streams only when asked, on generate_stream
    let stream = stream_path && stream_flag(&b)?;
    let mut o = internal(
        ("prompt", Value::String(text.clone())),
        Value::String("ensemble".into()),
        max,
        stream,
    );
    if let Some(n) = b.get("min_length").and_then(Value::as_u64) {
        o.insert("min_tokens".into(), json!(n));
    }
    Ok(Value::Object(o))
}

/// What a stream's frames are made from.
pub(crate) struct Frame<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model_json: &'a str,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Tokens sent before this frame, and the stream's whole length.
    pub sent: u32,
    pub total: u32,
    /// The text so far (SGLang's events carry it).
    pub text_so_far: &'a str,
    /// The simulator's own timing (llama.cpp's `timings`): start to first token, and the
    /// configured gap between tokens.
    pub prompt_ms: f64,
    pub per_token_ms: f64,
    /// The client asked for usage (where the service gives it only when asked).
    pub include_usage: bool,
}

/// A generated word's token id (stable: the same word, the same id).
fn token_id(w: &str) -> u64 {
    w.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))) % 49_152
}

impl Dialect {
    /// Events sent with the response headers, before any token.
    pub(crate) fn open(self, f: &Frame<'_>) -> String {
        match self {
            Dialect::Responses => format!(
                "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"{id}\",\"object\":\"response\",\"created_at\":{c},\"status\":\"in_progress\",\"model\":{m}}}}}\n\nevent: response.in_progress\ndata: {{\"type\":\"response.in_progress\",\"response\":{{\"id\":\"{id}\",\"object\":\"response\",\"status\":\"in_progress\"}}}}\n\nevent: response.output_item.added\ndata: {{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{{\"id\":\"msg_{id}\",\"type\":\"message\",\"role\":\"assistant\",\"status\":\"in_progress\",\"content\":[]}}}}\n\nevent: response.content_part.added\ndata: {{\"type\":\"response.content_part.added\",\"item_id\":\"msg_{id}\",\"output_index\":0,\"content_index\":0,\"part\":{{\"type\":\"output_text\",\"text\":\"\"}}}}\n\n",
                id = f.id, c = f.created, m = f.model_json
            ),
            Dialect::Messages => format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":{m},\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":{i},\"cache_read_input_tokens\":{c},\"cache_creation_input_tokens\":0,\"output_tokens\":1}}}}}}\n\nevent: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\nevent: ping\ndata: {{\"type\":\"ping\"}}\n\n",
                id = f.id, m = f.model_json, i = f.prompt_tokens - f.cached_tokens, c = f.cached_tokens
            ),
            _ => String::new(),
        }
    }

    /// The events of one frame of `words` (space-separated, `k` tokens), the stream's
    /// last when `last`. Generated words are ASCII: nothing to escape.
    pub(crate) fn tokens(self, out: &mut String, f: &Frame<'_>, text: &str, last: bool) {
        match self {
            Dialect::Responses => {
                let _ = write!(out, "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_{}\",\"output_index\":0,\"content_index\":0,\"delta\":\"{text}\"}}\n\n", f.id);
            }
            Dialect::Messages => {
                let _ = write!(out, "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n");
            }
            Dialect::LlamaCpp | Dialect::Tgi | Dialect::Triton | Dialect::Grpc => {
                self.per_token(out, f, text, last);
            }
            Dialect::Transcription => {
                let _ = write!(out, "data: {{\"id\":\"{}\",\"object\":\"transcription.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n", f.id, f.created, f.model_json);
            }
            Dialect::Sglang => {
                let n = f.sent + text.split(' ').filter(|w| !w.is_empty()).count() as u32;
                let finish = if last {
                    format!("{{\"type\":\"length\",\"length\":{n}}}")
                } else {
                    "null".into()
                };
                let _ = write!(out, "data: {{\"text\":\"{}{text}\",\"meta_info\":{{\"id\":\"{}\",\"finish_reason\":{finish},\"prompt_tokens\":{},\"completion_tokens\":{n},\"cached_tokens\":{}}},\"index\":0}}\n\n", f.text_so_far, f.id, f.prompt_tokens, f.cached_tokens);
            }
            Dialect::Chat | Dialect::Completions => {
                unreachable!("OpenAI's chunks are framed by the stream itself")
            }
        }
    }

    /// One event per token (llama.cpp, TGI, Triton).
    fn per_token(self, out: &mut String, f: &Frame<'_>, text: &str, last: bool) {
        let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
        for (i, w) in words.iter().enumerate() {
            let lead = if f.sent + i as u32 == 0 { "" } else { " " };
            let n = f.sent + i as u32 + 1;
            let id = token_id(w);
            match self {
                Dialect::LlamaCpp => {
                    let _ = write!(out, "data: {{\"index\":0,\"content\":\"{lead}{w}\",\"tokens\":[{id}],\"stop\":false,\"id_slot\":0,\"tokens_predicted\":{n},\"tokens_evaluated\":{}}}\n\n", f.prompt_tokens);
                }
                Dialect::Tgi => {
                    let end = last && i + 1 == words.len();
                    let (gen, details) = if end {
                        (format!("\"{}{text}\"", f.text_so_far), format!("{{\"finish_reason\":\"length\",\"generated_tokens\":{n},\"seed\":null,\"input_length\":{}}}", f.prompt_tokens))
                    } else {
                        ("null".into(), "null".into())
                    };
                    let _ = write!(out, "data:{{\"index\":{n},\"token\":{{\"id\":{id},\"text\":\"{lead}{w}\",\"logprob\":-0.5,\"special\":false}},\"generated_text\":{gen},\"details\":{details},\"top_tokens\":null}}\n\n");
                }
                _ => {
                    let _ = write!(out, "data: {{\"model_name\":\"ensemble\",\"model_version\":\"1\",\"sequence_end\":false,\"sequence_id\":0,\"sequence_start\":false,\"text_output\":\"{lead}{w}\"}}\n\n");
                }
            }
        }
    }

    /// The events after the last token.
    pub(crate) fn close(self, out: &mut String, f: &Frame<'_>, text: &str) {
        let n = f.total;
        match self {
            Dialect::Responses => {
                let usage = format!("{{\"input_tokens\":{},\"output_tokens\":{n},\"total_tokens\":{},\"input_tokens_details\":{{\"cached_tokens\":{}}},\"output_tokens_details\":{{\"reasoning_tokens\":0}}}}", f.prompt_tokens, f.prompt_tokens + u64::from(n), f.cached_tokens);
                let _ = write!(out, "event: response.output_text.done\ndata: {{\"type\":\"response.output_text.done\",\"item_id\":\"msg_{id}\",\"output_index\":0,\"content_index\":0,\"text\":\"{text}\"}}\n\nevent: response.output_item.done\ndata: {{\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{{\"id\":\"msg_{id}\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{text}\",\"annotations\":[]}}]}}}}\n\nevent: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"{id}\",\"object\":\"response\",\"created_at\":{c},\"status\":\"completed\",\"model\":{m},\"output\":[{{\"id\":\"msg_{id}\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{text}\",\"annotations\":[]}}]}}],\"usage\":{usage}}}}}\n\n", id = f.id, c = f.created, m = f.model_json);
            }
            Dialect::Messages => {
                let _ = write!(out, "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\nevent: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{n}}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n");
            }
            Dialect::LlamaCpp => {
                let _ = write!(out, "data: {{\"index\":0,\"content\":\"\",\"tokens\":[],\"id_slot\":0,\"stop\":true,\"model\":{m},\"tokens_predicted\":{n},\"tokens_evaluated\":{p},\"stop_type\":\"limit\",\"stopping_word\":\"\",\"timings\":{{\"cache_n\":{c},\"prompt_n\":{pn},\"prompt_ms\":{pm:.3},\"predicted_n\":{n},\"predicted_per_token_ms\":{tm:.3}}}}}\n\n", m = f.model_json, p = f.prompt_tokens, c = f.cached_tokens, pn = f.prompt_tokens - f.cached_tokens, pm = f.prompt_ms, tm = f.per_token_ms);
            }
            Dialect::Sglang => out.push_str("data: [DONE]\n\n"),
            Dialect::Transcription => {
                if f.include_usage {
                    let _ = write!(out, "data: {{\"id\":\"{}\",\"object\":\"transcription.chunk\",\"created\":{},\"model\":{},\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\n", f.id, f.created, f.model_json, f.prompt_tokens + u64::from(n), p = f.prompt_tokens);
                }
                out.push_str("data: [DONE]\n\n");
            }
            _ => {}
        }
    }

    /// A whole (not streamed) answer.
    pub(crate) fn whole(self, f: &Frame<'_>, text: &str) -> Value {
        let n = f.total;
        let (p, c) = (f.prompt_tokens, f.cached_tokens);
        let model: Value = serde_json::from_str(f.model_json).unwrap_or(Value::Null);
        match self {
            Dialect::Responses => {
                json!({"id": f.id, "object": "response", "created_at": f.created, "status": "completed", "model": model,
                "output": [{"id": format!("msg_{}", f.id), "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": p, "output_tokens": n, "total_tokens": p + u64::from(n), "input_tokens_details": {"cached_tokens": c}}})
            }
            Dialect::Messages => {
                json!({"id": f.id, "type": "message", "role": "assistant", "model": model, "content": [{"type": "text", "text": text}],
                "stop_reason": "max_tokens", "stop_sequence": null, "usage": {"input_tokens": p - c, "cache_read_input_tokens": c, "cache_creation_input_tokens": 0, "output_tokens": n}})
            }
            Dialect::LlamaCpp => {
                json!({"index": 0, "content": text, "tokens": [], "stop": true, "model": model, "tokens_predicted": n, "tokens_evaluated": p, "stop_type": "limit",
                "timings": {"cache_n": c, "prompt_n": p - c, "prompt_ms": f.prompt_ms, "predicted_n": n, "predicted_per_token_ms": f.per_token_ms}})
            }
            Dialect::Tgi => {
                json!({"generated_text": text, "details": {"finish_reason": "length", "generated_tokens": n, "seed": null, "input_length": p}})
            }
            Dialect::Sglang => {
                json!({"text": text, "meta_info": {"id": f.id, "finish_reason": {"type": "length", "length": n}, "prompt_tokens": p, "completion_tokens": n, "cached_tokens": c}, "index": 0})
            }
            Dialect::Triton | Dialect::Grpc => {
                json!({"model_name": "ensemble", "model_version": "1", "text_output": text})
            }
            Dialect::Transcription => {
                json!({"text": text, "usage": {"type": "tokens", "input_tokens": p, "output_tokens": n}})
            }
            Dialect::Chat | Dialect::Completions => {
                unreachable!("OpenAI's answers are built by the server")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_needs_its_version_its_key_and_max_tokens() {
        let mut h = HeaderMap::new();
        let d = Dialect::Messages;
        assert!(d.check_headers(&h, None).is_err(), "no anthropic-version");
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        assert!(d.check_headers(&h, None).is_ok());
        let r = d.check_headers(&h, Some("k")).unwrap_err();
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        h.insert("authorization", "Bearer k".parse().unwrap());
        assert!(d.check_headers(&h, Some("k")).is_err(), "Anthropic takes its key in x-api-key");
        h.insert("x-api-key", "k".parse().unwrap());
        assert!(d.check_headers(&h, Some("k")).is_ok());
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert!(d.normalize(body, None).unwrap_err().message.contains("max_tokens"));
        let body = json!({"model": "m", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]});
        assert!(d.normalize(body, None).unwrap_err().message.contains("top-level `system`"));
    }

    #[test]
    fn bodies_become_the_internal_shape() {
        let v = Dialect::Responses
            .normalize(
                json!({"model": "m", "input": "a b", "max_output_tokens": 3, "stream": true}),
                None,
            )
            .unwrap();
        assert_eq!(v["messages"], json!([{"role": "user", "content": "a b"}]));
        assert_eq!((v["max_tokens"].as_u64(), v["stream"].as_bool()), (Some(3), Some(true)));
        let v = Dialect::Sglang
            .normalize(json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "ignore_eos": true}, "stream": true}), None)
            .unwrap();
        assert_eq!((v["prompt"].clone(), v["ignore_eos"].clone()), (json!([1, 2]), json!(true)));
        let r = Dialect::Tgi
            .normalize(json!({"inputs": "x", "parameters": {"top_p": 1.0}}), Some(true));
        assert_eq!(r.unwrap_err().status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(matches!(route("/v2/models/other/generate_stream", "m"), Some(Err(_))));
    }
}

//! The engines' own generate APIs: llama.cpp's `/completion`, Hugging Face TGI's
//! `/generate_stream` and `/generate`, SGLang's `/generate` and Triton's (TensorRT-LLM)
//! `/v2/models/{model}/generate_stream` and `/generate`. Each streams server-sent events of
//! its own shape; where the first token is and where usage comes from differ per engine
//! (docs/METRICS.md, Protocols):
//! - llama.cpp: one event per token (`content`, `tokens`); the last has `stop: true`,
//!   `tokens_evaluated` (the prompt), `tokens_predicted` (the output) and `timings` (the
//!   server's own; `cache_n` prompt tokens came from its cache);
//! - TGI: one event per token (`token.text`); the last carries `generated_text` and
//!   `details` (`finish_reason`, `generated_tokens`, `input_length` where the version
//!   gives it);
//! - SGLang: events carry the text so far (cumulative, SGLang's default) and `meta_info`
//!   (`prompt_tokens`, `completion_tokens`, `cached_tokens`, `finish_reason`), then
//!   `[DONE]`;
//! - Triton: one event per response (`text_output`), no usage and no end marker: a body
//!   that ends cleanly is complete, and output tokens are counted as responses (or with a
//!   tokenizer).

use std::borrow::Cow;

use quetta_engine::{Delta, EngineError, EngineRequest, EventKind, Prompt, Usage};
use quetta_http::{BodyDecoder, EventDecoder, SseBody};
use quetta_openai::decode::TimingsJson;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::common::{bad_json, error_words, is_error, prompt_text, put_sampling};
use crate::engine::{BodyContext, Wire};

/// A text prompt, or token ids where the engine takes them (`ids_field`).
fn put_prompt(
    b: &mut Map<String, Value>,
    prompt: &Prompt,
    text_field: &str,
    ids_field: Option<&str>,
    protocol: &str,
) -> Result<(), EngineError> {
    match (prompt, ids_field) {
        (Prompt::TokenIds(ids), Some(f)) => {
            b.insert(f.into(), json!(ids));
        }
        (p, _) => {
            b.insert(text_field.into(), Value::String(prompt_text(p, protocol)?));
        }
    }
    Ok(())
}

/// The error words of an event or body with an `error` member, if it has one.
fn error_of(v: Option<&Value>) -> Option<EngineError> {
    v.filter(|e| is_error(e)).map(|e| EngineError::ServerError(error_words(e)))
}

// ---------------------------------------------------------------------------------------
// llama.cpp `/completion`

/// llama.cpp's native `/completion`.
#[derive(Debug, Default)]
pub struct LlamaCpp;

impl Wire for LlamaCpp {
    fn name(&self) -> &'static str {
        "llamacpp"
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        "/completion".into()
    }

    fn body(
        &self,
        _ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let mut b = Map::new();
        put_prompt(&mut b, &req.prompt, "prompt", Some("prompt"), "llama.cpp /completion")?;
        b.insert("stream".into(), Value::Bool(req.stream));
        if let Some(n) = req.max_tokens {
            b.insert("n_predict".into(), json!(n));
        }
        if req.ignore_eos {
            b.insert("ignore_eos".into(), Value::Bool(true));
        }
        put_sampling(&mut b, &req.params.sampling, Some("seed"));
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        Box::new(SseBody::new(max_event_bytes, LlamaCppDecoder::new(req.capture_text)))
    }
}

#[derive(Deserialize)]
struct LlamaEvent<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tokens: Option<&'a RawValue>,
    #[serde(default)]
    stop: bool,
    #[serde(default)]
    tokens_predicted: Option<u64>,
    #[serde(default)]
    tokens_evaluated: Option<u64>,
    #[serde(default)]
    stop_type: Option<String>,
    #[serde(default)]
    timings: Option<TimingsJson>,
    #[serde(default)]
    error: Option<Value>,
}

/// Decodes llama.cpp's `/completion` answers.
#[derive(Debug, Default)]
pub struct LlamaCppDecoder {
    capture: bool,
    done: bool,
    finish_reason: Option<String>,
}

impl LlamaCppDecoder {
    pub fn new(capture: bool) -> Self {
        Self { capture, ..Self::default() }
    }

    fn event(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let e: LlamaEvent<'_> = serde_json::from_slice(data).map_err(|err| bad_json(&err, data))?;
        if let Some(err) = error_of(e.error.as_ref()) {
            return Err(err);
        }
        let text = e.content.as_deref().unwrap_or("");
        // A token whose bytes end inside a UTF-8 character streams with empty text but
        // its id: still a token.
        let ids = e.tokens.is_some_and(|t| t.get().trim() != "[]");
        if !text.is_empty() || (ids && !e.stop) {
            out(EventKind::Content(Delta::of(text, self.capture)));
        }
        if e.stop {
            let cached = e.timings.and_then(|t| t.cache_n);
            out(EventKind::Usage(
                Usage::tokens(e.tokens_evaluated, e.tokens_predicted).with_cached(cached),
            ));
            if let Some(t) = e.timings {
                out(EventKind::ServerTiming(t.to_server_timing()));
            }
            self.finish_reason = Some(match e.stop_type.as_deref() {
                Some("limit") => "length".into(),
                Some("eos" | "word") | None => "stop".into(),
                Some(other) => other.to_owned(),
            });
            self.done = true;
        }
        Ok(())
    }
}

impl EventDecoder for LlamaCppDecoder {
    fn on_event(
        &mut self,
        _event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        self.event(data, out)
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.event(body, out)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish_reason.clone()
    }
}

// ---------------------------------------------------------------------------------------
// TGI `/generate_stream`, `/generate`

/// Hugging Face TGI's native API.
#[derive(Debug, Default)]
pub struct Tgi;

impl Wire for Tgi {
    fn name(&self) -> &'static str {
        "tgi-generate"
    }

    fn path(&self, _model: &str, stream: bool) -> String {
        if stream { "/generate_stream" } else { "/generate" }.into()
    }

    fn body(
        &self,
        _ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let mut p = Map::new();
        if let Some(n) = req.max_tokens {
            p.insert("max_new_tokens".into(), json!(n));
        }
        p.insert("details".into(), Value::Bool(true));
        let s = &req.params.sampling;
        // TGI refuses a temperature of 0 (greedy is its default without sampling) and a
        // top_p outside (0, 1).
        if let Some(t) = s.temperature.filter(|t| *t > 0.0) {
            p.insert("temperature".into(), json!(t));
            p.insert("do_sample".into(), Value::Bool(true));
        }
        if let Some(tp) = s.top_p.filter(|p| *p > 0.0 && *p < 1.0) {
            p.insert("top_p".into(), json!(tp));
        }
        if let Some(seed) = s.seed {
            p.insert("seed".into(), json!(seed));
        }
        let mut b = Map::new();
        put_prompt(&mut b, &req.prompt, "inputs", None, "TGI generate")?;
        b.insert("parameters".into(), Value::Object(p));
        b.insert("stream".into(), Value::Bool(req.stream));
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        Box::new(SseBody::new(max_event_bytes, TgiDecoder::new(req.capture_text)))
    }
}

#[derive(Deserialize)]
struct TgiEvent<'a> {
    #[serde(default, borrow)]
    token: Option<TgiToken<'a>>,
    #[serde(default)]
    generated_text: Option<Value>,
    #[serde(default)]
    details: Option<TgiDetails>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    error_type: Option<String>,
}

#[derive(Deserialize)]
struct TgiToken<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct TgiDetails {
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    generated_tokens: Option<u64>,
    #[serde(default)]
    input_length: Option<u64>,
    /// `/generate` with `decoder_input_details`: the prompt's tokens.
    #[serde(default)]
    prefill: Option<Vec<Value>>,
}

/// Decodes TGI's answers.
#[derive(Debug, Default)]
pub struct TgiDecoder {
    capture: bool,
    done: bool,
    finish_reason: Option<String>,
}

fn tgi_finish(r: Option<&str>) -> String {
    match r {
        Some("length") => "length".into(),
        Some("eos_token" | "stop_sequence") | None => "stop".into(),
        Some(other) => other.to_owned(),
    }
}

impl TgiDecoder {
    pub fn new(capture: bool) -> Self {
        Self { capture, ..Self::default() }
    }

    fn details(&mut self, d: Option<TgiDetails>, out: &mut dyn FnMut(EventKind)) {
        if let Some(d) = d {
            let input = d.input_length.or_else(|| d.prefill.as_ref().map(|p| p.len() as u64));
            out(EventKind::Usage(Usage::tokens(input, d.generated_tokens)));
            self.finish_reason = Some(tgi_finish(d.finish_reason.as_deref()));
        } else {
            self.finish_reason = Some("stop".into());
        }
        self.done = true;
    }
}

impl EventDecoder for TgiDecoder {
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let e: TgiEvent<'_> = serde_json::from_slice(data).map_err(|err| bad_json(&err, data))?;
        if event_type == b"error" || e.error.as_ref().is_some_and(is_error) {
            let words = e.error.as_ref().map_or_else(|| "error".into(), error_words);
            return Err(EngineError::ServerError(match e.error_type {
                Some(t) => format!("{t}: {words}"),
                None => words,
            }));
        }
        if let Some(t) = e.token {
            // every event is one generated token, special ones (the end of sequence) too
            out(EventKind::Content(Delta::of(t.text.as_deref().unwrap_or(""), self.capture)));
        }
        if e.generated_text.as_ref().is_some_and(|g| !g.is_null()) || e.details.is_some() {
            self.details(e.details, out);
        }
        Ok(())
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v: Value = match serde_json::from_slice(body).map_err(|e| bad_json(&e, body))? {
            Value::Array(a) => a.into_iter().next().unwrap_or(Value::Null),
            v => v,
        };
        if let Some(err) = error_of(v.get("error")) {
            return Err(err);
        }
        let text = v.get("generated_text").and_then(Value::as_str).unwrap_or("");
        if !text.is_empty() {
            out(EventKind::Content(Delta::of(text, self.capture)));
        }
        let d = v.get("details").and_then(|d| serde_json::from_value(d.clone()).ok());
        self.details(d, out);
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish_reason.clone()
    }
}

// ---------------------------------------------------------------------------------------
// SGLang `/generate`

/// SGLang's native `/generate`.
#[derive(Debug, Default)]
pub struct Sglang;

impl Wire for Sglang {
    fn name(&self) -> &'static str {
        "sglang-generate"
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        "/generate".into()
    }

    fn body(
        &self,
        _ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let mut p = Map::new();
        if let Some(n) = req.max_tokens {
            p.insert("max_new_tokens".into(), json!(n));
        }
        if let Some(n) = req.min_tokens {
            p.insert("min_new_tokens".into(), json!(n));
        }
        if req.ignore_eos {
            p.insert("ignore_eos".into(), Value::Bool(true));
        }
        put_sampling(&mut p, &req.params.sampling, Some("sampling_seed"));
        let mut b = Map::new();
        put_prompt(&mut b, &req.prompt, "text", Some("input_ids"), "SGLang generate")?;
        b.insert("sampling_params".into(), Value::Object(p));
        b.insert("stream".into(), Value::Bool(req.stream));
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        Box::new(SseBody::new(max_event_bytes, SglangDecoder::new(req.capture_text)))
    }
}

#[derive(Deserialize)]
struct SglangEvent<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    meta_info: Option<SglangMeta>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct SglangMeta {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

/// Decodes SGLang's answers (cumulative text: each event's text is the output so far).
#[derive(Debug, Default)]
pub struct SglangDecoder {
    capture: bool,
    done: bool,
    finish_reason: Option<String>,
    /// Bytes of output text seen so far, and output tokens.
    text_len: usize,
    tokens: u64,
    /// The text so far, kept when text is captured: an event's text that does not begin
    /// with it is a server streaming increments (`--incremental-streaming-output`), not the
    /// text so far.
    text: String,
    /// The event without its text, for serde (see [`split_text`]); kept to reuse its memory.
    rest: Vec<u8>,
}

/// SGLang's events lead with the output text (`{"text":"…","meta_info":{…},…}`), and as the
/// text is the whole output so far it is most of a stream's bytes: reading it through serde
/// made SGLang the costliest protocol to decode. Where an event begins so and its text has
/// no escape and no control character (so serde would read these very bytes as it), the
/// text is cut out with one search and the rest (`{` and what follows the text, some 100
/// bytes) is copied into `rest` for serde. Otherwise this answers `None` and the whole event
/// goes through serde; a test compares both readings.
fn split_text<'d>(data: &'d [u8], rest: &mut Vec<u8>) -> Option<&'d str> {
    let body = data.strip_prefix(br#"{"text":""#.as_slice())?;
    let end = memchr::memchr2(b'"', b'\\', body)?;
    let (text, after) = body.split_at(end);
    // (the least byte, not `any`, so that the loop is vectorised)
    if text.iter().copied().min().unwrap_or(b' ') < b' ' || after[0] != b'"' {
        return None;
    }
    rest.clear();
    rest.push(b'{');
    match after.get(1)? {
        // (another member must follow a comma, as serde would insist)
        b',' if after[2..].trim_ascii_start().first() == Some(&b'"') => {
            rest.extend_from_slice(&after[2..]);
        }
        b'}' => rest.extend_from_slice(&after[1..]),
        _ => return None,
    }
    std::str::from_utf8(text).ok()
}

impl SglangDecoder {
    pub fn new(capture: bool) -> Self {
        Self { capture, ..Self::default() }
    }

    fn event(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let mut rest = std::mem::take(&mut self.rest);
        let fast = split_text(data, &mut rest).and_then(|text| {
            match serde_json::from_slice::<SglangEvent<'_>>(&rest) {
                Ok(e) if e.text.is_none() => Some(self.apply(text, e, out)),
                _ => None,
            }
        });
        let r = match fast {
            Some(r) => r,
            None => match serde_json::from_slice::<SglangEvent<'_>>(data) {
                Ok(e) => {
                    let text = e.text.clone().unwrap_or_default();
                    self.apply(&text, e, out)
                }
                Err(err) => Err(bad_json(&err, data)),
            },
        };
        self.rest = rest;
        r
    }

    fn apply(
        &mut self,
        text: &str,
        e: SglangEvent<'_>,
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if let Some(err) = error_of(e.error.as_ref()) {
            return Err(err);
        }
        let new_text = if self.capture && !text.starts_with(self.text.as_str()) {
            text // an increment
        } else {
            text.get(self.text_len.min(text.len())..).unwrap_or("")
        };
        if self.capture {
            self.text.push_str(new_text);
        }
        let meta = e.meta_info;
        let tokens = meta.as_ref().and_then(|m| m.completion_tokens);
        // A chunk of tokens: the count went up, or (without counts) the text grew.
        let grew = match tokens {
            Some(n) => n > self.tokens,
            None => !new_text.is_empty(),
        };
        if grew {
            out(EventKind::Content(Delta::of(new_text, self.capture)));
        }
        self.text_len = if self.capture { self.text.len() } else { self.text_len.max(text.len()) };
        self.tokens = tokens.unwrap_or(self.tokens).max(self.tokens);
        if let Some(m) = meta {
            if let Some(f) = m.finish_reason.filter(|f| !f.is_null()) {
                out(EventKind::Usage(
                    Usage::tokens(m.prompt_tokens, m.completion_tokens)
                        .with_cached(m.cached_tokens),
                ));
                let kind = f.get("type").and_then(Value::as_str).or(f.as_str()).unwrap_or("stop");
                if kind == "abort" {
                    let why = f.get("message").and_then(Value::as_str).unwrap_or("");
                    return Err(EngineError::ServerError(format!("aborted: {why}")));
                }
                self.finish_reason = Some(kind.to_owned());
            }
        }
        Ok(())
    }
}

impl EventDecoder for SglangDecoder {
    fn on_event(
        &mut self,
        _event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        self.event(data, out)
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.event(body, out)?;
        self.done = true;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish_reason.clone()
    }
}

// ---------------------------------------------------------------------------------------
// Triton / TensorRT-LLM `/v2/models/{model}/generate_stream`, `/generate`

/// Triton's generate extension, with TensorRT-LLM's ensemble inputs (`text_input`,
/// `max_tokens`; `min_length` forces lengths).
#[derive(Debug, Default)]
pub struct TritonGenerate;

impl Wire for TritonGenerate {
    fn name(&self) -> &'static str {
        "tensorrt-llm"
    }

    fn path(&self, model: &str, stream: bool) -> String {
        let model = quetta_http::fetch::percent_encode(model);
        format!("/v2/models/{model}/{}", if stream { "generate_stream" } else { "generate" })
    }

    fn body(
        &self,
        _ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let mut b = Map::new();
        put_prompt(&mut b, &req.prompt, "text_input", None, "Triton generate")?;
        if let Some(n) = req.max_tokens {
            b.insert("max_tokens".into(), json!(n));
        }
        let min = if req.ignore_eos { req.max_tokens } else { req.min_tokens };
        if let Some(n) = min {
            b.insert("min_length".into(), json!(n));
        }
        b.insert("stream".into(), Value::Bool(req.stream));
        b.insert("bad_words".into(), Value::String(String::new()));
        b.insert("stop_words".into(), Value::String(String::new()));
        put_sampling(&mut b, &req.params.sampling, Some("random_seed"));
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        Box::new(SseBody::new(max_event_bytes, TritonDecoder::new(req.capture_text)))
    }
}

#[derive(Deserialize)]
struct TritonEvent<'a> {
    #[serde(default, borrow)]
    text_output: Option<Cow<'a, str>>,
    #[serde(default)]
    error: Option<Value>,
}

/// Decodes Triton's generate answers (one response per token; no end marker).
#[derive(Debug, Default)]
pub struct TritonDecoder {
    capture: bool,
    done: bool,
}

impl TritonDecoder {
    pub fn new(capture: bool) -> Self {
        Self { capture, ..Self::default() }
    }

    fn event(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let e: TritonEvent<'_> =
            serde_json::from_slice(data).map_err(|err| bad_json(&err, data))?;
        if let Some(err) = error_of(e.error.as_ref()) {
            return Err(err);
        }
        if let Some(t) = e.text_output {
            out(EventKind::Content(Delta::of(&t, self.capture)));
        }
        Ok(())
    }
}

impl EventDecoder for TritonDecoder {
    fn on_event(
        &mut self,
        _event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.event(data, out)
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.event(body, out)?;
        self.done = true;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        None
    }

    fn complete_at_body_end(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;

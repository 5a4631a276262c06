//! Anthropic's Messages API (`/v1/messages`), streamed and not.
//!
//! Requests carry the key in `x-api-key` and the API version in `anthropic-version`;
//! `max_tokens` is required; system messages go to the top-level `system` field. A
//! streamed answer is `message_start` (the prompt's usage), then per content block
//! `content_block_start`, `content_block_delta`s and `content_block_stop`, then
//! `message_delta` (the stop reason and the output tokens) and `message_stop`; `ping` is
//! ignored. Text deltas are content, thinking deltas reasoning (as OpenAI's reasoning
//! deltas), `input_json_delta`s tool calls; signature and citation deltas carry no token.
//!
//! Usage: the prompt is `input_tokens` + `cache_read_input_tokens` +
//! `cache_creation_input_tokens` (Anthropic counts them apart); the cached tokens are
//! `cache_read_input_tokens` (tokens written to the cache were computed, not served from
//! it). An `error` event mid-stream (`overloaded_error`, `rate_limit_error`, ...) fails the
//! request with the server's words, typed by its error type.

use std::borrow::Cow;
use std::sync::Arc;

use quetta_engine::{
    ContentPart, Delta, EngineError, EngineRequest, EventKind, MessageContent, Usage,
};
use quetta_http::{BodyDecoder, ErrorAnswer, EventDecoder, SseBody, StatusErrorFn};
use quetta_openai::decode::TimingsJson;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::common::{bad_json, prompt_messages, put_sampling};
use crate::engine::{BodyContext, KeyHeader, Wire};

/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when a request gives none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Messages protocol.
#[derive(Debug, Default)]
pub struct Messages;

/// An image part as an Anthropic content block: base64 data from a `data:` URL, else a URL.
fn image_block(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((media, data)) = rest.split_once(";base64,") {
            return json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}});
        }
    }
    json!({"type": "image", "source": {"type": "url", "url": url}})
}

fn message_content(c: &MessageContent) -> Value {
    match c {
        MessageContent::Text(t) => Value::String(t.clone()),
        MessageContent::Parts(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => json!({"type": "text", "text": text}),
                    ContentPart::ImageUrl { image_url } => image_block(&image_url.url),
                    _ => json!({"type": "text", "text": ""}),
                })
                .collect(),
        ),
        _ => Value::String(String::new()),
    }
}

/// The error of a typed Anthropic error (`{"type":"error","error":{"type":..,"message":..}}`).
fn typed_error(kind: &str, message: &str) -> EngineError {
    let words = format!("{kind}: {message}");
    match kind {
        "authentication_error" | "permission_error" => EngineError::Auth(words),
        "rate_limit_error" => EngineError::Throttled(words),
        "invalid_request_error" | "request_too_large" | "not_found_error" => {
            EngineError::Validation(words)
        }
        _ => EngineError::ServerError(words),
    }
}

fn status_error(a: &ErrorAnswer<'_>) -> EngineError {
    let v: Option<Value> = serde_json::from_slice(a.body).ok();
    let typed = v.as_ref().and_then(|v| {
        let e = v.get("error")?;
        Some((e.get("type")?.as_str()?.to_owned(), e.get("message")?.as_str()?.to_owned()))
    });
    match typed {
        // Errors the status already names (a 5xx, a 429) keep the status; the words go
        // with it.
        Some((k, m)) if matches!(a.status, 401 | 403) || k == "invalid_request_error" => {
            typed_error(&k, &m)
        }
        _ => a.http_status(),
    }
}

impl Wire for Messages {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        "/v1/messages".into()
    }

    fn key_header(&self) -> KeyHeader {
        KeyHeader::Named("x-api-key")
    }

    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", ANTHROPIC_VERSION)]
    }

    fn status_error(&self) -> Option<StatusErrorFn> {
        Some(Arc::new(status_error))
    }

    fn body(
        &self,
        ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let msgs = prompt_messages(&req.prompt, "Anthropic Messages")?;
        let mut system = Vec::new();
        let mut messages = Vec::with_capacity(msgs.len());
        for m in msgs.iter() {
            if m.role == "system" || m.role == "developer" {
                system.push(m.text_content());
            } else {
                let role = if m.role == "assistant" { "assistant" } else { "user" };
                messages.push(json!({"role": role, "content": message_content(&m.content)}));
            }
        }
        let mut b = Map::new();
        b.insert("model".into(), json!(ctx.model));
        if !system.is_empty() {
            b.insert("system".into(), Value::String(system.join("\n")));
        }
        b.insert("messages".into(), Value::Array(messages));
        b.insert("max_tokens".into(), json!(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
        b.insert("stream".into(), Value::Bool(req.stream));
        // Self-hosted servers speaking this protocol (vLLM, llama.cpp) honour these.
        if req.ignore_eos {
            b.insert("ignore_eos".into(), Value::Bool(true));
        }
        if let Some(n) = req.min_tokens {
            b.insert("min_tokens".into(), json!(n));
        }
        put_sampling(&mut b, &req.params.sampling, None);
        if let Some(sid) = &req.session_id {
            if ctx.session_body_field.is_some() {
                b.insert("metadata".into(), json!({"user_id": sid}));
            }
        }
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        Box::new(SseBody::new(max_event_bytes, MessagesDecoder::new(req.capture_text)))
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    message: Option<MessageJson>,
    #[serde(default, borrow)]
    delta: Option<DeltaJson<'a>>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    timings: Option<TimingsJson>,
}

#[derive(Deserialize)]
struct MessageJson {
    #[serde(default)]
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct DeltaJson<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Anthropic's usage object (its own field names).
#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[allow(clippy::struct_field_names)]
struct UsageJson {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl UsageJson {
    /// Later counts replace earlier ones (`message_delta` carries the final output count).
    fn update(&mut self, u: UsageJson) {
        self.input_tokens = u.input_tokens.or(self.input_tokens);
        self.output_tokens = u.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = u.cache_read_input_tokens.or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens =
            u.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
    }

    fn usage(self) -> Usage {
        let prompt = self.input_tokens.map(|n| {
            n + self.cache_read_input_tokens.unwrap_or(0)
                + self.cache_creation_input_tokens.unwrap_or(0)
        });
        Usage::tokens(prompt, self.output_tokens).with_cached(self.cache_read_input_tokens)
    }
}

/// Decodes a Messages answer. See the module documentation.
#[derive(Debug, Default)]
pub struct MessagesDecoder {
    capture: bool,
    done: bool,
    finish_reason: Option<String>,
    usage: Option<UsageJson>,
}

/// `end_turn` and `stop_sequence` are a natural stop; `max_tokens` is a cut (`length`).
fn finish(stop_reason: &str) -> String {
    match stop_reason {
        "max_tokens" => "length".into(),
        "end_turn" | "stop_sequence" => "stop".into(),
        other => other.to_owned(),
    }
}

impl MessagesDecoder {
    /// A decoder; `capture` keeps delta text in the events.
    pub fn new(capture: bool) -> Self {
        Self { capture, ..Self::default() }
    }

    fn add_usage(&mut self, u: UsageJson) {
        self.usage.get_or_insert_with(UsageJson::default).update(u);
    }

    fn error(e: Option<&Value>) -> EngineError {
        let e = e.and_then(|e| e.get("error").or(Some(e)));
        let kind = e.and_then(|e| e.get("type")?.as_str()).unwrap_or("error");
        let msg = e.and_then(|e| e.get("message")?.as_str()).unwrap_or("the stream failed");
        typed_error(kind, msg)
    }

    fn on_delta(&mut self, d: DeltaJson<'_>, out: &mut dyn FnMut(EventKind)) {
        let c = self.capture;
        let token = match d.kind.as_deref() {
            Some("text_delta") => d.text.map(|t| (t, EventKind::Content as TokenFn)),
            Some("thinking_delta") => d.thinking.map(|t| (t, EventKind::Reasoning as TokenFn)),
            Some("input_json_delta") => d.partial_json.map(|t| (t, EventKind::ToolCall as TokenFn)),
            _ => None,
        };
        if let Some((t, make)) = token.filter(|(t, _)| !t.is_empty()) {
            out(make(Delta::of(&t, c)));
        }
    }
}

/// Makes a token event of a delta.
type TokenFn = fn(Delta) -> EventKind;

impl EventDecoder for MessagesDecoder {
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let e: Event<'_> = serde_json::from_slice(data).map_err(|err| bad_json(&err, data))?;
        match e.kind.as_deref().unwrap_or(std::str::from_utf8(event_type).unwrap_or("")) {
            "content_block_delta" => {
                if let Some(d) = e.delta {
                    self.on_delta(d, out);
                }
            }
            "message_start" => {
                if let Some(u) = e.message.and_then(|m| m.usage) {
                    self.add_usage(u);
                }
            }
            "message_delta" => {
                if let Some(r) = e.delta.and_then(|d| d.stop_reason) {
                    self.finish_reason = Some(finish(&r));
                }
                if let Some(u) = e.usage {
                    self.add_usage(u);
                }
            }
            "message_stop" => {
                if let Some(u) = self.usage {
                    out(EventKind::Usage(u.usage()));
                }
                if let Some(t) = e.timings {
                    out(EventKind::ServerTiming(t.to_server_timing()));
                }
                self.done = true;
            }
            "error" => return Err(Self::error(e.error.as_ref())),
            _ => {}
        }
        Ok(())
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| bad_json(&e, body))?;
        if v.get("type").and_then(Value::as_str) == Some("error") {
            return Err(Self::error(Some(&v)));
        }
        let c = self.capture;
        for block in v.get("content").and_then(Value::as_array).into_iter().flatten() {
            let s = |k: &str| block.get(k).and_then(Value::as_str).filter(|t| !t.is_empty());
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    if let Some(t) = s("text") {
                        out(EventKind::Content(Delta::of(t, c)));
                    }
                }
                Some("thinking") => {
                    if let Some(t) = s("thinking") {
                        out(EventKind::Reasoning(Delta::of(t, c)));
                    }
                }
                Some("tool_use") => {
                    let input = block.get("input").map(Value::to_string).unwrap_or_default();
                    out(EventKind::ToolCall(Delta::of(&input, c)));
                }
                _ => {}
            }
        }
        if let Some(u) =
            v.get("usage").and_then(|u| serde_json::from_value::<UsageJson>(u.clone()).ok())
        {
            out(EventKind::Usage(u.usage()));
        }
        if let Some(t) =
            v.get("timings").and_then(|t| serde_json::from_value::<TimingsJson>(t.clone()).ok())
        {
            out(EventKind::ServerTiming(t.to_server_timing()));
        }
        self.finish_reason = Some(
            v.get("stop_reason").and_then(Value::as_str).map_or_else(|| "stop".into(), finish),
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(
        events: &[(&str, &str)],
    ) -> (Vec<EventKind>, Result<(), EngineError>, MessagesDecoder) {
        let mut d = MessagesDecoder::new(true);
        let mut v = Vec::new();
        let mut r = Ok(());
        for (t, e) in events {
            r = EventDecoder::on_event(&mut d, t.as_bytes(), e.as_bytes(), &mut |k| v.push(k));
            if r.is_err() {
                break;
            }
        }
        (v, r, d)
    }

    /// llama.cpp's own stream (captured from the project's test server), a thinking block
    /// and a tool call.
    #[test]
    fn a_stream_as_servers_send_it() {
        let (ev, r, d) = decode(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"x","type":"message","role":"assistant","content":[],"model":"smollm2","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":31,"input_tokens":1,"output_tokens":0}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"I'm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":4}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        r.unwrap();
        assert!(d.done);
        assert_eq!(d.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            ev,
            vec![
                EventKind::Reasoning(Delta::text("hm")),
                EventKind::Content(Delta::text("I'm")),
                EventKind::ToolCall(Delta::text("{\"a\":")),
                EventKind::Usage(Usage::tokens(Some(32), Some(4)).with_cached(Some(31))),
            ]
        );
    }

    #[test]
    fn an_error_event_mid_stream_fails_in_the_servers_words() {
        let (_, r, _) = decode(&[
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
            ),
            (
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
        ]);
        assert_eq!(r, Err(EngineError::ServerError("overloaded_error: Overloaded".into())));
        let (_, r, _) = decode(&[(
            "error",
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
        )]);
        assert!(matches!(r, Err(EngineError::Throttled(_))));
    }
}

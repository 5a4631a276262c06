//! Decoding OpenAI-style response bodies into engine events.
//!
//! [`ChunkDecoder`] turns the data of one SSE event (one `chat.completion.chunk` or
//! `text_completion` chunk) into [`EventKind`]s. It understands the dialects of vLLM,
//! SGLang, TGI's messages API, llama.cpp and OpenAI: `delta.content`, `choices[].text`,
//! `delta.reasoning_content` / `delta.reasoning`, `delta.tool_calls`, role-only and empty
//! chunks, a final usage chunk (with or without `choices`), usage inside the finishing
//! chunk, `event: error` and `{"error": ...}` objects mid-stream.
//!
//! JSON strings are borrowed from the frame where possible; text is only copied out when
//! the request asked to capture it.

use std::borrow::Cow;

use quetta_engine::{Delta, EngineError, EventKind, Usage};
use serde::Deserialize;

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaJson<'a>>,
    /// Non-streaming chat responses.
    #[serde(default, borrow)]
    message: Option<DeltaJson<'a>>,
    /// Completions responses.
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaJson<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallJson<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallJson<'a> {
    #[serde(default, borrow)]
    function: Option<FunctionJson<'a>>,
}

#[derive(Deserialize)]
struct FunctionJson<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}

/// Decodes the SSE events of one response. See the module documentation.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    capture_text: bool,
    /// `data: [DONE]` was seen.
    pub done: bool,
    /// The last `finish_reason` seen.
    pub finish_reason: Option<String>,
}

fn delta(text: &str, capture: bool) -> Delta {
    Delta { bytes: text.len() as u32, text: capture.then(|| text.to_owned()) }
}

fn error_message(v: &serde_json::Value) -> String {
    let msg = v
        .get("message")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| v.to_string(), str::to_owned);
    excerpt(&msg, 512)
}

/// At most `max` bytes of `s`, cut on a character boundary.
pub fn excerpt(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl ChunkDecoder {
    /// A decoder; `capture_text` keeps delta text in the events.
    pub fn new(capture_text: bool) -> Self {
        Self { capture_text, ..Self::default() }
    }

    /// Decode one SSE event. Events are passed to `out` in order. An `Err` is terminal.
    pub fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut impl FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        if event_type == b"error" {
            return Err(EngineError::ServerError(excerpt(&String::from_utf8_lossy(data), 512)));
        }
        let chunk: Chunk<'_> = serde_json::from_slice(data).map_err(|e| {
            EngineError::Protocol(format!(
                "bad JSON in SSE event ({e}): {}",
                excerpt(&String::from_utf8_lossy(data), 200)
            ))
        })?;
        if let Some(err) = chunk.error {
            return Err(EngineError::ServerError(error_message(&err)));
        }
        self.decode_choices(chunk.choices.as_deref().unwrap_or(&[]), out);
        if let Some(u) = chunk.usage {
            out(EventKind::Usage(u.into()));
        }
        Ok(())
    }

    fn decode_choices(&mut self, choices: &[Choice<'_>], out: &mut impl FnMut(EventKind)) {
        let c = self.capture_text;
        let mut any_token = false;
        let mut any_choice = false;
        for ch in choices {
            any_choice = true;
            if let Some(t) = ch.text.as_deref().filter(|t| !t.is_empty()) {
                out(EventKind::Content(delta(t, c)));
                any_token = true;
            }
            if let Some(d) = ch.delta.as_ref().or(ch.message.as_ref()) {
                if let Some(t) = d.reasoning_content.as_deref().or(d.reasoning.as_deref()) {
                    if !t.is_empty() {
                        out(EventKind::Reasoning(delta(t, c)));
                        any_token = true;
                    }
                }
                if let Some(t) = d.content.as_deref().filter(|t| !t.is_empty()) {
                    out(EventKind::Content(delta(t, c)));
                    any_token = true;
                }
                if let Some(calls) = &d.tool_calls {
                    let mut text = String::new();
                    for call in calls {
                        if let Some(f) = &call.function {
                            text.push_str(f.name.as_deref().unwrap_or(""));
                            text.push_str(f.arguments.as_deref().unwrap_or(""));
                        }
                    }
                    out(EventKind::ToolCall(delta(&text, c)));
                    any_token = true;
                }
            }
            if let Some(fr) = &ch.finish_reason {
                self.finish_reason = Some(fr.to_string());
            }
        }
        if any_choice && !any_token {
            out(EventKind::Empty);
        }
    }

    /// Decode a whole non-streaming response body.
    pub fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut impl FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.on_event(b"", body, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(data: &str) -> Vec<EventKind> {
        let mut d = ChunkDecoder::new(true);
        let mut v = Vec::new();
        d.on_event(b"", data.as_bytes(), &mut |e| v.push(e)).unwrap();
        v
    }

    #[test]
    fn role_only_chunk_is_empty_and_content_is_a_token() {
        assert_eq!(
            kinds(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#),
            vec![EventKind::Empty]
        );
        assert_eq!(
            kinds(r#"{"choices":[{"delta":{"content":"h\u00e9"}}]}"#),
            vec![EventKind::Content(Delta { bytes: 3, text: Some("hé".into()) })]
        );
    }

    #[test]
    fn usage_with_cached_tokens() {
        let k = kinds(
            r#"{"choices":[],"usage":{"prompt_tokens":32,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":24}}}"#,
        );
        assert_eq!(
            k,
            vec![EventKind::Usage(Usage {
                prompt_tokens: Some(32),
                completion_tokens: Some(4),
                cached_tokens: Some(24),
                reasoning_tokens: None
            })]
        );
    }

    #[test]
    fn error_object_mid_stream_is_a_server_error() {
        let mut d = ChunkDecoder::new(false);
        let r =
            d.on_event(b"", br#"{"error":{"message":"out of KV cache","code":500}}"#, &mut |_| {});
        assert_eq!(r, Err(EngineError::ServerError("out of KV cache".into())));
        let r = d.on_event(b"", b"{not json", &mut |_| {});
        assert!(matches!(r, Err(EngineError::Protocol(_))));
    }
}

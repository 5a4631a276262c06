//! Gemini's `generateContent` request body and its streamed (`alt=sse`) answers.

use quetta_engine::{
    ContentPart, Delta, EngineError, EngineRequest, EventKind, MessageContent, Prompt, Usage,
};
use quetta_http::EventDecoder;
use serde_json::{json, Map, Value};

fn part(p: &ContentPart) -> Value {
    match p {
        ContentPart::Text { text } => json!({"text": text}),
        ContentPart::ImageUrl { image_url } => {
            let url = &image_url.url;
            // data:image/png;base64,XXXX → inline data; anything else → a file URI
            match url.strip_prefix("data:").and_then(|r| r.split_once(";base64,")) {
                Some((mime, data)) => json!({"inlineData": {"mimeType": mime, "data": data}}),
                None => json!({"fileData": {"mimeType": mime_of(url), "fileUri": url}}),
            }
        }
        #[allow(unreachable_patterns)]
        _ => json!({"text": ""}),
    }
}

fn mime_of(url: &str) -> &'static str {
    let ext = std::path::Path::new(url).extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("jpg") || ext.eq_ignore_ascii_case("jpeg") {
        "image/jpeg"
    } else if ext.eq_ignore_ascii_case("webp") {
        "image/webp"
    } else {
        "image/png"
    }
}

fn parts(c: &MessageContent) -> Vec<Value> {
    match c {
        MessageContent::Text(t) => vec![json!({"text": t})],
        MessageContent::Parts(ps) => ps.iter().map(part).collect(),
        #[allow(unreachable_patterns)]
        _ => Vec::new(),
    }
}

/// The `generateContent` body: system messages become `systemInstruction`, `assistant`
/// turns the `model` role, images inline data.
pub fn body(req: &EngineRequest) -> Result<Value, EngineError> {
    let mut contents = Vec::new();
    let mut system = Vec::new();
    match &req.prompt {
        Prompt::Text(t) => contents.push(json!({"role": "user", "parts": [{"text": t}]})),
        Prompt::Chat(msgs) => {
            for m in msgs {
                match m.role.as_str() {
                    "system" | "developer" => system.extend(parts(&m.content)),
                    "assistant" | "model" => {
                        contents.push(json!({"role": "model", "parts": parts(&m.content)}));
                    }
                    _ => contents.push(json!({"role": "user", "parts": parts(&m.content)})),
                }
            }
        }
        other => {
            return Err(EngineError::Request(format!("Gemini cannot take a prompt like {other:?}")))
        }
    }
    let mut gen = Map::new();
    if let Some(n) = req.max_tokens {
        gen.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(t) = req.params.sampling.temperature {
        gen.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.params.sampling.top_p {
        gen.insert("topP".into(), json!(p));
    }
    if let Some(s) = req.params.sampling.seed {
        gen.insert("seed".into(), json!(s));
    }
    let mut b = json!({"contents": contents, "generationConfig": gen});
    if !system.is_empty() {
        b["systemInstruction"] = json!({"parts": system});
    }
    for (k, v) in &req.params.extra_body {
        b[k] = v.clone();
    }
    Ok(b)
}

/// Decodes Gemini response chunks (one per SSE event, or one whole answer).
#[derive(Debug, Default)]
pub struct GeminiDecoder {
    capture: bool,
    finish: Option<String>,
}

impl GeminiDecoder {
    pub fn new(capture: bool) -> Self {
        Self { capture, finish: None }
    }
}

/// Gemini's finish reasons in OpenAI's words where one exists.
fn finish_reason(r: &str) -> String {
    match r {
        "MAX_TOKENS" => "length".into(),
        "STOP" => "stop".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// The typed error for a Google error object (`{"code", "message", "status"}`).
pub fn google_error(e: &Value, http_status: u16) -> EngineError {
    let status = e.get("status").and_then(Value::as_str).unwrap_or("");
    let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
    // A code that is no HTTP status (65965 would read as 429 when cut to 16 bits) is ignored.
    let code = e
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(http_status);
    let text = quetta_http::excerpt(&format!("{status}: {msg}"), 512);
    match (status, code) {
        ("UNAUTHENTICATED" | "PERMISSION_DENIED", _) | (_, 401 | 403) => EngineError::Auth(text),
        ("RESOURCE_EXHAUSTED", _) | (_, 429) => EngineError::Throttled(text),
        ("INVALID_ARGUMENT" | "FAILED_PRECONDITION", _) => EngineError::Validation(text),
        _ if http_status >= 300 => {
            EngineError::HttpStatus { status: http_status, body_excerpt: text, retry_after: None }
        }
        _ => EngineError::ServerError(text),
    }
}

impl GeminiDecoder {
    fn chunk(&mut self, v: &Value, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        if let Some(e) = v.get("error") {
            return Err(google_error(e, 200));
        }
        let mut any = false;
        if let Some(c) = v.pointer("/candidates/0") {
            for p in
                c.pointer("/content/parts").and_then(Value::as_array).map_or(&[][..], Vec::as_slice)
            {
                let d = |t: &str| Delta::of(t, self.capture);
                if let Some(t) = p.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    if p.get("thought").and_then(Value::as_bool).unwrap_or(false) {
                        out(EventKind::Reasoning(d(t)));
                    } else {
                        out(EventKind::Content(d(t)));
                    }
                    any = true;
                } else if let Some(f) = p.get("functionCall") {
                    out(EventKind::ToolCall(d(&f.to_string())));
                    any = true;
                }
            }
            if let Some(r) = c.get("finishReason").and_then(Value::as_str) {
                self.finish = Some(finish_reason(r));
            }
        }
        if !any {
            out(EventKind::Empty);
        }
        if let Some(u) = v.get("usageMetadata") {
            let n = |k: &str| u.get(k).and_then(Value::as_u64);
            let completion = match (n("candidatesTokenCount"), n("thoughtsTokenCount")) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                (a, b) => a.or(b),
            };
            out(EventKind::Usage(
                Usage::tokens(n("promptTokenCount"), completion)
                    .with_cached(n("cachedContentTokenCount"))
                    .with_reasoning(n("thoughtsTokenCount")),
            ));
        }
        Ok(())
    }
}

impl EventDecoder for GeminiDecoder {
    fn on_event(
        &mut self,
        _event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v: Value = serde_json::from_slice(data).map_err(|e| {
            EngineError::Protocol(format!(
                "bad JSON in a Gemini event ({e}): {}",
                quetta_http::excerpt(&String::from_utf8_lossy(data), 200)
            ))
        })?;
        self.chunk(&v, out)
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.on_event(b"", body, out)
    }

    fn is_done(&self) -> bool {
        false
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18's reproducers: an error code above 65535 is no HTTP status (65965 cut to 16
    /// bits reads as 429), and a usage sum that would overflow saturates instead of wrapping.
    #[test]
    fn out_of_range_codes_and_counts_are_not_wrapped() {
        let e = serde_json::json!({"code": 65965, "message": "odd", "status": ""});
        assert!(matches!(google_error(&e, 500), EngineError::HttpStatus { status: 500, .. }));
        let e = serde_json::json!({"code": 429, "message": "slow down"});
        assert!(matches!(google_error(&e, 200), EngineError::Throttled(_)));
        let mut d = GeminiDecoder::new(false);
        let mut got = Vec::new();
        let v = serde_json::json!({"usageMetadata": {"candidatesTokenCount": u64::MAX, "thoughtsTokenCount": 1}});
        d.chunk(&v, &mut |k| got.push(k)).unwrap();
        let u = got.iter().find_map(|k| match k {
            EventKind::Usage(u) => Some(*u),
            _ => None,
        });
        assert_eq!(u.and_then(|u| u.completion_tokens), Some(u64::MAX));
    }
}

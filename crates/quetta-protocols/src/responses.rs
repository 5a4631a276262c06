//! OpenAI's Responses API (`/v1/responses`), streamed and not.
//!
//! A streamed answer is a sequence of typed events (`response.created`,
//! `response.output_item.added`, ... `response.output_text.delta`, ...
//! `response.completed`). The first token is the first delta that carries generated text:
//! output text, reasoning text or a reasoning summary, tool-call arguments or code; the
//! bookkeeping events before it are not tokens. Usage comes from the `response` of
//! `response.completed` (or `response.incomplete`): `input_tokens`, `output_tokens`,
//! `input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens`.
//! `response.failed` and `error` events fail the request with the server's words.
//!
//! Multi-turn sessions either send the whole history each turn (the default) or chain turns
//! with `previous_response_id` ([`Responses::chained`]): each turn then sends only the new
//! messages and the id of the session's last response, which the server must have stored.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use quetta_engine::{
    ContentPart, Delta, EngineError, EngineRequest, EventKind, Message, MessageContent, Usage,
};
use quetta_http::{BodyDecoder, EventDecoder, SseBody};
use quetta_openai::decode::TimingsJson;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::common::{bad_json, error_words, is_error, prompt_messages, put_sampling};
use crate::engine::{BodyContext, Wire};

/// The Responses protocol. `chained` sends `previous_response_id` instead of the history.
#[derive(Debug, Default)]
pub struct Responses {
    chain: Option<Arc<Chain>>,
}

/// Each session's last response id (chained turns).
#[derive(Debug, Default)]
struct Chain {
    last: Mutex<HashMap<String, String>>,
}

impl Chain {
    fn get(&self, session: &str) -> Option<String> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(session).cloned()
    }
    fn set(&self, session: String, id: String) {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(session, id);
    }
}

impl Responses {
    /// Every turn sends the whole history (stateless; the server stores nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns of a session after the first send only their new messages and
    /// `previous_response_id` (the server stores each response: `store: true`).
    pub fn chained() -> Self {
        Self { chain: Some(Arc::default()) }
    }
}

/// A message's content in the Responses shape (`input_text`, `input_image` parts).
fn content(m: &Message) -> Value {
    match &m.content {
        MessageContent::Text(t) => Value::String(t.clone()),
        MessageContent::Parts(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => json!({"type": "input_text", "text": text}),
                    ContentPart::ImageUrl { image_url } => {
                        json!({"type": "input_image", "image_url": image_url.url})
                    }
                    _ => json!({"type": "input_text", "text": ""}),
                })
                .collect(),
        ),
        _ => Value::String(m.text_content()),
    }
}

impl Wire for Responses {
    fn name(&self) -> &'static str {
        "openai-responses"
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        "/v1/responses".into()
    }

    fn body(
        &self,
        ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let mut b = Map::new();
        b.insert("model".into(), json!(ctx.model));
        let previous = match (&self.chain, &req.session_id) {
            (Some(c), Some(s)) => c.get(s),
            _ => None,
        };
        let input = match (&req.prompt, &previous) {
            (quetta_engine::Prompt::Text(t), None) => Value::String(t.clone()),
            (prompt, _) => {
                let msgs = prompt_messages(prompt, "Responses")?;
                // chained: only what follows the last reply the server already holds
                let from = match previous {
                    Some(_) => {
                        msgs.iter().rposition(|m| m.role == "assistant").map_or(0, |i| i + 1)
                    }
                    None => 0,
                };
                Value::Array(
                    msgs[from..]
                        .iter()
                        .map(|m| json!({"role": m.role, "content": content(m)}))
                        .collect(),
                )
            }
        };
        b.insert("input".into(), input);
        if let Some(id) = previous {
            b.insert("previous_response_id".into(), Value::String(id));
        }
        // Stored responses would grow a server's memory over a long run; chaining needs them.
        b.insert("store".into(), Value::Bool(self.chain.is_some()));
        b.insert("stream".into(), Value::Bool(req.stream));
        if let Some(n) = req.max_tokens {
            b.insert("max_output_tokens".into(), json!(n));
        }
        if req.ignore_eos {
            b.insert("ignore_eos".into(), Value::Bool(true));
        }
        if let Some(n) = req.min_tokens {
            b.insert("min_tokens".into(), json!(n));
        }
        put_sampling(&mut b, &req.params.sampling, None);
        if let (Some(sid), Some(f)) = (&req.session_id, ctx.session_body_field) {
            b.insert(f.into(), Value::String(sid.clone()));
        }
        Ok(b)
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        let mut d = ResponsesDecoder::new(req.capture_text);
        if let (Some(c), Some(s)) = (&self.chain, &req.session_id) {
            d.chain = Some((c.clone(), s.clone()));
        }
        Box::new(SseBody::new(max_event_bytes, d))
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<&'a RawValue>,
    #[serde(default)]
    response: Option<ResponseJson>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<Value>,
    /// llama.cpp's own timing, beside `response.completed`.
    #[serde(default)]
    timings: Option<TimingsJson>,
}

#[derive(Deserialize, Default)]
struct ResponseJson {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Value>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<Value>,
    #[serde(default)]
    output_tokens_details: Option<Value>,
}

impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        let detail = |d: &Option<Value>, k: &str| d.as_ref().and_then(|d| d.get(k)?.as_u64());
        Usage::tokens(u.input_tokens, u.output_tokens)
            .with_cached(detail(&u.input_tokens_details, "cached_tokens"))
            .with_reasoning(detail(&u.output_tokens_details, "reasoning_tokens"))
    }
}

/// The kind of token a delta event carries, if any.
fn token_kind(kind: &str) -> Option<fn(Delta) -> EventKind> {
    match kind {
        "response.output_text.delta" | "response.refusal.delta" => Some(EventKind::Content),
        "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta"
        | "response.reasoning.delta" => Some(EventKind::Reasoning),
        "response.function_call_arguments.delta"
        | "response.custom_tool_call_input.delta"
        | "response.mcp_call_arguments.delta"
        | "response.code_interpreter_call_code.delta" => Some(EventKind::ToolCall),
        _ => None,
    }
}

/// Decodes a Responses answer. See the module documentation.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    capture: bool,
    done: bool,
    finish_reason: Option<String>,
    /// The response's id (from `response.created`).
    id: Option<String>,
    chain: Option<(Arc<Chain>, String)>,
}

impl ResponsesDecoder {
    /// A decoder; `capture` keeps delta text in the events.
    pub fn new(capture: bool) -> Self {
        Self { capture, ..Self::default() }
    }

    /// The response ended (completed or cut short): usage, the server's timing, done.
    fn finish(
        &mut self,
        r: ResponseJson,
        timings: Option<TimingsJson>,
        out: &mut dyn FnMut(EventKind),
    ) {
        let reason = r
            .incomplete_details
            .as_ref()
            .and_then(|d| d.get("reason")?.as_str().map(str::to_owned));
        self.finish_reason = Some(match (r.status.as_deref(), reason.as_deref()) {
            (_, Some("max_output_tokens")) => "length".into(),
            (_, Some(other)) => other.to_owned(),
            (Some("incomplete"), None) => "length".into(),
            _ => "stop".into(),
        });
        if let Some(u) = r.usage {
            out(EventKind::Usage(u.into()));
        }
        if let Some(t) = timings {
            out(EventKind::ServerTiming(t.to_server_timing()));
        }
        if let (Some((chain, session)), Some(id)) = (&self.chain, r.id.or(self.id.take())) {
            chain.set(session.clone(), id);
        }
        self.done = true;
    }

    fn fail(e: &Event<'_>, r: Option<&ResponseJson>) -> EngineError {
        let words = r
            .and_then(|r| r.error.as_ref())
            .or(e.error.as_ref())
            .filter(|v| is_error(v))
            .map(error_words)
            .or_else(|| {
                let code = e.code.as_ref().and_then(Value::as_str);
                e.message.as_deref().map(|m| match code {
                    Some(c) => format!("{c}: {m}"),
                    None => m.to_owned(),
                })
            })
            .unwrap_or_else(|| "the response failed".into());
        EngineError::ServerError(words)
    }

    fn decode_whole(&mut self, v: &Value, out: &mut dyn FnMut(EventKind)) {
        for item in v.get("output").and_then(Value::as_array).into_iter().flatten() {
            let texts = |key: &str| -> Vec<String> {
                item.get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("text")?.as_str().map(str::to_owned))
                    .collect()
            };
            let c = self.capture;
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    for t in texts("content").into_iter().filter(|t| !t.is_empty()) {
                        out(EventKind::Content(Delta::of(&t, c)));
                    }
                }
                Some("reasoning") => {
                    let mut t = texts("content");
                    t.extend(texts("summary"));
                    for t in t.into_iter().filter(|t| !t.is_empty()) {
                        out(EventKind::Reasoning(Delta::of(&t, c)));
                    }
                }
                Some(_) => {
                    if let Some(a) = item.get("arguments").and_then(Value::as_str) {
                        out(EventKind::ToolCall(Delta::of(a, c)));
                    }
                }
                None => {}
            }
        }
    }
}

impl EventDecoder for ResponsesDecoder {
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
        let e: Event<'_> = serde_json::from_slice(data).map_err(|err| bad_json(&err, data))?;
        let kind = e.kind.as_deref().unwrap_or("");
        if let Some(make) = token_kind(kind) {
            let Some(raw) = e.delta else { return Ok(()) };
            let text: Cow<'_, str> =
                serde_json::from_str(raw.get()).map_err(|err| bad_json(&err, data))?;
            if !text.is_empty() {
                out(make(Delta::of(&text, self.capture)));
            }
            return Ok(());
        }
        match kind {
            "response.created" => {
                self.id = e.response.as_ref().and_then(|r| r.id.clone());
                Ok(())
            }
            "response.completed" | "response.incomplete" => {
                let r = e.response.unwrap_or_default();
                self.finish(r, e.timings, out);
                Ok(())
            }
            "response.failed" => Err(Self::fail(&e, e.response.as_ref())),
            "error" => Err(Self::fail(&e, None)),
            _ if e.error.as_ref().is_some_and(is_error) && e.response.is_none() => {
                Err(Self::fail(&e, None))
            }
            _ => Ok(()),
        }
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| bad_json(&e, body))?;
        if let Some(err) = v.get("error").filter(|e| is_error(e)) {
            return Err(EngineError::ServerError(error_words(err)));
        }
        if v.get("status").and_then(Value::as_str) == Some("failed") {
            return Err(EngineError::ServerError("the response failed".into()));
        }
        self.decode_whole(&v, out);
        let r: ResponseJson = serde_json::from_value(v.clone()).map_err(|e| bad_json(&e, body))?;
        let timings = v.get("timings").and_then(|t| serde_json::from_value(t.clone()).ok());
        self.finish(r, timings, out);
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

    fn decode(events: &[&str]) -> (Vec<EventKind>, Result<(), EngineError>, bool) {
        let mut d = ResponsesDecoder::new(true);
        let mut v = Vec::new();
        let mut r = Ok(());
        for e in events {
            r = EventDecoder::on_event(&mut d, b"", e.as_bytes(), &mut |k| v.push(k));
            if r.is_err() {
                break;
            }
        }
        (v, r, d.done)
    }

    #[test]
    fn bookkeeping_is_no_token_and_usage_comes_from_completed() {
        let (ev, r, done) = decode(&[
            r#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}"#,
            r#"{"type":"response.output_item.added","item":{"type":"message","content":[]}}"#,
            r#"{"type":"response.reasoning_text.delta","delta":"hm"}"#,
            r#"{"type":"response.output_text.delta","delta":"H\u00e9"}"#,
            r#"{"type":"response.output_text.delta","delta":""}"#,
            r#"{"type":"response.output_text.done","text":"Hé"}"#,
            r#"{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":32,"output_tokens":8,"input_tokens_details":{"cached_tokens":16},"output_tokens_details":{"reasoning_tokens":1}}}}"#,
        ]);
        r.unwrap();
        assert!(done);
        assert_eq!(
            ev,
            vec![
                EventKind::Reasoning(Delta::text("hm")),
                EventKind::Content(Delta::text("Hé")),
                EventKind::Usage(
                    Usage::tokens(Some(32), Some(8)).with_cached(Some(16)).with_reasoning(Some(1))
                ),
            ]
        );
    }

    #[test]
    fn failures_carry_the_servers_words() {
        let (_, r, _) = decode(&[
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"the GPU fell over"}}}"#,
        ]);
        assert_eq!(r, Err(EngineError::ServerError("server_error: the GPU fell over".into())));
        let (_, r, _) =
            decode(&[r#"{"type":"error","code":"rate_limit","message":"slow down","param":null}"#]);
        assert_eq!(r, Err(EngineError::ServerError("rate_limit: slow down".into())));
        let (_, r, _) = decode(&[r#"{"type":"response.output_text.delta","delta":"x""#]);
        assert!(matches!(r, Err(EngineError::Protocol(_))));
    }

    #[test]
    fn truncation_is_length() {
        let mut d = ResponsesDecoder::new(false);
        let e = r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#;
        EventDecoder::on_event(&mut d, b"", e.as_bytes(), &mut |_| {}).unwrap();
        assert_eq!(d.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn chained_turns_send_only_the_new_messages() {
        let w = Responses::chained();
        let ctx = BodyContext {
            model: "m",
            include_usage: true,
            session_body_field: None,
            max_tokens_field: "max_tokens",
        };
        let msgs = vec![
            Message::text("user", "one"),
            Message::text("assistant", "reply"),
            Message::text("user", "two"),
        ];
        let mut req = EngineRequest::new(1, quetta_engine::Prompt::Chat(msgs));
        req.session_id = Some("s".into());
        let b = w.body(&ctx, &req).unwrap();
        assert_eq!(b["input"].as_array().unwrap().len(), 3, "no response yet: the whole history");
        let mut d = w.decoder(&req, 1 << 20);
        let completed = "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_9\",\"status\":\"completed\"}}\n\n";
        d.on_data(completed.as_bytes(), &mut |_| {}).unwrap();
        let b = w.body(&ctx, &req).unwrap();
        assert_eq!(b["previous_response_id"], "resp_9");
        assert_eq!(b["input"], json!([{"role": "user", "content": "two"}]));
        assert_eq!(b["store"], true);
    }
}

//! Request bodies for the container behind an endpoint, and the framing of its answer.
//!
//! - `openai`: an OpenAI chat body (TGI, LMI and vLLM containers' messages API); the
//!   streamed answer is SSE (`data: {chunk}` … `data: [DONE]`).
//! - `jumpstart`: `{"inputs", "parameters": {"max_new_tokens", …}, "stream"}`; the streamed
//!   answer is JSON lines (`{"token": {"text": …}}`, a final line with `details`), with or
//!   without a `data:` prefix.
//! - `template`: the user's JSON body with placeholders, and a JSON pointer to the text of
//!   each streamed line. The placeholders, for every AWS template (Bedrock's model bodies
//!   too): `{{prompt}}` (the prompt as one text; also replaced inside a longer string),
//!   `{{messages}}` (the chat messages as OpenAI's), `{{chat}}` and `{{chat_blocks}}` (the
//!   messages without the system ones, content as a string or as `[{"text": …}]`),
//!   `{{system}}` and `{{system_blocks}}`, `{{max_tokens}}`, `{{temperature}}`, `{{top_p}}`,
//!   `{{seed}}` and `{{stream}}`. An object member whose placeholder has no value is left
//!   out.

use quetta_engine::{Delta, EngineError, EngineRequest, EventKind, Message, Prompt, Usage};
use quetta_http::BodyDecoder;
use serde_json::{json, Map, Value};

use crate::AwsError;

/// The request and response format the endpoint's container speaks.
///
/// ```
/// let p = quetta_aws::Payload::JumpStart;
/// assert_ne!(p, quetta_aws::Payload::OpenAi);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Payload {
    /// OpenAI chat completions (messages API).
    OpenAi,
    /// JumpStart / TGI / LMI `inputs` + `parameters`, answered in JSON lines.
    JumpStart,
    /// A user-given JSON template; `text_pointer` finds the text in each answered line
    /// (and in the whole non-streamed answer).
    Template { body: Value, text_pointer: String },
}

impl Payload {
    /// A template payload read from a JSON file (`{{prompt}}`, `{{messages}}`,
    /// `{{max_tokens}}`, `{{stream}}` placeholders); an error names the file, line and column.
    pub fn template_file(path: &std::path::Path, text_pointer: &str) -> Result<Self, AwsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AwsError::TemplateRead { path: path.into(), source })?;
        let body: Value = serde_json::from_str(&text)
            .map_err(|source| AwsError::TemplateJson { path: path.into(), source })?;
        Ok(Payload::Template { body, text_pointer: text_pointer.to_owned() })
    }
}

/// The prompt as one text (chat messages joined by newlines).
pub(crate) fn prompt_text(p: &Prompt) -> Result<String, EngineError> {
    match p {
        Prompt::Text(t) => Ok(t.clone()),
        Prompt::Chat(m) => Ok(m.iter().map(Message::text_content).collect::<Vec<_>>().join("\n")),
        other => Err(EngineError::Request(format!(
            "this payload format sends text; it cannot send a prompt like {other:?}"
        ))),
    }
}

/// The JumpStart-style body.
pub(crate) fn jumpstart_body(req: &EngineRequest) -> Result<Value, EngineError> {
    let mut params = Map::new();
    if let Some(n) = req.max_tokens {
        params.insert("max_new_tokens".into(), json!(n));
    }
    if let Some(t) = req.params.sampling.temperature {
        params.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.params.sampling.top_p {
        params.insert("top_p".into(), json!(p));
    }
    if let Some(s) = req.params.sampling.seed {
        params.insert("seed".into(), json!(s));
    }
    if req.ignore_eos {
        params.insert("ignore_eos".into(), json!(true));
    }
    params.insert("details".into(), json!(true));
    let mut b =
        json!({"inputs": prompt_text(&req.prompt)?, "parameters": params, "stream": req.stream});
    for (k, v) in &req.params.extra_body {
        b[k] = v.clone();
    }
    Ok(b)
}

/// The values of a template's placeholders for one request (see the module's docs).
struct Placeholders {
    text: String,
    values: [(&'static str, Option<Value>); 9],
}

impl Placeholders {
    fn of(req: &EngineRequest) -> Result<Self, EngineError> {
        let text = prompt_text(&req.prompt)?;
        let all: Vec<Message> = match &req.prompt {
            Prompt::Chat(m) => m.clone(),
            _ => vec![Message::text("user", text.clone())],
        };
        let messages =
            serde_json::to_value(&all).map_err(|e| EngineError::Request(e.to_string()))?;
        let (system, chat): (Vec<&Message>, Vec<&Message>) =
            all.iter().partition(|m| m.role == "system");
        let system_text = system.iter().map(|m| m.text_content()).collect::<Vec<_>>().join("\n");
        let has_system = !system.is_empty();
        let s = req.sampling();
        let values = [
            ("{{messages}}", Some(messages)),
            (
                "{{chat}}",
                Some(
                    chat.iter()
                        .map(|m| json!({"role": m.role, "content": m.text_content()}))
                        .collect(),
                ),
            ),
            (
                "{{chat_blocks}}",
                Some(
                    chat.iter()
                        .map(|m| json!({"role": m.role, "content": [{"text": m.text_content()}]}))
                        .collect(),
                ),
            ),
            ("{{system}}", has_system.then(|| json!(system_text))),
            ("{{system_blocks}}", has_system.then(|| json!([{"text": system_text}]))),
            ("{{max_tokens}}", req.max_tokens.map(|n| json!(n))),
            ("{{temperature}}", s.temperature.map(|t| json!(t))),
            ("{{top_p}}", s.top_p.map(|t| json!(t))),
            ("{{seed}}", s.seed.map(|t| json!(t))),
        ];
        Ok(Self { text, values })
    }

    /// The value of a whole-string placeholder (`None`: it has none, and its object member
    /// is left out), or the string itself with `{{prompt}}` replaced inside it.
    fn fill_string(&self, s: &str, req: &EngineRequest) -> Option<Value> {
        match s {
            "{{prompt}}" => Some(Value::String(self.text.clone())),
            "{{stream}}" => Some(Value::Bool(req.stream)),
            _ => match self.values.iter().find(|(k, _)| *k == s) {
                Some((_, v)) => v.clone(),
                None => Some(Value::String(s.replace("{{prompt}}", &self.text))),
            },
        }
    }

    fn fill(&self, v: &Value, req: &EngineRequest) -> Option<Value> {
        match v {
            Value::String(s) => self.fill_string(s, req),
            Value::Array(a) => Some(Value::Array(
                a.iter().map(|x| self.fill(x, req).unwrap_or(Value::Null)).collect(),
            )),
            Value::Object(o) => Some(Value::Object(
                o.iter().filter_map(|(k, x)| self.fill(x, req).map(|x| (k.clone(), x))).collect(),
            )),
            _ => Some(v.clone()),
        }
    }
}

/// The template with its placeholders filled; an object member whose placeholder has no
/// value is left out.
pub(crate) fn fill_template(t: &Value, req: &EngineRequest) -> Result<Value, EngineError> {
    let p = Placeholders::of(req)?;
    Ok(p.fill(t, req).unwrap_or(Value::Null))
}

/// Streamed JSON lines (`{"token": {"text": …}}` per line, `details` on the last), each
/// optionally prefixed with `data:` and separated by blank lines. Lines are re-buffered
/// across payload parts, whose boundaries do not follow the container's lines.
#[derive(Debug)]
pub struct JsonLines {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline (a long line is scanned once).
    scanned: usize,
    /// The longest line accepted.
    max_line: usize,
    pointer: String,
    capture: bool,
    finish: Option<String>,
    ended: bool,
}

impl JsonLines {
    /// Lines of at most `max_line` bytes are accepted; a longer one fails the request.
    pub fn new(pointer: impl Into<String>, capture: bool, max_line: usize) -> Self {
        Self {
            buf: Vec::new(),
            scanned: 0,
            max_line,
            pointer: pointer.into(),
            capture,
            finish: None,
            ended: false,
        }
    }

    fn too_long(&self) -> EngineError {
        EngineError::Protocol(format!(
            "a JSON line in the stream is longer than {} bytes (the event cap); it begins: {}",
            self.max_line,
            quetta_http::excerpt(
                &String::from_utf8_lossy(&self.buf[..self.buf.len().min(400)]),
                200
            )
        ))
    }

    fn line(&mut self, line: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let mut l = line.trim_ascii();
        if let Some(rest) = l.strip_prefix(b"data:") {
            l = rest.trim_ascii();
        }
        if l.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_slice(l).map_err(|e| {
            EngineError::Protocol(format!(
                "bad JSON line in the stream ({e}): {}",
                quetta_http::excerpt(&String::from_utf8_lossy(l), 200)
            ))
        })?;
        self.value(&v, out)
    }

    fn value(&mut self, v: &Value, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let msg = e.as_str().map_or_else(|| e.to_string(), str::to_owned);
            return Err(EngineError::Model(msg));
        }
        let special = v.pointer("/token/special").and_then(Value::as_bool).unwrap_or(false);
        let text = v.pointer(&self.pointer).and_then(Value::as_str).unwrap_or("");
        if !text.is_empty() && !special {
            let mut d = Delta::of(text, self.capture);
            d.bytes = text_len(v, &self.pointer);
            out(EventKind::Content(d));
        } else {
            out(EventKind::Empty);
        }
        if let Some(f) = v.pointer("/details/finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_owned());
        }
        if let Some(n) = v.pointer("/details/generated_tokens").and_then(Value::as_u64) {
            out(EventKind::Usage(Usage::tokens(None, Some(n))));
        }
        Ok(())
    }
}

fn text_len(v: &Value, pointer: &str) -> u32 {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map_or(0, |t| u32::try_from(t.len()).unwrap_or(u32::MAX))
}

impl BodyDecoder for JsonLines {
    fn on_data(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        // Each byte is searched for a newline once: only the new bytes are scanned.
        let mut from = self.scanned;
        self.buf.extend_from_slice(data);
        let mut start = 0;
        while let Some(i) = memchr::memchr(b'\n', &self.buf[from..]) {
            let end = from + i;
            if end - start > self.max_line {
                return Err(self.too_long());
            }
            let line = std::mem::take(&mut self.buf);
            let r = self.line(&line[start..end], out);
            self.buf = line;
            r?;
            start = end + 1;
            from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.scanned > self.max_line {
            return Err(self.too_long());
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let rest = std::mem::take(&mut self.buf);
        self.scanned = 0;
        self.line(&rest, out)?;
        self.ended = true;
        Ok(())
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| EngineError::Protocol(format!("the answer is not JSON ({e})")))?;
        // JumpStart answers `[{"generated_text": …}]` or `{"generated_text": …}`.
        let v = match v {
            Value::Array(mut a) if !a.is_empty() => a.swap_remove(0),
            v => v,
        };
        self.value(&v, out)
    }

    fn is_done(&self) -> bool {
        false
    }

    /// JSON lines have no end marker: a body that ended cleanly is complete.
    fn is_complete(&self) -> bool {
        self.ended
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_are_rebuffered_across_parts_and_special_tokens_are_not_content() {
        let stream = b"data:{\"token\":{\"text\":\"Hel\",\"special\":false}}\n\ndata:{\"token\":{\"text\":\"lo\"}}\n{\"token\":{\"text\":\"</s>\",\"special\":true},\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":3}}";
        let mut d = JsonLines::new("/token/text", true, 1 << 20);
        let mut ev = Vec::new();
        for b in stream {
            d.on_data(&[*b], &mut |k| ev.push(k)).unwrap();
        }
        d.on_end(&mut |k| ev.push(k)).unwrap();
        let text: String = ev
            .iter()
            .filter_map(|k| match k {
                EventKind::Content(d) => d.text.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Hello");
        assert_eq!(d.finish_reason().as_deref(), Some("length"));
        assert!(d.is_complete());
        assert!(ev.contains(&EventKind::Usage(Usage::tokens(None, Some(3)))));
    }

    /// A long line arriving in small parts decodes whole; one over the cap fails, whether
    /// it is still arriving or ended by its newline.
    #[test]
    fn a_long_line_in_small_parts_decodes_and_one_over_the_cap_fails() {
        let text = "x".repeat(100_000);
        let line = format!("{{\"token\":{{\"text\":\"{text}\"}}}}\n");
        let mut d = JsonLines::new("/token/text", true, 1 << 20);
        let mut got = String::new();
        for part in line.as_bytes().chunks(16) {
            d.on_data(part, &mut |k| {
                if let EventKind::Content(c) = k {
                    got.push_str(c.text.as_deref().unwrap_or(""));
                }
            })
            .unwrap();
        }
        assert_eq!(got, text);

        let mut d = JsonLines::new("/token/text", true, 1000);
        let mut err = None;
        for part in line.as_bytes().chunks(16) {
            if let Err(e) = d.on_data(part, &mut |_| {}) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("a line over the cap fails").to_string();
        assert!(e.contains("longer than 1000 bytes"), "{e}");

        // The whole over-long line in one part, newline included.
        let mut d = JsonLines::new("/token/text", true, 1000);
        let e = d.on_data(line.as_bytes(), &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("longer than 1000 bytes"), "{e}");
        // Lines of the cap and below pass, several in one part.
        let mut d = JsonLines::new("/token/text", true, 1000);
        let mut n = 0;
        d.on_data(
            b"{\"token\":{\"text\":\"a\"}}\n{\"token\":{\"text\":\"b\"}}\n{\"tok",
            &mut |k| {
                n += usize::from(matches!(k, EventKind::Content(_)));
            },
        )
        .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn template_placeholders_are_filled() {
        let t = json!({"input": {"text": "{{prompt}}", "n": "{{max_tokens}}"}, "s": "{{stream}}", "note": "Q: {{prompt}}"});
        let mut r = EngineRequest::new(1, Prompt::Text("hi \"there\"".into()));
        r.max_tokens = Some(7);
        let b = fill_template(&t, &r).unwrap();
        assert_eq!(
            b,
            json!({"input": {"text": "hi \"there\"", "n": 7}, "s": true, "note": "Q: hi \"there\""})
        );

        // The system prompt apart, content as blocks, and members without values left out.
        let t = json!({"system": "{{system_blocks}}", "messages": "{{chat_blocks}}", "s": "{{system}}",
                       "cfg": {"maxTokens": "{{max_tokens}}", "temperature": "{{temperature}}"}});
        let r = EngineRequest::new(
            2,
            Prompt::Chat(vec![Message::text("system", "be brief"), Message::text("user", "hi")]),
        );
        assert_eq!(
            fill_template(&t, &r).unwrap(),
            json!({"system": [{"text": "be brief"}], "messages": [{"role": "user", "content": [{"text": "hi"}]}],
                   "s": "be brief", "cfg": {}})
        );
        let r = EngineRequest::new(3, Prompt::Text("hi".into()));
        assert_eq!(
            fill_template(&t, &r).unwrap(),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "cfg": {}})
        );
    }
}

//! What the protocols share: prompts as text, sampling fields, JSON errors.

use quetta_engine::{EngineError, Message, Prompt, Sampling};
use quetta_http::excerpt;
use serde_json::{json, Map, Value};

/// A prompt as one text: the text itself, or a conversation's messages joined by newlines
/// (for protocols that take raw text: llama.cpp's `/completion`, TGI, SGLang, Triton).
pub(crate) fn prompt_text(prompt: &Prompt, protocol: &str) -> Result<String, EngineError> {
    match prompt {
        Prompt::Text(t) => Ok(t.clone()),
        Prompt::Chat(msgs) => {
            Ok(msgs.iter().map(Message::text_content).collect::<Vec<_>>().join("\n"))
        }
        other => Err(cannot_send(protocol, other)),
    }
}

/// A conversation, or a text prompt as one user message.
pub(crate) fn prompt_messages<'a>(
    prompt: &'a Prompt,
    protocol: &str,
) -> Result<std::borrow::Cow<'a, [Message]>, EngineError> {
    match prompt {
        Prompt::Chat(m) => Ok(std::borrow::Cow::Borrowed(m)),
        Prompt::Text(t) => Ok(std::borrow::Cow::Owned(vec![Message::text("user", t.clone())])),
        other => Err(cannot_send(protocol, other)),
    }
}

pub(crate) fn cannot_send(protocol: &str, prompt: &Prompt) -> EngineError {
    let what = match prompt {
        Prompt::Chat(_) => "a conversation",
        Prompt::Text(_) => "a text prompt",
        Prompt::TokenIds(_) => "a prompt of token ids",
        _ => "this kind of input",
    };
    EngineError::Request(format!("the {protocol} protocol cannot send {what}"))
}

/// `temperature`, `top_p` and the seed under the protocol's names, where given.
pub(crate) fn put_sampling(b: &mut Map<String, Value>, s: &Sampling, seed_field: Option<&str>) {
    if let Some(t) = s.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if let Some(p) = s.top_p {
        b.insert("top_p".into(), json!(p));
    }
    if let (Some(seed), Some(f)) = (s.seed, seed_field) {
        b.insert(f.into(), json!(seed));
    }
}

/// A streamed event or a body that is not the JSON it should be.
pub(crate) fn bad_json(e: &serde_json::Error, data: &[u8]) -> EngineError {
    EngineError::Protocol(format!(
        "bad JSON in an event ({e}): {}",
        excerpt(&String::from_utf8_lossy(data), 200)
    ))
}

/// The words of a JSON error: a string, or an object's `message` (with its `type` or
/// `code` before it where there is one), else the JSON itself.
pub(crate) fn error_words(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            let msg = o.get("message").and_then(Value::as_str);
            let kind = o
                .get("type")
                .and_then(Value::as_str)
                .or_else(|| o.get("code").and_then(Value::as_str));
            match (kind, msg) {
                (Some(k), Some(m)) => format!("{k}: {m}"),
                (None, Some(m)) => m.to_owned(),
                _ => v.to_string(),
            }
        }
        other => other.to_string(),
    };
    excerpt(&s, 512)
}

/// Whether a value is a real error (not `null`, `false` or an empty string).
pub(crate) fn is_error(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false)) && v.as_str() != Some("")
}

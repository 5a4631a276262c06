//! Audio transcription (`/v1/audio/transcriptions`): the recording uploaded as
//! `multipart/form-data` (`file`, `model`, `stream`, the output cap as vLLM names it), the
//! text streamed back where the server streams. Two stream shapes are read: vLLM's
//! (`transcription.chunk` objects with `choices[].delta.content`, a usage chunk when
//! `stream_include_usage` is set, then `[DONE]`) and OpenAI's (`transcript.text.delta`
//! events, then `transcript.text.done` with the usage). A whole answer is `{"text", "usage"}`.
//! The first token is the first text; what a transcription adds to the measures is its
//! audio: seconds of audio per second of the run (docs/METRICS.md, Protocols).

use quetta_engine::{Delta, EngineError, EngineRequest, EventKind, Prompt, RequestKind, Usage};
use quetta_http::{BodyDecoder, EventDecoder, SseBody};
use quetta_openai::decode::ChunkDecoder;
use serde_json::{Map, Value};

use crate::common::{bad_json, cannot_send, error_words, is_error};
use crate::engine::{BodyContext, Encoded, Wire};

/// The transcription protocol.
#[derive(Debug, Default)]
pub struct Transcription;

/// A multipart/form-data body of text fields and one file.
fn multipart(boundary: &str, fields: &[(String, String)], file: (&str, &str, &[u8])) -> Vec<u8> {
    let mut b = Vec::with_capacity(file.2.len() + 512);
    let (name, mime, data) = file;
    b.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: {mime}\r\n\r\n", name.replace('"', "")).as_bytes());
    b.extend_from_slice(data);
    b.extend_from_slice(b"\r\n");
    for (k, v) in fields {
        b.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    b.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    b
}

/// A form field's text: a string as it is, anything else as JSON.
fn field(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Wire for Transcription {
    fn name(&self) -> &'static str {
        "openai-audio"
    }

    fn path(&self, _model: &str, _stream: bool) -> String {
        "/v1/audio/transcriptions".into()
    }

    fn kind(&self) -> RequestKind {
        RequestKind::Transcribe
    }

    fn body(
        &self,
        ctx: &BodyContext<'_>,
        req: &EngineRequest,
    ) -> Result<Map<String, Value>, EngineError> {
        let Prompt::Audio(a) = &req.prompt else {
            return Err(cannot_send(self.name(), &req.prompt));
        };
        let mut b = Map::new();
        b.insert("model".into(), Value::String(ctx.model.into()));
        b.insert("stream".into(), Value::Bool(req.stream));
        if req.stream {
            b.insert("stream_include_usage".into(), Value::Bool(true));
        }
        if let Some(n) = req.max_tokens {
            b.insert("max_completion_tokens".into(), n.into());
        }
        if let Some(p) = &a.prompt {
            b.insert("prompt".into(), Value::String(p.clone()));
        }
        if let Some(t) = req.params.sampling.temperature {
            b.insert("temperature".into(), t.into());
        }
        Ok(b)
    }

    fn encode(&self, ctx: &BodyContext<'_>, req: &EngineRequest) -> Result<Encoded, EngineError> {
        let Prompt::Audio(a) = &req.prompt else {
            return Err(cannot_send(self.name(), &req.prompt));
        };
        let mut fields = self.body(ctx, req)?;
        for (k, v) in &req.params.extra_body {
            fields.insert(k.clone(), v.clone());
        }
        let fields: Vec<(String, String)> =
            fields.iter().map(|(k, v)| (k.clone(), field(v))).collect();
        let boundary =
            format!("quetta-{:016x}-{}", 0x5175_6574_7461_u64 ^ req.request_id, req.request_id);
        let body = multipart(&boundary, &fields, (&a.file_name, &a.mime, &a.data));
        Ok(Encoded { body, content_type: format!("multipart/form-data; boundary={boundary}") })
    }

    fn decoder(&self, req: &EngineRequest, max_event_bytes: usize) -> Box<dyn BodyDecoder> {
        Box::new(SseBody::new(max_event_bytes, TranscriptDecoder::new(req.capture_text)))
    }
}

/// Reads both stream shapes and the whole answer.
#[derive(Debug, Default)]
pub struct TranscriptDecoder {
    chunk: ChunkDecoder,
    capture: bool,
    done: bool,
}

impl TranscriptDecoder {
    pub fn new(capture: bool) -> Self {
        Self { chunk: ChunkDecoder::new(capture), capture, done: false }
    }

    /// OpenAI's usage (`input_tokens`, `output_tokens`) or vLLM's (`prompt_tokens`, ...).
    fn usage(u: &Value) -> Usage {
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        Usage::tokens(
            n("input_tokens").or(n("prompt_tokens")),
            n("output_tokens").or(n("completion_tokens")),
        )
    }
}

impl EventDecoder for TranscriptDecoder {
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if !data.starts_with(b"{\"type\":\"transcript.") && !event_type.starts_with(b"transcript.")
        {
            return self.chunk.on_event(event_type, data, &mut |k| out(k));
        }
        let v: Value = serde_json::from_slice(data).map_err(|e| bad_json(&e, data))?;
        match v.get("type").and_then(Value::as_str) {
            Some("transcript.text.delta") => {
                if let Some(t) = v.get("delta").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    out(EventKind::Content(Delta::of(t, self.capture)));
                }
            }
            Some("transcript.text.done") => {
                if let Some(u) = v.get("usage") {
                    out(EventKind::Usage(Self::usage(u)));
                }
                self.done = true;
            }
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
        if let Some(e) = v.get("error").filter(|e| is_error(e)) {
            return Err(EngineError::ServerError(error_words(e)));
        }
        let text = v
            .get("text")
            .and_then(Value::as_str)
            .ok_or_else(|| EngineError::Protocol("a transcription answer without `text`".into()))?;
        if !text.is_empty() {
            out(EventKind::Content(Delta::of(text, self.capture)));
        }
        if let Some(u) = v.get("usage") {
            out(EventKind::Usage(Self::usage(u)));
        }
        self.done = true;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done || self.chunk.done
    }

    fn finish_reason(&self) -> Option<String> {
        self.chunk.finish_reason.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use quetta_engine::AudioInput;

    use super::*;

    #[test]
    fn the_recording_goes_as_multipart_with_the_fields() {
        let audio = AudioInput {
            data: Arc::from(&b"RIFF....WAVE"[..]),
            file_name: "a.wav".into(),
            mime: "audio/wav".into(),
            seconds: 1.5,
            prompt: None,
        };
        let mut req = EngineRequest::new(3, Prompt::Audio(audio));
        req.max_tokens = Some(32);
        let ctx = BodyContext {
            model: "whisper",
            include_usage: true,
            session_body_field: None,
            max_tokens_field: "max_tokens",
        };
        let e = Transcription.encode(&ctx, &req).unwrap();
        let boundary = e.content_type.strip_prefix("multipart/form-data; boundary=").unwrap();
        let text = String::from_utf8_lossy(&e.body);
        assert!(text.starts_with(&format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF....WAVE\r\n")), "{text}");
        for (k, v) in [
            ("model", "whisper"),
            ("stream", "true"),
            ("max_completion_tokens", "32"),
            ("stream_include_usage", "true"),
        ] {
            assert!(text.contains(&format!("name=\"{k}\"\r\n\r\n{v}\r\n")), "{k}: {text}");
        }
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }

    #[test]
    fn both_stream_shapes_and_the_whole_answer() {
        let mut d = TranscriptDecoder::new(true);
        let mut ev = Vec::new();
        for e in [
            r#"{"type":"transcript.text.delta","delta":"Hello"}"#,
            r#"{"type":"transcript.text.delta","delta":" there"}"#,
            r#"{"type":"transcript.text.done","text":"Hello there","usage":{"type":"tokens","input_tokens":22,"output_tokens":3}}"#,
        ] {
            d.on_event(b"", e.as_bytes(), &mut |k| ev.push(k)).unwrap();
        }
        assert!(d.is_done());
        assert_eq!(ev.iter().filter(|e| e.is_token()).count(), 2);
        assert_eq!(ev.last(), Some(&EventKind::Usage(Usage::tokens(Some(22), Some(3)))));
        let mut d = TranscriptDecoder::new(false);
        let mut n = 0;
        for e in [
            r#"{"id":"trsc-1","object":"transcription.chunk","choices":[{"delta":{"content":" Hi"}}]}"#,
            r#"{"id":"trsc-1","object":"transcription.chunk","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":1}}"#,
            "[DONE]",
        ] {
            d.on_event(b"", e.as_bytes(), &mut |k| n += usize::from(k.is_token())).unwrap();
        }
        assert!(d.is_done() && n == 1);
        let mut ev = Vec::new();
        TranscriptDecoder::new(true)
            .decode_full(br#"{"text":"Hello.","usage":{"type":"tokens","input_tokens":5,"output_tokens":2}}"#, &mut |k| ev.push(k))
            .unwrap();
        assert_eq!(ev.len(), 2);
    }
}

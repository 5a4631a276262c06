//! Bedrock's answers, decoded.
//!
//! - [`ConverseEvents`]: `ConverseStream`'s events (`messageStart`, `contentBlockStart`,
//!   `contentBlockDelta` with `text`, `reasoningContent` or `toolUse`, `contentBlockStop`,
//!   `messageStop` with the stop reason, `metadata` with usage and the service's
//!   `latencyMs`, the last event) and `Converse`'s whole answer.
//! - [`InvokeChunks`]: `InvokeModelWithResponseStream`'s `chunk` events, each
//!   `{"bytes": base64}` of one JSON object in the model family's own shape (the
//!   [`Family`] says where its text and stop reason are); the last carries
//!   `amazon-bedrock-invocationMetrics` (token counts, `firstByteLatency`,
//!   `invocationLatency`). And `InvokeModel`'s whole answer, whose counts and latency are
//!   in `x-amzn-bedrock-*` headers ([`WholeInvoke`]).

use base64::Engine as _;
use quetta_engine::{Delta, EngineError, EventKind, ServerTiming, Usage};
use quetta_http::{BodyDecoder, EventDecoder};
use serde_json::Value;

use super::Family;

fn json(what: &str, b: &[u8]) -> Result<Value, EngineError> {
    serde_json::from_slice(b).map_err(|e| {
        EngineError::Protocol(format!(
            "{what} is not JSON ({e}): {}",
            quetta_http::excerpt(&String::from_utf8_lossy(b), 200)
        ))
    })
}

fn text_event(v: Option<&Value>, capture: bool) -> Option<Delta> {
    v.and_then(Value::as_str).filter(|t| !t.is_empty()).map(|t| Delta::of(t, capture))
}

fn ms(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

/// Usage and the service's latency from Converse's `usage` and `metrics` objects.
fn converse_usage(v: &Value, out: &mut dyn FnMut(EventKind)) {
    let n = |k: &str| v.pointer(&format!("/usage/{k}")).and_then(Value::as_u64);
    if v.get("usage").is_some() {
        out(EventKind::Usage(Usage::tokens(n("inputTokens"), n("outputTokens"))));
    }
    if let Some(l) = ms(v.pointer("/metrics/latencyMs")) {
        out(EventKind::ServerTiming(ServerTiming::latency(None, Some(l))));
    }
}

/// `ConverseStream`'s events and `Converse`'s answer.
#[derive(Debug)]
pub struct ConverseEvents {
    capture: bool,
    finish: Option<String>,
    done: bool,
}

impl ConverseEvents {
    pub fn new(capture: bool) -> Self {
        Self { capture, finish: None, done: false }
    }

    fn delta(&self, d: &Value, out: &mut dyn FnMut(EventKind)) {
        if let Some(x) = text_event(d.get("text"), self.capture) {
            out(EventKind::Content(x));
        } else if let Some(x) = text_event(d.pointer("/reasoningContent/text"), self.capture) {
            out(EventKind::Reasoning(x));
        } else if let Some(x) = text_event(d.pointer("/toolUse/input"), self.capture) {
            out(EventKind::ToolCall(x));
        } else {
            out(EventKind::Empty);
        }
    }
}

impl EventDecoder for ConverseEvents {
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        match event_type {
            b"contentBlockDelta" => {
                let v = json("a contentBlockDelta event", data)?;
                self.delta(v.get("delta").unwrap_or(&Value::Null), out);
            }
            b"messageStart" | b"contentBlockStart" | b"contentBlockStop" => out(EventKind::Empty),
            b"messageStop" => {
                let v = json("a messageStop event", data)?;
                self.finish = Some(
                    v.get("stopReason").and_then(Value::as_str).unwrap_or("unknown").to_owned(),
                );
            }
            b"metadata" => {
                converse_usage(&json("a metadata event", data)?, out);
                self.done = true;
            }
            // Events added later are skipped, as the SDKs do.
            _ => {}
        }
        Ok(())
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v = json("Converse's answer", body)?;
        let blocks = v.pointer("/output/message/content").and_then(Value::as_array);
        let mut any = false;
        for b in blocks.into_iter().flatten() {
            if let Some(x) = text_event(b.get("text"), self.capture) {
                out(EventKind::Content(x));
                any = true;
            } else if let Some(x) =
                text_event(b.pointer("/reasoningContent/reasoningText/text"), self.capture)
            {
                out(EventKind::Reasoning(x));
                any = true;
            }
        }
        if !any {
            out(EventKind::Empty);
        }
        self.finish = v.get("stopReason").and_then(Value::as_str).map(str::to_owned);
        converse_usage(&v, out);
        self.done = true;
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish.clone()
    }
}

/// `InvokeModelWithResponseStream`'s chunks, in a model family's shape.
#[derive(Debug)]
pub struct InvokeChunks {
    family: Family,
    capture: bool,
    finish: Option<String>,
    done: bool,
}

impl InvokeChunks {
    pub fn new(family: Family, capture: bool) -> Self {
        Self { family, capture, finish: None, done: false }
    }

    /// One JSON object of the model's: its text, reasoning, stop reason and, in the last,
    /// Bedrock's invocation metrics.
    fn object(&mut self, v: &Value, out: &mut dyn FnMut(EventKind)) {
        let f = &self.family;
        if let Some(x) = text_event(v.pointer(&f.chunk_text), self.capture) {
            out(EventKind::Content(x));
        } else if let Some(x) =
            f.chunk_reasoning.as_deref().and_then(|p| text_event(v.pointer(p), self.capture))
        {
            out(EventKind::Reasoning(x));
        } else {
            out(EventKind::Empty);
        }
        if let Some(s) = f.chunk_stop.iter().find_map(|p| v.pointer(p).and_then(Value::as_str)) {
            self.finish = Some(s.to_owned());
        }
        if let Some(m) = v.get("amazon-bedrock-invocationMetrics") {
            let n = |k: &str| m.get(k).and_then(Value::as_u64);
            out(EventKind::Usage(Usage::tokens(n("inputTokenCount"), n("outputTokenCount"))));
            out(EventKind::ServerTiming(ServerTiming::latency(
                ms(m.get("firstByteLatency")),
                ms(m.get("invocationLatency")),
            )));
            self.finish.get_or_insert_with(|| "stop".into());
            self.done = true;
        }
    }
}

impl EventDecoder for InvokeChunks {
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        if event_type != b"chunk" {
            return Ok(());
        }
        let v = json("a chunk event", data)?;
        let b64 = v
            .get("bytes")
            .and_then(Value::as_str)
            .ok_or_else(|| EngineError::Protocol("a chunk event without its \"bytes\"".into()))?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| {
            EngineError::Protocol(format!("a chunk's \"bytes\" are not base64 ({e})"))
        })?;
        let v = json("a chunk's bytes", &bytes)?;
        self.object(&v, out);
        Ok(())
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        let v = json("the model's answer", body)?;
        let f = &self.family;
        match text_event(v.pointer(&f.whole_text), self.capture) {
            Some(x) => out(EventKind::Content(x)),
            None => out(EventKind::Empty),
        }
        self.finish = v.pointer(&f.whole_stop).and_then(Value::as_str).map(str::to_owned);
        self.done = true;
        Ok(())
    }

    /// The stream may end without metrics (a model that sends none): its end completes it.
    fn complete_at_body_end(&self) -> bool {
        true
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish_reason(&self) -> Option<String> {
        self.finish.clone()
    }
}

/// `InvokeModel`'s whole answer: the family's body, with token counts and the service's
/// latency in `x-amzn-bedrock-input-token-count`, `-output-token-count` and
/// `-invocation-latency`.
#[derive(Debug)]
pub struct WholeInvoke {
    inner: InvokeChunks,
    usage: Option<Usage>,
    latency_ms: Option<f64>,
}

impl WholeInvoke {
    pub fn new(inner: InvokeChunks) -> Self {
        Self { inner, usage: None, latency_ms: None }
    }
}

impl BodyDecoder for WholeInvoke {
    fn on_headers(&mut self, h: &http::HeaderMap) -> Result<(), EngineError> {
        let n =
            |k: &str| h.get(k).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
        let (i, o): (Option<u64>, Option<u64>) =
            (n("x-amzn-bedrock-input-token-count"), n("x-amzn-bedrock-output-token-count"));
        self.usage = (i.is_some() || o.is_some()).then(|| Usage::tokens(i, o));
        self.latency_ms = n("x-amzn-bedrock-invocation-latency").map(|x: u64| x as f64);
        Ok(())
    }

    fn on_data(&mut self, _: &[u8], _: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        Err(EngineError::Protocol("InvokeModel's answer is read whole".into()))
    }

    fn on_end(&mut self, _: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        Ok(())
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.inner.decode_full(body, out)?;
        if let Some(u) = self.usage {
            out(EventKind::Usage(u));
        }
        if let Some(l) = self.latency_ms {
            out(EventKind::ServerTiming(ServerTiming::latency(None, Some(l))));
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    fn finish_reason(&self) -> Option<String> {
        self.inner.finish_reason()
    }
}

//! The AWS binary event stream of `InvokeEndpointWithResponseStream`: frames with a prelude
//! CRC and a message CRC (checked by `aws-smithy-eventstream`), each an event
//! (`PayloadPart`: the next bytes of the container's own answer) or an exception
//! (`ModelStreamError`, `InternalStreamFailure`). Frames are re-assembled across body
//! chunks; payload parts are handed to the container's framing decoder, since part
//! boundaries follow neither tokens nor lines.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::BytesMut;
use quetta_engine::{EngineError, EventKind};
use quetta_http::BodyDecoder;

/// Decodes event-stream frames and feeds their payload parts to `inner`.
pub struct EventStreamBody {
    frames: MessageFrameDecoder,
    buf: BytesMut,
    inner: Box<dyn BodyDecoder>,
    /// Payload parts seen.
    pub parts: u64,
}

impl std::fmt::Debug for EventStreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStreamBody").field("parts", &self.parts).finish_non_exhaustive()
    }
}

impl EventStreamBody {
    pub fn new(inner: Box<dyn BodyDecoder>) -> Self {
        Self { frames: MessageFrameDecoder::new(), buf: BytesMut::new(), inner, parts: 0 }
    }
}

fn header<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.headers().iter().find(|h| h.name().as_str() == name).and_then(|h| match h.value() {
        HeaderValue::String(s) => Some(s.as_str()),
        _ => None,
    })
}

/// The message of an exception payload (`{"Message": …}`, `{"message": …}`), else the text.
fn exception_message(m: &Message) -> String {
    let p = m.payload();
    let v: Option<serde_json::Value> = serde_json::from_slice(p).ok();
    let msg = v
        .as_ref()
        .and_then(|v| v.get("Message").or_else(|| v.get("message")))
        .and_then(|x| x.as_str())
        .map_or_else(|| String::from_utf8_lossy(p).into_owned(), str::to_owned);
    let code = v.as_ref().and_then(|v| v.get("ErrorCode")).and_then(|x| x.as_str());
    match code {
        Some(c) => format!("{msg} (ErrorCode {c})"),
        None => msg,
    }
}

impl EventStreamBody {
    fn message(&mut self, m: &Message, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        match header(m, ":message-type") {
            Some("event") => match header(m, ":event-type") {
                Some("PayloadPart") => {
                    self.parts += 1;
                    self.inner.on_data(m.payload(), out)
                }
                // Unknown events are skipped, as the SDKs do.
                _ => Ok(()),
            },
            Some("exception") => {
                let msg = exception_message(m);
                Err(match header(m, ":exception-type") {
                    Some("ModelStreamError") => {
                        EngineError::Model(format!("ModelStreamError: {msg}"))
                    }
                    Some("InternalStreamFailure") => {
                        EngineError::StreamFailure(format!("InternalStreamFailure: {msg}"))
                    }
                    Some(other) => EngineError::ServerError(format!("{other}: {msg}")),
                    None => EngineError::ServerError(msg),
                })
            }
            Some("error") => Err(EngineError::StreamFailure(format!(
                "{}: {}",
                header(m, ":error-code").unwrap_or("error"),
                header(m, ":error-message").unwrap_or("")
            ))),
            other => Err(EngineError::Protocol(format!(
                "event-stream message of unknown type {other:?}"
            ))),
        }
    }
}

impl BodyDecoder for EventStreamBody {
    fn on_data(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        self.buf.extend_from_slice(data);
        loop {
            match self.frames.decode_frame(&mut self.buf) {
                Ok(DecodedFrame::Complete(m)) => self.message(&m, out)?,
                Ok(DecodedFrame::Incomplete) => return Ok(()),
                Err(e) => {
                    return Err(EngineError::Protocol(format!("bad event-stream frame: {e}")))
                }
            }
            if self.inner.is_done() {
                return Ok(());
            }
        }
    }

    fn on_end(&mut self, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        if !self.buf.is_empty() {
            return Err(EngineError::Protocol(format!(
                "the body ended inside an event-stream frame ({} bytes left)",
                self.buf.len()
            )));
        }
        self.inner.on_end(out)
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.inner.decode_full(body, out)
    }

    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    fn is_complete(&self) -> bool {
        self.inner.is_complete()
    }

    fn finish_reason(&self) -> Option<String> {
        self.inner.finish_reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::Header;

    fn part(bytes: &[u8]) -> Vec<u8> {
        let m = Message::new(bytes.to_vec())
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
            .add_header(Header::new(":event-type", HeaderValue::String("PayloadPart".into())));
        let mut out = Vec::new();
        write_message_to(&m, &mut out).unwrap();
        out
    }

    #[test]
    fn frames_split_at_every_byte_and_a_bad_crc() {
        let sse = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
        // the SSE text split across three payload parts at arbitrary points
        let mut wire = part(&sse[..7]);
        wire.extend(part(&sse[7..30]));
        wire.extend(part(&sse[30..]));
        let inner =
            quetta_http::SseBody::new(1 << 20, quetta_openai::decode::ChunkDecoder::new(true));
        let mut d = EventStreamBody::new(Box::new(inner));
        let mut ev = Vec::new();
        for b in &wire {
            d.on_data(&[*b], &mut |k| ev.push(k)).unwrap();
        }
        assert!(d.is_done());
        assert_eq!(d.parts, 3);
        assert!(ev
            .iter()
            .any(|k| matches!(k, EventKind::Content(x) if x.text.as_deref() == Some("hi"))));

        let mut bad = part(b"data: x\n\n");
        let n = bad.len();
        bad[n - 6] ^= 0x55; // a payload byte: the message CRC no longer matches
        let inner =
            quetta_http::SseBody::new(1 << 20, quetta_openai::decode::ChunkDecoder::new(true));
        let mut d = EventStreamBody::new(Box::new(inner));
        let e = d.on_data(&bad, &mut |_| {}).unwrap_err();
        assert_eq!(e.kind(), "protocol", "{e}");
        assert!(e.to_string().contains("bad event-stream frame"), "{e}");
    }

    #[test]
    fn an_internal_stream_failure_is_a_stream_failure() {
        let m = Message::new(br#"{"Message":"the stream broke"}"#.to_vec())
            .add_header(Header::new(":message-type", HeaderValue::String("exception".into())))
            .add_header(Header::new(
                ":exception-type",
                HeaderValue::String("InternalStreamFailure".into()),
            ));
        let mut wire = part(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        write_message_to(&m, &mut wire).unwrap();
        let inner =
            quetta_http::SseBody::new(1 << 20, quetta_openai::decode::ChunkDecoder::new(true));
        let mut d = EventStreamBody::new(Box::new(inner));
        let mut ev = Vec::new();
        let e = d.on_data(&wire, &mut |k| ev.push(k)).unwrap_err();
        assert_eq!(e.kind(), "stream_failure", "{e}");
        assert!(e.to_string().contains("the stream broke"), "{e}");
        assert_eq!(ev.iter().filter(|k| k.is_token()).count(), 1);
    }
}

//! The AWS binary event stream, one decoder for every AWS adapter: frames with a prelude
//! CRC and a message CRC (checked by `aws-smithy-eventstream`), each an event or an
//! exception. Frames are re-assembled across body chunks. Events go one of two ways:
//!
//! - [`Events::Parts`]: SageMaker's `PayloadPart`s, the next bytes of the container's own
//!   answer, handed to the container's framing decoder (part boundaries follow neither
//!   tokens nor lines);
//! - [`Events::Typed`]: each event whole, by its `:event-type`, to an [`EventDecoder`]
//!   (Bedrock's `contentBlockDelta`, `metadata`, `chunk`…), as SSE events are.
//!
//! Exceptions are typed by their `:exception-type`, in SageMaker's spelling
//! (`ModelStreamError`, `InternalStreamFailure`) and Bedrock's (`throttlingException`,
//! `modelStreamErrorException`, `validationException`, `serviceUnavailableException`,
//! `internalServerException`, `modelTimeoutException`).

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::BytesMut;
use quetta_engine::{EngineError, EventKind};
use quetta_http::{BodyDecoder, EventDecoder};

/// The content type of an AWS event stream.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";
/// A frame's prelude: total length, headers length, CRC-32 of the eight bytes before.
const PRELUDE: usize = 12;
/// Bytes a frame carries beyond its payload: the prelude, the message CRC and room for
/// the headers (`:event-type`, `:content-type`, `:message-type` take about 100).
const FRAME_OVERHEAD: usize = 64 << 10;

/// Where the events of a stream go.
#[non_exhaustive]
pub enum Events {
    /// Payload parts, re-buffered into the inner decoder's own framing.
    Parts(Box<dyn BodyDecoder>),
    /// Whole events, each by its `:event-type`.
    Typed(Box<dyn EventDecoder>),
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Parts(_) => "Parts",
            Self::Typed(_) => "Typed",
        })
    }
}

/// Decodes event-stream frames and feeds their events to the adapter's decoder.
pub struct EventStreamBody {
    frames: MessageFrameDecoder,
    buf: BytesMut,
    inner: Events,
    /// The largest frame accepted (a payload part of at most the event cap, plus headers).
    max_frame: usize,
    /// Whether the prelude of the frame now in `buf` has been checked.
    prelude_checked: bool,
    /// Payload parts seen.
    pub parts: u64,
}

impl std::fmt::Debug for EventStreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStreamBody").field("parts", &self.parts).finish_non_exhaustive()
    }
}

impl EventStreamBody {
    /// Payload parts for `inner`; frames of at most `max_part_bytes` of payload (plus
    /// headers) are accepted.
    pub fn new(inner: Box<dyn BodyDecoder>, max_part_bytes: usize) -> Self {
        Self::of(Events::Parts(inner), max_part_bytes)
    }

    /// Whole events for `events`.
    pub fn typed(events: Box<dyn EventDecoder>, max_event_bytes: usize) -> Self {
        Self::of(Events::Typed(events), max_event_bytes)
    }

    fn of(inner: Events, max_part_bytes: usize) -> Self {
        Self {
            frames: MessageFrameDecoder::new(),
            buf: BytesMut::new(),
            inner,
            max_frame: max_part_bytes.saturating_add(FRAME_OVERHEAD),
            prelude_checked: false,
            parts: 0,
        }
    }

    /// Checks the prelude of the frame at the front of `buf` as soon as its 12 bytes are
    /// there: its CRC, and a length no larger than the cap. A body that is not an event
    /// stream (a JSON answer, an HTML page) fails here, at its first 12 bytes, instead of
    /// being buffered whole as one frame of the length its first four bytes happen to spell.
    fn check_prelude(&mut self) -> Result<(), EngineError> {
        if self.prelude_checked || self.buf.len() < PRELUDE {
            return Ok(());
        }
        let p = &self.buf[..PRELUDE];
        let total = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let crc = u32::from_be_bytes([p[8], p[9], p[10], p[11]]);
        if crc32fast::hash(&p[..8]) != crc {
            return Err(EngineError::Protocol(format!(
                "the body is not an AWS event stream (a frame's prelude checksum does not \
                 match); it begins: {}",
                quetta_http::excerpt(&String::from_utf8_lossy(&self.buf), 200)
            )));
        }
        if usize::try_from(total).map_or(true, |t| t > self.max_frame || t < PRELUDE + 4) {
            return Err(EngineError::Protocol(format!(
                "an event-stream frame of {total} bytes (at most {} are accepted, at least 16 \
                 make a frame)",
                self.max_frame
            )));
        }
        self.prelude_checked = true;
        Ok(())
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

/// The typed error of an exception message, in SageMaker's and Bedrock's spellings.
pub fn exception(kind: Option<&str>, msg: &str) -> EngineError {
    let Some(k) = kind else { return EngineError::ServerError(msg.to_owned()) };
    let words = format!("{k}: {msg}");
    let mut lower = k.to_owned();
    lower[..1.min(k.len())].make_ascii_lowercase();
    match lower.trim_end_matches("Exception") {
        "modelStreamError" | "modelError" => EngineError::Model(words),
        "internalStreamFailure" => EngineError::StreamFailure(words),
        "throttling" | "serviceQuotaExceeded" => EngineError::Throttled(words),
        "validation" => EngineError::Validation(words),
        "accessDenied" => EngineError::Auth(words),
        "modelTimeout" => EngineError::Model(words),
        _ => EngineError::ServerError(words),
    }
}

impl EventStreamBody {
    fn message(&mut self, m: &Message, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        match header(m, ":message-type") {
            Some("event") => match (&mut self.inner, header(m, ":event-type")) {
                (Events::Parts(inner), Some("PayloadPart")) => {
                    self.parts += 1;
                    inner.on_data(m.payload(), out)
                }
                // Unknown events are skipped, as the SDKs do.
                (Events::Parts(_), _) | (Events::Typed(_), None) => Ok(()),
                (Events::Typed(d), Some(t)) => {
                    self.parts += 1;
                    d.on_event(t.as_bytes(), m.payload(), out)
                }
            },
            Some("exception") => {
                Err(exception(header(m, ":exception-type"), &exception_message(m)))
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
    /// A streamed answer of another content type (a proxy's JSON error page with status
    /// 200, a container that ignored the streaming call) fails at once, saying what it is.
    fn on_headers(&mut self, headers: &http::HeaderMap) -> Result<(), EngineError> {
        let ct =
            headers.get(http::header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()));
        match ct {
            Some(ct) if !ct.trim().to_ascii_lowercase().starts_with(CONTENT_TYPE) => {
                Err(EngineError::Protocol(format!(
                    "the streamed answer has content type {ct:?}, not an AWS event stream \
                     ({CONTENT_TYPE})"
                )))
            }
            _ => Ok(()),
        }
    }

    fn on_data(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        self.buf.extend_from_slice(data);
        loop {
            self.check_prelude()?;
            match self.frames.decode_frame(&mut self.buf) {
                Ok(DecodedFrame::Complete(m)) => {
                    self.prelude_checked = false;
                    self.message(&m, out)?;
                }
                Ok(DecodedFrame::Incomplete) => return Ok(()),
                Err(e) => {
                    return Err(EngineError::Protocol(format!("bad event-stream frame: {e}")))
                }
            }
            if self.is_done() {
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
        match &mut self.inner {
            Events::Parts(inner) => inner.on_end(out),
            Events::Typed(_) => Ok(()),
        }
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        match &mut self.inner {
            Events::Parts(inner) => inner.decode_full(body, out),
            Events::Typed(d) => d.decode_full(body, out),
        }
    }

    fn is_done(&self) -> bool {
        match &self.inner {
            Events::Parts(inner) => inner.is_done(),
            Events::Typed(d) => d.is_done(),
        }
    }

    fn is_complete(&self) -> bool {
        match &self.inner {
            Events::Parts(inner) => inner.is_complete(),
            Events::Typed(d) => {
                d.is_done() || d.finish_reason().is_some() || d.complete_at_body_end()
            }
        }
    }

    fn finish_reason(&self) -> Option<String> {
        match &self.inner {
            Events::Parts(inner) => inner.finish_reason(),
            Events::Typed(d) => d.finish_reason(),
        }
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
        let mut d = EventStreamBody::new(Box::new(inner), 1 << 20);
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
        let mut d = EventStreamBody::new(Box::new(inner), 1 << 20);
        let e = d.on_data(&bad, &mut |_| {}).unwrap_err();
        assert_eq!(e.kind(), "protocol", "{e}");
        assert!(e.to_string().contains("bad event-stream frame"), "{e}");
    }

    fn openai_inner() -> Box<dyn BodyDecoder> {
        Box::new(quetta_http::SseBody::new(1 << 20, quetta_openai::decode::ChunkDecoder::new(true)))
    }

    /// A body that is no event stream fails at its first 12 bytes, not after buffering
    /// the gigabyte its first four bytes spell; a frame over the cap fails at its prelude;
    /// a content type other than the event stream's fails at the headers.
    #[test]
    fn a_body_that_is_not_an_event_stream_fails_at_once() {
        let mut d = EventStreamBody::new(openai_inner(), 1 << 20);
        let e = d.on_data(br#"{"message":"Received server error (500) from primary"#, &mut |_| {});
        let e = e.unwrap_err().to_string();
        assert!(e.contains("not an AWS event stream") && e.contains("Received server"), "{e}");
        assert!(d.buf.len() < 100);

        // A true prelude of a 2 MiB frame, over a 1 MiB cap: refused before its payload.
        let mut big = part(&vec![b'x'; 2 << 20]);
        big.truncate(64);
        let mut d = EventStreamBody::new(openai_inner(), 1 << 20);
        let e = d.on_data(&big, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("frame of 2097") && e.contains("at most 1114112"), "{e}");

        // The second frame's prelude is checked too, even split byte by byte.
        let mut wire = part(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        wire.extend_from_slice(b"<html><body>502 Bad Gateway</body></html>");
        let mut d = EventStreamBody::new(openai_inner(), 1 << 20);
        let mut tokens = 0;
        let mut err = None;
        for b in &wire {
            if let Err(e) = d.on_data(&[*b], &mut |k| tokens += usize::from(k.is_token())) {
                err = Some(e.to_string());
                break;
            }
        }
        assert_eq!(tokens, 1);
        assert!(
            err.is_some_and(|e| e.contains("not an AWS event stream") && e.contains("<html><body"))
        );

        let mut h = http::HeaderMap::new();
        h.insert("content-type", "application/json".parse().unwrap());
        let e = d.on_headers(&h).unwrap_err().to_string();
        assert!(e.contains("\"application/json\", not an AWS event stream"), "{e}");
        h.insert("content-type", CONTENT_TYPE.parse().unwrap());
        d.on_headers(&h).unwrap();
        d.on_headers(&http::HeaderMap::new()).unwrap();
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
        let mut d = EventStreamBody::new(Box::new(inner), 1 << 20);
        let mut ev = Vec::new();
        let e = d.on_data(&wire, &mut |k| ev.push(k)).unwrap_err();
        assert_eq!(e.kind(), "stream_failure", "{e}");
        assert!(e.to_string().contains("the stream broke"), "{e}");
        assert_eq!(ev.iter().filter(|k| k.is_token()).count(), 1);
    }
}

//! Targets for what servers send: SSE streams and their chunks, the AWS event stream and
//! JSON lines, Gemini streams and bodies, `/v1/models`.

use quetta_aws::bedrock::decode::{ConverseEvents, InvokeChunks, WholeInvoke};
use quetta_aws::bedrock::FAMILIES;
use quetta_aws::eventstream::EventStreamBody;
use quetta_aws::Family;
use quetta_aws::JsonLines;
use quetta_http::{BodyDecoder, EventDecoder, SseBody};
use quetta_openai::decode::ChunkDecoder;
use quetta_vertex::GeminiDecoder;

use crate::stride_and_body;

/// The event cap the targets run with (small, so oversized events are reached).
pub(crate) const MAX_EVENT: usize = 4096;

/// How a body ended: the error's kind and its message (which may quote however much of the
/// body had arrived, so only the kind is compared between splits).
type End = Option<(String, String)>;

fn ended(e: &quetta_engine::EngineError) -> (String, String) {
    (e.kind().to_owned(), e.to_string())
}

/// Feed `frames` to a body decoder and end it; the events (as text) and how it ended.
fn run_body(d: &mut dyn BodyDecoder, frames: &[&[u8]]) -> (Vec<String>, End) {
    let mut out = Vec::new();
    for f in frames {
        if let Err(e) = d.on_data(f, &mut |k| out.push(format!("{k:?}"))) {
            return (out, Some(ended(&e)));
        }
        if d.is_done() {
            return (out, None);
        }
    }
    let end = d.on_end(&mut |k| out.push(format!("{k:?}"))).err().map(|e| ended(&e));
    (out, end)
}

/// The same body whole and split every `stride` bytes gives the same events and end,
/// except that a size cap (an over-long event, line or frame) may be met at another point.
pub(crate) fn split_invariant(make: impl Fn() -> Box<dyn BodyDecoder>, data: &[u8]) {
    let Some((stride, body)) = stride_and_body(data) else { return };
    let whole = run_body(make().as_mut(), &[body]);
    let frames: Vec<&[u8]> = body.chunks(stride).collect();
    let split = run_body(make().as_mut(), &frames);
    let capped = |e: &End| {
        e.as_ref().is_some_and(|(_, m)| {
            ["larger than", "longer than", "at most"].iter().any(|w| m.contains(w))
        })
    };
    if !capped(&whole.1) && !capped(&split.1) {
        let kind = |e: &End| e.as_ref().map(|(k, _)| k.clone());
        assert_eq!(whole.0, split.0, "split every {stride} bytes");
        assert_eq!(
            kind(&whole.1),
            kind(&split.1),
            "split every {stride} bytes: {whole:?} {split:?}"
        );
    }
}

/// The SSE parser and the OpenAI chunk decoder on a stream split at arbitrary points: the
/// same events however the bytes are split.
pub fn sse(data: &[u8]) {
    split_invariant(|| Box::new(SseBody::new(MAX_EVENT, ChunkDecoder::new(true))), data);
}

/// One chunk: wherever the scanner answers, serde gives the same events; a whole
/// non-streamed body decodes or is refused.
pub fn chunk(data: &[u8]) {
    quetta_openai::decode::check_scanner_against_serde(data);
    let mut d = ChunkDecoder::new(true);
    let _ = d.decode_full(data, &mut |_| {});
}

/// The AWS event stream (with an OpenAI SSE payload and with JSON lines inside), and JSON
/// lines alone, split at arbitrary points; JumpStart's whole-body answer.
pub fn sagemaker(data: &[u8]) {
    split_invariant(
        || {
            let inner = SseBody::new(MAX_EVENT, ChunkDecoder::new(true));
            Box::new(EventStreamBody::new(Box::new(inner), MAX_EVENT))
        },
        data,
    );
    split_invariant(
        || {
            let inner = JsonLines::new("/token/text", true, MAX_EVENT);
            Box::new(EventStreamBody::new(Box::new(inner), MAX_EVENT))
        },
        data,
    );
    split_invariant(|| Box::new(JsonLines::new("/token/text", true, MAX_EVENT)), data);
    let body = data.get(1..).unwrap_or_default();
    let _ = JsonLines::new("/generated_text", true, MAX_EVENT).decode_full(body, &mut |_| {});
}

/// Bedrock's event streams split at arbitrary points: Converse's events, or Invoke's chunks
/// in one model family's shape (the first byte's top bits pick it: 0 to 4 a family, 5 to 7
/// Converse); and the whole answers of `Converse` and `InvokeModel`.
pub fn bedrock(data: &[u8]) {
    let pick = usize::from(data.first().copied().unwrap_or(0) >> 5);
    let family = FAMILIES.get(pick).map(|f| Family::named(f).expect("a built-in family"));
    match &family {
        Some(f) => split_invariant(
            || {
                let d = InvokeChunks::new(f.clone(), true);
                Box::new(EventStreamBody::typed(Box::new(d), MAX_EVENT))
            },
            data,
        ),
        None => split_invariant(
            || Box::new(EventStreamBody::typed(Box::new(ConverseEvents::new(true)), MAX_EVENT)),
            data,
        ),
    }
    let body = data.get(1..).unwrap_or_default();
    match family {
        Some(f) => {
            let _ = WholeInvoke::new(InvokeChunks::new(f, true)).decode_full(body, &mut |_| {});
        }
        None => {
            let _ = ConverseEvents::new(true).decode_full(body, &mut |_| {});
        }
    }
}

/// Gemini's SSE stream split at arbitrary points, its whole-body answer, and its error
/// answers (a code above 65535 must not read as another status).
pub fn gemini(data: &[u8]) {
    split_invariant(|| Box::new(SseBody::new(MAX_EVENT, GeminiDecoder::new(true))), data);
    let body = data.get(1..).unwrap_or_default();
    let _ = GeminiDecoder::new(true).decode_full(body, &mut |_| {});
    let headers = http::HeaderMap::new();
    for status in [400, 429, 500] {
        let a = quetta_http::ErrorAnswer { status, headers: &headers, body, retry_after: None };
        let e = quetta_vertex::status_error(&a);
        assert!(!e.to_string().is_empty());
    }
}

/// A `/v1/models` answer.
pub fn models(data: &[u8]) {
    if let Ok(ids) = quetta_openai::parse_models(data) {
        assert!(ids.len() <= data.len());
    }
}

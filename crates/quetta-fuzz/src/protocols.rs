//! Targets for the answers of the protocols beyond OpenAI's chat and completions, read
//! through each protocol's own decoder as its engine builds it (`Wire::decoder`).

use quetta_engine::{EngineRequest, Message, Prompt};
use quetta_http::{BodyDecoder, EventDecoder};
use quetta_protocols::{Options, Protocol};

use crate::answers::{split_invariant, MAX_EVENT};

/// The decoder `p`'s engine reads one request's answer with; `inputs` for embeddings and
/// rankings (the count of results the answer must have).
fn decoder(p: Protocol, inputs: usize) -> Box<dyn BodyDecoder> {
    let prompt = match p.kind() {
        quetta_protocols::RequestKind::Rank => {
            Prompt::Rank { query: "q".into(), documents: vec!["d".into(); inputs.max(1)] }
        }
        quetta_protocols::RequestKind::Embed if p != Protocol::ChatEmbeddings => {
            Prompt::Inputs(vec!["x".into(); inputs.max(1)])
        }
        _ if p.takes_messages() => Prompt::Chat(vec![Message::text("user", "hi")]),
        _ => Prompt::Text("hi".into()),
    };
    let mut req = EngineRequest::new(0, prompt);
    req.capture_text = true;
    p.wire(Options::default()).expect("a protocol of quetta-protocols").decoder(&req, MAX_EVENT)
}

fn whole(p: Protocol, inputs: usize, body: &[u8]) {
    let _ = decoder(p, inputs).decode_full(body, &mut |_| {});
}

/// OpenAI Responses: a stream split at arbitrary points gives the same events; a whole
/// answer decodes or is refused.
pub fn responses(data: &[u8]) {
    split_invariant(|| decoder(Protocol::Responses, 1), data);
    whole(Protocol::Responses, 1, data.get(1..).unwrap_or_default());
}

/// Anthropic Messages: the same, and its error answers.
pub fn messages(data: &[u8]) {
    split_invariant(|| decoder(Protocol::Messages, 1), data);
    let body = data.get(1..).unwrap_or_default();
    whole(Protocol::Messages, 1, body);
    let headers = http::HeaderMap::new();
    let wire = Protocol::Messages.wire(Options::default()).expect("a wire");
    if let Some(f) = wire.status_error() {
        for status in [400, 401, 429, 529] {
            let a = quetta_http::ErrorAnswer { status, headers: &headers, body, retry_after: None };
            assert!(!f(&a).to_string().is_empty());
        }
    }
}

/// The engines' own generate APIs (llama.cpp, TGI, SGLang, Triton; the first byte picks
/// one): split invariance and whole answers.
pub fn native(data: &[u8]) {
    let Some((&first, _)) = data.split_first() else { return };
    let p = [Protocol::LlamaCpp, Protocol::Tgi, Protocol::Sglang, Protocol::TensorRtLlm]
        [usize::from(first >> 5) % 4];
    split_invariant(|| decoder(p, 1), data);
    whole(p, 1, data.get(1..).unwrap_or_default());
}

/// Embeddings, pooling, rerank and score answers (the first byte picks the protocol and
/// the number of inputs the answer must answer).
pub fn pooling(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else { return };
    let all = [
        Protocol::Embeddings,
        Protocol::ChatEmbeddings,
        Protocol::InfinityEmbeddings,
        Protocol::Pooling,
        Protocol::Rerank,
        Protocol::TeiRerank,
        Protocol::Score,
    ];
    let p = all[usize::from(first % 7)];
    whole(p, usize::from(first >> 3) % 9, body);
}

/// Audio transcription answers: vLLM's chunk stream and OpenAI's transcript events, split
/// at arbitrary points, and whole answers.
pub fn transcription(data: &[u8]) {
    split_invariant(
        || {
            Box::new(quetta_http::SseBody::new(
                MAX_EVENT,
                quetta_protocols::audio::TranscriptDecoder::new(true),
            ))
        },
        data,
    );
    let body = data.get(1..).unwrap_or_default();
    let _ = quetta_protocols::audio::TranscriptDecoder::new(true).decode_full(body, &mut |_| {});
}

/// KServe v2 gRPC answers: length-prefixed protobuf messages, streamed (`ModelStreamInfer`,
/// split at arbitrary points) and whole (`ModelInfer`), then a status in the trailers made
/// from the input's last bytes; and the input as one message, read in place and with prost.
pub fn kserve(data: &[u8]) {
    use quetta_protocols::kserve::KserveDecoder;
    split_invariant(|| Box::new(KserveDecoder::new(true, true, MAX_EVENT)), data);
    split_invariant(|| Box::new(KserveDecoder::new(true, true, MAX_EVENT).token_ids()), data);
    let body = data.get(1..).unwrap_or_default();
    // the reading in place is prost's wherever it answers
    quetta_protocols::kserve::check_reader_against_prost(true, body);
    quetta_protocols::kserve::check_reader_against_prost(false, body);
    let mut d = KserveDecoder::new(false, true, MAX_EVENT);
    let _ = d.decode_full(body, &mut |_| {});
    let tail = &body[body.len().saturating_sub(8)..];
    let mut t = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_bytes(tail) {
        t.insert("grpc-status", v.clone());
        t.insert("grpc-message", v);
    }
    let _ = d.on_trailers(&t);
}

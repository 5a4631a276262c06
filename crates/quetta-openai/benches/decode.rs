//! Client CPU per streamed chunk in the decoder: the events of a real vLLM chat stream
//! (fixtures/sse/formats/vllm_chat.sse) and of the real llama.cpp server
//! (fixtures/sse/llama.cpp/ls_chat_stream.txt), decoded from SSE bytes to engine events.
//! Plain deltas take the scanner; the same stream with a newline in every token (an escape)
//! takes serde, as before the scanner.

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quetta_http::sse::SseParser;
use quetta_openai::decode::ChunkDecoder;

fn fixture(rel: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel);
    let raw = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // The llama.cpp capture starts with the response head: keep the body only.
    match raw.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) if raw.starts_with(b"HTTP/") => raw[i + 4..].to_vec(),
        _ => raw,
    }
}

/// Decode a whole SSE body; returns the number of events (so nothing is optimised away).
fn decode(body: &[u8]) -> usize {
    let mut parser = SseParser::new(1 << 20);
    let mut dec = ChunkDecoder::new(false);
    let mut n = 0;
    parser
        .feed(body, |et, data| {
            dec.on_event(et, data, &mut |_| n += 1).unwrap();
        })
        .unwrap();
    n
}

fn events(body: &[u8]) -> u64 {
    let mut parser = SseParser::new(1 << 20);
    let mut n = 0;
    parser.feed(body, |_, _| n += 1).unwrap();
    n
}

fn bench(c: &mut Criterion) {
    let vllm = fixture("sse/formats/vllm_chat.sse");
    let escaped = String::from_utf8(vllm.clone())
        .unwrap()
        .replace(r#""content":""#, r#""content":"\n"#)
        .into_bytes();
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(events(&vllm)));
    g.bench_function("vllm chat, SSE parsing only", |b| {
        b.iter(|| events(std::hint::black_box(&vllm)));
    });
    for (name, body) in [("vllm chat (scanner)", &vllm), ("vllm chat, escaped (serde)", &escaped)] {
        g.throughput(Throughput::Elements(events(body)));
        g.bench_function(name, |b| b.iter(|| decode(std::hint::black_box(body))));
    }
    // The llama.cpp capture is chunked (Transfer-Encoding) as it came off the socket: feed
    // its data lines as one SSE body.
    let raw = fixture("sse/llama.cpp/ls_chat_stream.txt");
    let text = String::from_utf8_lossy(&raw);
    let mut body = String::new();
    for l in text.lines().filter(|l| l.starts_with("data: ")) {
        body.push_str(l);
        body.push_str("\n\n");
    }
    let body = body.into_bytes();
    g.throughput(Throughput::Elements(events(&body)));
    g.bench_function("llama.cpp chat (scanner)", |b| {
        b.iter(|| decode(std::hint::black_box(&body)));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Recorded wire transcripts (real llama.cpp captures; vLLM, SGLang, TGI and OpenAI formats,
//! reasoning and tool-call streams) decoded through the parser and through the adapter over
//! a real loopback socket; event kinds and counts are checked against an independent manifest.

mod common;

use common::{collect, counts, ending, fixtures, Reply, ScriptServer};
use proptest::prelude::*;
use quetta_engine::{EngineError, EngineRequest, EventKind, Prompt};
use quetta_http::sse::SseParser;
use quetta_openai::decode::ChunkDecoder;
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};
use serde::Deserialize;

#[derive(Deserialize, Debug)]
struct Entry {
    file: String,
    api: String,
    end: String,
    content: usize,
    reasoning: usize,
    tool_call: usize,
    empty: usize,
    usage: usize,
}

fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(fixtures().join("sse/manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(e: &Entry) -> Vec<u8> {
    std::fs::read(fixtures().join("sse").join(&e.file)).unwrap()
}

/// Decode a transcript fed as the given frames; returns a printable event list.
fn decode_frames(frames: &[&[u8]]) -> Vec<String> {
    let mut p = SseParser::default();
    let mut d = ChunkDecoder::new(true);
    let mut out = Vec::new();
    let mut failed = false;
    let push =
        |et: &[u8], data: &[u8], d: &mut ChunkDecoder, out: &mut Vec<String>, failed: &mut bool| {
            if *failed || d.done {
                return;
            }
            if let Err(e) = d.on_event(et, data, &mut |k| out.push(format!("{k:?}"))) {
                out.push(format!("error {}", e.kind()));
                *failed = true;
            }
        };
    for f in frames {
        p.feed(f, |et, data| push(et, data, &mut d, &mut out, &mut failed)).unwrap();
    }
    p.finish(|et, data| push(et, data, &mut d, &mut out, &mut failed)).unwrap();
    out.push(format!("done={} finish={:?}", d.done, d.finish_reason));
    out
}

#[test]
fn manifest_covers_every_format() {
    let m = manifest();
    for needle in [
        "llama.cpp/chat",
        "llama.cpp/completions",
        "vllm_chat",
        "vllm_reasoning",
        "sglang",
        "tgi",
        "openai_chat",
        "openai_toolcall",
    ] {
        assert!(m.iter().any(|e| e.file.contains(needle)), "{needle} missing from the manifest");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Any split of any transcript into frames gives exactly the events of the unsplit bytes.
    #[test]
    fn any_split_gives_the_same_events(idx in 0usize..15, cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40)) {
        let m = manifest();
        let e = &m[idx % m.len()];
        let bytes = load(e);
        let whole = decode_frames(&[&bytes]);
        let mut pos: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        pos.sort_unstable();
        pos.dedup();
        let mut frames: Vec<&[u8]> = Vec::new();
        let mut last = 0;
        for p in pos { frames.push(&bytes[last..p]); last = p; }
        frames.push(&bytes[last..]);
        prop_assert_eq!(decode_frames(&frames), whole);
    }
}

#[test]
fn every_single_byte_split_gives_the_same_events() {
    for e in manifest() {
        let bytes = load(&e);
        let whole = decode_frames(&[&bytes]);
        let frames: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(decode_frames(&frames), whole, "{}", e.file);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcripts_over_a_real_socket_match_the_manifest() {
    for e in manifest() {
        let bytes = load(&e);
        // awkward 7-byte frames: events split everywhere, including inside "\r\n"
        let frames: Vec<Vec<u8>> = bytes.chunks(7).map(<[u8]>::to_vec).collect();
        let server = ScriptServer::start(vec![Reply::sse(frames)]);
        let api = if e.api == "chat" { Api::Chat } else { Api::Completions };
        let engine = OpenAiEngine::new(OpenAiConfig::new(server.url(), api, "m")).unwrap();
        let mut req = EngineRequest::new(1, Prompt::Text("hi".into()));
        req.capture_text = true;
        let events = collect(&engine, req).await;
        // the request's write (HTTP/1.1 through the stamping socket), then the response
        assert!(matches!(events[0].kind, EventKind::RequestWritten), "{}", e.file);
        assert!(matches!(events[1].kind, EventKind::Headers { status: 200, .. }), "{}", e.file);
        assert!(matches!(events[2].kind, EventKind::FirstByte), "{}", e.file);
        assert!(events[0].at <= events[1].at, "{}", e.file);
        assert_eq!(
            counts(&events),
            (e.content, e.reasoning, e.tool_call, e.empty, e.usage),
            "{}",
            e.file
        );
        assert_eq!(ending(&events), e.end, "{}", e.file);
        assert!(
            events.windows(2).all(|w| w[0].at <= w[1].at && w[0].frame <= w[1].frame),
            "{}",
            e.file
        );
        let terminal = events.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(terminal, 1, "{}", e.file);
    }
}

#[test]
fn llama_cpp_capture_text_round_trips() {
    let bytes = std::fs::read(fixtures().join("sse/llama.cpp/ls_chat_stream.txt")).unwrap();
    let mut p = SseParser::default();
    let mut d = ChunkDecoder::new(true);
    let mut text = String::new();
    let mut usage = None;
    p.feed(&bytes, |et, data| {
        d.on_event(et, data, &mut |k| match k {
            EventKind::Content(delta) => text.push_str(&delta.text.unwrap()),
            EventKind::Usage(u) => usage = Some(u),
            _ => {}
        })
        .unwrap();
    })
    .unwrap();
    assert!(!text.is_empty());
    let u = usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
        (Some(32), Some(4), Some(24))
    );
    assert!(d.done);
    let _ = EngineError::Incomplete; // the kind used when [DONE] and finish_reason are both missing
}

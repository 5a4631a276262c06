//! Answers captured from the real llama.cpp server (fixtures/sse/protocols), read by each
//! protocol's decoder whole and split into frames at every size, against counts taken from
//! the same bytes by a plain reading of their JSON (not the decoders' own structs).

use quetta_engine::{EventKind, Message, Prompt, Usage};
use quetta_http::BodyDecoder;
use quetta_protocols::{Options, Protocol};
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sse/protocols")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The JSON of every `data:` line.
fn data_lines(raw: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(raw)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

fn decoder(p: Protocol, prompt: Prompt) -> Box<dyn BodyDecoder> {
    let mut req = quetta_engine::EngineRequest::new(0, prompt);
    req.capture_text = true;
    p.wire(Options::default()).unwrap().decoder(&req, 1 << 20)
}

/// The events of `raw` fed in frames of `stride` bytes, and whether the answer was done.
fn stream(p: Protocol, raw: &[u8], stride: usize) -> (Vec<EventKind>, bool) {
    let prompt = if p.takes_messages() {
        Prompt::Chat(vec![Message::text("user", "x")])
    } else {
        Prompt::Text("x".into())
    };
    let mut d = decoder(p, prompt);
    let mut out = Vec::new();
    for f in raw.chunks(stride) {
        d.on_data(f, &mut |k| out.push(k)).unwrap();
        if d.is_done() {
            return (out, true);
        }
    }
    d.on_end(&mut |k| out.push(k)).unwrap();
    (out, d.is_complete())
}

fn tokens(ev: &[EventKind]) -> (usize, String) {
    let text = ev
        .iter()
        .filter_map(|e| match e {
            EventKind::Content(d) => d.text.clone(),
            _ => None,
        })
        .collect();
    (ev.iter().filter(|e| e.is_token()).count(), text)
}

fn usage(ev: &[EventKind]) -> Option<Usage> {
    ev.iter().rev().find_map(|e| match e {
        EventKind::Usage(u) => Some(*u),
        _ => None,
    })
}

fn check(p: Protocol, raw: &[u8], want_tokens: usize, want_text: &str, want_usage: Option<Usage>) {
    for stride in [1, 2, 3, 7, 64, raw.len()] {
        let (ev, done) = stream(p, raw, stride);
        assert!(done, "{p} split every {stride}");
        assert_eq!(tokens(&ev), (want_tokens, want_text.to_owned()), "{p} split every {stride}");
        assert_eq!(usage(&ev), want_usage, "{p} split every {stride}");
    }
}

#[test]
fn responses_as_llama_cpp_streams_them() {
    let raw = fixture("responses.sse");
    let lines = data_lines(&raw);
    let deltas: Vec<&str> = lines
        .iter()
        .filter(|v| v["type"] == "response.output_text.delta")
        .filter_map(|v| v["delta"].as_str())
        .filter(|d| !d.is_empty())
        .collect();
    let done = lines.iter().find(|v| v["type"] == "response.completed").unwrap();
    let u = &done["response"]["usage"];
    let want = Usage::tokens(u["input_tokens"].as_u64(), u["output_tokens"].as_u64())
        .with_cached(u["input_tokens_details"]["cached_tokens"].as_u64());
    check(Protocol::Responses, &raw, deltas.len(), &deltas.concat(), Some(want));
}

#[test]
fn messages_as_llama_cpp_streams_them_and_without_their_start() {
    for (name, has_start) in [("messages.sse", true), ("messages-no-start.sse", false)] {
        let raw = fixture(name);
        let lines = data_lines(&raw);
        let texts: Vec<&str> = lines
            .iter()
            .filter(|v| v["delta"]["type"] == "text_delta")
            .filter_map(|v| v["delta"]["text"].as_str())
            .filter(|t| !t.is_empty())
            .collect();
        let start = lines.iter().find(|v| v["type"] == "message_start");
        assert_eq!(start.is_some(), has_start, "{name}");
        let output = lines.iter().rev().find_map(|v| v["usage"]["output_tokens"].as_u64());
        let want = match start {
            Some(s) => {
                let u = &s["message"]["usage"];
                let cached = u["cache_read_input_tokens"].as_u64();
                let prompt = u["input_tokens"].as_u64().unwrap() + cached.unwrap_or(0);
                Usage::tokens(Some(prompt), output).with_cached(cached)
            }
            // llama.cpp sent no message_start: no prompt count to report
            None => Usage::tokens(None, output),
        };
        check(Protocol::Messages, &raw, texts.len(), &texts.concat(), Some(want));
    }
}

#[test]
fn llama_cpp_completion_one_event_per_token() {
    let raw = fixture("completion.sse");
    let lines = data_lines(&raw);
    let steps: Vec<&Value> = lines.iter().filter(|v| v["stop"] == false).collect();
    let text: String = steps.iter().filter_map(|v| v["content"].as_str()).collect();
    let last = lines.iter().find(|v| v["stop"] == true).unwrap();
    let want = Usage::tokens(last["tokens_evaluated"].as_u64(), last["tokens_predicted"].as_u64())
        .with_cached(last["timings"]["cache_n"].as_u64());
    assert_eq!(steps.len() as u64, last["tokens_predicted"].as_u64().unwrap());
    check(Protocol::LlamaCpp, &raw, steps.len(), &text, Some(want));
}

#[test]
fn whole_answers_and_pooled_answers() {
    let mut d = decoder(Protocol::Responses, Prompt::Text("x".into()));
    let mut ev = Vec::new();
    let body = fixture("responses-whole.json");
    d.decode_full(&body, &mut |k| ev.push(k)).unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    let text = v["output"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(tokens(&ev).1, text);
    assert_eq!(usage(&ev).unwrap().completion_tokens, v["usage"]["output_tokens"].as_u64());
    for (p, name, inputs) in
        [(Protocol::Embeddings, "embeddings.json", 2), (Protocol::Rerank, "rerank.json", 2)]
    {
        let body = fixture(name);
        let v: Value = serde_json::from_slice(&body).unwrap();
        let prompt = if p == Protocol::Rerank {
            Prompt::Rank { query: "q".into(), documents: vec!["a".into(); inputs] }
        } else {
            Prompt::Inputs(vec!["a".into(); inputs])
        };
        let mut ev = Vec::new();
        decoder(p, prompt).decode_full(&body, &mut |k| ev.push(k)).unwrap();
        assert_eq!(
            usage(&ev).unwrap().prompt_tokens,
            v["usage"]["prompt_tokens"].as_u64(),
            "{name}"
        );
        // one result fewer than inputs is refused
        let fewer = if p == Protocol::Rerank {
            Prompt::Rank { query: "q".into(), documents: vec!["a".into(); inputs + 1] }
        } else {
            Prompt::Inputs(vec!["a".into(); inputs + 1])
        };
        assert!(decoder(p, fewer).decode_full(&body, &mut |_| {}).is_err(), "{name}");
    }
}

//! Every generation protocol against the strict simulator (KServe's gRPC too): a streamed and a whole answer
//! whose token counts are the server's own, a wrong key refused in the service's words, a
//! malformed frame and an error mid-stream as clear failures, and Responses' chained turns.
//! What the client reports is compared with the simulator's own record of each request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quetta_engine::{Engine, EngineRequest, Message, Prompt};
use quetta_metrics::{RequestRecord, TokenSource};
use quetta_openai::{Api, ApiKey, OpenAiConfig};
use quetta_protocols::{Options, Protocol};
use quetta_sim::faults::FaultRule;
use quetta_sim::{SimConfig, SimRecord, Simulator};

const GENERATION: [Protocol; 9] = [
    Protocol::Chat,
    Protocol::Completions,
    Protocol::Responses,
    Protocol::Messages,
    Protocol::LlamaCpp,
    Protocol::Tgi,
    Protocol::Sglang,
    Protocol::TensorRtLlm,
    Protocol::KserveGrpc,
];

fn sim(key: Option<&str>, faults: &[&str]) -> Simulator {
    Simulator::start(SimConfig {
        ttft: Duration::from_millis(10),
        itl: Duration::from_millis(2),
        keep_records: true,
        api_key: key.map(str::to_owned),
        faults: faults.iter().map(|f| f.parse::<FaultRule>().unwrap()).collect(),
        ..SimConfig::default()
    })
    .unwrap()
}

fn engine(p: Protocol, sim: &Simulator, key: Option<&str>, opts: Options) -> Arc<dyn Engine> {
    let mut cfg = OpenAiConfig::new(sim.base_url(), Api::Chat, &sim.config().model);
    cfg.api_key = key.map(ApiKey::new);
    quetta_protocols::engine(p, cfg, opts).unwrap()
}

fn prompt(p: Protocol, text: &str) -> Prompt {
    if p.takes_messages() {
        Prompt::Chat(vec![Message::text("user", text)])
    } else {
        Prompt::Text(text.into())
    }
}

async fn send(
    e: &dyn Engine,
    prompt: Prompt,
    stream: bool,
    session: Option<&str>,
) -> RequestRecord {
    let mut req = EngineRequest::new(1, prompt);
    req.max_tokens = Some(7);
    req.stream = stream;
    req.session_id = session.map(str::to_owned);
    let now = Instant::now();
    let o = quetta_loadgen::execute(e, req, 5, now, now, now).await;
    RequestRecord::from_observation(o)
}

fn last(sim: &Simulator) -> SimRecord {
    sim.records().pop().expect("the simulator recorded the request")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn each_protocol_streams_and_counts_as_the_server_does() {
    let rt = rt();
    let s = sim(None, &[]);
    for p in GENERATION {
        let e = engine(p, &s, None, Options::default());
        for stream in [true, false] {
            let r =
                rt.block_on(send(e.as_ref(), prompt(p, "one two three four five"), stream, None));
            let server = last(&s);
            assert!(r.ok(), "{p} stream={stream}: {:?}", r.error);
            assert_eq!(server.completion_tokens, 7);
            if matches!(p, Protocol::TensorRtLlm | Protocol::KserveGrpc) {
                // Triton reports no usage: one response per token is counted, streamed;
                // a whole answer is one response (a tokenizer counts it: docs/METRICS.md)
                assert_eq!(r.output_token_source, TokenSource::Chunks, "{p}");
                let want = if stream { 7 } else { 1 };
                assert_eq!(r.output_tokens, Some(want), "{p} stream={stream}");
            } else {
                assert_eq!(r.output_tokens, Some(server.completion_tokens), "{p} stream={stream}");
                assert_eq!(r.output_token_source, TokenSource::Usage, "{p} stream={stream}");
                assert_eq!(r.input_tokens, Some(server.prompt_tokens), "{p} stream={stream}");
            }
            if stream {
                let chunks: u32 = server.chunk_tokens.iter().sum();
                assert_eq!(r.token_chunks, chunks, "{p}: one token event per token sent");
                // The events some protocols send before the first token (response.created,
                // message_start) are not tokens: TTFT is at least the server's 10 ms.
                let ttft = r.ttft_ms.unwrap();
                assert!(ttft >= 10.0, "{p}: TTFT {ttft} ms is before the server's first token");
            }
        }
    }
}

#[test]
fn a_wrong_key_is_refused_in_the_services_words_and_the_right_one_taken() {
    let rt = rt();
    let s = sim(Some("right-key"), &[]);
    for p in GENERATION {
        let r = rt.block_on(send(
            engine(p, &s, Some("wrong-key"), Options::default()).as_ref(),
            prompt(p, "hi there"),
            true,
            None,
        ));
        // gRPC answers a refused call with HTTP 200 and its own status (UNAUTHENTICATED)
        let status = if p == Protocol::KserveGrpc { 200 } else { 401 };
        assert_eq!(r.status, Some(status), "{p}");
        let err = r.error.clone().unwrap_or_default();
        assert!(!err.contains("wrong-key") && !err.contains("right-key"), "{p}: a key in {err}");
        match p {
            Protocol::Messages => {
                assert_eq!(r.error_kind.as_deref(), Some("auth"), "{p}: {err}");
                assert!(err.contains("invalid x-api-key"), "{p}: {err}");
            }
            Protocol::KserveGrpc => {
                assert_eq!(r.error_kind.as_deref(), Some("auth"), "{p}: {err}");
                assert!(err.contains("UNAUTHENTICATED: Incorrect API key"), "{p}: {err}");
            }
            _ => assert_eq!(r.error_kind.as_deref(), Some("http_4xx"), "{p}: {err}"),
        }
        let ok = rt.block_on(send(
            engine(p, &s, Some("right-key"), Options::default()).as_ref(),
            prompt(p, "hi there"),
            true,
            None,
        ));
        assert!(ok.ok(), "{p} with the right key: {:?}", ok.error);
    }
}

#[test]
fn a_malformed_frame_and_an_error_mid_stream_fail_clearly() {
    let rt = rt();
    for (fault, kind, words) in
        [("bad-json", "protocol", "bad JSON"), ("error-event", "server_error", "")]
    {
        let s = sim(None, &[fault]);
        for p in GENERATION {
            let r = rt.block_on(send(
                engine(p, &s, None, Options::default()).as_ref(),
                prompt(p, "hi there"),
                true,
                None,
            ));
            let err = r.error.clone().unwrap_or_default();
            assert_eq!(r.error_kind.as_deref(), Some(kind), "{p} {fault}: {err}");
            let words = if fault == "error-event" {
                if p == Protocol::Messages {
                    "overloaded_error: Overloaded"
                } else {
                    "simulated engine failure"
                }
            } else if p == Protocol::KserveGrpc {
                "a bad message"
            } else {
                words
            };
            assert!(err.contains(words), "{p} {fault}: {err}");
            assert!(r.token_chunks >= 1, "{p} {fault}: the tokens before the failure are kept");
        }
    }
}

#[test]
fn responses_chained_turns_send_only_the_new_messages() {
    let rt = rt();
    let s = sim(None, &[]);
    let mut chain = Options::default();
    chain.chain_responses = true;
    let chained = engine(Protocol::Responses, &s, None, chain);
    let whole = engine(Protocol::Responses, &s, None, Options::default());
    let first = vec![Message::text("user", "one two three")];
    let r1 = rt.block_on(send(chained.as_ref(), Prompt::Chat(first.clone()), true, Some("s1")));
    assert!(r1.ok(), "{:?}", r1.error);
    let reply = last(&s).text;
    let history = vec![
        first[0].clone(),
        Message::text("assistant", reply),
        Message::text("user", "four five"),
    ];
    // The chained turn's server reads the stored conversation: the same prompt as a
    // turn that sends it all.
    let r2 = rt.block_on(send(chained.as_ref(), Prompt::Chat(history.clone()), true, Some("s1")));
    assert!(r2.ok(), "{:?}", r2.error);
    let chained_prompt = last(&s).prompt_tokens;
    let r3 = rt.block_on(send(whole.as_ref(), Prompt::Chat(history), true, None));
    assert!(r3.ok(), "{:?}", r3.error);
    assert_eq!(chained_prompt, last(&s).prompt_tokens);
    assert_eq!(r2.input_tokens, r3.input_tokens);
}

/// The embeddings and ranking protocols, each with the input it takes.
fn pooled() -> Vec<(Protocol, Prompt)> {
    let texts = || vec!["a b c".to_owned(), "d e".to_owned(), "f".to_owned()];
    let rank = || Prompt::Rank { query: "q r".into(), documents: texts() };
    vec![
        (Protocol::Embeddings, Prompt::Inputs(texts())),
        (Protocol::InfinityEmbeddings, Prompt::Inputs(texts())),
        (Protocol::Pooling, Prompt::Inputs(texts())),
        (Protocol::ChatEmbeddings, Prompt::Chat(vec![Message::text("user", "a b c")])),
        (Protocol::Rerank, rank()),
        (Protocol::TeiRerank, rank()),
        (Protocol::Score, rank()),
    ]
}

#[test]
fn embeddings_and_rankings_are_one_answer_with_a_result_per_input() {
    let rt = rt();
    let s = sim(None, &[]);
    for (p, prompt) in pooled() {
        let inputs = prompt.input_count();
        let e = engine(p, &s, None, Options::default());
        let r = rt.block_on(send(e.as_ref(), prompt, true, None));
        let server = last(&s);
        assert!(r.ok(), "{p}: {:?}", r.error);
        assert_eq!(r.inputs, Some(inputs), "{p}");
        assert!(!r.streamed, "{p}: never streamed, whatever the request asked");
        assert_eq!((r.ttft_ms, r.tpot_ms), (None, None), "{p}: no token, no TTFT");
        assert!(r.e2e_ms.unwrap() >= 10.0, "{p}: {:?}", r.e2e_ms);
        // the simulator's count: words of each input, a ranking's query read with each
        // document (3 + 2 + 1 words, plus 2 per document)
        let want = if p.kind() == quetta_engine::RequestKind::Rank { 12 } else { 6 };
        let want = if p == Protocol::ChatEmbeddings { 3 } else { want };
        assert_eq!(server.prompt_tokens, want, "{p}");
        if p == Protocol::TeiRerank {
            assert_eq!(r.input_token_source, TokenSource::Planned, "TEI reports no usage");
        } else {
            assert_eq!(
                (r.input_tokens, r.input_token_source),
                (Some(want), TokenSource::Usage),
                "{p}"
            );
        }
    }
}

#[test]
fn embeddings_and_rankings_refuse_and_fail_clearly() {
    let rt = rt();
    let keyed = sim(Some("right-key"), &[]);
    for (p, prompt) in pooled() {
        let e = engine(p, &keyed, Some("wrong-key"), Options::default());
        let r = rt.block_on(send(e.as_ref(), prompt, false, None));
        assert_eq!((r.status, r.error_kind.as_deref()), (Some(401), Some("http_4xx")), "{p}");
    }
    for (fault, kind) in
        [("bad-json", "protocol"), ("error-event", "server_error"), ("http503", "http_5xx")]
    {
        let s = sim(None, &[fault]);
        for (p, prompt) in pooled() {
            let r = rt.block_on(send(
                engine(p, &s, None, Options::default()).as_ref(),
                prompt,
                false,
                None,
            ));
            assert_eq!(r.error_kind.as_deref(), Some(kind), "{p} {fault}: {:?}", r.error);
        }
    }
}

/// A recording from the fixtures, as the workload reads it.
fn recording() -> Prompt {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/audio/speech-3.wav");
    Prompt::Audio(quetta_engine::AudioInput {
        data: std::fs::read(&p).unwrap().into(),
        file_name: "speech-3.wav".into(),
        mime: "audio/wav".into(),
        seconds: 1.087562,
        prompt: None,
    })
}

#[test]
fn a_transcription_uploads_its_recording_and_streams_its_text() {
    let rt = rt();
    let s = sim(None, &[]);
    let e = engine(Protocol::Transcription, &s, None, Options::default());
    for stream in [true, false] {
        let r = rt.block_on(send(e.as_ref(), recording(), stream, None));
        let server = last(&s);
        assert!(r.ok(), "stream={stream}: {:?}", r.error);
        // the simulator read the recording's length from its header: 50 prompt tokens a
        // second, about 3 words a second of text
        assert_eq!(server.prompt_tokens, 54);
        assert_eq!(server.completion_tokens, 4);
        assert_eq!((r.input_tokens, r.output_tokens), (Some(54), Some(4)), "stream={stream}");
        assert_eq!(r.audio_s, Some(1.088));
        if stream {
            assert_eq!(r.token_chunks, 4);
            assert!(r.ttft_ms.unwrap() >= 10.0);
        }
    }
    let keyed = sim(Some("k"), &[]);
    let r = rt.block_on(send(
        engine(Protocol::Transcription, &keyed, Some("other"), Options::default()).as_ref(),
        recording(),
        true,
        None,
    ));
    assert_eq!((r.status, r.error_kind.as_deref()), (Some(401), Some("http_4xx")));
    for (fault, kind) in [("bad-json", "protocol"), ("error-event", "server_error")] {
        let f = sim(None, &[fault]);
        let r = rt.block_on(send(
            engine(Protocol::Transcription, &f, None, Options::default()).as_ref(),
            recording(),
            true,
            None,
        ));
        assert_eq!(r.error_kind.as_deref(), Some(kind), "{fault}: {:?}", r.error);
    }
    // not a recording: refused as the service refuses it
    let mut bad = recording();
    if let Prompt::Audio(a) = &mut bad {
        a.data = b"not audio".to_vec().into();
    }
    let r = rt.block_on(send(e.as_ref(), bad, true, None));
    assert_eq!(r.status, Some(400));
    assert!(r.error.unwrap().contains("Invalid file format"));
}

/// KServe's `ModelStreamInfer` with the ensemble's `stream` input false: one response with
/// the whole text, flagged final, as Triton answers it (the client itself sends a request
/// that is not streamed to `ModelInfer`).
#[test]
fn kserve_stream_call_of_a_request_not_streamed_is_one_final_response() {
    use quetta_http::BodyDecoder;
    use quetta_protocols::kserve::{self, KserveDecoder};
    let rt = rt();
    let s = sim(None, &[]);
    let mut req = EngineRequest::new(3, Prompt::Text("one two".into()));
    req.max_tokens = Some(4);
    req.stream = false;
    let body =
        kserve::frame(&kserve::KserveGrpc::default().request(&s.config().model, &req).unwrap());
    let uri = format!("{}{}/ModelStreamInfer", s.base_url(), kserve::SERVICE);
    let request = http::Request::post(uri)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let t = quetta_http::Transport::new(&quetta_http::TransportConfig {
        http2: true,
        ..Default::default()
    })
    .unwrap();
    let got = rt.block_on(t.fetch(request, Duration::from_secs(10), 1 << 20)).unwrap();
    let trailers = got.trailers.expect("the status in the trailers");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    let mut d = KserveDecoder::new(true, true, 1 << 20);
    let mut texts = Vec::new();
    d.on_data(&got.body, &mut |k| {
        if let quetta_engine::EventKind::Content(c) = k {
            texts.push(c.text.unwrap_or_default());
        }
    })
    .unwrap();
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert_eq!(texts[0].split_whitespace().count(), 4);
    assert!(d.is_done(), "the one response is flagged final");
}

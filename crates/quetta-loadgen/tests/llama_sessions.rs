//! Multi-turn sessions against a REAL llama.cpp server (started by
//! `scripts/llama-server-start.sh`, which `.ci/run` runs and which sets `QUETTA_LLAMA_URL`):
//! the engine's own replies go back into the history, turn after turn.

use std::sync::Arc;
use std::time::Duration;

use quetta_engine::{Message, Prompt};
use quetta_loadgen::{RunConfig, Runner, SessionConfig, Work};
use quetta_metrics::RequestRecord;
use quetta_openai::{list_models, Api, OpenAiConfig, OpenAiEngine};
use quetta_workload::session::{Session, SessionList, Turn};

mod common;
use common::{Logging, VecSink};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_sessions_feed_llama_cpp_its_own_replies() {
    let Some(url) = quetta_testkit::llama_url() else { return };
    let models = list_models(&url, None, false, Duration::from_secs(10)).await.unwrap();
    let questions = [
        ["Name a river in Europe.", "How long is it?", "Which cities does it pass?"],
        ["Name a colour.", "What rhymes with it?", "Use both in a sentence."],
    ];
    let sessions: Vec<Session> = questions
        .iter()
        .enumerate()
        .map(|(i, qs)| Session {
            id: format!("llama-{i}"),
            system: Some("You are a helpful assistant.".into()),
            turns: qs
                .iter()
                .map(|q| Turn {
                    messages: vec![Message::text("user", *q)],
                    recorded_reply: None,
                    max_tokens: 16,
                    think_time: None,
                    new_tokens: q.split_whitespace().count() as u32,
                })
                .collect(),
            start: None,
        })
        .collect();
    let engine = Arc::new(Logging::new(
        OpenAiEngine::new(OpenAiConfig::new(&url, Api::Chat, &models[0])).unwrap(),
    ));
    let sink = VecSink::default();
    let mut cfg = RunConfig::closed(1, 1);
    cfg.num_requests = None;
    cfg.capture_text = true;
    let p = std::sync::Arc::make_mut(&mut cfg.params);
    p.sampling.seed = Some(7);
    p.sampling.temperature = Some(0.0);
    let (out, counts) = Runner::new(engine.clone(), cfg)
        .sink(Box::new(sink.clone()))
        .run(Work::Sessions {
            source: Box::new(SessionList { sessions, cycle: false }),
            config: SessionConfig::per_session(2),
        })
        .await
        .map(|o| {
            let c = o.sessions.clone().expect("a session run counts its sessions");
            (o, c)
        })
        .unwrap();
    let recs: Vec<RequestRecord> = sink.0.lock().unwrap().clone();
    assert_eq!(counts.completed, 2, "{counts:?}; errors: {:?}", out.aggregate.errors);
    assert_eq!(recs.len(), 6);
    let sent = engine.sent.lock().unwrap().clone();
    for sid in ["llama-0", "llama-1"] {
        let mut mine: Vec<&RequestRecord> =
            recs.iter().filter(|r| r.session_id.as_deref() == Some(sid)).collect();
        mine.sort_by_key(|r| r.turn);
        let third = sent.iter().find(|q| q.request_id == mine[2].id).unwrap();
        let Prompt::Chat(msgs) = &third.prompt else { panic!("chat") };
        let replies: Vec<String> =
            msgs.iter().filter(|m| m.role == "assistant").map(Message::text_content).collect();
        assert_eq!(replies.len(), 2);
        for (k, reply) in replies.iter().enumerate() {
            assert_eq!(
                Some(reply),
                mine[k].text.as_ref(),
                "{sid} turn {}: the model's own reply",
                k + 1
            );
            assert!(!reply.trim().is_empty());
        }
        // the server counted a growing prompt, turn after turn
        let p: Vec<u64> = mine.iter().map(|r| r.input_tokens.unwrap()).collect();
        assert!(p[0] < p[1] && p[1] < p[2], "{sid} prompt tokens {p:?}");
        println!(
            "{sid}: prompt tokens {p:?}, cached {:?}",
            mine.iter().map(|r| r.cached_tokens).collect::<Vec<_>>()
        );
    }
    let s = out.aggregate.summary(&[]);
    assert_eq!(s.per_turn.len(), 3);
    assert_eq!(s.per_turn[2].cached_token_source, "usage", "llama.cpp reports cached tokens");
    // llama.cpp keeps a session's history in its slot (it picks the slot with the most
    // similar prompt), so later turns find their earlier turns cached
    assert!(s.per_turn[2].cached_tokens_mean.unwrap() > 0.0, "{:?}", s.per_turn[2]);
}

//! The adapter against the simulator over a real loopback socket: every event's timestamp is
//! compared with the simulator's own record of when it handed that chunk to the socket.

// Each test holds the serial lock for its whole (single-runtime) body on purpose.
#![allow(clippy::await_holding_lock)]

mod common;

use std::time::Duration;

use common::collect;
use quetta_engine::{EngineRequest, EventKind, Prompt};
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};
use quetta_sim::{SimConfig, Simulator};

/// Timing tests in this binary run one at a time: on a 2-core machine, parallel tests would
/// measure each other's CPU contention.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn thousand_token_stream_timestamps_match_the_simulator_within_1ms_p99() {
    let _serial = serial();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::from_millis(50),
        itl: Duration::from_millis(2),
        ..SimConfig::default()
    })
    .unwrap();
    for api in [Api::Chat, Api::Completions] {
        let engine = OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), api, "m")).unwrap();
        let mut req = EngineRequest::new(
            if api == Api::Chat { 1 } else { 2 },
            Prompt::Text("tell me a story".into()),
        );
        req.max_tokens = Some(1000);
        let events = collect(&engine, req.clone()).await;
        assert!(
            matches!(events.last().unwrap().kind, EventKind::End { .. }),
            "{:?}",
            events.last()
        );
        let client: Vec<_> = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Content(_)))
            .map(|e| e.at)
            .collect();
        let rec = sim.records().into_iter().find(|r| r.request_id == Some(req.request_id)).unwrap();
        assert_eq!(client.len(), 1000);
        assert_eq!(rec.chunks.len(), 1000);
        // the client sees each chunk after the simulator sent it, and soon after
        let diffs: Vec<f64> = client
            .iter()
            .zip(&rec.chunks)
            .map(|(c, s)| {
                assert!(c >= s, "a chunk cannot arrive before it was sent");
                c.duration_since(*s).as_secs_f64() * 1e3
            })
            .collect();
        let p = p99(diffs);
        eprintln!("{api:?}: arrival - send p99 = {p:.3} ms");
        assert!(p < 1.0, "p99 {p} ms");
        // and ITL as measured equals ITL as sent
        let itl_diff: Vec<f64> = client
            .windows(2)
            .zip(rec.chunks.windows(2))
            .map(|(c, s)| ((c[1] - c[0]).as_secs_f64() - (s[1] - s[0]).as_secs_f64()).abs() * 1e3)
            .collect();
        assert!(p99(itl_diff) < 1.0);
        let usage = events
            .iter()
            .find_map(|e| match e.kind {
                EventKind::Usage(u) => Some(u),
                _ => None,
            })
            .unwrap();
        assert_eq!(usage.completion_tokens, Some(1000));
        assert_eq!(usage.prompt_tokens, Some(4));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn connections_are_pooled_and_reuse_is_reported() {
    let _serial = serial();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::ZERO,
        itl: Duration::ZERO,
        ..SimConfig::default()
    })
    .unwrap();
    let engine = OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), Api::Chat, "m")).unwrap();
    let mut reused = Vec::new();
    for i in 0..3 {
        let mut req = EngineRequest::new(i, Prompt::Text("hi".into()));
        req.max_tokens = Some(4);
        let events = collect(&engine, req).await;
        let EventKind::Headers { connection, .. } = &events[0].kind else { panic!() };
        reused.push((connection.reused, connection.connect.is_some()));
    }
    assert_eq!(reused, vec![(false, true), (true, false), (true, false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn non_streaming_requests_end_once_with_usage() {
    let _serial = serial();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(1),
        ..SimConfig::default()
    })
    .unwrap();
    for api in [Api::Chat, Api::Completions] {
        let engine = OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), api, "m")).unwrap();
        let mut req = EngineRequest::new(5, Prompt::Text("a b c".into()));
        req.stream = false;
        req.max_tokens = Some(20);
        req.capture_text = true;
        let events = collect(&engine, req).await;
        let content: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Content(d) => d.text.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(content.len(), 1);
        assert_eq!(content[0].split_whitespace().count(), 20);
        assert!(matches!(events.last().unwrap().kind, EventKind::End { streamed: false, .. }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn http2_prior_knowledge_works() {
    let _serial = serial();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::ZERO,
        itl: Duration::ZERO,
        ..SimConfig::default()
    })
    .unwrap();
    let mut cfg = OpenAiConfig::new(sim.base_url(), Api::Chat, "m");
    cfg.http2 = true;
    let engine = OpenAiEngine::new(cfg).unwrap();
    let mut req = EngineRequest::new(9, Prompt::Text("hi".into()));
    req.max_tokens = Some(8);
    let events = collect(&engine, req).await;
    assert_eq!(events.iter().filter(|e| matches!(e.kind, EventKind::Content(_))).count(), 8);
    assert!(matches!(events.last().unwrap().kind, EventKind::End { .. }));
}

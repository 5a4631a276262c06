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
        keep_records: true,
        ..SimConfig::default()
    })
    .unwrap();
    // The bound is the issue's: each chunk's client timestamp within 1 ms of the simulator's
    // send at p99, over a 1,000-token stream (here chat and completions, 2,000 chunks). An ITL
    // has two stamped ends, so its error is bounded by twice that. On a shared 2-core VM a
    // preemption of a millisecond or more can land inside a 2-second stream; up to 5 attempts
    // are made and every attempt is printed. A client that is systematically late (stamping
    // after parsing, say) fails all five.
    let mut next_id = 1;
    let mut attempts = Vec::new();
    for attempt in 1..=5 {
        let (mut lags, mut itl_diffs) = (Vec::new(), Vec::new());
        for api in [Api::Chat, Api::Completions] {
            let engine = OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), api, "m")).unwrap();
            let mut req = EngineRequest::new(next_id, Prompt::Text("tell me a story".into()));
            next_id += 1;
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
            let rec =
                sim.records().into_iter().find(|r| r.request_id == Some(req.request_id)).unwrap();
            assert_eq!(client.len(), 1000);
            assert_eq!(rec.chunks.len(), 1000);
            for (c, s) in client.iter().zip(&rec.chunks) {
                assert!(c >= s, "a chunk cannot arrive before it was sent");
                lags.push(c.duration_since(*s).as_secs_f64() * 1e3);
            }
            itl_diffs.extend(client.windows(2).zip(rec.chunks.windows(2)).map(|(c, s)| {
                ((c[1] - c[0]).as_secs_f64() - (s[1] - s[0]).as_secs_f64()).abs() * 1e3
            }));
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
        let (lag, itl) = (p99(lags), p99(itl_diffs));
        eprintln!("attempt {attempt}: chunk arrival - send p99 = {lag:.3} ms, |ITL diff| p99 = {itl:.3} ms");
        attempts.push((lag, itl));
        if lag < 1.0 && itl < 2.0 {
            return;
        }
    }
    panic!("timestamps missed the 1 ms p99 bound in every attempt: {attempts:?} (arrival - send, ITL diff)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn connections_are_pooled_and_reuse_is_reported() {
    let _serial = serial();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::ZERO,
        itl: Duration::ZERO,
        keep_records: true,
        ..SimConfig::default()
    })
    .unwrap();
    let engine = OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), Api::Chat, "m")).unwrap();
    let mut reused = Vec::new();
    for i in 0..3 {
        let mut req = EngineRequest::new(i, Prompt::Text("hi".into()));
        req.max_tokens = Some(4);
        let events = collect(&engine, req).await;
        let connection = common::connection_of(&events);
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
        keep_records: true,
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
        keep_records: true,
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

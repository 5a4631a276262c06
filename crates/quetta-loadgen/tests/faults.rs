//! One test per simulator fault: the run never panics or hangs, classifies each failure,
//! keeps partial timings, and accounts for every request (completed + failed = dispatched).

use std::sync::Arc;
use std::time::Duration;

use quetta_engine::{Engine, Timeouts};
use quetta_loadgen::{RunConfig, Runner, Work};
use quetta_metrics::RequestRecord;
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};
use quetta_sim::faults::FaultRule;
use quetta_sim::{SimConfig, Simulator};
use quetta_workload::synthetic::SyntheticSpec;

mod common;
use common::VecSink;

/// Run 8 requests (concurrency 2) against a simulator injecting `fault`; return the records.
fn run_with(fault: &str, timeouts: Timeouts) -> (Vec<RequestRecord>, quetta_loadgen::RunOutcome) {
    run_with_retries(fault, timeouts, 0)
}

fn run_with_retries(
    fault: &str,
    timeouts: Timeouts,
    retries: u32,
) -> (Vec<RequestRecord>, quetta_loadgen::RunOutcome) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(2),
        faults: vec![fault.parse::<FaultRule>().unwrap()],
        ..SimConfig::default()
    })
    .unwrap();
    let cfg = OpenAiConfig::new(sim.base_url(), Api::Chat, "sim");
    let engine: Arc<dyn Engine> = Arc::new(OpenAiEngine::new(cfg).unwrap());
    let spec = SyntheticSpec {
        input_len: 8,
        input_stddev: 0.0,
        output_len: 8,
        output_stddev: 0.0,
        chat: true,
        seed: 1,
        ..SyntheticSpec::default()
    };
    let sink = VecSink::default();
    let mut rc = RunConfig::closed(2, 8);
    rc.drain_timeout = Duration::from_secs(20);
    rc.retries = retries;
    rc.retry_backoff = Duration::from_millis(10);
    rc.timeouts = timeouts;
    let out = rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                Runner::new(engine, rc)
                    .sink(Box::new(sink.clone()))
                    .run(Work::Requests(Box::new(spec))),
            )
            .await
        })
        .expect("the run must not hang")
        .unwrap();
    let recs = sink.0.lock().unwrap().clone();
    assert_eq!(recs.len() as u64, out.dispatched, "{fault}: one record per request");
    assert_eq!(
        out.aggregate.completed + out.aggregate.failed,
        out.dispatched,
        "{fault}: completed + failed = dispatched"
    );
    assert_eq!(out.dispatched, 8, "{fault}");
    (recs, out)
}

fn all_fail_with(fault: &str, kind: &str, timeouts: Timeouts) -> Vec<RequestRecord> {
    let (recs, _) = run_with(fault, timeouts);
    for r in &recs {
        assert_eq!(r.error_kind.as_deref(), Some(kind), "{fault}: {:?}", r.error);
        assert!(r.sent_offset_ms.is_some(), "{fault}: partial timings kept");
    }
    recs
}

#[test]
fn http_429_500_503() {
    let recs = all_fail_with("http429", "http_429", Timeouts::default());
    assert!(recs[0].error.as_deref().unwrap().contains("simulated HTTP 429"));
    assert_eq!(recs[0].status, Some(429));
    all_fail_with("http500", "http_5xx", Timeouts::default());
    all_fail_with("http503", "http_5xx", Timeouts::default());
}

#[test]
fn resets_before_after_headers_and_mid_stream() {
    all_fail_with("reset-before-headers", "connection_closed", Timeouts::default());
    all_fail_with("reset-after-headers", "connection_closed", Timeouts::default());
    let recs = all_fail_with("reset-mid-stream", "connection_closed", Timeouts::default());
    // half of the 8 tokens arrived before the reset, and their timings are kept
    assert!(recs.iter().all(|r| r.token_chunks == 4 && r.ttft_ms.is_some()), "{:?}", recs[0]);
}

#[test]
fn stall_trips_the_idle_timeout() {
    let t = Timeouts { idle: Some(Duration::from_millis(200)), ..Timeouts::default() };
    let recs = all_fail_with("stall=2", "timeout_idle", t);
    assert!(recs.iter().all(|r| r.token_chunks == 4));
    // without an idle limit a stall only delays the answer
    let (recs, _) = run_with("stall=0.3@4", Timeouts::default());
    let slow: Vec<_> = recs.iter().filter(|r| r.e2e_ms.unwrap() > 300.0).collect();
    assert_eq!(slow.len(), 2, "requests 4 and 8 stalled");
    assert!(recs.iter().all(RequestRecord::ok));
}

#[test]
fn a_body_left_open_after_done_is_a_complete_answer_on_a_kept_connection() {
    // The server ends each body 0.5 s after `[DONE]`. The answer is complete at `[DONE]`:
    // an idle limit shorter than the wait must not turn it into a timeout, its end is the
    // `[DONE]` frame's, and the body's tail is read before the next request goes out, so
    // the connection goes back to the pool (dropping a body that is still open closes its
    // connection: none would be reused). Of the 6 that could be reused, hyper's pool gets
    // a connection back on a background task after the body ends, so a request sent at once
    // may still open a new one: the count is 5 or 6 here, and only "some" is certain.
    let t = Timeouts { idle: Some(Duration::from_millis(200)), ..Timeouts::default() };
    let (recs, _) = run_with("linger=0.5", t);
    for r in &recs {
        assert!(r.ok(), "{:?}", r.error);
        assert!(r.e2e_ms.unwrap() < 400.0, "end at [DONE], not at the body's end: {:?}", r.e2e_ms);
    }
    let reused = recs.iter().filter(|r| r.connection_reused == Some(true)).count();
    assert!(reused >= 1, "{:?}", recs.iter().map(|r| r.connection_reused).collect::<Vec<_>>());
}

#[test]
fn slow_drip_is_parsed_byte_by_byte() {
    let (recs, _) = run_with("slow-drip", Timeouts::default());
    for r in &recs {
        assert!(r.ok(), "{:?}", r.error);
        assert_eq!(r.output_tokens, Some(8));
        assert_eq!(r.token_chunks, 8);
    }
}

#[test]
fn malformed_streams_are_protocol_errors() {
    all_fail_with("bad-json", "protocol", Timeouts::default());
    all_fail_with("invalid-utf8", "protocol", Timeouts::default());
    let recs = all_fail_with("huge-event", "protocol", Timeouts::default());
    assert!(recs[0].error.as_deref().unwrap().contains("larger than"), "{:?}", recs[0].error);
    all_fail_with("no-done", "incomplete", Timeouts::default());
    all_fail_with("error-event", "server_error", Timeouts::default());
}

#[test]
fn missing_usage_falls_back_to_counted_chunks() {
    let (recs, out) = run_with("no-usage", Timeouts::default());
    assert!(recs.iter().all(|r| r.ok() && r.output_tokens == Some(8)));
    assert_eq!(out.aggregate.summary(&[]).token_count_source, "chunks");
}

#[test]
fn probabilistic_faults_mix_with_successes_and_nothing_is_lost() {
    let (recs, out) = run_with("http503:0.5", Timeouts::default());
    let failed = recs.iter().filter(|r| !r.ok()).count() as u64;
    assert_eq!(failed, out.aggregate.failed);
    assert!(failed > 0 && failed < 8, "{failed} of 8 failed at p = 0.5 (seeded)");
}

#[test]
fn retries_are_off_by_default_and_counted_apart_when_on() {
    let (_, out) = run_with("http503@2", Timeouts::default());
    assert_eq!(out.aggregate.failed, 4, "without retries every second request fails");
    assert_eq!(out.aggregate.retried_requests, 0);
    let (recs, out) = run_with_retries("http503@2", Timeouts::default(), 6);
    assert_eq!(out.aggregate.completed, 8, "retried requests complete");
    let retried: Vec<_> = recs.iter().filter(|r| r.attempts > 1).collect();
    assert!(!retried.is_empty());
    assert_eq!(out.aggregate.retried_requests, retried.len() as u64);
    assert_eq!(
        out.aggregate.retry_attempts,
        retried.iter().map(|r| u64::from(r.attempts - 1)).sum::<u64>()
    );
    for r in &retried {
        assert!(r.retry_errors.iter().all(|k| k == "http_5xx"), "{:?}", r.retry_errors);
        assert_eq!(r.retry_errors.len() as u32, r.attempts - 1);
        // latency from the intended time includes the failed attempts and the backoff
        assert!(r.e2e_from_intended_ms.unwrap() >= r.e2e_ms.unwrap() + 10.0);
    }
    // a malformed stream is not retried: a later attempt would not be the same request
    let (recs, _) = run_with_retries("bad-json", Timeouts::default(), 3);
    assert!(recs.iter().all(|r| r.error_kind.as_deref() == Some("protocol") && r.attempts == 1));
}

/// A synthetic workload that ends at request `at`: on an error (that request cannot be
/// built) when `breaks`, else because it has no more.
struct EndsAt {
    spec: SyntheticSpec,
    at: u64,
    breaks: bool,
    failed: Option<u64>,
}

impl quetta_workload::Workload for EndsAt {
    fn request(&mut self, index: u64) -> Option<quetta_workload::PlannedRequest> {
        if index >= self.at {
            self.failed = Some(index);
            return None;
        }
        Some(self.spec.planned(index))
    }

    fn error(&self) -> Option<quetta_workload::WorkloadError> {
        self.failed.filter(|_| self.breaks).map(|index| quetta_workload::WorkloadError::Request {
            index,
            source: Box::new(quetta_workload::WorkloadError::Invalid {
                name: "prompt length",
                reason: "could not build a prompt of exactly 8 tokens".into(),
            }),
        })
    }
}

#[test]
fn a_workload_that_breaks_ends_the_run_with_its_error_and_keeps_what_was_measured() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        ..SimConfig::default()
    })
    .unwrap();
    let engine: Arc<dyn Engine> =
        Arc::new(OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), Api::Chat, "sim")).unwrap());
    let spec = SyntheticSpec { input_len: 8, output_len: 4, seed: 2, ..SyntheticSpec::default() };
    let work = EndsAt { spec: spec.clone(), at: 5, breaks: true, failed: None };
    let sink = VecSink::default();
    let out = rt
        .block_on(
            Runner::new(engine, RunConfig::closed(2, 10))
                .sink(Box::new(sink.clone()))
                .run(Work::Requests(Box::new(work))),
        )
        .unwrap();
    assert_eq!(out.dispatched, 5, "the requests before the broken one were sent");
    assert_eq!(out.aggregate.completed, 5);
    assert_eq!(sink.0.lock().unwrap().len(), 5, "and recorded");
    assert!(out.interrupted, "the run is partial");
    let e = out.workload_error.expect("the workload's error reaches the outcome");
    assert_eq!(
        e.to_string(),
        "request 5: invalid prompt length: could not build a prompt of exactly 8 tokens"
    );
    // a workload that simply ends is partial without an error
    let engine: Arc<dyn Engine> =
        Arc::new(OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), Api::Chat, "sim")).unwrap());
    let work = EndsAt { spec, at: 7, breaks: false, failed: None };
    let out = rt
        .block_on(Runner::new(engine, RunConfig::closed(2, 10)).run(Work::Requests(Box::new(work))))
        .unwrap();
    assert_eq!(out.dispatched, 7);
    assert!(out.interrupted && out.workload_error.is_none(), "{:?}", out.workload_error);
}

// Shards of one plan, in this binary (each test binary is a link of its own).
#[path = "parts/shards.rs"]
mod shards;

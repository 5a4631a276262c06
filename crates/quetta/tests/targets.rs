//! Targets and what runs beside a benchmark: an engine of the embedder's own (with the
//! runner's timeouts around it), LiteLLM, vision, stress mode with a cache reset, and the
//! server's own metrics.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{lines, tmpdir, validate_run_dir};
use quetta::engine::stream::events;
use quetta::engine::{Delta, Engine, EngineRequest, EventKind, EventStream, Timeouts, Usage};
use quetta::workload::spec::Vision;
use quetta::{Benchmark, Load, SimConfig, Target, WorkloadSpec};
use quetta_sim::Simulator;

/// Echoes `tokens` words, `gap` apart; stalls forever after `stall_after` tokens.
struct Echo {
    gap: Duration,
    stall_after: Option<usize>,
}

impl Engine for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn send(&self, req: EngineRequest) -> EventStream {
        let (gap, stall) = (self.gap, self.stall_after);
        let n = req.max_tokens.unwrap_or(8) as usize;
        events(move |mut tx| async move {
            tx.headers(200);
            for i in 0..n {
                if stall == Some(i) {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(gap).await;
                tx.send(EventKind::Content(Delta::of("word", req.capture_text)));
            }
            tx.send(EventKind::Usage(Usage::tokens(Some(3), Some(n as u64))));
            tx.end(Some("length"));
        })
    }
}

#[test]
fn an_engine_of_ones_own_is_benchmarked_with_the_runners_timeouts() {
    let e: Arc<dyn Engine> = Arc::new(Echo { gap: Duration::from_millis(2), stall_after: None });
    let r = Benchmark::new(Target::engine(e))
        .workload(WorkloadSpec::synthetic(4, 10))
        .load(Load::closed(4))
        .requests(20)
        .run_blocking()
        .unwrap();
    let m = &r.summary.metrics;
    assert_eq!(m.completed, 20);
    assert_eq!(m.total_output_tokens, 200);
    let itl = m.itl_ms.p50.unwrap();
    assert!((1.9..4.0).contains(&itl), "ITL p50 {itl} for 2 ms gaps");
    assert_eq!(r.summary.target.backend, "echo");
    // an engine that stalls: the runner's idle timeout ends each request, for any engine
    let e: Arc<dyn Engine> = Arc::new(Echo { gap: Duration::from_millis(1), stall_after: Some(2) });
    let r = Benchmark::new(Target::engine(e))
        .workload(WorkloadSpec::synthetic(4, 10))
        .requests(6)
        .timeouts(Timeouts { idle: Some(Duration::from_millis(100)), ..Timeouts::default() })
        .run_blocking()
        .unwrap();
    assert_eq!(r.summary.metrics.failed, 6);
    assert_eq!(r.summary.metrics.errors["timeout_idle"], 6, "{:?}", r.summary.metrics.errors);
}

#[test]
fn litellm_headers_and_vision_requests() {
    // A simulator playing a LiteLLM proxy: it adds x-litellm-* headers; images count 256
    // prompt tokens each.
    let proxy = Simulator::start(SimConfig {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        response_headers: vec![
            ("x-litellm-model-id".into(), "abc123".into()),
            ("x-litellm-response-cost".into(), "0.0001".into()),
            ("x-other".into(), "not kept".into()),
        ],
        ..SimConfig::default()
    })
    .unwrap();
    let d = tmpdir("vision");
    let w = WorkloadSpec {
        vision: Some(Vision { images: vec![], per_request: 2 }),
        ..WorkloadSpec::synthetic(10, 4)
    };
    let r = Benchmark::new(Target::litellm(proxy.base_url()).model("openai/gpt-4o-mini"))
        .workload(w)
        .requests(6)
        .output_dir(&d)
        .run_blocking()
        .unwrap();
    assert_eq!(r.summary.target.backend, "litellm-chat");
    // 10 words + 2 images × 256 tokens, as the server counted them
    assert_eq!(r.summary.metrics.total_input_tokens, 6 * (10 + 512));
    for rec in lines(&d.join("requests.jsonl")) {
        assert_eq!(rec["response_headers"]["x-litellm-model-id"], "abc123");
        assert_eq!(rec["response_headers"]["x-litellm-response-cost"], "0.0001");
        assert!(rec["response_headers"].get("x-other").is_none());
    }
    validate_run_dir(&d);
    // an image file that is not one is refused, naming it
    let txt = d.join("img.txt");
    std::fs::write(&txt, "hello").unwrap();
    let w = WorkloadSpec {
        vision: Some(Vision { images: vec![txt], per_request: 1 }),
        ..WorkloadSpec::default()
    };
    let e = Benchmark::new(Target::openai(proxy.base_url()).model("m"))
        .workload(w)
        .requests(2)
        .run_blocking()
        .unwrap_err();
    assert!(e.to_string().contains("img.txt") && e.to_string().contains("not a PNG"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn stress_mode_gets_the_planned_output_length_and_resets_the_cache() {
    // A model that stops early (1..=8 tokens) unless asked to ignore EOS.
    let server = Simulator::start(SimConfig {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        output_len: quetta_sim::OutputLen::Uniform { min: 1, max: 8 },
        ..SimConfig::default()
    })
    .unwrap();
    let go = |stress: bool, reset: Option<&str>| {
        let mut w = WorkloadSpec::synthetic(48, 24);
        w.stress = stress;
        let mut b = Benchmark::new(Target::openai(server.base_url()))
            .workload(w)
            .load(Load::closed(4))
            .requests(40);
        b.reset_prefix_cache = reset.map(str::to_owned);
        b.run_blocking()
    };
    let s = go(true, Some("/reset_prefix_cache")).unwrap().summary;
    assert_eq!(s.metrics.osl_hit_rate, Some(1.0));
    assert_eq!(s.metrics.total_cached_tokens, 0, "stress prompts share no prefix");
    assert!(
        s.notes.iter().any(|n| n.to_string().contains("prefix cache was reset")),
        "{:?}",
        s.notes
    );
    assert_eq!(s.config.mode, quetta::report::Mode::Stress);
    let hit = go(false, None).unwrap().summary.metrics.osl_hit_rate.unwrap();
    assert!(hit < 0.5, "without ignore_eos the simulated model stops early: {hit}");
    // a reset endpoint the server does not have fails the run, clearly
    let e = go(true, Some("/no_such_endpoint")).unwrap_err().to_string();
    assert!(e.contains("/no_such_endpoint") && e.contains("404"), "{e}");
}

#[test]
fn the_servers_own_metrics_and_gpu_telemetry_during_a_run() {
    let d = tmpdir("server-metrics");
    let mut b = Benchmark::new(common::sim(20, 5))
        .workload(WorkloadSpec::synthetic(32, 16))
        .load(Load::closed(6))
        .requests(30)
        .output_dir(&d);
    b.telemetry.server_metrics = Some("auto".into());
    b.telemetry.server_metrics_interval = Duration::from_millis(100);
    b.telemetry.gpu = true;
    let s = b.run_blocking().unwrap().summary;
    let sm = s.server_metrics.as_ref().unwrap();
    assert_eq!(sm.server, "vllm");
    assert!(sm.scrapes >= 2);
    // the server's counters moved by exactly what the client measured
    assert_eq!(sm.deltas["requests_succeeded"].delta, 30.0);
    assert_eq!(sm.deltas["generation_tokens"].delta, s.metrics.total_output_tokens as f64);
    assert_eq!(sm.deltas["prompt_tokens"].delta, s.metrics.total_input_tokens as f64);
    assert_eq!(sm.deltas["ttft_s"].count, Some(30.0));
    let series = common::lines(&d.join("server_metrics.jsonl"));
    assert_eq!(series.len() as u64, sm.scrapes);
    for (i, l) in series.iter().enumerate() {
        common::validate(
            quetta::report::schema::SERVER_METRICS,
            l,
            &format!("server_metrics.jsonl line {}", i + 1),
        );
    }
    // GPU telemetry: a clean one-line note here (no driver); a report where there is one
    match &s.gpu {
        None => assert!(
            s.notes.iter().any(|n| n.to_string().contains("no NVIDIA driver")),
            "{:?}",
            s.notes
        ),
        Some(g) => {
            assert!(g.energy_per_output_token_j.is_some());
            for l in common::lines(&d.join("gpu.jsonl")) {
                common::validate(quetta::report::schema::GPU, &l, "gpu.jsonl line");
            }
        }
    }
    validate_run_dir(&d);
    // a metrics URL nobody answers: the run goes on and says so
    let mut b = common::quick(3);
    b.telemetry.server_metrics = Some("http://127.0.0.1:9/metrics".into());
    let s = b.run_blocking().unwrap().summary;
    assert_eq!(s.metrics.completed, 3);
    // a typed note: an embedder matches on what went wrong, not on words
    let failed = s.notes.iter().find_map(|n| match n {
        quetta::report::Note::ScrapeFailed { url, .. } => Some(url.as_str()),
        _ => None,
    });
    assert_eq!(failed, Some("http://127.0.0.1:9/metrics"), "{:?}", s.notes);
    assert!(s
        .notes
        .iter()
        .any(|n| n.to_string().contains("no scrape of http://127.0.0.1:9/metrics succeeded")));
    let _ = std::fs::remove_dir_all(&d);
}

/// `gpu.jsonl` as the sampler writes it, every line against its schema: two GPUs of the fake
/// source (this machine has no driver), one with an energy counter and one without.
#[test]
fn gpu_samples_follow_their_schema() {
    use quetta_probe::gpu::{FakeGpu, Sampler};
    let d = tmpdir("gpu-schema");
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("gpu.jsonl");
    for counter in [true, false] {
        let source = Box::new(FakeGpu::new(vec![400.0, 100.0], 80, counter));
        let report = Sampler::start(source, Duration::from_millis(5), Some(path.clone())).finish();
        assert_eq!(report.devices.len(), 2);
        let samples = lines(&path);
        // at least the last sample of each GPU, in GPU order
        assert!(samples.len() >= 2 && samples.len() % 2 == 0, "{} lines", samples.len());
        for (i, l) in samples.iter().enumerate() {
            assert_eq!(l["gpu"], (i % 2) as u64, "{l}");
            assert_eq!(l["energy_mj"].is_null(), !counter, "{l}");
            common::validate(quetta::report::schema::GPU, l, &format!("gpu.jsonl line {}", i + 1));
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

//! The Prometheus parser on real expositions: llama.cpp's (captured from the llama.cpp server
//! of the integration tests), a vLLM-style one, and the simulator's.

use std::path::PathBuf;

use quetta_probe::prom::{parse, MetricType};
use quetta_probe::server::{deltas, read, server_kind};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/prometheus").join(name),
    )
    .unwrap()
}

#[test]
fn llama_cpp_exposition() {
    let e = parse(&fixture("llamacpp_b11434.txt")).unwrap();
    assert_eq!(server_kind(&e), "llama.cpp");
    let f = &e.families["llamacpp:prompt_tokens_total"];
    assert_eq!(f.kind, MetricType::Counter);
    assert!(f.help.as_deref().unwrap().starts_with("Number of prompt tokens processed"));
    assert_eq!(e.total("llamacpp:prompt_tokens_total"), Some(2.0));
    assert_eq!(e.total("llamacpp:tokens_predicted_total"), Some(4.0));
    let r = read(&e);
    assert_eq!(r["generation_tokens"].value, 4.0);
    assert_eq!(r["prefix_cache_hits"].value, 0.0);
    assert!((r["prompt_seconds_total"].value - 0.029121).abs() < 1e-12);
    assert_eq!(r["requests_running"].value, 0.0);
}

#[test]
fn vllm_style_exposition_with_labels_histograms_and_escapes() {
    let e = parse(&fixture("vllm_style.txt")).unwrap();
    assert_eq!(server_kind(&e), "vllm");
    // a counter summed over engines; _created samples are not counted in the total
    assert_eq!(e.total("vllm:prompt_tokens_total"), Some(30_720.0));
    assert_eq!(e.total("vllm:request_success_total"), Some(40.0));
    let h = &e.families["vllm:time_to_first_token_seconds"];
    assert_eq!(h.kind, MetricType::Histogram);
    assert_eq!(e.buckets("vllm:time_to_first_token_seconds").last(), Some(&(f64::INFINITY, 40.0)));
    assert_eq!(e.buckets("vllm:time_to_first_token_seconds")[1], (0.02, 5.0));
    let s = &e.families["vllm:request_params_n"];
    assert_eq!(s.kind, MetricType::Summary);
    assert_eq!(s.samples[0].label("model_name"), Some("a \"quoted\" model\\name"));
    assert!(s.samples[0].value.is_nan());
    let u = &e.families["untyped_metric_without_type"];
    assert_eq!((u.kind, u.samples[0].timestamp_ms), (MetricType::Untyped, Some(1_764_500_000_000)));
    let r = read(&e);
    assert_eq!(r["ttft_s"].count, Some(40.0));
    assert_eq!(r["queue_time_s"].value, 1.2);
    assert_eq!(r["kv_cache_usage"].value, 0.4375);
    // deltas against a later scrape: +10 requests, +0.5 s of TTFT
    let later = fixture("vllm_style.txt")
        .replace("vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 40.0", "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 50.0")
        .replace("_sum{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 2.4", "_sum{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 2.9");
    let r2 = read(&parse(&later).unwrap());
    let d = deltas(&r, &r2, &[r.clone(), r2.clone()]);
    assert_eq!(d["ttft_s"].count, Some(10.0));
    assert!((d["ttft_s"].mean.unwrap() - 0.05).abs() < 1e-9);
    assert_eq!(d["prompt_tokens"].delta, 0.0);
    assert_eq!(d["requests_running"].max, Some(3.0));
}

#[test]
fn errors_name_the_line() {
    for (text, line, what) in [
        ("a 1\nb{x=\"1\" 2\n", 2, "expected"),
        ("a 1\n# TYPE b bogus\n", 2, "unknown metric type"),
        ("ok 1\nbad value\n", 2, "bad value"),
        ("x{le=\"0.1\"} 1 notatime\n", 1, "timestamp"),
        ("9lives 1\n", 1, "bad metric name"),
        ("x{a=\"unterminated} 1\n", 1, "unterminated"),
    ] {
        let e = parse(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.reason.contains(what), "{text:?}: {e}");
    }
}

#[test]
fn the_simulators_own_metrics_parse() {
    let sim = quetta_sim::Simulator::start(quetta_sim::SimConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let e = rt
        .block_on(quetta_probe::scrape::scrape_once(&format!("{}/metrics", sim.base_url()), None))
        .unwrap();
    assert_eq!(server_kind(&e), "vllm");
    let r = read(&e);
    assert_eq!(r["ttft_s"].count, Some(0.0));
    assert!(r.contains_key("prefix_cache_hits") && r.contains_key("e2e_s"));
}

/// Triton's exposition (`fixtures/prometheus/triton_style.txt`, written after Triton's
/// metrics documentation: an ensemble in front of a TensorRT-LLM model, as TensorRT-LLM's
/// backend serves it): per-request times from cumulative microsecond counters over the
/// finished requests, summed over the models as every server's totals are.
#[test]
fn triton_exposition() {
    let e = parse(&fixture("triton_style.txt")).unwrap();
    assert_eq!(server_kind(&e), "triton");
    let r = read(&e);
    // 2 × 38 succeeded + 2 × 2 failed = 80 finished requests (the ensemble's and its model's)
    assert_eq!(r["requests_succeeded"].value, 76.0);
    assert_eq!(r["e2e_s"].count, Some(80.0));
    assert!((r["e2e_s"].value - 32.0).abs() < 1e-9, "20 s + 12 s of request time");
    assert!((r["queue_time_s"].value - 0.8).abs() < 1e-9);
    assert!((r["compute_time_s"].value - 16.0).abs() < 1e-9, "input + infer + output, both models");
    assert_eq!(r["first_response_s"].count, Some(40.0));
    assert!((r["first_response_s"].value - 3.2).abs() < 1e-9);
    assert_eq!(r["requests_waiting"].value, 4.0);
    // a later scrape: 40 more requests of the ensemble and its model, 8 s more request time
    let later = fixture("triton_style.txt")
        .replace("version=\"1\"} 38\n", "version=\"1\"} 58\n")
        .replace(
            "nv_inference_request_duration_us{model=\"ensemble\",version=\"1\"} 20000000",
            "nv_inference_request_duration_us{model=\"ensemble\",version=\"1\"} 24000000",
        )
        .replace(
            "nv_inference_request_duration_us{model=\"tensorrt_llm\",version=\"1\"} 12000000",
            "nv_inference_request_duration_us{model=\"tensorrt_llm\",version=\"1\"} 16000000",
        );
    let r2 = read(&parse(&later).unwrap());
    let d = deltas(&r, &r2, &[r.clone(), r2.clone()]);
    assert_eq!(d["e2e_s"].count, Some(40.0));
    assert!((d["e2e_s"].mean.unwrap() - 0.2).abs() < 1e-9, "8 s over 40 requests");
}

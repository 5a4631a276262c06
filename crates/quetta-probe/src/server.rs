//! What a server's own metrics say, across servers: each [`Quantity`] lists the names vLLM,
//! SGLang, TGI, llama.cpp and Triton give it, and [`Delta`] is the change between two
//! scrapes. Triton's per-request times are cumulative microsecond counters beside its request
//! counters rather than histograms; they are read as a histogram's sum and count ([`read`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::prom::Exposition;

/// How a quantity is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A counter (or a histogram's `_sum`/`_count` pair read as totals): the run delta.
    Counter,
    /// A histogram or summary family: Δ`_sum` ÷ Δ`_count` is the mean per event.
    Histogram,
    /// A gauge: its value at each scrape.
    Gauge,
}

/// A server quantity and the names servers give it (the first present wins).
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    pub key: &'static str,
    pub shape: Shape,
    pub names: &'static [&'static str],
}

/// The quantities Quetta reads (configurable by building another table).
pub const QUANTITIES: &[Quantity] = &[
    Quantity {
        key: "prompt_tokens",
        shape: Shape::Counter,
        names: &[
            "vllm:prompt_tokens_total",
            "sglang:prompt_tokens_total",
            "llamacpp:prompt_tokens_total",
            "tgi_request_input_length_sum",
        ],
    },
    Quantity {
        key: "generation_tokens",
        shape: Shape::Counter,
        names: &[
            "vllm:generation_tokens_total",
            "sglang:generation_tokens_total",
            "llamacpp:tokens_predicted_total",
            "tgi_request_generated_tokens_sum",
        ],
    },
    Quantity {
        key: "prefix_cache_queries",
        shape: Shape::Counter,
        names: &["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"],
    },
    Quantity {
        key: "prefix_cache_hits",
        shape: Shape::Counter,
        names: &[
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
            "llamacpp:prompt_tokens_cached_total",
        ],
    },
    Quantity {
        key: "preemptions",
        shape: Shape::Counter,
        names: &["vllm:num_preemptions_total", "vllm:num_preemptions"],
    },
    Quantity {
        key: "requests_succeeded",
        shape: Shape::Counter,
        names: &[
            "vllm:request_success_total",
            "sglang:num_requests_total",
            "tgi_request_success",
            "nv_inference_request_success",
        ],
    },
    Quantity {
        key: "queue_time_s",
        shape: Shape::Histogram,
        names: &[
            "vllm:request_queue_time_seconds",
            "sglang:queue_time_seconds",
            "tgi_request_queue_duration",
        ],
    },
    Quantity {
        key: "prefill_time_s",
        shape: Shape::Histogram,
        names: &["vllm:request_prefill_time_seconds", "sglang:prefill_time_seconds"],
    },
    Quantity {
        key: "decode_time_s",
        shape: Shape::Histogram,
        names: &["vllm:request_decode_time_seconds", "sglang:decode_time_seconds"],
    },
    Quantity {
        key: "ttft_s",
        shape: Shape::Histogram,
        names: &["vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"],
    },
    Quantity {
        key: "e2e_s",
        shape: Shape::Histogram,
        names: &[
            "vllm:e2e_request_latency_seconds",
            "sglang:e2e_request_latency_seconds",
            "tgi_request_duration",
        ],
    },
    // Triton only: its compute (input, infer, output) per request, and its optional
    // first-response histogram (`--metrics-config histogram_latencies=true`; for a streaming
    // backend the first chunk's time, not necessarily the first token's)
    Quantity { key: "compute_time_s", shape: Shape::Histogram, names: &[] },
    Quantity { key: "first_response_s", shape: Shape::Histogram, names: &[] },
    Quantity {
        key: "prompt_seconds_total",
        shape: Shape::Counter,
        names: &["llamacpp:prompt_seconds_total"],
    },
    Quantity {
        key: "decode_seconds_total",
        shape: Shape::Counter,
        names: &["llamacpp:tokens_predicted_seconds_total"],
    },
    Quantity {
        key: "requests_running",
        shape: Shape::Gauge,
        names: &[
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "llamacpp:requests_processing",
            "tgi_batch_current_size",
        ],
    },
    Quantity {
        key: "requests_waiting",
        shape: Shape::Gauge,
        names: &[
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "llamacpp:requests_deferred",
            "tgi_queue_size",
            "nv_inference_pending_request_count",
        ],
    },
    Quantity {
        key: "kv_cache_usage",
        shape: Shape::Gauge,
        names: &[
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio",
        ],
    },
];

/// Which server family an exposition comes from, by its metric names.
pub fn server_kind(e: &Exposition) -> &'static str {
    let has = |p: &str| e.families.keys().any(|k| k.starts_with(p));
    if has("vllm:") {
        "vllm"
    } else if has("sglang:") {
        "sglang"
    } else if has("llamacpp:") {
        "llama.cpp"
    } else if has("tgi_") {
        "tgi"
    } else if has("nv_inference_") {
        "triton"
    } else {
        "unknown"
    }
}

/// One quantity's values in one scrape: the total (counters, gauges) or the histogram's
/// sum and count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reading {
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<f64>,
}

/// Read every known quantity from a scrape.
pub fn read(e: &Exposition) -> BTreeMap<&'static str, Reading> {
    let mut out = BTreeMap::new();
    for q in QUANTITIES {
        let r = match q.shape {
            Shape::Counter | Shape::Gauge => {
                q.names.iter().find_map(|n| e.total(n)).map(|value| Reading { value, count: None })
            }
            Shape::Histogram => q
                .names
                .iter()
                .find_map(|n| {
                    let sum = e.total(&format!("{n}_sum"))?;
                    let count = e.total(&format!("{n}_count"))?;
                    Some(Reading { value: sum, count: Some(count) })
                })
                .or_else(|| triton_time(e, q.key)),
        };
        if let Some(r) = r {
            out.insert(q.key, r);
        }
    }
    out
}

/// Triton's time of a kind over its requests, in seconds: its cumulative microsecond counters
/// over its finished requests (`nv_inference_request_success` + `_failure`), and its
/// first-response histogram in milliseconds.
fn triton_time(e: &Exposition, key: &str) -> Option<Reading> {
    let requests = || {
        Some(
            e.total("nv_inference_request_success")?
                + e.total("nv_inference_request_failure").unwrap_or(0.0),
        )
    };
    let us = |names: &[&str]| {
        let total: Option<f64> = names.iter().map(|n| e.total(n)).sum();
        Some(Reading { value: total? / 1e6, count: Some(requests()?) })
    };
    match key {
        "queue_time_s" => us(&["nv_inference_queue_duration_us"]),
        "e2e_s" => us(&["nv_inference_request_duration_us"]),
        "compute_time_s" => us(&[
            "nv_inference_compute_input_duration_us",
            "nv_inference_compute_infer_duration_us",
            "nv_inference_compute_output_duration_us",
        ]),
        "first_response_s" => {
            let n = "nv_inference_first_response_histogram_ms";
            let sum = e.total(&format!("{n}_sum"))?;
            Some(Reading { value: sum / 1e3, count: Some(e.total(&format!("{n}_count"))?) })
        }
        _ => None,
    }
}

/// The change of one quantity over a run (the type lives in `quetta-metrics`).
pub use quetta_metrics::telemetry::ServerDelta as Delta;

/// Deltas between a first and a last reading; gauges take their maximum over `all`.
/// A counter that went down (a server restart) is reported as its last value, which is the
/// increase since the restart.
pub fn deltas(
    first: &BTreeMap<&'static str, Reading>,
    last: &BTreeMap<&'static str, Reading>,
    all: &[BTreeMap<&'static str, Reading>],
) -> BTreeMap<&'static str, Delta> {
    let mut out = BTreeMap::new();
    for q in QUANTITIES {
        let Some(b) = last.get(q.key) else { continue };
        let d = match q.shape {
            Shape::Gauge => Delta {
                delta: b.value,
                count: None,
                mean: None,
                max: all.iter().filter_map(|r| r.get(q.key)).map(|r| r.value).reduce(f64::max),
            },
            Shape::Counter | Shape::Histogram => {
                let a =
                    first.get(q.key).copied().unwrap_or(Reading { value: 0.0, count: Some(0.0) });
                let grow = |x: f64, y: f64| if y >= x { y - x } else { y };
                let delta = grow(a.value, b.value);
                let count = match (a.count, b.count) {
                    (Some(x), Some(y)) => Some(grow(x, y)),
                    _ => None,
                };
                Delta {
                    delta,
                    count,
                    mean: count.filter(|c| *c > 0.0).map(|c| delta / c),
                    max: None,
                }
            }
        };
        out.insert(q.key, d);
    }
    out
}

//! Prometheus exposition of the simulator's counters, with vLLM's metric names.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::SimRecord;

const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [AtomicU64; 20],
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, secs: f64) {
        let i = BUCKETS.iter().position(|&b| secs <= b).unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add((secs * 1e6) as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, model: &str) {
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += self.counts[i].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{model_name=\"{model}\",le=\"{b}\"}} {cum}");
        }
        cum += self.counts[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{model_name=\"{model}\",le=\"+Inf\"}} {cum}");
        let sum = self.sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{model_name=\"{model}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{model_name=\"{model}\"}} {cum}");
    }
}

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    running: AtomicI64,
    success: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    cache_queries: AtomicU64,
    cache_hits: AtomicU64,
    ttft: Histogram,
    e2e: Histogram,
}

impl Metrics {
    pub(crate) fn on_start(&self) {
        self.running.fetch_add(1, Relaxed);
    }

    pub(crate) fn on_finish(&self, r: &SimRecord) {
        self.running.fetch_sub(1, Relaxed);
        if r.status == 200 && r.error.is_none() {
            self.success.fetch_add(1, Relaxed);
        }
        self.prompt_tokens.fetch_add(r.prompt_tokens, Relaxed);
        self.generation_tokens.fetch_add(r.completion_tokens, Relaxed);
        self.cache_queries.fetch_add(r.prompt_tokens, Relaxed);
        self.cache_hits.fetch_add(r.cached_tokens, Relaxed);
        let first = r.chunks.first().copied().unwrap_or(r.end);
        self.ttft.observe(first.saturating_duration_since(r.arrival).as_secs_f64());
        self.e2e.observe(r.end.saturating_duration_since(r.arrival).as_secs_f64());
    }

    pub(crate) fn render(&self, model: &str) -> String {
        let mut s = String::with_capacity(4096);
        let m = model.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            s,
            "# HELP vllm:num_requests_running Number of requests in model execution batches."
        );
        let _ = writeln!(s, "# TYPE vllm:num_requests_running gauge");
        let _ = writeln!(
            s,
            "vllm:num_requests_running{{model_name=\"{m}\"}} {}",
            self.running.load(Relaxed).max(0)
        );
        let _ = writeln!(s, "# TYPE vllm:num_requests_waiting gauge");
        let _ = writeln!(s, "vllm:num_requests_waiting{{model_name=\"{m}\"}} 0");
        let _ = writeln!(s, "# TYPE vllm:request_success_total counter");
        let _ = writeln!(
            s,
            "vllm:request_success_total{{model_name=\"{m}\"}} {}",
            self.success.load(Relaxed)
        );
        let _ = writeln!(s, "# TYPE vllm:prompt_tokens_total counter");
        let _ = writeln!(
            s,
            "vllm:prompt_tokens_total{{model_name=\"{m}\"}} {}",
            self.prompt_tokens.load(Relaxed)
        );
        let _ = writeln!(s, "# TYPE vllm:generation_tokens_total counter");
        let _ = writeln!(
            s,
            "vllm:generation_tokens_total{{model_name=\"{m}\"}} {}",
            self.generation_tokens.load(Relaxed)
        );
        for (name, v) in [
            ("vllm:prefix_cache_queries_total", &self.cache_queries),
            ("vllm:prefix_cache_hits_total", &self.cache_hits),
        ] {
            let _ = writeln!(s, "# TYPE {name} counter");
            let _ = writeln!(s, "{name}{{model_name=\"{m}\"}} {}", v.load(Relaxed));
        }
        self.ttft.render(&mut s, "vllm:time_to_first_token_seconds", &m);
        self.e2e.render(&mut s, "vllm:e2e_request_latency_seconds", &m);
        s
    }
}

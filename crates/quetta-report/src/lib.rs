//! `quetta-report`: what a run leaves behind and what a person reads.
//!
//! - [`Summary`]: the versioned `summary.json` (pinned by `docs/schema/summary.schema.json`,
//!   which tests validate against);
//! - [`render_summary`]: the terminal summary with percentile columns;
//! - [`rebuild`]: a summary's metrics recomputed from `requests.jsonl` alone, detecting a
//!   torn last line.

pub mod chart;
pub mod html;
pub mod parquet;
pub mod pdf;

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use quetta_metrics::{Aggregate, MetricsSummary, RequestRecord, SloSet, Stats};
use serde::{Deserialize, Serialize};

/// The version of `summary.json`'s layout. Bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The JSON Schema of `summary.json`.
pub const SUMMARY_SCHEMA: &str = include_str!("../../../docs/schema/summary.schema.json");

/// Where the run sent its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub backend: String,
    pub base_url: String,
    pub endpoint: String,
    pub model: String,
    /// The run started the embedded simulator because no `--base-url` was given.
    pub embedded_simulator: bool,
}

/// How the client itself fared (is the load generator the bottleneck?).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientStats {
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    pub peak_rss_kib: u64,
    pub worker_threads: usize,
    /// The client machine (a saved baseline says where it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
}

/// The machine a run was measured from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    pub os: String,
    pub arch: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub tool: String,
    pub tool_version: String,
    /// UTC start of the measured phase, RFC 3339.
    pub started_at: String,
    /// The run was interrupted (Ctrl-C), ran out of workload, or was rebuilt from records.
    pub partial: bool,
    /// Every setting of the run (never a secret).
    pub config: serde_json::Value,
    pub target: Target,
    /// Measured requests the configuration planned (null when bounded by duration only).
    pub planned: Option<u64>,
    /// Requests released by the load generator: completed + failed.
    pub dispatched: u64,
    /// Requests handed to the server (dispatched minus those cancelled while queued).
    pub sent: u64,
    pub warmup_completed: u64,
    pub warmup_failed: u64,
    pub requested_rate: Option<f64>,
    pub achieved_send_rate: Option<f64>,
    pub cancelled_in_drain: u64,
    #[serde(flatten)]
    pub metrics: MetricsSummary,
    pub client: ClientStats,
    /// Notes a reader must see (approximate token counts, client saturation, ...).
    pub notes: Vec<String>,
    /// Multi-turn runs: how the sessions ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsSummary>,
    /// `--server-metrics`: what the server's own Prometheus metrics said over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<serde_json::Value>,
    /// Steady-state window and over-saturation (requests in flight still rising), from the
    /// per-second series in `timeseries.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<quetta_metrics::series::Steadiness>,
    /// `--gpu-telemetry`: power and energy of the server's GPUs over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<serde_json::Value>,
    /// The mergeable aggregate (HdrHistograms), for combining runs from many machines.
    pub aggregate: Aggregate,
}

/// How the sessions of a multi-turn run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionsSummary {
    pub started: u64,
    /// Every turn completed.
    pub completed: u64,
    /// A turn failed, which ended the session.
    pub failed: u64,
    /// Stopped by the duration, the request limit or Ctrl-C.
    pub truncated: u64,
}

/// The per-turn table of a multi-turn run (empty for other runs).
pub fn turn_table(m: &MetricsSummary) -> String {
    let mut s = String::new();
    if m.per_turn.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "{:<6}{:>6}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>8}",
        "turn",
        "ok",
        "fail",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "E2E p50",
        "E2E p99",
        "input",
        "prefill",
        "cached",
        "hit %"
    );
    let tok = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
    let mut estimated = false;
    for t in &m.per_turn {
        let est = t.cached_token_source == "estimate";
        estimated |= est;
        let _ = writeln!(
            s,
            "{:<6}{:>6}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>8}",
            t.turn,
            t.completed,
            t.failed,
            cell(t.ttft_ms.p50),
            cell(t.ttft_ms.p99),
            cell(t.tpot_ms.p50),
            cell(t.e2e_ms.p50),
            cell(t.e2e_ms.p99),
            tok(t.input_tokens_mean),
            tok(t.new_prefill_tokens_mean),
            format!("{}{}", tok(t.cached_tokens_mean), if est { "~" } else { "" }),
            t.cache_hit_rate.map_or_else(|| "-".to_owned(), |r| format!("{:.1}", r * 100.0)),
        );
    }
    let _ = writeln!(
        s,
        "(latencies in ms; token columns are means per request; {})",
        if estimated {
            "~: cached tokens estimated from the previous turn, the server reported none"
        } else {
            "cached tokens as the server reported them"
        }
    );
    s
}

/// Format an optional number of milliseconds for a table cell.
fn cell(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 10_000.0 => format!("{v:.0}"),
        Some(v) if v >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
        None => "-".into(),
    }
}

/// The percentile table of a summary's latency metrics.
pub fn metric_table(m: &MetricsSummary) -> String {
    let rows: [(&str, &Stats); 10] = [
        ("TTFT", &m.ttft_ms),
        ("TTFO (first answer token)", &m.ttfo_ms),
        ("TPOT", &m.tpot_ms),
        ("ITL (pooled)", &m.itl_ms),
        ("ITL (per-request mean)", &m.itl_request_mean_ms),
        ("E2E", &m.e2e_ms),
        ("TTFT from intended send", &m.ttft_from_intended_ms),
        ("E2E from intended send", &m.e2e_from_intended_ms),
        ("Queue (slot + connection)", &m.queue_ms),
        ("Schedule lag (client)", &m.schedule_lag_ms),
    ];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "latency (ms)", "count", "mean", "min", "p50", "p90", "p95", "p99", "p99.9", "max"
    );
    for (name, st) in rows {
        if st.count == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "{:<28}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
            name,
            st.count,
            cell(st.mean),
            cell(st.min),
            cell(st.p50),
            cell(st.p90),
            cell(st.p95),
            cell(st.p99),
            cell(st.p999),
            cell(st.max)
        );
        if !st.extra.is_empty() {
            let extra: Vec<String> =
                st.extra.iter().map(|(k, v)| format!("{k}={}", cell(*v))).collect();
            let _ = writeln!(s, "{:<28}  {}", "", extra.join("  "));
        }
    }
    s
}

/// The terminal summary of a run.
pub fn render_summary(sum: &Summary, output_dir: Option<&Path>) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let t = &sum.target;
    let _ = writeln!(s, "\n== Quetta results{} ==", if sum.partial { " (PARTIAL)" } else { "" });
    let _ = writeln!(
        s,
        "target     {} {} model {}{}",
        t.backend,
        t.base_url,
        t.model,
        if t.embedded_simulator { " (embedded simulator)" } else { "" }
    );
    let _ = writeln!(
        s,
        "requests   {} completed, {} failed{}{}  in {:.2} s",
        m.completed,
        m.failed,
        sum.planned.map_or(String::new(), |p| format!(" of {p} planned")),
        if sum.warmup_completed + sum.warmup_failed > 0 {
            format!(" (+{} warmup)", sum.warmup_completed + sum.warmup_failed)
        } else {
            String::new()
        },
        m.duration_s
    );
    let _ = writeln!(
        s,
        "throughput {:.2} req/s ({:.1} req/min), output {:.1} tok/s, input {:.1} tok/s, total {:.1} tok/s",
        m.request_throughput,
        m.request_throughput * 60.0,
        m.output_token_throughput,
        m.input_token_throughput,
        m.total_token_throughput
    );
    let _ = writeln!(
        s,
        "tokens     {} in, {} out (output counts from {}, input counts from {}){}",
        m.total_input_tokens,
        m.total_output_tokens,
        m.token_count_source,
        m.input_token_source,
        if m.total_cached_tokens > 0 {
            format!(", {} cached", m.total_cached_tokens)
        } else {
            String::new()
        }
    );
    if let (Some(req), Some(ach)) = (sum.requested_rate, sum.achieved_send_rate) {
        let _ =
            writeln!(s, "rate       requested {req:.2} req/s, achieved send rate {ach:.2} req/s");
    }
    if let Some(x) = &sum.sessions {
        let _ = writeln!(
            s,
            "sessions   {} started: {} completed, {} failed, {} cut short",
            x.started, x.completed, x.failed, x.truncated
        );
    }
    if let Some(r) = m.osl_hit_rate {
        let _ = writeln!(
            s,
            "output     {:.1}% of requests generated exactly the planned length",
            r * 100.0
        );
    }
    let _ = writeln!(s);
    s.push_str(&metric_table(m));
    if !m.per_turn.is_empty() {
        let _ = writeln!(s);
        s.push_str(&turn_table(m));
    }
    if m.errors.is_empty() {
        let _ = writeln!(s, "\nerrors     none");
    } else {
        let e: Vec<String> = m.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(s, "\nerrors     {}", e.join(", "));
    }
    if let Some(g) = &m.goodput {
        let per: Vec<String> =
            g.share_meeting.iter().map(|(k, v)| format!("{k} {:.1}%", v * 100.0)).collect();
        let _ = writeln!(
            s,
            "goodput    {:.2} req/s meeting {} ({:.1}% of requests; {})",
            g.request_rate,
            g.slo,
            g.share_meeting_all * 100.0,
            per.join(", ")
        );
    }
    if let Some(st) = &sum.steady_state {
        let _ = writeln!(
            s,
            "load       in flight {:.1} (first half) -> {:.1} (second half){}{}",
            st.in_flight_first_half,
            st.in_flight_second_half,
            match (st.steady_from_s, st.steady_to_s) {
                (Some(a), Some(b)) if !st.over_saturated => format!(", steady from {a} s to {b} s"),
                _ => String::new(),
            },
            if st.over_saturated { "; OVER-SATURATED: the server does not keep up" } else { "" }
        );
    }
    if let Some(sm) = &sum.server_metrics {
        let d = &sm["deltas"];
        let mut parts =
            vec![format!("{} ({} scrapes", sm["server"].as_str().unwrap_or("?"), sm["scrapes"])];
        if sm["failed_scrapes"].as_u64().unwrap_or(0) > 0 {
            let _ = write!(parts[0], ", {} failed", sm["failed_scrapes"]);
        }
        parts[0].push(')');
        for (k, label, scale, unit) in [
            ("queue_time_s", "queue", 1e3, "ms"),
            ("prefill_time_s", "prefill", 1e3, "ms"),
            ("decode_time_s", "decode", 1e3, "ms"),
            ("ttft_s", "TTFT", 1e3, "ms"),
            ("e2e_s", "E2E", 1e3, "ms"),
        ] {
            if let Some(v) = d[k]["mean"].as_f64() {
                parts.push(format!("{label} mean {:.1} {unit}", v * scale));
            }
        }
        if let (Some(h), Some(q)) =
            (d["prefix_cache_hits"]["delta"].as_f64(), d["prefix_cache_queries"]["delta"].as_f64())
        {
            if q > 0.0 {
                parts.push(format!("prefix-cache hit rate {:.1}%", h / q * 100.0));
            }
        }
        if let Some(p) = d["preemptions"]["delta"].as_f64() {
            parts.push(format!("{p:.0} preemptions"));
        }
        let _ = writeln!(s, "server     {}", parts.join(", "));
    }
    if let Some(g) = &sum.gpu {
        if let Some(e) = g["energy_j"].as_f64() {
            let _ = writeln!(
                s,
                "gpu        {} GPUs, average {:.0} W, {:.1} J{}",
                g["devices"].as_array().map_or(0, Vec::len),
                g["avg_power_w"].as_f64().unwrap_or(0.0),
                e,
                g["energy_per_output_token_j"]
                    .as_f64()
                    .map_or(String::new(), |j| format!(", {j:.3} J per output token"))
            );
        }
    }
    if m.retried_requests > 0 {
        let _ = writeln!(
            s,
            "retried    {} requests needed {} extra attempts (--retries)",
            m.retried_requests, m.retry_attempts
        );
    }
    if m.stale_connection_retries > 0 {
        let _ = writeln!(
            s,
            "retries    {} requests were resent after the server closed their pooled connection (see docs/METRICS.md)",
            m.stale_connection_retries
        );
    }
    let _ = writeln!(
        s,
        "client     cpu {:.2} s user + {:.2} s system, peak RSS {} MiB",
        sum.client.cpu_user_s,
        sum.client.cpu_system_s,
        sum.client.peak_rss_kib / 1024
    );
    for n in &sum.notes {
        let _ = writeln!(s, "note       {n}");
    }
    if let Some(d) = output_dir {
        let _ = writeln!(s, "results    {}", d.display());
    }
    s
}

/// `requests.jsonl` could not be read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}:{line}: not a request record: {reason}")]
    BadLine { path: String, line: usize, reason: String },
}

/// The result of reading `requests.jsonl` back.
#[derive(Debug)]
pub struct Rebuilt {
    pub aggregate: Aggregate,
    pub records: u64,
    /// Records of requests that reached the server.
    pub records_sent: u64,
    /// The last line was cut off mid-write (a crash); it was left out.
    pub torn_last_line: bool,
}

/// Rebuild an aggregate from `requests.jsonl`. A malformed line other than a torn last
/// line is an error naming the file and line.
pub fn rebuild(path: &Path, slos: Option<SloSet>) -> Result<Rebuilt, RebuildError> {
    let p = path.display().to_string();
    let f =
        std::fs::File::open(path).map_err(|source| RebuildError::Io { path: p.clone(), source })?;
    let mut agg = Aggregate::new(slos);
    let mut n = 0;
    let mut sent = 0;
    let mut torn = false;
    let lines: Vec<_> = std::io::BufReader::new(f)
        .split(b'\n')
        .collect::<Result<_, _>>()
        .map_err(|source| RebuildError::Io { path: p.clone(), source })?;
    let last = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<RequestRecord>(line) {
            Ok(r) => {
                agg.add(&r);
                n += 1;
                sent += u64::from(r.sent_offset_ms.is_some());
            }
            Err(e) if i + 1 == last => {
                // The file does not end with '\n' after this line: a write cut short.
                let _ = e;
                torn = true;
            }
            Err(e) => {
                return Err(RebuildError::BadLine { path: p, line: i + 1, reason: e.to_string() })
            }
        }
    }
    Ok(Rebuilt { aggregate: agg, records: n, records_sent: sent, torn_last_line: torn })
}

/// UTC RFC 3339 time (seconds) for a Unix timestamp, without a date crate.
pub fn rfc3339(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil_from_days
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_030_235), "2026-11-30T09:17:15Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}

//! `summary.json`: the typed summary of a run, and the terminal rendering of it.

use std::fmt::Write as _;
use std::path::Path;

use quetta_metrics::{Aggregate, GpuReport, MetricsSummary, ServerReport, SloVerdict, Stats};
use serde::{Deserialize, Serialize};

/// The version of a run directory's layout (`summary.json` and `run.json` carry it). Bumped
/// on any incompatible change; 2: records spell the gaps between tokens `itl_us` (integer
/// microseconds, 1: `itl_ms` in milliseconds) and the series has `itl_mean_ms`. Quetta reads
/// both.
pub const SCHEMA_VERSION: u32 = 2;

/// The JSON Schema of `summary.json`.
pub const SUMMARY_SCHEMA: &str = include_str!("../../../docs/schema/summary.schema.json");

/// What the run was asked to do, as recorded in `summary.json` and `run.json` (never a
/// secret: whether a key was given, not the key; header names, not values). The field
/// names are the summary's keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSettings {
    /// `chat` or `completions`.
    pub endpoint: String,
    pub model: String,
    /// `closed`, `open` or `trace` (the workload's own times), `sessions` for multi-turn runs.
    pub load: String,
    pub concurrency: Option<usize>,
    pub request_rate: Option<f64>,
    /// `poisson`, `gamma`, `constant`, `ramp` or `bursts` (open loops).
    pub arrival: Option<String>,
    pub trace: Option<String>,
    pub dataset: Option<String>,
    pub trace_speed: Option<f64>,
    pub tokenizer: Option<String>,
    pub burstiness: Option<f64>,
    pub max_concurrency: Option<usize>,
    pub num_requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub warmup: u64,
    pub drain_timeout_s: f64,
    pub profile: Option<String>,
    pub input_len: u32,
    pub input_len_stddev: f64,
    pub output_len: u32,
    pub output_len_stddev: f64,
    /// Synthetic prompt lengths drawn uniformly from `[len·(1−r), len·(1+r)]`; the output
    /// lengths too, unless `output_range_ratio` says otherwise.
    pub range_ratio: Option<f64>,
    /// The output lengths' ratio, where it differs from `range_ratio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_range_ratio: Option<f64>,
    /// Tokens of one prefix shared by every synthetic prompt.
    pub prefix_len: Option<u32>,
    pub ignore_eos: bool,
    pub exact_output_length: bool,
    pub stream: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: u64,
    pub slo: Option<String>,
    pub http2: bool,
    pub insecure: bool,
    pub api_key_given: bool,
    pub extra_header_names: Vec<String>,
    /// The embedded simulator's settings, when it was the target.
    pub simulator: Option<SimSettings>,
    /// `normal` or `stress`.
    pub mode: String,
    pub reset_prefix_cache: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionSettings>,
    /// The run's name (`--label`).
    pub label: Option<String>,
    /// `--metadata KEY=VALUE` pairs.
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// The embedded simulator's settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimSettings {
    pub ttft_ms: f64,
    pub itl_ms: f64,
}

/// How a multi-turn run paced its sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionSettings {
    /// The session file, or the profile's name.
    pub source: String,
    /// `sharegpt`, `turns-jsonl` or `synth` (files only).
    pub format: Option<String>,
    pub session_concurrency: Option<usize>,
    pub session_rate: Option<f64>,
    /// `per-session`, `interleaved` or `recorded`.
    pub pacing: String,
    pub think_time: String,
    /// `engine` or `recorded`.
    pub history: String,
    pub num_sessions: Option<u64>,
    pub max_turns: Option<usize>,
}

/// Where the run sent its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub backend: String,
    pub base_url: String,
    pub endpoint: String,
    pub model: String,
    /// The run started the embedded simulator because no `--base-url` was given.
    pub embedded_simulator: bool,
    /// The run was predicted on a twin's virtual clock (`quetta-sim predict`, `--predict`),
    /// not measured: no client ran, so it has no client or connection figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub predicted: bool,
    /// What the run's requests asked of the server (absent: generation), which decides the
    /// metrics that apply (docs/METRICS.md, Protocols).
    #[serde(default, skip_serializing_if = "RequestKind::is_generate")]
    pub kind: RequestKind,
}

/// The backend named by a run predicted on a twin's virtual clock (`Target::predicted`).
pub const PREDICTED_BACKEND: &str = "quetta-sim twin (predicted)";

impl Target {
    /// Whether the run was predicted on a twin, not measured.
    pub fn is_predicted(&self) -> bool {
        self.predicted
    }

    /// A target nothing is known of (a rebuilt run without `run.json`).
    pub fn unknown() -> Self {
        Self {
            backend: "unknown".into(),
            base_url: "unknown".into(),
            endpoint: "chat".into(),
            model: "unknown".into(),
            embedded_simulator: false,
            predicted: false,
            kind: RequestKind::Generate,
        }
    }
}

pub use quetta_metrics::{ClientStats, Host, RequestKind};

/// `summary.json`: its run-level numbers (`completed`, `ttft_ms`, ...) are [`MetricsSummary`]'s,
/// read through `Deref` as the file flattens them.
///
/// ```no_run
/// let s = quetta_report::RunDir::open("results/run-1")?.read_summary()?;
/// println!("{} of {:?} planned completed, TTFT p99 {:?} ms", s.completed, s.planned, s.ttft_ms.p99);
/// # Ok::<(), quetta_report::ReportError>(())
/// ```
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
    pub config: RunSettings,
    pub target: Target,
    /// Measured requests the configuration planned (null when bounded by duration only).
    pub planned: Option<u64>,
    /// Requests released by the load generator, as it counted them; every one has a record
    /// (completed + failed), or a note says how many were lost.
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
    /// Why the workload ended before the planned requests, when it ended on an error (a
    /// request it could not build): the run failed, and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_error: Option<String>,
    /// Multi-turn runs: how the sessions ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsSummary>,
    /// `--server-metrics`: what the server's own Prometheus metrics said over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerReport>,
    /// Steady-state window and over-saturation (requests in flight still rising), from the
    /// per-second series in `timeseries.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<quetta_metrics::series::Steadiness>,
    /// `--gpu-telemetry`: power and energy of the server's GPUs over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuReport>,
    /// A shard of a sharded run (`--shard K/N`): which, and its clock against shard 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardRun>,
    /// A run merged from shards (`quetta-bench merge`, or shard 0 at the end of a sharded
    /// run): every shard, its clock and start, and what it planned and measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsSummary>,
    /// The mergeable aggregate (HdrHistograms), for combining runs from many machines.
    pub aggregate: Aggregate,
}

/// One shard's place in a sharded run (docs/METRICS.md, Sharded runs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardRun {
    pub index: u32,
    pub count: u32,
    /// Shard 0's address, when the shards met there (`--coordinator`).
    #[serde(default)]
    pub coordinator: Option<String>,
    /// Measured requests this shard's slice of the plan holds (null: bounded by duration).
    #[serde(default)]
    pub planned: Option<u64>,
    /// Shard 0's wall clock minus this shard's, from the exchange with the shortest round
    /// trip; its error is at most half of `clock_rtt_ms`.
    #[serde(default)]
    pub clock_offset_ms: Option<f64>,
    #[serde(default)]
    pub clock_rtt_ms: Option<f64>,
    /// The common start every shard was given, on shard 0's wall clock (ns since the epoch).
    #[serde(default)]
    pub start_unix_ns: Option<i64>,
    /// When this shard's measured phase started, on its own wall clock (ns since the epoch).
    #[serde(default)]
    pub started_unix_ns: Option<i64>,
    /// This shard's start on shard 0's clock minus the common start.
    #[serde(default)]
    pub start_skew_ms: Option<f64>,
}

/// How each shard of a merged run went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardsSummary {
    pub count: u32,
    /// The common start (shard 0's wall clock, ns since the epoch), when the shards met.
    pub start_unix_ns: Option<i64>,
    /// The largest start skew, absolute, in ms.
    pub max_start_skew_ms: Option<f64>,
    /// The largest clock offset to shard 0, absolute, in ms.
    pub max_clock_offset_ms: Option<f64>,
    pub shards: Vec<ShardResult>,
}

impl ShardsSummary {
    /// A merged run missing a shard's part is not the run that was asked for: which shards
    /// died or are missing, in a sentence (`None`: every shard's part is in).
    pub fn lost(&self) -> Option<String> {
        let died: Vec<String> = self
            .shards
            .iter()
            .filter(|r| r.status == "died")
            .map(|r| r.index.to_string())
            .collect();
        let missing = (self.count as usize).saturating_sub(self.shards.len());
        (!died.is_empty() || missing > 0).then(|| {
            format!(
                "the run lost shards: {} died, {missing} missing; the results hold what the others measured",
                if died.is_empty() { "none".into() } else { died.join(", ") }
            )
        })
    }
}

/// One shard of a merged run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardResult {
    pub index: u32,
    /// `finished`, `partial` (it wrote a summary marked partial), `died` (records but no
    /// summary: they are kept) or `missing` (nothing from it).
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    /// Measured requests its slice of the plan holds (null: unknown).
    pub planned: Option<u64>,
    pub completed: u64,
    pub failed: u64,
    pub clock_offset_ms: Option<f64>,
    pub clock_rtt_ms: Option<f64>,
    pub start_skew_ms: Option<f64>,
    /// Its own CPU and memory (null: it wrote no summary).
    pub client: Option<ClientStats>,
}

/// The run-level numbers read as the summary's own fields, as in `summary.json` (where they
/// are flattened): `summary.completed`, `summary.ttft_ms.p50`.
impl std::ops::Deref for Summary {
    type Target = MetricsSummary;

    fn deref(&self) -> &MetricsSummary {
        &self.metrics
    }
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

/// The latency rows every view of a run shows (terminal, HTML, PDF), in order: the non-empty
/// ones, and of a predicted run (no client ran) none of the client's own figures (queue,
/// schedule lag, read lag, turnaround, release), which it records as zeros.
pub(crate) fn latency_rows(sum: &Summary) -> Vec<(&'static str, &Stats)> {
    let m = &sum.metrics;
    let co = &m.client_overhead;
    let per_input = m.per_input_ms.as_ref();
    let measured = [
        ("TTFT", Some(&m.ttft_ms)),
        ("TTFO (first answer token)", Some(&m.ttfo_ms)),
        ("TPOT", Some(&m.tpot_ms)),
        ("ITL (pooled)", Some(&m.itl_ms)),
        ("ITL (per-request mean)", Some(&m.itl_request_mean_ms)),
        ("E2E", Some(&m.e2e_ms)),
        ("E2E per input", per_input),
        ("TTFT from intended send", Some(&m.ttft_from_intended_ms)),
        ("E2E from intended send", Some(&m.e2e_from_intended_ms)),
    ];
    let client = [
        ("Queue (slot + connection)", Some(&m.queue_ms)),
        ("Schedule lag (client)", Some(&m.schedule_lag_ms)),
        ("Read lag (client)", Some(&co.read_lag_ms)),
        ("Turnaround (client)", Some(&co.turnaround_ms)),
        ("Release (client)", Some(&co.release_ms)),
    ];
    let client = if sum.target.is_predicted() { &client[..0] } else { &client[..] };
    measured
        .iter()
        .chain(client)
        .filter_map(|(name, st)| st.filter(|st| st.count > 0).map(|st| (*name, st)))
        .collect()
}

/// The throughput and token lines: of generation, or (embeddings, rankings) of inputs.
fn throughput_lines(sum: &Summary) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let cached = if m.total_cached_tokens > 0 {
        format!(", {} cached", m.total_cached_tokens)
    } else {
        String::new()
    };
    if !sum.target.kind.generates() {
        let _ = writeln!(
            s,
            "throughput {:.2} req/s ({:.1} req/min), {:.1} inputs/s, input {:.1} tok/s",
            m.request_throughput,
            m.request_throughput * 60.0,
            m.input_throughput,
            m.input_token_throughput
        );
        let _ = writeln!(
            s,
            "tokens     {} in over {} inputs (counts from {}){cached}",
            m.total_input_tokens, m.total_inputs, m.input_token_source
        );
        return s;
    }
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
        "tokens     {} in, {} out (output counts from {}, input counts from {}){cached}",
        m.total_input_tokens, m.total_output_tokens, m.token_count_source, m.input_token_source,
    );
    if m.total_audio_s > 0.0 {
        let _ = writeln!(
            s,
            "audio      {:.1} s transcribed, {:.2} s of audio per second (RTFx)",
            m.total_audio_s, m.rtfx
        );
    }
    s
}

/// The percentile table of a summary's latency metrics.
pub fn metric_table(sum: &Summary) -> String {
    let rows = latency_rows(sum);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "latency (ms)", "count", "mean", "min", "p50", "p90", "p95", "p99", "p99.9", "max"
    );
    for (name, st) in rows {
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

/// What the server's own metrics said, in one line.
fn server_line(sm: &ServerReport) -> String {
    let mut head = format!("{} ({} scrapes", sm.server, sm.scrapes);
    if sm.failed_scrapes > 0 {
        let _ = write!(head, ", {} failed", sm.failed_scrapes);
    }
    head.push(')');
    let mut parts = vec![head];
    for (k, label) in [
        ("queue_time_s", "queue"),
        ("prefill_time_s", "prefill"),
        ("decode_time_s", "decode"),
        ("ttft_s", "TTFT"),
        ("first_response_s", "first response"),
        ("compute_time_s", "compute"),
        ("e2e_s", "E2E"),
    ] {
        if let Some(v) = sm.mean(k) {
            parts.push(format!("{label} mean {:.1} ms", v * 1e3));
        }
    }
    if let Some(r) = sm.prefix_cache_hit_rate() {
        parts.push(format!("prefix-cache hit rate {:.1}%", r * 100.0));
    }
    if let Some(p) = sm.deltas.get("preemptions") {
        parts.push(format!("{:.0} preemptions", p.delta));
    }
    parts.join(", ")
}

/// The run-level SLO verdict, in one line.
pub fn verdict_line(v: &SloVerdict) -> String {
    let each: Vec<String> = v
        .objectives
        .iter()
        .map(|o| match o.value_ms {
            Some(v) => format!(
                "{} {} ({} ms)",
                if o.pass { "met" } else { "MISSED" },
                o.objective,
                crate::chart::figure(Some(v))
            ),
            None => format!("MISSED {} (no samples)", o.objective),
        })
        .collect();
    format!("{}: {}", if v.pass { "PASS" } else { "FAIL" }, each.join("; "))
}

/// `PARTIAL: 18 of 200 planned` for a run that was cut short (`PARTIAL` alone when no count
/// was planned), as the terminal, the sweep table and the reports show it; `None` for a
/// whole run.
pub fn partial_label(sum: &Summary) -> Option<String> {
    if !sum.partial {
        return None;
    }
    let ended = sum.metrics.completed + sum.metrics.failed;
    Some(cut_short(ended, sum.planned))
}

/// `FAILED: …` for a run that failed as a whole, as the reports' banner and the summary's
/// note say it: its workload ended on an error, or every measured request failed; `None`
/// otherwise.
pub fn failed_label(sum: &Summary) -> Option<String> {
    if let Some(e) = &sum.workload_error {
        return Some(workload_failed(sum.dispatched, sum.planned, e));
    }
    let m = &sum.metrics;
    (m.completed == 0 && m.failed > 0)
        .then(|| format!("FAILED: every one of the {} measured requests failed", m.failed))
}

/// `FAILED: the workload ended after 3 of 10 requests: …`: one wording for the note and
/// the banner of a run whose workload could not build a request.
pub fn workload_failed(sent: u64, planned: Option<u64>, error: &str) -> String {
    let of = planned.map_or_else(|| "its planned".to_owned(), |p| p.to_string());
    format!("FAILED: the workload ended after {sent} of {of} requests: {error}")
}

impl Summary {
    /// Why the run failed, for an exit status: its workload ended on an error, or
    /// [`MetricsSummary::failure`] with `min_success_rate`; `None` for a run that passes.
    pub fn failure(&self, min_success_rate: f64) -> Option<String> {
        self.workload_failure().or_else(|| self.metrics.failure(min_success_rate))
    }

    /// Why the run failed when its workload ended on an error (a request it could not
    /// build); a sweep or SLO search stops on it.
    pub fn workload_failure(&self) -> Option<String> {
        let e = self.workload_error.as_ref()?;
        Some(format!("the workload ended before the planned requests: {e}"))
    }
}

/// `PARTIAL: 6 of 100 planned`, or `PARTIAL` without a planned count: one wording for runs
/// and sweep steps, in the terminal and the reports.
pub(crate) fn cut_short(ended: u64, planned: Option<u64>) -> String {
    match planned {
        Some(p) => format!("PARTIAL: {ended} of {p} planned"),
        None => "PARTIAL".to_owned(),
    }
}

/// A setting as people read it: `5`, `chat`, `ttft_ms 20, itl_ms 5` (not JSON).
pub(crate) fn setting_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k} {}", setting_text(v)))
            .collect::<Vec<_>>()
            .join(", "),
        serde_json::Value::Array(a) => a.iter().map(setting_text).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The errors of a run: counts by kind, then the most frequent messages in the server's
/// own words.
pub fn error_lines(m: &MetricsSummary) -> String {
    let mut s = String::new();
    if m.errors.is_empty() {
        let _ = writeln!(s, "errors     none");
        return s;
    }
    let e: Vec<String> = m.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let _ = writeln!(s, "errors     {}", e.join(", "));
    for t in &m.top_errors {
        let msg: String = t.message.chars().take(200).collect();
        let more = if t.message.chars().count() > 200 { "..." } else { "" };
        let _ = writeln!(s, "  {:>6} x  {}: {msg}{more}", t.count, t.kind);
    }
    s
}

/// The metric tables and the errors of a run; the errors alone when nothing succeeded.
fn results_block(sum: &Summary) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let all_failed = m.completed == 0 && m.failed > 0;
    if all_failed {
        let _ = writeln!(s, "\nFAILED     every one of the {} measured requests failed", m.failed);
        s.push_str(&error_lines(m));
    } else {
        let _ = writeln!(s);
        s.push_str(&metric_table(sum));
        if !m.per_turn.is_empty() {
            let _ = writeln!(s);
            s.push_str(&turn_table(m));
        }
        let _ = writeln!(s);
        s.push_str(&error_lines(m));
    }
    s
}

/// The `client` line: the client's CPU and memory, and how much of the run it took.
fn client_line(sum: &Summary) -> String {
    // milliseconds below a second: a short run's CPU is not "0.00 s"
    let cpu = |v: f64| if v < 1.0 { format!("{:.1} ms", v * 1e3) } else { format!("{v:.2} s") };
    let co = &sum.metrics.client_overhead;
    let mut own = String::new();
    if let Some(p) = co.read_lag_ms.p99 {
        let _ = write!(own, "; read lag p99 {p:.3} ms");
    }
    if let Some(sh) = co.client_share {
        let _ = write!(own, ", {:.2}% of each slot's cycle in the client", sh * 100.0);
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "client     cpu {} user + {} system (process from its start: {} + {}), peak RSS {} MiB{own}",
        cpu(sum.client.cpu_user_s),
        cpu(sum.client.cpu_system_s),
        cpu(sum.client.process_cpu_user_s),
        cpu(sum.client.process_cpu_system_s),
        sum.client.peak_rss_kib / 1024
    );
    s
}

/// The terminal summary of a run.
/// The shard lines: a shard's place and clock, or a merged run's shards.
fn shard_lines(sum: &Summary) -> String {
    let ms = |v: Option<f64>| v.map_or("unknown".into(), |v| format!("{v:.3} ms"));
    let mut s = String::new();
    if let Some(r) = &sum.shard {
        let _ = write!(s, "shard      {}/{}", r.index, r.count);
        if let Some(p) = r.planned {
            let _ = write!(s, ", {p} requests of the plan");
        }
        match &r.coordinator {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "; met shard 0 at {c}: clock offset {} (round trip {}), start skew {}",
                    ms(r.clock_offset_ms),
                    ms(r.clock_rtt_ms),
                    ms(r.start_skew_ms)
                );
            }
            None => s.push_str(
                "; ran alone (no common start): merge the shards with quetta-bench merge\n",
            ),
        }
    }
    if let Some(m) = &sum.shards {
        let by = |st: &str| m.shards.iter().filter(|r| r.status == st).count();
        let _ = writeln!(
            s,
            "shards     {} of {} merged ({} finished, {} partial, {} died); start skew max {}, clock offset max {}",
            m.shards.len(),
            m.count,
            by("finished"),
            by("partial"),
            by("died"),
            ms(m.max_start_skew_ms),
            ms(m.max_clock_offset_ms)
        );
    }
    s
}

pub fn render_summary(sum: &Summary, output_dir: Option<&Path>) -> String {
    let m = &sum.metrics;
    let mut s = String::new();
    let t = &sum.target;
    let partial = partial_label(sum).map_or(String::new(), |p| format!(" ({p})"));
    let _ = writeln!(s, "\n== Quetta results{partial} ==");
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
    s.push_str(&throughput_lines(sum));
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
    s.push_str(&results_block(sum));
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
        let _ = writeln!(s, "server     {}", server_line(sm));
    }
    if let Some(g) = &sum.gpu {
        if let Some(e) = g.energy_j {
            let _ = writeln!(
                s,
                "gpu        {} GPUs, average {:.0} W, {:.1} J{}",
                g.devices.len(),
                g.avg_power_w.unwrap_or(0.0),
                e,
                g.energy_per_output_token_j
                    .map_or(String::new(), |j| format!(", {j:.3} J per output token"))
            );
        }
    }
    if let Some(v) = &m.slo_verdict {
        let _ = writeln!(s, "slo        {}", verdict_line(v));
    }
    if m.retried_requests > 0 {
        let _ = writeln!(
            s,
            "retried    {} requests needed {} extra attempts (retries allowed)",
            m.retried_requests, m.retry_attempts
        );
    }
    let ended = m.completed + m.failed;
    if sum.target.is_predicted() {
        let _ = writeln!(s, "client     none: predicted on the twin's virtual clock (no connections, no client figures)");
    } else if ended > 0 {
        let mut line = format!("connections {} new for {ended} requests", m.new_connections);
        if m.stale_connection_retries > 0 {
            let _ = write!(
                line,
                "; {} resent on a new one, as the server had closed their pooled connection before they were written",
                m.stale_connection_retries
            );
        }
        let _ = writeln!(s, "{line} (see docs/METRICS.md, Connections)");
    }
    if !sum.target.is_predicted() {
        s.push_str(&client_line(sum));
    }
    s.push_str(&shard_lines(sum));
    for n in &sum.notes {
        let _ = writeln!(s, "note       {n}");
    }
    if let Some(d) = output_dir {
        let _ = writeln!(s, "results    {}", d.display());
    }
    s
}

//! `summary.json`: the typed summary of a run (terminal.rs renders it for the terminal).

use quetta_metrics::{Aggregate, GpuReport, MetricsSummary, ServerReport};
use serde::{Deserialize, Serialize};

/// The version of a run directory's layout (`summary.json` and `run.json` carry it). Bumped
/// on any incompatible change; 2: records spell the gaps between tokens `itl_us` (integer
/// microseconds, 1: `itl_ms` in milliseconds) and the series has `itl_mean_ms`. Quetta reads
/// both.
pub const SCHEMA_VERSION: u32 = 2;

/// How a run sent its requests (`load` of the settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LoadKind {
    /// A closed loop (also sessions in lock-step groups).
    #[default]
    Closed,
    /// An open loop at a rate.
    Open,
    /// The workload's own times (a trace, a fitted distribution).
    Trace,
    /// Multi-turn sessions.
    Sessions,
}

/// An open loop's arrival process (`arrival` of the settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ArrivalKind {
    Poisson,
    Gamma,
    Constant,
    Ramp,
    Bursts,
}

/// What the prompts are (`mode` of the settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Mode {
    #[default]
    Normal,
    /// Every prompt unique from its first token, exactly the planned output length.
    Stress,
}

/// How sessions were paced (`sessions.pacing` of the settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PacingKind {
    /// A fixed number of sessions at a time, each turn after the last reply.
    #[default]
    PerSession,
    /// Sessions in lock-step groups.
    Interleaved,
    /// The sessions' recorded start times.
    Recorded,
    /// New sessions at a rate.
    Open,
}

/// What a session's later turns carry as history (`sessions.history` of the settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HistoryKind {
    /// The engine's own replies.
    #[default]
    Engine,
    /// The replies the session file recorded.
    Recorded,
}

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
    /// How requests were sent.
    pub load: LoadKind,
    pub concurrency: Option<usize>,
    pub request_rate: Option<f64>,
    /// The arrival process of an open loop.
    pub arrival: Option<ArrivalKind>,
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
    pub mode: Mode,
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
    /// Its cold start, `SECONDS:FACTOR` (none without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<String>,
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
    pub pacing: PacingKind,
    pub think_time: String,
    pub history: HistoryKind,
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
    /// Why the results are partial (absent for a whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reason: Option<PartialReason>,
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
    /// Notes a reader must see (approximate token counts, client saturation, ...): typed
    /// values, written as their words.
    pub notes: Vec<crate::Note>,
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
    /// The run's figures again over its steady window only (`steady_state` says where it is
    /// or why there is none), from the records of the requests sent in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<Box<SteadySummary>>,
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

/// Why a run's results are partial, as `summary.json` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PartialReason {
    /// Stopped before the end (Ctrl-C, `RunControl::stop`).
    Stopped,
    /// Ended by the stop-on-saturation policy.
    Saturated,
    /// The workload ran out (or ended on an error) before the planned requests.
    WorkloadEnded,
    /// Shard 0 was stopped, and stopped every shard.
    StoppedByShard0,
    /// Rebuilt from its records: the run did not finish.
    Rebuilt,
    /// Merged without every shard, or with a shard that died or was cut short.
    Shards,
}

impl PartialReason {
    /// The reason in a few words, as the terminal and the reports show it.
    pub fn words(self) -> &'static str {
        match self {
            Self::Stopped => "stopped before the end",
            Self::Saturated => "stopped on saturation",
            Self::WorkloadEnded => "the workload ran out",
            Self::StoppedByShard0 => "shard 0 was stopped",
            Self::Rebuilt => "rebuilt from its records: the run did not finish",
            Self::Shards => "shards missing, dead or cut short",
        }
    }
}

/// `steady` in `summary.json`: the figures of the requests sent in the steady window
/// (docs/METRICS.md, Steady state), rates over the window's length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadySummary {
    /// The window, seconds of the measured phase, inclusive: `[from_s, to_s + 1)`.
    pub from_s: u64,
    pub to_s: u64,
    pub method: quetta_metrics::steady::Method,
    #[serde(flatten)]
    pub metrics: MetricsSummary,
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

impl Summary {
    /// The one constructor of a run's summary (a run, a rebuild from records, a merge of
    /// shards): `metrics` folded from `aggregate`, for a run of `config` against `target`
    /// made by `tool`. Every request with a record counts as dispatched and the plan is the
    /// configured count; what only a live run knows (sends, warmup, drain, client, server
    /// and GPU figures, sessions, steady state, shards) starts empty, for the caller to set,
    /// as do `partial` and `notes`.
    pub fn new(
        tool: &crate::Tool,
        started_at: String,
        config: RunSettings,
        target: Target,
        metrics: MetricsSummary,
        aggregate: Aggregate,
    ) -> Self {
        Self {
            schema_version: crate::SCHEMA_VERSION,
            tool: tool.name.clone(),
            tool_version: tool.version.clone(),
            started_at,
            partial: false,
            partial_reason: None,
            planned: config.num_requests,
            requested_rate: config.request_rate,
            config,
            target,
            dispatched: metrics.completed + metrics.failed,
            sent: 0,
            warmup_completed: 0,
            warmup_failed: 0,
            achieved_send_rate: None,
            cancelled_in_drain: 0,
            metrics,
            client: quetta_metrics::ClientStats::default(),
            notes: Vec::new(),
            workload_error: None,
            sessions: None,
            server_metrics: None,
            steady_state: None,
            steady: None,
            gpu: None,
            shard: None,
            shards: None,
            aggregate,
        }
    }

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

//! `quetta-bench run`.

use std::collections::BTreeMap;
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use quetta_engine::{Engine, Sampling, Timeouts};
use quetta_loadgen::{
    History, JsonlSink, Load, Pacing, RunConfig, RunControl, RunOutcome, SessionConfig, ThinkTime,
};
use quetta_metrics::{slo::parse_duration, SloSet};
use quetta_openai::{list_models, Api, ApiKey, OpenAiConfig, OpenAiEngine};
use quetta_report::{render_summary, rfc3339, Summary, Target, SCHEMA_VERSION};
use quetta_sim::{SimConfig, Simulator};
use quetta_workload::arrival::Arrival;
use quetta_workload::dataset::{load_jsonl, load_sharegpt, load_text, DatasetWorkload, Filters};
use quetta_workload::distribution::{DistWorkload, Distribution};
use quetta_workload::session::{
    load_sharegpt as load_sessions_sharegpt, load_turns_jsonl, Draw, LoadOptions, SessionList,
    SessionSource, SessionSynth, SessionSynthSpec,
};
use quetta_workload::synthetic::{ExactSynthetic, StressWorkload, SyntheticSpec};
use quetta_workload::tokenizer::Tokenizer;
use quetta_workload::trace::{
    load_azure, load_csv, load_jsonl_trace, load_mooncake, ColumnMap, TraceWorkload,
};
use quetta_workload::{profiles, Workload};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    Chat,
    Completions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetFormat {
    Sharegpt,
    Jsonl,
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    Mooncake,
    Azure,
    /// Any CSV with a header, read through --trace-columns (BurstGPT's by default).
    Csv,
    /// Any JSONL, read through --trace-columns.
    Jsonl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendArg {
    /// Any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, OpenAI).
    Openai,
    /// A LiteLLM proxy: OpenAI's protocol, provider-prefixed model names, the proxy's key;
    /// its `x-litellm-*` response headers are kept in requests.jsonl.
    Litellm,
    /// An Amazon SageMaker endpoint (--sagemaker-endpoint; SigV4, the AWS credential chain).
    Sagemaker,
    /// Google Vertex AI (--vertex-project, --model; application default credentials).
    Vertex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModalityArg {
    Text,
    /// Attach images (the bundled test image, or --image files) to each chat request.
    Vision,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionFormat {
    /// ShareGPT-style conversations, including tool-call conversations
    /// (function_call/observation roles, a `tools` field).
    Sharegpt,
    /// JSONL lines with `turns: [user message, ...]` (MT-Bench).
    TurnsJsonl,
    /// A TOML distribution file: turns, new-prompt and output lengths, think time.
    Synth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PacingArg {
    /// Each session sends its next turn when its reply has arrived and its think time passed.
    PerSession,
    /// A barrier at every turn across a group of sessions (a herd: artificial spikes).
    Interleaved,
    /// Sessions start at the times recorded in the file (`start_ms`).
    Recorded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryArg {
    /// Earlier turns carry the engine's own replies.
    Engine,
    /// Earlier turns carry the replies recorded in the dataset.
    Recorded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeArg {
    Normal,
    /// Unique random-token prompts (no prefix-cache hits), ignore_eos and
    /// min_tokens = max_tokens so every output has the planned length.
    Stress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalArg {
    Poisson,
    Gamma,
    Constant,
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).ok_or_else(|| format!("{s:?} is not a duration (e.g. 500ms, 30s, 2m)"))
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} must be a positive number")),
    }
}

fn positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("{s:?} must be a positive whole number")),
    }
}

fn positive_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("{s:?} must be a positive whole number")),
    }
}

fn header_arg(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected NAME:VALUE"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

impl RunArgs {
    /// Whether the run targets Quetta's embedded simulator (no server, no managed endpoint).
    pub(crate) fn embedded_simulator(&self) -> bool {
        self.base_url.is_none()
            && !matches!(self.backend, BackendArg::Sagemaker | BackendArg::Vertex)
    }
}

/// Flags of `quetta-bench run`.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("rate").args(["request_rate", "session_rate"]).multiple(false))]
pub struct RunArgs {
    /// Server root URL (http:// or https://). Without it, Quetta starts its embedded simulator.
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Which kind of endpoint the server is.
    #[arg(long, value_enum, default_value = "openai")]
    backend: BackendArg,
    #[command(flatten)]
    managed: crate::backends::ManagedArgs,
    /// OpenAI API to call.
    #[arg(long, value_enum, default_value = "chat")]
    endpoint: Endpoint,
    /// Keep this response header in each request record (repeatable; a trailing `*`
    /// matches a prefix, e.g. `x-ratelimit-*`).
    #[arg(long = "record-header")]
    record_headers: Vec<String>,
    /// `vision`: attach images to each chat request (image tokens come from usage).
    #[arg(long, value_enum, default_value = "text")]
    modality: ModalityArg,
    /// Image files for --modality vision (repeatable; default: the bundled test image).
    #[arg(long = "image")]
    images: Vec<PathBuf>,
    /// Images per request.
    #[arg(long, default_value_t = 1)]
    images_per_request: usize,
    /// Model name (default: the first model listed by /v1/models).
    #[arg(long)]
    model: Option<String>,
    /// API key, sent as `Authorization: Bearer` (never written anywhere).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,

    /// Closed loop: keep this many requests in flight (default 16 without --request-rate).
    #[arg(long, value_parser = positive_usize, conflicts_with = "request_rate", allow_negative_numbers = true)]
    pub(crate) concurrency: Option<usize>,
    /// Open loop: send this many requests per second on a precomputed schedule.
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub(crate) request_rate: Option<f64>,
    /// Arrival process of the open loop (requests, or sessions with --session-rate)
    /// [default: poisson].
    #[arg(long, value_enum)]
    pub(crate) arrival: Option<ArrivalArg>,
    /// Gamma shape of inter-arrival gaps (as vLLM's --burstiness); implies --arrival gamma.
    #[arg(long, value_parser = positive_f64)]
    burstiness: Option<f64>,
    /// Ramp: start at this rate and rise (or fall) linearly to --request-rate over --ramp-over.
    #[arg(long, requires_all = ["request_rate", "ramp_over"])]
    ramp_from: Option<f64>,
    /// Length of the ramp (e.g. 60s).
    #[arg(long, value_parser = duration_arg, requires = "ramp_from")]
    ramp_over: Option<Duration>,
    /// Bursts: send this many requests at once every --burst-gap.
    #[arg(long, value_parser = positive_u64, requires = "burst_gap", conflicts_with_all = ["request_rate", "concurrency"])]
    burst_size: Option<u64>,
    /// Time between bursts (e.g. 10s).
    #[arg(long, value_parser = duration_arg, requires = "burst_size")]
    burst_gap: Option<Duration>,
    /// Cap on requests in flight in the open loop; waiting is recorded as queue time.
    #[arg(long, value_parser = positive_usize)]
    pub(crate) max_concurrency: Option<usize>,

    /// Measured requests to send (default 100 when no --duration is given).
    #[arg(long, value_parser = positive_u64)]
    pub(crate) num_requests: Option<u64>,
    /// Stop sending after this long (e.g. 60s).
    #[arg(long, value_parser = duration_arg)]
    pub(crate) duration: Option<Duration>,
    /// Requests sent first and left out of the results.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Time requests in flight get to finish after the last send (or Ctrl-C).
    #[arg(long, value_parser = duration_arg, default_value = "30s")]
    drain_timeout: Duration,

    /// A named workload profile (see `quetta-bench profiles`); explicit flags override it.
    #[arg(long)]
    profile: Option<String>,
    /// A TOML file of user profiles (looked up before the built-in ones).
    #[arg(long, requires = "profile")]
    profile_file: Option<PathBuf>,
    /// Prompts from a dataset file.
    #[arg(long, conflicts_with = "trace")]
    dataset: Option<PathBuf>,
    /// Format of --dataset.
    #[arg(long, value_enum, default_value = "sharegpt", requires = "dataset")]
    dataset_format: DatasetFormat,
    /// Drop dataset prompts shorter than this (tokens).
    #[arg(long, requires = "dataset")]
    min_input_len: Option<u32>,
    /// Drop dataset prompts longer than this (tokens).
    #[arg(long, requires = "dataset")]
    max_input_len: Option<u32>,
    /// Drop dataset entries whose output length is above this.
    #[arg(long, requires = "dataset")]
    max_output_len: Option<u32>,
    /// Draw lengths (and, in an open loop without --request-rate, arrival gaps) from a
    /// distribution file written by `quetta-bench workload fit`.
    #[arg(long, conflicts_with_all = ["trace", "dataset"])]
    workload: Option<PathBuf>,
    /// Replay a request trace (arrival times, input and output lengths).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Format of --trace.
    #[arg(long, value_enum, default_value = "mooncake", requires = "trace")]
    trace_format: TraceFormat,
    /// Columns of a csv/jsonl trace: timestamp=COL,input=COL,output=COL[,unit=s|ms]
    /// (default: BurstGPT's Timestamp, Request tokens, Response tokens in seconds).
    #[arg(long, default_value = "")]
    trace_columns: String,
    /// Replay the trace this many times faster (2 = twice as fast).
    #[arg(long, value_parser = positive_f64, default_value_t = 1.0)]
    trace_speed: f64,
    /// Tokens per prefix block of Mooncake hash_ids.
    #[arg(long, default_value_t = 512)]
    block_size: u32,
    /// Tokenizer for exact prompt lengths: a tokenizer.json path or a Hugging Face model id
    /// in the local cache.
    #[arg(long)]
    tokenizer: Option<String>,
    /// Send prompts as token ids (completions endpoint; needs --tokenizer).
    #[arg(long, requires = "tokenizer")]
    token_ids: bool,

    /// Multi-turn sessions from this file (see --session-format): each turn's prompt holds
    /// the system prompt, every earlier user message and the engine's reply to each.
    #[arg(long, conflicts_with_all = ["trace", "dataset", "workload"])]
    sessions: Option<PathBuf>,
    /// Format of --sessions.
    #[arg(long, value_enum, default_value = "sharegpt", requires = "sessions")]
    session_format: SessionFormat,
    /// Sessions running at once (per-session and interleaved pacing) [default: 8].
    #[arg(long, value_parser = positive_usize, conflicts_with = "session_rate")]
    session_concurrency: Option<usize>,
    /// Open loop over sessions: start this many sessions per second (--arrival applies);
    /// turns inside a session stay in order.
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    session_rate: Option<f64>,
    /// How sessions send their turns (recorded: sessions start at their `start_ms`, sped
    /// up by --trace-speed).
    #[arg(long, value_enum, default_value = "per-session")]
    pacing: PacingArg,
    /// Pause between a reply's end and the session's next turn: 0, 200ms, exp:2s (mean),
    /// uniform:500ms-3s, or recorded[:FALLBACK] (the time recorded in the data).
    #[arg(long, default_value = "0")]
    think_time: String,
    /// Header carrying each request's session id for sticky routing (`none`: no header).
    #[arg(long, default_value = "x-session-id")]
    session_header: String,
    /// Body field carrying the session id (`none`: no field).
    #[arg(long, default_value = "user")]
    session_body_field: String,
    /// Which replies earlier turns carry.
    #[arg(long, value_enum, default_value = "engine")]
    history: HistoryArg,
    /// Measured sessions to run (default: each session of the file once; synthesis: 16).
    #[arg(long, value_parser = positive_u64)]
    num_sessions: Option<u64>,
    /// Keep at most this many turns of each session.
    #[arg(long, value_parser = positive_usize)]
    max_turns: Option<usize>,
    /// `stress`: unique random-token prompts (prefix caching defeated), ignore_eos and
    /// min_tokens = max_tokens; summary.json reports the share with the planned length.
    #[arg(long, value_enum, default_value = "normal")]
    mode: ModeArg,
    /// Scrape the server's Prometheus metrics during the run (`auto`: BASE_URL/metrics), keep
    /// the series in server_metrics.jsonl and report the run's deltas (vLLM, SGLang, TGI and
    /// llama.cpp names).
    #[arg(long)]
    server_metrics: Option<String>,
    /// Interval between two scrapes.
    #[arg(long, value_parser = duration_arg, default_value = "1s")]
    server_metrics_interval: Duration,
    /// Sample the local NVIDIA GPUs through NVML during the run (gpu.jsonl; energy per
    /// output token in the summary). Without a driver the run says so and goes on.
    #[arg(long)]
    gpu_telemetry: bool,
    /// End the run early when requests in flight keep rising (an open loop the server cannot
    /// keep up with); the summary says so.
    #[arg(long)]
    pub(crate) stop_on_saturation: bool,
    /// Interval between two GPU samples.
    #[arg(long, value_parser = duration_arg, default_value = "100ms")]
    gpu_interval: Duration,
    /// POST to this path of the server (e.g. /reset_prefix_cache for vLLM, /flush_cache for
    /// SGLang) after the warmup, before the measured phase; the run fails if it fails.
    #[arg(long)]
    reset_prefix_cache: Option<String>,

    /// Mean prompt length in tokens (synthetic prompts).
    /// [default: 128, or the profile's]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    input_len: Option<u32>,
    /// Standard deviation of the prompt length [default: 0, or the profile's].
    #[arg(long)]
    input_len_stddev: Option<f64>,
    /// Mean output length in tokens (max_tokens) [default: 128, or the profile's].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    output_len: Option<u32>,
    /// Standard deviation of the output length [default: 0, or the profile's].
    #[arg(long)]
    output_len_stddev: Option<f64>,
    /// Ask the server to ignore end-of-sequence.
    #[arg(long)]
    ignore_eos: bool,
    /// Ask for exactly the planned output length (ignore_eos and min_tokens = max_tokens).
    #[arg(long)]
    exact_output_length: bool,
    /// Do not stream (TTFT then equals E2E).
    #[arg(long)]
    no_stream: bool,
    #[arg(long)]
    temperature: Option<f64>,
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the schedule and the prompts.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,

    /// Service-level objectives for goodput, e.g. ttft:500ms,tpot:50ms,e2e:10s.
    #[arg(long)]
    pub(crate) slo: Option<String>,
    /// Extra percentiles to report, e.g. 75,99.99.
    #[arg(long, value_delimiter = ',')]
    pub(crate) percentiles: Vec<f64>,

    /// Directory for summary.json and requests.jsonl (default quetta-results/run-TIMESTAMP).
    #[arg(long)]
    pub(crate) output_dir: Option<PathBuf>,
    /// Write into an output directory that already holds a run.
    #[arg(long)]
    pub(crate) overwrite: bool,

    /// Use HTTP/2 with prior knowledge over cleartext.
    #[arg(long)]
    http2: bool,
    /// Accept any TLS certificate (testing only; prints a warning).
    #[arg(long)]
    insecure: bool,
    /// Trust this extra CA certificate (PEM).
    #[arg(long)]
    ca_cert: Option<PathBuf>,
    /// Extra request header NAME:VALUE (repeatable).
    #[arg(long = "header", value_parser = header_arg)]
    headers: Vec<(String, String)>,
    /// Extra JSON body fields, as a JSON object.
    #[arg(long)]
    extra_body: Option<String>,
    #[arg(long, value_parser = duration_arg)]
    connect_timeout: Option<Duration>,
    /// Time to first token limit.
    #[arg(long, value_parser = duration_arg)]
    ttft_timeout: Option<Duration>,
    /// Longest silence between two body frames.
    #[arg(long, value_parser = duration_arg)]
    idle_timeout: Option<Duration>,
    #[arg(long, value_parser = duration_arg)]
    request_timeout: Option<Duration>,
    /// Retry a request that failed before any token (connect, 429, 5xx, closed connection,
    /// connect or first-byte timeout) up to this many times. Off by default; retries are
    /// counted apart in the summary.
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// First wait before a retry, doubling each time; a server's Retry-After wins.
    #[arg(long, value_parser = duration_arg, default_value = "500ms")]
    retry_backoff: Duration,
    /// Exit non-zero when fewer than this share of requests succeed (0..1).
    #[arg(long)]
    min_success_rate: Option<f64>,

    /// Embedded simulator: time to first token in ms.
    #[arg(long, default_value_t = 20.0)]
    sim_ttft_ms: f64,
    /// Embedded simulator: inter-token latency in ms.
    #[arg(long, default_value_t = 5.0)]
    sim_itl_ms: f64,
    /// Embedded simulator: requests it runs at once (its batch limit; more queue).
    #[arg(long)]
    sim_max_running: Option<usize>,
    /// Embedded simulator: inject a fault (repeatable), as `quetta-sim --fault`.
    #[arg(long = "sim-fault")]
    sim_faults: Vec<quetta_sim::faults::FaultRule>,
    /// Runtime worker threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Print the planned schedule (counts, rates, lengths) and exit without sending anything.
    #[arg(long)]
    dry_run: bool,
    /// No progress line.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Print the summary table at the end (sweeps and searches print their own).
    #[arg(skip = true)]
    pub(crate) print_summary: bool,
}

/// The settings recorded in summary.json (no secrets).
#[derive(Debug, Serialize)]
struct Recorded<'a> {
    endpoint: Endpoint,
    model: &'a str,
    load: &'a str,
    concurrency: Option<usize>,
    request_rate: Option<f64>,
    arrival: Option<&'a str>,
    trace: Option<String>,
    dataset: Option<String>,
    trace_speed: Option<f64>,
    tokenizer: Option<String>,
    burstiness: Option<f64>,
    max_concurrency: Option<usize>,
    num_requests: Option<u64>,
    duration_s: Option<f64>,
    warmup: u64,
    drain_timeout_s: f64,
    profile: Option<String>,
    input_len: u32,
    input_len_stddev: f64,
    output_len: u32,
    output_len_stddev: f64,
    ignore_eos: bool,
    exact_output_length: bool,
    stream: bool,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: u64,
    slo: Option<String>,
    http2: bool,
    insecure: bool,
    api_key_given: bool,
    extra_header_names: Vec<&'a str>,
    simulator: Option<serde_json::Value>,
    mode: ModeArg,
    reset_prefix_cache: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sessions: Option<serde_json::Value>,
}

fn default_output_dir() -> PathBuf {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let stamp: String = rfc3339(now).chars().filter(char::is_ascii_alphanumeric).collect();
    PathBuf::from("quetta-results").join(format!("run-{stamp}"))
}

fn prepare_output_dir(dir: &Path, overwrite: bool) -> Result<()> {
    if dir.join("summary.json").exists()
        || dir.join("requests.jsonl").exists()
        || dir.join("run.json").exists()
    {
        if !overwrite {
            bail!(
                "output directory {} already holds a run (summary.json or requests.jsonl); choose another --output-dir or pass --overwrite",
                dir.display()
            );
        }
        for f in ["summary.json", "requests.jsonl", "run.json"] {
            let _ = fs::remove_file(dir.join(f));
        }
    }
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))
}

pub fn main(mut a: RunArgs) -> Result<ExitCode> {
    let user = match (&a.profile_file, &a.profile) {
        (Some(f), Some(name)) => {
            let all = profiles::load_file(f).context("--profile-file")?;
            all.into_iter().find(|p| &p.name == name)
        }
        _ => None,
    };
    if let Some(u) = &user {
        a.input_len = a.input_len.or(u.input_len);
        a.input_len_stddev = a.input_len_stddev.or(u.input_stddev);
        a.output_len = a.output_len.or(u.output_len);
        a.output_len_stddev = a.output_len_stddev.or(u.output_stddev);
        if a.request_rate.is_none() && a.concurrency.is_none() {
            a.request_rate = u.request_rate;
            a.concurrency = u.concurrency;
        }
        if let Some(arr) = &u.arrival {
            a.arrival = Some(
                ArrivalArg::from_str(arr, true)
                    .map_err(|e| anyhow::anyhow!("profile {}: arrival: {e}", u.name))?,
            );
        }
        if a.dataset.is_none() && a.trace.is_none() {
            a.dataset = u.dataset.as_ref().map(PathBuf::from);
            a.trace = u.trace.as_ref().map(PathBuf::from);
        }
        if let Some(f) = &u.dataset_format {
            a.dataset_format = DatasetFormat::from_str(f, true)
                .map_err(|e| anyhow::anyhow!("profile {}: dataset_format: {e}", u.name))?;
        }
        if let Some(f) = &u.trace_format {
            a.trace_format = TraceFormat::from_str(f, true)
                .map_err(|e| anyhow::anyhow!("profile {}: trace_format: {e}", u.name))?;
        }
        if let Some(c) = &u.trace_columns {
            a.trace_columns.clone_from(c);
        }
    }
    let profile = match (&user, a.profile.as_deref()) {
        (None, Some(name)) => Some(profiles::find(name).context("--profile")?),
        _ => None,
    };
    if let Some(p) = profile.as_ref().filter(|p| !p.is_multiturn()) {
        a.input_len = a.input_len.or(Some(p.input_len));
        a.input_len_stddev = a.input_len_stddev.or(Some(p.input_stddev));
        a.output_len = a.output_len.or(Some(p.output_len));
        a.output_len_stddev = a.output_len_stddev.or(Some(p.output_stddev));
    }
    let trace_rows = match &profile {
        Some(p) if a.trace.is_none() => p.trace().context("--profile")?,
        _ => None,
    };
    // Validate what clap cannot.
    if (a.arrival.is_some() || a.burstiness.is_some())
        && a.request_rate.is_none()
        && a.session_rate.is_none()
        && user.as_ref().is_none_or(|u| u.request_rate.is_none())
    {
        bail!("--arrival and --burstiness shape an open loop: give --request-rate (or --session-rate)");
    }
    let slos: Option<SloSet> = a.slo.as_deref().map(str::parse).transpose().context("--slo")?;
    if let Some(r) = a.min_success_rate {
        if !(0.0..=1.0).contains(&r) {
            bail!("--min-success-rate must be between 0 and 1, got {r}");
        }
    }
    for p in &a.percentiles {
        if !(*p > 0.0 && *p < 100.0) {
            bail!("--percentiles: {p} is not between 0 and 100");
        }
    }
    for (name, v) in [
        ("--input-len-stddev", a.input_len_stddev.unwrap_or(0.0)),
        ("--output-len-stddev", a.output_len_stddev.unwrap_or(0.0)),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{name} must be a non-negative number, got {v}");
        }
    }
    let extra_body: BTreeMap<String, serde_json::Value> = match &a.extra_body {
        Some(s) => serde_json::from_str(s).context("--extra-body must be a JSON object")?,
        None => BTreeMap::new(),
    };
    if let Some(u) = &a.base_url {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            bail!("--base-url {u:?} must start with http:// or https://");
        }
    }
    let out_dir = a.output_dir.clone().unwrap_or_else(default_output_dir);
    if !a.dry_run {
        prepare_output_dir(&out_dir, a.overwrite)?;
    }

    let threads =
        a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(run(a, trace_rows, profile, slos, extra_body, out_dir, threads))
}

/// Parse a duration given as `200ms`, `2s` or a bare number of milliseconds.
fn ms_of(s: &str) -> Result<f64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>() {
        if v.is_finite() && v >= 0.0 {
            return Ok(v);
        }
    }
    parse_duration(s)
        .map(|d| d.as_secs_f64() * 1e3)
        .with_context(|| format!("{s:?} is not a duration (e.g. 0, 200ms, 2s)"))
}

/// `--think-time`: 0, 200ms, exp:2s, uniform:500ms-3s, recorded[:FALLBACK].
fn parse_think(s: &str) -> Result<ThinkTime> {
    let ctx = || {
        format!("--think-time {s:?}: expected 0, 200ms, exp:MEAN, uniform:MIN-MAX or recorded[:FALLBACK]")
    };
    let draw = |s: &str| -> Result<Draw> {
        if let Some(m) = s.strip_prefix("exp:") {
            let mean = ms_of(m)?;
            if mean <= 0.0 {
                bail!("the mean must be positive");
            }
            return Ok(Draw::Exponential { mean });
        }
        if let Some(r) = s.strip_prefix("uniform:") {
            let (a, b) = r.split_once('-').context("expected MIN-MAX")?;
            let (min, max) = (ms_of(a)?, ms_of(b)?);
            if min > max {
                bail!("MIN is above MAX");
            }
            return Ok(Draw::Uniform { min, max });
        }
        Ok(Draw::Fixed { value: ms_of(s)? })
    };
    if let Some(rest) = s.strip_prefix("recorded") {
        let fallback = match rest.strip_prefix(':') {
            Some(f) => draw(f).with_context(ctx)?,
            None if rest.is_empty() => Draw::Fixed { value: 0.0 },
            None => bail!("{}", ctx()),
        };
        return Ok(ThinkTime::Recorded { fallback });
    }
    Ok(ThinkTime::Draw(draw(s).with_context(ctx)?))
}

async fn run(
    a: RunArgs,
    trace_rows: Option<Vec<quetta_workload::trace::TraceRequest>>,
    profile: Option<profiles::Profile>,
    slos: Option<SloSet>,
    extra_body: BTreeMap<String, serde_json::Value>,
    out_dir: PathBuf,
    threads: usize,
) -> Result<ExitCode> {
    let mut notes = Vec::new();

    let tokenizer = match &a.tokenizer {
        Some(t) => Some(Arc::new(resolve_tokenizer(t).await?)),
        None => None,
    };
    let multiturn =
        a.sessions.is_some() || profile.as_ref().is_some_and(profiles::Profile::is_multiturn);
    if a.mode == ModeArg::Stress
        && (multiturn || a.trace.is_some() || a.dataset.is_some() || a.workload.is_some())
    {
        bail!("--mode stress builds its own unique random-token prompts: drop --sessions, --trace, --dataset, --workload and multi-turn or trace profiles");
    }
    if !multiturn
        && (a.session_rate.is_some() || a.session_concurrency.is_some() || a.num_sessions.is_some())
    {
        bail!("--session-rate, --session-concurrency and --num-sessions apply to multi-turn runs (--sessions or a multi-turn profile)");
    }
    if a.max_concurrency.is_some()
        && !multiturn
        && a.trace.is_none()
        && a.request_rate.is_none()
        && trace_offsets_expected(&a)
    {
        bail!("--max-concurrency caps an open loop: use it with --request-rate or --trace (closed loops use --concurrency)");
    }
    if a.token_ids && a.endpoint != Endpoint::Completions {
        bail!("--token-ids needs --endpoint completions (chat takes text)");
    }
    let mut trace_offsets = None;
    let rows = match (&a.trace, trace_rows) {
        (Some(path), _) => Some(load_trace(path, a.trace_format, &a.trace_columns)?),
        (None, rows) => rows,
    };
    // A trace brings its own send times unless --request-rate or --concurrency re-times it.
    let retimed = rows.is_some() && (a.concurrency.is_some() || a.request_rate.is_some());
    if retimed {
        notes.push("the trace's requests are sent on the given arrival process, not at their recorded times".into());
    }
    let workload: Box<dyn Workload> = match rows {
        Some(reqs) => {
            let mut w = TraceWorkload::new(
                reqs,
                a.block_size,
                a.seed,
                a.endpoint == Endpoint::Chat,
                tokenizer.clone(),
            );
            w.token_ids = a.token_ids;
            if !retimed {
                trace_offsets = Some(Arc::new(w.offsets(a.trace_speed)));
            }
            if tokenizer.is_some() && !a.token_ids {
                notes.push("trace prompts are decoded token blocks: the server's re-tokenisation can merge tokens at block edges (a token or two per block); --token-ids on the completions endpoint sends the exact blocks".into());
            }
            if tokenizer.is_none() {
                notes.push("no --tokenizer: trace prompts are built from words, one per intended token (exact for the simulator, an estimate for real servers)".into());
            }
            Box::new(w)
        }
        None if a.workload.is_some() => {
            let path = a.workload.as_ref().expect("checked");
            let dist = Distribution::load(path)?;
            let base = SyntheticSpec {
                input_len: 1,
                input_stddev: 0.0,
                output_len: 1,
                output_stddev: 0.0,
                chat: a.endpoint == Endpoint::Chat,
                seed: a.seed,
            };
            if a.concurrency.is_none() && a.request_rate.is_none() {
                let n = a.num_requests.unwrap_or(100);
                trace_offsets = Some(Arc::new(dist.offsets(n, a.seed)));
                notes.push("arrival gaps drawn from the distribution file".into());
            }
            Box::new(DistWorkload { dist, base })
        }
        None if a.dataset.is_some() => {
            let path = a.dataset.as_ref().expect("checked");
            let entries = match a.dataset_format {
                DatasetFormat::Sharegpt => load_sharegpt(path, tokenizer.as_deref())?,
                DatasetFormat::Jsonl => load_jsonl(path)?,
                DatasetFormat::Text => load_text(path)?,
            };
            let filters = Filters {
                min_input_len: a.min_input_len,
                max_input_len: a.max_input_len,
                max_output_len: a.max_output_len,
            };
            let w = DatasetWorkload::new(
                entries,
                tokenizer.clone(),
                filters,
                a.output_len.unwrap_or(128),
                a.endpoint == Endpoint::Chat,
                a.seed,
            )?;
            if w.filtered_out > 0 {
                notes.push(format!(
                    "{} dataset prompts were left out by the length filters",
                    w.filtered_out
                ));
            }
            if tokenizer.is_none() {
                notes.push(
                    "no --tokenizer: dataset prompt lengths are counted as words (an estimate)"
                        .into(),
                );
            }
            Box::new(w)
        }
        None => {
            let spec = SyntheticSpec {
                input_len: a.input_len.unwrap_or(128),
                input_stddev: a.input_len_stddev.unwrap_or(0.0),
                output_len: a.output_len.unwrap_or(128),
                output_stddev: a.output_len_stddev.unwrap_or(0.0),
                chat: a.endpoint == Endpoint::Chat,
                seed: a.seed,
            };
            spec.validate().context("synthetic workload")?;
            match (&tokenizer, a.mode) {
                (t, ModeArg::Stress) => {
                    notes.push("stress mode: every prompt is unique from its first word (its first token with --tokenizer), so a prefix cache has next to nothing to serve, and ignore_eos with min_tokens = max_tokens asks for exactly the planned output length".into());
                    if a.endpoint == Endpoint::Chat {
                        notes.push("stress mode on the chat endpoint: the server's chat template puts the same tokens before every prompt, which it may serve from cache (about 25 tokens per request on llama.cpp with SmolLM2); --endpoint completions leaves nothing shared".into());
                    }
                    Box::new(StressWorkload::new(spec, t.clone(), a.token_ids))
                }
                (Some(t), ModeArg::Normal) => {
                    Box::new(ExactSynthetic::new(spec, t.clone(), a.token_ids))
                }
                (None, ModeArg::Normal) => Box::new(spec),
            }
        }
    };
    let managed_backend = matches!(a.backend, BackendArg::Sagemaker | BackendArg::Vertex);
    if managed_backend && a.base_url.is_some() {
        bail!("--base-url is for OpenAI-compatible servers; with --backend sagemaker use --aws-endpoint-url, with vertex --vertex-endpoint-url");
    }
    if managed_backend && a.reset_prefix_cache.is_some() {
        bail!("--reset-prefix-cache needs a server's own endpoint; managed endpoints have none");
    }
    let workload: Box<dyn Workload> = if a.modality == ModalityArg::Vision {
        if a.endpoint != Endpoint::Chat || multiturn {
            bail!("--modality vision needs --endpoint chat and single-turn requests");
        }
        let images = if a.images.is_empty() {
            vec![quetta_workload::vision::data_url(
                quetta_workload::vision::TEST_IMAGE_PNG,
                "image/png",
            )]
        } else {
            a.images
                .iter()
                .map(|p| quetta_workload::vision::load_image(p))
                .collect::<Result<Vec<_>, _>>()?
        };
        notes.push(format!(
            "vision: {} image(s) per request from {}; image tokens are counted by the server (usage), not planned",
            a.images_per_request.max(1),
            if a.images.is_empty() { "the bundled test image".to_owned() } else { format!("{} file(s)", a.images.len()) }
        ));
        Box::new(quetta_workload::vision::WithImages {
            inner: workload,
            images,
            per_request: a.images_per_request,
        })
    } else {
        workload
    };
    let sessions = if multiturn {
        Some(session_source(&a, profile.as_ref(), tokenizer.clone(), &mut notes)?)
    } else {
        None
    };
    let (load, load_name) = match (&trace_offsets, a.request_rate, a.concurrency) {
        (Some(offsets), _, _) => (
            Load::Scheduled { offsets: offsets.clone(), max_concurrency: a.max_concurrency },
            "trace",
        ),
        (None, _, _) if a.burst_size.is_some() => {
            let arrival = Arrival::Bursts {
                size: u32::try_from(a.burst_size.unwrap_or(1)).unwrap_or(u32::MAX),
                gap: a.burst_gap.unwrap_or(Duration::from_secs(1)),
            };
            (Load::Open { rate: 1.0, arrival, max_concurrency: a.max_concurrency }, "open")
        }
        (None, Some(rate), _) => {
            let arrival =
                match (a.ramp_from, a.burstiness, a.arrival.unwrap_or(ArrivalArg::Poisson)) {
                    (Some(from), _, arr) => Arrival::Ramp {
                        from,
                        over: a.ramp_over.unwrap_or(Duration::from_secs(60)),
                        poisson: arr != ArrivalArg::Constant,
                    },
                    (None, Some(b), _) => Arrival::Gamma { burstiness: b },
                    (None, None, ArrivalArg::Gamma) => Arrival::Gamma { burstiness: 1.0 },
                    (None, None, ArrivalArg::Poisson) => Arrival::Poisson,
                    (None, None, ArrivalArg::Constant) => Arrival::Constant,
                };
            (Load::Open { rate, arrival, max_concurrency: a.max_concurrency }, "open")
        }
        (None, None, c) => (Load::Closed { concurrency: c.unwrap_or(16) }, "closed"),
    };
    let num_requests = a.num_requests.or(if a.duration.is_none() && trace_offsets.is_none() {
        Some(100)
    } else {
        None
    });
    let concurrency = match &load {
        Load::Closed { concurrency } => Some(*concurrency),
        _ => None,
    };
    let arrival_name = match &load {
        Load::Open { arrival: Arrival::Poisson, .. } => Some("poisson"),
        Load::Open { arrival: Arrival::Constant, .. } => Some("constant"),
        Load::Open { arrival: Arrival::Ramp { .. }, .. } => Some("ramp"),
        Load::Open { arrival: Arrival::Bursts { .. }, .. } => Some("bursts"),
        Load::Open { .. } => Some("gamma"),
        _ => None,
    };
    let cfg = RunConfig {
        load,
        num_requests,
        duration: a.duration,
        warmup: a.warmup,
        drain_timeout: a.drain_timeout,
        seed: a.seed,
        slos: slos.clone(),
        stream: !a.no_stream,
        ignore_eos: a.ignore_eos,
        exact_output_length: a.exact_output_length || a.mode == ModeArg::Stress,
        params: Arc::new(quetta_engine::RequestParams {
            sampling: Sampling { temperature: a.temperature, top_p: a.top_p, seed: None },
            extra_body,
            extra_headers: a.headers.clone(),
        }),
        capture_text: false,
        retries: a.retries,
        retry_backoff: a.retry_backoff,
        timeouts: Timeouts::default(),
        stop_on_saturation: false,
        before_measured: None,
    };
    let session_cfg = match &sessions {
        Some((_, distinct, starts)) => Some(session_config(&a, *distinct, starts.clone())?),
        None => None,
    };
    if a.dry_run {
        if let (Some((src, _, _)), Some(sc)) = (sessions, &session_cfg) {
            return Ok(dry_run_sessions(src, sc, &notes));
        }
        return dry_run(&a, workload, &cfg, &notes);
    }
    let mut cfg = cfg;
    // Target: the given server, or the embedded simulator.
    let timeouts = Timeouts {
        connect: a.connect_timeout,
        first_byte: None,
        first_token: a.ttft_timeout,
        idle: a.idle_timeout,
        total: a.request_timeout,
    };
    let record_headers: Vec<String> =
        a.record_headers.iter().map(|h| h.to_ascii_lowercase()).collect();
    let managed = if managed_backend {
        let common = crate::backends::Common {
            model: a.model.as_deref(),
            transport: quetta_http::TransportConfig {
                insecure: a.insecure,
                ca_cert: a.ca_cert.clone(),
                http2: a.http2,
                connect_timeout: a.connect_timeout,
            },
            timeouts,
            record_headers: record_headers.clone(),
            vision: a.modality == ModalityArg::Vision,
            session_body_field: (a.session_body_field != "none")
                .then(|| a.session_body_field.clone()),
        };
        Some(if a.backend == BackendArg::Sagemaker {
            crate::backends::sagemaker(&a.managed, common, &mut notes).await?
        } else {
            crate::backends::vertex(&a.managed, common, &mut notes).await?
        })
    } else {
        None
    };
    let (sim, base_url) = match (&managed, &a.base_url) {
        (Some(m), _) => (None, m.base_url.clone()),
        (None, Some(u)) => (None, u.clone()),
        (None, None) => {
            let cfg = SimConfig {
                ttft: Duration::from_secs_f64(a.sim_ttft_ms.max(0.0) / 1e3),
                itl: Duration::from_secs_f64(a.sim_itl_ms.max(0.0) / 1e3),
                keep_records: false,
                worker_threads: 1,
                faults: a.sim_faults.clone(),
                max_running: a.sim_max_running,
                ..SimConfig::default()
            };
            let sim = Simulator::start(cfg).context("starting the embedded simulator")?;
            let url = sim.base_url();
            eprintln!(
                "no --base-url: benchmarking Quetta's embedded simulator at {url} (TTFT {} ms, ITL {} ms)",
                a.sim_ttft_ms, a.sim_itl_ms
            );
            notes.push(format!(
                "target is Quetta's embedded simulator (TTFT {} ms, ITL {} ms), not a real server; client CPU figures include it",
                a.sim_ttft_ms, a.sim_itl_ms
            ));
            (Some(sim), url)
        }
    };
    if a.insecure {
        eprintln!("warning: --insecure: TLS certificates are NOT verified");
    }
    let (engine, backend, model) = if let Some(m) = managed {
        (m.engine, m.backend, m.model)
    } else {
        let api_key = a.api_key.as_deref().filter(|k| !k.is_empty()).map(ApiKey::new);
        let model = match &a.model {
            Some(m) => m.clone(),
            None => {
                let models =
                    list_models(&base_url, api_key.as_ref(), a.insecure, Duration::from_secs(15))
                        .await
                        .with_context(|| {
                            format!("no --model given and GET {base_url}/v1/models failed")
                        })?;
                models
                    .into_iter()
                    .next()
                    .context("no --model given and /v1/models lists no model")?
            }
        };
        let api = match a.endpoint {
            Endpoint::Chat => Api::Chat,
            Endpoint::Completions => Api::Completions,
        };
        let mut ocfg = OpenAiConfig::new(&base_url, api, &model);
        ocfg.api_key = api_key;
        ocfg.http2 = a.http2;
        ocfg.insecure = a.insecure;
        ocfg.ca_cert.clone_from(&a.ca_cert);
        ocfg.session_header = (a.session_header != "none").then(|| a.session_header.clone());
        ocfg.record_headers = record_headers;
        if a.backend == BackendArg::Litellm {
            ocfg.record_headers.push("x-litellm-*".into());
            if !model.contains('/') {
                notes.push(format!("LiteLLM: model {model:?} has no provider prefix (e.g. openai/gpt-4o); the proxy may route it by alias"));
            }
        }
        ocfg.session_body_field =
            (a.session_body_field != "none").then(|| a.session_body_field.clone());
        ocfg.timeouts = timeouts;
        if let Some(path) = &a.reset_prefix_cache {
            let url =
                format!("{}/{}", base_url.trim_end_matches('/'), path.trim_start_matches('/'));
            let key = a.api_key.clone().filter(|k| !k.is_empty());
            let insecure = a.insecure;
            cfg.before_measured = Some(quetta_loadgen::BeforeMeasured(Arc::new(move || {
                let url = url.clone();
                let key = key.clone();
                Box::pin(async move {
                    quetta_http::fetch::post_empty(
                        &url,
                        key.as_deref(),
                        insecure,
                        Duration::from_secs(30),
                    )
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("--reset-prefix-cache: POST {url} failed: {e}"))
                })
            })));
            notes.push(format!(
                "the server's prefix cache was reset (POST {path}) before the measured phase"
            ));
        }
        let engine = OpenAiEngine::new(ocfg).context("configuring the OpenAI adapter")?;
        let backend = match a.backend {
            BackendArg::Litellm => format!("litellm ({})", engine.name()),
            _ => engine.name().to_owned(),
        };
        let engine: Arc<dyn Engine> = Arc::new(engine);
        (engine, backend, model)
    };

    let recorded = Recorded {
        endpoint: a.endpoint,
        model: &model,
        load: load_name,
        concurrency,
        request_rate: a.request_rate,
        arrival: arrival_name,
        trace: a.trace.as_ref().map(|p| p.display().to_string()),
        dataset: a.dataset.as_ref().map(|p| p.display().to_string()),
        trace_speed: a.trace.as_ref().map(|_| a.trace_speed),
        tokenizer: tokenizer.as_ref().map(|t| t.source().to_owned()),
        burstiness: a.burstiness,
        max_concurrency: a.max_concurrency,
        num_requests,
        duration_s: a.duration.map(|d| d.as_secs_f64()),
        warmup: a.warmup,
        drain_timeout_s: a.drain_timeout.as_secs_f64(),
        profile: a.profile.clone(),
        input_len: a.input_len.unwrap_or(128),
        input_len_stddev: a.input_len_stddev.unwrap_or(0.0),
        output_len: a.output_len.unwrap_or(128),
        output_len_stddev: a.output_len_stddev.unwrap_or(0.0),
        ignore_eos: a.ignore_eos,
        exact_output_length: a.exact_output_length,
        stream: !a.no_stream,
        temperature: a.temperature,
        top_p: a.top_p,
        seed: a.seed,
        slo: slos.as_ref().map(ToString::to_string),
        http2: a.http2,
        insecure: a.insecure,
        api_key_given: a.api_key.as_deref().is_some_and(|k| !k.is_empty()),
        extra_header_names: a.headers.iter().map(|(k, _)| k.as_str()).collect(),
        simulator: sim
            .as_ref()
            .map(|_| serde_json::json!({"ttft_ms": a.sim_ttft_ms, "itl_ms": a.sim_itl_ms})),
        mode: a.mode,
        reset_prefix_cache: a.reset_prefix_cache.as_deref(),
        sessions: session_cfg.as_ref().map(|_| {
            serde_json::json!({
                "source": a.sessions.as_ref().map_or_else(
                    || a.profile.clone().unwrap_or_default(),
                    |p| p.display().to_string()
                ),
                "format": a.sessions.as_ref().map(|_| a.session_format),
                "session_concurrency": (a.session_rate.is_none()).then(|| a.session_concurrency.unwrap_or(8)),
                "session_rate": a.session_rate,
                "pacing": a.pacing,
                "think_time": a.think_time,
                "history": a.history,
                "num_sessions": a.num_sessions,
                "max_turns": a.max_turns,
            })
        }),
    };
    let config_json = serde_json::to_value(&recorded)?;

    // run.json first: if the process dies, `quetta-bench report` rebuilds the summary from
    // it and the records on disk.
    let target = Target {
        backend: backend.clone(),
        base_url: base_url.clone(),
        endpoint: match a.endpoint {
            Endpoint::Chat => "chat".into(),
            Endpoint::Completions => "completions".into(),
        },
        model: model.clone(),
        embedded_simulator: a.embedded_simulator(),
    };
    let run_json = serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "tool": "quetta-bench",
        "tool_version": env!("CARGO_PKG_VERSION"),
        "started_at": rfc3339(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())),
        "config": config_json.clone(),
        "target": target,
        "slo": slos.as_ref().map(ToString::to_string),
        "percentiles": a.percentiles,
    });
    fs::write(out_dir.join("run.json"), serde_json::to_string_pretty(&run_json)? + "\n")
        .with_context(|| format!("cannot write {}", out_dir.join("run.json").display()))?;
    let jsonl_path = out_dir.join("requests.jsonl");
    let file = fs::File::create(&jsonl_path)
        .with_context(|| format!("cannot create {}", jsonl_path.display()))?;
    let control = RunControl::new();
    // Ctrl-C: stop sending, let requests in flight drain, write a partial summary.
    {
        let c = control.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupted: no new requests; waiting for requests in flight (drain timeout)...");
                c.stop();
            }
        });
    }
    let progress =
        (!a.quiet && std::io::stderr().is_terminal()).then(|| spawn_progress(control.clone()));
    let scraper = a.server_metrics.as_ref().map(|u| {
        let url = if u == "auto" {
            format!("{}/metrics", base_url.trim_end_matches('/'))
        } else {
            u.clone()
        };
        quetta_probe::scrape::Scraper::start(quetta_probe::scrape::ScrapeConfig {
            url,
            interval: a.server_metrics_interval,
            bearer: a.api_key.clone().filter(|k| !k.is_empty()),
            series: Some(out_dir.join("server_metrics.jsonl")),
        })
    });
    let mut gpu_note = None;
    let gpu = if a.gpu_telemetry {
        match quetta_probe::gpu::open_nvml() {
            Ok(src) => Some(quetta_probe::gpu::Sampler::start(
                src,
                a.gpu_interval,
                Some(out_dir.join("gpu.jsonl")),
            )),
            Err(e) => {
                eprintln!("{e}");
                gpu_note = Some(e);
                None
            }
        }
    } else {
        None
    };
    cfg.stop_on_saturation = a.stop_on_saturation;
    let work = match (sessions, session_cfg) {
        (Some((src, _, _)), Some(sc)) => quetta_loadgen::Work::Sessions { source: src, config: sc },
        _ => quetta_loadgen::Work::Requests(workload),
    };
    let outcome = quetta_loadgen::Runner::new(engine, cfg)
        .sink(Box::new(JsonlSink::new(file)))
        .control(control.clone())
        .run(work)
        .await
        .context("the run")?;
    let session_counts = outcome.sessions.clone();
    if let Some(p) = progress {
        p.abort();
        eprint!("\r\x1b[2K");
    }
    let stopped_on_saturation = outcome.stopped_on_saturation;
    let server_report = match scraper {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    let gpu_report = gpu.map(quetta_probe::gpu::Sampler::finish);
    drop(sim);

    let series_path = out_dir.join("timeseries.jsonl");
    let mut series_text = String::new();
    for sec in &outcome.series {
        series_text.push_str(&serde_json::to_string(sec)?);
        series_text.push('\n');
    }
    fs::write(&series_path, series_text)
        .with_context(|| format!("cannot write {}", series_path.display()))?;
    let steadiness = outcome.steadiness.clone();
    let mut summary =
        build_summary(&a, outcome, config_json, &base_url, &model, &backend, notes, threads);
    summary.steady_state = steadiness;
    if let Some(n) = gpu_note {
        summary.notes.push(n);
    }
    if stopped_on_saturation {
        summary.notes.push("stopped early (--stop-on-saturation): requests in flight kept rising, the server cannot keep up with this load".into());
    }
    if summary.steady_state.as_ref().is_some_and(|s| s.over_saturated) {
        summary.notes.push("over-saturated: requests in flight rose from the first to the second half of the run; latencies grow with the run's length, not only with the load".into());
    }
    if let Some(r) = server_report {
        if r.scrapes == 0 {
            summary.notes.push(format!(
                "--server-metrics: no scrape of {} succeeded: {}",
                r.url,
                r.last_error.clone().unwrap_or_default()
            ));
        }
        summary.server_metrics = serde_json::to_value(&r).ok();
    }
    if let Some(g) = gpu_report {
        let g = g.with_output_tokens(summary.metrics.total_output_tokens);
        summary.gpu = serde_json::to_value(&g).ok();
    }
    if let Some(c) = session_counts {
        if c.failed > 0 {
            summary.notes.push(format!(
                "{} sessions ended at a failed turn (a failed turn ends its session)",
                c.failed
            ));
        }
        summary.sessions = Some(quetta_report::SessionsSummary {
            started: c.started,
            completed: c.completed,
            failed: c.failed,
            truncated: c.truncated,
        });
    }
    let json = serde_json::to_string_pretty(&summary)?;
    let sum_path = out_dir.join("summary.json");
    fs::write(&sum_path, json + "\n")
        .with_context(|| format!("cannot write {}", sum_path.display()))?;
    if a.print_summary {
        println!("{}", render_summary(&summary, Some(&out_dir)));
    }

    let m = &summary.metrics;
    let measured = m.completed + m.failed;
    if let Some(min) = a.min_success_rate {
        let rate = if measured > 0 { m.completed as f64 / measured as f64 } else { 0.0 };
        if rate < min {
            eprintln!(
                "error: success rate {:.1}% is below --min-success-rate {:.1}%",
                rate * 100.0,
                min * 100.0
            );
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
fn build_summary(
    a: &RunArgs,
    o: RunOutcome,
    config: serde_json::Value,
    base_url: &str,
    model: &str,
    backend: &str,
    mut notes: Vec<String>,
    threads: usize,
) -> Summary {
    let metrics = o.aggregate.summary(&a.percentiles);
    if metrics.input_token_source == "planned" {
        notes.push(
            "input token counts are the planned lengths (the server reported no usage); synthetic prompts count words, an estimate of tokens"
                .into(),
        );
    }
    if let Some(d) = metrics.prompt_tokens_over_plan {
        if d.abs() >= 0.5 {
            notes.push(if a.tokenizer.is_some() {
                format!(
                    "the server counted {d:+.1} prompt tokens per request beyond the exact planned length: its chat template and special tokens{}",
                    if a.endpoint == Endpoint::Completions { " (e.g. BOS)" } else { "" }
                )
            } else {
                format!("the server counted {d:+.1} prompt tokens per request beyond the planned (estimated) length; pass --tokenizer for exact lengths")
            });
        }
    }
    if metrics.token_count_source == "chunks" || metrics.token_count_source == "mixed" {
        notes.push("output token counts come (at least partly) from counting chunks: the server reported no usage".into());
    }
    if metrics.ttft_equals_e2e_for_non_streamed > 0 {
        notes.push(format!(
            "{} requests were not streamed: their TTFT equals their E2E and they have no ITL",
            metrics.ttft_equals_e2e_for_non_streamed
        ));
    }
    if let Some(lag) = metrics.schedule_lag_ms.p99 {
        if lag > 1.0 {
            notes
                .push(format!("the client fell behind its schedule: schedule lag p99 {lag:.3} ms"));
        }
    }
    if let Some(e) = &o.sink_error {
        notes.push(format!("writing requests.jsonl failed: {e}"));
    }
    if o.cancelled_in_drain > 0 {
        notes.push(format!(
            "{} requests were still running at the drain timeout and were cancelled",
            o.cancelled_in_drain
        ));
    }
    let started = o.started_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Summary {
        schema_version: SCHEMA_VERSION,
        tool: "quetta-bench".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        started_at: rfc3339(started),
        partial: o.interrupted,
        config,
        target: Target {
            backend: backend.into(),
            base_url: base_url.into(),
            endpoint: match a.endpoint {
                Endpoint::Chat => "chat".into(),
                Endpoint::Completions => "completions".into(),
            },
            model: model.into(),
            embedded_simulator: a.embedded_simulator(),
        },
        planned: o.planned,
        dispatched: o.dispatched,
        sent: o.sent,
        warmup_completed: o.warmup_completed,
        warmup_failed: o.warmup_failed,
        requested_rate: a.request_rate,
        achieved_send_rate: o.achieved_send_rate.map(|r| (r * 1e3).round() / 1e3),
        cancelled_in_drain: o.cancelled_in_drain,
        metrics,
        client: crate::sysinfo::client_stats(threads),
        notes,
        sessions: None,
        server_metrics: None,
        steady_state: None,
        gpu: None,
        aggregate: o.aggregate,
    }
}

/// The session source of a multi-turn run (from --sessions or a multi-turn profile) and how
/// many distinct sessions it holds.
/// With every session's recorded start (relative to the earliest), when all have one.
#[allow(clippy::type_complexity)]
fn session_source(
    a: &RunArgs,
    profile: Option<&profiles::Profile>,
    tokenizer: Option<Arc<Tokenizer>>,
    notes: &mut Vec<String>,
) -> Result<(Box<dyn SessionSource>, Option<u64>, Option<Vec<Duration>>)> {
    let opts = LoadOptions {
        tokenizer: tokenizer.as_deref(),
        output_len: a.output_len,
        max_turns: a.max_turns,
    };
    let list = match (&a.sessions, profile) {
        (Some(path), _) => match a.session_format {
            SessionFormat::Sharegpt => load_sessions_sharegpt(path, opts)?,
            SessionFormat::TurnsJsonl => load_turns_jsonl(path, opts)?,
            SessionFormat::Synth => {
                let spec = SessionSynthSpec::load(path)?;
                if tokenizer.is_none() {
                    notes.push("no --tokenizer: synthesised turn lengths are counted as words (an estimate)".into());
                }
                return Ok((Box::new(SessionSynth::new(spec, a.seed, tokenizer)), None, None));
            }
        },
        (None, Some(p)) => p.sessions(opts).context("--profile")?.unwrap_or_default(),
        (None, None) => Vec::new(),
    };
    if list.is_empty() {
        bail!("the session source holds no session with a user turn");
    }
    let n = list.len() as u64;
    let turns: usize = list.iter().map(|s| s.turns.len()).sum();
    notes.push(format!(
        "the session source holds {n} sessions ({turns} turns); history carries the {} replies",
        match a.history {
            HistoryArg::Engine => "engine's own",
            HistoryArg::Recorded => "recorded",
        }
    ));
    // A session count beyond the file's repeats it (with unique session ids).
    let cycle = a.num_sessions.is_some_and(|k| k > n) || a.duration.is_some();
    let mut list = list;
    let starts: Option<Vec<Duration>> = list.iter().map(|s| s.start).collect();
    let starts = starts.map(|mut v| {
        // Replay in start order, from the earliest start.
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by_key(|&i| v[i]);
        let sorted: Vec<_> = idx.iter().map(|&i| list[i].clone()).collect();
        list = sorted;
        v.sort();
        let first = v[0];
        v.iter().map(|d| d.saturating_sub(first)).collect()
    });
    Ok((Box::new(SessionList { sessions: list, cycle }), Some(n), starts))
}

fn session_config(
    a: &RunArgs,
    distinct: Option<u64>,
    starts: Option<Vec<Duration>>,
) -> Result<SessionConfig> {
    let pacing = match (a.session_rate, a.pacing) {
        (None, PacingArg::Recorded) => {
            let offsets =
                starts.context("--pacing recorded: every session of the file needs a start_ms")?;
            let speed = a.trace_speed;
            Pacing::Scheduled {
                offsets: Arc::new(offsets.iter().map(|d| d.div_f64(speed)).collect()),
            }
        }
        (Some(rate), _) => {
            let arrival = match (a.burstiness, a.arrival.unwrap_or(ArrivalArg::Poisson)) {
                (Some(b), _) => Arrival::Gamma { burstiness: b },
                (None, ArrivalArg::Gamma) => Arrival::Gamma { burstiness: 1.0 },
                (None, ArrivalArg::Poisson) => Arrival::Poisson,
                (None, ArrivalArg::Constant) => Arrival::Constant,
            };
            Pacing::Open { rate, arrival }
        }
        (None, PacingArg::PerSession) => {
            Pacing::PerSession { sessions: a.session_concurrency.unwrap_or(8) }
        }
        (None, PacingArg::Interleaved) => {
            Pacing::Interleaved { sessions: a.session_concurrency.unwrap_or(8) }
        }
    };
    Ok(SessionConfig {
        pacing,
        think: parse_think(&a.think_time)?,
        history: match a.history {
            HistoryArg::Engine => History::Engine,
            HistoryArg::Recorded => History::Recorded,
        },
        max_concurrency: a.max_concurrency,
        // Synthesis never runs out: 16 sessions unless told otherwise.
        num_sessions: a.num_sessions.or(if distinct.is_none() && a.duration.is_none() {
            Some(16)
        } else {
            None
        }),
    })
}

fn dry_run_sessions(
    mut src: Box<dyn SessionSource>,
    sc: &SessionConfig,
    notes: &[String],
) -> ExitCode {
    let n = sc.num_sessions.or(src.distinct()).unwrap_or(16);
    println!("dry run: nothing will be sent");
    println!("pacing     {:?}, think time {:?}", sc.pacing, sc.think);
    let (mut turns, mut new_tokens, mut out) = (0usize, 0u64, 0u64);
    for i in 0..n {
        let Some(s) = src.session(i) else { break };
        if i < 5 {
            println!(
                "session    {:<14} {} turns, new prompt tokens {:?}",
                s.id,
                s.turns.len(),
                s.turns.iter().map(|t| t.new_tokens).collect::<Vec<_>>()
            );
        }
        turns += s.turns.len();
        new_tokens += s.turns.iter().map(|t| u64::from(t.new_tokens)).sum::<u64>();
        out += s.turns.iter().map(|t| u64::from(t.max_tokens)).sum::<u64>();
    }
    println!("sessions   {n}, {turns} turns, {new_tokens} new prompt tokens, {out} planned output tokens");
    for note in notes {
        println!("note       {note}");
    }
    ExitCode::SUCCESS
}

fn spawn_progress(control: Arc<RunControl>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let p = &control.progress;
            let done = p.completed.load(Ordering::Relaxed);
            let failed = p.failed.load(Ordering::Relaxed);
            let el = t0.elapsed().as_secs_f64();
            eprint!(
                "\r\x1b[2K[{el:6.1}s] {done} done, {} in flight, {failed} errors, {:.1} req/s",
                p.in_flight.load(Ordering::Relaxed),
                if el > 0.0 { (done + failed) as f64 / el } else { 0.0 }
            );
        }
    })
}

/// Whether no trace will set the schedule (so --max-concurrency has nothing to cap).
fn trace_offsets_expected(a: &RunArgs) -> bool {
    a.profile
        .as_deref()
        .and_then(|p| profiles::find(p).ok())
        .is_none_or(|p| p.source == profiles::Source::Synthetic)
}

/// `quetta-bench workload fit`.
pub fn fit(trace: &Path, format: TraceFormat, columns: &str, output: &Path) -> Result<ExitCode> {
    let rows = load_trace(trace, format, columns)?;
    let d = Distribution::fit(&trace.display().to_string(), &rows)?;
    fs::write(output, serde_json::to_string_pretty(&d)? + "\n")
        .with_context(|| format!("cannot write {}", output.display()))?;
    println!("fitted {} requests from {}", rows.len(), trace.display());
    for (name, f) in [
        ("input length", &d.input_len),
        ("output length", &d.output_len),
        ("inter-arrival (s)", &d.inter_arrival_s),
    ] {
        let fits: Vec<String> =
            f.fits.iter().map(|x| format!("{} KS {:.3}", x.family, x.ks)).collect();
        println!(
            "  {name:<18} mean {:>10.3}  p50 {:>10.3}  p99 {:>10.3}  fits: {}",
            f.mean,
            f.quantiles[500],
            f.quantiles[990],
            fits.join(", ")
        );
    }
    println!("sampling uses the empirical quantiles; wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

fn load_trace(
    path: &Path,
    format: TraceFormat,
    columns: &str,
) -> Result<Vec<quetta_workload::trace::TraceRequest>> {
    Ok(match format {
        TraceFormat::Mooncake => load_mooncake(path)?,
        TraceFormat::Azure => load_azure(path)?,
        TraceFormat::Csv => load_csv(path, &ColumnMap::parse(columns)?)?,
        TraceFormat::Jsonl => load_jsonl_trace(path, &ColumnMap::parse(columns)?)?,
    })
}

/// A tokenizer by path, from the local Hugging Face cache, or downloaded from the hub
/// (`HF_ENDPOINT`, default https://huggingface.co; `HF_TOKEN` for gated models) into that
/// cache, within 30 seconds.
async fn resolve_tokenizer(spec: &str) -> Result<Tokenizer> {
    let local = Tokenizer::resolve(spec);
    let looks_like_id =
        !spec.contains("..") && spec.split('/').count() == 2 && !Path::new(spec).exists();
    let Err(local_err) = local else { return local.context("--tokenizer") };
    if !looks_like_id {
        return Err(local_err).context("--tokenizer");
    }
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let url = format!("{}/{spec}/resolve/main/tokenizer.json", endpoint.trim_end_matches('/'));
    let token = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty());
    eprintln!("tokenizer {spec} is not in the local cache: downloading {url}");
    let bytes = quetta_http::fetch::get(&url, token.as_deref(), Duration::from_secs(30), 64 << 20)
        .await
        .map_err(|e| anyhow::anyhow!("--tokenizer {spec}: not in the local Hugging Face cache, and downloading {url} failed ({e}); offline? give a tokenizer.json path"))?;
    let cache = std::env::var_os("HF_HUB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
        })
        .context("no cache directory (set HF_HOME)")?;
    let (org, name) = spec.split_once('/').expect("checked");
    let dir =
        cache.join(format!("models--{org}--{name}")).join("snapshots").join("quetta-download");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join("tokenizer.json");
    fs::write(&file, &bytes).with_context(|| format!("cannot write {}", file.display()))?;
    Tokenizer::from_file(&file)
        .with_context(|| format!("--tokenizer {spec}: the downloaded file does not load"))
}

/// `--dry-run`: what the run would send, and when; nothing is sent.
fn dry_run(
    a: &RunArgs,
    mut workload: Box<dyn Workload>,
    cfg: &RunConfig,
    notes: &[String],
) -> Result<ExitCode> {
    let (offsets, load): (Option<Vec<Duration>>, String) = match &cfg.load {
        Load::Closed { concurrency } => {
            (None, format!("closed loop, {concurrency} requests in flight"))
        }
        Load::Open { rate, arrival, max_concurrency } => {
            let sched = quetta_workload::arrival::Schedule::new(*arrival, *rate, cfg.seed)?;
            let offs = match (cfg.num_requests, cfg.duration) {
                (Some(n), Some(d)) => sched.take_n(n).into_iter().take_while(|o| *o < d).collect(),
                (Some(n), None) => sched.take_n(n),
                (None, Some(d)) => sched.until(d),
                (None, None) => Vec::new(),
            };
            let cap = max_concurrency.map_or(String::new(), |c| format!(", at most {c} in flight"));
            (Some(offs), format!("open loop, {arrival:?} arrivals at {rate} req/s{cap}"))
        }
        Load::Scheduled { offsets, max_concurrency } => {
            let mut v: Vec<Duration> = offsets.iter().copied().collect();
            if let Some(n) = cfg.num_requests {
                v.truncate(n as usize);
            }
            let cap = max_concurrency.map_or(String::new(), |c| format!(", at most {c} in flight"));
            (Some(v), format!("recorded send times{cap}"))
        }
        _ => (None, "other".into()),
    };
    let n = offsets.as_ref().map_or(cfg.num_requests.unwrap_or(0), |o| o.len() as u64);
    println!("dry run: nothing will be sent");
    println!("load       {load}");
    match (&offsets, cfg.duration) {
        (Some(o), _) if o.len() > 1 => {
            let span = o.last().copied().unwrap_or_default().as_secs_f64();
            println!(
                "requests   {n} over {span:.3} s (mean rate {:.2} req/s)",
                (n.saturating_sub(1)) as f64 / span.max(1e-9)
            );
        }
        (_, Some(d)) => println!("requests   as many as fit in {:.1} s", d.as_secs_f64()),
        _ => println!("requests   {n}"),
    }
    let sample = n.clamp(1, 10_000);
    let (mut ins, mut outs) = (Vec::new(), Vec::new());
    let mut exact = true;
    for i in 0..sample {
        let Some(p) = workload.request(cfg.warmup + i) else { break };
        ins.push(f64::from(p.input_tokens));
        outs.push(f64::from(p.max_tokens));
        exact &= p.input_tokens_exact;
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let q = |p: f64| {
            v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0.0)
        };
        format!(
            "mean {mean:.1}, min {}, p50 {}, p99 {}, max {}",
            q(0.0),
            q(0.5),
            q(0.99),
            v.last().copied().unwrap_or(0.0)
        )
    };
    println!(
        "input      {} tokens{} (first {} requests)",
        stats(&mut ins),
        if exact { "" } else { " (estimated)" },
        ins.len()
    );
    println!("output     {} tokens (max_tokens)", stats(&mut outs));
    if let Some(o) = &offsets {
        println!("first sends:");
        for (i, t) in o.iter().take(10).enumerate() {
            println!("  #{i:<4} at {:>10.3} s", t.as_secs_f64());
        }
    }
    for note in notes {
        println!("note       {note}");
    }
    let _ = a;
    Ok(ExitCode::SUCCESS)
}

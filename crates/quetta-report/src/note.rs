//! [`Note`]: what a reader of a run's results must know, as a value an embedder can match
//! on; `summary.json` keeps its words.

use std::fmt;

use quetta_engine::setting::Setting;
use quetta_workload::note::WorkloadNote;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A note on a run's results. Its `Display` is the note's words, as `summary.json`, the
/// terminal and the reports give them (settings named as the process names them,
/// [`quetta_engine::setting::name_settings`]); a note read back from a file is
/// [`Note::Text`].
///
/// ```
/// use quetta_report::Note;
/// let n = Note::Throttled { throttled: 2, requests: 40, retried: 0 };
/// assert!(n.is_warning());
/// assert!(n.to_string().starts_with("WARNING: the provider throttled 2 of 40 requests"));
/// // on disk a note is its words, and read back it is text
/// let json = serde_json::to_string(&n).unwrap();
/// let back: Note = serde_json::from_str(&json).unwrap();
/// assert_eq!(back, Note::Text(n.to_string()));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Note {
    /// The client set the pace (its share of a slot's cycle, its read lag): the figures are
    /// partly the client's (the words are the client overhead's own warning).
    ClientPaced(String),
    /// The provider throttled `throttled` of the `requests` (rate limit or quota), and
    /// `retried` earlier attempts were sent again.
    Throttled { throttled: u64, requests: u64, retried: u64 },
    /// The workload ended on an error after `sent` of `planned` requests.
    WorkloadFailed { sent: u64, planned: Option<u64>, error: String },
    /// A twin counted prompt words as tokens (no tokenizer), its model being in tokens.
    TwinCountsWords,
    /// Shard 0 stopped this shard, saying why.
    StoppedByShard0(String),
    /// The stop-on-saturation policy ended the run.
    StoppedOnSaturation,
    /// Requests in flight rose from the first half of the run to the second.
    OverSaturated,
    /// Requests still running at the drain timeout, cancelled.
    CancelledInDrain(u64),
    /// Requests released whose records never reached the recorder.
    RecordsMissing { dispatched: u64, records: u64 },
    /// `requests.jsonl` (or shard 0) could not take the records: why.
    RecordsNotWritten(String),
    /// Sessions that ended at a failed turn.
    SessionsFailed(u64),
    /// No scrape of the server's metrics at `url` succeeded.
    ScrapeFailed { url: String, error: String },
    /// GPU sampling was asked for and NVML could not be opened: its error.
    GpuUnavailable(String),
    /// What the workload layer noted while it built the workload.
    Workload(WorkloadNote),
    /// The target was the embedded simulator, answering after `ttft_ms` and then every
    /// `itl_ms` (none: its requests generate nothing).
    EmbeddedSimulator { ttft_ms: f64, itl_ms: Option<f64> },
    /// The target was the embedded simulator serving a twin.
    EmbeddedTwin,
    /// The twin of `server` (serving `model`) answered live, not the server itself.
    ServedByTwin { server: String, model: String },
    /// The twin of `server` predicted the run; `recheck`: the prefill, decode and context
    /// factors of a recheck applied to its model.
    PredictedByTwin { server: String, model: String, recheck: Option<[f64; 3]> },
    /// Warmup requests a prediction skipped.
    WarmupNotPredicted(u64),
    /// The prediction's own wall time.
    PredictionTook { seconds: f64 },
    /// A SageMaker endpoint, its region and payload.
    SageMaker { endpoint: String, region: String, payload: String },
    /// A Bedrock model, its region, API and body.
    Bedrock { model: String, region: String, api: String, body: String },
    /// A Vertex AI endpoint, its API and location, and where its tokens come from.
    Vertex { api: String, location: String, credentials: String },
    /// Vertex predict answers whole: no first token apart from the end.
    VertexPredictNotStreamed,
    /// A LiteLLM model named without a provider prefix.
    LiteLlmNoProviderPrefix { model: String },
    /// The protocol cannot ask for an exact output length.
    NoExactOutputLength { protocol: String },
    /// A trace's requests were sent on the given arrival process, not its times.
    TraceOnArrivalProcess,
    /// The arrival gaps came from a distribution file.
    DistributionGaps,
    /// The server's prefix cache was reset (a POST to `path`) before the measured phase.
    PrefixCacheReset { path: String },
    /// Input counts are the planned lengths: the server reported no usage.
    InputTokensPlanned,
    /// The server counted `per_request` prompt tokens a request beyond the planned length
    /// (`exact`: planned with a tokenizer; `chat`: through a chat template).
    PromptTokensOverPlan { per_request: f64, exact: bool, chat: bool },
    /// Output counts come (at least partly) from counting chunks.
    OutputTokensFromChunks,
    /// Requests answered whole: their TTFT is their E2E.
    NotStreamed(u64),
    /// The client fell behind its schedule (p99 of the lag, ms).
    ScheduleLag { p99_ms: f64 },
    /// The server's own timings over `requests` requests beside the client's: one clause
    /// per figure; `batch_caveat`: the server's prompt time can cover a batch.
    ServerTiming { requests: u64, differences: Vec<String>, batch_caveat: bool },
    /// A plan for shard `index` of `count` (its requests are every `count`-th).
    ShardOfPlan { index: u32, count: u32 },
    /// A merged run: how many shards it was merged from.
    Merged { shards: usize },
    /// Shards of the plan (`missing`, of `count`) whose requests are not in the merged run.
    ShardsMissing { missing: Vec<u32>, count: u32 },
    /// A shard that died: what it did of what it planned, and why.
    ShardDied { index: u32, completed: u64, failed: u64, planned: Option<u64>, reason: String },
    /// A shard that left neither records nor a summary.
    ShardEmpty { index: u32 },
    /// A shard that kept no records: only its histograms were merged.
    ShardWithoutRecords { index: u32 },
    /// A shard whose last record was cut off mid-write.
    ShardTornRecord { index: u32 },
    /// The shards' start instants are not all known.
    ShardStartsUnknown,
    /// Runs that were not shards of one plan, added up.
    NotOnePlan { runs: usize },
    /// Connections shard 0 refused (they did not join as a shard): why, each.
    ShardsRefused(Vec<String>),
    /// A summary rebuilt from `records` records (the run did not finish).
    Rebuilt { records: u64 },
    /// The last record of `requests.jsonl` was cut off mid-write.
    TornRecord,
    /// A rebuilt run knows nothing of the client's CPU and memory.
    ClientUnknown,
    /// A rate sweep's top: the throughput its max-throughput step reached.
    MaxThroughput { concurrency: usize, req_per_s: f64 },
    /// A sweep stopped after `done` of its `of` steps.
    StoppedAfterSteps { done: usize, of: usize },
    /// An SLO search stopped after `probes` probes.
    StoppedAfterProbes(usize),
    /// Some probes could not send at their rate: the answer may be the client's limit.
    ProbesClientLimited,
    /// Some probes failed on errors (more than `max_error_pct` % of their requests).
    ProbesFailedOnErrors { max_error_pct: f64 },
    /// Every probe up to `up_to` passed: the answer is a lower bound.
    EveryProbePassed { up_to: f64 },
    /// The first probe (at `start`) already failed.
    FirstProbeFailed { start: f64 },
    /// Two compared runs' settings differ: `setting: baseline -> candidate`, each.
    SettingsDiffer(Vec<String>),
    /// A compared side is a vLLM result file, which holds no settings, machine or engine
    /// (`baseline`, `candidate`: which sides are).
    VllmFile { baseline: bool, candidate: bool },
    /// vLLM's client clocks its latencies otherwise than Quetta.
    VllmClock,
    /// vLLM pools its inter-token gaps and counts tokens by its own tokenizer.
    VllmItl,
    /// A vLLM file without per-request latencies.
    VllmNoLatencies,
    /// The compared runs were measured from different machines (hostname and CPU each).
    DifferentMachines { baseline: String, candidate: String },
    /// The compared runs measured different engines.
    DifferentEngines { baseline: String, candidate: String },
    /// The compared runs asked for different models.
    DifferentModels { baseline: String, candidate: String },
    /// The baseline is older than the limit.
    StaleBaseline { days: u64, max_days: u64 },
    /// A comparison of two single runs: its tests see requests within each run only.
    OneRunPerSide,
    /// A comparison where one side was repeated and the other not: no test between runs.
    RepeatsOnOneSide,
    /// A comparison of two repeated runs: significance needs the runs to differ too.
    ComparedRepeats,
    /// Any other note, in its words.
    Text(String),
}

impl Note {
    /// Whether a reader must not miss it: the figures are in doubt (shown first, marked
    /// `WARNING` or `FAILED`).
    pub fn is_warning(&self) -> bool {
        match self {
            Note::ClientPaced(_)
            | Note::Throttled { .. }
            | Note::WorkloadFailed { .. }
            | Note::TwinCountsWords => true,
            Note::Workload(w) => w.is_warning(),
            Note::Text(t) => t.starts_with("WARNING: ") || t.starts_with("FAILED: "),
            _ => false,
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::ClientPaced(w) => write!(f, "WARNING: {w}"),
            Note::Throttled { throttled, requests, retried } => {
                let retried = match retried {
                    0 => String::new(),
                    r => format!(", and {r} earlier attempts that were sent again"),
                };
                write!(f, "WARNING: the provider throttled {throttled} of {requests} requests (rate limit or quota), which failed{retried}: the run measured the quota as much as the model")
            }
            Note::WorkloadFailed { sent, planned, error } => {
                f.write_str(&crate::workload_failed(*sent, *planned, error))
            }
            Note::TwinCountsWords => write!(f, "WARNING: the twin counts each word of a prompt as a token, but its model was calibrated in the server's tokens (usually more than one a word): its prompts look shorter and its prefill faster than the server's; give {} the server's tokenizer", Setting::Tokenizer),
            Note::StoppedByShard0(why) => write!(f, "stopped early: {why}"),
            Note::StoppedOnSaturation => write!(f, "stopped early ({}): requests in flight kept rising, the server cannot keep up with this load", Setting::StopOnSaturation),
            Note::OverSaturated => f.write_str("over-saturated: requests in flight rose from the first to the second half of the run; latencies grow with the run's length, not only with the load"),
            Note::CancelledInDrain(n) => write!(f, "{n} requests were still running at the drain timeout and were cancelled"),
            Note::RecordsMissing { dispatched, records } => write!(
                f,
                "{dispatched} requests were released but only {records} records reached the recorder: {} records are missing",
                dispatched.abs_diff(*records)
            ),
            Note::RecordsNotWritten(e) => write!(f, "writing requests.jsonl failed: {e}"),
            Note::SessionsFailed(n) => write!(f, "{n} sessions ended at a failed turn (a failed turn ends its session)"),
            Note::ScrapeFailed { url, error } => write!(f, "{}: no scrape of {url} succeeded: {error}", Setting::ServerMetrics),
            Note::GpuUnavailable(e) => f.write_str(e),
            Note::Workload(w) => w.fmt(f),
            Note::EmbeddedSimulator { ttft_ms, itl_ms: None } => write!(f, "target is Quetta's embedded simulator (answering after {ttft_ms} ms), not a real server; client CPU figures include it"),
            Note::EmbeddedSimulator { ttft_ms, itl_ms: Some(itl) } => write!(f, "target is Quetta's embedded simulator (TTFT {ttft_ms} ms, ITL {itl} ms), not a real server; client CPU figures include it"),
            Note::EmbeddedTwin => f.write_str("target is Quetta's embedded simulator serving a twin, not a real server; client CPU figures include it"),
            Note::ServedByTwin { server, model } => write!(f, "served live by the twin of {server} ({model}), not by the server itself (docs/SIMULATOR.md)"),
            Note::PredictedByTwin { server, model, recheck } => {
                write!(f, "predicted by the twin of {server} ({model}), not measured: docs/SIMULATOR.md")?;
                match recheck {
                    Some([p, d, c]) => write!(f, "; the model was rechecked (quetta-probe recheck) at prefill ×{p:.3} and decode ×{d:.3} (its context terms ×{c:.3}) of its calibration"),
                    None => Ok(()),
                }
            }
            Note::WarmupNotPredicted(n) => write!(f, "the {n} warmup requests were not predicted (a twin has no cold start)"),
            Note::PredictionTook { seconds } => write!(f, "the prediction took {seconds:.2} s"),
            Note::SageMaker { endpoint, region, payload } => write!(f, "SageMaker endpoint {endpoint} in {region} ({payload} payload); requests signed with SigV4, credentials from the AWS chain refreshed before expiry"),
            Note::Bedrock { model, region, api, body } => write!(f, "Bedrock {model} in {region} ({api} API, {body}); requests signed with SigV4, credentials from the AWS chain refreshed before expiry"),
            Note::Vertex { api, location, credentials } => write!(f, "Vertex AI ({api} API, {location}); access tokens from {credentials}, refreshed before expiry"),
            Note::VertexPredictNotStreamed => f.write_str("Vertex predict is not streamed: TTFT equals E2E, and no inter-token latency is reported"),
            Note::LiteLlmNoProviderPrefix { model } => write!(f, "LiteLLM: model {model:?} has no provider prefix (e.g. openai/gpt-4o); the proxy may route it by alias"),
            Note::NoExactOutputLength { protocol } => write!(f, "the {protocol} protocol has no way to ask for an exact output length (no ignore_eos or minimum): answers may end early"),
            Note::TraceOnArrivalProcess => f.write_str("the trace's requests are sent on the given arrival process, not at their recorded times"),
            Note::DistributionGaps => f.write_str("arrival gaps drawn from the distribution file"),
            Note::PrefixCacheReset { path } => write!(f, "the server's prefix cache was reset (POST {path}) before the measured phase"),
            Note::InputTokensPlanned => f.write_str("input token counts are the planned lengths (the server reported no usage); synthetic prompts count words, an estimate of tokens"),
            Note::PromptTokensOverPlan { per_request: d, exact: true, chat } => write!(
                f,
                "the server counted {d:+.1} prompt tokens per request beyond the exact planned length: its chat template and special tokens{}",
                if *chat { "" } else { " (e.g. BOS)" }
            ),
            Note::PromptTokensOverPlan { per_request: d, exact: false, .. } => write!(f, "the server counted {d:+.1} prompt tokens per request beyond the planned (estimated) length; pass {} for exact lengths", Setting::Tokenizer),
            Note::OutputTokensFromChunks => f.write_str("output token counts come (at least partly) from counting chunks: the server reported no usage"),
            Note::NotStreamed(n) => write!(f, "{n} requests were not streamed: their TTFT equals their E2E and they have no ITL"),
            Note::ScheduleLag { p99_ms } => write!(f, "the client fell behind its schedule: schedule lag p99 {p99_ms:.3} ms"),
            Note::ServerTiming { requests, differences, batch_caveat } => write!(
                f,
                "server-side timing (the server's own per-request timings, {requests} requests): {}: the rest is queueing before the server, the network, any gateway and the client{}",
                differences.join(", "),
                if *batch_caveat { "; with concurrent requests the server's prompt time can cover a whole batch of prompts (llama.cpp), so the difference then understates the overhead" } else { "" }
            ),
            Note::ShardOfPlan { index, count } => write!(
                f,
                "shard {index}/{count}: requests {index}, {}, {}, … of the plan (after its warmup), sessions likewise; the schedule above is this shard's",
                index + count,
                index + 2 * count
            ),
            Note::Merged { shards } => write!(f, "merged from {shards} shard{}; client CPU and memory are the sums over the shards", if *shards == 1 { "" } else { "s" }),
            Note::ShardsMissing { missing, count } => {
                let gone: Vec<String> = missing.iter().map(ToString::to_string).collect();
                write!(f, "shards {} of {count} are missing: their requests are not in this run", gone.join(", "))
            }
            Note::ShardDied { index, completed, failed, planned, reason } => write!(
                f,
                "shard {index} died: it completed {completed} and failed {failed} of {} planned requests ({reason}); what it measured is kept",
                planned.map_or("an unknown number of".into(), |p| p.to_string())
            ),
            Note::ShardEmpty { index } => write!(f, "shard {index}: neither records nor a summary"),
            Note::ShardWithoutRecords { index } => write!(f, "shard {index} kept no per-request records: its histograms are merged, and it has no part in the time series"),
            Note::ShardTornRecord { index } => write!(f, "shard {index}: the last line of its requests.jsonl was cut off mid-write and was left out"),
            Note::ShardStartsUnknown => f.write_str("the shards' start instants are not all known: each shard's records count from its own start"),
            Note::NotOnePlan { runs } => write!(f, "{runs} runs that were not shards of one plan, added up"),
            Note::ShardsRefused(why) => write!(
                f,
                "shard 0 refused {} connection{} that did not join as a shard: {}",
                why.len(),
                if why.len() == 1 { "" } else { "s" },
                why.join("; ")
            ),
            Note::Rebuilt { records } => write!(f, "rebuilt from {records} records in requests.jsonl: the run did not finish (no summary.json)"),
            Note::TornRecord => f.write_str("the last line of requests.jsonl was cut off mid-write and was left out"),
            Note::ClientUnknown => f.write_str("client CPU and memory are unknown for a rebuilt run"),
            Note::MaxThroughput { concurrency, req_per_s } => write!(f, "maximum throughput at concurrency {concurrency}: {req_per_s:.3} req/s"),
            Note::StoppedAfterSteps { done, of } => write!(f, "stopped after {done} of {of} steps"),
            Note::StoppedAfterProbes(n) => write!(f, "stopped after {n} probes"),
            Note::ProbesClientLimited => f.write_str("some probes were limited by the client (it could not send at the requested rate): the answer may be the client's limit, not the server's"),
            Note::ProbesFailedOnErrors { max_error_pct } => write!(f, "some probes failed on errors (more than {max_error_pct:.1}% of requests failed)"),
            Note::EveryProbePassed { up_to } => write!(f, "every probe up to {up_to} passed: the answer is a lower bound"),
            Note::FirstProbeFailed { start } => write!(f, "the first probe ({start}) already failed: lower {}", Setting::SearchStart),
            Note::SettingsDiffer(diff) => write!(f, "the runs' settings differ: {}", diff.join("; ")),
            Note::VllmFile { baseline, candidate } => {
                let named = match (baseline, candidate) {
                    (true, true) => "both sides are vLLM result files",
                    (true, false) => "the baseline is a vLLM result file",
                    _ => "the candidate is a vLLM result file",
                };
                write!(f, "{named}: its settings, machine and engine are not in the file, so they are not compared")
            }
            Note::VllmClock => f.write_str("where vllm bench serve wrote the file (not Quetta's export in vLLM's format): vLLM's TTFT and E2E count from before its HTTP call (connection setup and its event loop included) and are stamped after a chunk is read and decoded; Quetta's count from the request's first byte written and are stamped when the bytes arrived: expect vLLM's to be higher by its client's overhead, not the server's"),
            Note::VllmItl => f.write_str("itl_request_mean_ms is each request's mean gap on both sides; vLLM's own mean_itl_ms pools every gap (Quetta's itl_ms) and its TPOT counts output tokens by its own tokenizer, Quetta's from the server's usage"),
            Note::VllmNoLatencies => f.write_str("a vLLM file without per-request latencies: its E2E is TTFT + the sum of its inter-token gaps"),
            Note::DifferentMachines { baseline, candidate } => write!(f, "measured from different machines: {baseline} vs {candidate}"),
            Note::DifferentEngines { baseline, candidate } => write!(f, "different engines: {baseline} vs {candidate}"),
            Note::DifferentModels { baseline, candidate } => write!(f, "different models: {baseline} vs {candidate}"),
            Note::StaleBaseline { days, max_days } => write!(f, "the baseline is stale: {days} days old (older than {max_days} days)"),
            Note::OneRunPerSide => f.write_str("one run per side: the tests see how requests spread within each run, not how much the same setup moves from run to run (server state, caches, placement), so a significant change may be one run's luck; repeat each side to test between runs (docs/METRICS.md, Repeated runs)"),
            Note::RepeatsOnOneSide => f.write_str("only one side was repeated: nothing to test between runs; the tests see requests within runs only"),
            Note::ComparedRepeats => f.write_str("both sides repeated: requests pooled over their repeats, and a change is significant only when the runs' own figures differ too (Welch's test between runs)"),
            Note::Text(t) => f.write_str(t),
        }
    }
}

impl From<String> for Note {
    fn from(t: String) -> Self {
        Note::Text(t)
    }
}

impl From<&str> for Note {
    fn from(t: &str) -> Self {
        Note::Text(t.to_owned())
    }
}

impl Serialize for Note {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Note {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Note::Text)
    }
}

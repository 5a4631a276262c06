//! The flags of `run` (shared by `sweep`, `slo` and `quetta-sim predict`): one struct per
//! option group, flattened into [`RunArgs`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use quetta::Protocol;

use crate::values::{
    backend_parser, duration_arg, endpoint_arg, endpoint_type_arg, header_arg, key_value_arg,
    positive_f64, positive_u64, positive_usize, rate_arg, share_arg, speed_arg, ArrivalArg,
    Backend, BedrockApiArg, DatasetArg, DatasetName, Endpoint, HistoryArg, KserveTensorsArg,
    ModalityArg, ModeArg, PacingArg, PayloadArg, SessionArg, TraceArg, VertexApiArg,
};

/// Flags of the managed backends.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Managed endpoints")]
pub struct ManagedArgs {
    /// SageMaker endpoint name (--backend sagemaker).
    #[arg(long)]
    pub sagemaker_endpoint: Option<String>,
    /// SageMaker InferenceComponentName.
    #[arg(long)]
    pub inference_component: Option<String>,
    /// SageMaker TargetVariant.
    #[arg(long)]
    pub target_variant: Option<String>,
    /// SageMaker CustomAttributes, passed to the container verbatim.
    #[arg(long)]
    pub custom_attributes: Option<String>,
    /// AWS region (else AWS_REGION, AWS_DEFAULT_REGION or the profile's).
    #[arg(long)]
    pub aws_region: Option<String>,
    /// AWS profile in the shared config/credentials files (else AWS_PROFILE or default).
    #[arg(long)]
    pub aws_profile: Option<String>,
    /// SageMaker or Bedrock runtime endpoint override (a local fake, a VPC endpoint).
    #[arg(long)]
    pub aws_endpoint_url: Option<String>,
    /// Which Bedrock API to call.
    #[arg(long, value_enum, default_value = "converse")]
    pub bedrock_api: BedrockApiArg,
    /// The model family's body for --bedrock-api invoke (anthropic, llama, mistral, titan,
    /// nova); else told from the model id.
    #[arg(long)]
    pub bedrock_family: Option<String>,
    /// A JSON body template for --bedrock-api invoke, for a model no family fits (the
    /// placeholders of --sagemaker-template, and {{chat}}, {{system}}, {{temperature}}…).
    #[arg(long, requires = "bedrock_text_pointer")]
    pub bedrock_template: Option<PathBuf>,
    /// JSON pointer to the text in each streamed chunk of --bedrock-template's model (and
    /// in its whole answer).
    #[arg(long)]
    pub bedrock_text_pointer: Option<String>,
    /// What the SageMaker container speaks.
    #[arg(long, value_enum, default_value = "openai")]
    pub sagemaker_payload: PayloadArg,
    /// JSON request template for --sagemaker-payload template.
    #[arg(long)]
    pub sagemaker_template: Option<PathBuf>,
    /// JSON pointer to the text in each streamed line (template and jumpstart payloads).
    #[arg(long, default_value = "/token/text")]
    pub sagemaker_text_pointer: String,
    /// Google Cloud project (--backend vertex).
    #[arg(long)]
    pub vertex_project: Option<String>,
    /// Vertex AI location (region, or `global`).
    #[arg(long, default_value = "us-central1")]
    pub vertex_location: String,
    /// A deployed Vertex AI endpoint's id (OpenAI-compatible self-deployed models, predict).
    #[arg(long)]
    pub vertex_endpoint_id: Option<String>,
    /// Which Vertex AI API to call.
    #[arg(long, value_enum, default_value = "gemini")]
    pub vertex_api: VertexApiArg,
    /// Vertex AI endpoint override (a local fake, a proxy).
    #[arg(long)]
    pub vertex_endpoint_url: Option<String>,
    /// Google credentials file (else application default credentials).
    #[arg(long)]
    pub vertex_credentials: Option<PathBuf>,
}

/// The server: where it is, what it speaks, how to reach it (or the embedded simulator).
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Server root URL (http:// or https://). Without it, Quetta starts its embedded simulator.
    #[arg(help_heading = "Target", long)]
    pub base_url: Option<String>,
    /// Which kind of endpoint the server is, or the protocol it speaks (vLLM's backend names,
    /// e.g. openai-responses; `quetta-bench protocols` lists them) [default: openai].
    #[arg(help_heading = "Target", long, value_parser = backend_parser())]
    pub backend: Option<Backend>,
    /// OpenAI API to call: chat or completions (or /v1/chat/completions, /v1/completions),
    /// or the path a protocol's requests go to [default: chat; completions for --backend
    /// vllm, sglang and tgi; a protocol's own path].
    #[arg(help_heading = "Target", long, value_parser = endpoint_arg)]
    pub endpoint: Option<Endpoint>,
    /// The protocol by AIPerf's endpoint type (chat, completions, responses, messages, ...);
    /// wins over --backend's protocol.
    #[arg(help_heading = "Target", long, value_parser = endpoint_type_arg)]
    pub endpoint_type: Option<Protocol>,
    /// OpenAI Responses: chain a session's turns with previous_response_id instead of
    /// sending the whole history (the server stores each response).
    #[arg(help_heading = "Target", long)]
    pub chain_responses: bool,
    /// The KServe gRPC model's tensors: TensorRT-LLM's ensemble (text_input,
    /// max_tokens, stream…), Triton's vLLM backend (text_input, stream,
    /// sampling_parameters, exclude_input_in_output) or TensorRT-LLM's tensorrt_llm model
    /// (input_ids, input_lengths, request_output_len, streaming; output_ids).
    #[arg(help_heading = "Target", long, value_enum, default_value = "trtllm")]
    pub kserve_tensors: KserveTensorsArg,
    /// Model name (default: the first model listed by /v1/models).
    #[arg(help_heading = "Target", long)]
    pub model: Option<String>,
    /// API key, sent only to the target, as its protocol carries it (`Authorization:
    /// Bearer`; Anthropic's `x-api-key`), never written anywhere. Without it: OPENAI_API_KEY
    /// (LITELLM_API_KEY too with --backend litellm; ANTHROPIC_API_KEY alone with anthropic).
    #[arg(help_heading = "Target", long)]
    pub api_key: Option<String>,
    /// Skip the pre-flight check (GET /v1/models and one one-token request before the run).
    #[arg(help_heading = "Target", long)]
    pub no_preflight: bool,
    /// Extra request header NAME:VALUE (repeatable).
    #[arg(help_heading = "Target", long = "header", value_parser = header_arg)]
    pub headers: Vec<(String, String)>,
    /// Use HTTP/2 with prior knowledge over cleartext.
    #[arg(help_heading = "Target", long)]
    pub http2: bool,
    /// Accept any TLS certificate (testing only; prints a warning).
    #[arg(help_heading = "Target", long)]
    pub insecure: bool,
    /// Trust this extra CA certificate (PEM).
    #[arg(help_heading = "Target", long)]
    pub ca_cert: Option<PathBuf>,
    /// Keep this response header in each request record (repeatable; a trailing `*`
    /// matches a prefix, e.g. `x-ratelimit-*`).
    #[arg(help_heading = "Target", long = "record-header")]
    pub record_headers: Vec<String>,
    /// Embedded simulator: time to first token in ms.
    #[arg(help_heading = "Target", long, default_value_t = 20.0)]
    pub sim_ttft_ms: f64,
    /// Embedded simulator: inter-token latency in ms.
    #[arg(help_heading = "Target", long, default_value_t = 5.0)]
    pub sim_itl_ms: f64,
    /// Embedded simulator: requests it runs at once (its batch limit; more queue).
    #[arg(help_heading = "Target", long)]
    pub sim_max_running: Option<usize>,
    /// Embedded simulator: inject a fault (repeatable), as `quetta-sim --fault`.
    #[arg(help_heading = "Target", long = "sim-fault")]
    pub sim_faults: Vec<quetta::sim::faults::FaultRule>,
    /// Embedded simulator: a cold start, SECONDS:FACTOR (6:4: TTFT and ITL 4 times longer for
    /// the first 6 s after its first request).
    #[arg(help_heading = "Target", long)]
    pub sim_warm_up: Option<quetta::sim::WarmUp>,
}

/// The calibrated twin served or predicted in place of a server.
#[derive(Debug, Clone, Args)]
pub struct TwinArgs {
    /// Embedded simulator: serve as the twin of this server model (`quetta-probe calibrate`);
    /// --sim-ttft-ms, --sim-itl-ms and --sim-max-running then do not apply.
    #[arg(help_heading = "Twin", long, visible_alias = "server-model")]
    pub sim_model: Option<PathBuf>,
    /// Twin what-if: sequences run at once instead of the model's.
    #[arg(help_heading = "Twin", long, visible_alias = "max-seqs", requires = "sim_model")]
    pub sim_max_seqs: Option<u32>,
    /// Twin what-if: KV-cache tokens instead of the model's.
    #[arg(help_heading = "Twin", long, visible_alias = "kv-tokens", requires = "sim_model")]
    pub sim_kv_tokens: Option<u64>,
    /// Twin what-if: steps this many times faster (2, 2x, 0.5x).
    #[arg(help_heading = "Twin", long, visible_alias = "speed", requires = "sim_model", value_parser = speed_arg)]
    pub sim_speed: Option<f64>,
    /// Predict the run on the twin's virtual clock instead of serving it in real time
    /// (needs --sim-model): the same run directory, in seconds.
    #[arg(help_heading = "Twin", long, requires = "sim_model")]
    pub predict: bool,
}

/// How requests (or sessions) are sent over time, and how many.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Measured requests to send (default 100 when no --duration is given; a trace: all).
    #[arg(help_heading = "Load", long, value_parser = positive_u64)]
    pub num_requests: Option<u64>,
    /// Repeat the run this many times: run-1/ … run-N/ in the output directory, and
    /// repeats.json with each figure's mean, spread and 95% confidence interval across them.
    #[arg(help_heading = "Load", long, value_parser = positive_usize)]
    pub num_runs: Option<usize>,
    /// With --num-runs N as the most: stop repeating once every --ci-figures figure's 95%
    /// interval is within this share of its mean (2% or 0.02), after 3 runs at least.
    #[arg(help_heading = "Load", long, value_parser = share_arg, requires = "num_runs")]
    pub until_ci: Option<f64>,
    /// The figures --until-ci judges, as repeats.json names them (default:
    /// request_throughput,ttft_ms.p99,tpot_ms.p99).
    #[arg(help_heading = "Load", long, value_delimiter = ',', requires = "until_ci")]
    pub ci_figures: Vec<String>,
    /// Wait this long between repeats (--num-runs): seconds, or 500ms, 1m.
    #[arg(help_heading = "Load", long, value_parser = duration_arg, requires = "num_runs")]
    pub pause_between: Option<Duration>,
    /// Send the same prompts in every step of a sweep or repeat of a run (by default each
    /// draws fresh ones).
    #[arg(help_heading = "Load", long)]
    pub same_prompts: bool,
    /// vLLM's count of prompts: the requests, or with --random-batch-size the inputs
    /// (requests = prompts / batch size, rounded up).
    #[arg(help_heading = "Load", long, value_parser = positive_u64, conflicts_with = "num_requests")]
    pub num_prompts: Option<u64>,
    /// Stop sending after this long: seconds, or 500ms, 10m.
    #[arg(help_heading = "Load", long, value_parser = duration_arg)]
    pub duration: Option<Duration>,
    /// Closed loop: keep this many requests in flight (default 16 without --request-rate).
    #[arg(help_heading = "Load", long, value_parser = positive_usize, conflicts_with = "request_rate", allow_negative_numbers = true)]
    pub concurrency: Option<usize>,
    /// Open loop: send this many requests per second on a precomputed schedule; `inf`
    /// (vLLM's): no schedule, all at once, capped by --max-concurrency.
    #[arg(help_heading = "Load", long, value_parser = rate_arg, allow_negative_numbers = true)]
    pub request_rate: Option<f64>,
    /// Cap on requests in flight (vLLM's): alone, a closed loop of this many; with
    /// --request-rate or a trace, waiting for a slot is recorded as queue time.
    #[arg(help_heading = "Load", long, value_parser = positive_usize)]
    pub max_concurrency: Option<usize>,
    /// Arrival process of the open loop (requests, or sessions with --session-rate) [default: poisson].
    #[arg(help_heading = "Load", long, value_enum)]
    pub arrival: Option<ArrivalArg>,
    /// Gamma shape of inter-arrival gaps (as vLLM's --burstiness); implies --arrival gamma.
    #[arg(help_heading = "Load", long, value_parser = positive_f64)]
    pub burstiness: Option<f64>,
    /// Ramp: start at this rate and rise (or fall) linearly to --request-rate over --ramp-over.
    #[arg(help_heading = "Load", long, requires_all = ["request_rate", "ramp_over"])]
    pub ramp_from: Option<f64>,
    /// Length of the ramp: seconds, or 500ms, 10m.
    #[arg(help_heading = "Load", long, value_parser = duration_arg, requires = "ramp_from")]
    pub ramp_over: Option<Duration>,
    /// Bursts: send this many requests at once every --burst-gap.
    #[arg(help_heading = "Load", long, value_parser = positive_u64, requires = "burst_gap", conflicts_with_all = ["request_rate", "concurrency"])]
    pub burst_size: Option<u64>,
    /// Time between bursts: seconds, or 500ms, 10m.
    #[arg(help_heading = "Load", long, value_parser = duration_arg, requires = "burst_size")]
    pub burst_gap: Option<Duration>,
    /// Requests sent first and left out of the results.
    #[arg(help_heading = "Load", long, default_value_t = 0)]
    pub warmup: u64,
    /// Sessions running at once (per-session and interleaved pacing) [default: 8].
    #[arg(help_heading = "Load", long, value_parser = positive_usize, conflicts_with = "session_rate")]
    pub session_concurrency: Option<usize>,
    /// Open loop over sessions: start this many sessions per second (--arrival applies).
    #[arg(help_heading = "Load", long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub session_rate: Option<f64>,
    /// How sessions send their turns (recorded: sessions start at their `start_ms`).
    #[arg(help_heading = "Load", long, value_enum, default_value = "per-session")]
    pub pacing: PacingArg,
    /// Pause between a reply and the next turn: 0, 200ms, exp:2s, uniform:500ms-3s, or
    /// recorded[:FALLBACK]; a bare number is seconds.
    #[arg(help_heading = "Load", long, default_value = "0")]
    pub think_time: String,
    /// Measured sessions to run (default: each session of the file once; synthesis: 16).
    #[arg(help_heading = "Load", long, value_parser = positive_u64)]
    pub num_sessions: Option<u64>,
    /// End the run early when requests in flight keep rising; the summary says so.
    #[arg(help_heading = "Load", long)]
    pub stop_on_saturation: bool,
    /// Runtime worker threads (default: one per CPU).
    #[arg(help_heading = "Load", long)]
    pub threads: Option<usize>,
    /// Seed of the schedule and the prompts.
    #[arg(help_heading = "Load", long, default_value_t = 0)]
    pub seed: u64,
}

/// What is sent: prompts, datasets, traces, sessions, images, sampling.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// A named workload profile (see `quetta-bench profiles`); explicit flags override it.
    #[arg(help_heading = "Workload", long)]
    pub profile: Option<String>,
    /// A TOML file of user profiles (looked up before the built-in ones).
    #[arg(help_heading = "Workload", long, requires = "profile")]
    pub profile_file: Option<PathBuf>,
    /// Prompts from a dataset file.
    #[arg(
        help_heading = "Workload",
        long,
        visible_alias = "dataset-path",
        conflicts_with = "trace"
    )]
    pub dataset: Option<PathBuf>,
    /// Format of --dataset [default: sharegpt].
    #[arg(
        help_heading = "Workload",
        long,
        value_enum,
        requires = "dataset",
        conflicts_with = "dataset_name"
    )]
    pub dataset_format: Option<DatasetArg>,
    /// vLLM's dataset choice: random (synthetic), random-ids, sharegpt, sonnet or custom
    /// (the last three read --dataset-path).
    #[arg(help_heading = "Workload", long, value_enum)]
    pub dataset_name: Option<DatasetName>,
    /// Synthetic lengths drawn uniformly from [len·(1−r), len·(1+r)] (vLLM's), 0 ≤ r < 1.
    #[arg(help_heading = "Workload", long)]
    pub random_range_ratio: Option<f64>,
    /// Inputs per request of an embeddings protocol (one batch), documents per query of a
    /// rerank or score protocol (vLLM's).
    #[arg(help_heading = "Workload", long, visible_alias = "batch-size", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub random_batch_size: u32,
    /// The prompt lengths' own range ratio (instead of --random-range-ratio for them).
    #[arg(help_heading = "Workload", long, visible_alias = "random-input-range-ratio")]
    pub input_range_ratio: Option<f64>,
    /// The output lengths' own range ratio (instead of --random-range-ratio for them):
    /// --input-len 576 --input-range-ratio 0.778 --output-len 160 --output-range-ratio 0.6
    /// draws prompts of 128–1,024 tokens and outputs of 64–256.
    #[arg(help_heading = "Workload", long, visible_alias = "random-output-range-ratio")]
    pub output_range_ratio: Option<f64>,
    /// Tokens of one prefix shared by every synthetic prompt, before its own
    /// --random-input-len tokens (vLLM's).
    #[arg(help_heading = "Workload", long)]
    pub random_prefix_len: Option<u32>,
    /// Mean prompt length in tokens (synthetic prompts) [default: 128, or the profile's].
    #[arg(help_heading = "Workload", long, visible_alias = "random-input-len", value_parser = clap::value_parser!(u32).range(1..))]
    pub input_len: Option<u32>,
    /// Mean output length in tokens (max_tokens) [default: 128, or the profile's].
    #[arg(help_heading = "Workload", long, visible_alias = "random-output-len", value_parser = clap::value_parser!(u32).range(1..))]
    pub output_len: Option<u32>,
    /// Standard deviation of the prompt length [default: 0, or the profile's].
    #[arg(help_heading = "Workload", long)]
    pub input_len_stddev: Option<f64>,
    /// Standard deviation of the output length [default: 0, or the profile's].
    #[arg(help_heading = "Workload", long)]
    pub output_len_stddev: Option<f64>,
    /// Drop dataset prompts shorter than this (tokens).
    #[arg(help_heading = "Workload", long, requires = "dataset")]
    pub min_input_len: Option<u32>,
    /// Drop dataset prompts longer than this (tokens).
    #[arg(help_heading = "Workload", long, requires = "dataset")]
    pub max_input_len: Option<u32>,
    /// Drop dataset entries whose output length is above this.
    #[arg(help_heading = "Workload", long, requires = "dataset")]
    pub max_output_len: Option<u32>,
    /// Lengths (and, without --request-rate or --concurrency, arrival gaps) from a
    /// distribution file written by `quetta-bench workload fit`.
    #[arg(help_heading = "Workload", id = "workload", long = "workload", conflicts_with_all = ["trace", "dataset"])]
    pub workload_file: Option<PathBuf>,
    /// Recordings to transcribe (--backend openai-audio): a directory of WAV and FLAC files,
    /// or a JSONL dataset of {"audio": PATH, "prompt": TEXT} lines.
    #[arg(help_heading = "Workload", long, conflicts_with_all = ["trace", "dataset", "workload"])]
    pub audio: Option<PathBuf>,
    /// Replay a request trace (arrival times, input and output lengths).
    #[arg(help_heading = "Workload", long)]
    pub trace: Option<PathBuf>,
    /// Format of --trace.
    #[arg(
        help_heading = "Workload",
        long,
        value_enum,
        default_value = "mooncake",
        requires = "trace"
    )]
    pub trace_format: TraceArg,
    /// Columns of a csv/jsonl trace: timestamp=COL,input=COL,output=COL[,unit=s|ms]
    /// (default: BurstGPT's Timestamp, Request tokens, Response tokens in seconds).
    #[arg(help_heading = "Workload", long, default_value = "")]
    pub trace_columns: String,
    /// Replay the trace (or recorded session starts) this many times faster.
    #[arg(help_heading = "Workload", long, value_parser = positive_f64, default_value_t = 1.0)]
    pub trace_speed: f64,
    /// Tokens per prefix block of Mooncake hash_ids.
    #[arg(help_heading = "Workload", long, default_value_t = 512)]
    pub block_size: u32,
    /// Tokenizer for exact prompt lengths: a tokenizer.json path or a Hugging Face model id.
    #[arg(help_heading = "Workload", long)]
    pub tokenizer: Option<String>,
    /// Send prompts as token ids (completions endpoint; needs --tokenizer).
    #[arg(help_heading = "Workload", long, requires = "tokenizer")]
    pub token_ids: bool,
    /// Multi-turn sessions from this file (see --session-format).
    #[arg(help_heading = "Workload", long, conflicts_with_all = ["trace", "dataset", "workload"])]
    pub sessions: Option<PathBuf>,
    /// Format of --sessions.
    #[arg(
        help_heading = "Workload",
        long,
        value_enum,
        default_value = "sharegpt",
        requires = "sessions"
    )]
    pub session_format: SessionArg,
    /// Which replies earlier turns carry.
    #[arg(help_heading = "Workload", long, value_enum, default_value = "engine")]
    pub history: HistoryArg,
    /// Keep at most this many turns of each session.
    #[arg(help_heading = "Workload", long, value_parser = positive_usize)]
    pub max_turns: Option<usize>,
    /// Header carrying each request's session id for sticky routing (`none`: no header).
    #[arg(help_heading = "Workload", long, default_value = "x-session-id")]
    pub session_header: String,
    /// Body field carrying the session id (`none`: no field).
    #[arg(help_heading = "Workload", long, default_value = "user")]
    pub session_body_field: String,
    /// `vision`: attach images to each chat request (image tokens come from usage).
    #[arg(help_heading = "Workload", long, value_enum, default_value = "text")]
    pub modality: ModalityArg,
    /// Image files for --modality vision (repeatable; default: the bundled test image).
    #[arg(help_heading = "Workload", long = "image")]
    pub images: Vec<PathBuf>,
    /// Images per request.
    #[arg(help_heading = "Workload", long, default_value_t = 1)]
    pub images_per_request: usize,
    /// `stress`: unique random-token prompts, ignore_eos and min_tokens = max_tokens.
    #[arg(help_heading = "Workload", long, value_enum, default_value = "normal")]
    pub mode: ModeArg,
    /// Ask the server to ignore end-of-sequence.
    #[arg(help_heading = "Workload", long)]
    pub ignore_eos: bool,
    /// Ask for exactly the planned output length (ignore_eos and min_tokens = max_tokens).
    #[arg(help_heading = "Workload", long)]
    pub exact_output_length: bool,
    /// Do not stream (TTFT then equals E2E).
    #[arg(help_heading = "Workload", long)]
    pub no_stream: bool,
    /// Sampling temperature.
    #[arg(help_heading = "Workload", long)]
    pub temperature: Option<f64>,
    /// Nucleus sampling top_p.
    #[arg(help_heading = "Workload", long)]
    pub top_p: Option<f64>,
    /// Extra JSON body fields, as a JSON object.
    #[arg(help_heading = "Workload", long)]
    pub extra_body: Option<String>,
    /// POST to this path of the server after the warmup (e.g. /reset_prefix_cache).
    #[arg(help_heading = "Workload", long)]
    pub reset_prefix_cache: Option<String>,
}

/// A run split across processes.
#[derive(Debug, Clone, Args)]
pub struct ShardingArgs {
    /// Run shard K of N (K from 0): exactly this shard's part of the plan the same flags give
    /// one process (requests round-robin by index, sessions by session).
    #[arg(help_heading = "Sharding", long, conflicts_with = "shards")]
    pub shard: Option<String>,
    /// Run one of N shards, K from JOB_COMPLETION_INDEX (as a Kubernetes Indexed Job sets it).
    #[arg(help_heading = "Sharding", long)]
    pub shards: Option<u32>,
    /// The shard index for --shards.
    #[arg(help_heading = "Sharding", long, env = "JOB_COMPLETION_INDEX", hide = true)]
    pub shard_index: Option<String>,
    /// Shard 0's HOST:PORT: the shards meet there, start at one instant and send it their
    /// records; shard 0 writes the merged run into its --output-dir.
    #[arg(help_heading = "Sharding", long)]
    pub coordinator: Option<String>,
    /// How long shards wait for each other to join.
    #[arg(help_heading = "Sharding", long, value_parser = duration_arg, default_value = "120s")]
    pub rendezvous_timeout: Duration,
}

/// What is written and printed, and what counts as a failed run.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Directory for the results (default quetta-results/run-TIMESTAMP).
    #[arg(help_heading = "Output", long)]
    pub output_dir: Option<PathBuf>,
    /// Write into an output directory that already holds a run.
    #[arg(help_heading = "Output", long)]
    pub overwrite: bool,
    /// SLOs: per request (goodput) ttft:500ms,tpot:50ms, or for the run ttft:p99<500ms.
    #[arg(help_heading = "Output", long)]
    pub slo: Option<String>,
    /// Extra percentiles to report, e.g. 75,99.99.
    #[arg(
        help_heading = "Output",
        long,
        visible_alias = "metric-percentiles",
        value_delimiter = ','
    )]
    pub percentiles: Vec<f64>,
    /// vLLM's: the metrics whose percentiles to show (ttft,tpot,itl,e2el); Quetta shows
    /// every metric's, so this only checks the names.
    #[arg(help_heading = "Output", long, value_delimiter = ',')]
    pub percentile_metrics: Vec<String>,
    /// vLLM's per-request thresholds, in ms: `--goodput ttft:500 tpot:50` (the same as
    /// --slo ttft:500ms,tpot:50ms).
    #[arg(help_heading = "Output", long, num_args = 1..)]
    pub goodput: Vec<String>,
    /// Also write the result JSON of vLLM's `bench serve --save-result --save-detailed`.
    #[arg(help_heading = "Output", long)]
    pub save_result: bool,
    /// vLLM's flag for the per-request lists: accepted, as --save-result's file always has them.
    #[arg(help_heading = "Output", long, requires = "save_result")]
    pub save_detailed: bool,
    /// Directory of --save-result's file [default: the current directory].
    #[arg(help_heading = "Output", long)]
    pub result_dir: Option<PathBuf>,
    /// Name of --save-result's file [default: vLLM's BACKEND-RATEqps[-concurrencyN]-MODEL-DATE.json].
    #[arg(help_heading = "Output", long)]
    pub result_filename: Option<String>,
    /// KEY=VALUE pairs kept in summary.json and shown by compare and the reports
    /// (repeatable, or several after one flag).
    #[arg(help_heading = "Output", long, num_args = 1.., value_parser = key_value_arg)]
    pub metadata: Vec<(String, String)>,
    /// A name for the run, kept in summary.json and shown by compare and the reports.
    #[arg(help_heading = "Output", long)]
    pub label: Option<String>,
    /// Print summary.json to stdout, and nothing else there (the table goes to stderr).
    #[arg(help_heading = "Output", long)]
    pub json: bool,
    /// Exit 1 when fewer than this share of the measured requests succeed (0..1); a run in
    /// which nothing succeeded always exits 1.
    #[arg(help_heading = "Output", long, default_value_t = 0.9)]
    pub min_success_rate: f64,
    /// Print the planned schedule and exit without sending anything.
    #[arg(help_heading = "Output", long)]
    pub dry_run: bool,
    /// No progress line.
    #[arg(help_heading = "Output", long, short)]
    pub quiet: bool,
}

/// Limits on each request, the drain, and retries.
#[derive(Debug, Clone, Args)]
pub struct TimeoutArgs {
    /// Limit on establishing a connection (TCP and TLS): seconds, or 500ms.
    #[arg(help_heading = "Timeouts", long, value_parser = duration_arg)]
    pub connect_timeout: Option<Duration>,
    /// Time to first token limit: seconds, or 500ms, 2m.
    #[arg(help_heading = "Timeouts", long, value_parser = duration_arg)]
    pub ttft_timeout: Option<Duration>,
    /// Longest silence between two events of a response: seconds, or 500ms.
    #[arg(help_heading = "Timeouts", long, value_parser = duration_arg)]
    pub idle_timeout: Option<Duration>,
    /// Limit on a whole request: seconds, or 500ms, 10m.
    #[arg(help_heading = "Timeouts", long, value_parser = duration_arg)]
    pub request_timeout: Option<Duration>,
    /// Time requests in flight get to finish after the last send (or Ctrl-C): seconds, or
    /// 500ms, 10m.
    #[arg(help_heading = "Timeouts", long, value_parser = duration_arg, default_value = "30s")]
    pub drain_timeout: Duration,
    /// Retry a request that failed before any token up to this many times (counted apart).
    #[arg(help_heading = "Timeouts", long, default_value_t = 0)]
    pub retries: u32,
    /// First wait before a retry, doubling each time; a server's Retry-After wins: seconds,
    /// or 500ms.
    #[arg(help_heading = "Timeouts", long, value_parser = duration_arg, default_value = "500ms")]
    pub retry_backoff: Duration,
}

/// What is measured beside the requests: the server's metrics, the GPUs.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Scrape the server's Prometheus metrics during the run (`auto`: BASE_URL/metrics).
    #[arg(help_heading = "Telemetry", long)]
    pub server_metrics: Option<String>,
    /// Bearer token for an explicit --server-metrics URL (the API key goes only to the
    /// server's own /metrics, `auto`).
    #[arg(
        help_heading = "Telemetry",
        long,
        env = "QUETTA_SERVER_METRICS_KEY",
        hide_env_values = true
    )]
    pub server_metrics_key: Option<String>,
    /// Interval between two scrapes: seconds, or 500ms.
    #[arg(help_heading = "Telemetry", long, value_parser = duration_arg, default_value = "1s")]
    pub server_metrics_interval: Duration,
    /// Sample the local NVIDIA GPUs through NVML during the run (gpu.jsonl; energy per token).
    #[arg(help_heading = "Telemetry", long)]
    pub gpu_telemetry: bool,
    /// Interval between two GPU samples: seconds, or 100ms.
    #[arg(help_heading = "Telemetry", long, value_parser = duration_arg, default_value = "100ms")]
    pub gpu_interval: Duration,
}

/// Flags of `quetta-bench run`.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("rate").args(["request_rate", "session_rate"]).multiple(false))]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub twin: TwinArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub sharding: ShardingArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    #[command(flatten)]
    pub managed: ManagedArgs,
}

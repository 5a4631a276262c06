//! The flags of `run` (shared by `sweep` and `slo`) and their one conversion to a
//! [`quetta::Benchmark`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use quetta::workload::dataset::Filters;
use quetta::workload::spec::{DatasetFormat, SessionFormat, Source, TraceFormat, Vision};
use quetta::{Arrival, Benchmark, History, Load, Protocol, SimConfig, Target, WorkloadSpec};

/// A duration flag: `500ms`, `30s`, `2m`; a bare number is seconds (as in vLLM and GuideLLM).
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    quetta::metrics::slo::parse_duration_secs(s).ok_or_else(|| {
        format!("{s:?} is not a duration (e.g. 500ms, 30s, 2m; a bare number is seconds)")
    })
}

/// A speed factor: `2`, `2x`, `0.5x`.
pub fn speed_arg(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches(['x', 'X'])
        .parse()
        .map_err(|_| format!("{s:?} is not a factor like 2x"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{s:?} is not a positive factor"))
    }
}

pub fn positive_f64(s: &str) -> Result<f64, String> {
    let v = s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0);
    v.ok_or_else(|| format!("{s:?} must be a positive number"))
}

pub fn positive_u64(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{s:?} must be a positive whole number"))
}

fn positive_usize(s: &str) -> Result<usize, String> {
    positive_u64(s).map(|v| usize::try_from(v).unwrap_or(usize::MAX))
}

fn header_arg(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected NAME:VALUE"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

macro_rules! choice {
    ($name:ident { $($(#[doc = $d:literal])* $v:ident),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
        pub enum $name { $($(#[doc = $d])* $v),+ }
    };
}

/// `--endpoint`: OpenAI's chat or completions API, or a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
    /// The path requests go to (the protocol's own path unless given).
    Path(String),
}

/// `--endpoint`: `chat`, `completions`, vLLM's paths `/v1/chat/completions`,
/// `/v1/completions`, or any path (`/v1/responses`, `/v1/messages`, a proxy's own).
fn endpoint_arg(s: &str) -> Result<Endpoint, String> {
    match s.trim().trim_end_matches('/') {
        "chat" | "/v1/chat/completions" | "/chat/completions" => Ok(Endpoint::Chat),
        "completions" | "/v1/completions" | "/completions" => Ok(Endpoint::Completions),
        p if p.starts_with('/') => Ok(Endpoint::Path(p.to_owned())),
        _ => Err(format!("{s:?}: expected chat, completions, or a path such as /v1/responses")),
    }
}

/// `--backend`: a kind of target, or any protocol by its name (vLLM's backend names and
/// AIPerf's endpoint types among them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Kind(BackendArg),
    Protocol(Protocol),
}

fn backend_parser() -> impl clap::builder::TypedValueParser<Value = Backend> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let kinds = BackendArg::value_variants().iter().filter_map(ValueEnum::to_possible_value);
    let protocols = Protocol::all().flat_map(|p| {
        let i = p.info();
        std::iter::once(PossibleValue::new(i.name).help(i.about)).chain(
            std::iter::once(i.endpoint)
                .chain(i.aliases.iter().copied())
                .map(|a| PossibleValue::new(a).hide(true)),
        )
    });
    let mut seen = std::collections::BTreeSet::new();
    let values: Vec<PossibleValue> =
        kinds.chain(protocols).filter(|v| seen.insert(v.get_name().to_owned())).collect();
    PossibleValuesParser::new(values).map(|s| match BackendArg::from_str(&s, true) {
        Ok(k) => Backend::Kind(k),
        Err(_) => Backend::Protocol(Protocol::from_name(&s).expect("a listed protocol name")),
    })
}

/// `--endpoint-type`: AIPerf's names (`chat`, `completions`, `responses`, `messages`, ...).
fn endpoint_type_arg(s: &str) -> Result<Protocol, String> {
    Protocol::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Protocol::all().map(Protocol::endpoint).collect();
        format!("{s:?} is not an endpoint type: {}", names.join(", "))
    })
}

/// `--request-rate`: requests per second, or `inf` (vLLM's: no schedule, every request at
/// once, capped by --max-concurrency).
fn rate_arg(s: &str) -> Result<f64, String> {
    if matches!(s.trim(), "inf" | "Inf" | "INF" | "infinity") {
        return Ok(f64::INFINITY);
    }
    positive_f64(s).map_err(|e| format!("{e}, or inf"))
}

/// `--metadata KEY=VALUE`.
fn key_value_arg(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected KEY=VALUE"))?;
    if k.trim().is_empty() {
        return Err(format!("{s:?}: the key is empty"));
    }
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

choice!(DatasetName {
    /// Synthetic prompts of --random-input-len tokens (no file).
    Random,
    /// Random prompts sent as token ids (completions; needs --tokenizer).
    RandomIds,
    /// Random queries and documents (a rerank or score protocol; --random-batch-size
    /// documents per query).
    RandomRerank,
    /// A ShareGPT JSON file (--dataset-path).
    Sharegpt,
    /// The lines of a text file as prompts (--dataset-path): Quetta does not build vLLM's
    /// sonnet prompts of fixed length from random lines.
    Sonnet,
    /// JSONL with a `prompt` field per line (--dataset-path).
    Custom,
});
choice!(DatasetArg { Sharegpt, Jsonl, Text });
choice!(TraceArg {
    Mooncake,
    Azure,
    /// Any CSV with a header, read through --trace-columns (BurstGPT's by default).
    Csv,
    /// Any JSONL, read through --trace-columns.
    Jsonl,
});
impl TraceArg {
    pub fn format(self) -> TraceFormat {
        match self {
            TraceArg::Mooncake => TraceFormat::Mooncake,
            TraceArg::Azure => TraceFormat::Azure,
            TraceArg::Csv => TraceFormat::Csv,
            TraceArg::Jsonl => TraceFormat::Jsonl,
        }
    }
}

choice!(BackendArg {
    /// Any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, OpenAI); chat API unless
    /// --endpoint says otherwise.
    Openai,
    /// OpenAI-compatible, chat API (vLLM's name).
    OpenaiChat,
    /// OpenAI-compatible, completions API unless --endpoint says otherwise (as vLLM's).
    Vllm,
    /// OpenAI-compatible, completions API unless --endpoint says otherwise.
    Sglang,
    /// OpenAI-compatible (TGI's Messages API), completions unless --endpoint says otherwise.
    Tgi,
    /// A LiteLLM proxy: its x-litellm-* headers are kept, its error objects named by kind.
    Litellm,
    /// An Amazon SageMaker endpoint (--sagemaker-endpoint; SigV4, the AWS credential chain).
    Sagemaker,
    /// Amazon Bedrock (--model ID, inference profile or ARN; SigV4, the AWS credential chain).
    Bedrock,
    /// Google Vertex AI (--vertex-project, --model; application default credentials).
    Vertex,
});
choice!(ModalityArg {
    Text,
    /// Attach images (the bundled test image, or --image files) to each chat request.
    Vision,
});
choice!(SessionArg {
    /// ShareGPT-style conversations, tool-call conversations included.
    Sharegpt,
    /// JSONL lines with `turns: [user message, ...]` (MT-Bench).
    TurnsJsonl,
    /// A TOML distribution file: turns, new-prompt and output lengths, think time.
    Synth,
});
choice!(PacingArg {
    /// Each session sends its next turn when its reply has arrived and its think time passed.
    PerSession,
    /// A barrier at every turn across a group of sessions (a herd: artificial spikes).
    Interleaved,
    /// Sessions start at the times recorded in the file (`start_ms`).
    Recorded,
});
choice!(HistoryArg {
    /// Earlier turns carry the engine's own replies.
    Engine,
    /// Earlier turns carry the replies recorded in the dataset.
    Recorded,
});
choice!(ModeArg {
    Normal,
    /// Unique random-token prompts (no prefix-cache hits), ignore_eos and min_tokens = max_tokens.
    Stress,
});
choice!(ArrivalArg { Poisson, Gamma, Constant });
choice!(PayloadArg {
    /// OpenAI chat body (messages API of TGI, LMI and vLLM containers); SSE answers.
    Openai,
    /// `{"inputs", "parameters"}` (JumpStart, TGI, LMI); JSON-lines answers.
    Jumpstart,
    /// --sagemaker-template FILE with {{prompt}}, {{messages}}, {{max_tokens}}, {{stream}}.
    Template,
});
choice!(BedrockApiArg {
    /// ConverseStream / Converse: one body for every model.
    Converse,
    /// InvokeModelWithResponseStream / InvokeModel: the model family's own body.
    Invoke,
});
choice!(KserveTensorsArg {
    /// TensorRT-LLM's ensemble.
    Trtllm,
    /// Triton's vLLM backend.
    Vllm,
    /// TensorRT-LLM's tensorrt_llm model: token ids in and out (needs --tokenizer and
    /// token-id prompts).
    Ids,
});
choice!(VertexApiArg {
    /// Gemini streamGenerateContent (SSE).
    Gemini,
    /// The OpenAI-compatible endpoint (Model Garden, or --vertex-endpoint-id).
    Openai,
    /// :predict on --vertex-endpoint-id (not streamed: TTFT equals E2E).
    Predict,
});

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

/// Flags of `quetta-bench run`.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("rate").args(["request_rate", "session_rate"]).multiple(false))]
pub struct RunArgs {
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
    /// Measured requests to send (default 100 when no --duration is given; a trace: all).
    #[arg(help_heading = "Load", long, value_parser = positive_u64)]
    pub num_requests: Option<u64>,
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
    #[arg(help_heading = "Workload", long, conflicts_with_all = ["trace", "dataset"])]
    pub workload: Option<PathBuf>,
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
    #[command(flatten)]
    pub managed: ManagedArgs,
}

impl RunArgs {
    /// Whether the run targets Quetta's embedded simulator.
    pub fn embedded_simulator(&self) -> bool {
        self.base_url.is_none()
            && !matches!(
                self.backend(),
                BackendArg::Sagemaker | BackendArg::Bedrock | BackendArg::Vertex
            )
    }

    /// The kind of target (`openai` for any protocol named by --backend).
    pub fn backend(&self) -> BackendArg {
        match self.backend {
            Some(Backend::Kind(k)) => k,
            _ => BackendArg::Openai,
        }
    }

    /// The protocol of the flags: --endpoint-type, else --backend's protocol, else the
    /// OpenAI API of --endpoint (vLLM's backends call the completions API, as `vllm bench
    /// serve` does), or the protocol whose path --endpoint names.
    pub fn protocol(&self) -> Protocol {
        if let Some(p) = self.endpoint_type {
            return p;
        }
        if let Some(Backend::Protocol(p)) = self.backend {
            return p;
        }
        let completions = matches!(self.dataset_name, Some(DatasetName::RandomIds))
            || matches!(self.backend(), BackendArg::Vllm | BackendArg::Sglang | BackendArg::Tgi);
        match &self.endpoint {
            Some(Endpoint::Chat) => Protocol::Chat,
            Some(Endpoint::Completions) => Protocol::Completions,
            Some(Endpoint::Path(p)) => Protocol::from_path(p).unwrap_or(Protocol::Chat),
            None if completions => Protocol::Completions,
            None => Protocol::Chat,
        }
    }

    /// The requests to send: --num-requests, or vLLM's --num-prompts (its inputs, in a
    /// batched run: requests = prompts / batch size, rounded up).
    fn requests(&self) -> Option<u64> {
        let batched = !self.protocol().kind().generates();
        let per = u64::from(self.random_batch_size);
        self.num_requests.or(self.num_prompts.map(|n| if batched { n.div_ceil(per) } else { n }))
    }

    /// The path --endpoint gives, where it is not the protocol's own.
    fn path(&self) -> Option<String> {
        match &self.endpoint {
            Some(Endpoint::Path(p)) if Protocol::from_path(p) != Some(self.protocol()) => {
                Some(p.clone())
            }
            _ => None,
        }
    }

    /// Warnings about flags whose meaning differs from the same words in vLLM.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.backend == Some(Backend::Kind(BackendArg::Openai)) && self.endpoint.is_none() {
            w.push("--backend openai calls the chat API here; vLLM's --backend openai calls /v1/completions (give --endpoint /v1/completions for that)".into());
        }
        if self.dataset_name == Some(DatasetName::Sonnet) {
            w.push("--dataset-name sonnet: each line of --dataset-path is one prompt; vLLM builds its sonnet prompts of fixed length from random lines".into());
        }
        if self.backend() == BackendArg::Litellm && self.api_key().is_none() {
            w.push("--backend litellm without a key (--api-key, OPENAI_API_KEY or LITELLM_API_KEY): a proxy with a master key refuses every request".into());
        }
        w
    }

    /// The API key: --api-key, else the environment of the target's kind (a key goes
    /// only to the service it is for: ANTHROPIC_API_KEY alone to Anthropic's protocol).
    fn api_key(&self) -> Option<String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let key = match (self.backend(), self.protocol()) {
            (BackendArg::Litellm, _) => self
                .api_key
                .clone()
                .or_else(|| env("OPENAI_API_KEY"))
                .or_else(|| env("LITELLM_API_KEY")),
            (_, Protocol::Messages) => self.api_key.clone().or_else(|| env("ANTHROPIC_API_KEY")),
            _ => self.api_key.clone().or_else(|| env("OPENAI_API_KEY")),
        };
        key.filter(|k| !k.is_empty())
    }

    fn multiturn(&self) -> bool {
        self.sessions.is_some()
            || self.profile.as_deref().is_some_and(|p| {
                quetta::workload::profiles::find(p).is_ok_and(|p| p.is_multiturn())
            })
    }

    /// The Bedrock configuration of the flags.
    fn bedrock(&self) -> Result<quetta::managed::BedrockConfig> {
        use quetta::managed::{BedrockApi, BedrockConfig, Family};
        let m = &self.managed;
        let model = self.model.clone().context("--backend bedrock needs --model (a model id, an inference profile id or ARN, or a provisioned-throughput ARN)")?;
        let mut c = BedrockConfig::new(model);
        c.api = match m.bedrock_api {
            BedrockApiArg::Converse => BedrockApi::Converse,
            BedrockApiArg::Invoke => BedrockApi::Invoke,
        };
        c.region.clone_from(&m.aws_region);
        c.profile.clone_from(&m.aws_profile);
        c.endpoint_url.clone_from(&m.aws_endpoint_url);
        if c.api == BedrockApi::Converse
            && (m.bedrock_family.is_some() || m.bedrock_template.is_some())
        {
            bail!("--bedrock-family and --bedrock-template choose the body of --bedrock-api invoke; Converse's body is the same for every model");
        }
        c.family = match (&m.bedrock_family, &m.bedrock_template) {
            (Some(_), Some(_)) => bail!("give --bedrock-family or --bedrock-template, not both"),
            (Some(f), None) => Some(Family::named(f)?),
            (None, Some(p)) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: line {}, column {}: not JSON: {e}",
                        p.display(),
                        e.line(),
                        e.column()
                    )
                })?;
                let ptr = m.bedrock_text_pointer.as_deref().unwrap_or_default();
                Some(Family::custom(body, ptr, ptr))
            }
            (None, None) => None,
        };
        Ok(c)
    }

    /// The target of the flags.
    fn target(&self) -> Result<Target> {
        let m = &self.managed;
        let mut t = match (self.backend(), &self.base_url) {
            (BackendArg::Sagemaker | BackendArg::Bedrock | BackendArg::Vertex, Some(_)) => bail!("--base-url is for OpenAI-compatible servers; with --backend sagemaker or bedrock use --aws-endpoint-url, with vertex --vertex-endpoint-url"),
            (BackendArg::Bedrock, None) => Target::bedrock(self.bedrock()?),
            (BackendArg::Sagemaker, None) => {
                use quetta::managed::{Payload, SageMakerConfig};
                let name = m.sagemaker_endpoint.clone().context("--backend sagemaker needs --sagemaker-endpoint NAME")?;
                let mut c = SageMakerConfig::new(&name);
                c.inference_component.clone_from(&m.inference_component);
                c.target_variant.clone_from(&m.target_variant);
                c.custom_attributes.clone_from(&m.custom_attributes);
                c.region.clone_from(&m.aws_region);
                c.profile.clone_from(&m.aws_profile);
                c.endpoint_url.clone_from(&m.aws_endpoint_url);
                c.payload = match m.sagemaker_payload {
                    PayloadArg::Openai => Payload::OpenAi,
                    PayloadArg::Jumpstart => Payload::JumpStart,
                    PayloadArg::Template => {
                        let p = m.sagemaker_template.as_ref().context("--sagemaker-payload template needs --sagemaker-template FILE")?;
                        Payload::template_file(p, &m.sagemaker_text_pointer).map_err(anyhow::Error::msg)?
                    }
                };
                Target::sagemaker(c)
            }
            (BackendArg::Vertex, None) => {
                use quetta::managed::{VertexApi, VertexConfig};
                let project = m.vertex_project.clone().context("--backend vertex needs --vertex-project P")?;
                let mut c = VertexConfig::new(project, &m.vertex_location, "");
                c.api = match m.vertex_api {
                    VertexApiArg::Gemini => VertexApi::Gemini,
                    VertexApiArg::Openai => VertexApi::OpenAi,
                    VertexApiArg::Predict => VertexApi::Predict,
                };
                c.endpoint_id.clone_from(&m.vertex_endpoint_id);
                c.endpoint_url.clone_from(&m.vertex_endpoint_url);
                c.credentials_file.clone_from(&m.vertex_credentials);
                Target::vertex(c)
            }
            (BackendArg::Litellm, Some(u)) => Target::litellm(u),
            (_, Some(u)) => Target::openai(u),
            (_, None) => {
                let c = SimConfig {
                    ttft: Duration::from_secs_f64(self.sim_ttft_ms.max(0.0) / 1e3),
                    itl: Duration::from_secs_f64(self.sim_itl_ms.max(0.0) / 1e3),
                    faults: self.sim_faults.clone(),
                    max_running: self.sim_max_running,
                    ..SimConfig::default()
                };
                Target::simulator(match self.twin()? {
                    Some(t) => t.sim_config(c),
                    None => c,
                })
            }
        };
        t.protocol = self.protocol();
        t.protocol_options.chain_responses = self.chain_responses;
        t.protocol_options.kserve_tensors = match self.kserve_tensors {
            KserveTensorsArg::Trtllm => quetta::protocols::kserve::Tensors::TensorRtLlm,
            KserveTensorsArg::Vllm => quetta::protocols::kserve::Tensors::Vllm,
            KserveTensorsArg::Ids => quetta::protocols::kserve::Tensors::TokenIds,
        };
        t.path = self.path();
        t.model.clone_from(&self.model);
        t.api_key = self.api_key();
        t.preflight = !self.no_preflight;
        t.insecure = self.insecure;
        t.ca_cert.clone_from(&self.ca_cert);
        t.http2 = self.http2;
        t.headers.clone_from(&self.headers);
        t.connect_timeout = self.connect_timeout;
        t.record_headers.clone_from(&self.record_headers);
        t.session_header = Some(self.session_header.clone()).filter(|h| h != "none");
        t.session_body_field = Some(self.session_body_field.clone()).filter(|h| h != "none");
        Ok(t)
    }

    /// The workload of the flags.
    fn workload(&self) -> WorkloadSpec {
        let source = if let Some(p) = &self.sessions {
            let format = match self.session_format {
                SessionArg::Sharegpt => SessionFormat::Sharegpt,
                SessionArg::TurnsJsonl => SessionFormat::TurnsJsonl,
                SessionArg::Synth => SessionFormat::Synth,
            };
            Source::Sessions { path: p.clone(), format }
        } else if let Some(p) = &self.trace {
            let format = self.trace_format.format();
            Source::Trace { path: p.clone(), format, columns: self.trace_columns.clone() }
        } else if let Some(p) = &self.dataset {
            let format = match (self.dataset_format, self.dataset_name) {
                (Some(DatasetArg::Jsonl), _) | (None, Some(DatasetName::Custom)) => {
                    DatasetFormat::Jsonl
                }
                (Some(DatasetArg::Text), _) | (None, Some(DatasetName::Sonnet)) => {
                    DatasetFormat::Text
                }
                _ => DatasetFormat::Sharegpt,
            };
            let filters = Filters {
                min_input_len: self.min_input_len,
                max_input_len: self.max_input_len,
                max_output_len: self.max_output_len,
            };
            Source::Dataset { path: p.clone(), format, filters }
        } else if let Some(p) = &self.audio {
            Source::Audio { path: p.clone() }
        } else if let Some(p) = &self.workload {
            Source::Distribution { path: p.clone() }
        } else if let Some(name) = &self.profile {
            Source::Profile { name: name.clone(), file: self.profile_file.clone() }
        } else {
            Source::Synthetic
        };
        WorkloadSpec {
            source,
            input_len: self.input_len,
            input_stddev: self.input_len_stddev,
            output_len: self.output_len,
            output_stddev: self.output_len_stddev,
            range_ratio: self.random_range_ratio,
            input_range_ratio: self.input_range_ratio,
            output_range_ratio: self.output_range_ratio,
            prefix_len: self.random_prefix_len,
            chat: self.protocol().takes_messages(),
            tokenizer: self.tokenizer.clone(),
            token_ids: self.token_ids || self.dataset_name == Some(DatasetName::RandomIds),
            stress: self.mode == ModeArg::Stress,
            vision: (self.modality == ModalityArg::Vision).then(|| Vision {
                images: self.images.clone(),
                per_request: self.images_per_request,
            }),
            max_turns: self.max_turns,
            replay_speed: self.trace_speed,
            block_size: self.block_size,
            seed: self.seed,
            kind: self.protocol().kind(),
            inputs_per_request: self.random_batch_size,
        }
    }

    fn arrival(&self) -> Arrival {
        match (self.burstiness, self.arrival.unwrap_or(ArrivalArg::Poisson)) {
            (Some(b), _) => Arrival::Gamma { burstiness: b },
            (None, ArrivalArg::Gamma) => Arrival::Gamma { burstiness: 1.0 },
            (None, ArrivalArg::Poisson) => Arrival::Poisson,
            (None, ArrivalArg::Constant) => Arrival::Constant,
        }
    }

    /// The load of the flags (`None`: the workload's own, or a closed loop of 16).
    fn load(&self) -> Result<Option<Load>> {
        let cap = self.max_concurrency;
        let open = |rate: f64, arrival| Some(Load::Open { rate, arrival, max_concurrency: cap });
        if self.multiturn() {
            let n = self.session_concurrency.unwrap_or(8);
            return Ok(match (self.session_rate, self.pacing) {
                (Some(r), _) => open(r, self.arrival()),
                (None, PacingArg::Recorded) => Some(Load::Recorded { max_concurrency: cap }),
                (None, PacingArg::Interleaved) => Some(Load::Interleaved { sessions: n }),
                (None, PacingArg::PerSession) => Some(Load::closed(n)),
            });
        }
        if self.session_rate.is_some()
            || self.session_concurrency.is_some()
            || self.num_sessions.is_some()
        {
            bail!("--session-rate, --session-concurrency and --num-sessions apply to multi-turn runs (--sessions or a multi-turn profile)");
        }
        if (self.arrival.is_some() || self.burstiness.is_some())
            && self.request_rate.is_none()
            && self.profile_file.is_none()
        {
            bail!("--arrival and --burstiness shape an open loop: give --request-rate (or --session-rate)");
        }
        if self.concurrency.is_some() && cap.is_some() {
            bail!("--concurrency and --max-concurrency both set the requests in flight of a closed loop: give one");
        }
        if self.request_rate == Some(f64::INFINITY) {
            if self.ramp_from.is_some() {
                bail!("--ramp-from needs a finite --request-rate to ramp to");
            }
            // vLLM's `inf`: no schedule; every request at once, or --max-concurrency at a time
            let n = match (cap, self.duration) {
                (Some(c), _) => c,
                (None, None) => usize::try_from(self.requests().unwrap_or(quetta::DEFAULT_REQUESTS)).unwrap_or(usize::MAX),
                (None, Some(_)) => bail!("--request-rate inf with --duration sends without end: cap it with --max-concurrency"),
            };
            return Ok(Some(Load::closed(n)));
        }
        if let (Some(size), Some(gap)) = (self.burst_size, self.burst_gap) {
            let size = u32::try_from(size).unwrap_or(u32::MAX);
            return Ok(open(1.0, Arrival::Bursts { size, gap }));
        }
        if let Some(rate) = self.request_rate {
            let arrival = match self.ramp_from {
                Some(from) => Arrival::Ramp {
                    from,
                    over: self.ramp_over.unwrap_or(Duration::from_secs(60)),
                    poisson: self.arrival != Some(ArrivalArg::Constant),
                },
                None => self.arrival(),
            };
            return Ok(open(rate, arrival));
        }
        if let Some(c) = self.concurrency {
            return Ok(Some(Load::closed(c)));
        }
        let replay = self.trace.is_some()
            || self.workload.is_some()
            || self.profile.as_deref().is_some_and(|p| {
                quetta::workload::profiles::find(p)
                    .is_ok_and(|p| p.source != quetta::workload::profiles::Source::Synthetic)
            });
        match (cap, replay) {
            (Some(_), true) => Ok(Some(Load::Recorded { max_concurrency: cap })),
            // vLLM's default rate is inf: --max-concurrency alone is a closed loop
            (Some(c), false) if self.profile_file.is_none() => Ok(Some(Load::closed(c))),
            _ => Ok(None),
        }
    }

    /// The twin named by --sim-model, its what-if flags applied, counting prompts with
    /// --tokenizer when one is given.
    pub fn twin(&self) -> Result<Option<quetta::Twin>> {
        let Some(p) = &self.sim_model else { return Ok(None) };
        if self.base_url.is_some() {
            bail!("--sim-model makes the embedded simulator a twin: drop --base-url");
        }
        let w = quetta::sim::model::WhatIf {
            max_seqs: self.sim_max_seqs,
            kv_tokens: self.sim_kv_tokens,
            speed: self.sim_speed,
        };
        Ok(Some(quetta::Twin::load(p, w, self.tokenizer.as_deref())?))
    }

    /// The one conversion of the flags to a benchmark (reads only a --sim-model file and
    /// its tokenizer).
    pub fn to_benchmark(&self) -> Result<Benchmark> {
        let r = self.min_success_rate;
        if !(0.0..=1.0).contains(&r) {
            bail!("--min-success-rate must be between 0 and 1, got {r}");
        }
        const VLLM_METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];
        if let Some(m) = self.percentile_metrics.iter().find(|m| !VLLM_METRICS.contains(&m.trim()))
        {
            bail!("--percentile-metrics: {m:?} is not one of {}", VLLM_METRICS.join(", "));
        }
        if self.dataset_name.is_some_and(|d| {
            matches!(d, DatasetName::Random | DatasetName::RandomIds | DatasetName::RandomRerank)
        }) && self.dataset.is_some()
        {
            bail!("--dataset-name random makes its own prompts: drop --dataset-path, or name the file's format (sharegpt, custom, sonnet)");
        }
        if self.dataset_name.is_some_and(|d| {
            matches!(d, DatasetName::Sharegpt | DatasetName::Sonnet | DatasetName::Custom)
        }) && self.dataset.is_none()
        {
            bail!(
                "--dataset-name {:?} reads a file: give --dataset-path FILE",
                self.dataset_name
                    .map(|d| d.to_possible_value().map(|v| v.get_name().to_owned()))
                    .unwrap_or_default()
                    .unwrap_or_default()
            );
        }
        let mut b = Benchmark::new(self.target()?)
            .workload(self.workload())
            .tool(quetta::Tool::new("quetta-bench", env!("CARGO_PKG_VERSION")));
        b.load = self.load()?;
        b.requests = self.requests();
        if self.dataset_name == Some(DatasetName::RandomRerank)
            && self.protocol().kind() != quetta::RequestKind::Rank
        {
            bail!("--dataset-name random-rerank makes queries and documents: give a rerank protocol (--backend vllm-rerank, tei-rerank or vllm-score)");
        }
        b.duration = self.duration;
        b.warmup = self.warmup;
        b.drain_timeout = self.drain_timeout;
        let slos: Vec<&str> = self
            .slo
            .iter()
            .map(String::as_str)
            .chain(self.goodput.iter().map(String::as_str))
            .collect();
        b.slos = (!slos.is_empty())
            .then(|| slos.join(","))
            .as_deref()
            .map(str::parse)
            .transpose()
            .context(if self.goodput.is_empty() { "--slo" } else { "--slo/--goodput" })?;
        b.label.clone_from(&self.label);
        b.metadata = self.metadata.iter().cloned().collect();
        b.percentiles.clone_from(&self.percentiles);
        b.output_dir =
            Some(self.output_dir.clone().unwrap_or_else(|| quetta::RunDir::default_path("run")));
        b.overwrite = self.overwrite;
        b.sampling.temperature = self.temperature;
        b.sampling.top_p = self.top_p;
        b.extra_body = match &self.extra_body {
            Some(s) => serde_json::from_str(s).context("--extra-body must be a JSON object")?,
            None => Default::default(),
        };
        b.ignore_eos = self.ignore_eos;
        b.exact_output_length = self.exact_output_length;
        b.stream = !self.no_stream;
        b.timeouts.first_token = self.ttft_timeout;
        b.timeouts.idle = self.idle_timeout;
        b.timeouts.total = self.request_timeout;
        b.retries = self.retries;
        b.retry_backoff = self.retry_backoff;
        b.sessions.think =
            self.think_time.parse().map_err(|e: String| anyhow::anyhow!("--think-time: {e}"))?;
        b.sessions.history = match self.history {
            HistoryArg::Engine => History::Engine,
            HistoryArg::Recorded => History::Recorded,
        };
        b.sessions.count = self.num_sessions;
        b.sessions.max_concurrency = self.max_concurrency.filter(|_| self.multiturn());
        b.telemetry.server_metrics.clone_from(&self.server_metrics);
        b.telemetry.server_metrics_interval = self.server_metrics_interval;
        b.telemetry.server_metrics_key = self.server_metrics_key.clone().filter(|k| !k.is_empty());
        b.telemetry.gpu = self.gpu_telemetry;
        b.telemetry.gpu_interval = self.gpu_interval;
        b.stop_on_saturation = self.stop_on_saturation;
        b.reset_prefix_cache.clone_from(&self.reset_prefix_cache);
        b.seed = self.seed;
        b.threads = self.threads;
        b.sharding = self.sharding()?;
        Ok(b)
    }

    /// `--shard K/N`, or `--shards N` with K from JOB_COMPLETION_INDEX; `--coordinator`.
    fn sharding(&self) -> Result<Option<quetta::Sharding>> {
        let shard = match (&self.shard, self.shards) {
            (Some(s), _) => {
                s.parse::<quetta::Shard>().map_err(|e| anyhow::anyhow!("--shard: {e}"))?
            }
            (None, Some(n)) => {
                let k = self.shard_index.as_deref().context(
                    "--shards N takes the shard from JOB_COMPLETION_INDEX, which is not set: give --shard K/N",
                )?;
                let k: u32 = k.trim().parse().map_err(|_| {
                    anyhow::anyhow!("JOB_COMPLETION_INDEX {k:?} is not a shard index")
                })?;
                quetta::Shard::new(k, n).map_err(|e| anyhow::anyhow!("--shards: {e}"))?
            }
            (None, None) => {
                if self.coordinator.is_some() {
                    bail!("--coordinator is for sharded runs: give --shard K/N or --shards N");
                }
                return Ok(None);
            }
        };
        let mut s = quetta::Sharding::alone(shard);
        s.coordinator.clone_from(&self.coordinator);
        s.timeout = self.rendezvous_timeout;
        Ok(Some(s))
    }
}

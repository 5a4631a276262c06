//! Flag values: their parsers (durations, speeds, rates, headers) and the named choices.

use std::time::Duration;

use anyhow::Result;
use clap::ValueEnum;
use quetta::workload::spec::TraceFormat;
use quetta::Protocol;

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

/// A share: `2%` or `0.02` (above 0, at most 1).
pub fn share_arg(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    v.ok()
        .filter(|v| v.is_finite() && *v > 0.0 && *v <= 1.0)
        .ok_or_else(|| format!("{s:?} is not a share like 2% or 0.02"))
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

pub(crate) fn positive_usize(s: &str) -> Result<usize, String> {
    positive_u64(s).map(|v| usize::try_from(v).unwrap_or(usize::MAX))
}

pub(crate) fn header_arg(s: &str) -> Result<(String, String), String> {
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
pub(crate) fn endpoint_arg(s: &str) -> Result<Endpoint, String> {
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

pub(crate) fn backend_parser() -> impl clap::builder::TypedValueParser<Value = Backend> {
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
pub(crate) fn endpoint_type_arg(s: &str) -> Result<Protocol, String> {
    Protocol::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Protocol::all().map(Protocol::endpoint).collect();
        format!("{s:?} is not an endpoint type: {}", names.join(", "))
    })
}

/// `--request-rate`: requests per second, or `inf` (vLLM's: no schedule, every request at
/// once, capped by --max-concurrency).
pub(crate) fn rate_arg(s: &str) -> Result<f64, String> {
    if matches!(s.trim(), "inf" | "Inf" | "INF" | "infinity") {
        return Ok(f64::INFINITY);
    }
    positive_f64(s).map_err(|e| format!("{e}, or inf"))
}

/// `--metadata KEY=VALUE`.
pub(crate) fn key_value_arg(s: &str) -> Result<(String, String), String> {
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

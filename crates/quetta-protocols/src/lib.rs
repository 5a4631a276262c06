//! `quetta-protocols`: every HTTP protocol of an inference server, by name.
//!
//! [`Protocol`] is the registry: one entry per protocol, with its name in results, the
//! names users already type for it (vLLM's `--backend`, AIPerf's `--endpoint-type`), what
//! its requests measure ([`RequestKind`]) and its default path; [`engine`] builds the engine
//! of any of them over the shared transport of `quetta-http`. OpenAI's chat and
//! completions are `quetta-openai`'s engine; every other protocol is a [`Wire`] (how a
//! request is addressed and written, how its answer is decoded) run by [`HttpEngine`]:
//! - server-sent events: OpenAI Responses ([`responses`]), Anthropic Messages
//!   ([`anthropic`]), the engines' own generate APIs ([`native`]: llama.cpp, TGI, SGLang,
//!   Triton/TensorRT-LLM);
//! - plain JSON: embeddings, pooling, rerank and score ([`pooling`]);
//! - multipart uploads: audio transcription ([`audio`]);
//! - gRPC over HTTP/2: KServe v2's `GRPCInferenceService` ([`kserve`]).
//!
//! Adding a protocol is a [`Wire`] (its body and its decoder), its simulator side in
//! `quetta-sim`, and one entry in [`Protocol`]'s table: nothing in the runner or the
//! binaries. Every decoder stamps nothing itself: the transport stamps each body frame
//! when its bytes arrive, before the decoder sees them.

pub mod anthropic;
pub mod audio;
mod common;
mod engine;
pub mod kserve;
pub mod native;
pub mod pooling;
pub mod responses;

use std::sync::Arc;

use quetta_engine::Engine;
pub use quetta_engine::RequestKind;
use quetta_http::BuildError;
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};

pub use engine::{BodyContext, Encoded, HttpEngine, KeyHeader, Wire};

/// A protocol Quetta speaks over HTTP. See [`Protocol::ALL`] for the table.
///
/// ```
/// use quetta_protocols::Protocol;
/// assert_eq!(Protocol::from_name("openai-responses"), Some(Protocol::Responses));
/// assert_eq!(Protocol::from_name("messages"), Some(Protocol::Messages)); // AIPerf's name
/// assert_eq!(Protocol::Messages.name(), "anthropic");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// OpenAI chat completions (`/v1/chat/completions`).
    Chat,
    /// OpenAI completions (`/v1/completions`).
    Completions,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Messages,
    /// llama.cpp's native `/completion`.
    LlamaCpp,
    /// Hugging Face TGI's `/generate_stream` and `/generate`.
    Tgi,
    /// SGLang's native `/generate`.
    Sglang,
    /// Triton's generate extension (TensorRT-LLM): `/v2/models/{model}/generate_stream`.
    TensorRtLlm,
    /// OpenAI embeddings (`/v1/embeddings`).
    Embeddings,
    /// vLLM's chat form of embeddings (`/v1/embeddings` with `messages`).
    ChatEmbeddings,
    /// vLLM's CLIP form of chat embeddings (an image alone where there is one).
    ClipEmbeddings,
    /// vLLM's VLM2Vec form of chat embeddings (the image first, an instruction after it).
    Vlm2VecEmbeddings,
    /// Infinity's embeddings (`/embeddings`).
    InfinityEmbeddings,
    /// Infinity's CLIP form (an image's URL with `modality: image`).
    InfinityClipEmbeddings,
    /// vLLM's `/pooling`.
    Pooling,
    /// Rerank, the Cohere/Jina shape vLLM and llama.cpp serve (`/v1/rerank`).
    Rerank,
    /// Hugging Face TEI's rerank (`/rerank`, `texts`).
    TeiRerank,
    /// vLLM's `/score`.
    Score,
    /// Audio transcription (`/v1/audio/transcriptions`, multipart).
    Transcription,
    /// KServe v2 over gRPC (Triton, KServe): `ModelStreamInfer` with TensorRT-LLM's
    /// ensemble tensors.
    KserveGrpc,
}

/// One row of the registry.
#[derive(Debug)]
pub struct ProtocolInfo {
    pub protocol: Protocol,
    /// The protocol's name in results (`summary.json`'s backend) and on the command line.
    pub name: &'static str,
    /// The endpoint type results record (AIPerf's names where it has one).
    pub endpoint: &'static str,
    /// Other names users type for it: vLLM's `--backend` and AIPerf's `--endpoint-type`.
    pub aliases: &'static [&'static str],
    /// What its requests measure.
    pub kind: RequestKind,
    /// Its default path (`{model}` stands for the model).
    pub path: &'static str,
    /// One line on what it is.
    pub about: &'static str,
}

const TABLE: &[ProtocolInfo] = &[
    ProtocolInfo {
        protocol: Protocol::Chat,
        name: "openai-chat",
        endpoint: "chat",
        aliases: &[],
        kind: RequestKind::Generate,
        path: "/v1/chat/completions",
        about: "OpenAI chat completions (vLLM, SGLang, TGI, llama.cpp, OpenAI)",
    },
    ProtocolInfo {
        protocol: Protocol::Completions,
        name: "openai-completions",
        endpoint: "completions",
        aliases: &[],
        kind: RequestKind::Generate,
        path: "/v1/completions",
        about: "OpenAI completions",
    },
    ProtocolInfo {
        protocol: Protocol::Responses,
        name: "openai-responses",
        endpoint: "responses",
        aliases: &[],
        kind: RequestKind::Generate,
        path: "/v1/responses",
        about: "OpenAI Responses (vLLM, llama.cpp, OpenAI)",
    },
    ProtocolInfo {
        protocol: Protocol::Messages,
        name: "anthropic",
        endpoint: "messages",
        aliases: &["anthropic-messages"],
        kind: RequestKind::Generate,
        path: "/v1/messages",
        about: "Anthropic Messages (x-api-key, anthropic-version)",
    },
    ProtocolInfo {
        protocol: Protocol::LlamaCpp,
        name: "llamacpp",
        endpoint: "llamacpp_completion",
        aliases: &["llama.cpp", "llama-cpp"],
        kind: RequestKind::Generate,
        path: "/completion",
        about: "llama.cpp's native /completion (token ids, timings)",
    },
    ProtocolInfo {
        protocol: Protocol::Tgi,
        name: "tgi-generate",
        endpoint: "huggingface_generate",
        aliases: &[],
        kind: RequestKind::Generate,
        path: "/generate_stream",
        about: "Hugging Face TGI's /generate_stream and /generate",
    },
    ProtocolInfo {
        protocol: Protocol::Sglang,
        name: "sglang-generate",
        endpoint: "sglang_generate",
        aliases: &[],
        kind: RequestKind::Generate,
        path: "/generate",
        about: "SGLang's native /generate (meta_info)",
    },
    ProtocolInfo {
        protocol: Protocol::TensorRtLlm,
        name: "tensorrt-llm",
        endpoint: "triton_generate",
        aliases: &["trt-llm"],
        kind: RequestKind::Generate,
        path: "/v2/models/{model}/generate_stream",
        about: "Triton's generate extension with TensorRT-LLM's ensemble inputs",
    },
    ProtocolInfo {
        protocol: Protocol::Embeddings,
        name: "openai-embeddings",
        endpoint: "embeddings",
        aliases: &["nim_embeddings"],
        kind: RequestKind::Embed,
        path: "/v1/embeddings",
        about: "OpenAI embeddings (vLLM, llama.cpp, TEI, OpenAI); a batch of inputs per request",
    },
    ProtocolInfo {
        protocol: Protocol::ChatEmbeddings,
        name: "openai-embeddings-chat",
        endpoint: "chat_embeddings",
        aliases: &[],
        kind: RequestKind::Embed,
        path: "/v1/embeddings",
        about: "vLLM's chat embeddings: messages with text and images",
    },
    ProtocolInfo {
        protocol: Protocol::ClipEmbeddings,
        name: "openai-embeddings-clip",
        endpoint: "clip_embeddings",
        aliases: &[],
        kind: RequestKind::Embed,
        path: "/v1/embeddings",
        about: "vLLM's CLIP embeddings: a message's image alone where it has one, else its text",
    },
    ProtocolInfo {
        protocol: Protocol::Vlm2VecEmbeddings,
        name: "openai-embeddings-vlm2vec",
        endpoint: "vlm2vec_embeddings",
        aliases: &[],
        kind: RequestKind::Embed,
        path: "/v1/embeddings",
        about: "vLLM's VLM2Vec embeddings: the image first, then an instruction",
    },
    ProtocolInfo {
        protocol: Protocol::InfinityEmbeddings,
        name: "infinity-embeddings",
        endpoint: "infinity_embeddings",
        aliases: &[],
        kind: RequestKind::Embed,
        path: "/embeddings",
        about: "Infinity's embeddings",
    },
    ProtocolInfo {
        protocol: Protocol::InfinityClipEmbeddings,
        name: "infinity-embeddings-clip",
        endpoint: "infinity_clip_embeddings",
        aliases: &[],
        kind: RequestKind::Embed,
        path: "/embeddings",
        about: "Infinity's CLIP embeddings: an image's URL (modality image), else the text",
    },
    ProtocolInfo {
        protocol: Protocol::Pooling,
        name: "vllm-pooling",
        endpoint: "pooling",
        aliases: &[],
        kind: RequestKind::Embed,
        path: "/pooling",
        about: "vLLM's /pooling",
    },
    ProtocolInfo {
        protocol: Protocol::Rerank,
        name: "vllm-rerank",
        endpoint: "rankings",
        aliases: &["rerank", "cohere_rankings"],
        kind: RequestKind::Rank,
        path: "/v1/rerank",
        about: "rerank, the Cohere/Jina shape (vLLM, llama.cpp): a query and documents",
    },
    ProtocolInfo {
        protocol: Protocol::TeiRerank,
        name: "tei-rerank",
        endpoint: "hf_tei_rankings",
        aliases: &[],
        kind: RequestKind::Rank,
        path: "/rerank",
        about: "Hugging Face TEI's rerank (query and texts)",
    },
    ProtocolInfo {
        protocol: Protocol::Score,
        name: "vllm-score",
        endpoint: "score",
        aliases: &[],
        kind: RequestKind::Rank,
        path: "/score",
        about: "vLLM's /score (text_1 against text_2)",
    },
    ProtocolInfo {
        protocol: Protocol::Transcription,
        name: "openai-audio",
        endpoint: "audio_transcription",
        aliases: &["transcriptions"],
        kind: RequestKind::Transcribe,
        path: "/v1/audio/transcriptions",
        about: "audio transcription: a recording uploaded (multipart), its text streamed",
    },
    ProtocolInfo {
        protocol: Protocol::KserveGrpc,
        name: "kserve-grpc",
        endpoint: "kserve_grpc",
        aliases: &["triton-grpc"],
        kind: RequestKind::Generate,
        path: "/inference.GRPCInferenceService/ModelStreamInfer",
        about: "KServe v2 over gRPC (Triton, KServe; grpc:// or grpcs://), TensorRT-LLM's ensemble tensors",
    },
];

impl Protocol {
    /// Every protocol, in the registry's order.
    pub fn all() -> impl Iterator<Item = Protocol> {
        TABLE.iter().map(|i| i.protocol)
    }

    /// The protocol's row in the registry.
    pub fn info(self) -> &'static ProtocolInfo {
        TABLE.iter().find(|i| i.protocol == self).expect("every protocol has a registry row")
    }

    /// Its name in results and on the command line.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The endpoint type results record.
    pub fn endpoint(self) -> &'static str {
        self.info().endpoint
    }

    /// What its requests measure.
    pub fn kind(self) -> RequestKind {
        self.info().kind
    }

    /// The protocol a name stands for: its own name, its endpoint type, or an alias
    /// (case-insensitive; `_` and `-` alike).
    pub fn from_name(name: &str) -> Option<Self> {
        let norm = |s: &str| s.trim().to_ascii_lowercase().replace('_', "-");
        let n = norm(name);
        TABLE
            .iter()
            .find(|i| {
                norm(i.name) == n || norm(i.endpoint) == n || i.aliases.iter().any(|a| norm(a) == n)
            })
            .map(|i| i.protocol)
    }

    /// The protocol whose default path this is (`/v1/responses`; `/v1` may be left out).
    pub fn from_path(path: &str) -> Option<Self> {
        let p = path.trim().trim_end_matches('/');
        let strip = |s: &'static str| s.strip_prefix("/v1").unwrap_or(s);
        TABLE
            .iter()
            .find(|i| !i.path.contains('{') && (i.path == p || strip(i.path) == strip_v1(p)))
            .map(|i| i.protocol)
    }

    /// Whether the protocol's servers list their models at `GET /v1/models` (OpenAI's
    /// protocols do; the engines' native ones need the model named, or have one).
    pub fn lists_models(self) -> bool {
        !matches!(
            self,
            Self::Messages
                | Self::LlamaCpp
                | Self::Tgi
                | Self::Sglang
                | Self::TensorRtLlm
                | Self::TeiRerank
                | Self::KserveGrpc
        )
    }

    /// Whether the protocol's prompts are conversations (else text: a conversation is sent
    /// as its messages joined).
    pub fn takes_messages(self) -> bool {
        matches!(
            self,
            Self::Chat
                | Self::Responses
                | Self::Messages
                | Self::ChatEmbeddings
                | Self::ClipEmbeddings
                | Self::Vlm2VecEmbeddings
                | Self::InfinityClipEmbeddings
        )
    }

    /// Whether a request carries several inputs: a batch of texts to embed, documents to
    /// rank (the chat form of embeddings takes one conversation).
    pub fn takes_batches(self) -> bool {
        match self.kind() {
            RequestKind::Rank => true,
            RequestKind::Embed => !matches!(
                self,
                Self::ChatEmbeddings | Self::ClipEmbeddings | Self::Vlm2VecEmbeddings
            ),
            _ => false,
        }
    }

    /// The model named when none is given, for protocols whose servers do not list theirs
    /// (`None`: the protocol needs one named, or lists them).
    pub fn default_model(self) -> Option<&'static str> {
        match self {
            Self::TensorRtLlm | Self::KserveGrpc => Some("ensemble"),
            Self::LlamaCpp | Self::Tgi | Self::Sglang | Self::TeiRerank => Some("default"),
            _ => None,
        }
    }

    /// Whether the protocol can be told to generate exactly the requested length
    /// (`ignore_eos` or a minimum length); TGI cannot.
    pub fn forces_lengths(self) -> bool {
        !matches!(self, Self::Tgi) && self.kind() == RequestKind::Generate
    }

    /// Whether the protocol's servers stream their answers (embeddings and rankings never
    /// do).
    pub fn streams(self) -> bool {
        matches!(self.kind(), RequestKind::Generate | RequestKind::Transcribe)
    }

    /// The protocol's [`Wire`] (`None` for OpenAI's chat and completions, which
    /// `quetta-openai`'s engine speaks).
    pub fn wire(self, opts: Options) -> Option<Box<dyn Wire>> {
        Some(match self {
            Self::Chat | Self::Completions => return None,
            Self::Responses if opts.chain_responses => Box::new(responses::Responses::chained()),
            Self::Responses => Box::new(responses::Responses::new()),
            Self::Messages => Box::new(anthropic::Messages),
            Self::LlamaCpp => Box::new(native::LlamaCpp),
            Self::Tgi => Box::new(native::Tgi),
            Self::Sglang => Box::new(native::Sglang),
            Self::TensorRtLlm => Box::new(native::TritonGenerate),
            Self::Embeddings => Box::new(pooling::Embed::OPENAI),
            Self::ChatEmbeddings => Box::new(pooling::Embed::CHAT),
            Self::ClipEmbeddings => Box::new(pooling::Embed::CLIP),
            Self::Vlm2VecEmbeddings => Box::new(pooling::Embed::VLM2VEC),
            Self::InfinityEmbeddings => Box::new(pooling::Embed::INFINITY),
            Self::InfinityClipEmbeddings => Box::new(pooling::Embed::INFINITY_CLIP),
            Self::Pooling => Box::new(pooling::Embed::POOLING),
            Self::Rerank => Box::new(pooling::Rank::RERANK),
            Self::TeiRerank => Box::new(pooling::Rank::TEI),
            Self::Score => Box::new(pooling::Rank::SCORE),
            Self::Transcription => Box::new(audio::Transcription),
            Self::KserveGrpc => Box::new(kserve::KserveGrpc { tensors: opts.kserve_tensors }),
        })
    }
}

/// The protocols, a line each: name, what it measures, path, the other names it takes.
pub fn listing() -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "{:<24}{:<11}{:<36}also named", "protocol", "measures", "path");
    for i in TABLE {
        let mut names = vec![i.endpoint];
        names.extend(i.aliases);
        let _ =
            writeln!(s, "{:<24}{:<11}{:<36}{}", i.name, i.kind.as_str(), i.path, names.join(", "));
        let _ = writeln!(s, "{:<24}{}", "", i.about);
    }
    s
}

fn strip_v1(p: &str) -> &str {
    p.strip_prefix("/v1").unwrap_or(p)
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Choices that change how a protocol is spoken, not which.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Responses: chain a session's turns with `previous_response_id` instead of sending
    /// the whole history.
    pub chain_responses: bool,
    /// KServe gRPC: the model's tensor layout.
    pub kserve_tensors: kserve::Tensors,
}

/// The engine of `protocol` for the server of `cfg` (`cfg.api` is set from the protocol).
pub fn engine(
    protocol: Protocol,
    mut cfg: OpenAiConfig,
    opts: Options,
) -> Result<Arc<dyn Engine>, BuildError> {
    if protocol == Protocol::KserveGrpc {
        // gRPC is HTTP/2: grpc:// without TLS (prior knowledge), grpcs:// with it
        cfg.http2 = true;
        if let Some(rest) = cfg.base_url.strip_prefix("grpc://") {
            cfg.base_url = format!("http://{rest}");
        } else if let Some(rest) = cfg.base_url.strip_prefix("grpcs://") {
            cfg.base_url = format!("https://{rest}");
        }
    }
    match protocol.wire(opts) {
        Some(w) => Ok(Arc::new(HttpEngine::new(cfg, w)?)),
        None => {
            cfg.api = if protocol == Protocol::Completions { Api::Completions } else { Api::Chat };
            Ok(Arc::new(OpenAiEngine::new(cfg)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_protocol_has_one_row_and_names_do_not_clash() {
        let mut names: Vec<String> = Vec::new();
        for i in TABLE {
            assert_eq!(Protocol::from_name(i.name), Some(i.protocol));
            assert_eq!(Protocol::from_name(i.endpoint), Some(i.protocol));
            let mut own: Vec<String> =
                [i.name, i.endpoint].iter().chain(i.aliases).map(|s| s.replace('_', "-")).collect();
            own.sort();
            own.dedup();
            names.extend(own);
        }
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a name stands for two protocols");
        assert_eq!(TABLE.len(), Protocol::all().count());
    }

    /// `run.json` and `summary.json` name the endpoint type: their schemas allow exactly
    /// the registry's.
    #[test]
    fn the_schemas_know_every_endpoint_type() {
        fn enums(v: &serde_json::Value, out: &mut Vec<Vec<String>>) {
            match v {
                serde_json::Value::Object(o) => {
                    if let Some(e) = o.get("endpoint").and_then(|e| e.get("enum")) {
                        let names = e.as_array().unwrap().iter();
                        out.push(names.map(|n| n.as_str().unwrap().to_owned()).collect());
                    }
                    o.values().for_each(|x| enums(x, out));
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| enums(x, out)),
                _ => {}
            }
        }
        let want: Vec<String> = Protocol::all().map(|p| p.endpoint().to_owned()).collect();
        for text in [
            include_str!("../../../docs/schema/run.schema.json"),
            include_str!("../../../docs/schema/summary.schema.json"),
        ] {
            let mut found = Vec::new();
            enums(&serde_json::from_str(text).unwrap(), &mut found);
            assert_eq!(found.len(), 2);
            assert!(found.iter().all(|f| *f == want), "{found:?} != {want:?}");
        }
    }
}

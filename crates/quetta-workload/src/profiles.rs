//! Named workload profiles (`quetta-bench profiles`, `quetta-bench run --profile NAME`).

use std::path::Path;

use crate::trace::{parse_azure, parse_mooncake, TraceRequest};
use crate::WorkloadError;

/// Where a profile's requests come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Synthetic prompts with the profile's lengths.
    Synthetic,
    /// The bundled Mooncake conversation trace (FAST'25, Apache-2.0).
    MooncakeConversation,
    /// The bundled Azure LLM inference conversation trace (2023, CC-BY-4.0).
    AzureConversation,
}

/// A named workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    pub description: &'static str,
    /// Mean input length (tokens) and its standard deviation.
    pub input_len: u32,
    pub input_stddev: f64,
    /// Mean output length (tokens) and its standard deviation.
    pub output_len: u32,
    pub output_stddev: f64,
    pub source: Source,
}

impl Profile {
    /// What the profile sends, in words, for `quetta-bench profiles`.
    pub fn dataset(&self) -> &'static str {
        match self.source {
            Source::Synthetic => "synthetic (bundled sonnets corpus)",
            Source::MooncakeConversation => "Mooncake conversation trace (12,031 requests)",
            Source::AzureConversation => "Azure conversation trace 2023 (19,366 requests)",
        }
    }

    /// How requests arrive unless the command line says otherwise.
    pub fn arrival(&self) -> &'static str {
        match self.source {
            Source::Synthetic => "as given (--concurrency or --request-rate)",
            _ => "trace timestamps (--trace-speed)",
        }
    }

    /// The trace rows of a trace profile.
    pub fn trace(&self) -> Result<Option<Vec<TraceRequest>>, WorkloadError> {
        Ok(match self.source {
            Source::Synthetic => None,
            Source::MooncakeConversation => {
                Some(parse_mooncake(MOONCAKE, Path::new("<bundled mooncake-conversation>"))?)
            }
            Source::AzureConversation => {
                Some(parse_azure(AZURE, Path::new("<bundled azure-conversation>"))?)
            }
        })
    }
}

const MOONCAKE: &str =
    include_str!("../../../fixtures/traces/mooncake_fast25_conversation_trace.jsonl");
const AZURE: &str = include_str!("../../../fixtures/traces/azure_llm_inference_2023_conv.csv");

const fn synthetic(
    name: &'static str,
    description: &'static str,
    i: u32,
    isd: f64,
    o: u32,
    osd: f64,
) -> Profile {
    Profile {
        name,
        description,
        input_len: i,
        input_stddev: isd,
        output_len: o,
        output_stddev: osd,
        source: Source::Synthetic,
    }
}

/// The built-in profiles.
pub fn builtin() -> Vec<Profile> {
    vec![
        synthetic("chat-short", "short chat turns", 256, 64.0, 128, 32.0),
        synthetic("chat-long", "long chat turns", 2048, 512.0, 512, 128.0),
        synthetic("code-completion", "code completion: long context, short answers", 1024, 256.0, 64, 16.0),
        synthetic("summarization", "long-context summarisation / RAG", 8000, 1000.0, 256, 64.0),
        synthetic("prefill-heavy", "prefill-bound", 8192, 0.0, 256, 0.0),
        synthetic("decode-heavy", "decode-bound", 256, 0.0, 4096, 0.0),
        synthetic("random-1k", "1k in, 1k out", 1024, 0.0, 1024, 0.0),
        synthetic("fixed-seq128", "fixed 128 in, 128 out", 128, 0.0, 128, 0.0),
        Profile {
            name: "mooncake-conversation",
            description: "Mooncake FAST'25 conversation trace: recorded arrivals, lengths and shared prefixes",
            input_len: 12_035,
            input_stddev: 0.0,
            output_len: 343,
            output_stddev: 0.0,
            source: Source::MooncakeConversation,
        },
        Profile {
            name: "azure-conversation",
            description: "Azure LLM inference 2023 conversation trace: recorded arrivals and lengths",
            input_len: 1155,
            input_stddev: 0.0,
            output_len: 211,
            output_stddev: 0.0,
            source: Source::AzureConversation,
        },
        synthetic("test", "tiny requests for smoke tests", 32, 0.0, 16, 0.0),
    ]
}

/// A built-in profile by name, or an error listing the names.
pub fn find(name: &str) -> Result<Profile, WorkloadError> {
    builtin().into_iter().find(|p| p.name == name).ok_or_else(|| WorkloadError::Invalid {
        name: "profile",
        reason: format!(
            "unknown profile {name:?}; known: {}",
            builtin().iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        ),
    })
}

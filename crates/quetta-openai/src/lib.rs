//! OpenAI-compatible adapters for Quetta: `/v1/chat/completions` and `/v1/completions`,
//! streaming (SSE) and not, over the shared transport of `quetta-http`, and LiteLLM proxies
//! ([`LiteLlmEngine`]).
//!
//! Every body frame is stamped by the transport the moment it arrives, before the SSE parser
//! or the chunk decoder touch it; the events it completes carry that stamp and the frame's
//! index. The chunk decoder ([`decode::ChunkDecoder`]) reads the dialects of vLLM, SGLang,
//! TGI, llama.cpp and OpenAI; a one-pass scanner takes the common delta chunk without
//! allocating and hands everything else to serde.

pub mod decode;
mod engine;
mod fast;
mod litellm;

pub use engine::{
    join_url, list_models, parse_models, request_body, Api, OpenAiConfig, OpenAiEngine,
};
pub use litellm::{LiteLlmConfig, LiteLlmEngine};
pub use quetta_http::fetch::ApiKey;
pub use quetta_http::BuildError;

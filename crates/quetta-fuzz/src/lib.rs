//! The bodies of Quetta's fuzz targets, one function per parser that reads untrusted input
//! (files users hand it, answers servers send). Each takes arbitrary bytes and must return:
//! a parser may refuse its input, with an error naming where, but never panic, never
//! allocate without bound, and never give another answer for the same bytes split
//! differently. `fuzz/` runs them under libFuzzer (`cargo xtask fuzz`); this crate's tests
//! replay every corpus input and every reproducer, so a fixed crash stays fixed.
//!
//! The first byte of an input often picks a split stride or an option; the rest is the
//! text the parser reads.

use std::path::Path;

mod answers;
mod files;
mod protocols;

pub use answers::{bedrock, chunk, gemini, models, sagemaker, sse};
pub use files::{datasets, kernels, prometheus, records, sessions, synth, traces, vllm_result};
pub use protocols::{kserve, messages, native, pooling, responses, transcription};

/// A target: the name of its corpus directory (`fuzz/corpus/NAME`) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: &[Target] = &[
    ("sse", sse),
    ("chunk", chunk),
    ("sagemaker", sagemaker),
    ("gemini", gemini),
    ("models", models),
    ("traces", traces),
    ("datasets", datasets),
    ("sessions", sessions),
    ("synth", synth),
    ("prometheus", prometheus),
    ("kernels", kernels),
    ("records", records),
    ("vllm_result", vllm_result),
    ("responses", responses),
    ("messages", messages),
    ("native", native),
    ("pooling", pooling),
    ("transcription", transcription),
    ("kserve", kserve),
    ("bedrock", bedrock),
];

/// The name every target's parsers are given for their input; errors must name it.
pub(crate) const PATH: &str = "fuzz-input";

pub(crate) fn path() -> &'static Path {
    Path::new(PATH)
}

/// The split stride the first byte picks (1..=17) and the rest of the input.
pub(crate) fn stride_and_body(data: &[u8]) -> Option<(usize, &[u8])> {
    let (&first, body) = data.split_first()?;
    Some((usize::from(first % 17) + 1, body))
}

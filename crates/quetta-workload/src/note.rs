//! [`WorkloadNote`]: what a reader of a run's results must know about its workload, as a
//! value an embedder can match on; its `Display` is the note's words (settings named as the
//! process names them, [`quetta_engine::setting::name_settings`]).

use std::fmt;
use std::path::PathBuf;

use quetta_engine::setting::Setting as S;

/// A note the workload layer makes while it builds a workload.
///
/// ```
/// use quetta_workload::note::WorkloadNote;
/// let n = WorkloadNote::SessionSource { sessions: 80, turns: 160 };
/// assert_eq!(n.to_string(), "the session source holds 80 sessions (160 turns)");
/// assert!(!n.is_warning());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WorkloadNote {
    /// Audio clips sent for transcription: how many, and their length in all.
    Recordings { clips: usize, seconds: f64 },
    /// Dataset prompts the length filters left out.
    FilteredOut(usize),
    /// No tokenizer: dataset prompt lengths are counted in words.
    DatasetCountsWords,
    /// No tokenizer: trace prompts are built from words, one per intended token.
    TraceCountsWords,
    /// No tokenizer: synthesised turn lengths are counted in words.
    TurnsCountWords,
    /// Trace prompts are decoded token blocks, which the server may re-tokenise at their
    /// edges.
    TraceBlocks,
    /// Stress mode: every prompt unique from its first token, exact output lengths asked.
    Stress,
    /// Stress mode on the chat endpoint: the chat template's shared prefix may be cached.
    StressChatTemplate,
    /// Images attached to each chat request: how many, from how many files (0: the bundled
    /// test image).
    Vision { per_request: usize, files: usize },
    /// The session source's size.
    SessionSource { sessions: u64, turns: usize },
    /// A session synthesis file whose sessions grow past what most served models accept (at
    /// the means: `system` tokens plus `turns` turns of `per_turn` tokens).
    LongContext { path: PathBuf, context: f64, system: u32, turns: f64, per_turn: f64 },
    /// A session synthesis file whose sessions think for hours (`gaps` gaps of `mean_ms`).
    LongThink { path: PathBuf, hours: f64, mean_ms: f64, gaps: f64 },
}

impl WorkloadNote {
    /// Whether the workload is probably not what the user meant (shown as a warning).
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::LongContext { .. } | Self::LongThink { .. })
    }
}

impl fmt::Display for WorkloadNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Recordings { clips, seconds } => write!(f, "{clips} recordings of {seconds:.1} s in all; input tokens are the server's count, where it gives one"),
            Self::FilteredOut(n) => write!(f, "{n} dataset prompts were left out by the length filters"),
            Self::DatasetCountsWords => write!(f, "no {}: dataset prompt lengths are counted as words (an estimate)", S::Tokenizer),
            Self::TraceCountsWords => write!(f, "no {}: trace prompts are built from words, one per intended token (exact for the simulator, an estimate for real servers)", S::Tokenizer),
            Self::TurnsCountWords => write!(f, "no {}: synthesised turn lengths are counted as words (an estimate)", S::Tokenizer),
            Self::TraceBlocks => write!(f, "trace prompts are decoded token blocks: the server's re-tokenisation can merge tokens at block edges (a token or two per block); {} on the completions endpoint sends the exact blocks", S::TokenIds),
            Self::Stress => write!(f, "stress mode: every prompt is unique from its first word (its first token with {}), so a prefix cache has next to nothing to serve, and ignore_eos with min_tokens = max_tokens asks for exactly the planned output length", S::Tokenizer),
            Self::StressChatTemplate => write!(f, "stress mode on the chat endpoint: the server's chat template puts the same tokens before every prompt, which it may serve from cache (about 25 tokens per request on llama.cpp with SmolLM2); the completions endpoint ({}) leaves nothing shared", S::Endpoint),
            Self::Vision { per_request, files } => {
                let from = match files {
                    0 => "the bundled test image".to_owned(),
                    n => format!("{n} file(s)"),
                };
                write!(f, "vision: {} image(s) per request from {from}; image tokens are counted by the server (usage), not planned", per_request.max(&1))
            }
            Self::SessionSource { sessions, turns } => write!(f, "the session source holds {sessions} sessions ({turns} turns)"),
            Self::LongContext { path, context, system, turns, per_turn } => write!(
                f,
                "warning: {}: sessions grow to about {context:.0} tokens of context by their last \
                 turn ({system:.0} system + {turns:.0} turns x {per_turn:.0} tokens, at the means), more \
                 than most served models accept (131072): the server will refuse the later turns",
                path.display()
            ),
            Self::LongThink { path, hours, mean_ms, gaps } => write!(
                f,
                "warning: {}: a session thinks about {hours:.1} h between its turns (mean {mean_ms:.0} ms \
                 x {gaps:.0} gaps): a run of a few sessions takes hours",
                path.display()
            ),
        }
    }
}

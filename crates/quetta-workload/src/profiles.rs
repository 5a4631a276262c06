//! Named workload profiles (`quetta-bench profiles`, `quetta-bench run --profile NAME`).

use std::path::Path;

use quetta_engine::setting::Setting;

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
    /// Multi-turn sessions: the bundled ShareGPT multi-turn conversations (DialogStudio).
    ChatMultiturn,
    /// Multi-turn sessions: the bundled tool-call conversations (glaive, via LLaMA-Factory).
    AgentMultiturn,
    /// Multi-turn sessions: the 80 two-turn MT-Bench questions.
    MtBench2Turn,
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
            Source::ChatMultiturn => "ShareGPT multi-turn conversations (5 sessions, 2-10 turns)",
            Source::AgentMultiturn => {
                "glaive tool-call conversations (100 sessions, tool messages)"
            }
            Source::MtBench2Turn => "MT-Bench questions (80 sessions, 2 user turns)",
        }
    }

    /// How requests arrive unless the command line says otherwise.
    pub fn arrival(&self) -> String {
        match self.source {
            Source::Synthetic => {
                format!("as given ({} or {})", Setting::Concurrency, Setting::RequestRate)
            }
            Source::ChatMultiturn | Source::AgentMultiturn | Source::MtBench2Turn => {
                format!("{} or {}", Setting::SessionConcurrency, Setting::SessionRate)
            }
            _ => format!("trace timestamps ({})", Setting::TraceSpeed),
        }
    }

    /// Whether the profile sends multi-turn sessions.
    pub fn is_multiturn(&self) -> bool {
        matches!(self.source, Source::ChatMultiturn | Source::AgentMultiturn | Source::MtBench2Turn)
    }

    /// The sessions of a multi-turn profile.
    pub fn sessions(
        &self,
        opts: crate::session::LoadOptions<'_>,
    ) -> Result<Option<Vec<crate::session::Session>>, WorkloadError> {
        use crate::session::{parse_sharegpt, parse_turns_jsonl};
        Ok(match self.source {
            Source::ChatMultiturn => {
                Some(parse_sharegpt(SHAREGPT_MT, Path::new("<bundled chat-multiturn>"), opts)?)
            }
            Source::AgentMultiturn => {
                Some(parse_sharegpt(GLAIVE, Path::new("<bundled agent-multiturn>"), opts)?)
            }
            Source::MtBench2Turn => {
                Some(parse_turns_jsonl(MT_BENCH, Path::new("<bundled mtbench-2turn>"), opts)?)
            }
            _ => None,
        })
    }

    /// The trace rows of a trace profile.
    pub fn trace(&self) -> Result<Option<Vec<TraceRequest>>, WorkloadError> {
        Ok(match self.source {
            Source::MooncakeConversation => {
                Some(parse_mooncake(MOONCAKE, Path::new("<bundled mooncake-conversation>"))?)
            }
            Source::AzureConversation => {
                Some(parse_azure(AZURE, Path::new("<bundled azure-conversation>"))?)
            }
            _ => None,
        })
    }
}

const MOONCAKE: &str =
    include_str!("../../../fixtures/traces/mooncake_fast25_conversation_trace.jsonl");
const AZURE: &str = include_str!("../../../fixtures/traces/azure_llm_inference_2023_conv.csv");
const SHAREGPT_MT: &str =
    include_str!("../../../fixtures/conversations/sharegpt_multiturn_5_dialogstudio.json");
const GLAIVE: &str =
    include_str!("../../../fixtures/conversations/glaive_toolcall_en_demo_100.json");
const MT_BENCH: &str = include_str!("../../../fixtures/conversations/mt_bench_questions_80.jsonl");

const fn multiturn(
    name: &'static str,
    description: &'static str,
    i: u32,
    o: u32,
    source: Source,
) -> Profile {
    Profile {
        name,
        description,
        input_len: i,
        input_stddev: 0.0,
        output_len: o,
        output_stddev: 0.0,
        source,
    }
}

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
        multiturn("chat-multiturn", "multi-turn chat: real ShareGPT conversations, each turn carries the whole history", 150, 250, Source::ChatMultiturn),
        multiturn("agent-multiturn", "agent sessions: tool-call conversations with tool results and a tool schema in the system prompt", 60, 60, Source::AgentMultiturn),
        multiturn("mtbench-2turn", "MT-Bench: 80 two-turn questions, the engine's first answer fed into the second turn", 40, 256, Source::MtBench2Turn),
        synthetic("test", "tiny requests for smoke tests", 32, 0.0, 16, 0.0),
    ]
}

/// A built-in profile by name, or an error listing the names.
pub fn find(name: &str) -> Result<Profile, WorkloadError> {
    builtin().into_iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = builtin().iter().map(|p| p.name).collect();
        WorkloadError::Invalid {
            name: "profile",
            reason: format!(
                "unknown profile {name:?}{}; known: {}",
                did_you_mean(name, &names)
                    .map_or(String::new(), |n| format!(" (did you mean {n:?}?)")),
                names.join(", ")
            ),
        }
    })
}

/// The closest of `names` to a misspelt `name`, when it is close (Jaro-Winkler ≥ 0.8, as
/// clap suggests flags).
pub fn did_you_mean<'a>(name: &str, names: &[&'a str]) -> Option<&'a str> {
    names
        .iter()
        .map(|n| (strsim::jaro_winkler(name, n), *n))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}

/// A profile defined by a user in a TOML file (`--profile-file`): the built-in fields, plus
/// where its prompts and times come from and how load is applied. Every field but `name` is
/// optional; command-line flags override them.
///
/// ```toml
/// [[profile]]
/// name = "support-bot"
/// description = "our support traffic"
/// input_len = 900
/// input_stddev = 300
/// output_len = 250
/// output_stddev = 80
/// request_rate = 12.5        # or concurrency = 16
/// arrival = "poisson"        # poisson | gamma | constant
/// # dataset = "prompts.jsonl"; dataset_format = "jsonl"
/// # trace = "log.csv"; trace_format = "csv"; trace_columns = "timestamp=t,input=in,output=out"
/// ```
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserProfile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_len: Option<u32>,
    pub input_stddev: Option<f64>,
    pub output_len: Option<u32>,
    pub output_stddev: Option<f64>,
    pub request_rate: Option<f64>,
    pub concurrency: Option<usize>,
    pub arrival: Option<String>,
    pub dataset: Option<String>,
    pub dataset_format: Option<String>,
    pub trace: Option<String>,
    pub trace_format: Option<String>,
    pub trace_columns: Option<String>,
}

/// The names a user profile's `arrival`, `dataset_format` and `trace_format` take (any
/// case), the first being the default.
pub const ARRIVALS: [&str; 3] = ["poisson", "gamma", "constant"];
pub const DATASET_FORMATS: [&str; 3] = ["sharegpt", "jsonl", "text"];
pub const TRACE_FORMATS: [&str; 4] = ["mooncake", "azure", "csv", "jsonl"];

/// The position of `value` (default: the first name) among `names`, any case.
pub fn choice(value: Option<&str>, names: &[&str]) -> Option<usize> {
    let v = value.unwrap_or(names[0]);
    names.iter().position(|n| n.eq_ignore_ascii_case(v))
}

/// The 1-based line of `field` in the `i`-th `[[profile]]` table of `text` (the table's own
/// line when the field is not written there).
fn field_line(text: &str, i: usize, field: &str) -> usize {
    let starts: Vec<usize> = text.match_indices("[[profile]]").map(|(at, _)| at).collect();
    let Some(&start) = starts.get(i) else { return 1 };
    let end = starts.get(i + 1).copied().unwrap_or(text.len());
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let mut at = start;
    for l in text[start..end].split_inclusive('\n') {
        let key = l.trim_start();
        if key.strip_prefix(field).is_some_and(|r| r.trim_start().starts_with('=')) {
            return line_of(at);
        }
        at += l.len();
    }
    line_of(start)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    #[serde(default)]
    profile: Vec<UserProfile>,
}

/// Read a profile file. Errors name the file, the line and the field.
pub fn load_file(path: &Path) -> Result<Vec<UserProfile>, WorkloadError> {
    let text = std::fs::read_to_string(path).map_err(|e| WorkloadError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let f: ProfileFile = toml::from_str(&text).map_err(|e| {
        let line =
            e.span().map_or(1, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        WorkloadError::Parse {
            path: path.display().to_string(),
            line,
            field: "(toml)".into(),
            reason: e.message().to_owned(),
        }
    })?;
    for (i, p) in f.profile.iter().enumerate() {
        let bad = |field: &str, reason: &str| WorkloadError::Parse {
            path: path.display().to_string(),
            line: field_line(&text, i, field.split('/').next().unwrap_or(field)),
            field: field.to_owned(),
            reason: reason.to_owned(),
        };
        for (field, value, names) in [
            ("arrival", &p.arrival, &ARRIVALS[..]),
            ("dataset_format", &p.dataset_format, &DATASET_FORMATS[..]),
            ("trace_format", &p.trace_format, &TRACE_FORMATS[..]),
        ] {
            if value.is_some() && choice(value.as_deref(), names).is_none() {
                let v = value.as_deref().unwrap_or_default();
                return Err(bad(field, &format!("{v:?} is not one of {}", names.join(", "))));
            }
        }
        if p.name.trim().is_empty() {
            return Err(bad("name", "must not be empty"));
        }
        if p.input_len == Some(0) || p.output_len == Some(0) {
            return Err(bad("input_len/output_len", "must be at least 1"));
        }
        if p.request_rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(bad("request_rate", "must be a positive number"));
        }
        if p.concurrency == Some(0) {
            return Err(bad("concurrency", "must be at least 1"));
        }
        if p.request_rate.is_some() && p.concurrency.is_some() {
            return Err(bad("request_rate", "give request_rate or concurrency, not both"));
        }
    }
    Ok(f.profile)
}

/// The table `quetta-bench profiles` prints: the built-in profiles, then `user`'s (read from
/// `file`).
pub fn listing(user: &[UserProfile], file: Option<&Path>) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "{:<24}{:>8}{:>8}  {:<62}{:<52}mode\n",
        "profile", "ISL", "OSL", "dataset", "arrival"
    );
    for p in builtin() {
        let mode = match (p.source == Source::Synthetic, p.is_multiturn()) {
            (true, _) => "single-turn",
            (false, true) => "multi-turn",
            (false, false) => "trace replay",
        };
        let _ = writeln!(
            s,
            "{:<24}{:>8}{:>8}  {:<62}{:<52}{mode}",
            p.name,
            p.input_len,
            p.output_len,
            p.dataset(),
            p.arrival()
        );
    }
    for p in user {
        let src = p.trace.as_deref().or(p.dataset.as_deref()).unwrap_or("synthetic");
        let load = match (p.request_rate, p.concurrency) {
            (Some(r), _) => format!("{r} req/s {}", p.arrival.as_deref().unwrap_or("poisson")),
            (None, Some(c)) => format!("concurrency {c}"),
            _ => "as given".into(),
        };
        let len = |v: Option<u32>| v.map_or("-".into(), |v| v.to_string());
        let f = file.map(|f| f.display().to_string()).unwrap_or_default();
        let _ = writeln!(
            s,
            "{:<24}{:>8}{:>8}  {src:<48}{load:<44}user ({f})",
            p.name,
            len(p.input_len),
            len(p.output_len)
        );
    }
    s
}

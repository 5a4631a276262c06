//! Multi-turn sessions: conversations whose every turn carries the whole history.
//!
//! A [`Session`] is a system prompt and a list of [`Turn`]s. A turn holds the messages the
//! client side adds before its request (a user message, or tool results followed by a user
//! message), the reply the dataset recorded (if any), `max_tokens` and a think time. The
//! load generator builds the prompt of turn k from the system prompt, every earlier turn's
//! messages and the engine's own reply to each earlier turn (or the recorded reply when the
//! user asks for recorded-history replay): nothing here sends.
//!
//! Sources: ShareGPT-style conversations (`human`/`gpt`, plus the `function_call` and
//! `observation` roles of tool-call datasets, whose `tools` become part of the system
//! prompt), question sets with a list of user turns (MT-Bench's `turns`), and distributional
//! synthesis from a TOML file ([`SessionSynth`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::Message;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal, Normal};
use serde_json::Value;

use crate::note::WorkloadNote;
use crate::tokenizer::{ExactPrompts, Tokenizer};
use crate::{parse_err as err, read, WorkloadError};

/// One turn of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// What the client adds before this turn's request: `user` and `tool` messages.
    pub messages: Vec<Message>,
    /// The assistant reply the dataset recorded (used with recorded-history replay, and to
    /// size `max_tokens`).
    pub recorded_reply: Option<String>,
    pub max_tokens: u32,
    /// Think time before this turn is sent (recorded or synthesised); the first turn's is
    /// ignored.
    pub think_time: Option<Duration>,
    /// Tokens of `messages` (exact with a tokenizer, else words).
    pub new_tokens: u32,
}

/// A conversation to replay turn by turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Unique within a run (repeats of a dataset get a `#k` suffix).
    pub id: String,
    pub system: Option<String>,
    pub turns: Vec<Turn>,
    /// When the session started, relative to the data's first session (recorded-time
    /// replay), if the data says.
    pub start: Option<Duration>,
}

impl Session {
    /// The prompt of turn `k` (0-based): the system prompt, each earlier turn's messages
    /// followed by `replies[i]`, then turn `k`'s messages. `replies` must hold at least `k`
    /// replies (the engine's, or the recorded ones).
    pub fn prompt(&self, k: usize, replies: &[String]) -> Vec<Message> {
        let mut out = Vec::new();
        if let Some(s) = &self.system {
            out.push(Message::text("system", s.clone()));
        }
        for (i, t) in self.turns.iter().enumerate().take(k + 1) {
            out.extend(t.messages.iter().cloned());
            if i < k {
                out.push(Message::text("assistant", replies[i].clone()));
            }
        }
        out
    }
}

/// A source of sessions, asked for session 0, 1, 2, … in order.
pub trait SessionSource: Send {
    /// The session with this index, or `None` when exhausted.
    fn session(&mut self, index: u64) -> Option<Session>;
    /// How many distinct sessions the source holds (before cycling), if finite.
    fn distinct(&self) -> Option<u64>;
}

/// A fixed list of sessions, cycled when `cycle` is set (repeats get unique ids).
#[derive(Debug, Clone)]
pub struct SessionList {
    pub sessions: Vec<Session>,
    pub cycle: bool,
}

impl SessionSource for SessionList {
    fn session(&mut self, index: u64) -> Option<Session> {
        let n = self.sessions.len() as u64;
        if n == 0 || (!self.cycle && index >= n) {
            return None;
        }
        let mut s = self.sessions[(index % n) as usize].clone();
        let round = index / n;
        if round > 0 {
            s.id = format!("{}#{round}", s.id);
        }
        Some(s)
    }
    fn distinct(&self) -> Option<u64> {
        Some(self.sessions.len() as u64)
    }
}

/// How loaded sessions are sized.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions<'a> {
    /// Count tokens with this tokenizer (else words).
    pub tokenizer: Option<&'a Tokenizer>,
    /// `max_tokens` for every turn (else the recorded reply's length, else 256).
    pub output_len: Option<u32>,
    /// Keep at most this many turns of each session.
    pub max_turns: Option<usize>,
}

impl LoadOptions<'_> {
    fn count(&self, s: &str) -> u32 {
        self.tokenizer.map_or_else(|| s.split_whitespace().count(), |t| t.count(s)) as u32
    }
}

/// `max_tokens` of a turn without a recorded reply or an override.
pub const DEFAULT_TURN_OUTPUT: u32 = 256;

/// The chat role of a ShareGPT `from` value, or `None` when it is not known.
fn role(from: &str) -> Option<&'static str> {
    Some(match from {
        "human" | "user" => "user",
        "gpt" | "assistant" | "chatgpt" | "bard" | "model" | "function_call" => "assistant",
        "system" => "system",
        "observation" | "tool" | "function" | "ipython" => "tool",
        _ => return None,
    })
}

/// Read ShareGPT-style conversations (see [`parse_sharegpt`]).
pub fn load_sharegpt(path: &Path, opts: LoadOptions<'_>) -> Result<Vec<Session>, WorkloadError> {
    parse_sharegpt(&read(path)?, path, opts)
}

/// The 1-based line of the `n`-th (0-based) top-level element of a JSON array, found by
/// counting newlines up to where it starts (a best effort that is exact for the usual
/// one-record-per-block layouts).
fn record_lines(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut esc, mut line) = (0i32, false, false, 1usize);
    for b in text.bytes() {
        if b == b'\n' {
            line += 1;
        }
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                if depth == 1 {
                    out.push(line);
                }
                depth += 1;
            }
            b'}' | b']' => depth -= 1,
            _ => {}
        }
    }
    out
}

/// Parse ShareGPT-style conversations: `[{"id"?, "conversations": [{"from", "value",
/// "think_time_ms"?}], "tools"?, "system"?, "start_ms"?}]`. `start_ms` (the session's start,
/// for recorded-time replay) and a client message's `think_time_ms` (the pause before that
/// turn) are Quetta extensions, optional. `human`/`user` and `observation`/`tool` messages are the client's;
/// each `gpt`/`assistant`/`function_call` message is the recorded reply that ends a turn.
/// Leading assistant messages are dropped (no request produced them); a final client
/// message without a reply is a last turn without a recorded reply.
pub fn parse_sharegpt(
    text: &str,
    path: &Path,
    opts: LoadOptions<'_>,
) -> Result<Vec<Session>, WorkloadError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| err(path, e.line(), "(json)", e.to_string()))?;
    let arr = v
        .as_array()
        .ok_or_else(|| err(path, 1, "(root)", "expected a JSON array of conversations"))?;
    let lines = record_lines(text);
    let mut out = Vec::new();
    for (i, rec) in arr.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(1);
        let conv = rec
            .get("conversations")
            .or_else(|| rec.get("messages"))
            .and_then(Value::as_array)
            .ok_or_else(|| {
                err(path, line, &format!("[{i}].conversations"), "missing or not a list")
            })?;
        let mut system: Vec<String> = Vec::new();
        if let Some(s) = rec.get("system").and_then(Value::as_str) {
            system.push(s.to_owned());
        }
        if let Some(tools) = rec.get("tools") {
            let t = tools.as_str().map_or_else(|| tools.to_string(), str::to_owned);
            if !t.trim().is_empty() && t.trim() != "[]" {
                system.push(format!("You can call these functions:\n{t}"));
            }
        }
        let ms = |v: &Value, key: &str, field: String| -> Result<Option<Duration>, WorkloadError> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x.as_f64().and_then(ms_duration).map(Some).ok_or_else(|| {
                    err(
                        path,
                        line,
                        &field,
                        "not a non-negative number of milliseconds a clock holds (at most 1.8e22)",
                    )
                }),
            }
        };
        let start = ms(rec, "start_ms", format!("[{i}].start_ms"))?;
        let mut turns = Vec::new();
        let mut pending: Vec<Message> = Vec::new();
        let mut think: Option<Duration> = None;
        for (j, m) in conv.iter().enumerate() {
            let field = |f: &str| format!("[{i}].conversations[{j}].{f}");
            let from = m
                .get("from")
                .or_else(|| m.get("role"))
                .and_then(Value::as_str)
                .ok_or_else(|| err(path, line, &field("from"), "missing or not a string"))?;
            let value = m
                .get("value")
                .or_else(|| m.get("content"))
                .and_then(Value::as_str)
                .ok_or_else(|| err(path, line, &field("value"), "missing or not a string"))?;
            let r = role(from)
                .ok_or_else(|| err(path, line, &field("from"), format!("unknown role {from:?}")))?;
            if r != "assistant" && r != "system" && pending.is_empty() {
                // The pause the user took before this turn, if recorded.
                think = ms(m, "think_time_ms", field("think_time_ms"))?;
            }
            match r {
                "system" => system.push(value.to_owned()),
                "assistant" if pending.is_empty() => {} // nothing asked for it
                "assistant" => {
                    let new_tokens = pending.iter().map(|m| opts.count(&m.text_content())).sum();
                    turns.push(Turn {
                        messages: std::mem::take(&mut pending),
                        recorded_reply: Some(value.to_owned()),
                        max_tokens: opts.output_len.unwrap_or_else(|| opts.count(value).max(1)),
                        think_time: think.take(),
                        new_tokens,
                    });
                }
                _ => pending.push(Message::text(r, value)),
            }
        }
        if !pending.is_empty() {
            let new_tokens = pending.iter().map(|m| opts.count(&m.text_content())).sum();
            turns.push(Turn {
                messages: pending,
                recorded_reply: None,
                max_tokens: opts.output_len.unwrap_or(DEFAULT_TURN_OUTPUT),
                think_time: think.take(),
                new_tokens,
            });
        }
        if let Some(n) = opts.max_turns {
            turns.truncate(n);
        }
        if turns.is_empty() {
            continue;
        }
        let id = rec.get("id").map_or_else(
            || format!("conv-{i}"),
            |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        );
        let system = (!system.is_empty()).then(|| system.join("\n\n"));
        out.push(Session { id, system, turns, start });
    }
    Ok(out)
}

/// Read a question set (see [`parse_turns_jsonl`]).
pub fn load_turns_jsonl(path: &Path, opts: LoadOptions<'_>) -> Result<Vec<Session>, WorkloadError> {
    parse_turns_jsonl(&read(path)?, path, opts)
}

/// Parse JSONL question sets where each line has `turns: [str, …]` (user messages, e.g.
/// MT-Bench) and optionally `question_id`/`id` and `system`. There are no recorded replies.
pub fn parse_turns_jsonl(
    text: &str,
    path: &Path,
    opts: LoadOptions<'_>,
) -> Result<Vec<Session>, WorkloadError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(l).map_err(|e| err(path, line, "(json)", e.to_string()))?;
        let turns_v = v
            .get("turns")
            .and_then(Value::as_array)
            .ok_or_else(|| err(path, line, "turns", "missing or not a list of strings"))?;
        let mut turns = Vec::new();
        for (j, t) in turns_v.iter().enumerate() {
            let s = t
                .as_str()
                .ok_or_else(|| err(path, line, &format!("turns[{j}]"), "not a string"))?;
            turns.push(Turn {
                messages: vec![Message::text("user", s)],
                recorded_reply: None,
                max_tokens: opts.output_len.unwrap_or(DEFAULT_TURN_OUTPUT),
                think_time: None,
                new_tokens: opts.count(s),
            });
        }
        if let Some(n) = opts.max_turns {
            turns.truncate(n);
        }
        if turns.is_empty() {
            return Err(err(path, line, "turns", "empty"));
        }
        let id = v.get("question_id").or_else(|| v.get("id")).map_or_else(
            || format!("line-{line}"),
            |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        );
        let system = v.get("system").and_then(Value::as_str).map(str::to_owned);
        let start = match v.get("start_ms") {
            None | Some(Value::Null) => None,
            Some(x) => Some(x.as_f64().and_then(ms_duration).ok_or_else(|| {
                err(
                    path,
                    line,
                    "start_ms",
                    "not a non-negative number of milliseconds a clock holds (at most 1.8e22)",
                )
            })?),
        };
        out.push(Session { id, system, turns, start });
    }
    Ok(out)
}

/// A non-negative, finite number of milliseconds that fits a `Duration`, as one.
fn ms_duration(t: f64) -> Option<Duration> {
    (t.is_finite() && t >= 0.0).then(|| Duration::try_from_secs_f64(t / 1e3).ok()).flatten()
}

/// A distribution of one quantity in a session synthesis file.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Draw {
    Fixed {
        value: f64,
    },
    Uniform {
        min: f64,
        max: f64,
    },
    Normal {
        mean: f64,
        stddev: f64,
    },
    /// Lognormal with this mean and standard deviation (of the values, not of their logs).
    Lognormal {
        mean: f64,
        stddev: f64,
    },
    Exponential {
        mean: f64,
    },
}

/// The largest value a synthesis draw may take, per field: what can be built and sent
/// (parameters beyond it are refused; a draw from a distribution's tail is cut there).
const MAX_TURNS: f64 = 10_000.0;
const MAX_TOKENS: f64 = 1_048_576.0;
/// One day.
const MAX_THINK_MS: f64 = 86_400_000.0;
/// The new prompt tokens one session may hold in all its turns (2^24): what is built for a
/// session before it runs (about 100 MB of text at the bound).
const MAX_SESSION_TOKENS: f64 = 16_777_216.0;

impl Draw {
    fn check(&self, field: &str, limit: f64) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        let within = match *self {
            Draw::Fixed { value } => value <= limit,
            Draw::Uniform { max, .. } => max <= limit,
            Draw::Normal { mean, .. }
            | Draw::Lognormal { mean, .. }
            | Draw::Exponential { mean } => mean <= limit,
        };
        if !within {
            return Err(format!("above {limit}, more than a run can build"));
        }
        let good = match *self {
            Draw::Fixed { value } => ok(value),
            Draw::Uniform { min, max } => ok(min) && ok(max) && min <= max,
            Draw::Normal { mean, stddev } | Draw::Lognormal { mean, stddev } => {
                ok(mean) && ok(stddev) && (!matches!(self, Draw::Lognormal { .. }) || mean > 0.0)
            }
            Draw::Exponential { mean } => ok(mean) && mean > 0.0,
        };
        if good {
            Ok(())
        } else {
            Err(format!("{field}: parameters must be finite, non-negative and ordered"))
        }
    }

    /// The distribution's mean (before any cut at a bound).
    pub fn mean(&self) -> f64 {
        match *self {
            Draw::Fixed { value } => value,
            Draw::Uniform { min, max } => min.midpoint(max),
            Draw::Normal { mean, .. }
            | Draw::Lognormal { mean, .. }
            | Draw::Exponential { mean } => mean,
        }
    }

    /// One draw, within 0..=`limit`.
    fn sample_within(&self, rng: &mut impl Rng, limit: f64) -> f64 {
        self.sample(rng).min(limit)
    }

    /// One draw (at least 0).
    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        let v = match *self {
            Draw::Fixed { value } => value,
            Draw::Uniform { min, max } => {
                if max > min {
                    rng.gen_range(min..=max)
                } else {
                    min
                }
            }
            Draw::Normal { mean, stddev } => {
                Normal::new(mean, stddev).map_or(mean, |d| d.sample(rng))
            }
            Draw::Lognormal { mean, stddev } => {
                let s2 = (1.0 + (stddev / mean).powi(2)).ln();
                let mu = mean.ln() - s2 / 2.0;
                LogNormal::new(mu, s2.sqrt()).map_or(mean, |d| d.sample(rng))
            }
            Draw::Exponential { mean } => Exp::new(1.0 / mean).map_or(mean, |d| d.sample(rng)),
        };
        v.max(0.0)
    }
}

/// Distributional session synthesis, read from TOML:
///
/// ```toml
/// turns = { dist = "uniform", min = 2, max = 6 }
/// system_prompt_tokens = 120          # shared by every session (a common prefix)
/// new_prompt_tokens = { dist = "lognormal", mean = 150, stddev = 80 }
/// output_tokens = { dist = "normal", mean = 200, stddev = 40 }
/// think_time_ms = { dist = "exponential", mean = 1500 }   # optional
/// ```
///
/// What a run can build bounds each field: at most 10,000 turns, 1,048,576 tokens per prompt,
/// answer or system prompt, a day of think time, and 16,777,216 new prompt tokens in all of a
/// session's turns. A file whose parameters (a fixed value, a uniform's `max`, a mean; turns
/// times prompt tokens at the means) exceed them is refused; a draw from a distribution's
/// tail past them is cut to the bound, and a session ends before the turn that would pass
/// the session's.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSynthSpec {
    pub turns: Draw,
    #[serde(default)]
    pub system_prompt_tokens: u32,
    pub new_prompt_tokens: Draw,
    pub output_tokens: Draw,
    #[serde(default)]
    pub think_time_ms: Option<Draw>,
}

/// Context a session may grow to before most served models refuse it (128 Ki tokens).
const WARN_CONTEXT_TOKENS: f64 = 131_072.0;
/// Think time per session past which a run mostly waits (an hour).
const WARN_THINK_MS: f64 = 3_600_000.0;

impl SessionSynthSpec {
    /// Warnings for sizes a run can build but a user hardly means: sessions whose context
    /// (system prompt plus every turn's prompt and answer, at the means) grows past 128 Ki
    /// tokens, which most served models refuse; sessions that spend over an hour thinking.
    pub fn warnings(&self, path: &Path) -> Vec<WorkloadNote> {
        let turns = self.turns.mean().max(1.0);
        let per_turn = self.new_prompt_tokens.mean() + self.output_tokens.mean();
        let context = f64::from(self.system_prompt_tokens) + turns * per_turn;
        let mut w = Vec::new();
        if context > WARN_CONTEXT_TOKENS {
            w.push(WorkloadNote::LongContext {
                path: path.to_owned(),
                context,
                system: self.system_prompt_tokens,
                turns,
                per_turn,
            });
        }
        if let Some(t) = &self.think_time_ms {
            let think = (turns - 1.0).max(0.0) * t.mean();
            if think > WARN_THINK_MS {
                w.push(WorkloadNote::LongThink {
                    path: path.to_owned(),
                    hours: think / WARN_THINK_MS,
                    mean_ms: t.mean(),
                    gaps: turns - 1.0,
                });
            }
        }
        w
    }

    /// Read and check a synthesis file; errors name the file, the line and the field.
    pub fn load(path: &Path) -> Result<Self, WorkloadError> {
        Self::parse(&read(path)?, path)
    }

    /// Parse synthesis TOML (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, WorkloadError> {
        let spec: Self = toml::from_str(text).map_err(|e| {
            let line =
                e.span().map_or(1, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            err(path, line, "(toml)", e.message())
        })?;
        let line_of = |key: &str| {
            text.lines().position(|l| l.trim_start().starts_with(key)).map_or(1, |p| p + 1)
        };
        for (name, d, limit) in [
            ("turns", Some(&spec.turns), MAX_TURNS),
            ("new_prompt_tokens", Some(&spec.new_prompt_tokens), MAX_TOKENS),
            ("output_tokens", Some(&spec.output_tokens), MAX_TOKENS),
            ("think_time_ms", spec.think_time_ms.as_ref(), MAX_THINK_MS),
        ] {
            if let Some(d) = d {
                d.check(name, limit).map_err(|r| err(path, line_of(name), name, r))?;
            }
        }
        let per_session = spec.turns.mean().max(1.0) * spec.new_prompt_tokens.mean();
        if per_session > MAX_SESSION_TOKENS {
            let r = format!(
                "sessions of {:.0} turns of {:.0} new prompt tokens (the means) hold {per_session:.0} tokens, more than a run builds ({MAX_SESSION_TOKENS} per session)",
                spec.turns.mean().max(1.0),
                spec.new_prompt_tokens.mean()
            );
            return Err(err(path, line_of("turns"), "turns", r));
        }
        if f64::from(spec.system_prompt_tokens) > MAX_TOKENS {
            let r = format!("above {MAX_TOKENS}, more than a run can build");
            return Err(err(path, line_of("system_prompt_tokens"), "system_prompt_tokens", r));
        }
        Ok(spec)
    }
}

/// Sessions drawn from a [`SessionSynthSpec`]; text from the bundled corpus (words), or of
/// exact token counts with a tokenizer. Deterministic for the seed; never exhausted.
#[derive(Debug, Clone)]
pub struct SessionSynth {
    pub spec: SessionSynthSpec,
    pub seed: u64,
    exact: Option<ExactPrompts>,
    system: Option<String>,
}

impl SessionSynth {
    pub fn new(spec: SessionSynthSpec, seed: u64, tokenizer: Option<Arc<Tokenizer>>) -> Self {
        let exact = tokenizer.map(ExactPrompts::new);
        let mut s = Self { spec, seed, exact, system: None };
        let n = s.spec.system_prompt_tokens;
        s.system = (n > 0).then(|| s.text(n, seed ^ 0x0051_57E3));
        s
    }

    fn text(&self, n: u32, seed: u64) -> String {
        if let Some(e) = &self.exact {
            if let Ok(t) = e.text(n as usize, seed) {
                return t;
            }
        }
        let words: Vec<&str> = crate::tokenizer::CORPUS.split_whitespace().collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| words[rng.gen_range(0..words.len())]).collect::<Vec<_>>().join(" ")
    }
}

impl SessionSource for SessionSynth {
    fn session(&mut self, index: u64) -> Option<Session> {
        let seed = self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n_turns = (self.spec.turns.sample_within(&mut rng, MAX_TURNS).round() as usize).max(1);
        let mut turns = Vec::with_capacity(n_turns);
        let mut built = 0u64;
        for k in 0..n_turns {
            let tokens = |d: &Draw, rng: &mut ChaCha8Rng| {
                (d.sample_within(rng, MAX_TOKENS).round() as u32).max(1)
            };
            let n_in = tokens(&self.spec.new_prompt_tokens, &mut rng);
            // Draws from the tails stop the session where its prompts would pass the bound.
            built += u64::from(n_in);
            if k > 0 && built as f64 > MAX_SESSION_TOKENS {
                break;
            }
            let n_out = tokens(&self.spec.output_tokens, &mut rng);
            let think =
                self.spec.think_time_ms.as_ref().map(|d| {
                    Duration::from_secs_f64(d.sample_within(&mut rng, MAX_THINK_MS) / 1e3)
                });
            let text = self.text(n_in, rng.gen::<u64>() ^ k as u64);
            turns.push(Turn {
                messages: vec![Message::text("user", text)],
                recorded_reply: None,
                max_tokens: n_out,
                think_time: think,
                new_tokens: n_in,
            });
        }
        Some(Session {
            id: format!("synth-{index}"),
            system: self.system.clone(),
            turns,
            start: None,
        })
    }
    fn distinct(&self) -> Option<u64> {
        None
    }
}

//! Prompt datasets: ShareGPT JSON (first turns), JSONL prompt files and plain text.

use std::path::Path;
use std::sync::Arc;

use quetta_engine::{Message, Prompt};
use serde_json::Value;

use crate::tokenizer::Tokenizer;
use crate::{PlannedRequest, Workload, WorkloadError};

/// One prompt of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// 1-based line (JSONL, text) or 1-based record index (JSON arrays).
    pub line: usize,
    /// Chat messages (a plain prompt is one user message).
    pub messages: Vec<Message>,
    /// `max_tokens` given by the file, or the length of the recorded reply (ShareGPT).
    pub output_len: Option<u32>,
}

use crate::{parse_err as err, read};

/// Words as a stand-in token count when no tokenizer is given.
fn approx_tokens(s: &str) -> u32 {
    s.split_whitespace().count() as u32
}

/// ShareGPT JSON: `[{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}]`.
/// Each record gives its first human turn; the reply that follows (if any) sets the output
/// length, counted with `tokenizer` or as words.
pub fn load_sharegpt(
    path: &Path,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Entry>, WorkloadError> {
    parse_sharegpt(&read(path)?, path, tokenizer)
}

/// Parse ShareGPT JSON text (`path` names it in errors).
pub fn parse_sharegpt(
    text: &str,
    path: &Path,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Entry>, WorkloadError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| err(path, e.line(), "(json)", e.to_string()))?;
    let arr = v
        .as_array()
        .ok_or_else(|| err(path, 1, "(root)", "expected a JSON array of conversations"))?;
    let mut out = Vec::new();
    for (i, rec) in arr.iter().enumerate() {
        let n = i + 1;
        let conv = rec.get("conversations").and_then(Value::as_array).ok_or_else(|| {
            err(path, n, "conversations", "missing or not a list (record number, not line)")
        })?;
        let Some(h) = conv
            .iter()
            .position(|t| matches!(t.get("from").and_then(Value::as_str), Some("human" | "user")))
        else {
            continue;
        };
        let text = conv[h]
            .get("value")
            .and_then(Value::as_str)
            .ok_or_else(|| err(path, n, "conversations[].value", "missing"))?;
        let reply = conv.get(h + 1).and_then(|t| t.get("value")).and_then(Value::as_str);
        let output_len =
            reply.map(|r| tokenizer.map_or_else(|| approx_tokens(r), |t| t.count(r) as u32).max(1));
        out.push(Entry { line: n, messages: vec![Message::text("user", text)], output_len });
    }
    Ok(out)
}

/// JSONL: one object per line with `prompt` (text) or `messages` (chat), optional `max_tokens`.
pub fn load_jsonl(path: &Path) -> Result<Vec<Entry>, WorkloadError> {
    parse_jsonl(&read(path)?, path)
}

/// Parse JSONL prompt text (`path` names it in errors).
pub fn parse_jsonl(text: &str, path: &Path) -> Result<Vec<Entry>, WorkloadError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(l).map_err(|e| err(path, line, "(json)", e.to_string()))?;
        let messages = if let Some(p) = v.get("prompt") {
            vec![Message::text(
                "user",
                p.as_str().ok_or_else(|| err(path, line, "prompt", "not a string"))?,
            )]
        } else if let Some(m) = v.get("messages") {
            serde_json::from_value::<Vec<Message>>(m.clone())
                .map_err(|e| err(path, line, "messages", e.to_string()))?
        } else {
            return Err(err(path, line, "prompt", "missing (give \"prompt\" or \"messages\")"));
        };
        let output_len = match v.get("max_tokens") {
            None | Some(Value::Null) => None,
            Some(m) => {
                Some(m.as_u64().filter(|&n| n > 0 && u32::try_from(n).is_ok()).ok_or_else(|| {
                    err(path, line, "max_tokens", format!("{m} is not a positive whole number"))
                })? as u32)
            }
        };
        out.push(Entry { line, messages, output_len });
    }
    Ok(out)
}

/// Plain text: every non-empty line is a prompt.
pub fn load_text(path: &Path) -> Result<Vec<Entry>, WorkloadError> {
    Ok(read(path)?
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Entry {
            line: i + 1,
            messages: vec![Message::text("user", l)],
            output_len: None,
        })
        .collect())
}

/// Length filters applied when a dataset is loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filters {
    pub min_input_len: Option<u32>,
    pub max_input_len: Option<u32>,
    pub max_output_len: Option<u32>,
}

/// Requests from a dataset, in a seeded order, cycling when more are asked for than it holds.
#[derive(Debug, Clone)]
pub struct DatasetWorkload {
    entries: Vec<(Entry, u32)>,
    order: Vec<usize>,
    chat: bool,
    default_output_len: u32,
    /// Entries dropped by the filters.
    pub filtered_out: usize,
    exact: bool,
}

impl DatasetWorkload {
    /// Count each prompt's tokens (`tokenizer`, else words), apply `filters`, shuffle by `seed`.
    pub fn new(
        entries: Vec<Entry>,
        tokenizer: Option<Arc<Tokenizer>>,
        filters: Filters,
        default_output_len: u32,
        chat: bool,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        let before = entries.len();
        let mut kept = Vec::with_capacity(before);
        for e in entries {
            let text: String =
                e.messages.iter().map(Message::text_content).collect::<Vec<_>>().join("\n");
            let n =
                tokenizer.as_ref().map_or_else(|| approx_tokens(&text), |t| t.count(&text) as u32);
            let out = e.output_len.unwrap_or(default_output_len);
            if filters.min_input_len.is_some_and(|m| n < m)
                || filters.max_input_len.is_some_and(|m| n > m)
                || filters.max_output_len.is_some_and(|m| out > m)
            {
                continue;
            }
            kept.push((e, n));
        }
        if kept.is_empty() {
            return Err(WorkloadError::Invalid {
                name: "dataset",
                reason: format!(
                    "no prompt is left after the length filters ({before} before filtering)"
                ),
            });
        }
        let mut order: Vec<usize> = (0..kept.len()).collect();
        // Fisher-Yates with the crate's seeded generator
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        let filtered_out = before - kept.len();
        Ok(Self {
            entries: kept,
            order,
            chat,
            default_output_len,
            filtered_out,
            exact: tokenizer.is_some(),
        })
    }

    /// Prompts left after filtering.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Workload for DatasetWorkload {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let k = self.order[(index % self.order.len() as u64) as usize];
        let (e, n) = &self.entries[k];
        let prompt = if self.chat {
            Prompt::Chat(e.messages.clone())
        } else {
            Prompt::Text(
                e.messages.iter().map(Message::text_content).collect::<Vec<_>>().join("\n"),
            )
        };
        Some(PlannedRequest {
            index,
            prompt,
            input_tokens: *n,
            input_tokens_exact: self.exact,
            max_tokens: e.output_len.unwrap_or(self.default_output_len),
        })
    }
}

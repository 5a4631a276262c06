//! Request-arrival traces: Mooncake JSONL and Azure LLM inference CSV.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::{Message, Prompt};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::tokenizer::{ExactPrompts, Tokenizer};
use crate::{PlannedRequest, Workload, WorkloadError};

/// One row of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    /// 1-based line in the file.
    pub line: usize,
    /// Arrival time relative to the first row.
    pub timestamp: Duration,
    pub input_len: u32,
    pub output_len: u32,
    /// Prefix-block ids (Mooncake); equal leading ids mean a shared prefix.
    pub hash_ids: Vec<u64>,
}

use crate::{parse_err, read};

#[derive(Deserialize)]
struct MooncakeRow {
    timestamp: Option<serde_json::Value>,
    input_length: Option<serde_json::Value>,
    output_length: Option<serde_json::Value>,
    #[serde(default)]
    hash_ids: Option<Vec<serde_json::Value>>,
}

fn nonneg_int(
    v: Option<&serde_json::Value>,
    path: &Path,
    line: usize,
    field: &str,
) -> Result<u64, WorkloadError> {
    let v = v.ok_or_else(|| parse_err(path, line, field, "missing"))?;
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    if v.as_i64().is_some_and(|n| n < 0) || v.as_f64().is_some_and(|n| n < 0.0) {
        return Err(parse_err(path, line, field, format!("negative value {v}")));
    }
    Err(parse_err(path, line, field, format!("expected a whole number, got {v}")))
}

/// Load a Mooncake trace: JSONL rows `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`.
pub fn load_mooncake(path: &Path) -> Result<Vec<TraceRequest>, WorkloadError> {
    parse_mooncake(&read(path)?, path)
}

/// Parse Mooncake JSONL text (`path` names it in errors).
pub fn parse_mooncake(text: &str, path: &Path) -> Result<Vec<TraceRequest>, WorkloadError> {
    let mut out = Vec::new();
    let mut last = 0u64;
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        if l.trim().is_empty() {
            continue;
        }
        let row: MooncakeRow = serde_json::from_str(l)
            .map_err(|e| parse_err(path, line, "(json)", format!("not a JSON object: {e}")))?;
        let ts = nonneg_int(row.timestamp.as_ref(), path, line, "timestamp")?;
        if ts < last {
            return Err(parse_err(
                path,
                line,
                "timestamp",
                format!("decreases ({ts} ms after {last} ms)"),
            ));
        }
        last = ts;
        let input = nonneg_int(row.input_length.as_ref(), path, line, "input_length")?;
        let output = nonneg_int(row.output_length.as_ref(), path, line, "output_length")?;
        let hash_ids = row
            .hash_ids
            .unwrap_or_default()
            .iter()
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    parse_err(path, line, "hash_ids", format!("{v} is not a block id"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push(TraceRequest {
            line,
            timestamp: Duration::from_millis(ts),
            input_len: u32::try_from(input)
                .map_err(|_| parse_err(path, line, "input_length", "too large"))?,
            output_len: u32::try_from(output)
                .map_err(|_| parse_err(path, line, "output_length", "too large"))?,
            hash_ids,
        });
    }
    if out.is_empty() {
        return Err(parse_err(path, 1, "(file)", "no rows"));
    }
    Ok(out)
}

/// Nanoseconds since the Unix epoch for `YYYY-MM-DD HH:MM:SS[.fffffff]` (UTC; `T` may stand
/// for the space and a `Z` may end it; 1 to 9 fractional digits: Python's `%f` cannot read
/// the 7 the Azure traces have). Only a real calendar date and time of day is read: anything
/// else is refused, never wrapped.
fn parse_timestamp(s: &str) -> Option<i128> {
    use time::format_description::{parse_owned, OwnedFormatItem};
    static FORMAT: std::sync::OnceLock<OwnedFormatItem> = std::sync::OnceLock::new();
    let format = FORMAT.get_or_init(|| {
        parse_owned::<2>(
            "[year]-[month]-[day][first [T][ ]][hour]:[minute]:[second][optional [.[subsecond]]][optional [Z]]",
        )
        .expect("a valid format description")
    });
    let t = time::PrimitiveDateTime::parse(s.trim(), format).ok()?;
    Some(t.assume_utc().unix_timestamp_nanos())
}

/// Load an Azure LLM inference trace: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`
/// (CRLF line ends and 7-digit fractional seconds are handled).
pub fn load_azure(path: &Path) -> Result<Vec<TraceRequest>, WorkloadError> {
    parse_azure(&read(path)?, path)
}

/// Parse Azure CSV text (`path` names it in errors).
pub fn parse_azure(text: &str, path: &Path) -> Result<Vec<TraceRequest>, WorkloadError> {
    parse_csv(text, path, &ColumnMap::azure())
}

/// Words for prompts built without a tokenizer (one word per intended token; exact against
/// the simulator, which counts words).
const BLOCK_WORDS: &[&str] = &[
    "amber", "basin", "cedar", "delta", "ember", "fable", "grove", "harbor", "ivory", "jasper",
    "kettle", "lantern", "meadow", "nectar", "orchard", "pebble", "quarry", "raven", "saddle",
    "timber", "umber", "valley", "willow", "yarrow", "zephyr", "anchor", "beacon", "canyon",
];

/// Replays a trace: each request's prompt is built from its prefix blocks, so requests that
/// share leading `hash_ids` share exactly those leading blocks (`block_size` tokens each).
///
/// With a tokenizer, a block is `block_size` corpus token ids chosen by the block id:
/// token-id prompts (completions) share exactly those tokens; text prompts (chat) are the
/// decoded ids, and re-tokenisation can merge tokens at block edges (at most a token or two
/// per edge). Without a tokenizer, a block is `block_size` words (exact for the simulator,
/// which counts words; an estimate for real servers).
pub struct TraceWorkload {
    pub requests: Vec<TraceRequest>,
    pub block_size: u32,
    pub seed: u64,
    pub chat: bool,
    /// Send token ids (completions endpoint) instead of text.
    pub token_ids: bool,
    prompts: Option<ExactPrompts>,
}

impl std::fmt::Debug for TraceWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWorkload")
            .field("requests", &self.requests.len())
            .field("block_size", &self.block_size)
            .finish_non_exhaustive()
    }
}

impl TraceWorkload {
    pub fn new(
        requests: Vec<TraceRequest>,
        block_size: u32,
        seed: u64,
        chat: bool,
        tokenizer: Option<Arc<Tokenizer>>,
    ) -> Self {
        Self {
            requests,
            block_size: block_size.max(1),
            seed,
            chat,
            token_ids: false,
            prompts: tokenizer.map(ExactPrompts::new),
        }
    }

    /// Intended send offsets: the trace's timestamps divided by `speed`.
    pub fn offsets(&self, speed: f64) -> Vec<Duration> {
        self.requests
            .iter()
            .map(|r| Duration::from_secs_f64(r.timestamp.as_secs_f64() / speed))
            .collect()
    }

    /// Block ids of a request: its hash_ids, or fresh per-request ids when it has none.
    fn blocks(&self, index: u64, r: &TraceRequest) -> Vec<u64> {
        let n = r.input_len.div_ceil(self.block_size) as usize;
        if r.hash_ids.len() >= n && n > 0 {
            return r.hash_ids[..n].to_vec();
        }
        let mut v = r.hash_ids.clone();
        // Blocks the trace does not name are unique to this request.
        v.extend((v.len()..n).map(|k| (1u64 << 63) | (index << 20) | k as u64));
        v
    }

    /// The token ids of a request's prompt (tokenizer required). Each block is a corpus
    /// window chosen by the block id, opened by two marker tokens that spell the block id in
    /// base (vocabulary − 1000): blocks with different ids (below ~2·10^9) differ from their
    /// first two tokens on, and equal blocks are equal.
    pub fn prompt_ids(&self, index: u64) -> Option<Vec<u32>> {
        let p = self.prompts.as_ref()?;
        let r = self.requests.get(index as usize)?;
        let mut ids = Vec::with_capacity(r.input_len as usize);
        for (k, b) in self.blocks(index, r).into_iter().enumerate() {
            let take = (r.input_len - k as u32 * self.block_size).min(self.block_size) as usize;
            let seed = self.seed ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let marks = p.block_marker(b);
            let m = take.min(marks.len());
            ids.extend_from_slice(&marks[..m]);
            ids.extend(p.ids(take - m, seed));
        }
        Some(ids)
    }

    fn prompt_words(&self, index: u64, r: &TraceRequest) -> String {
        let mut s = String::with_capacity(r.input_len as usize * 7);
        for (k, b) in self.blocks(index, r).into_iter().enumerate() {
            let take = (r.input_len - k as u32 * self.block_size).min(self.block_size);
            let mut rng =
                ChaCha8Rng::seed_from_u64(self.seed ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for _ in 0..take {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push_str(BLOCK_WORDS[rng.gen_range(0..BLOCK_WORDS.len())]);
            }
        }
        s
    }
}

impl Workload for TraceWorkload {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let r = self.requests.get(index as usize)?;
        let (prompt, exact) = match (&self.prompts, self.token_ids) {
            (Some(_), true) => (Prompt::TokenIds(self.prompt_ids(index)?), true),
            (Some(p), false) => {
                let ids = self.prompt_ids(index)?;
                (self.wrap(p.decode(&ids)), false)
            }
            (None, _) => (self.wrap(self.prompt_words(index, r)), false),
        };
        Some(PlannedRequest {
            index,
            prompt,
            input_tokens: r.input_len,
            input_tokens_exact: exact,
            max_tokens: r.output_len.max(1),
        })
    }
}

impl TraceWorkload {
    fn wrap(&self, text: String) -> Prompt {
        if self.chat {
            Prompt::Chat(vec![Message::text("user", text)])
        } else {
            Prompt::Text(text)
        }
    }
}

/// Unit of a numeric timestamp column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Milliseconds,
}

/// Which columns (CSV) or fields (JSONL) hold a trace's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMap {
    pub timestamp: String,
    pub input: String,
    pub output: String,
    /// For numeric timestamps; date-time strings are read as such.
    pub unit: TimeUnit,
}

impl ColumnMap {
    /// The Azure LLM inference traces' columns (date-time timestamps).
    pub fn azure() -> Self {
        Self {
            timestamp: "TIMESTAMP".into(),
            input: "ContextTokens".into(),
            output: "GeneratedTokens".into(),
            unit: TimeUnit::Seconds,
        }
    }

    /// BurstGPT's columns: `Timestamp` (seconds), `Request tokens`, `Response tokens`.
    pub fn burstgpt() -> Self {
        Self {
            timestamp: "Timestamp".into(),
            input: "Request tokens".into(),
            output: "Response tokens".into(),
            unit: TimeUnit::Seconds,
        }
    }

    /// Parse `timestamp=COL,input=COL,output=COL[,unit=s|ms]`.
    pub fn parse(s: &str) -> Result<Self, WorkloadError> {
        let mut m = Self::burstgpt();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |reason: &str| WorkloadError::Invalid {
                name: "column mapping",
                reason: format!("{part:?}: {reason}"),
            };
            let (k, v) = part.split_once('=').ok_or_else(|| bad("expected KEY=COLUMN"))?;
            match k.trim() {
                "timestamp" => v.trim().clone_into(&mut m.timestamp),
                "input" => v.trim().clone_into(&mut m.input),
                "output" => v.trim().clone_into(&mut m.output),
                "unit" => {
                    m.unit = match v.trim() {
                        "s" => TimeUnit::Seconds,
                        "ms" => TimeUnit::Milliseconds,
                        _ => return Err(bad("unit must be s or ms")),
                    }
                }
                _ => return Err(bad("keys are timestamp, input, output and unit")),
            }
        }
        Ok(m)
    }
}

/// A timestamp cell: a number in `unit`, or a date-time; nanoseconds.
fn cell_time(s: &str, unit: TimeUnit) -> Option<i128> {
    if let Ok(v) = s.trim().parse::<f64>() {
        if !(v.is_finite() && v >= 0.0) {
            return None;
        }
        let ns = match unit {
            TimeUnit::Seconds => v * 1e9,
            TimeUnit::Milliseconds => v * 1e6,
        };
        // beyond about 31,700 years a number is no trace's time (and would saturate)
        return (ns < 1e21).then(|| ns.round() as i128);
    }
    parse_timestamp(s)
}

fn push_row(
    out: &mut Vec<TraceRequest>,
    first: &mut Option<i128>,
    last: &mut i128,
    path: &Path,
    line: usize,
    map: &ColumnMap,
    cell: &dyn Fn(&str) -> Option<String>,
) -> Result<(), WorkloadError> {
    let get = |name: &str| cell(name).ok_or_else(|| parse_err(path, line, name, "missing"));
    let ts_s = get(&map.timestamp)?;
    let ts = cell_time(&ts_s, map.unit).ok_or_else(|| {
        parse_err(path, line, &map.timestamp, format!("{ts_s:?} is not a timestamp"))
    })?;
    if ts < *last {
        return Err(parse_err(path, line, &map.timestamp, "decreases"));
    }
    *last = ts;
    let t0 = *first.get_or_insert(ts);
    let num = |name: &str| -> Result<u32, WorkloadError> {
        let s = get(name)?;
        let s = s.trim().trim_end_matches(".0");
        s.parse::<u32>().map_err(|_| {
            parse_err(
                path,
                line,
                name,
                if s.starts_with('-') {
                    format!("negative value {s}")
                } else {
                    format!("{s:?} is not a whole number")
                },
            )
        })
    };
    // More than ~584 years after the first row does not fit a Duration of u64 nanoseconds.
    let offset = ts.checked_sub(t0).and_then(|d| u64::try_from(d).ok()).ok_or_else(|| {
        parse_err(path, line, &map.timestamp, format!("{ts_s:?} is too far from the first row"))
    })?;
    out.push(TraceRequest {
        line,
        timestamp: Duration::from_nanos(offset),
        input_len: num(&map.input)?,
        output_len: num(&map.output)?,
        hash_ids: Vec::new(),
    });
    Ok(())
}

/// A CSV trace (header row; plain comma-separated cells, CRLF or LF) read through `map`.
pub fn load_csv(path: &Path, map: &ColumnMap) -> Result<Vec<TraceRequest>, WorkloadError> {
    parse_csv(&read(path)?, path, map)
}

/// Parse CSV text through `map` (`path` names it in errors).
pub fn parse_csv(
    text: &str,
    path: &Path,
    map: &ColumnMap,
) -> Result<Vec<TraceRequest>, WorkloadError> {
    let mut lines = text.lines().enumerate();
    let (_, header) = lines.next().ok_or_else(|| parse_err(path, 1, "(header)", "empty file"))?;
    let cols: Vec<String> = header
        .trim_end_matches('\r')
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_owned())
        .collect();
    for name in [&map.timestamp, &map.input, &map.output] {
        if !cols.iter().any(|c| c == name) {
            return Err(parse_err(
                path,
                1,
                name,
                format!("column missing (header has: {})", cols.join(", ")),
            ));
        }
    }
    let (mut out, mut first, mut last) = (Vec::new(), None, i128::MIN);
    for (i, l) in lines {
        let l = l.trim_end_matches('\r');
        if l.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = l.split(',').collect();
        let cell = |name: &str| {
            cols.iter()
                .position(|c| c == name)
                .and_then(|k| cells.get(k))
                .map(|s| s.trim().trim_matches('"').to_owned())
        };
        push_row(&mut out, &mut first, &mut last, path, i + 1, map, &cell)?;
    }
    if out.is_empty() {
        return Err(parse_err(path, 2, "(file)", "no rows"));
    }
    Ok(out)
}

/// A JSONL trace read through `map` (field names).
pub fn load_jsonl_trace(path: &Path, map: &ColumnMap) -> Result<Vec<TraceRequest>, WorkloadError> {
    parse_jsonl_trace(&read(path)?, path, map)
}

/// Parse a JSONL trace read through `map` (`path` names it in errors).
pub fn parse_jsonl_trace(
    text: &str,
    path: &Path,
    map: &ColumnMap,
) -> Result<Vec<TraceRequest>, WorkloadError> {
    let (mut out, mut first, mut last) = (Vec::new(), None, i128::MIN);
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(l).map_err(|e| parse_err(path, i + 1, "(json)", e.to_string()))?;
        let cell = |name: &str| {
            v.get(name).and_then(|x| match x {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
        };
        push_row(&mut out, &mut first, &mut last, path, i + 1, map, &cell)?;
    }
    if out.is_empty() {
        return Err(parse_err(path, 1, "(file)", "no rows"));
    }
    Ok(out)
}

//! [`Note`]: what a reader of a run's results must know, as a value an embedder can match
//! on; `summary.json` keeps its words.

use std::fmt;

use quetta_engine::setting::Setting;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A note on a run's results. Its `Display` is the note's words, as `summary.json`, the
/// terminal and the reports give them (settings named as the process names them,
/// [`quetta_engine::setting::name_settings`]); a note read back from a file, or made by a
/// layer in its own words (the workload's, the target's), is [`Note::Text`].
///
/// ```
/// use quetta_report::Note;
/// let n = Note::Throttled { throttled: 2, requests: 40, retried: 0 };
/// assert!(n.is_warning());
/// assert!(n.to_string().starts_with("WARNING: the provider throttled 2 of 40 requests"));
/// // on disk a note is its words, and read back it is text
/// let json = serde_json::to_string(&n).unwrap();
/// let back: Note = serde_json::from_str(&json).unwrap();
/// assert_eq!(back, Note::Text(n.to_string()));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Note {
    /// The client set the pace (its share of a slot's cycle, its read lag): the figures are
    /// partly the client's (the words are the client overhead's own warning).
    ClientPaced(String),
    /// The provider throttled `throttled` of the `requests` (rate limit or quota), and
    /// `retried` earlier attempts were sent again.
    Throttled { throttled: u64, requests: u64, retried: u64 },
    /// The workload ended on an error after `sent` of `planned` requests.
    WorkloadFailed { sent: u64, planned: Option<u64>, error: String },
    /// A twin counted prompt words as tokens (no tokenizer), its model being in tokens.
    TwinCountsWords,
    /// Shard 0 stopped this shard, saying why.
    StoppedByShard0(String),
    /// The stop-on-saturation policy ended the run.
    StoppedOnSaturation,
    /// Requests in flight rose from the first half of the run to the second.
    OverSaturated,
    /// Requests still running at the drain timeout, cancelled.
    CancelledInDrain(u64),
    /// Requests released whose records never reached the recorder.
    RecordsMissing { dispatched: u64, records: u64 },
    /// `requests.jsonl` (or shard 0) could not take the records: why.
    RecordsNotWritten(String),
    /// Sessions that ended at a failed turn.
    SessionsFailed(u64),
    /// No scrape of the server's metrics at `url` succeeded.
    ScrapeFailed { url: String, error: String },
    /// Any other note, in its words.
    Text(String),
}

impl Note {
    /// Whether a reader must not miss it: the figures are in doubt (shown first, marked
    /// `WARNING` or `FAILED`).
    pub fn is_warning(&self) -> bool {
        match self {
            Note::ClientPaced(_)
            | Note::Throttled { .. }
            | Note::WorkloadFailed { .. }
            | Note::TwinCountsWords => true,
            Note::Text(t) => t.starts_with("WARNING: ") || t.starts_with("FAILED: "),
            _ => false,
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::ClientPaced(w) => write!(f, "WARNING: {w}"),
            Note::Throttled { throttled, requests, retried } => {
                let retried = match retried {
                    0 => String::new(),
                    r => format!(", and {r} earlier attempts that were sent again"),
                };
                write!(f, "WARNING: the provider throttled {throttled} of {requests} requests (rate limit or quota), which failed{retried}: the run measured the quota as much as the model")
            }
            Note::WorkloadFailed { sent, planned, error } => {
                f.write_str(&crate::workload_failed(*sent, *planned, error))
            }
            Note::TwinCountsWords => write!(f, "WARNING: the twin counts each word of a prompt as a token, but its model was calibrated in the server's tokens (usually more than one a word): its prompts look shorter and its prefill faster than the server's; give {} the server's tokenizer", Setting::Tokenizer),
            Note::StoppedByShard0(why) => write!(f, "stopped early: {why}"),
            Note::StoppedOnSaturation => write!(f, "stopped early ({}): requests in flight kept rising, the server cannot keep up with this load", Setting::StopOnSaturation),
            Note::OverSaturated => f.write_str("over-saturated: requests in flight rose from the first to the second half of the run; latencies grow with the run's length, not only with the load"),
            Note::CancelledInDrain(n) => write!(f, "{n} requests were still running at the drain timeout and were cancelled"),
            Note::RecordsMissing { dispatched, records } => write!(
                f,
                "{dispatched} requests were released but only {records} records reached the recorder: {} records are missing",
                dispatched.abs_diff(*records)
            ),
            Note::RecordsNotWritten(e) => write!(f, "writing requests.jsonl failed: {e}"),
            Note::SessionsFailed(n) => write!(f, "{n} sessions ended at a failed turn (a failed turn ends its session)"),
            Note::ScrapeFailed { url, error } => write!(f, "{}: no scrape of {url} succeeded: {error}", Setting::ServerMetrics),
            Note::Text(t) => f.write_str(t),
        }
    }
}

impl From<String> for Note {
    fn from(t: String) -> Self {
        Note::Text(t)
    }
}

impl From<&str> for Note {
    fn from(t: &str) -> Self {
        Note::Text(t.to_owned())
    }
}

impl Serialize for Note {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Note {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Note::Text)
    }
}

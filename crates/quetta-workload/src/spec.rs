//! [`WorkloadSpec`]: everything a benchmark can send, as plain data, and the one
//! [`WorkloadSpec::build`] that turns it into requests (or sessions) for a run and for a dry
//! run alike.
//!
//! Over 800 lines on purpose: the spec, its validation and the build of every source
//! are one reading, so that each refusal sits beside the source it guards; the sources'
//! own code lives in their modules.
//!
//! ```
//! use quetta_workload::spec::{Limits, WorkloadSpec};
//!
//! let spec = WorkloadSpec::synthetic(256, 64);
//! let mut built = spec.build(&Limits::default()).unwrap();
//! let first = built.requests().unwrap().request(0).unwrap();
//! assert_eq!((first.input_tokens, first.max_tokens), (256, 64));
//! // a named profile: a bundled trace, replayed at its recorded times
//! let built = WorkloadSpec::profile("azure-conversation").build(&Limits::default()).unwrap();
//! assert!(built.recorded_offsets(None).unwrap().len() > 1000);
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::setting::Setting as S;

use crate::dataset::{load_jsonl, load_sharegpt, load_text, DatasetWorkload, Filters};
use crate::distribution::{DistWorkload, Distribution};
use crate::note::WorkloadNote;
use crate::prefetch::Prefetched;
use crate::profiles::{self, UserProfile};
use crate::session::{
    load_sharegpt as load_sessions_sharegpt, load_turns_jsonl, LoadOptions, Session, SessionList,
    SessionSource, SessionSynth, SessionSynthSpec,
};
use crate::synthetic::{ExactSynthetic, StressWorkload, SyntheticSpec};
use crate::tokenizer::Tokenizer;
use crate::trace::{
    load_azure, load_csv, load_jsonl_trace, load_mooncake, ColumnMap, TraceRequest, TraceWorkload,
};
use crate::{Workload, WorkloadError};

/// `w` boxed, built on every core ahead of use when its prompts are exact text (each is
/// encoded to be checked: the costly part of a run's preparation).
fn built_ahead<W: Workload + Clone + 'static>(w: W, exact_text: bool) -> Box<dyn Workload> {
    if exact_text {
        Box::new(Prefetched::new(w, 0))
    } else {
        Box::new(w)
    }
}

/// The file formats of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DatasetFormat {
    Sharegpt,
    Jsonl,
    Text,
}

/// The file formats of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TraceFormat {
    Mooncake,
    Azure,
    /// Any CSV with a header, read through columns (BurstGPT's by default).
    Csv,
    /// Any JSONL, read through columns.
    Jsonl,
}

/// The file formats of multi-turn sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SessionFormat {
    /// ShareGPT-style conversations, tool-call conversations included.
    Sharegpt,
    /// JSONL lines with `turns: [user message, ...]` (MT-Bench).
    TurnsJsonl,
    /// A TOML distribution file: turns, new-prompt and output lengths, think time.
    Synth,
}

/// Where a workload's requests come from.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Source {
    /// Synthetic prompts of the spec's lengths (words, or exact tokens with a tokenizer).
    Synthetic,
    /// A named profile (`quetta-bench profiles`), or one of `file`'s user profiles.
    Profile { name: String, file: Option<PathBuf> },
    /// Prompts from a dataset file, with length filters.
    Dataset { path: PathBuf, format: DatasetFormat, filters: Filters },
    /// A request trace: arrival times, input and output lengths (and Mooncake's prefix
    /// blocks); `columns` maps a CSV or JSONL trace's columns (empty: BurstGPT's).
    Trace { path: PathBuf, format: TraceFormat, columns: String },
    /// Lengths (and, when the load says so, arrival gaps) drawn from a fitted distribution
    /// file (`quetta-bench workload fit`).
    Distribution { path: PathBuf },
    /// Multi-turn sessions from a file.
    Sessions { path: PathBuf, format: SessionFormat },
    /// Recordings to transcribe: a directory of WAV and FLAC files, or a JSONL dataset of
    /// them ([`crate::audio`]).
    Audio { path: PathBuf },
}

/// Images attached to each chat request (the vision modality).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vision {
    /// Image files (PNG, JPEG, GIF, WebP); none: the bundled test image.
    pub images: Vec<PathBuf>,
    pub per_request: usize,
}

/// Everything a benchmark can send, as data. Every field is public; the constructors fill
/// in the defaults `quetta-bench run` uses.
///
/// ```
/// use quetta_workload::spec::{Limits, WorkloadSpec};
/// let mut spec = WorkloadSpec::profile("chat-short");
/// spec.output_len = Some(64); // the spec's own fields win over the profile's
/// let b = spec.build(&Limits::default())?;
/// assert_eq!((b.input_len, b.output_len), (256, 64));
/// # Ok::<(), quetta_workload::WorkloadError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    pub source: Source,
    /// Mean prompt length in tokens (synthetic prompts) [default: 128, or the profile's].
    pub input_len: Option<u32>,
    pub input_stddev: Option<f64>,
    /// Mean output length in tokens (`max_tokens`) [default: 128, or the profile's].
    pub output_len: Option<u32>,
    pub output_stddev: Option<f64>,
    /// Synthetic lengths drawn uniformly from `[len·(1−r), len·(1+r)]` (vLLM's
    /// `--random-range-ratio`); 0 or none: fixed lengths (or the stddevs' normal draw).
    pub range_ratio: Option<f64>,
    /// The prompts' own range ratio, instead of `range_ratio` for them.
    pub input_range_ratio: Option<f64>,
    /// The outputs' own range ratio, instead of `range_ratio` for them (prompts of 128–1,024
    /// tokens with outputs of 64–256 take two ratios).
    pub output_range_ratio: Option<f64>,
    /// Tokens of one prefix shared by every synthetic prompt, before its own `input_len`
    /// tokens (vLLM's `--random-prefix-len`).
    pub prefix_len: Option<u32>,
    /// Chat messages (the chat endpoint) or raw prompts (completions).
    pub chat: bool,
    /// A `tokenizer.json` path, or a model id in the local Hugging Face cache, for prompts of
    /// exact token lengths.
    pub tokenizer: Option<String>,
    /// Send prompts as token ids (completions; needs a tokenizer).
    pub token_ids: bool,
    /// Unique random-token prompts (no prefix-cache hits); the run asks for exactly the
    /// planned output length.
    pub stress: bool,
    pub vision: Option<Vision>,
    /// Keep at most this many turns of each session (session files and profiles).
    pub max_turns: Option<usize>,
    /// Replay recorded times (a trace's, or sessions' recorded starts) this many times faster.
    pub replay_speed: f64,
    /// Tokens per prefix block of Mooncake `hash_ids`.
    pub block_size: u32,
    /// Seed of the prompts (and of the lengths drawn).
    pub seed: u64,
    /// What the requests ask of the server: generation sends one prompt a request; an
    /// embedding sends `inputs_per_request` prompts as one batch, a ranking one prompt as
    /// the query and `inputs_per_request` after it as the documents ([`crate::batch`]).
    pub kind: quetta_engine::RequestKind,
    /// Inputs per request of an embedding or a ranking (vLLM's `--random-batch-size`).
    pub inputs_per_request: u32,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        Self {
            source: Source::Synthetic,
            input_len: None,
            input_stddev: None,
            output_len: None,
            output_stddev: None,
            range_ratio: None,
            input_range_ratio: None,
            output_range_ratio: None,
            prefix_len: None,
            chat: true,
            tokenizer: None,
            token_ids: false,
            stress: false,
            vision: None,
            max_turns: None,
            replay_speed: 1.0,
            block_size: 512,
            seed: 0,
            kind: quetta_engine::RequestKind::Generate,
            inputs_per_request: 1,
        }
    }
}

/// The size of the run the workload is built for (sessions cycle when more are asked for
/// than a file holds; fitted gaps are drawn for the planned count).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub requests: Option<u64>,
    pub sessions: Option<u64>,
    pub duration: Option<Duration>,
}

/// What a profile says about the load, applied when the run gives none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadHint {
    pub request_rate: Option<f64>,
    pub concurrency: Option<usize>,
    /// `poisson`, `gamma` or `constant` (any case), as the profile wrote it.
    pub arrival: Option<String>,
}

impl LoadHint {
    /// The arrival process the hint names (Poisson when it names none; gamma with shape 1).
    pub fn arrival_process(&self) -> Option<crate::arrival::Arrival> {
        use crate::arrival::Arrival;
        match profiles::choice(self.arrival.as_deref(), &profiles::ARRIVALS)? {
            0 => Some(Arrival::Poisson),
            1 => Some(Arrival::Gamma { burstiness: 1.0 }),
            _ => Some(Arrival::Constant),
        }
    }
}

/// Multi-turn sessions, built.
pub struct BuiltSessions {
    pub source: Box<dyn SessionSource>,
    /// Distinct sessions in the file (`None` for synthesis, which never runs out).
    pub distinct: Option<u64>,
    /// Every session's recorded start, from the earliest, when all have one.
    pub starts: Option<Vec<Duration>>,
}

impl std::fmt::Debug for BuiltSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltSessions")
            .field("distinct", &self.distinct)
            .field("starts", &self.starts.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

/// Where the intended send times of a replay come from.
#[derive(Debug, Clone)]
enum Times {
    /// A trace's timestamps, divided by its speed.
    Trace(Vec<Duration>),
    /// Gaps drawn from a fitted distribution.
    Fitted(Box<Distribution>),
}

/// A workload ready to run.
pub struct Built {
    work: BuiltWork,
    times: Option<Times>,
    seed: u64,
    /// What a reader of the results must know (estimated lengths, filtered prompts, ...).
    pub notes: Vec<WorkloadNote>,
    /// The lengths in force (the profile's where the spec gave none).
    pub input_len: u32,
    pub input_stddev: f64,
    pub output_len: u32,
    pub output_stddev: f64,
    /// The tokenizer's source, when one was used.
    pub tokenizer: Option<String>,
    /// The profile's load, when the spec named a user profile that sets one.
    pub load_hint: Option<LoadHint>,
}

/// What a built workload sends.
#[non_exhaustive]
pub enum BuiltWork {
    Requests(Box<dyn Workload>),
    Sessions(BuiltSessions),
}

impl std::fmt::Debug for BuiltWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuiltWork::Requests(_) => f.write_str("Requests(..)"),
            BuiltWork::Sessions(s) => f.debug_tuple("Sessions").field(s).finish(),
        }
    }
}

impl BuiltWork {
    /// The sessions, if the workload is multi-turn.
    pub fn into_sessions(self) -> Option<BuiltSessions> {
        match self {
            BuiltWork::Sessions(s) => Some(s),
            BuiltWork::Requests(_) => None,
        }
    }
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("sessions", &self.is_sessions())
            .field("notes", &self.notes)
            .finish_non_exhaustive()
    }
}

impl Built {
    /// Whether the workload is multi-turn sessions.
    pub fn is_sessions(&self) -> bool {
        matches!(self.work, BuiltWork::Sessions(_))
    }

    /// The sessions (`None` for a request workload).
    pub fn sessions(&self) -> Option<&BuiltSessions> {
        match &self.work {
            BuiltWork::Sessions(s) => Some(s),
            BuiltWork::Requests(_) => None,
        }
    }

    /// The request workload (`None` for sessions).
    pub fn requests(&mut self) -> Option<&mut Box<dyn Workload>> {
        match &mut self.work {
            BuiltWork::Requests(w) => Some(w),
            BuiltWork::Sessions(_) => None,
        }
    }

    /// The request workload or the sessions, taken out to run.
    pub fn into_work(self) -> BuiltWork {
        self.work
    }

    /// Whether the workload brings its own send times (a trace, fitted gaps).
    pub fn has_recorded_times(&self) -> bool {
        self.times.is_some()
    }

    /// The workload's own intended send times: a trace's (sped up), or `n` (default 100)
    /// gaps drawn from a fitted distribution.
    pub fn recorded_offsets(&self, n: Option<u64>) -> Option<Vec<Duration>> {
        Some(match self.times.as_ref()? {
            Times::Trace(v) => v.clone(),
            Times::Fitted(d) => d.offsets(n.unwrap_or(100), self.seed),
        })
    }
}

impl WorkloadSpec {
    /// Synthetic prompts of `input_len` tokens asking for `output_len`, on the chat endpoint.
    pub fn synthetic(input_len: u32, output_len: u32) -> Self {
        Self { input_len: Some(input_len), output_len: Some(output_len), ..Self::default() }
    }

    /// A named built-in profile (see [`profiles::builtin`]).
    pub fn profile(name: impl Into<String>) -> Self {
        Self { source: Source::Profile { name: name.into(), file: None }, ..Self::default() }
    }

    /// A trace file in `format`, replayed at its recorded speed.
    pub fn trace(path: impl Into<PathBuf>, format: TraceFormat) -> Self {
        Self {
            source: Source::Trace { path: path.into(), format, columns: String::new() },
            ..Self::default()
        }
    }

    /// Multi-turn sessions from a file in `format`.
    pub fn sessions(path: impl Into<PathBuf>, format: SessionFormat) -> Self {
        Self { source: Source::Sessions { path: path.into(), format }, ..Self::default() }
    }

    /// Build the workload for a run of `limits`: load the files, resolve the profile and the
    /// tokenizer (locally: a path or the Hugging Face cache), check the combination, and
    /// note what a reader must know. The run and a dry run both build here.
    pub fn build(&self, limits: &Limits) -> Result<Built, WorkloadError> {
        let mut spec = self.clone();
        let load_hint = spec.resolve_profile()?;
        spec.check()?;
        let tokenizer = match &spec.tokenizer {
            Some(t) => Some(Arc::new(Tokenizer::resolve(t)?)),
            None => None,
        };
        let mut built = Built {
            work: BuiltWork::Requests(Box::new(SyntheticSpec::default_spec())),
            times: None,
            seed: spec.seed,
            notes: Vec::new(),
            input_len: spec.input_len.unwrap_or(128),
            input_stddev: spec.input_stddev.unwrap_or(0.0),
            output_len: spec.output_len.unwrap_or(128),
            output_stddev: spec.output_stddev.unwrap_or(0.0),
            tokenizer: tokenizer.as_ref().map(|t| t.source().to_owned()),
            load_hint,
        };
        if spec.multiturn() {
            built.work =
                BuiltWork::Sessions(spec.sessions_of(tokenizer, limits, &mut built.notes)?);
            return Ok(built);
        }
        let w = spec.requests_of(tokenizer, &mut built)?;
        let w = spec.with_images(w, &mut built.notes)?;
        built.work = BuiltWork::Requests(
            match crate::batch::Batched::new(w, spec.kind, spec.inputs_per_request) {
                Ok(b) => Box::new(b),
                Err(w) => w,
            },
        );
        Ok(built)
    }

    /// Replace a profile by what it stands for: lengths, and a synthetic, dataset, trace or
    /// session source. A user profile may also say how load is applied.
    fn resolve_profile(&mut self) -> Result<Option<LoadHint>, WorkloadError> {
        let Source::Profile { name, file } = self.source.clone() else { return Ok(None) };
        if let Some(f) = &file {
            let all = profiles::load_file(f)?;
            if let Some(u) = all.into_iter().find(|p| p.name == name) {
                return self.apply_user(&u, f).map(Some);
            }
        }
        let p = profiles::find(&name)?;
        if p.is_multiturn() {
            return Ok(None); // stays a profile: its sessions are bundled
        }
        self.input_len = self.input_len.or(Some(p.input_len));
        self.input_stddev = self.input_stddev.or(Some(p.input_stddev));
        self.output_len = self.output_len.or(Some(p.output_len));
        self.output_stddev = self.output_stddev.or(Some(p.output_stddev));
        if p.source == profiles::Source::Synthetic {
            self.source = Source::Synthetic;
        }
        Ok(None)
    }

    /// Apply a user profile read by [`profiles::load_file`] (which checked its names, with
    /// the file's lines).
    fn apply_user(&mut self, u: &UserProfile, file: &Path) -> Result<LoadHint, WorkloadError> {
        self.input_len = self.input_len.or(u.input_len);
        self.input_stddev = self.input_stddev.or(u.input_stddev);
        self.output_len = self.output_len.or(u.output_len);
        self.output_stddev = self.output_stddev.or(u.output_stddev);
        let pick = |value: &Option<String>, field: &'static str, names: &[&str]| {
            profiles::choice(value.as_deref(), names).ok_or_else(|| WorkloadError::Invalid {
                name: field,
                reason: format!(
                    "profile {:?} of {}: {:?} is not one of {}",
                    u.name,
                    file.display(),
                    value.as_deref().unwrap_or_default(),
                    names.join(", ")
                ),
            })
        };
        self.source = if let Some(d) = &u.dataset {
            let formats = [DatasetFormat::Sharegpt, DatasetFormat::Jsonl, DatasetFormat::Text];
            let i = pick(&u.dataset_format, "dataset_format", &profiles::DATASET_FORMATS)?;
            Source::Dataset { path: d.into(), format: formats[i], filters: Filters::default() }
        } else if let Some(t) = &u.trace {
            let formats =
                [TraceFormat::Mooncake, TraceFormat::Azure, TraceFormat::Csv, TraceFormat::Jsonl];
            let i = pick(&u.trace_format, "trace_format", &profiles::TRACE_FORMATS)?;
            Source::Trace {
                path: t.into(),
                format: formats[i],
                columns: u.trace_columns.clone().unwrap_or_default(),
            }
        } else {
            Source::Synthetic
        };
        if u.arrival.is_some() {
            pick(&u.arrival, "arrival", &profiles::ARRIVALS)?;
        }
        Ok(LoadHint {
            request_rate: u.request_rate,
            concurrency: u.concurrency,
            arrival: u.arrival.clone(),
        })
    }

    /// Whether the spec sends multi-turn sessions (a session file or a multi-turn profile).
    pub fn multiturn(&self) -> bool {
        match &self.source {
            Source::Sessions { .. } => true,
            Source::Profile { name, .. } => profiles::find(name).is_ok_and(|p| p.is_multiturn()),
            _ => false,
        }
    }

    /// Combinations that would give another benchmark than the one meant.
    fn check(&self) -> Result<(), WorkloadError> {
        let bad = |name, reason: &str| Err(WorkloadError::Invalid { name, reason: reason.into() });
        let multiturn = self.multiturn();
        if self.inputs_per_request == 0 {
            return bad("inputs per request", "a request carries at least one input");
        }
        let audio = matches!(self.source, Source::Audio { .. });
        if audio != (self.kind == quetta_engine::RequestKind::Transcribe) {
            return bad(
                "audio",
                if audio {
                    "recordings are for a transcription protocol"
                } else {
                    "a transcription protocol sends recordings: name a directory or a dataset of them"
                },
            );
        }
        if multiturn && !self.kind.generates() {
            return bad(
                "sessions",
                "embeddings and rankings are single requests, not conversations",
            );
        }
        if self.inputs_per_request > 1 && self.kind.generates() {
            return bad(
                "inputs per request",
                "a generation request carries one prompt: batches are for embeddings and rankings",
            );
        }
        if self.stress && !matches!(self.source, Source::Synthetic) {
            return bad("stress mode", &format!("it builds its own unique random-token prompts: drop {}, {}, {}, {} and multi-turn or trace profiles", S::Sessions, S::Trace, S::Dataset, S::Distribution));
        }
        let shaped = [self.range_ratio, self.input_range_ratio, self.output_range_ratio]
            .iter()
            .any(|r| r.is_some_and(|r| r > 0.0))
            || self.prefix_len.unwrap_or(0) > 0;
        if shaped && !matches!(self.source, Source::Synthetic) {
            return bad("random range ratio and prefix", &format!("they shape synthetic (random) prompts: drop {}, {}, {}, {} and {}, or the range ratio and prefix", S::Dataset, S::Trace, S::Sessions, S::Distribution, S::Profile));
        }
        if self.stress && self.prefix_len.unwrap_or(0) > 0 {
            return bad("random prefix", "stress mode makes every prompt unique from its first token: a shared prefix contradicts it");
        }
        if self.token_ids && self.chat {
            return bad(
                "token ids",
                &format!(
                    "{} needs the completions endpoint ({}; chat takes text)",
                    S::TokenIds,
                    S::Endpoint
                ),
            );
        }
        if self.token_ids && self.tokenizer.is_none() {
            return bad("token ids", &format!("{} needs {}", S::TokenIds, S::Tokenizer));
        }
        if self.vision.is_some() && (!self.chat || multiturn) {
            return bad(
                "vision",
                &format!(
                    "vision prompts ({}) need the chat endpoint ({}) and single-turn requests",
                    S::Modality,
                    S::Endpoint
                ),
            );
        }
        for (name, v) in
            [("input_len_stddev", self.input_stddev), ("output_len_stddev", self.output_stddev)]
        {
            if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return bad(name, "must be a non-negative number");
            }
        }
        if !(self.replay_speed.is_finite() && self.replay_speed > 0.0) {
            return bad("replay speed", "must be a positive number");
        }
        Ok(())
    }

    /// The prompts' range ratio: their own, else the shared one.
    pub fn input_range_ratio(&self) -> Option<f64> {
        self.input_range_ratio.or(self.range_ratio)
    }

    /// The outputs' range ratio: their own, else the shared one.
    pub fn output_range_ratio(&self) -> Option<f64> {
        self.output_range_ratio.or(self.range_ratio)
    }

    fn synthetic_spec(&self) -> SyntheticSpec {
        SyntheticSpec {
            input_len: self.input_len.unwrap_or(128),
            input_stddev: self.input_stddev.unwrap_or(0.0),
            output_len: self.output_len.unwrap_or(128),
            output_stddev: self.output_stddev.unwrap_or(0.0),
            chat: self.chat,
            seed: self.seed,
            input_range_ratio: self.input_range_ratio().unwrap_or(0.0),
            output_range_ratio: self.output_range_ratio().unwrap_or(0.0),
            prefix_len: self.prefix_len.unwrap_or(0),
        }
    }

    /// The request workload of a single-turn source.
    fn requests_of(
        &self,
        tokenizer: Option<Arc<Tokenizer>>,
        built: &mut Built,
    ) -> Result<Box<dyn Workload>, WorkloadError> {
        let notes = &mut built.notes;
        Ok(match &self.source {
            Source::Trace { path, format, columns } => {
                let rows = load_trace(path, *format, columns)?;
                self.trace_workload(rows, tokenizer, built)
            }
            // a trace profile (multi-turn ones and synthetic ones are resolved before)
            Source::Profile { name, .. } => {
                let rows = profiles::find(name)?.trace()?.unwrap_or_default();
                self.trace_workload(rows, tokenizer, built)
            }
            Source::Sessions { .. } => unreachable!("sessions are built apart"),
            Source::Audio { path } => {
                let clips = crate::audio::load(path)?;
                let n = clips.len();
                let w = crate::audio::AudioWorkload::new(
                    clips,
                    self.output_len.unwrap_or(128),
                    self.seed,
                );
                notes.push(WorkloadNote::Recordings { clips: n, seconds: w.seconds() });
                Box::new(w)
            }
            Source::Distribution { path } => {
                let dist = Distribution::load(path)?;
                built.times = Some(Times::Fitted(Box::new(dist.clone())));
                let base = SyntheticSpec { input_len: 1, output_len: 1, ..self.synthetic_spec() };
                Box::new(DistWorkload { dist, base })
            }
            Source::Dataset { path, format, filters } => {
                let entries = match format {
                    DatasetFormat::Sharegpt => load_sharegpt(path, tokenizer.as_deref())?,
                    DatasetFormat::Jsonl => load_jsonl(path)?,
                    DatasetFormat::Text => load_text(path)?,
                };
                let w = DatasetWorkload::new(
                    entries,
                    tokenizer.clone(),
                    *filters,
                    self.output_len.unwrap_or(128),
                    self.chat,
                    self.seed,
                )?;
                if w.filtered_out > 0 {
                    notes.push(WorkloadNote::FilteredOut(w.filtered_out));
                }
                if tokenizer.is_none() {
                    notes.push(WorkloadNote::DatasetCountsWords);
                }
                Box::new(w)
            }
            Source::Synthetic => {
                let spec = self.synthetic_spec();
                spec.validate()?;
                match (tokenizer, self.stress) {
                    (t, true) => {
                        notes.push(WorkloadNote::Stress);
                        if self.chat {
                            notes.push(WorkloadNote::StressChatTemplate);
                        }
                        let exact = t.is_some() && !self.token_ids;
                        built_ahead(StressWorkload::new(spec, t, self.token_ids), exact)
                    }
                    (Some(t), false) => {
                        built_ahead(ExactSynthetic::new(spec, t, self.token_ids), !self.token_ids)
                    }
                    (None, false) => Box::new(spec),
                }
            }
        })
    }

    /// A trace replay: the rows' prompts and, at `speed`, their send times.
    fn trace_workload(
        &self,
        rows: Vec<TraceRequest>,
        tokenizer: Option<Arc<Tokenizer>>,
        built: &mut Built,
    ) -> Box<dyn Workload> {
        let exact = tokenizer.is_some();
        let mut w = TraceWorkload::new(rows, self.block_size, self.seed, self.chat, tokenizer);
        w.token_ids = self.token_ids;
        built.times = Some(Times::Trace(w.offsets(self.replay_speed)));
        if exact && !self.token_ids {
            built.notes.push(WorkloadNote::TraceBlocks);
        }
        if !exact {
            built.notes.push(WorkloadNote::TraceCountsWords);
        }
        Box::new(w)
    }

    /// Attach images to each chat request when the spec asks for vision.
    fn with_images(
        &self,
        w: Box<dyn Workload>,
        notes: &mut Vec<WorkloadNote>,
    ) -> Result<Box<dyn Workload>, WorkloadError> {
        let Some(v) = &self.vision else { return Ok(w) };
        let images = if v.images.is_empty() {
            vec![crate::vision::data_url(crate::vision::TEST_IMAGE_PNG, "image/png")]
        } else {
            v.images.iter().map(|p| crate::vision::load_image(p)).collect::<Result<Vec<_>, _>>()?
        };
        notes.push(WorkloadNote::Vision { per_request: v.per_request, files: v.images.len() });
        Ok(Box::new(crate::vision::WithImages { inner: w, images, per_request: v.per_request }))
    }

    /// The sessions of a session file or a multi-turn profile.
    fn sessions_of(
        &self,
        tokenizer: Option<Arc<Tokenizer>>,
        limits: &Limits,
        notes: &mut Vec<WorkloadNote>,
    ) -> Result<BuiltSessions, WorkloadError> {
        let opts = LoadOptions {
            tokenizer: tokenizer.as_deref(),
            output_len: self.output_len,
            max_turns: self.max_turns,
        };
        let list: Vec<Session> = match &self.source {
            Source::Sessions { path, format, .. } => match format {
                SessionFormat::Sharegpt => load_sessions_sharegpt(path, opts)?,
                SessionFormat::TurnsJsonl => load_turns_jsonl(path, opts)?,
                SessionFormat::Synth => {
                    let spec = SessionSynthSpec::load(path)?;
                    notes.extend(spec.warnings(path));
                    if tokenizer.is_none() {
                        notes.push(WorkloadNote::TurnsCountWords);
                    }
                    let source = Box::new(SessionSynth::new(spec, self.seed, tokenizer));
                    return Ok(BuiltSessions { source, distinct: None, starts: None });
                }
            },
            Source::Profile { name, .. } => {
                profiles::find(name)?.sessions(opts)?.unwrap_or_default()
            }
            _ => Vec::new(),
        };
        if list.is_empty() {
            return Err(WorkloadError::Invalid {
                name: "sessions",
                reason: "the session source holds no session with a user turn".into(),
            });
        }
        let n = list.len() as u64;
        let turns: usize = list.iter().map(|s| s.turns.len()).sum();
        notes.push(WorkloadNote::SessionSource { sessions: n, turns });
        // A session count beyond the file's repeats it (with unique session ids).
        let cycle = limits.sessions.is_some_and(|k| k > n) || limits.duration.is_some();
        let (list, starts) = in_start_order(list);
        let starts = starts.map(|v| v.iter().map(|d| d.div_f64(self.replay_speed)).collect());
        Ok(BuiltSessions {
            source: Box::new(SessionList { sessions: list, cycle }),
            distinct: Some(n),
            starts,
        })
    }
}

/// Sessions in the order of their recorded starts (from the earliest), when all have one.
fn in_start_order(mut list: Vec<Session>) -> (Vec<Session>, Option<Vec<Duration>>) {
    let Some(mut v) = list.iter().map(|s| s.start).collect::<Option<Vec<Duration>>>() else {
        return (list, None);
    };
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by_key(|&i| v[i]);
    list = idx.iter().map(|&i| list[i].clone()).collect();
    v.sort();
    let first = v[0];
    (list, Some(v.iter().map(|d| d.saturating_sub(first)).collect()))
}

/// Read a trace file in `format` (`columns` for CSV and JSONL traces; empty: BurstGPT's).
pub fn load_trace(
    path: &Path,
    format: TraceFormat,
    columns: &str,
) -> Result<Vec<TraceRequest>, WorkloadError> {
    Ok(match format {
        TraceFormat::Mooncake => load_mooncake(path)?,
        TraceFormat::Azure => load_azure(path)?,
        TraceFormat::Csv => load_csv(path, &ColumnMap::parse(columns)?)?,
        TraceFormat::Jsonl => load_jsonl_trace(path, &ColumnMap::parse(columns)?)?,
    })
}

impl SyntheticSpec {
    fn default_spec() -> Self {
        SyntheticSpec { input_len: 1, output_len: 1, ..SyntheticSpec::default() }
    }
}

//! [`Benchmark`]: one run against one target, built from plain data; [`BenchReport`] is its
//! typed result.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::setting::Setting as S;
use quetta_engine::{RequestParams, Sampling, Timeouts};
use quetta_http::fetch::ApiKey;
use quetta_loadgen::{
    History, JsonlSink, RunConfig, RunControl, RunOutcome, Runner, SessionConfig, ThinkTime, Work,
};
use quetta_metrics::series::Second;
use quetta_metrics::SloSet;
use quetta_report::{RunDir, RunManifest, Summary, Tool};
use quetta_workload::spec::{Built, BuiltWork, Limits, WorkloadSpec};

use crate::target::{Connected, Target};
use quetta_report::Note;

use crate::{Error, Load, Result};

/// How a multi-turn workload's sessions behave beyond their pacing ([`Load`]).
///
/// ```
/// use quetta::{SessionOptions, History};
/// let mut o = SessionOptions::default();
/// o.think = "exp:2s".parse().unwrap(); // exponential think times with a 2 s mean
/// o.history = History::Recorded;       // earlier turns carry the dataset's replies
/// o.count = Some(200);
/// assert_eq!(o.think.to_string(), "exp:2000ms");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionOptions {
    /// The pause between a reply's end and the session's next turn.
    pub think: ThinkTime,
    /// Which replies earlier turns carry (the engine's own, by default).
    pub history: History,
    /// Measured sessions (default: each session of a file once; 16 for synthesis).
    pub count: Option<u64>,
    /// Requests in flight at most, whatever the pacing.
    pub max_concurrency: Option<usize>,
}

/// What the server's side is asked about during the run.
///
/// ```
/// use quetta::{Benchmark, Target, Telemetry};
/// let mut b = Benchmark::new(Target::openai("http://127.0.0.1:8000"));
/// b.telemetry = Telemetry { server_metrics: Some("auto".into()), gpu: true, ..Telemetry::default() };
/// assert_eq!(b.telemetry.server_metrics_interval.as_secs(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// Scrape this Prometheus endpoint during the run (`auto`: the target's `/metrics`).
    pub server_metrics: Option<String>,
    pub server_metrics_interval: Duration,
    /// Bearer token for an explicit `server_metrics` URL (never written anywhere). The
    /// target's key goes only to the target's own `/metrics` (`auto`), never elsewhere.
    pub server_metrics_key: Option<ApiKey>,
    /// Sample the local NVIDIA GPUs through NVML (without a driver the run says so and goes on).
    pub gpu: bool,
    pub gpu_interval: Duration,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            server_metrics: None,
            server_metrics_interval: Duration::from_secs(1),
            server_metrics_key: None,
            gpu: false,
            gpu_interval: Duration::from_millis(100),
        }
    }
}

/// Measured requests of a benchmark given neither a count nor a duration.
pub const DEFAULT_REQUESTS: u64 = 100;

/// One benchmark: a target, a workload, a load and its stop, and where results go. Every
/// field is public; the setters chain. Without an output directory nothing touches the disk.
///
/// ```no_run
/// # async fn demo() -> quetta::Result<()> {
/// use std::time::Duration;
/// use quetta::{Benchmark, Load, Target, WorkloadSpec};
/// let report = Benchmark::new(Target::openai("http://127.0.0.1:8000"))
///     .workload(WorkloadSpec::profile("chat-short"))
///     .load(Load::poisson(10.0).max_concurrency(64))
///     .duration(Duration::from_secs(60))
///     .slos("ttft:500ms,tpot:50ms".parse()?)
///     .output_dir("results/run-1")
///     .run()
///     .await?;
/// println!("TTFT p99 {:?} ms", report.summary.ttft_ms.p99);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Benchmark {
    pub target: Target,
    pub workload: WorkloadSpec,
    /// `None`: the workload's own times (a trace, a distribution file's gaps), else a closed
    /// loop of 16 (8 sessions at a time).
    pub load: Option<Load>,
    /// Measured requests (default 100 when no duration is given and the load is not a
    /// replay, which sends its whole schedule).
    pub requests: Option<u64>,
    /// Stop sending after this long.
    pub duration: Option<Duration>,
    /// Requests sent first and left out of the results.
    pub warmup: u64,
    /// Time requests in flight get to finish after the last send (or a stop).
    pub drain_timeout: Duration,
    /// Per-request thresholds (goodput) and run-level objectives (the verdict).
    pub slos: Option<SloSet>,
    /// Extra percentiles to report.
    pub percentiles: Vec<f64>,
    pub output_dir: Option<PathBuf>,
    /// Write into a directory that already holds a run (removing the files Quetta wrote).
    pub overwrite: bool,
    pub sampling: Sampling,
    /// Extra JSON body fields of every request.
    pub extra_body: BTreeMap<String, serde_json::Value>,
    pub ignore_eos: bool,
    /// Ask for exactly the planned output length (`ignore_eos` and `min_tokens`).
    pub exact_output_length: bool,
    pub stream: bool,
    /// Keep generated text in the records.
    pub capture_text: bool,
    /// First byte, first token, idle and total limits, applied around any engine (the
    /// connect limit is [`Target::connect_timeout`]).
    pub timeouts: Timeouts,
    /// Send a request that failed before any token again, up to this many times.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub sessions: SessionOptions,
    pub telemetry: Telemetry,
    /// End the run when requests in flight keep rising.
    pub stop_on_saturation: bool,
    /// POST to this path of the target after the warmup (e.g. `/reset_prefix_cache`).
    pub reset_prefix_cache: Option<String>,
    /// Seed of the schedule and the prompts.
    pub seed: u64,
    /// Runtime worker threads of [`Benchmark::run_blocking`] (default: one per CPU).
    pub threads: Option<usize>,
    /// A name for the run (vLLM's `--label`), kept in the summary and shown by compare and
    /// the reports.
    pub label: Option<String>,
    /// Free `KEY = VALUE` pairs (vLLM's `--metadata`) kept in the summary and shown by
    /// compare and the reports.
    pub metadata: BTreeMap<String, String>,
    /// Stop the run from outside (Ctrl-C) and read its progress.
    pub control: Arc<RunControl>,
    /// Run one shard of a plan split across processes (`--shard K/N`).
    pub sharding: Option<crate::shard::Sharding>,
    /// The program running the benchmark, named in `run.json` and `summary.json`
    /// (default: the Quetta library itself).
    pub tool: Tool,
}

/// What a benchmark produced: the typed summary (field names as in `summary.json`), the
/// per-second series, and where the files went.
///
/// ```
/// use quetta::{Benchmark, Target};
/// // five requests against the embedded simulator; nothing is written
/// let r = Benchmark::new(Target::simulator(Default::default())).requests(5).run_blocking()?;
/// assert_eq!(r.summary.completed, 5);
/// assert!(r.summary.ttft_ms.p50.unwrap() >= 20.0);
/// assert!(r.dir.is_none());
/// # Ok::<(), quetta::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub summary: Summary,
    pub series: Vec<Second>,
    /// The run directory, when one was written.
    pub dir: Option<PathBuf>,
}

/// A benchmark made ready: the workload built, the run configured, nothing sent yet.
pub(crate) struct Prepared {
    pub built: Built,
    pub cfg: RunConfig,
    pub sessions: Option<SessionConfig>,
    pub load: Load,
    pub notes: Vec<Note>,
}

impl Benchmark {
    /// A benchmark of `target` with `quetta-bench run`'s defaults: 128-token synthetic chat
    /// prompts asking for 128 tokens, a closed loop of 16, 100 requests.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            workload: WorkloadSpec::default(),
            load: None,
            requests: None,
            duration: None,
            warmup: 0,
            drain_timeout: Duration::from_secs(30),
            slos: None,
            percentiles: Vec::new(),
            output_dir: None,
            overwrite: false,
            sampling: Sampling::default(),
            extra_body: BTreeMap::new(),
            ignore_eos: false,
            exact_output_length: false,
            stream: true,
            capture_text: false,
            timeouts: Timeouts::default(),
            retries: 0,
            retry_backoff: Duration::from_millis(500),
            sessions: SessionOptions::default(),
            telemetry: Telemetry::default(),
            stop_on_saturation: false,
            reset_prefix_cache: None,
            seed: 0,
            threads: None,
            label: None,
            metadata: BTreeMap::new(),
            control: RunControl::new(),
            sharding: None,
            tool: Tool::library(),
        }
    }

    /// Name the program running the benchmark in the files it writes.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tool = tool;
        self
    }

    pub fn workload(mut self, w: WorkloadSpec) -> Self {
        self.workload = w;
        self
    }

    pub fn load(mut self, l: Load) -> Self {
        self.load = Some(l);
        self
    }

    pub fn requests(mut self, n: u64) -> Self {
        self.requests = Some(n);
        self
    }

    pub fn duration(mut self, d: Duration) -> Self {
        self.duration = Some(d);
        self
    }

    pub fn warmup(mut self, n: u64) -> Self {
        self.warmup = n;
        self
    }

    pub fn slos(mut self, s: SloSet) -> Self {
        self.slos = Some(s);
        self
    }

    pub fn output_dir(mut self, d: impl Into<PathBuf>) -> Self {
        self.output_dir = Some(d.into());
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn timeouts(mut self, t: Timeouts) -> Self {
        self.timeouts = t;
        self
    }

    /// Run on the caller's tokio runtime (multi-threaded).
    pub async fn run(self) -> Result<BenchReport> {
        let p = self.prepare().await?;
        let c = self.target.connect().await?;
        self.run_prepared(p, &c).await
    }

    /// Run on a runtime of its own ([`Benchmark::threads`] workers).
    pub fn run_blocking(self) -> Result<BenchReport> {
        crate::runtime(self.threads)?.block_on(self.run())
    }

    /// Build everything a run needs without sending anything: the workload (downloading a
    /// hub tokenizer into the local cache when it is not there), the load, the run's
    /// configuration. A benchmark that would mean something else than asked is refused here.
    pub(crate) async fn prepare(&self) -> Result<Prepared> {
        crate::hub::ensure_tokenizer(self.workload.tokenizer.as_deref()).await?;
        let mut spec = self.workload.clone();
        spec.seed = self.seed;
        spec.kind = self.target.request_kind();
        let limits = Limits {
            requests: self.requests,
            sessions: self.sessions.count,
            duration: self.duration,
        };
        let built = spec.build(&limits)?;
        let load = self.resolve_load(&built);
        self.check(&built, &load)?;
        let mut notes: Vec<Note> = built.notes.iter().cloned().map(Note::Workload).collect();
        let forced = self.ignore_eos || self.exact_output_length || self.workload.stress;
        let p = self.target.protocol;
        if forced && p.kind() == quetta_engine::RequestKind::Generate && !p.forces_lengths() {
            notes.push(Note::NoExactOutputLength { protocol: p.to_string() });
        }
        let mut cfg = self.run_config();
        let sessions = if built.is_sessions() {
            Some(self.session_config(&built, &load, &mut cfg)?)
        } else {
            if built.has_recorded_times() && !matches!(load, Load::Recorded { .. }) {
                notes.push(Note::TraceOnArrivalProcess);
            }
            if matches!(load, Load::Recorded { .. }) && !self.workload_is_trace() {
                notes.push(Note::DistributionGaps);
            }
            let n = self.requests.or(Some(DEFAULT_REQUESTS).filter(|_| self.duration.is_none()));
            cfg.dispatch = load.for_requests(built.recorded_offsets(n))?;
            cfg.num_requests = match load {
                Load::Recorded { .. } => self.requests,
                _ => n,
            };
            None
        };
        Ok(Prepared { built, cfg, sessions, load, notes })
    }

    fn workload_is_trace(&self) -> bool {
        use quetta_workload::spec::Source;
        match &self.workload.source {
            Source::Trace { .. } => true,
            Source::Profile { name, .. } => quetta_workload::profiles::find(name)
                .is_ok_and(|p| p.source != quetta_workload::profiles::Source::Synthetic),
            _ => false,
        }
    }

    /// The load: as given; else a user profile's load, the workload's own times (a trace,
    /// fitted gaps), 8 sessions at a time, or a closed loop of 16.
    fn resolve_load(&self, built: &Built) -> Load {
        if let Some(l) = &self.load {
            return l.clone();
        }
        if built.is_sessions() {
            return Load::closed(8);
        }
        if let Some(h) = &built.load_hint {
            // checked when the profile file was read
            let arrival = h.arrival_process().unwrap_or(quetta_workload::arrival::Arrival::Poisson);
            match (h.request_rate, h.concurrency) {
                (Some(r), _) => return Load::open(r, arrival),
                (None, Some(c)) => return Load::closed(c),
                _ => {}
            }
        }
        if built.has_recorded_times() {
            return Load::recorded();
        }
        Load::closed(16)
    }

    /// Combinations of workload, load and target that would measure something else.
    fn check(&self, built: &Built, load: &Load) -> Result<()> {
        let p = self.target.protocol;
        if self.workload.inputs_per_request > 1 && !p.takes_batches() {
            return Err(Error::conflict(
                S::InputsPerRequest,
                S::Endpoint,
                format!(
                    "the {p} protocol sends one input a request: it takes no batch of {} ({})",
                    self.workload.inputs_per_request,
                    S::InputsPerRequest
                ),
            ));
        }
        let ids = self.target.protocol_options.kserve_tensors
            == quetta_protocols::kserve::Tensors::TokenIds
            && p == crate::Protocol::KserveGrpc;
        if ids != self.workload.token_ids && p == crate::Protocol::KserveGrpc {
            return Err(Error::conflict(
                S::TokenIds,
                S::Endpoint,
                if ids {
                    "the tensorrt_llm model takes token ids: the workload must send token-id prompts (a tokenizer, and prompts as token ids)"
                } else {
                    "token-id prompts need the tensorrt_llm model's tensors (token ids) over KServe gRPC"
                },
            ));
        }
        if built.is_sessions() && self.requests.is_some_and(|n| n == 0) {
            return Err(Error::invalid(S::NumRequests, "must be at least 1"));
        }
        if !built.is_sessions() && matches!(load, Load::Interleaved { .. }) {
            return Err(Error::missing(
                S::Sessions,
                "interleaved pacing is for multi-turn sessions",
            ));
        }
        if built.is_sessions() && self.sessions.count.is_some_and(|n| n == 0) {
            return Err(Error::invalid(S::Sessions, "the number of sessions must be at least 1"));
        }
        if self.workload.vision.is_some() && !self.target.takes_images() {
            return Err(Error::conflict(S::Modality, S::Backend, format!("vision prompts ({}) need a target that takes images (SageMaker: {} openai; Vertex: {} gemini or openai)", S::Modality, S::SagemakerPayload, S::VertexApi)));
        }
        if self.reset_prefix_cache.is_some()
            && self.target.base_url().is_none()
            && !self.target.is_simulator()
        {
            return Err(Error::conflict(
                S::ResetPrefixCache,
                S::Backend,
                format!(
                    "{} needs a server's own endpoint; managed endpoints have none",
                    S::ResetPrefixCache
                ),
            ));
        }
        let kind = self.target.request_kind();
        if let Some(o) = self.slos.iter().flat_map(|s| &s.0).find(|o| !o.metric.applies_to(kind)) {
            return Err(Error::conflict(S::Slo, S::Endpoint, format!(
                "the objective {o} does not apply: {p} requests ({}) have no first token and no gaps between tokens; of the objectives only e2e applies to them",
                kind.as_str()
            )));
        }
        for p in &self.percentiles {
            if !(*p > 0.0 && *p < 100.0) {
                return Err(Error::invalid(
                    S::Percentiles,
                    format!("{p} is not between 0 and 100"),
                ));
            }
        }
        Ok(())
    }

    fn run_config(&self) -> RunConfig {
        let mut cfg = RunConfig::closed(1, 1);
        cfg.num_requests = self.requests;
        cfg.duration = self.duration;
        cfg.warmup = self.warmup;
        cfg.drain_timeout = self.drain_timeout;
        cfg.seed = self.seed;
        cfg.slos.clone_from(&self.slos);
        cfg.stream = self.stream;
        cfg.ignore_eos = self.ignore_eos;
        cfg.exact_output_length = self.exact_output_length || self.workload.stress;
        cfg.params = Arc::new(RequestParams {
            sampling: self.sampling.clone(),
            extra_body: self.extra_body.clone(),
            extra_headers: self.target.headers.clone(),
        });
        cfg.capture_text = self.capture_text;
        cfg.retries = self.retries;
        cfg.retry_backoff = self.retry_backoff;
        cfg.timeouts = self.timeouts;
        cfg.stop_on_saturation = self.stop_on_saturation;
        if let Some(s) = &self.sharding {
            cfg.shard = s.shard;
        }
        cfg
    }

    fn session_config(
        &self,
        built: &Built,
        load: &Load,
        cfg: &mut RunConfig,
    ) -> Result<SessionConfig> {
        let starts = match built.sessions() {
            Some(s) => s.starts.clone(),
            None => None,
        };
        let distinct = built.sessions().and_then(|s| s.distinct);
        let (pacing, cap) = load.for_sessions(starts)?;
        cfg.num_requests = self.requests;
        Ok(SessionConfig {
            pacing,
            think: self.sessions.think.clone(),
            history: self.sessions.history,
            max_concurrency: self.sessions.max_concurrency.or(cap),
            // Synthesis never runs out: 16 sessions unless told otherwise.
            num_sessions: self
                .sessions
                .count
                .or(if distinct.is_none() && self.duration.is_none() { Some(16) } else { None }),
        })
    }

    /// Run a prepared benchmark on a connected target (a sweep's steps share one).
    pub(crate) async fn run_prepared(&self, p: Prepared, c: &Connected) -> Result<BenchReport> {
        let Prepared { built, mut cfg, sessions, load, mut notes } = p;
        let settings = crate::summary::settings(self, &built, &load, &cfg, sessions.as_ref(), c);
        let target = crate::summary::target(self, c);
        // A shard meets the others first (shard 0 refuses an output directory in use before
        // anyone joins); its records then go to shard 0, not to a directory of its own.
        let joined = match self.sharding.as_ref().and_then(|s| Some((s, s.coordinator.as_ref()?))) {
            Some((s, addr)) => {
                if s.shard.index() == 0 {
                    if let Some(d) = &self.output_dir {
                        RunDir::create(d, self.overwrite)?;
                    }
                }
                let mut j =
                    crate::shard::Joined::join(s, addr, &settings, self.output_dir.as_deref())
                        .await?;
                j.relay_stop(&self.control);
                Some(j)
            }
            None => None,
        };
        let mut shard_run = self.sharding.as_ref().map(|s| {
            let mut r = crate::shard::shard_run(s, &cfg, None);
            if let Some(clock) = joined.as_ref().and_then(crate::shard::Joined::clock_of) {
                r.clock_offset_ms = Some(clock.offset_ns as f64 / 1e6);
                r.clock_rtt_ms = Some(clock.rtt_ns as f64 / 1e6);
            }
            r
        });
        // The directory is made only now: everything before could still refuse the run. A
        // shard that met shard 0 keeps its own copy too (OUT/local/shard-K, a shard directory
        // `merge` reads), so the shards that survive shard 0 still merge exactly.
        let dir = match (&self.output_dir, &joined, &self.sharding) {
            (Some(d), None, _) => Some(RunDir::create(d, self.overwrite)?),
            (Some(d), Some(_), Some(s)) if s.shard.index() != 0 => {
                Some(RunDir::create(crate::shard::local_dir(d, s.shard.index()), self.overwrite)?)
            }
            _ => None,
        };
        let mut manifest = RunManifest::new(
            &self.tool,
            settings.clone(),
            target.clone(),
            self.slos.as_ref().map(ToString::to_string),
            self.percentiles.clone(),
        );
        manifest.shard.clone_from(&shard_run);
        if let Some(d) = &dir {
            d.write_manifest(&manifest)?;
        }
        if let Some(j) = &joined {
            let text =
                serde_json::to_string_pretty(&manifest).map_err(Error::encode("run.json"))?;
            j.file(quetta_report::files::MANIFEST, text).await?;
        }
        if let Some(path) = &self.reset_prefix_cache {
            cfg.before_measured = Some(crate::telemetry::reset_hook(c, path));
            notes.push(Note::PrefixCacheReset { path: path.clone() });
        }
        if let Some(j) = &joined {
            let planned = cfg.shard_planned().ok().flatten();
            cfg.before_measured = Some(j.hook(cfg.before_measured.take(), planned));
        }
        let telemetry = crate::telemetry::Running::start(&self.telemetry, c, dir.as_ref());
        let work = match built.into_work() {
            BuiltWork::Sessions(s) => Work::Sessions {
                source: s.source,
                config: sessions
                    .ok_or(Error::Internal("a sessions workload without session settings"))?,
            },
            BuiltWork::Requests(w) => Work::Requests(w),
            _ => return Err(Error::Internal("an unknown kind of workload")),
        };
        let mut runner = Runner::new(c.engine.clone(), cfg).control(self.control.clone());
        let mut sinks: Vec<Box<dyn quetta_loadgen::RecordSink>> = Vec::new();
        if let Some(d) = &dir {
            sinks.push(Box::new(JsonlSink::new(d.create_records()?)));
        }
        if let Some(sink) = match &joined {
            Some(j) => j.sink().await,
            None => None,
        } {
            sinks.push(sink);
        }
        // one sink goes in as it is; a shard's local copy and its stream to shard 0 share a tee
        runner = match sinks.len() {
            0 => runner,
            1 => runner.sink(sinks.remove(0)),
            _ => runner.sink(Box::new(crate::shard::Tee(sinks))),
        };
        let outcome: RunOutcome = runner.run(work).await?;
        let (server, gpu) = telemetry.finish().await;
        notes.extend(c.notes.iter().cloned());
        if let Some(s) = self.target.sim_config().filter(|s| s.server_model.is_some()) {
            let m = s.server_model.as_ref().expect("filtered");
            notes.push(Note::ServedByTwin { server: m.server.clone(), model: m.model.clone() });
        }
        let mut summary =
            crate::summary::assemble(self, &outcome, settings, target, notes, server, gpu);
        if let Some(w) = self.target.sim_config().and_then(crate::twin::counting_warning) {
            summary.notes.insert(0, w);
        }
        if let Some(r) = shard_run.as_mut() {
            crate::shard::record_start(
                r,
                outcome.started_at,
                joined.as_ref().and_then(crate::shard::Joined::started),
            );
        }
        summary.shard = shard_run;
        if let Some(why) = joined.as_ref().and_then(crate::shard::Joined::stopped_by) {
            summary.notes.insert(0, quetta_report::Note::StoppedByShard0(why));
            summary.partial_reason = Some(quetta_report::PartialReason::StoppedByShard0);
        }
        let series = outcome.series;
        if let (Some(d), Some(st)) = (&dir, &summary.steady_state) {
            summary.steady = d.steady(st, self.slos.as_ref(), &self.percentiles)?;
        }
        if let Some(d) = &dir {
            d.write_series(&series)?;
            d.write_summary(&summary)?;
        }
        if let Some(j) = joined {
            let mut text = String::new();
            for s in &series {
                text.push_str(
                    &serde_json::to_string(s).map_err(Error::encode("timeseries.jsonl"))?,
                );
                text.push('\n');
            }
            let grace = self.drain_timeout + Duration::from_secs(60);
            if let Some(merged) = j.finish(&summary, text, grace, true).await? {
                let out = self.output_dir.clone();
                let series = match &out {
                    Some(d) => RunDir::open(d)?.read_series()?,
                    None => Vec::new(),
                };
                return Ok(BenchReport { summary: merged, series, dir: out });
            }
            return Ok(BenchReport { summary, series, dir: dir.map(|d| d.path().to_path_buf()) });
        }
        Ok(BenchReport { summary, series, dir: dir.map(|d| d.path().to_path_buf()) })
    }
}

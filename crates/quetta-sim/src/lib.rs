//! `quetta-sim`: an OpenAI-compatible server simulator.
//!
//! It serves `/v1/chat/completions`, `/v1/completions` (streaming and not), `/v1/models`,
//! `/health` and Prometheus `/metrics` with vLLM-style names. Per request it generates an
//! output length (`max_tokens`, or a draw from [`OutputLen`] that honours `ignore_eos` and
//! `min_tokens`), waits a configurable time to first token (a base plus a per-prompt-token
//! cost) and then sends chunks on an absolute schedule of inter-token latencies (fixed or
//! jittered; lateness is made up for, but no two chunks of a stream leave closer than half a
//! gap). Each request leaves a [`SimRecord`] with the instant the request arrived, the
//! instant its headers were handed to hyper, the instant each chunk was handed to hyper and
//! the instant it ended: the ground truth that timing tests compare the client against.
//!
//! Prompt tokens are counted as whitespace-separated words (or the length of a token-id
//! prompt): a stand-in tokenizer, documented in docs/ARCHITECTURE.md.
//!
//! A prefix cache ([`SimConfig::prefix_cache_blocks`] blocks of
//! [`SimConfig::prefix_block_tokens`] tokens, LRU) keeps the blocks of every prompt and of
//! every prompt followed by its reply, so a session's next turn finds its history cached.
//! Cached tokens cost no prefill time and are reported as
//! `usage.prompt_tokens_details.cached_tokens`; `POST /reset_prefix_cache` (vLLM) or
//! `POST /flush_cache` (SGLang) empties the cache.
//!
//! The simulator runs on its own thread and tokio runtime, so it does not share a
//! scheduler with the client under test: [`Simulator::start`].

mod answer;
mod audio;
pub mod cache;
mod dialect;
pub mod engine;
pub mod faults;
mod grpc;
mod metrics;
pub mod model;
mod pooling;
mod precise;
#[cfg(feature = "fakes")]
pub mod providers;
mod server;
mod stream;
mod twin;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// How many tokens a request generates when it does not ask to ignore EOS.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum OutputLen {
    /// Exactly `max_tokens` (or the default when the request has none).
    MaxTokens,
    /// A fixed length (still capped by `max_tokens`).
    Fixed(u32),
    /// Uniform in `[min, max]`.
    Uniform { min: u32, max: u32 },
    /// Normal with the given mean and standard deviation, at least 1.
    Normal { mean: f64, stddev: f64 },
}

/// Simulator settings.
///
/// ```
/// use std::time::Duration;
/// let cfg = quetta_sim::SimConfig { ttft: Duration::from_millis(50), max_running: Some(4), ..Default::default() };
/// let sim = quetta_sim::Simulator::start(cfg).unwrap();
/// assert!(sim.base_url().starts_with("http://127.0.0.1:"));
/// ```
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Address to bind; port 0 picks an ephemeral port.
    pub bind: SocketAddr,
    /// Model name served by `/v1/models` (any name is accepted in requests).
    pub model: String,
    /// Base time from request arrival to the first token.
    pub ttft: Duration,
    /// Extra time to first token per prompt token (prefill cost).
    pub prefill_per_token: Duration,
    /// Inter-token latency (between chunks).
    pub itl: Duration,
    /// Uniform jitter added to each inter-token gap, in `[-jitter, +jitter]`.
    pub itl_jitter: Duration,
    /// Tokens carried by each chunk (the last chunk may carry fewer).
    pub tokens_per_chunk: u32,
    pub output_len: OutputLen,
    /// `max_tokens` when a request does not give one.
    pub default_max_tokens: u32,
    /// Seed of the output-length and jitter draws and of the generated words.
    pub seed: u64,
    /// Append one JSON line per finished request to this file.
    pub record: Option<PathBuf>,
    /// Keep records in memory for [`Simulator::records`] (off by default: a long run's
    /// records would grow without bound; tests turn it on).
    pub keep_records: bool,
    /// Runtime worker threads of the simulator (its own runtime).
    pub worker_threads: usize,
    /// Scheduling niceness of the simulator's threads (Linux: 0 to 19; 0 leaves them as
    /// they are). Sharing a machine with the client under test, a niced simulator yields the
    /// CPU to the client, as a server on its own machine would not take the client's cores;
    /// it then runs late instead, which its records show (their stamps are its real sends).
    /// Elsewhere than Linux, where nice is per process, it is ignored.
    pub nice: i32,
    /// Faults to inject; the first rule that matches a request applies.
    pub faults: Vec<faults::FaultRule>,
    /// Requests the model runs at once (its batch limit); more wait in a FIFO queue, and
    /// their TTFT counts from arrival. `None`: no limit. With a limit K and a service time S
    /// per request the server saturates at K / S requests per second.
    pub max_running: Option<usize>,
    /// Prefix-cache capacity in blocks (0: no prefix cache); the default, 8,192 blocks of 16
    /// tokens, holds 131,072 tokens (a modest GPU's KV cache) in about 0.6 MiB.
    pub prefix_cache_blocks: usize,
    /// Tokens per prefix-cache block.
    pub prefix_block_tokens: u32,
    /// Prompt tokens an image part counts for (as a vision model's image encoder would).
    pub image_tokens: u32,
    /// Headers added to every generation response (to play a proxy, e.g. LiteLLM's
    /// `x-litellm-*`).
    pub response_headers: Vec<(String, String)>,
    /// Serve as the twin of a calibrated server: every token at the instant the
    /// iteration-level engine says (`ttft`, `prefill_per_token`, `itl`, `itl_jitter`,
    /// `tokens_per_chunk` and `max_running` are then the model's, not these).
    pub server_model: Option<model::ServerModel>,
    /// How prompt text is counted in tokens (default: whitespace-separated words).
    pub token_counter: Option<TokenCounter>,
    /// Numbers per embedding (and per pooled output) the simulator answers with.
    pub embedding_dim: usize,
    /// A cold start: for a while after the first generation request arrives, every TTFT and
    /// gap between tokens is longer (not for the twin, whose model has its own times).
    pub warm_up: Option<WarmUp>,
    /// The API key every generation request must carry, where its protocol carries it
    /// (`Authorization: Bearer`; Anthropic's `x-api-key`); `None` takes any request.
    pub api_key: Option<String>,
}

/// A server's cold start: for `lasts` after the first generation request arrives, its TTFT
/// and gaps between tokens are `slowdown` times their configured length (kernels compiling,
/// caches filling). `SECONDS:FACTOR` in text, e.g. `6:4`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmUp {
    pub lasts: Duration,
    pub slowdown: f64,
}

impl std::str::FromStr for WarmUp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected SECONDS:FACTOR, e.g. 6:4 (4 times slower for 6 s)");
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        let secs: f64 = a.trim().parse().map_err(|_| bad())?;
        let slowdown: f64 = b.trim().parse().map_err(|_| bad())?;
        if !(secs.is_finite() && secs > 0.0 && slowdown.is_finite() && slowdown >= 1.0) {
            return Err(format!("{s:?}: the seconds must be above 0 and the factor at least 1"));
        }
        Ok(Self { lasts: Duration::from_secs_f64(secs), slowdown })
    }
}

/// A prompt-text token counter (a real tokenizer, given by the embedder).
#[derive(Clone)]
pub struct TokenCounter(pub Arc<dyn Fn(&str) -> u64 + Send + Sync>);

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCounter(..)")
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            model: "quetta-sim".into(),
            ttft: Duration::from_millis(20),
            prefill_per_token: Duration::ZERO,
            itl: Duration::from_millis(5),
            itl_jitter: Duration::ZERO,
            tokens_per_chunk: 1,
            output_len: OutputLen::MaxTokens,
            default_max_tokens: 128,
            seed: 0,
            record: None,
            keep_records: false,
            worker_threads: 1,
            nice: 0,
            faults: Vec::new(),
            max_running: None,
            prefix_cache_blocks: 8_192,
            prefix_block_tokens: 16,
            image_tokens: 256,
            response_headers: Vec::new(),
            server_model: None,
            token_counter: None,
            embedding_dim: 384,
            warm_up: None,
            api_key: None,
        }
    }
}

/// Pending connections the listener queues (std's `bind` queues 128). A benchmark opens
/// hundreds of connections at once; with a short queue the kernel drops the overflow and the
/// client resends after its 200 ms minimum retransmission timeout, a delay that is the queue's
/// and no model's. Production servers queue more (uvicorn 2,048, nginx 511); Linux caps the
/// value at `net.core.somaxconn` (4,096 by default).
const LISTEN_BACKLOG: i32 = 4_096;

fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    #[cfg(unix)]
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(LISTEN_BACKLOG)?;
    Ok(s.into())
}

/// Lower the calling thread's priority to `nice` (Linux keeps a nice value per thread).
/// Best effort: an error (a sandbox that forbids it) leaves the thread as it was.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        let _ = rustix::process::setpriority_process(None, nice.min(19));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// The simulator's own account of one request. Instants are on the process's monotonic
/// clock; the JSONL form gives nanoseconds since [`Simulator::epoch`].
#[derive(Debug, Clone)]
pub struct SimRecord {
    /// Arrival order at the simulator (0-based).
    pub seq: u64,
    /// The client's request id (`x-quetta-request-id`), when sent.
    pub request_id: Option<u64>,
    /// The session id (`x-session-id` header, else the body's `user`), when sent.
    pub session_id: Option<String>,
    pub endpoint: String,
    pub stream: bool,
    pub status: u16,
    pub prompt_tokens: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    /// The request's last byte arrived: over HTTP/1.1 the kernel's receive timestamp of the
    /// read that completed it (on Linux; elsewhere when that read returned), over HTTP/2 when
    /// its headers were handed to the simulator. TTFT is scheduled from here.
    pub arrival: Instant,
    /// The response headers were handed to hyper.
    pub headers_sent: Instant,
    /// Each token-bearing chunk was handed to hyper (streaming only).
    pub chunks: Vec<Instant>,
    /// Tokens in each token-bearing chunk.
    pub chunk_tokens: Vec<u32>,
    /// The last frame was handed to hyper.
    pub end: Instant,
    /// The full generated text.
    pub text: String,
    /// The request's body was not a valid request (400) or was cut off.
    pub error: Option<String>,
}

#[derive(Serialize)]
struct RecordLine<'a> {
    seq: u64,
    request_id: Option<u64>,
    session_id: Option<&'a str>,
    endpoint: &'a str,
    stream: bool,
    status: u16,
    prompt_tokens: u64,
    cached_tokens: u64,
    completion_tokens: u64,
    arrival_ns: u64,
    headers_ns: u64,
    chunk_ns: Vec<u64>,
    end_ns: u64,
    epoch_unix_ns: u128,
    error: Option<&'a str>,
}

pub(crate) struct Shared {
    pub(crate) cfg: SimConfig,
    pub(crate) epoch: Instant,
    pub(crate) epoch_unix_ns: u128,
    pub(crate) seq: std::sync::atomic::AtomicU64,
    pub(crate) records: Mutex<Vec<SimRecord>>,
    pub(crate) writer: Option<Mutex<BufWriter<File>>>,
    pub(crate) metrics: metrics::Metrics,
    pub(crate) cache: Mutex<cache::PrefixCache>,
    pub(crate) slots: Option<Arc<tokio::sync::Semaphore>>,
    /// The live twin's engine, when serving a server model.
    pub(crate) twin: Option<tokio::sync::mpsc::UnboundedSender<twin::Submit>>,
    /// Stored Responses (`store: true`): each one's conversation with its reply, for
    /// `previous_response_id`.
    pub(crate) responses: Mutex<std::collections::HashMap<String, Vec<serde_json::Value>>>,
    /// When the first generation request arrived (the warm-up counts from it).
    pub(crate) first_arrival: std::sync::OnceLock<Instant>,
}

impl Shared {
    /// How many times slower than configured the simulator is at `t` (its warm-up).
    pub(crate) fn slowdown(&self, t: Instant) -> f64 {
        match (self.cfg.warm_up, self.first_arrival.get()) {
            (Some(w), Some(&first)) if t.saturating_duration_since(first) < w.lasts => w.slowdown,
            _ => 1.0,
        }
    }

    pub(crate) fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    pub(crate) fn finish(&self, rec: SimRecord) {
        self.metrics.on_finish(&rec);
        if let Some(w) = &self.writer {
            let line = RecordLine {
                seq: rec.seq,
                request_id: rec.request_id,
                session_id: rec.session_id.as_deref(),
                endpoint: &rec.endpoint,
                stream: rec.stream,
                status: rec.status,
                prompt_tokens: rec.prompt_tokens,
                cached_tokens: rec.cached_tokens,
                completion_tokens: rec.completion_tokens,
                arrival_ns: self.ns(rec.arrival),
                headers_ns: self.ns(rec.headers_sent),
                chunk_ns: rec.chunks.iter().map(|&c| self.ns(c)).collect(),
                end_ns: self.ns(rec.end),
                epoch_unix_ns: self.epoch_unix_ns,
                error: rec.error.as_deref(),
            };
            if let Ok(mut s) = serde_json::to_vec(&line) {
                s.push(b'\n');
                let mut w = w.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let _ = w.write_all(&s).and_then(|()| w.flush());
            }
        }
        if self.cfg.keep_records {
            self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(rec);
        }
    }
}

/// The simulator could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    #[error("cannot bind {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot open record file {path}: {source}")]
    Record { path: PathBuf, source: std::io::Error },
    #[error("cannot start the simulator runtime: {0}")]
    Runtime(std::io::Error),
}

/// A running simulator. Stops when dropped.
#[derive(Debug)]
pub struct Simulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

impl Simulator {
    /// Bind and start serving on a thread of its own.
    pub fn start(cfg: SimConfig) -> Result<Self, SimError> {
        quetta_net::prepare();
        let writer = match &cfg.record {
            Some(p) => Some(Mutex::new(BufWriter::new(
                File::options()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|source| SimError::Record { path: p.clone(), source })?,
            ))),
            None => None,
        };
        let std_listener =
            listen(cfg.bind).map_err(|source| SimError::Bind { addr: cfg.bind, source })?;
        std_listener.set_nonblocking(true).map_err(SimError::Runtime)?;
        let addr = std_listener.local_addr().map_err(SimError::Runtime)?;
        let nice = cfg.nice;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.worker_threads.max(1))
            .thread_name("quetta-sim")
            .on_thread_start(move || lower_priority(nice))
            .enable_all()
            .build()
            .map_err(SimError::Runtime)?;
        let (twin_tx, twin_rx) = match &cfg.server_model {
            Some(_) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let model = cfg.server_model.clone();
        let mut cfg = cfg;
        if let Some(m) = &model {
            cfg.prefix_block_tokens = m.block_tokens.max(1);
            cfg.prefix_cache_blocks = cache::twin_blocks(m);
        }
        let shared = Arc::new(Shared {
            twin: twin_tx,
            responses: Mutex::default(),
            first_arrival: std::sync::OnceLock::new(),
            epoch: Instant::now(),
            epoch_unix_ns: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
            seq: std::sync::atomic::AtomicU64::new(0),
            records: Mutex::new(Vec::new()),
            writer,
            metrics: metrics::Metrics::default(),
            slots: cfg
                .max_running
                .filter(|_| model.is_none())
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1)))),
            cache: Mutex::new(cache::PrefixCache::new(
                cfg.prefix_block_tokens,
                cfg.prefix_cache_blocks,
            )),
            cfg,
        });
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sh = shared.clone();
        let listener = {
            let _in_runtime = rt.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(SimError::Runtime)?
        };
        let thread = std::thread::Builder::new()
            .name("quetta-sim-main".into())
            .spawn(move || {
                lower_priority(nice);
                rt.block_on(async move {
                    if let (Some(m), Some(rx)) = (model, twin_rx) {
                        tokio::spawn(twin::drive(m, sh.epoch, rx));
                    }
                    server::serve(listener, sh, rx).await;
                });
                rt.shutdown_timeout(Duration::from_millis(100));
            })
            .map_err(SimError::Runtime)?;
        Ok(Self { addr, shared, shutdown: Some(tx), thread: Some(thread) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The instant the JSONL offsets count from.
    pub fn epoch(&self) -> Instant {
        self.shared.epoch
    }

    /// A copy of the records of finished requests, in finishing order.
    pub fn records(&self) -> Vec<SimRecord> {
        self.shared.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The simulator's configuration.
    pub fn config(&self) -> &SimConfig {
        &self.shared.cfg
    }

    /// Stop accepting, close connections and join the thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// splitmix64: a tiny deterministic generator for jitter, lengths and words.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(crate) fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The words the simulator generates, one per token.
pub(crate) const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "light", "river",
    "stone", "model", "token", "cache", "queue", "batch", "kernel", "memory", "tensor", "prompt",
    "reply", "server",
];

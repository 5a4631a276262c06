//! `quetta-sim`: an OpenAI-compatible LLM server simulator with exact timing records.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use quetta_sim::model::WhatIf;
use quetta_sim::{OutputLen, SimConfig, Simulator};

/// `quetta-bench run`'s flags, shared with `quetta-sim predict`.
use quetta_cli as flags;

/// Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics with
/// configurable time to first token and inter-token latency.
#[derive(Debug, Parser)]
#[command(name = "quetta-sim", version)]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Base time to first token, in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    ttft_ms: f64,
    /// Extra time to first token per prompt token, in microseconds (prefill cost).
    #[arg(long, default_value_t = 0.0)]
    prefill_us_per_token: f64,
    /// Inter-token latency, in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    itl_ms: f64,
    /// Uniform jitter on each inter-token gap, +/- this many milliseconds.
    #[arg(long, default_value_t = 0.0)]
    itl_jitter_ms: f64,
    /// Tokens per streamed chunk.
    #[arg(long, default_value_t = 1)]
    tokens_per_chunk: u32,
    /// Output length when a request does not set ignore_eos: `max` (= max_tokens), `N`,
    /// `uniform:MIN-MAX` or `normal:MEAN,STDDEV`.
    #[arg(long, default_value = "max")]
    output_len: String,
    /// max_tokens for requests that give none.
    #[arg(long, default_value_t = 128)]
    default_max_tokens: u32,
    /// Model name served by /v1/models.
    #[arg(long, default_value = "quetta-sim")]
    model: String,
    /// Seed of lengths, jitter and generated words.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Append one JSON line per finished request (server-side timing ground truth).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Worker threads of the simulator's runtime.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Niceness of the simulator's threads (Linux, 0 to 19): sharing a machine with the client
    /// under test, a niced simulator yields the CPU to it (its records show its real sends).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=19))]
    nice: i32,
    /// Inject a fault (repeatable; the first matching rule applies): KIND, KIND@N (every Nth
    /// request) or KIND:P (probability P). Kinds: http429, http500, http503,
    /// reset-before-headers, reset-after-headers, reset-mid-stream, stall=SECONDS, linger=SECONDS, slow-drip,
    /// bad-json, invalid-utf8, huge-event, no-done, no-usage, error-event.
    #[arg(long = "fault")]
    faults: Vec<quetta_sim::faults::FaultRule>,
    /// A cold start, SECONDS:FACTOR: TTFT and gaps between tokens FACTOR times longer for the
    /// first SECONDS after the first generation request (6:4).
    #[arg(long)]
    warm_up: Option<quetta_sim::WarmUp>,
    /// Requests the model runs at once; more wait in a FIFO queue (default: no limit).
    #[arg(long)]
    max_running: Option<usize>,
    /// Prefix-cache capacity in blocks (0 turns the prefix cache off). Cached prompt tokens
    /// cost no prefill time and are reported in usage.prompt_tokens_details.cached_tokens.
    #[arg(long, default_value_t = 8_192)]
    prefix_cache_blocks: usize,
    /// Tokens per prefix-cache block.
    #[arg(long, default_value_t = 16)]
    prefix_block_tokens: u32,
    /// Prompt tokens each image part counts for.
    #[arg(long, default_value_t = 256)]
    image_tokens: u32,
    /// Add this header to every generation response, NAME:VALUE (repeatable; e.g. to play a
    /// LiteLLM proxy).
    #[arg(long = "response-header", value_parser = header_arg)]
    response_headers: Vec<(String, String)>,
    /// Refuse generation requests without this key, where each protocol carries it
    /// (Authorization: Bearer; Anthropic's x-api-key).
    #[arg(long, env = "QUETTA_SIM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Numbers in each embedding (and pooled output) it answers with.
    #[arg(long, default_value_t = 384)]
    embedding_dim: usize,
    #[command(flatten)]
    twin: TwinArgs,
    /// The twin counts prompt tokens with this tokenizer (a tokenizer.json or a cached
    /// Hugging Face id) instead of whitespace-separated words.
    #[arg(long, requires = "server_model")]
    tokenizer: Option<String>,
}

/// The twin of a calibrated server (`quetta-sim predict` takes --tokenizer from the run
/// flags, where it also builds exact prompts).
#[derive(Debug, Clone, clap::Args)]
struct TwinArgs {
    /// Serve as the twin of this server model (`quetta-probe calibrate`): every token when
    /// the iteration-level engine says; the timing flags above then do not apply.
    #[arg(long)]
    server_model: Option<PathBuf>,
    /// What-if: sequences run at once instead of the model's.
    #[arg(long, requires = "server_model")]
    max_seqs: Option<u32>,
    /// What-if: KV-cache tokens instead of the model's.
    #[arg(long, requires = "server_model")]
    kv_tokens: Option<u64>,
    /// What-if: steps this many times faster (2, 2x, 0.5x).
    #[arg(long, requires = "server_model", value_parser = flags::speed_arg)]
    speed: Option<f64>,
}

impl TwinArgs {
    fn load(&self, tokenizer: Option<&str>) -> Result<Option<quetta::Twin>> {
        let Some(p) = &self.server_model else { return Ok(None) };
        let w = WhatIf { max_seqs: self.max_seqs, kv_tokens: self.kv_tokens, speed: self.speed };
        Ok(Some(quetta::Twin::load(p, w, tokenizer)?))
    }
}

/// `quetta-sim predict`: a `quetta-bench run` on the twin's virtual clock.
#[derive(Debug, Parser)]
#[command(name = "quetta-sim predict", version)]
struct PredictArgs {
    /// Every `quetta-bench run` flag; the twin's are --server-model (--sim-model),
    /// --max-seqs, --kv-tokens and --speed.
    #[command(flatten)]
    run: flags::RunArgs,
}

fn predict(args: impl Iterator<Item = std::ffi::OsString>) -> Result<std::process::ExitCode> {
    let a = PredictArgs::parse_from(args);
    if a.run.twin.sim_model.is_none() {
        bail!("quetta-sim predict needs --server-model FILE");
    }
    if a.run.target.base_url.is_some() {
        bail!("quetta-sim predict runs on the twin: drop --base-url");
    }
    let b = a.run.to_benchmark()?;
    let model = b.target.sim_config().and_then(|c| c.server_model.clone());
    let r = b.predict_blocking(&model.context("the twin's model")?)?;
    let s = &r.summary;
    let m = &s.metrics;
    let p = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
    println!(
        "predicted {} requests ({} failed) in {:.1} s of virtual time",
        m.completed, m.failed, m.duration_s
    );
    println!(
        "TTFT p50 {} p90 {} ms | TPOT p50 {} ms | E2E p50 {} ms | output {:.1} tok/s",
        p(m.ttft_ms.p50),
        p(m.ttft_ms.p90),
        p(m.tpot_ms.p50),
        p(m.e2e_ms.p50),
        m.output_token_throughput
    );
    if let Some(d) = &r.dir {
        println!(
            "run directory {} (quetta-bench report {} for the report)",
            d.display(),
            d.display()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `quetta-sim aws`: the strict fakes of Amazon SageMaker's and Bedrock's runtimes, which
/// check every request's SigV4 signature against the key in AWS_ACCESS_KEY_ID and
/// AWS_SECRET_ACCESS_KEY.
#[derive(Debug, Parser)]
#[command(name = "quetta-sim aws", version)]
struct AwsArgs {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The region requests must be signed for.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Time to first token, in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    ttft_ms: f64,
    /// Inter-token latency, in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    itl_ms: f64,
    /// Throttle every Nth request (429 ThrottlingException), as an account over its quota.
    #[arg(long)]
    throttle_every: Option<u64>,
}

fn aws(args: impl Iterator<Item = std::ffi::OsString>) -> Result<std::process::ExitCode> {
    let a = AwsArgs::parse_from(args);
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) else {
        bail!("quetta-sim aws checks signatures against AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both (any test values)");
    };
    let cfg = quetta_sim::providers::FakeConfig {
        ttft: ms(a.ttft_ms, "ttft-ms")?,
        itl: ms(a.itl_ms, "itl-ms")?,
        aws: Some(quetta_sim::providers::AwsKey {
            access_key_id: id,
            secret_access_key: secret,
            region: a.region.clone(),
        }),
        throttle_every: a.throttle_every,
        ..Default::default()
    };
    let f = quetta_sim::providers::ProviderFake::start_on(cfg, SocketAddr::new(a.host, a.port))
        .context("starting the AWS fakes")?;
    println!(
        "quetta-sim aws listening on {} (SageMaker /endpoints/NAME/…, Bedrock /model/ID/…; region {}) (Ctrl-C to stop)",
        f.base_url(),
        a.region
    );
    loop {
        std::thread::park();
    }
}

fn header_arg(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected NAME:VALUE"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

fn ms(v: f64, flag: &str) -> Result<Duration> {
    if !v.is_finite() || v < 0.0 {
        bail!("--{flag} must be a non-negative number of milliseconds, got {v}");
    }
    Ok(Duration::from_secs_f64(v / 1e3))
}

fn parse_output_len(s: &str) -> Result<OutputLen> {
    let bad =
        || format!("--output-len {s:?}: expected max, N, uniform:MIN-MAX or normal:MEAN,STDDEV");
    if s == "max" {
        return Ok(OutputLen::MaxTokens);
    }
    if let Some(r) = s.strip_prefix("uniform:") {
        let (a, b) = r.split_once('-').with_context(bad)?;
        let (min, max) = (a.parse().with_context(bad)?, b.parse().with_context(bad)?);
        if min > max {
            bail!("{}: MIN is above MAX", bad());
        }
        return Ok(OutputLen::Uniform { min, max });
    }
    if let Some(r) = s.strip_prefix("normal:") {
        let (a, b) = r.split_once(',').with_context(bad)?;
        return Ok(OutputLen::Normal {
            mean: a.parse().with_context(bad)?,
            stddev: b.parse().with_context(bad)?,
        });
    }
    Ok(OutputLen::Fixed(s.parse().with_context(bad)?))
}

fn main() -> Result<std::process::ExitCode> {
    quetta::engine::setting::name_settings(quetta_cli::flag_name);
    let mut argv = std::env::args_os();
    let sub = std::env::args_os().nth(1);
    if sub.as_ref().is_some_and(|a| a == "predict" || a == "aws") {
        let prog = argv.next().unwrap_or_default();
        argv.next();
        let args = std::iter::once(prog).chain(argv);
        return if sub.is_some_and(|a| a == "aws") { aws(args) } else { predict(args) };
    }
    let a = Args::parse();
    let twin = a.twin.load(a.tokenizer.as_deref())?;
    if let Some(w) = twin.as_ref().and_then(quetta::Twin::counting_warning) {
        eprintln!("{w}");
    }
    let cfg = SimConfig {
        bind: SocketAddr::new(a.host, a.port),
        model: a.model,
        ttft: ms(a.ttft_ms, "ttft-ms")?,
        prefill_per_token: ms(a.prefill_us_per_token / 1e3, "prefill-us-per-token")?,
        itl: ms(a.itl_ms, "itl-ms")?,
        itl_jitter: ms(a.itl_jitter_ms, "itl-jitter-ms")?,
        tokens_per_chunk: a.tokens_per_chunk.max(1),
        output_len: parse_output_len(&a.output_len)?,
        default_max_tokens: a.default_max_tokens,
        seed: a.seed,
        record: a.record,
        keep_records: false,
        worker_threads: a.threads,
        nice: a.nice,
        faults: a.faults,
        warm_up: a.warm_up,
        max_running: a.max_running,
        prefix_cache_blocks: a.prefix_cache_blocks,
        prefix_block_tokens: a.prefix_block_tokens.max(1),
        image_tokens: a.image_tokens,
        response_headers: a.response_headers,
        server_model: twin.as_ref().map(|t| t.model.clone()),
        token_counter: twin.and_then(|t| t.token_counter),
        api_key: a.api_key,
        embedding_dim: a.embedding_dim,
    };
    let sim = Simulator::start(cfg).context("starting the simulator")?;
    match &sim.config().server_model {
        Some(m) => println!(
            "quetta-sim listening on {} as the twin of {} ({}; {} sequences, {} KV tokens) (Ctrl-C to stop)",
            sim.base_url(),
            m.server,
            m.model,
            m.max_seqs,
            m.kv_tokens
        ),
        None => println!("quetta-sim listening on {} (Ctrl-C to stop)", sim.base_url()),
    }
    // Records are flushed line by line, so ending on SIGINT/SIGTERM's default action loses
    // nothing; the main thread only has to stay alive.
    loop {
        std::thread::park();
    }
}

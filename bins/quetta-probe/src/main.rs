//! `quetta-probe`: live-server probes, GPU telemetry and CUDA kernel summaries.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use quetta_probe::calibrate;
use quetta_probe::probes::{self, ProbeContext, ProbeOutput};

#[derive(Parser)]
#[command(
    name = "quetta-probe",
    version,
    about = "Where the time goes: live-server probes, GPU telemetry and kernel summaries"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct Common {
    /// Server root URL (http:// or https://).
    #[arg(long)]
    base_url: String,
    /// OpenAI API to call: chat or completions.
    #[arg(long, default_value = "chat")]
    endpoint: String,
    /// Model name (default: the first model listed by /v1/models).
    #[arg(long)]
    model: Option<String>,
    /// API key, sent as `Authorization: Bearer` (never written anywhere).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The server's Prometheus endpoint (default: BASE_URL/metrics).
    #[arg(long)]
    metrics_url: Option<String>,
    /// Directory for the CSV and meta.json.
    #[arg(long, default_value = "quetta-probe-results")]
    output_dir: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// TTFT against new and cached prompt tokens, fitted as floor + a·new + b·cached.
    Ttft {
        #[command(flatten)]
        c: Common,
        /// New (uncached) prompt tokens, comma-separated.
        #[arg(long, default_value = "64,256,1024", value_delimiter = ',')]
        new_tokens: Vec<u32>,
        /// Cached prefix tokens, comma-separated.
        #[arg(long, default_value = "0,512,2048", value_delimiter = ',')]
        cached_tokens: Vec<u32>,
        #[arg(long, default_value_t = 3)]
        repeats: u32,
    },
    /// Steady-state inter-token latency over batch size × context length.
    DecodeGrid {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value = "1,4,16", value_delimiter = ',')]
        batches: Vec<usize>,
        #[arg(long, default_value = "128,1024", value_delimiter = ',')]
        contexts: Vec<u32>,
        #[arg(long, default_value_t = 64)]
        output_tokens: u32,
    },
    /// N identical cached requests at once: client TTFT against the server's own.
    Herd {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value_t = 32)]
        n: usize,
        #[arg(long, default_value_t = 512)]
        prompt_tokens: u32,
        #[arg(long, default_value_t = 16)]
        output_tokens: u32,
    },
    /// Where prefix-cache hits turn into misses: the usable KV pool.
    KvCapacity {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value_t = 64)]
        prompts: u32,
        #[arg(long, default_value_t = 1024)]
        prompt_tokens: u32,
    },
    /// The server's queue/prefill/decode/e2e metrics beside the client's view, at concurrency 1.
    StageSplit {
        #[command(flatten)]
        c: Common,
        #[arg(long, default_value_t = 20)]
        n: u32,
        #[arg(long, default_value_t = 256)]
        prompt_tokens: u32,
        #[arg(long, default_value_t = 64)]
        output_tokens: u32,
    },
    /// Fit a model of the server for a twin (`quetta-sim --server-model`, `quetta-sim predict`).
    Calibrate {
        #[command(flatten)]
        c: Common,
        /// Tokens one sequence may hold (default: what the server reports in /props or
        /// /v1/models).
        #[arg(long)]
        max_context: Option<u32>,
        /// Prompt lengths (words) of the prefill probe.
        #[arg(long, default_value = "32,256,512,1024", value_delimiter = ',')]
        prefill_lengths: Vec<u32>,
        /// Context lengths (words) of the decode probe (the longest finds a knee in the
        /// context cost: keep it near the longest prompts the twin will see).
        #[arg(long, default_value = "32,256,1024", value_delimiter = ',')]
        decode_contexts: Vec<u32>,
        /// Requests of each prompt length, and rounds of the decode grid at least; the fits
        /// take each length's and each grid point's median (3: one slow request among them
        /// does not pull it).
        #[arg(long, default_value_t = 2)]
        repeats: u32,
        /// Tokens each stream of the decode probe generates.
        #[arg(long, default_value_t = 32)]
        decode_tokens: u32,
        /// Requests sent at once to count the server's batch slots.
        #[arg(long, default_value_t = 16)]
        seqs_probe: u32,
        /// Tokens per prefix-cache block of the server (vLLM 16; llama.cpp reuses any
        /// prefix: 1).
        #[arg(long, default_value_t = 16)]
        block_tokens: u32,
        /// Tokens one step may carry (llama.cpp n_batch, vLLM max_num_batched_tokens).
        #[arg(long, default_value_t = 2048)]
        max_batch_tokens: u32,
        /// Where the model goes.
        #[arg(short = 'o', long, default_value = "server-model.json")]
        output: PathBuf,
    },
    /// A calibrated model against its server now: a few lone requests, each against the
    /// model's prediction, and the model rescaled to the server's present prefill and decode
    /// speed (`-o`).
    Recheck {
        #[command(flatten)]
        c: Common,
        /// The model to check (`quetta-probe calibrate -o FILE`).
        #[arg(long)]
        server_model: PathBuf,
        /// Requests, one after another.
        #[arg(long, default_value_t = 6)]
        requests: u32,
        /// Prompt lengths (words), taken in turn.
        #[arg(long, default_value = "128,512", value_delimiter = ',')]
        prompt_words: Vec<u32>,
        /// Tokens each request generates (default: as many as each stream of the
        /// calibration's decode probe, else 32).
        #[arg(long)]
        decode_tokens: Option<u32>,
        /// Where the rescaled model goes (default: none written, the factors printed).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Sample NVIDIA GPUs through NVML (power, energy, utilisation, memory, clocks, temperature).
    Gpu {
        #[arg(long, default_value = "10")]
        duration: f64,
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        #[arg(long, default_value = "quetta-probe-results")]
        output_dir: PathBuf,
    },
    /// Summarise a CUDA kernel trace written by the quetta-cupti injection library.
    Kernels {
        file: PathBuf,
        /// An idle gap longer than this (µs) separates two steps.
        #[arg(long, default_value_t = 200)]
        step_gap_us: u64,
    },
}

/// The probe's engine, built as every binary builds one: through `quetta::Target`.
async fn context(c: &Common) -> Result<ProbeContext> {
    let mut t = quetta::Target::openai(&c.base_url);
    match c.endpoint.as_str() {
        "chat" => {}
        "completions" => t = t.completions(),
        e => bail!("--endpoint {e:?}: expected chat or completions"),
    }
    t.model.clone_from(&c.model);
    if let Some(k) = &c.api_key {
        t = t.api_key(k.as_str());
    }
    let conn = t.connect().await?;
    Ok(ProbeContext {
        engine: conn.engine.clone(),
        chat: conn.protocol.takes_messages(),
        base_url: c.base_url.clone(),
        model: conn.model.clone(),
        metrics_url: Some(
            c.metrics_url
                .clone()
                .unwrap_or_else(|| format!("{}/metrics", c.base_url.trim_end_matches('/'))),
        ),
        seed: c.seed,
        tool: quetta::Tool::new("quetta-probe", env!("CARGO_PKG_VERSION")),
    })
}

async fn server_kind(ctx: &ProbeContext) -> String {
    match &ctx.metrics_url {
        Some(u) => quetta_probe::scrape::scrape_once(u, None).await.map_or_else(
            |_| "unknown".to_owned(),
            |e| quetta_probe::server::server_kind(&e).to_owned(),
        ),
        None => "unknown".into(),
    }
}

/// A probe's CSV and meta file written in `dir` (the server's kind from its metrics), and
/// its rows printed.
async fn written(out: &ProbeOutput, ctx: &ProbeContext, dir: &std::path::Path) -> Result<()> {
    let kind = server_kind(ctx).await;
    let files = probes::write(out, ctx, dir, &kind)?;
    print(out, &files);
    Ok(())
}

fn print(out: &ProbeOutput, files: &(PathBuf, PathBuf)) {
    println!("{}", out.header.join("\t"));
    for r in &out.rows {
        println!("{}", r.join("\t"));
    }
    println!("\nsummary: {}", out.findings.summary_json());
    println!("wrote {} and {}", files.0.display(), files.1.display());
}

async fn probe(cmd: Cmd) -> Result<ExitCode> {
    let (c, out) = match &cmd {
        Cmd::Ttft { c, new_tokens, cached_tokens, repeats } => {
            let ctx = context(c).await?;
            (c, (ctx.clone(), probes::ttft(&ctx, new_tokens, cached_tokens, *repeats).await))
        }
        Cmd::DecodeGrid { c, batches, contexts, output_tokens } => {
            let ctx = context(c).await?;
            (c, (ctx.clone(), probes::decode_grid(&ctx, batches, contexts, *output_tokens).await))
        }
        Cmd::Herd { c, n, prompt_tokens, output_tokens } => {
            let ctx = context(c).await?;
            (c, (ctx.clone(), probes::herd(&ctx, *n, *prompt_tokens, *output_tokens).await))
        }
        Cmd::KvCapacity { c, prompts, prompt_tokens } => {
            let ctx = context(c).await?;
            (c, (ctx.clone(), probes::kv_capacity(&ctx, *prompts, *prompt_tokens).await))
        }
        Cmd::StageSplit { c, n, prompt_tokens, output_tokens } => {
            let ctx = context(c).await?;
            (c, (ctx.clone(), probes::stage_split(&ctx, *n, *prompt_tokens, *output_tokens).await))
        }
        Cmd::Calibrate {
            c,
            max_context,
            prefill_lengths,
            decode_contexts,
            repeats,
            decode_tokens,
            seqs_probe,
            block_tokens,
            max_batch_tokens,
            output,
        } => {
            let ctx = context(c).await?;
            let key = c.api_key.as_deref().filter(|k| !k.is_empty()).map(quetta::ApiKey::new);
            let max_context = match max_context {
                Some(n) => *n,
                None => calibrate::server_context(&c.base_url, key.as_ref())
                    .await
                    .context("the server does not say its context length (/props, /v1/models): give --max-context")?,
            };
            let o = calibrate::CalibrateOptions {
                max_context,
                prefill_lengths: prefill_lengths.clone(),
                decode_contexts: decode_contexts.clone(),
                repeats: *repeats,
                decode_tokens: *decode_tokens,
                seqs_probe: *seqs_probe,
                block_tokens: *block_tokens,
                max_batch_tokens: *max_batch_tokens,
            };
            return calibrated(&ctx, c, &o, output).await;
        }
        Cmd::Recheck { c, server_model, requests, prompt_words, decode_tokens, output } => {
            let model = quetta::sim::model::ServerModel::load(server_model)?;
            let ctx = context(c).await?;
            let base = quetta_probe::recheck::RecheckOptions::for_model(&model);
            let o = quetta_probe::recheck::RecheckOptions {
                requests: *requests,
                prompt_words: prompt_words.clone(),
                decode_tokens: decode_tokens.unwrap_or(base.decode_tokens),
            };
            return rechecked(&ctx, c, &model, &o, output.as_deref()).await;
        }
        Cmd::Gpu { .. } | Cmd::Kernels { .. } => unreachable!("handled in main"),
    };
    let (ctx, res) = out;
    let res = res.context("the probe")?;
    written(&res, &ctx, &c.output_dir).await?;
    Ok(ExitCode::SUCCESS)
}

/// How many times calibrate measured the decode grid, and why, for its fit line.
fn rounds_said(rounds: usize, least: usize) -> String {
    match (rounds, rounds > least) {
        (1, _) => String::new(),
        (n, false) => format!(" (decode grid measured {n} times, each point its median)"),
        (n, true) => format!(
            " (decode grid measured {n} times, each point its median: the fit of the first {} was too noisy)",
            n - 1
        ),
    }
}

async fn calibrated(
    ctx: &ProbeContext,
    c: &Common,
    o: &calibrate::CalibrateOptions,
    output: &std::path::Path,
) -> Result<ExitCode> {
    let cal = match calibrate::calibrate(ctx, o).await {
        Ok(cal) => cal,
        Err(e) => {
            eprintln!("quetta-probe calibrate: no model written: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    written(&cal.output, ctx, &c.output_dir).await?;
    std::fs::write(output, cal.model.to_json())
        .with_context(|| format!("cannot write {}", output.display()))?;
    let q = &cal.model.fits;
    println!(
        "prefill fit: R² {:.4}, RMSE {:.2} ms, worst {:.1} %; decode fit: R² {:.4}, RMSE {:.2} ms, worst {:.1} %{}",
        q.prefill.r2,
        q.prefill.rmse_ms,
        q.prefill.max_rel_residual * 100.0,
        q.decode.r2,
        q.decode.rmse_ms,
        q.decode.max_rel_residual * 100.0,
        rounds_said(cal.decode_rounds, o.repeats.max(1) as usize)
    );
    let s = &cal.model.step;
    println!(
        "gather window: {:.1} ms (prompts reaching the idle server that close together shared its first step); arrival overhead {:.1} ms",
        cal.model.gather_ms, cal.model.arrival_overhead_ms
    );
    let extras: Vec<String> = cal.mixed_step_extra_ms.iter().map(|v| format!("{v:+.0}")).collect();
    println!(
        "prefill step: a step that prefills costs {:.1} ms more than the fits say, beside a decoding stream too (measured {} ms; 0 when they scatter wider than the prefill intercept, whose rest is the arrival overhead)",
        s.prefill_step_ms,
        extras.join(", ")
    );
    if s.multi_seq_ms > 0.0 {
        println!(
            "decode: a step of two sequences or more costs {:.2} ms more than one alone and the slope predict",
            s.multi_seq_ms
        );
    }
    if s.context_over_kt_ms > 0.0 {
        println!(
            "decode context: {:.2} ms per 1,000 tokens, {:.2} ms more beyond a knee at {} tokens",
            s.context_kt_ms, s.context_over_kt_ms, s.context_knee_tokens
        );
    }
    if !s.decode_by_seqs.is_empty() {
        let rows: Vec<String> = s
            .decode_by_seqs
            .iter()
            .map(|r| format!("{}: {:.1} ms + {:.2} per 1,000", r.seqs, r.step_ms, r.context_kt_ms))
            .collect();
        println!(
            "decode step by sequences (ms at no context + ms per 1,000 tokens of context): {}",
            rows.join("; ")
        );
    }
    println!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

async fn rechecked(
    ctx: &ProbeContext,
    c: &Common,
    model: &quetta::sim::model::ServerModel,
    o: &quetta_probe::recheck::RecheckOptions,
    output: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let r = match quetta_probe::recheck::recheck(ctx, model, o).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("quetta-probe recheck: no model written: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    written(&r.output, ctx, &c.output_dir).await?;
    let s = &r.summary;
    println!(
        "the server against the model: prefill ×{:.3} (requests {:.3}–{:.3}), decode ×{:.3} (requests {:.3}–{:.3}) over {} requests",
        s.prefill_factor,
        s.prefill_range.0,
        s.prefill_range.1,
        s.decode_factor,
        s.decode_range.0,
        s.decode_range.1,
        r.points.len()
    );
    if s.context_apart {
        println!(
            "decode: the step's sequence terms ×{:.3}, its context terms ×{:.3} (the line through each prompt length's median gap)",
            s.decode_factor, s.context_factor
        );
    } else {
        println!(
            "decode: one factor for the sequence and context terms (the median ratio): {}",
            s.one_factor_why.as_deref().unwrap_or("no reason given")
        );
    }
    for w in &s.warnings {
        eprintln!("quetta-probe recheck: warning: {w}");
    }
    if let Some(re) = r.model.rechecked {
        println!(
            "against the calibration: prefill ×{:.3}, decode ×{:.3}, decode context ×{:.3}",
            re.prefill_factor,
            re.decode_factor,
            re.context()
        );
    }
    if let Some(out) = output {
        std::fs::write(out, r.model.to_json())
            .with_context(|| format!("cannot write {}", out.display()))?;
        println!("wrote {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn gpu(duration: f64, interval_ms: u64, dir: &std::path::Path) -> Result<ExitCode> {
    if !(duration.is_finite() && duration > 0.0) || interval_ms == 0 {
        bail!("--duration and --interval-ms must be positive");
    }
    let src = match quetta_probe::gpu::open_nvml() {
        Ok(s) => s,
        Err(e) => {
            println!("{e}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let series = dir.join("gpu.jsonl");
    let s = quetta_probe::gpu::Sampler::start(
        src,
        Duration::from_millis(interval_ms),
        Some(series.clone()),
    );
    std::thread::sleep(Duration::from_secs_f64(duration));
    let r = s.finish();
    let json = serde_json::to_string_pretty(&r)?;
    std::fs::write(dir.join("gpu.json"), json.clone() + "\n")?;
    println!("{json}\nwrote {} and {}", series.display(), dir.join("gpu.json").display());
    Ok(ExitCode::SUCCESS)
}

fn main() -> Result<ExitCode> {
    quetta::engine::setting::name_settings(quetta_cli::flag_name);
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Gpu { duration, interval_ms, output_dir } => gpu(duration, interval_ms, &output_dir),
        Cmd::Kernels { file, step_gap_us } => {
            let k = quetta_probe::kernels::load(&file)?;
            let s = quetta_probe::kernels::summarise(&k, step_gap_us * 1000);
            println!("{}", serde_json::to_string_pretty(&s)?);
            Ok(ExitCode::SUCCESS)
        }
        cmd => {
            let rt = quetta::runtime(Some(2))?;
            rt.block_on(probe(cmd))
        }
    }
}

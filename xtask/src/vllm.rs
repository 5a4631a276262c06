//! `cargo xtask compare-vllm`: Quetta and, when installed, `vllm bench serve`, run in turn on
//! one workload against the real llama.cpp server at concurrency 1 and 4; each tool's own
//! vLLM-format result file is read the same way, and every figure is set beside the server's
//! own timing of the same run (deltas of llama.cpp's Prometheus counters). The Markdown table
//! goes to stdout and target/xtask/compare-vllm.md, for docs/PERFORMANCE.md.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Requests per run, the prompt and answer lengths (tokens), and the runs of each tool.
const REQUESTS: usize = 40;
const INPUT: usize = 32;
const OUTPUT: usize = 16;
const ROUNDS: usize = 2;

/// llama.cpp's counters that time its own work.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    prompt_s: f64,
    predicted_s: f64,
    predicted: f64,
}

fn counters(url: &str) -> Result<Counters> {
    let out = Command::new("curl").args(["-sf", &format!("{url}/metrics")]).output()?;
    if !out.status.success() {
        bail!("GET {url}/metrics failed: is llama.cpp's server running there?");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(Counters {
        prompt_s: get("llamacpp:prompt_seconds_total"),
        predicted_s: get("llamacpp:tokens_predicted_seconds_total"),
        predicted: get("llamacpp:tokens_predicted_total"),
    })
}

/// One run's figures (ms; medians over completed requests) and the server's own.
#[derive(Debug)]
struct Row {
    tool: &'static str,
    concurrency: usize,
    ttft: f64,
    tpot: f64,
    itl: f64,
    e2e: f64,
    tokens: u64,
    failed: usize,
    server_prefill: f64,
    server_per_token: f64,
}

/// The mean: the server's figures are totals over the run, so the client's are means too.
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// Per-request figures of a vLLM-format result file (both tools write one), in ms.
fn read_result(path: &Path) -> Result<(Vec<[f64; 4]>, u64, usize)> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path)?)
        .with_context(|| format!("{}", path.display()))?;
    let arr = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    let (ttfts, itls, lens, errs, lat) =
        (arr("ttfts"), arr("itls"), arr("output_lens"), arr("errors"), arr("latencies"));
    let mut out = Vec::new();
    let (mut tokens, mut failed) = (0u64, 0usize);
    for (i, t) in ttfts.iter().enumerate() {
        if errs.get(i).and_then(Value::as_str).is_some_and(|e| !e.is_empty()) {
            failed += 1;
            continue;
        }
        let ttft = t.as_f64().unwrap_or(f64::NAN) * 1e3;
        let gaps: Vec<f64> = itls
            .get(i)
            .and_then(Value::as_array)
            .map(|g| g.iter().filter_map(Value::as_f64).map(|x| x * 1e3).collect())
            .unwrap_or_default();
        let e2e =
            lat.get(i).and_then(Value::as_f64).map_or(ttft + gaps.iter().sum::<f64>(), |l| l * 1e3);
        let n = lens.get(i).and_then(Value::as_u64).unwrap_or(0);
        tokens += n;
        let tpot = if n > 1 { (e2e - ttft) / (n - 1) as f64 } else { f64::NAN };
        let itl =
            if gaps.is_empty() { f64::NAN } else { gaps.iter().sum::<f64>() / gaps.len() as f64 };
        out.push([ttft, tpot, itl, e2e]);
    }
    Ok((out, tokens, failed))
}

/// Where the runs go: the server, the working directory, the tokenizer's directory.
struct Setup<'a> {
    url: &'a str,
    work: &'a Path,
    tok: &'a Path,
}

/// The flags both tools take (Quetta reads vLLM's): random prompts of INPUT tokens drawn
/// with `seed`, OUTPUT tokens each (ignore_eos), the chat API, a closed loop at `c`, a
/// detailed result file.
fn common_args(s: &Setup<'_>, c: usize, seed: usize, file: &str) -> Vec<String> {
    let (input, output, n, c, seed) = (
        INPUT.to_string(),
        OUTPUT.to_string(),
        REQUESTS.to_string(),
        c.to_string(),
        seed.to_string(),
    );
    let dir = s.work.display().to_string();
    [
        "--base-url",
        s.url,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "smollm2",
        "--dataset-name",
        "random",
        "--random-input-len",
        &input,
        "--random-output-len",
        &output,
        "--ignore-eos",
        "--num-prompts",
        &n,
        "--max-concurrency",
        &c,
        "--request-rate",
        "inf",
        "--seed",
        &seed,
        "--save-result",
        "--save-detailed",
        "--result-dir",
        &dir,
        "--result-filename",
        file,
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect()
}

/// Run one tool once; the path of its result file.
fn run_tool(s: &Setup<'_>, tool: &str, bin: &Path, c: usize, seed: usize) -> Result<PathBuf> {
    let file = format!("{tool}-c{c}-seed{seed}.json");
    let mut cmd = Command::new(bin);
    if tool == "vllm" {
        cmd.args(["bench", "serve"]).args(common_args(s, c, seed, &file));
        cmd.args(["--tokenizer", &s.tok.display().to_string()]);
    } else {
        cmd.arg("run").args(common_args(s, c, seed, &file));
        cmd.args(["--tokenizer", &s.tok.join("tokenizer.json").display().to_string()]);
        cmd.args(["--quiet", "--overwrite", "--output-dir"])
            .arg(s.work.join(format!("quetta-c{c}")));
    }
    let o = cmd.output().with_context(|| format!("run {}", bin.display()))?;
    if !o.status.success() {
        bail!("{tool} failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(s.work.join(file))
}

fn measure(s: &Setup<'_>, tool: &'static str, bin: &Path, c: usize, seed: usize) -> Result<Row> {
    let before = counters(s.url)?;
    let file = run_tool(s, tool, bin, c, seed)?;
    let after = counters(s.url)?;
    let (reqs, tokens, failed) = read_result(&file)?;
    let col = |k: usize| {
        let v: Vec<f64> = reqs.iter().map(|r| r[k]).filter(|x| x.is_finite()).collect();
        mean(&v)
    };
    let n = (reqs.len() + failed).max(1) as f64;
    Ok(Row {
        tool,
        concurrency: c,
        ttft: col(0),
        tpot: col(1),
        itl: col(2),
        e2e: col(3),
        tokens,
        failed,
        server_prefill: (after.prompt_s - before.prompt_s) * 1e3 / n,
        server_per_token: (after.predicted_s - before.predicted_s) * 1e3
            / (after.predicted - before.predicted).max(1.0),
    })
}

fn table(rows: &[Row], vllm: Option<&Path>) -> String {
    let mut s = format!(
        "Workload: {REQUESTS} chat requests of {INPUT} random tokens, {OUTPUT} tokens out (ignore_eos), closed loop, against llama.cpp + SmolLM2-135M on this machine; {ROUNDS} rounds, the tools alternating. Means over completed requests (ms); each run draws its own prompts (its own seed), so llama.cpp's prompt cache does not serve them; server figures are deltas of llama.cpp's own counters over the same run (prompt seconds per request, generation seconds per generated token).{}\n\n",
        if vllm.is_none() { " vllm was not installed: Quetta only." } else { "" }
    );
    s.push_str("| tool | concurrency | TTFT | TTFT − server prefill | TPOT | TPOT − server per-token | ITL (per-request mean) | E2E | output tokens | failed |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:+.2} | {:.3} | {:+.3} | {:.3} | {:.1} | {} | {} |",
            r.tool,
            r.concurrency,
            r.ttft,
            r.ttft - r.server_prefill,
            r.tpot,
            r.tpot - r.server_per_token,
            r.itl,
            r.e2e,
            r.tokens,
            r.failed
        );
    }
    s
}

/// `cargo xtask compare-vllm [URL]`: against the llama.cpp server at URL (default
/// `QUETTA_LLAMA_URL`), `vllm` from `PATH` or `VLLM` when found.
pub fn compare(url: Option<&str>, root: &Path) -> Result<()> {
    let url = url
        .map(str::to_owned)
        .or_else(|| std::env::var("QUETTA_LLAMA_URL").ok())
        .context("give the llama.cpp server's URL (or set QUETTA_LLAMA_URL; scripts/llama-server-start.sh starts one)")?;
    let st = Command::new("cargo")
        .current_dir(root)
        .args(["build", "--release", "-q", "-p", "quetta-bench"])
        .status()?;
    if !st.success() {
        bail!("release build failed");
    }
    let quetta = root.join("target/release/quetta-bench");
    let vllm = std::env::var_os("VLLM").map(PathBuf::from).or_else(|| {
        let o = Command::new("sh").args(["-c", "command -v vllm"]).output().ok()?;
        o.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
    });
    let work = root.join("target/xtask/compare-vllm");
    std::fs::create_dir_all(&work)?;
    let tok = root.join("fixtures/tokenizers/smollm2");
    let setup = Setup { url: &url, work: &work, tok: &tok };
    let mut rows = Vec::new();
    for c in [1, 4] {
        for round in 0..ROUNDS {
            let seed = 100 * round + 10 * c;
            rows.push(measure(&setup, "quetta", &quetta, c, seed)?);
            if let Some(v) = &vllm {
                rows.push(measure(&setup, "vllm", v, c, seed + 1)?);
            }
        }
    }
    let t = table(&rows, vllm.as_deref());
    print!("{t}");
    std::fs::write(root.join("target/xtask/compare-vllm.md"), &t)?;
    Ok(())
}

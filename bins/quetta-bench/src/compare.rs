//! `quetta-bench compare BASELINE CANDIDATE`: per-metric deltas of two runs with bootstrap
//! confidence intervals and Mann-Whitney U tests over their per-request values, and
//! `quetta-bench export RUN --format csv|vllm`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use quetta_metrics::RequestRecord;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use statrs::distribution::{ContinuousCDF, Normal};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline run's directory.
    baseline: PathBuf,
    /// The candidate run's directory.
    candidate: PathBuf,
    /// Exit 1 when a metric is significantly worse by more than this (e.g. 5%).
    #[arg(long)]
    fail_on_regression: Option<String>,
    /// Significance level of the tests.
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    /// A baseline older than this is marked stale (e.g. 30d, 12h).
    #[arg(long, default_value = "30d")]
    max_baseline_age: String,
    /// Refuse to compare runs whose workload or load settings differ.
    #[arg(long)]
    strict: bool,
}

fn load(dir: &Path) -> Result<(Value, Vec<RequestRecord>)> {
    let s: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("summary.json"))
            .with_context(|| format!("{}: no summary.json", dir.display()))?,
    )
    .with_context(|| format!("{}/summary.json", dir.display()))?;
    let p = dir.join("requests.jsonl");
    let text =
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
    let mut recs = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        recs.push(
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a request record", p.display(), i + 1))?,
        );
    }
    Ok((s, recs))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        f64::midpoint(s[m - 1], s[m])
    }
}

/// Two-sided Mann-Whitney U test (normal approximation with tie correction); the p-value.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let mut all: Vec<(f64, usize)> =
        a.iter().map(|&x| (x, 0)).chain(b.iter().map(|&x| (x, 1))).collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let mut ranks = vec![0.0; n];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for rk in &mut ranks[i..=j] {
            *rk = r;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let r1: f64 = all.iter().zip(&ranks).filter(|(x, _)| x.1 == 0).map(|(_, r)| r).sum();
    let u1 = r1 - n1 * (n1 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let nn = n1 + n2;
    let sigma = (n1 * n2 / 12.0 * ((nn + 1.0) - tie_term / (nn * (nn - 1.0)))).sqrt();
    if sigma == 0.0 {
        return 1.0;
    }
    let z = (u1 - mu).abs() / sigma;
    let norm = Normal::new(0.0, 1.0).expect("standard normal");
    (2.0 * (1.0 - norm.cdf(z))).min(1.0)
}

/// A 95 % bootstrap interval of median(b) − median(a) (1,000 resamples, fixed seed).
pub fn bootstrap_ci(a: &[f64], b: &[f64]) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut d: Vec<f64> = (0..1000)
        .map(|_| {
            let ra: Vec<f64> = (0..a.len()).map(|_| a[rng.gen_range(0..a.len())]).collect();
            let rb: Vec<f64> = (0..b.len()).map(|_| b[rng.gen_range(0..b.len())]).collect();
            median(&rb) - median(&ra)
        })
        .collect();
    d.sort_by(f64::total_cmp);
    (d[25], d[974])
}

fn values(recs: &[RequestRecord], metric: &str) -> Vec<f64> {
    recs.iter()
        .filter(|r| r.ok())
        .filter_map(|r| match metric {
            "ttft_ms" => r.ttft_ms,
            "tpot_ms" => r.tpot_ms,
            "e2e_ms" => r.e2e_ms,
            "itl_request_mean_ms" => {
                (!r.itl_ms.is_empty()).then(|| r.itl_ms.iter().sum::<f64>() / r.itl_ms.len() as f64)
            }
            _ => None,
        })
        .collect()
}

/// Settings that make two runs comparable (everything but where and when they ran).
fn config_diff(a: &Value, b: &Value) -> Vec<String> {
    let skip = ["seed", "simulator", "extra_header_names", "api_key_given", "insecure"];
    let mut out = Vec::new();
    if let (Some(x), Some(y)) = (a.as_object(), b.as_object()) {
        for (k, v) in x {
            if skip.contains(&k.as_str()) {
                continue;
            }
            if y.get(k) != Some(v) {
                out.push(format!("{k}: {v} -> {}", y.get(k).unwrap_or(&Value::Null)));
            }
        }
    }
    out
}

fn parse_age(s: &str) -> Result<u64> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 =
        n.parse().with_context(|| format!("--max-baseline-age {s:?}: expected e.g. 30d or 12h"))?;
    Ok(n * match unit {
        "d" | "" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" => 1,
        _ => bail!("--max-baseline-age {s:?}: unit d, h, m or s"),
    })
}

/// Seconds since the epoch of an RFC 3339 UTC time `YYYY-MM-DDTHH:MM:SSZ`.
fn unix_of(t: &str) -> Option<u64> {
    let (y, mo, d) = (
        t.get(0..4)?.parse::<i64>().ok()?,
        t.get(5..7)?.parse::<i64>().ok()?,
        t.get(8..10)?.parse::<i64>().ok()?,
    );
    let (h, mi, s) = (
        t.get(11..13)?.parse::<u64>().ok()?,
        t.get(14..16)?.parse::<u64>().ok()?,
        t.get(17..19)?.parse::<u64>().ok()?,
    );
    // days from civil (Howard Hinnant)
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as u64 * 86_400 + h * 3600 + mi * 60 + s)
}

pub fn compare(a: CompareArgs) -> Result<ExitCode> {
    let (bs, br) = load(&a.baseline)?;
    let (cs, cr) = load(&a.candidate)?;
    let threshold = match &a.fail_on_regression {
        Some(t) => Some(
            t.trim_end_matches('%')
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 0.0)
                .with_context(|| format!("--fail-on-regression {t:?}: expected e.g. 5%"))?
                / 100.0,
        ),
        None => None,
    };
    let mut notes = Vec::new();
    let diff = config_diff(&bs["config"], &cs["config"]);
    if !diff.is_empty() {
        if a.strict {
            bail!("the runs' settings differ (--strict): {}", diff.join("; "));
        }
        notes.push(format!("the runs' settings differ: {}", diff.join("; ")));
    }
    if bs["client"]["host"] != cs["client"]["host"] && !bs["client"]["host"].is_null() {
        notes.push(format!(
            "measured from different machines: {} ({}) vs {} ({})",
            bs["client"]["host"]["hostname"],
            bs["client"]["host"]["cpu_model"],
            cs["client"]["host"]["hostname"],
            cs["client"]["host"]["cpu_model"]
        ));
    }
    if bs["target"]["backend"] != cs["target"]["backend"] {
        notes.push(format!(
            "different engines: {} vs {}",
            bs["target"]["backend"], cs["target"]["backend"]
        ));
    }
    if bs["target"]["model"] != cs["target"]["model"] {
        notes.push(format!(
            "different models: {} vs {}",
            bs["target"]["model"], cs["target"]["model"]
        ));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let age = bs["started_at"].as_str().and_then(unix_of).map(|t| now.saturating_sub(t));
    let stale = age.is_some_and(|x| x > parse_age(&a.max_baseline_age).unwrap_or(u64::MAX));
    if stale {
        notes.push(format!(
            "the baseline is stale: {} days old (--max-baseline-age {})",
            age.unwrap_or(0) / 86_400,
            a.max_baseline_age
        ));
    }
    let mut rows = Vec::new();
    let mut regressions = Vec::new();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22}{:>12}{:>12}{:>10}{:>24}{:>10}  verdict",
        "metric (median)", "baseline", "candidate", "delta", "95% CI of delta", "p"
    );
    for m in ["ttft_ms", "tpot_ms", "itl_request_mean_ms", "e2e_ms"] {
        let (x, y) = (values(&br, m), values(&cr, m));
        if x.len() < 2 || y.len() < 2 {
            continue;
        }
        let (mx, my) = (median(&x), median(&y));
        let rel = if mx > 0.0 { (my - mx) / mx } else { 0.0 };
        let (lo, hi) = bootstrap_ci(&x, &y);
        let p = mann_whitney(&x, &y);
        let significant = p < a.alpha && (lo > 0.0 || hi < 0.0);
        let verdict = match (significant, rel > 0.0) {
            (true, true) => "slower (significant)",
            (true, false) => "faster (significant)",
            (false, _) => "no significant change",
        };
        if significant && rel > 0.0 && threshold.is_none_or(|t| rel > t) {
            regressions.push(format!("{m} +{:.1}%", rel * 100.0));
        }
        let _ = writeln!(
            out,
            "{m:<22}{mx:>12.3}{my:>12.3}{:>9.1}%{:>24}{p:>10.2e}  {verdict}",
            rel * 100.0,
            format!("[{lo:.3}, {hi:.3}]")
        );
        rows.push(json!({"metric": m, "baseline_median": mx, "candidate_median": my, "relative_delta": rel, "ci95": [lo, hi], "p_value": p, "significant": significant, "verdict": verdict, "n": [x.len(), y.len()]}));
    }
    for k in ["request_throughput", "output_token_throughput"] {
        if let (Some(x), Some(y)) = (bs[k].as_f64(), cs[k].as_f64()) {
            let rel = if x > 0.0 { (y - x) / x } else { 0.0 };
            let _ = writeln!(
                out,
                "{k:<22}{x:>12.3}{y:>12.3}{:>9.1}%{:>24}{:>10}  (one value per run: no test)",
                rel * 100.0,
                "-",
                "-"
            );
            rows.push(json!({"metric": k, "baseline": x, "candidate": y, "relative_delta": rel}));
        }
    }
    println!(
        "== Quetta compare ==\nbaseline   {} ({}, {})\ncandidate  {} ({}, {})\n",
        a.baseline.display(),
        bs["target"]["model"],
        bs["started_at"],
        a.candidate.display(),
        cs["target"]["model"],
        cs["started_at"]
    );
    print!("{out}");
    for n in &notes {
        println!("note       {n}");
    }
    let report = json!({"baseline": a.baseline.display().to_string(), "candidate": a.candidate.display().to_string(), "alpha": a.alpha, "metrics": rows, "regressions": regressions, "baseline_stale": stale, "notes": notes});
    std::fs::write(
        a.candidate.join("compare.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    if threshold.is_some() && !regressions.is_empty() {
        println!("REGRESSION {}", regressions.join(", "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run's directory.
    run: PathBuf,
    /// csv or parquet (one row per request), or vllm (the result JSON of vLLM's `bench serve`).
    #[arg(long, default_value = "csv")]
    format: String,
    /// Output file (default: RUN/requests.csv or RUN/vllm_result.json).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

fn csv_cell(v: &Value) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The columns of the CSV export, in order.
pub const CSV_COLUMNS: &[&str] = &[
    "id",
    "session_id",
    "turn",
    "intended_offset_ms",
    "started_offset_ms",
    "sent_offset_ms",
    "first_token_offset_ms",
    "end_offset_ms",
    "ttft_ms",
    "ttfo_ms",
    "tpot_ms",
    "e2e_ms",
    "ttft_from_intended_ms",
    "e2e_from_intended_ms",
    "queue_ms",
    "schedule_lag_ms",
    "itl_count",
    "itl_mean_ms",
    "token_chunks",
    "input_tokens",
    "input_token_source",
    "output_tokens",
    "output_token_source",
    "cached_tokens",
    "planned_input_tokens",
    "planned_output_tokens",
    "streamed",
    "status",
    "finish_reason",
    "connection_reused",
    "attempts",
    "error_kind",
    "error",
];

pub fn export(a: ExportArgs) -> Result<ExitCode> {
    let (s, recs) = load(&a.run)?;
    match a.format.as_str() {
        "csv" => {
            let path = a.output.unwrap_or_else(|| a.run.join("requests.csv"));
            let mut out = CSV_COLUMNS.join(",") + "\n";
            for r in &recs {
                let mut v = serde_json::to_value(r)?;
                let itl = r.itl_ms.len();
                v["itl_count"] = json!(itl);
                v["attempts"] = json!(r.attempts);
                v["itl_mean_ms"] = if itl > 0 {
                    json!(r.itl_ms.iter().sum::<f64>() / itl as f64)
                } else {
                    Value::Null
                };
                out.push_str(
                    &CSV_COLUMNS.iter().map(|c| csv_cell(&v[*c])).collect::<Vec<_>>().join(","),
                );
                out.push('\n');
            }
            std::fs::write(&path, out)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("wrote {} ({} rows)", path.display(), recs.len());
        }
        "parquet" => {
            let path = a.output.unwrap_or_else(|| a.run.join("requests.parquet"));
            let f = std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            quetta_report::parquet::write(&recs, f)?;
            println!("wrote {} ({} rows)", path.display(), recs.len());
        }
        "vllm" => {
            let path = a.output.unwrap_or_else(|| a.run.join("vllm_result.json"));
            std::fs::write(&path, serde_json::to_string_pretty(&vllm_result(&s, &recs))? + "\n")
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("wrote {}", path.display());
        }
        f => bail!("--format {f:?}: expected csv, parquet or vllm"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The result JSON `vllm bench serve --save-result` writes, from a Quetta run: its field
/// names, Quetta's values (per-request lists in request order; failed requests have 0 for
/// their TTFT and empty ITLs, as vLLM writes them).
pub fn vllm_result(s: &Value, recs: &[RequestRecord]) -> Value {
    let st = |k: &str, f: &str| s[k][f].clone();
    let mut v = json!({
        "date": s["started_at"].as_str().map(|t| t.replace(['-', ':'], "").replace('T', "-").trim_end_matches('Z').to_owned()),
        "backend": "openai-chat",
        "model_id": s["target"]["model"],
        "tokenizer_id": s["config"]["tokenizer"],
        "num_prompts": recs.len(),
        "request_rate": s["config"]["request_rate"].as_f64().map_or(json!("inf"), |r| json!(r)),
        "burstiness": s["config"]["burstiness"].as_f64().unwrap_or(1.0),
        "max_concurrency": s["config"]["max_concurrency"].as_u64().or(s["config"]["concurrency"].as_u64()),
        "duration": s["duration_s"],
        "completed": s["completed"],
        "failed": s["failed"],
        "total_input_tokens": s["total_input_tokens"],
        "total_output_tokens": s["total_output_tokens"],
        "request_throughput": s["request_throughput"],
        "request_goodput": s["goodput"]["request_rate"],
        "output_throughput": s["output_token_throughput"],
        "total_token_throughput": s["total_token_throughput"],
        "input_lens": recs.iter().map(|r| r.input_tokens.unwrap_or(0)).collect::<Vec<_>>(),
        "output_lens": recs.iter().map(|r| if r.ok() { r.output_tokens.unwrap_or(0) } else { 0 }).collect::<Vec<_>>(),
        "ttfts": recs.iter().map(|r| if r.ok() { r.ttft_ms.unwrap_or(0.0) / 1e3 } else { 0.0 }).collect::<Vec<_>>(),
        "itls": recs.iter().map(|r| if r.ok() { r.itl_ms.iter().map(|x| x / 1e3).collect() } else { Vec::new() }).collect::<Vec<Vec<f64>>>(),
        "generated_texts": recs.iter().map(|r| r.text.clone().unwrap_or_default()).collect::<Vec<_>>(),
        "errors": recs.iter().map(|r| r.error.clone().unwrap_or_default()).collect::<Vec<_>>(),
    });
    for (q, key) in
        [("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"), ("e2el", "e2e_ms")]
    {
        v[format!("mean_{q}_ms")] = st(key, "mean");
        v[format!("median_{q}_ms")] = st(key, "p50");
        v[format!("std_{q}_ms")] = st(key, "stddev");
        v[format!("p99_{q}_ms")] = st(key, "p99");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mann_whitney_and_bootstrap() {
        let a: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 10)).collect();
        let same = mann_whitney(&a, &a);
        assert!(same > 0.9, "{same}");
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        assert!(mann_whitney(&a, &b) < 1e-6);
        let (lo, hi) = bootstrap_ci(&a, &b);
        assert!(lo > 15.0 && hi < 25.0, "[{lo}, {hi}]");
        assert_eq!(unix_of("2026-11-30T09:17:15Z"), Some(1_796_030_235));
        assert_eq!(parse_age("30d").unwrap(), 30 * 86_400);
    }
}

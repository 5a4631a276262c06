//! `quetta-bench sweep` (a run per concurrency or rate) and `quetta-bench slo` (the highest
//! rate or concurrency that meets percentile objectives). Each step is an ordinary run in
//! its own directory (`run.json`, `requests.jsonl`, `summary.json`); the sweep or search
//! adds one summary file beside them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use crate::run::{self, RunArgs};

/// Flags of `quetta-bench sweep`; every `run` flag applies to each step.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Closed-loop steps at these concurrencies, e.g. 1,8,32.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["concurrency_pow2", "rates"])]
    concurrencies: Vec<usize>,
    /// Closed-loop steps at 1, 2, 4, … and MAX (llmperf's power-of-two steps).
    #[arg(long, conflicts_with = "rates")]
    concurrency_pow2: Option<usize>,
    /// Open-loop steps at these rates (req/s), or `auto`: measure the maximum throughput
    /// first (closed loop at --auto-concurrency), then spread --auto-steps rates up to it.
    #[arg(long)]
    rates: Option<String>,
    #[arg(long, default_value_t = 64)]
    auto_concurrency: usize,
    #[arg(long, default_value_t = 5)]
    auto_steps: usize,
    /// Use the same prompts in every step (by default each step draws fresh ones, so an
    /// earlier step does not warm the server's prefix cache).
    #[arg(long)]
    same_prompts: bool,
}

/// One step's figures from its summary.json.
fn row(label: &str, value: f64, dir: &Path, s: &Value) -> Value {
    let m = |k: &str, p: &str| s[k][p].clone();
    json!({
        label: value,
        "dir": dir.display().to_string(),
        "completed": s["completed"], "failed": s["failed"],
        "request_throughput": s["request_throughput"],
        "requests_per_minute": s["request_throughput"].as_f64().map(|r| (r * 60.0 * 10.0).round() / 10.0),
        "output_token_throughput": s["output_token_throughput"],
        "achieved_send_rate": s["achieved_send_rate"],
        "e2e_p50_ms": m("e2e_ms", "p50"), "e2e_p99_ms": m("e2e_ms", "p99"),
        "ttft_p50_ms": m("ttft_ms", "p50"), "ttft_p99_ms": m("ttft_ms", "p99"),
        "tpot_p50_ms": m("tpot_ms", "p50"),
        "itl_p50_ms": m("itl_ms", "p50"),
        "errors": s["errors"],
        "partial": s["partial"],
    })
}

fn num(v: &Value) -> String {
    quetta_report::chart::figure(v.as_f64())
}

/// The sweep table for the terminal.
pub fn table(label: &str, steps: &[Value]) -> String {
    use quetta_report::chart::{figure, SWEEP_COLUMNS};
    let mut s = String::new();
    let _ = write!(s, "{label:>12}");
    for (h, _) in SWEEP_COLUMNS {
        let _ = write!(s, "{h:>11}");
    }
    s.push('\n');
    for st in steps {
        let _ = write!(s, "{:>12}", figure(st[label].as_f64()));
        for (_, k) in SWEEP_COLUMNS {
            let _ = write!(s, "{:>11}", figure(st[k].as_f64()));
        }
        s.push('\n');
    }
    s.push_str("(latencies in ms)\n");
    s
}

/// Run one step: the run flags with the step's load, in `dir`; returns its summary.json.
fn step(base: &RunArgs, dir: &Path, seed: u64, f: impl FnOnce(&mut RunArgs)) -> Result<Value> {
    let mut a = base.clone();
    a.output_dir = Some(dir.to_path_buf());
    a.overwrite = true;
    a.quiet = true;
    a.print_summary = false;
    a.seed = seed;
    f(&mut a);
    run::main(a).with_context(|| format!("step in {}", dir.display()))?;
    let text = std::fs::read_to_string(dir.join("summary.json"))
        .with_context(|| format!("{}: the step wrote no summary.json", dir.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn out_dir(base: &RunArgs, kind: &str) -> PathBuf {
    base.output_dir.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from("quetta-results").join(format!("{kind}-{now}"))
    })
}

pub fn sweep(a: SweepArgs) -> Result<ExitCode> {
    let dir = out_dir(&a.run, "sweep");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let seed = |i: usize| {
        if a.same_prompts {
            a.run.seed
        } else {
            a.run.seed.wrapping_add(i as u64 * 1_000_003)
        }
    };
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    let label;
    if let Some(r) = &a.rates {
        label = "rate";
        let rates: Vec<f64> = if r == "auto" {
            let d = dir.join("max-throughput");
            let s = step(&a.run, &d, seed(999), |x| {
                x.concurrency = Some(a.auto_concurrency);
                x.request_rate = None;
            })?;
            let max = s["request_throughput"]
                .as_f64()
                .filter(|m| *m > 0.0)
                .context("the max-throughput step completed nothing")?;
            notes.push(format!(
                "maximum throughput at concurrency {}: {max:.3} req/s",
                a.auto_concurrency
            ));
            let n = a.auto_steps.max(1);
            (1..=n).map(|i| (max * i as f64 / n as f64 * 1000.0).round() / 1000.0).collect()
        } else {
            r.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v > 0.0)
                        .with_context(|| format!("--rates: {x:?} is not a positive number"))
                })
                .collect::<Result<_>>()?
        };
        for (i, rate) in rates.iter().enumerate() {
            let d = dir.join(format!("step-{i:02}-rate-{rate}"));
            eprintln!("sweep step {}/{}: {rate} req/s", i + 1, rates.len());
            let s = step(&a.run, &d, seed(i), |x| {
                x.request_rate = Some(*rate);
                x.concurrency = None;
            })?;
            steps.push(row(label, *rate, &d, &s));
        }
    } else {
        label = "concurrency";
        let cs: Vec<usize> = match (a.concurrency_pow2, a.concurrencies.is_empty()) {
            (Some(max), _) => {
                let mut v: Vec<usize> = std::iter::successors(Some(1usize), |c| c.checked_mul(2))
                    .take_while(|c| *c < max)
                    .collect();
                v.push(max);
                v
            }
            (None, false) => a.concurrencies.clone(),
            (None, true) => bail!("give --concurrencies, --concurrency-pow2 or --rates"),
        };
        if cs.contains(&0) {
            bail!("concurrency must be at least 1");
        }
        for (i, c) in cs.iter().enumerate() {
            let d = dir.join(format!("step-{i:02}-concurrency-{c}"));
            eprintln!("sweep step {}/{}: concurrency {c}", i + 1, cs.len());
            let s = step(&a.run, &d, seed(i), |x| {
                x.concurrency = Some(*c);
                x.request_rate = None;
            })?;
            steps.push(row(label, *c as f64, &d, &s));
        }
    }
    let peak = steps
        .iter()
        .max_by(|x, y| {
            x["request_throughput"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&y["request_throughput"].as_f64().unwrap_or(0.0))
        })
        .cloned();
    let total_errors: u64 = steps.iter().map(|s| s["failed"].as_u64().unwrap_or(0)).sum();
    let summary = json!({
        "schema_version": 1,
        "kind": label,
        "steps": steps,
        "peak": peak,
        "total_errors": total_errors,
        "prompts": if a.same_prompts { "the same in every step" } else { "fresh in every step" },
        "notes": notes,
    });
    std::fs::write(dir.join("sweep.json"), serde_json::to_string_pretty(&summary)? + "\n")?;
    println!("\n== Quetta sweep ==\n{}", table(label, &steps));
    if let Some(p) = &peak {
        println!("peak       {} req/s at {label} {}", num(&p["request_throughput"]), p[label]);
    }
    for n in &notes {
        println!("note       {n}");
    }
    println!("results    {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// One objective of `quetta-bench slo`: a metric's percentile under a bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// The summary.json key (`ttft_ms`, ...).
    pub metric: String,
    /// The percentile key (`p99`, `p50`, `p999`, `p99_99`...).
    pub percentile: String,
    pub pct: f64,
    pub bound_ms: f64,
}

/// Parse `ttft:p99<500ms,tpot:p99<40ms`.
pub fn parse_objectives(s: &str) -> Result<Vec<Objective>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("--slo {part:?}: expected METRIC:pNN<DURATION, e.g. ttft:p99<500ms");
        let (metric, rest) = part.split_once(':').with_context(bad)?;
        let (p, bound) = rest.split_once('<').with_context(bad)?;
        let metric = match metric.trim() {
            "ttft" | "ttfo" | "tpot" | "itl" | "e2e" => format!("{}_ms", metric.trim()),
            m => bail!("--slo: unknown metric {m:?} (ttft, ttfo, tpot, itl, e2e)"),
        };
        let p = p.trim();
        let pv: f64 = if p == "p999" {
            99.9
        } else {
            p.strip_prefix('p')
                .and_then(|x| x.replace('_', ".").parse().ok())
                .filter(|v: &f64| *v > 0.0 && *v < 100.0)
                .with_context(bad)?
        };
        let bound = quetta_metrics::slo::parse_duration(bound.trim()).with_context(bad)?;
        out.push(Objective {
            metric,
            percentile: quetta_metrics::percentile_key(pv),
            pct: pv,
            bound_ms: bound.as_secs_f64() * 1e3,
        });
    }
    if out.is_empty() {
        bail!("--slo: give at least one objective, e.g. ttft:p99<500ms");
    }
    Ok(out)
}

/// Flags of `quetta-bench slo`; every `run` flag applies to each probe (`--slo` holds the
/// objectives here).
#[derive(Debug, Args)]
pub struct SloArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Search over the request rate (open loop, the default) or the concurrency.
    #[arg(long, default_value = "rate")]
    search: String,
    /// First rate (req/s) or concurrency to try.
    #[arg(long, default_value_t = 1.0)]
    start: f64,
    /// Never try beyond this rate or concurrency.
    #[arg(long, default_value_t = 10_000.0)]
    max: f64,
    /// Stop bisecting when the bracket is narrower than this share of its upper end.
    #[arg(long, default_value_t = 0.05)]
    tolerance: f64,
    /// Requests per probe.
    #[arg(long, default_value_t = 200)]
    min_requests: u64,
    /// A probe with more failed requests than this share fails.
    #[arg(long, default_value_t = 0.01)]
    max_error_rate: f64,
    #[arg(long, default_value_t = 24)]
    max_probes: usize,
}

/// Whether a probe's summary meets every objective; and why not.
fn verdict(
    s: &Value,
    objectives: &[Objective],
    max_err: f64,
    rate: Option<f64>,
) -> (bool, Vec<String>, Option<&'static str>) {
    let mut why = Vec::new();
    let mut limit = None;
    for o in objectives {
        match s[&o.metric][&o.percentile].as_f64() {
            Some(v) if v < o.bound_ms => {}
            Some(v) => {
                why.push(format!("{} {} {v:.3} ms ≥ {} ms", o.metric, o.percentile, o.bound_ms));
            }
            None => why.push(format!("{} {} has no value", o.metric, o.percentile)),
        }
    }
    let (done, failed) = (s["completed"].as_u64().unwrap_or(0), s["failed"].as_u64().unwrap_or(0));
    let share = if done + failed > 0 { failed as f64 / (done + failed) as f64 } else { 1.0 };
    if share > max_err {
        why.push(format!("{:.1}% of requests failed", share * 100.0));
        limit = Some("errors");
    }
    if let (Some(r), Some(ach)) = (rate, s["achieved_send_rate"].as_f64()) {
        if ach < 0.95 * r {
            why.push(format!("the client sent only {ach:.2} of {r} req/s"));
            limit = Some("client");
        }
    }
    (why.is_empty(), why, limit)
}

pub fn slo(a: SloArgs) -> Result<ExitCode> {
    let spec = a
        .run
        .slo
        .clone()
        .context("give the objectives with --slo, e.g. --slo ttft:p99<500ms,tpot:p99<40ms")?;
    let objectives = parse_objectives(&spec)?;
    let by_rate = match a.search.as_str() {
        "rate" => true,
        "concurrency" => false,
        s => bail!("--search {s:?}: expected rate or concurrency"),
    };
    if !(a.tolerance > 0.0 && a.tolerance < 1.0 && a.start > 0.0 && a.start <= a.max) {
        bail!("--tolerance must be in (0, 1) and 0 < --start <= --max");
    }
    let dir = out_dir(&a.run, "slo");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut percentiles: Vec<f64> = a.run.percentiles.clone();
    for o in &objectives {
        if ![50.0, 90.0, 95.0, 99.0, 99.9].contains(&o.pct) && !percentiles.contains(&o.pct) {
            percentiles.push(o.pct);
        }
    }
    let mut probes: Vec<Value> = Vec::new();
    let mut probe = |x: f64| -> Result<(bool, Option<&'static str>)> {
        let i = probes.len();
        let x = if by_rate { (x * 1000.0).round() / 1000.0 } else { x.round().max(1.0) };
        let d =
            dir.join(format!("probe-{i:02}-{}-{x}", if by_rate { "rate" } else { "concurrency" }));
        eprintln!("slo probe {}: {} {x}", i + 1, if by_rate { "rate" } else { "concurrency" });
        let s = step(&a.run, &d, a.run.seed.wrapping_add(i as u64 * 7919), |r| {
            r.slo = None;
            r.percentiles.clone_from(&percentiles);
            r.num_requests = Some(a.min_requests);
            r.duration = None;
            if by_rate {
                r.request_rate = Some(x);
                r.concurrency = None;
            } else {
                r.concurrency = Some(x as usize);
                r.request_rate = None;
            }
        })?;
        let (ok, why, limit) = verdict(&s, &objectives, a.max_error_rate, by_rate.then_some(x));
        let mut row = json!({"value": x, "pass": ok, "dir": d.display().to_string(), "why": why, "limited_by": limit});
        for o in &objectives {
            row[format!("{}_{}", o.metric, o.percentile)] = s[&o.metric][&o.percentile].clone();
        }
        probes.push(row);
        Ok((ok, limit))
    };
    // Bracket: double from --start until a probe fails (or --max); then bisect.
    let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
    let mut x = a.start;
    let mut limits = Vec::new();
    let mut n = 0;
    while n < a.max_probes {
        n += 1;
        let (ok, lim) = probe(x)?;
        limits.extend(lim);
        if ok {
            lo = Some(x);
            if x >= a.max {
                break;
            }
            x = (x * 2.0).min(a.max);
        } else {
            hi = Some(x);
            break;
        }
    }
    if let (Some(_), Some(_)) = (lo, hi) {
        while n < a.max_probes {
            let (l, h) = (lo.unwrap_or(0.0), hi.unwrap_or(0.0));
            let narrow = if by_rate { (h - l) / h <= a.tolerance } else { h - l <= 1.0 };
            if narrow {
                break;
            }
            n += 1;
            let mid = if by_rate { f64::midpoint(l, h) } else { f64::midpoint(l, h).floor() };
            let (ok, lim) = probe(mid)?;
            limits.extend(lim);
            if ok {
                lo = Some(mid);
            } else {
                hi = Some(mid);
            }
        }
    }
    let mut notes = Vec::new();
    if limits.contains(&"client") {
        notes.push("some probes were limited by the client (it could not send at the requested rate): the answer may be the client's limit, not the server's".to_owned());
    }
    if limits.contains(&"errors") {
        notes.push(format!(
            "some probes failed on errors (more than {:.1}% of requests failed)",
            a.max_error_rate * 100.0
        ));
    }
    if hi.is_none() {
        notes.push(format!(
            "every probe up to {} passed: the answer is a lower bound",
            lo.unwrap_or(a.max)
        ));
    }
    if lo.is_none() {
        notes.push(format!("the first probe ({}) already failed: lower --start", a.start));
    }
    let summary = json!({
        "schema_version": 1,
        "search": a.search,
        "objectives": spec,
        "tolerance": a.tolerance,
        "requests_per_probe": a.min_requests,
        "answer": lo,
        "first_failing": hi,
        "probes": probes,
        "notes": notes,
    });
    std::fs::write(dir.join("slo.json"), serde_json::to_string_pretty(&summary)? + "\n")?;
    println!("\n== Quetta SLO search: {spec} ==");
    println!("{:>12}  {:<6} why", a.search, "result");
    for p in summary["probes"].as_array().into_iter().flatten() {
        println!(
            "{:>12}  {:<6} {}",
            num(&p["value"]),
            if p["pass"].as_bool() == Some(true) { "pass" } else { "FAIL" },
            p["why"]
                .as_array()
                .map(|w| w.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "))
                .unwrap_or_default()
        );
    }
    match lo {
        Some(v) => println!(
            "answer     {} {v} meets every objective{}",
            a.search,
            hi.map_or(String::new(), |h| format!(" ({h} does not)"))
        ),
        None => println!("answer     none: even {} fails", a.start),
    }
    for n in &notes {
        println!("note       {n}");
    }
    println!("results    {}", dir.display());
    Ok(if lo.is_some() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

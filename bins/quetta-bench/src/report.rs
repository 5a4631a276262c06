//! `quetta-bench report DIR`: show a finished run, or rebuild the summary of one that died.

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use quetta_metrics::SloSet;
use quetta_report::{rebuild, render_summary, ClientStats, Summary, Target};

/// Write report.html and report.pdf for a run or sweep directory.
fn write_reports(dir: &Path) -> Result<()> {
    let res = quetta_report::html::load(dir).context("reading the results")?;
    let html = dir.join("report.html");
    fs::write(&html, quetta_report::html::render(&res))
        .with_context(|| format!("cannot write {}", html.display()))?;
    let pdf = dir.join("report.pdf");
    fs::write(&pdf, quetta_report::pdf::render(&res)?)
        .with_context(|| format!("cannot write {}", pdf.display()))?;
    println!("report     {} and {}", html.display(), pdf.display());
    Ok(())
}

pub fn main(dir: &Path) -> Result<ExitCode> {
    let sum_path = dir.join("summary.json");
    let sweep_path = dir.join("sweep.json");
    if sweep_path.exists() {
        let sw: serde_json::Value = serde_json::from_str(&fs::read_to_string(&sweep_path)?)
            .with_context(|| format!("{} is not a Quetta sweep", sweep_path.display()))?;
        let kind = sw["kind"].as_str().unwrap_or("concurrency");
        let steps: Vec<serde_json::Value> = sw["steps"].as_array().cloned().unwrap_or_default();
        println!("\n== Quetta sweep ==\n{}", crate::sweep::table(kind, &steps));
        write_reports(dir)?;
        return Ok(ExitCode::SUCCESS);
    }
    if sum_path.exists() {
        let s: Summary = serde_json::from_str(&fs::read_to_string(&sum_path)?)
            .with_context(|| format!("{} is not a Quetta summary", sum_path.display()))?;
        println!("{}", render_summary(&s, Some(dir)));
        write_reports(dir)?;
        return Ok(ExitCode::SUCCESS);
    }
    // No summary: the run was killed. Rebuild from run.json and requests.jsonl.
    let run_path = dir.join("run.json");
    let run: serde_json::Value = match fs::read_to_string(&run_path) {
        Ok(t) => serde_json::from_str(&t)
            .with_context(|| format!("{} is not valid JSON", run_path.display()))?,
        Err(_) => serde_json::json!({}),
    };
    let slos: Option<SloSet> =
        run["slo"].as_str().map(str::parse).transpose().context("run.json: slo")?;
    let percentiles: Vec<f64> = run["percentiles"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default();
    let jsonl = dir.join("requests.jsonl");
    let rb = rebuild(&jsonl, slos)?;
    let mut notes = vec![format!(
        "rebuilt by `quetta-bench report` from {} records in requests.jsonl: the run did not finish (no summary.json)",
        rb.records
    )];
    if rb.torn_last_line {
        notes.push("the last line of requests.jsonl was cut off mid-write and was left out".into());
    }
    notes.push("client CPU and memory are unknown for a rebuilt run".into());
    let metrics = rb.aggregate.summary(&percentiles);
    let target: Target = serde_json::from_value(run["target"].clone()).unwrap_or(Target {
        backend: "unknown".into(),
        base_url: "unknown".into(),
        endpoint: "chat".into(),
        model: "unknown".into(),
        embedded_simulator: false,
    });
    let sent = rb.records_sent;
    let s = Summary {
        schema_version: quetta_report::SCHEMA_VERSION,
        tool: "quetta-bench".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        started_at: run["started_at"].as_str().unwrap_or("1970-01-01T00:00:00Z").into(),
        partial: true,
        config: run.get("config").cloned().unwrap_or_else(|| serde_json::json!({})),
        target,
        planned: run["config"]["num_requests"].as_u64(),
        dispatched: metrics.completed + metrics.failed,
        sent,
        warmup_completed: 0,
        warmup_failed: 0,
        requested_rate: run["config"]["request_rate"].as_f64(),
        achieved_send_rate: None,
        cancelled_in_drain: 0,
        metrics,
        client: ClientStats::default(),
        notes,
        sessions: None,
        server_metrics: None,
        steady_state: None,
        gpu: None,
        aggregate: rb.aggregate,
    };
    fs::write(&sum_path, serde_json::to_string_pretty(&s)? + "\n")
        .with_context(|| format!("cannot write {}", sum_path.display()))?;
    println!("{}", render_summary(&s, Some(dir)));
    Ok(ExitCode::SUCCESS)
}

//! `cargo xtask bench soak [--rate R] [--requests N]`: a soak of the client against the
//! embedded simulator, at a constant R requests/s (2,000) until N requests (1,000,000) are
//! sent (8-token answers, TTFT 2 ms, ITL 1 ms: a load this 2-core machine sustains without
//! the client setting the pace). The client's resident memory is sampled from
//! /proc every half second; the table gives its median in each tenth of the run, the slope of a least-squares
//! line over the last nine tenths (MiB per hour) and the high-water mark, and checks that
//! every request is in requests.jsonl and the summary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

fn vm_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

/// Least-squares slope of (t, y).
fn slope(p: &[(f64, f64)]) -> f64 {
    let n = p.len() as f64;
    let (mt, my) = (p.iter().map(|x| x.0).sum::<f64>() / n, p.iter().map(|x| x.1).sum::<f64>() / n);
    let cov: f64 = p.iter().map(|(t, y)| (t - mt) * (y - my)).sum();
    let var: f64 = p.iter().map(|(t, _)| (t - mt).powi(2)).sum();
    if var > 0.0 {
        cov / var
    } else {
        0.0
    }
}

pub fn bench(root: &Path, rate: u64, requests: u64) -> Result<()> {
    let bin = crate::runs::release_bench(root)?;
    let dir = root.join("target/xtask/soak");
    let _ = std::fs::remove_dir_all(&dir);
    let secs = requests.div_ceil(rate.max(1));
    let mut child = Command::new(&bin)
        .args(["run", "--request-rate", &rate.to_string(), "--arrival", "constant"])
        .args(["--duration", &format!("{secs}s"), "--input-len", "16", "--output-len", "8"])
        .args(["--sim-ttft-ms", "2", "--sim-itl-ms", "1", "--quiet", "--output-dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .context("quetta-bench")?;
    let pid = child.id();
    let t0 = Instant::now();
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut hwm = 0;
    while child.try_wait()?.is_none() {
        std::thread::sleep(Duration::from_millis(500));
        if let Some(rss) = vm_kib(pid, "VmRSS:") {
            samples.push((t0.elapsed().as_secs_f64(), rss as f64 / 1024.0));
        }
        hwm = hwm.max(vm_kib(pid, "VmHWM:").unwrap_or(0));
    }
    if !child.wait()?.success() {
        bail!("the soak run failed");
    }
    let wall = t0.elapsed().as_secs_f64();
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json"))?)?;
    let lines = std::io::BufRead::lines(std::io::BufReader::new(std::fs::File::open(
        dir.join("requests.jsonl"),
    )?))
    .count() as u64;
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let (done, failed, dispatched) = (n("completed"), n("failed"), n("dispatched"));
    if done + failed != dispatched || dispatched != lines {
        bail!("requests lost: {done} + {failed} of {dispatched} dispatched, {lines} records");
    }
    let tenth = |k: usize| {
        let (a, b) = (secs as f64 * k as f64 / 10.0, secs as f64 * (k + 1) as f64 / 10.0);
        let mut v: Vec<f64> =
            samples.iter().filter(|(t, _)| (a..b).contains(t)).map(|x| x.1).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let late: Vec<(f64, f64)> =
        samples.iter().copied().filter(|(t, _)| *t >= secs as f64 / 10.0).collect();
    let per_hour = slope(&late) * 3600.0;
    println!(
        "{dispatched} requests at {rate}/s ({secs} s asked, {wall:.0} s wall): {done} completed, {failed} failed, every one in requests.jsonl; achieved send rate {} req/s; read lag p99 {} ms\n",
        s["achieved_send_rate"], s["client_overhead"]["read_lag_ms"]["p99"]
    );
    println!("| tenth of the run | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let row: Vec<String> = (0..10).map(|k| format!("{:.1}", tenth(k))).collect();
    println!("| RSS median (MiB) | {} |", row.join(" | "));
    println!(
        "\nslope over the last nine tenths: {per_hour:+.2} MiB/hour ({:+.3} KiB per 1,000 requests); high-water mark {:.1} MiB",
        per_hour * 1024.0 / (rate as f64 * 3.6),
        hwm as f64 / 1024.0
    );
    Ok(())
}

//! `cargo xtask bench merge [--records N]`: the merge of a sharded run's directories at
//! scale. One real run of the embedded simulator (128-token streams) gives the record, the
//! manifest and the summary; three shard directories hold N records between them (1,000,000
//! by default, the record's gaps and lengths, ids round-robin, 10,000 requests/s); then
//! `quetta-bench merge` runs under `/usr/bin/time`, and the table gives its wall time and
//! peak RSS.

use crate::runs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value};

fn read(p: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
    Ok(serde_json::from_str(&text)?)
}

/// Write shard `k` of 3 with its share of `n` records.
fn shard(dir: &Path, k: u64, n: u64, src: &Path, rec: &Value) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let share = n / 3 + u64::from(k < n % 3);
    let info = json!({"index": k, "count": 3, "planned": share, "started_unix_ns": 1_796_000_000_000_000_000i64});
    for f in ["run.json", "summary.json"] {
        let mut v = read(&src.join(f))?;
        v["shard"] = info.clone();
        std::fs::write(dir.join(f), serde_json::to_string_pretty(&v)?)?;
    }
    let base = rec["intended_offset_ms"].as_f64().unwrap_or(0.0);
    let mut w = std::io::BufWriter::new(std::fs::File::create(dir.join("requests.jsonl"))?);
    let mut r = rec.clone();
    for j in 0..share {
        let i = k + 3 * j;
        let t = i as f64 * 0.1;
        r["id"] = json!(i);
        for f in [
            "intended_offset_ms",
            "started_offset_ms",
            "sent_offset_ms",
            "first_token_offset_ms",
            "end_offset_ms",
        ] {
            if let Some(v) = rec[f].as_f64() {
                r[f] = json!(((v - base + t) * 1e3).round() / 1e3);
            }
        }
        serde_json::to_writer(&mut w, &r)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(())
}

pub fn bench(root: &Path, n: u64) -> Result<()> {
    let bin = runs::release_bench(root)?;
    let t = root.join("target/xtask/merge");
    let _ = std::fs::remove_dir_all(&t);
    let src = t.join("src");
    let rec = runs::source_run(&bin, &src)?;
    let dirs: Vec<_> = (0..3).map(|k| t.join(format!("shard-{k}"))).collect();
    for (k, d) in dirs.iter().enumerate() {
        shard(d, k as u64, n, &src, &rec)?;
    }
    let bytes: u64 = dirs
        .iter()
        .filter_map(|d| std::fs::metadata(d.join("requests.jsonl")).ok())
        .map(|m| m.len())
        .sum();
    let out = t.join("merged");
    let mut args: Vec<&std::ffi::OsStr> = vec!["merge".as_ref()];
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    args.extend(["--output-dir".as_ref(), out.as_os_str()]);
    let (wall, rss) = runs::timed(&bin, &args)?;
    let merged = read(&out.join("summary.json"))?;
    println!("| records | requests.jsonl | merge wall | peak RSS | records/s | merged completed |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {n} | {:.2} GB | {wall:.1} s | {:.0} MiB | {:.0} | {} |",
        bytes as f64 / 1e9,
        rss,
        n as f64 / wall.max(1e-9),
        merged["completed"]
    );
    Ok(())
}

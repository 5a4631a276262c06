//! `cargo xtask bench report [--records N]`: what reads a big run back. One real run of the
//! embedded simulator (128-token streams) gives the record and the manifest; two run
//! directories hold N records each (1,000,000 by default, 10,000 requests/s, TTFTs spread,
//! the second's 5 % slower); then under `/usr/bin/time` (wall time, peak RSS):
//! `report` rebuilding the summary from the records (summary, HTML and PDF), `report` with
//! the summary there (HTML and PDF), `compare` of the two, and `export` to Parquet, CSV and
//! vLLM's result file. Prints a Markdown table for docs/PERFORMANCE.md.

use anyhow::Result;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

use crate::runs;

/// Write a run directory of `n` records made from `rec`, TTFTs scaled by `slower`.
fn run_dir(dir: &Path, n: u64, src: &Path, rec: &Value, slower: f64) -> Result<u64> {
    std::fs::create_dir_all(dir)?;
    std::fs::copy(src.join("run.json"), dir.join("run.json"))?;
    let base = rec["intended_offset_ms"].as_f64().unwrap_or(0.0);
    let path = dir.join("requests.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut r = rec.clone();
    let ttft = rec["ttft_ms"].as_f64().unwrap_or(0.0);
    for i in 0..n {
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
        // a spread of TTFTs, so that the comparison has something to test
        let spread = 1.0 + (i * 7919 % 1000) as f64 / 2000.0;
        r["ttft_ms"] = json!((ttft * spread * slower * 1e3).round() / 1e3);
        serde_json::to_writer(&mut w, &r)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(std::fs::metadata(&path)?.len())
}

/// [`runs::timed`] of string arguments.
fn timed(bin: &Path, args: &[&str]) -> Result<(f64, f64)> {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    runs::timed(bin, &args)
}

pub fn bench(root: &Path, n: u64) -> Result<()> {
    let bin = runs::release_bench(root)?;
    let t = root.join("target/xtask/report");
    let _ = std::fs::remove_dir_all(&t);
    let src = t.join("src");
    let rec = runs::source_run(&bin, &src)?;
    let (a, b) = (t.join("a"), t.join("b"));
    let bytes = run_dir(&a, n, &src, &rec, 1.0)?;
    run_dir(&b, n, &src, &rec, 1.05)?;
    // the same record as schema 1 wrote it (gaps in ms), for the size it had
    let mut old = rec.clone();
    if let Some(g) = old.as_object_mut().and_then(|o| o.remove("itl_us")) {
        let ms: Vec<f64> =
            g.as_array().into_iter().flatten().filter_map(Value::as_f64).map(|x| x / 1e3).collect();
        old["itl_ms"] = json!(ms);
    }
    let (new_len, old_len) =
        (serde_json::to_string(&rec)?.len(), serde_json::to_string(&old)?.len());
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut rows = vec![
        ("report, rebuilding the summary (summary, HTML, PDF)", timed(&bin, &["report", &s(&a)])?),
        ("report, summary present (HTML, PDF)", timed(&bin, &["report", &s(&a)])?),
    ];
    timed(&bin, &["report", &s(&b)])?;
    rows.push(("compare of two runs", timed(&bin, &["compare", &s(&a), &s(&b)])?));
    for f in ["parquet", "csv", "vllm"] {
        let out = s(&t.join(format!("export.{f}")));
        let label = match f {
            "parquet" => "export parquet",
            "csv" => "export csv",
            _ => "export vllm",
        };
        rows.push((label, timed(&bin, &["export", &s(&a), "--format", f, "--output", &out])?));
    }
    println!(
        "{n} records of 128-token streams: requests.jsonl {:.2} GB ({new_len} bytes a record; {old_len} as schema 1 wrote it, {:.2} GB)\n",
        bytes as f64 / 1e9,
        old_len as f64 * n as f64 / 1e9
    );
    println!("| command | wall | peak RSS |");
    println!("|---|---|---|");
    for (k, (wall, rss)) in rows {
        println!("| {k} | {wall:.1} s | {rss:.0} MiB |");
    }
    Ok(())
}

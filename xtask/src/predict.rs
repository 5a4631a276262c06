//! `cargo xtask bench predict`: `quetta-sim predict` of one hour of Poisson load at
//! 10 requests/s (36,000 requests of 128–384 prompt and 64–192 output tokens) against the
//! twin of the llama.cpp server calibrated on this machine (`fixtures/twin/`), made 100
//! times faster with 64 slots so that it keeps up. Prompts are synthetic without a
//! tokenizer: building 36,000 exact prompts with one (`--tokenizer`) takes 17 s on this
//! 2-core machine, a cost of the workload crate that a real run pays as well.

use anyhow::Result;
use std::path::Path;

pub fn bench(root: &Path) -> Result<()> {
    let bin = crate::runs::release(root, "quetta-sim-bin", "quetta-sim")?;
    let out = std::env::temp_dir().join(format!("quetta-bench-predict-{}", std::process::id()));
    let model = root.join("fixtures/twin/llama-smollm2-4slots.json");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let args = [
        "predict",
        "--server-model",
        &s(&model),
        "--max-seqs",
        "64",
        "--speed",
        "100x",
        "--request-rate",
        "10",
        "--arrival",
        "poisson",
        "--duration",
        "3600",
        "--input-len",
        "256",
        "--output-len",
        "128",
        "--random-range-ratio",
        "0.5",
        "--ignore-eos",
        "--seed",
        "1",
        "--quiet",
        "--overwrite",
        "--output-dir",
        &s(&out),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let (wall, rss) = crate::runs::timed(&bin, &args)?;
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json"))?)?;
    println!(
        "quetta-sim predict, 1 h of Poisson load at 10 req/s: {} requests completed, {:.0} s of virtual time, in {wall:.2} s wall, peak RSS {rss:.0} MiB",
        summary["completed"], summary["duration_s"].as_f64().unwrap_or(0.0)
    );
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

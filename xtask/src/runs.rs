//! What the benchmarks of big run directories share: the release `quetta-bench`, a source
//! run of the embedded simulator whose record they copy, and a command timed under
//! `/usr/bin/time`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Build the release `quetta-bench`; its path.
pub fn release_bench(root: &Path) -> Result<PathBuf> {
    release(root, "quetta-bench", "quetta-bench")
}

/// Build package `package` in release; the path of its binary `bin`.
pub fn release(root: &Path, package: &str, bin: &str) -> Result<PathBuf> {
    let st = Command::new("cargo")
        .args(["build", "--release", "-q", "-p", package])
        .current_dir(root)
        .status()?;
    if !st.success() {
        bail!("cargo build failed");
    }
    Ok(root.join("target/release").join(bin))
}

/// Run 3 requests of 128-token streams against the embedded simulator into `src`; the first
/// record (its `run.json` and `summary.json` stay in `src`).
pub fn source_run(bin: &Path, src: &Path) -> Result<Value> {
    let o = Command::new(bin)
        .args(["run", "--num-requests", "3", "--output-len", "128", "--ignore-eos", "--quiet"])
        .arg("--output-dir")
        .arg(src)
        .output()?;
    if !o.status.success() {
        bail!("the source run failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    let text = std::fs::read_to_string(src.join("requests.jsonl"))?;
    Ok(serde_json::from_str(text.lines().next().context("no record")?)?)
}

/// Run `bin args` under `/usr/bin/time`: (wall s, peak RSS MiB).
pub fn timed(bin: &Path, args: &[&std::ffi::OsStr]) -> Result<(f64, f64)> {
    let o = Command::new("/usr/bin/time")
        .args(["-f", "%e %M"])
        .arg(bin)
        .args(args)
        .output()
        .context("/usr/bin/time (Debian's time package) measures each command")?;
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        bail!("{args:?} failed: {err}");
    }
    let last = err.lines().last().unwrap_or_default();
    let mut it = last.split_whitespace();
    let wall: f64 = it.next().unwrap_or("0").parse()?;
    let rss: f64 = it.next().unwrap_or("0").parse()?;
    Ok((wall, rss / 1024.0))
}

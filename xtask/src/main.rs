//! `cargo xtask`: project automation.
//!
//! `cargo xtask bench overhead` measures the client's own cost, with the client
//! (`quetta-bench`) and the simulator (`quetta-sim`) as separate release processes on this
//! machine, and prints a Markdown table for docs/PERFORMANCE.md (also written to
//! target/xtask/overhead.json). `--sim-nice N` runs the simulator under `nice -n N`, so that
//! on a small machine the client is measured as if the server had a machine of its own.
//!
//! `cargo xtask compare-vllm [URL]` runs Quetta and (when installed) `vllm bench serve` in
//! turn against the real llama.cpp server and tabulates both beside the server's own timing.
//!
//! `cargo xtask fuzz [--minutes N]` runs every fuzz target (see `fuzz.rs`).
//!
//! `cargo xtask bench protocols [--rounds N] [--sim-nice N] [--protocol P]` (or `bench overhead
//! --protocol P`, chat and P over 5 rounds) measures the client's CPU per
//! streamed request of each streamed protocol beside chat's (see `protocols.rs`).
//!
//! `cargo xtask bench merge [--records N]` times the merge of three shards' N records (see
//! `merge.rs`).
//!
//! `cargo xtask bench report [--records N]` times what reads a big run back: report,
//! compare and exports of N records (see `report.rs`).
//!
//! `cargo xtask bench soak [--rate R] [--requests N]` records the client's memory over a
//! soak of N requests (see `soak.rs`).
//!
//! `cargo xtask embed-check` builds and runs `examples/embed` as a program outside the
//! workspace that depends on the `quetta` crate by path, as an embedder's would.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

mod arch;
mod fuzz;
mod merge;
mod predict;
mod protocols;
mod report;
mod runs;
mod soak;
mod vllm;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["bench", "overhead"] => overhead(0),
        ["bench", "overhead", "--protocol", p] => protocols::bench_all(&root(), 5, 0, Some(p)),
        ["bench", "overhead", "--sim-nice", n] => overhead(n.parse().context("--sim-nice N")?),
        ["bench", "merge"] => merge::bench(&root(), 1_000_000),
        ["bench", "merge", "--records", n] => {
            merge::bench(&root(), n.parse().context("--records N")?)
        }
        ["bench", "report"] => report::bench(&root(), 1_000_000),
        ["bench", "report", "--records", n] => {
            report::bench(&root(), n.parse().context("--records N")?)
        }
        ["bench", "predict"] => predict::bench(&root()),
        ["bench", "protocols", rest @ ..] => {
            let flag = |name: &str, default: usize| -> Result<usize> {
                match rest.iter().position(|a| *a == name) {
                    Some(i) => Ok(rest.get(i + 1).context("a number after the flag")?.parse()?),
                    None => Ok(default),
                }
            };
            let only = rest.iter().position(|a| *a == "--protocol").and_then(|i| rest.get(i + 1));
            protocols::bench_all(
                &root(),
                flag("--rounds", 3)?,
                u32::try_from(flag("--sim-nice", 0)?)?,
                only.copied(),
            )
        }
        ["bench", "soak", rest @ ..] => {
            let flag = |name: &str, default: u64| -> Result<u64> {
                match rest.iter().position(|a| *a == name) {
                    Some(i) => rest
                        .get(i + 1)
                        .context("a number after the flag")?
                        .parse()
                        .context("a number"),
                    None => Ok(default),
                }
            };
            soak::bench(&root(), flag("--rate", 2000)?, flag("--requests", 1_000_000)?)
        }
        ["embed-check"] => embed_check(),
        ["fuzz", ..] => fuzz::main(&args[1..]),
        ["compare-vllm"] => vllm::compare(None, &root()),
        ["compare-vllm", url] => vllm::compare(Some(url), &root()),
        _ => {
            eprintln!("usage: cargo xtask bench overhead [--sim-nice N] | cargo xtask bench merge [--records N] | cargo xtask bench report [--records N] | cargo xtask bench soak [--rate R] [--requests N] | cargo xtask bench predict | cargo xtask bench overhead --protocol P | cargo xtask bench protocols [--rounds N] [--sim-nice N] [--protocol P] | cargo xtask embed-check | cargo xtask compare-vllm [LLAMA_URL] | cargo xtask fuzz [--minutes N] [--jobs J] [--seed] [TARGET ...]");
            std::process::exit(2);
        }
    }
}

/// Build `examples/embed`'s program as a crate of its own outside the workspace (a path
/// dependency on `crates/quetta` with its default features only, no feature of another
/// member unified in) and run it. It takes the workspace's lock file and build profiles, and
/// builds into the workspace's target directory, so dependencies built alike are reused:
/// what is checked is the facade's API and features, not a second build of the world.
fn embed_check() -> Result<()> {
    let root = root();
    let dir = root.join("target/embed-check/crate");
    std::fs::create_dir_all(dir.join("src"))?;
    let workspace = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let profiles = workspace.find("\n[profile.").map_or("", |i| &workspace[i..]);
    let manifest = format!(
        "[package]\nname = \"outside\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\nquetta = {{ path = {:?} }}\ntokio = {{ version = \"1\", features = [\"sync\", \"time\"] }}\n{profiles}",
        root.join("crates/quetta").display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))?;
    std::fs::copy(root.join("examples/embed/src/main.rs"), dir.join("src/main.rs"))?;
    let st = Command::new("cargo")
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", root.join("target"))
        .args(["run", "-q"])
        .status()
        .context("cargo run")?;
    if !st.success() {
        bail!("the outside crate failed to build or run");
    }
    println!(
        "embed-check: a crate outside the workspace ran a benchmark and a sweep through quetta"
    );
    Ok(())
}

struct Sim {
    child: Child,
    url: String,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the simulator; with `nice > 0` under `nice -n N`, so the client gets the CPU first,
/// as it would with the server on a machine of its own (the simulator's records stay true).
fn start_sim(bin: &Path, nice: u32, args: &[&str]) -> Result<Sim> {
    let mut cmd = if nice > 0 {
        let mut c = Command::new("nice");
        c.args(["-n", &nice.to_string()]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    let mut child = cmd
        .args(["--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .context("start quetta-sim")?;
    let out = child.stdout.take().context("sim stdout")?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    let url =
        line.split_whitespace().find(|w| w.starts_with("http://")).context("sim URL")?.to_owned();
    Ok(Sim { child, url })
}

fn bench(bin: &Path, url: &str, dir: &Path, args: &[&str]) -> Result<Value> {
    let o = Command::new(bin)
        .args([
            "run",
            "--base-url",
            url,
            "--model",
            "sim",
            "--quiet",
            "--overwrite",
            "--output-dir",
        ])
        .arg(dir)
        .args(args)
        .output()
        .context("run quetta-bench")?;
    if !o.status.success() {
        bail!("quetta-bench {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json"))?)?)
}

/// The Little's-law check and the client-overhead verdict of one benchmark run, as a row:
/// the runner's own in-flight count against throughput × (queue + E2E + turnaround or
/// release), within 5 % (docs/METRICS.md, Client overhead).
fn little(c: &mut Ctx, name: &str, s: &Value) {
    let (runner, latency) = (
        f(s, "/client_overhead/in_flight_runner"),
        f(s, "/client_overhead/in_flight_from_latency"),
    );
    let err = (latency - runner).abs() / runner * 100.0;
    let share = f(s, "/client_overhead/client_share");
    let paced = s.pointer("/client_overhead/paced_by_client").and_then(Value::as_bool);
    c.rows.push((
        format!("Little's law, {name}: in flight (runner) vs throughput × cycle; client share, paced_by_client"),
        format!(
            "{runner:.2} vs {latency:.2} ({err:.1} %); {}, {}",
            if share.is_nan() { "-".into() } else { format!("{:.1} %", share * 100.0) },
            paced.map_or("-".into(), |p| p.to_string())
        ),
        "within 5 %".into(),
    ));
    c.json.insert(format!("little_error_pct_{name}"), err.into());
}

fn f(v: &Value, path: &str) -> f64 {
    v.pointer(path).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn p(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q).ceil() as usize).saturating_sub(1)]
}

/// Highest sustained rate: closed loop against a zero-delay simulator.
fn max_rate(c: &mut Ctx) -> Result<()> {
    let sim = start_sim(&c.sim, c.nice, &["--ttft-ms", "0", "--itl-ms", "0"])?;
    let s = bench(
        &c.bench,
        &sim.url,
        &c.work.join("max"),
        &[
            "--concurrency",
            "64",
            "--num-requests",
            "6000",
            "--warmup",
            "64",
            "--input-len",
            "32",
            "--output-len",
            "128",
            "--threads",
            "1",
        ],
    )?;
    little(c, "closed loop at 64, zero delay", &s);
    let req_s = f(&s, "/request_throughput");
    let chunks = f(&s, "/itl_ms/count") + f(&s, "/completed");
    let dur = f(&s, "/duration_s");
    let cpu = f(&s, "/client/cpu_user_s") + f(&s, "/client/cpu_system_s");
    let per_req_ms = cpu * 1e3 / f(&s, "/completed");
    c.rows.push((
        "highest sustained request rate (128-token streams, 1 client thread)".into(),
        format!("{req_s:.0} req/s"),
        "-".into(),
    ));
    c.rows.push((
        "streamed chunk rate".into(),
        format!("{:.0} chunks/s", chunks / dur),
        "-".into(),
    ));
    c.rows.push((
        "client CPU per streamed 128-token request".into(),
        format!("{per_req_ms:.3} ms"),
        "< 0.3 ms".into(),
    ));
    c.json.insert("max_request_rate".into(), req_s.into());
    c.json.insert("chunk_rate".into(), (chunks / dur).into());
    c.json.insert("client_cpu_ms_per_request".into(), per_req_ms.into());

    Ok(())
}

/// Dispatch lag at 1k and 5k requests/s (open loop, constant arrivals, short answers).
fn dispatch_lag(c: &mut Ctx) -> Result<()> {
    for rate in [1000, 5000] {
        let sim = start_sim(&c.sim, c.nice, &["--ttft-ms", "1", "--itl-ms", "1"])?;
        let n = (rate * 4).to_string();
        let s = bench(
            &c.bench,
            &sim.url,
            &c.work.join(format!("lag{rate}")),
            &[
                "--request-rate",
                &rate.to_string(),
                "--arrival",
                "constant",
                "--num-requests",
                &n,
                "--input-len",
                "8",
                "--output-len",
                "4",
            ],
        )?;
        little(c, &format!("open loop at {rate} req/s"), &s);
        let (p50, p99) = (f(&s, "/schedule_lag_ms/p50"), f(&s, "/schedule_lag_ms/p99"));
        c.rows.push((
            format!("dispatch (schedule) lag at {rate} req/s, p50 / p99"),
            format!("{p50:.3} / {p99:.3} ms"),
            if rate == 5000 { "p99 < 1 ms".into() } else { "-".into() },
        ));
        c.rows.push((
            format!("achieved send rate at {rate} req/s"),
            format!("{:.1} req/s", f(&s, "/achieved_send_rate")),
            "-".into(),
        ));
        c.json.insert(format!("lag_{rate}_p50_ms"), p50.into());
        c.json.insert(format!("lag_{rate}_p99_ms"), p99.into());
        c.json.insert(format!("achieved_{rate}"), f(&s, "/achieved_send_rate").into());
    }
    Ok(())
}

/// Timing error at 1,024 concurrent streams: client records against the simulator's.
fn timing_error(c: &mut Ctx) -> Result<()> {
    let rec = c.work.join("sim-records.jsonl");
    let _ = std::fs::remove_file(&rec);
    let sim = start_sim(
        &c.sim,
        c.nice,
        &["--ttft-ms", "50", "--itl-ms", "20", "--record", rec.to_str().unwrap()],
    )?;
    let dir = c.work.join("streams1024");
    let s = bench(
        &c.bench,
        &sim.url,
        &dir,
        &[
            "--concurrency",
            "1024",
            "--num-requests",
            "2048",
            "--warmup",
            "1024",
            "--input-len",
            "16",
            "--output-len",
            "32",
        ],
    )?;
    drop(sim);
    little(c, "closed loop at 1,024 streams", &s);
    let sims: HashMap<u64, Value> = std::fs::read_to_string(&rec)?
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["request_id"].as_u64().map(|id| (id, v)))
        .collect();
    let (mut ttft, mut itl) = (Vec::new(), Vec::new());
    for l in std::fs::read_to_string(dir.join("requests.jsonl"))?.lines() {
        let r: Value = serde_json::from_str(l)?;
        let Some(sv) = r["id"].as_u64().and_then(|id| sims.get(&id)) else { continue };
        let chunks: Vec<f64> = sv["chunk_ns"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        if chunks.is_empty() || r["ttft_ms"].is_null() {
            continue;
        }
        let sim_ttft = (chunks[0] - sv["arrival_ns"].as_f64().unwrap_or(0.0)) / 1e6;
        ttft.push((r["ttft_ms"].as_f64().unwrap_or(0.0) - sim_ttft).abs());
        for (k, g) in r["itl_us"].as_array().into_iter().flatten().enumerate() {
            if k + 1 < chunks.len() {
                let g = g.as_f64().unwrap_or(0.0) / 1e3;
                itl.push((g - (chunks[k + 1] - chunks[k]) / 1e6).abs());
            }
        }
    }
    c.rows.push((
        "timing error at 1,024 streams: |ITL client - server| p50 / p99".into(),
        format!("{:.3} / {:.3} ms", p(itl.clone(), 0.5), p(itl.clone(), 0.99)),
        "p99 < 1 ms".into(),
    ));
    c.rows.push((
        "timing error at 1,024 streams: |TTFT client - server| p50 / p99".into(),
        format!("{:.3} / {:.3} ms", p(ttft.clone(), 0.5), p(ttft.clone(), 0.99)),
        "p99 < 1 ms".into(),
    ));
    c.json.insert("streams1024_itl_err_p99_ms".into(), p(itl, 0.99).into());
    c.json.insert("streams1024_ttft_err_p99_ms".into(), p(ttft, 0.99).into());
    c.json.insert("streams1024_completed".into(), s["completed"].clone());

    Ok(())
}

/// Memory per in-flight stream: peak RSS at 1 and at 1,024 streams.
fn memory(c: &mut Ctx) -> Result<()> {
    let sim = start_sim(&c.sim, c.nice, &["--ttft-ms", "20", "--itl-ms", "40"])?;
    let one = bench(
        &c.bench,
        &sim.url,
        &c.work.join("mem1"),
        &["--concurrency", "1", "--num-requests", "4", "--output-len", "64"],
    )?;
    let many = bench(
        &c.bench,
        &sim.url,
        &c.work.join("mem1024"),
        &["--concurrency", "1024", "--num-requests", "1024", "--output-len", "64"],
    )?;
    let kib = (f(&many, "/client/peak_rss_kib") - f(&one, "/client/peak_rss_kib")) / 1023.0;
    c.rows.push((
        "memory per in-flight stream (peak RSS delta, 1 -> 1,024 streams)".into(),
        format!("{kib:.1} KiB"),
        "< 16 KiB".into(),
    ));
    c.json.insert("kib_per_stream".into(), kib.into());

    Ok(())
}

/// The overhead benchmark's binaries, working directory and results.
struct Ctx {
    bench: PathBuf,
    sim: PathBuf,
    work: PathBuf,
    nice: u32,
    rows: Vec<(String, String, String)>,
    json: serde_json::Map<String, Value>,
}

fn overhead(nice: u32) -> Result<()> {
    let root = root();
    let st = Command::new("cargo")
        .current_dir(&root)
        .args(["build", "--release", "-q", "-p", "quetta-bench", "-p", "quetta-sim-bin"])
        .status()?;
    if !st.success() {
        bail!("release build failed");
    }
    let work = root.join("target/xtask");
    std::fs::create_dir_all(&work)?;
    let mut c = Ctx {
        bench: root.join("target/release/quetta-bench"),
        sim: root.join("target/release/quetta-sim"),
        work,
        nice,
        rows: Vec::new(),
        json: serde_json::Map::new(),
    };
    max_rate(&mut c)?;
    dispatch_lag(&mut c)?;
    timing_error(&mut c)?;
    memory(&mut c)?;
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!("Machine: {cpus} CPUs. Client and simulator are separate release processes on the same machine (simulator at nice {nice}).\n");
    println!("| measurement | result | target |\n|---|---|---|");
    for (a, b, t) in &c.rows {
        println!("| {a} | {b} | {t} |");
    }
    std::fs::write(
        c.work.join(if nice > 0 {
            format!("overhead-nice{nice}.json")
        } else {
            "overhead.json".into()
        }),
        serde_json::to_string_pretty(&Value::Object(c.json))?,
    )?;
    Ok(())
}

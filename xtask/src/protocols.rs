//! `cargo xtask bench protocols [--rounds N] [--sim-nice N] [--protocol P]` (also
//! `cargo xtask bench overhead --protocol P`): the client's CPU per streamed
//! 128-token request for each streamed protocol, against the zero-delay simulator serving
//! it, the protocols alternated over N rounds (default 3), each beside chat's: what each
//! protocol's framing and decoding cost the client. The same measurement as `bench
//! overhead`'s highest sustained rate (64 in flight, one client thread), per protocol.

use std::path::Path;

use anyhow::{bail, Result};

use crate::{bench, f, start_sim};

/// The streamed protocols, chat first (the baseline).
const PROTOCOLS: &[&str] = &[
    "openai-chat",
    "openai-completions",
    "openai-responses",
    "anthropic",
    "llamacpp",
    "tgi-generate",
    "sglang-generate",
    "tensorrt-llm",
    "kserve-grpc",
];

/// One run: client CPU ms per request and requests per second.
fn once(root: &Path, nice: u32, protocol: &str, extra: &[&str]) -> Result<(f64, f64)> {
    // (served as `sim`, the model `bench` names: Triton's path carries it, and a server
    // refuses another)
    let sim = start_sim(
        &root.join("target/release/quetta-sim"),
        nice,
        &["--ttft-ms", "0", "--itl-ms", "0", "--model", "sim"],
    )?;
    let dir = root.join("target/xtask/protocols").join(protocol);
    let mut args = vec![
        "--backend",
        protocol,
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
    ];
    args.extend_from_slice(extra);
    let s = bench(&root.join("target/release/quetta-bench"), &sim.url, &dir, &args)?;
    if f(&s, "/failed") > 0.0 {
        bail!("{protocol}: requests failed");
    }
    let cpu = f(&s, "/client/cpu_user_s") + f(&s, "/client/cpu_system_s");
    Ok((cpu * 1e3 / f(&s, "/completed"), f(&s, "/request_throughput")))
}

fn median(v: Vec<f64>) -> f64 {
    quetta_metrics::stats::median(&v).unwrap_or(f64::NAN)
}

/// Every protocol, or chat and `only`.
pub fn bench_all(root: &Path, rounds: usize, nice: u32, only: Option<&str>) -> Result<()> {
    let protocols: Vec<&str> = match only {
        None => PROTOCOLS.to_vec(),
        Some(p) if PROTOCOLS[1..].contains(&p) => vec![PROTOCOLS[0], p],
        Some(p) => bail!("--protocol {p}: one of {}", PROTOCOLS[1..].join(", ")),
    };
    let st = std::process::Command::new("cargo")
        .current_dir(root)
        .args(["build", "--release", "-q", "-p", "quetta-bench", "-p", "quetta-sim-bin"])
        .status()?;
    if !st.success() {
        bail!("release build failed");
    }
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); protocols.len()];
    let mut rate: Vec<Vec<f64>> = vec![Vec::new(); protocols.len()];
    for round in 0..rounds {
        for (i, p) in protocols.iter().enumerate() {
            let (c, r) = once(root, nice, p, &[])?;
            eprintln!("round {}: {p} {c:.3} ms/request, {r:.0} req/s", round + 1);
            cpu[i].push(c);
            rate[i].push(r);
        }
    }
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!("Machine: {cpus} CPUs; client and simulator are separate release processes (simulator at nice {nice}); 6,000 streamed requests of 128 tokens at 64 in flight, one client thread, per protocol and round; {rounds} rounds, protocols alternated; medians.\n");
    println!("| protocol | client CPU per request | against chat | requests/s | each round (ms) |\n|---|---:|---:|---:|---|");
    let base = median(cpu[0].clone());
    let mut json = serde_json::Map::new();
    for (i, p) in protocols.iter().enumerate() {
        let m = median(cpu[i].clone());
        let rounds: Vec<String> = cpu[i].iter().map(|c| format!("{c:.3}")).collect();
        println!(
            "| {p} | {m:.3} ms | {:+.1} % | {:.0} | {} |",
            (m / base - 1.0) * 100.0,
            median(rate[i].clone()),
            rounds.join(", ")
        );
        json.insert(
            (*p).into(),
            serde_json::json!({"cpu_ms_per_request": cpu[i], "requests_per_s": rate[i]}),
        );
    }
    std::fs::write(
        root.join("target/xtask/protocols.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))?,
    )?;
    Ok(())
}

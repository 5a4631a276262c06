//! The twin against the REAL llama.cpp server (`QUETTA_LLAMA_URL`, started by `.ci/run`; 4
//! slots, SmolLM2-135M on one CPU thread): calibrated by `quetta-probe calibrate`, then two
//! loads the calibration did not run, against the server, the live twin and the predicted
//! twin: a closed loop of 3 with 256-token prompts and 96-token outputs, and an open loop
//! (Poisson) at 70 % of the server's capacity with 512-token prompts. The twin is the
//! calibration as `quetta-probe recheck` finds the server just before the loads (what
//! docs/SIMULATOR.md tells a user to do); TTFT, TPOT and E2E p50 of both twins are held to
//! [`SERVER_BOUND`] of the server's, fixed, and live against predicted to [`TWIN_BOUND`].
//!
//! Not run by `cargo test` (`--ignored` runs it, with `QUETTA_LLAMA_URL`): the twin does not
//! yet meet these bounds on this server. Two attempts on 2026-12-07 (7.3 min with the
//! calibration): closed 3's TPOT p50 +14.7 % and +8.6 % (server 47.9 and 47.7 ms, twin 54.9
//! and 51.8), the Poisson load's TPOT p50 −4.7 % and −17.9 % (server 62.8 and 129.5 ms: 12
//! requests at 0.145 req/s, whose TPOT p50 moves with the draw of arrivals); every other
//! figure within 9 %, live and predicted within 0.1 % of each other. docs/SIMULATOR.md
//! ("What limits the accuracy") says why.

mod twin_common;

use quetta::sim::model::{ServerModel, WhatIf};
use quetta::{Benchmark, Load, Summary, Target, Twin, WorkloadSpec};
use std::path::Path;
use twin_common::{calibrate, recheck, setup, tokenizer};

/// Prompts of exactly `input` tokens (the SmolLM2 tokenizer; the server adds its template)
/// and outputs of exactly `output` (`ignore_eos`).
fn workload(input: u32, output: u32) -> WorkloadSpec {
    let mut w = WorkloadSpec::synthetic(input, output);
    w.range_ratio = Some(0.0);
    w.tokenizer = Some(tokenizer());
    w
}

/// Each load its own prompts, none the server has seen (llama.cpp keeps earlier prompts in
/// its cache, and a cached prompt's TTFT is no prefill); the same for the server and twins.
fn bench(t: Target, w: WorkloadSpec, load: Load, n: u64, seed: u64) -> Benchmark {
    let mut b = Benchmark::new(t).workload(w).load(load).requests(n).seed(seed);
    b.ignore_eos = true;
    b
}

const NAMES: [&str; 3] = ["TTFT p50", "TPOT p50", "E2E p50"];

fn figures(s: &Summary) -> [f64; 3] {
    let m = &s.metrics;
    [
        m.ttft_ms.p50.unwrap_or(f64::NAN),
        m.tpot_ms.p50.unwrap_or(f64::NAN),
        m.e2e_ms.p50.unwrap_or(f64::NAN),
    ]
}

#[test]
#[ignore = "the twin misses these bounds today (see the module's documentation); run by hand"]
fn the_twin_holds_ten_percent_on_a_closed_3_and_a_70_percent_open_loop() {
    let Some((url, d)) = setup("twin-unseen") else { return };
    let model_path = d.join("server-model.json");
    let text = calibrate(&url, &d, &model_path, "32,256,512");
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        * 10;
    let mut attempt = compare(&url, &model_path, &d, salt);
    // One retry, and only where the rechecks show that the server itself changed speed by
    // more than [`MOVED`] during the loads: a twin taken at the speed before cannot match
    // loads run at another.
    if !attempt.failures.is_empty() && attempt.moved > MOVED {
        eprintln!(
            "the server moved by {:.1} % during the loads; once more: {:#?}",
            attempt.moved * 100.0,
            attempt.failures
        );
        attempt = compare(&url, &model_path, &d, salt + 5);
    }
    assert!(attempt.failures.is_empty(), "{:#?}\n{text}", attempt.failures);
    let _ = std::fs::remove_dir_all(&d);
}

/// The bound: each twin's TTFT, TPOT and E2E p50 within 10 % of the server's.
const SERVER_BOUND: f64 = 0.10;
/// Live against predicted, every figure: the same model on a real and a virtual clock.
const TWIN_BOUND: f64 = 0.05;
/// A change of the server's own prefill or decode speed between the rechecks before and
/// after the loads beyond which an attempt that missed is run once more.
const MOVED: f64 = 0.05;
/// The open loop's rate against the server's capacity (the rechecked twin's throughput at
/// closed 4 on the same prompts).
const LOAD: f64 = 0.7;

/// The recheck's prefill and decode factors against the calibration.
fn factors(m: &ServerModel) -> [f64; 2] {
    m.rechecked.map_or([f64::NAN; 2], |r| [r.prefill_factor, r.decode_factor])
}

struct Attempt {
    /// The misses, each with its figures.
    failures: Vec<String>,
    /// How far the server's prefill or decode speed moved between the rechecks.
    moved: f64,
}

/// Runs the same benchmark against the server and the live twin at once (the twin runs in
/// this process, off the server's CPU, and on its own clock: neither slows the other).
fn run_both(server: Benchmark, live: Benchmark) -> (Summary, Summary) {
    std::thread::scope(|s| {
        let twin = s.spawn(|| live.run_blocking().unwrap().summary);
        let real = server.run_blocking().unwrap().summary;
        (real, twin.join().unwrap())
    })
}

/// The two loads against the server, the live twin and the predicted twin, the twin being
/// the calibration as rechecked just before them.
fn compare(url: &str, model_path: &Path, d: &Path, salt: u64) -> Attempt {
    let before_path = d.join(format!("recheck-{salt}-before.json"));
    let twin_model = recheck(url, model_path, &before_path);
    let twin = || Twin::load(&before_path, WhatIf::default(), Some(&tokenizer())).unwrap().target();
    let predict = |b: Benchmark| b.predict_blocking(&twin_model).unwrap().summary;
    // the server's capacity on 512-token prompts, as the twin predicts it
    let capacity =
        predict(bench(Target::openai(url), workload(512, 96), Load::closed(4), 16, salt))
            .request_throughput;
    let rate = LOAD * capacity;
    let loads = [
        ("closed 3, 256 in / 96 out", workload(256, 96), Load::closed(3), 12, salt + 1),
        (
            "Poisson at 70 % of capacity, 512 in / 96 out",
            workload(512, 96),
            Load::poisson(rate),
            12,
            salt + 2,
        ),
    ];
    eprintln!("capacity at 512 tokens in: {capacity:.3} req/s; the open loop at {rate:.3}/s");
    let mut failures = Vec::new();
    for (name, w, load, n, seed) in loads {
        let b = |t: Target| bench(t, w.clone(), load.clone(), n, seed);
        let (real, live) = run_both(b(Target::openai(url)), b(twin()));
        let (real, live, pred) =
            (figures(&real), figures(&live), figures(&predict(b(Target::openai(url)))));
        for (k, what) in NAMES.iter().enumerate() {
            let (e_live, e_pred) = (live[k] / real[k] - 1.0, pred[k] / real[k] - 1.0);
            let e_twins = pred[k] / live[k] - 1.0;
            eprintln!(
                "{name}: {what}: server {:.1}, live twin {:.1} ({:+.1} %), predicted {:.1} ({:+.1} %)",
                real[k],
                live[k],
                e_live * 100.0,
                pred[k],
                e_pred * 100.0
            );
            for (twin, e, bound) in
                [("live twin", e_live, SERVER_BOUND), ("predicted twin", e_pred, SERVER_BOUND)]
            {
                if e.is_nan() || e.abs() > bound {
                    failures.push(format!(
                        "{name} {what}: server {:.1}, {twin} {:+.1} % (bound {:.0} %)",
                        real[k],
                        e * 100.0,
                        bound * 100.0
                    ));
                }
            }
            if e_twins.is_nan() || e_twins.abs() > TWIN_BOUND {
                failures.push(format!(
                    "{name} {what}: live twin {:.1}, predicted {:.1} ({:+.1} %, bound {:.0} %)",
                    live[k],
                    pred[k],
                    e_twins * 100.0,
                    TWIN_BOUND * 100.0
                ));
            }
        }
    }
    let after = recheck(url, model_path, &d.join(format!("recheck-{salt}-after.json")));
    let ([pb, db], [pa, da]) = (factors(&twin_model), factors(&after));
    let moved = (pa / pb - 1.0).abs().max((da / db - 1.0).abs());
    eprintln!(
        "the server against its calibration: prefill x{pb:.3}, decode x{db:.3} before the loads, x{pa:.3} and x{da:.3} after: moved {:.1} %",
        moved * 100.0
    );
    Attempt { failures, moved }
}

//! The twin against the REAL llama.cpp server (`QUETTA_LLAMA_URL`, started by `.ci/run`; 4
//! slots, SmolLM2-135M on one CPU thread): calibrated by `quetta-probe calibrate`, then the
//! same workloads, none of which the calibration ran, against the server, the predicted twin
//! and (at closed 1) the live twin. The short form of docs/SIMULATOR.md's table: closed
//! loops at 1 and 4 (`scripts/twin-compare.py` runs the whole table), the twin taken at the
//! speed `quetta-probe recheck` finds before and after the loads (see [`compare`]), with
//! the bounds of [`SERVER_BOUND`] and [`SERVER_P90_BOUND`] against the server, [`SPEED_BOUND`]
//! on that speed and [`TWIN_BOUND`] between live and predicted.

mod twin_common;

use quetta::sim::model::WhatIf;
use quetta::{Benchmark, Load, Target, Twin, WorkloadSpec};
use std::path::Path;
use twin_common::{calibrate, recheck, setup, tokenizer};

/// Prompts of 72–120 tokens and outputs of 48–80, 24 requests at closed 4: on this
/// one-thread CPU server a 128-token prefill is a step of a second, and with 12 requests of
/// 128 in / 32 out whether two prefills shared a step decided the TTFT p50 (one CI run:
/// closed 4 live twin +5 %, predicted twin +43 % of the server's). With shorter prefills
/// against longer decodes and twice the requests, the live and predicted twin of that CI
/// run's model agree within 12 % on every figure over four seeds.
fn workload() -> WorkloadSpec {
    let mut w = WorkloadSpec::synthetic(96, 64);
    w.range_ratio = Some(0.25);
    w.tokenizer = Some(tokenizer());
    w
}

/// Each load its own prompts, none the server has seen (llama.cpp keeps earlier prompts in
/// its cache, and a cached prompt's TTFT is no prefill); the same for the server and twin.
fn bench(t: Target, load: Load, n: u64, seed: u64) -> Benchmark {
    let mut b = Benchmark::new(t).workload(workload()).load(load).requests(n).seed(seed);
    b.ignore_eos = true;
    b
}

struct Figures([f64; 5]);

const NAMES: [&str; 5] = ["TTFT p50", "TTFT p90", "TPOT p50", "E2E p50", "output tok/s"];

fn figures(s: &quetta::Summary) -> Figures {
    let m = &s.metrics;
    Figures([
        m.ttft_ms.p50.unwrap_or(f64::NAN),
        m.ttft_ms.p90.unwrap_or(f64::NAN),
        m.tpot_ms.p50.unwrap_or(f64::NAN),
        m.e2e_ms.p50.unwrap_or(f64::NAN),
        m.output_token_throughput,
    ])
}

#[test]
fn the_twin_reproduces_the_real_llama_server_on_workloads_it_was_not_calibrated_on() {
    let Some((url, d)) = setup("twin-llama") else { return };
    let model_path = d.join("server-model.json");
    // A miss is measured again, calibrated again and on fresh prompts, three attempts in
    // all, before it fails the test (16 attempts of 14 local runs on 2026-12-06: 3 missed,
    // each on closed 4's TTFT, whose 24 requests fall into two modes by races of the
    // server's; no run failed): [`compare`] takes out a server that runs uniformly slower or faster than
    // its calibration, but not a calibration whose few points caught the host mid-swing
    // (one decode point 26.2 ms between neighbours of 14.3 and 27.7 at twice the streams),
    // which is off in shape; calibrating again is what a user does then.
    let mut failures = Vec::new();
    let mut text = String::new();
    for attempt in 0..3 {
        text = calibrate(&url, &d, &model_path, "32,128,256");
        let salt = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            * 10;
        failures = compare(&url, &model_path, &d, salt);
        if failures.is_empty() {
            break;
        }
        eprintln!(
            "attempt {} missed, calibrated again and on fresh prompts once more: {failures:#?}",
            attempt + 1
        );
    }
    assert!(failures.is_empty(), "{failures:#?}\n{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The bounds against the server: TTFT p50, TPOT p50, E2E p50 and throughput within
/// [`SERVER_BOUND`], TTFT p90 within [`SERVER_P90_BOUND`], each widened by the server's own
/// drift during the attempt (see [`compare`]); live against predicted within [`TWIN_BOUND`],
/// every figure. docs/SIMULATOR.md ("The CI test") gives the errors of local runs.
const SERVER_BOUND: f64 = 0.10;
const SERVER_P90_BOUND: f64 = 0.20;
const TWIN_BOUND: f64 = 0.05;
/// The server's prefill and decode speed at the rechecks against its calibration's: within
/// 60 %. A calibration off in scale by more fails here (one off in shape fails the bounds
/// against the server, which are judged at the rechecked speed). Not tighter: this 2-vCPU
/// VM runs the pinned server at two speeds, minutes apart (llama.cpp's own log on
/// 2026-12-05: lone ~100-token prompts at ~7.5 or ~13.5 ms a token), and CI of bb35ed18
/// calibrated at one and rechecked at the other (decode ×1.38 and ×1.41, the twin then
/// within its bounds on both loads).
const SPEED_BOUND: f64 = 0.6;

/// The recheck's prefill, decode and decode-context factors against the calibration.
fn factors(m: &quetta::sim::model::ServerModel) -> [f64; 3] {
    m.rechecked.map_or([f64::NAN; 3], |r| [r.prefill_factor, r.decode_factor, r.context()])
}

/// The closed-1 and closed-4 loads against the server, the live twin and the predicted
/// twin; the misses, each with its figures.
///
/// This server's own speed moves by a tenth to a third within minutes on a shared 2-core
/// VM (one CI run: the calibration's decode step of one stream 19.1 ms, the server's TPOT
/// at closed 1 a minute later 16.7 ms, its closed-4 output 27 % under the twin's; minutes
/// later locally the same loads ran 35 % faster). So, as docs/SIMULATOR.md tells a user,
/// the calibration is rechecked (`quetta-probe recheck`) before the loads and again after
/// them, and the twin is judged at the geometric mean of the two rechecks' prefill and
/// decode factors (`ServerModel::rescaled`): what it is asked to get right is how the server
/// behaves under each load, not what the host's neighbours did (the decode context terms'
/// factor likewise). The prefill and decode factors must stay
/// within [`SPEED_BOUND`] of the calibration's (a calibration with its costs wrong fails
/// there), and each figure's bound widens by half the difference between that figure as
/// predicted by the two rechecks' models (a server that changed speed during the attempt
/// cannot be matched closer than that by a twin judged midway).
fn compare(url: &str, model_path: &Path, d: &Path, salt: u64) -> Vec<String> {
    let closed1 = |seed| bench(Target::openai(url), Load::closed(1), 6, seed);
    let closed4 = |seed| bench(Target::openai(url), Load::closed(4), 24, seed);
    let run = |b: Benchmark| b.run_blocking().unwrap().summary;
    let predict =
        |b: Benchmark, m: &quetta::sim::model::ServerModel| b.predict_blocking(m).unwrap().summary;
    let before_path = d.join(format!("recheck-{salt}-before.json"));
    let before = recheck(url, model_path, &before_path);
    let real1 = run(closed1(salt));
    // The live twin (the model as rechecked before) runs in real time: at closed 1 only (a
    // closed-4 live run is 40 s of CI a try; crates/quetta/tests/twin.rs holds live and
    // predicted within 5 % of each other at closed 6), the prediction at both.
    let twin = Twin::load(&before_path, WhatIf::default(), Some(&tokenizer())).unwrap().target();
    let live = run(bench(twin, Load::closed(1), 6, salt));
    let real4 = run(closed4(salt + 1));
    let after = recheck(url, model_path, &d.join(format!("recheck-{salt}-after.json")));
    let ([pb, db, cb], [pa, da, ca]) = (factors(&before), factors(&after));
    let (prefill, decode, context) = ((pb * pa).sqrt(), (db * da).sqrt(), (cb * ca).sqrt());
    eprintln!(
        "the server against its calibration: prefill ×{pb:.3}, decode ×{db:.3} (context ×{cb:.3}) before the loads, ×{pa:.3} and ×{da:.3} (×{ca:.3}) after; the twin judged at ×{prefill:.3}, ×{decode:.3} and ×{context:.3}"
    );
    let calibrated = Twin::load(model_path, WhatIf::default(), Some(&tokenizer())).unwrap().model;
    let at_speed = calibrated.rescaled(prefill, decode, context, 12, 0).expect("positive factors");
    let loads = [
        ("closed 1", figures(&real1), figures(&predict(closed1(salt), &at_speed))),
        ("closed 4", figures(&real4), figures(&predict(closed4(salt + 1), &at_speed))),
    ];
    // How far the server's speed moved during the attempt, in each figure of each load: half
    // the difference between the predictions of the two rechecks' models (the twin is judged
    // midway between them).
    let drift = |b: Benchmark| {
        let (x, y) = (figures(&predict(b.clone(), &before)), figures(&predict(b, &after)));
        std::array::from_fn::<f64, 5, _>(|k| (y.0[k] / x.0[k] - 1.0).abs() / 2.0)
    };
    let drifts = [drift(closed1(salt)), drift(closed4(salt + 1))];
    let mut failures = Vec::new();
    for (what, x) in [("prefill", prefill), ("decode", decode)] {
        if !((1.0 - SPEED_BOUND)..=(1.0 + SPEED_BOUND)).contains(&x) {
            failures.push(format!(
                "the server's {what} ran at {x:.2}x its calibration's (bound {SPEED_BOUND})"
            ));
        }
    }
    for ((name, real, pred), drift) in loads.into_iter().zip(drifts) {
        for (k, what) in NAMES.iter().enumerate() {
            // The 10 % / 20 %, as the full table in docs/SIMULATOR.md.
            let bound = if k == 1 { SERVER_P90_BOUND } else { SERVER_BOUND } + drift[k];
            let err = pred.0[k] / real.0[k] - 1.0;
            eprintln!(
                "{name}: {what}: server {:.1}, predicted twin {:.1} ({:+.1} %, bound {:.1} %)",
                real.0[k],
                pred.0[k],
                err * 100.0,
                bound * 100.0
            );
            if err.is_nan() || err.abs() > bound {
                failures.push(format!(
                    "{name} {what}: server {:.1}, predicted {:.1} ({:+.1} %, bound {:.0} %)",
                    real.0[k],
                    pred.0[k],
                    err * 100.0,
                    bound * 100.0
                ));
            }
        }
    }
    // The twin against itself does not drift: live and predicted (the same rechecked model)
    // agree (24 requests of short prefills; with 12 of second-long ones, one CI run's TTFT
    // p50 differed by 35 % on whether two prefills shared a step).
    let (live, pred) = (figures(&live), figures(&predict(closed1(salt), &before)));
    for (k, what) in NAMES.iter().enumerate() {
        let err = pred.0[k] / live.0[k] - 1.0;
        eprintln!("closed 1: {what}: live twin {:.1}, predicted {:.1}", live.0[k], pred.0[k]);
        if err.is_nan() || err.abs() > TWIN_BOUND {
            failures.push(format!(
                "closed 1 {what}: live twin {:.1}, predicted {:.1} ({:+.1} %, bound {:.0} %)",
                live.0[k],
                pred.0[k],
                err * 100.0,
                TWIN_BOUND * 100.0
            ));
        }
    }
    failures
}

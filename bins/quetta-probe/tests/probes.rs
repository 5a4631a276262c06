//! Every live probe through the `quetta-probe` binary, against the simulator (with known
//! costs) and against the real llama.cpp server (`QUETTA_LLAMA_URL`, started by `.ci/run`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use quetta_sim::{SimConfig, Simulator};

/// The tests that time a server one at a time: in CI on 2 cores the per-token prefill of
/// the first (0.4 ms a token, prompts of 32–192) came out 6.7 % off while the calibration
/// and recheck tests beside it loaded both cores.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timed() -> std::sync::MutexGuard<'static, ()> {
    TIMED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn probe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quetta-probe")).args(args).output().expect("run quetta-probe")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-probe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A server model file, validated against docs/schema/server_model.schema.json.
fn valid_server_model(path: &Path) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/schema/server_model.schema.json"))
            .unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> =
        val.iter_errors(&v).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errs.is_empty(), "{}: {errs:?}\n{v:#}", path.display());
}

fn meta(dir: &Path, probe: &str) -> serde_json::Value {
    let m: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{probe}.meta.json"))).unwrap(),
    )
    .unwrap();
    let schema: serde_json::Value = serde_json::from_str(quetta_probe::meta::META_SCHEMA).unwrap();
    let val = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> =
        val.iter_errors(&m).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errs.is_empty(), "{probe}.meta.json: {errs:?}\n{m:#}");
    let typed: quetta_probe::meta::ProbeMeta = serde_json::from_value(m.clone())
        .unwrap_or_else(|e| panic!("{probe}.meta.json does not read back: {e}"));
    assert_eq!(typed.findings.probe(), probe);
    assert_eq!(m["probe"], probe);
    let csv = std::fs::read_to_string(dir.join(format!("{probe}.csv"))).unwrap();
    assert!(csv.lines().count() >= 2, "{probe}.csv has rows");
    m
}

#[test]
fn probes_against_the_simulator_recover_its_costs() {
    let _timed = timed();
    // 400 µs of prefill per uncached token (large beside the few µs per token that parsing
    // and hashing a prompt cost a debug build), 5 ms base, a prefix cache of 64 blocks
    // (1,024 tokens)
    let sim = Simulator::start(SimConfig {
        ttft: Duration::from_millis(5),
        prefill_per_token: Duration::from_micros(400),
        itl: Duration::from_millis(2),
        prefix_cache_blocks: 64,
        ..SimConfig::default()
    })
    .unwrap();
    let url = sim.base_url();
    let d = tmp("sim");
    let ds = d.to_str().unwrap();
    let run = |probe_args: &[&str]| {
        let mut a: Vec<&str> = probe_args.to_vec();
        a.extend(["--base-url", url.as_str(), "--output-dir", ds]);
        let o = probe(&a);
        assert!(o.status.success(), "{probe_args:?}: {}", text(&o));
    };
    run(&["ttft", "--new-tokens", "32,96,192", "--cached-tokens", "0,256,512", "--repeats", "2"]);
    let m = meta(&d, "ttft");
    let a = m["summary"]["per_new_token_ms"].as_f64().unwrap();
    println!("ttft fit: {}", m["summary"]);
    assert!((a / 0.4 - 1.0).abs() < 0.05, "per-token prefill {a} ms, the simulator's is 0.4 ms");
    let b = m["summary"]["per_cached_token_ms"].as_f64().unwrap();
    assert!(b.abs() < 0.01, "cached tokens cost nothing: {b}");
    assert_eq!(m["summary"]["cached_tokens_from"], "usage");
    assert_eq!(m["server"]["kind"], "vllm");

    run(&["decode-grid", "--batches", "1,4", "--contexts", "32,256", "--output-tokens", "24"]);
    let m = meta(&d, "decode-grid");
    for c in m["summary"]["cells"].as_array().unwrap() {
        let itl = c["itl_ms"].as_f64().unwrap();
        assert!((1.9..3.5).contains(&itl), "the simulator's ITL is 2 ms: {c}");
    }

    run(&["herd", "--n", "8", "--prompt-tokens", "64", "--output-tokens", "4"]);
    let m = meta(&d, "herd");
    let client = m["summary"]["client_ttft_mean_ms"].as_f64().unwrap();
    let server = m["summary"]["server_ttft_mean_ms"].as_f64().unwrap();
    assert!(client >= server && client - server < 5.0, "client {client} ms vs server {server} ms");

    run(&["kv-capacity", "--prompts", "16", "--prompt-tokens", "128"]);
    let m = meta(&d, "kv-capacity");
    let pool = m["summary"]["usable_kv_tokens"].as_u64().unwrap();
    println!("kv-capacity: {}", m["summary"]);
    assert!((768..=1152).contains(&pool), "the simulator holds 1,024 tokens: found {pool}");

    run(&["stage-split", "--n", "4", "--prompt-tokens", "64", "--output-tokens", "8"]);
    let m = meta(&d, "stage-split");
    let st = &m["summary"]["stages"];
    let srv = st["e2e"]["server_ms"].as_f64().unwrap();
    let cli = st["e2e"]["client_ms"].as_f64().unwrap();
    assert!(cli >= srv && cli - srv < 5.0, "e2e client {cli} ms vs server {srv} ms");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn probes_against_real_llama_cpp() {
    let _timed = timed();
    let Some(url) = quetta_testkit::llama_url() else { return };
    let d = tmp("llama");
    let ds = d.to_str().unwrap();
    for (args, probe_name) in [
        (
            vec!["ttft", "--new-tokens", "16,64", "--cached-tokens", "0,64", "--repeats", "1"],
            "ttft",
        ),
        (
            vec!["decode-grid", "--batches", "1,2", "--contexts", "32", "--output-tokens", "8"],
            "decode-grid",
        ),
        (vec!["herd", "--n", "3", "--prompt-tokens", "32", "--output-tokens", "4"], "herd"),
        (vec!["kv-capacity", "--prompts", "3", "--prompt-tokens", "32"], "kv-capacity"),
        (
            vec!["stage-split", "--n", "2", "--prompt-tokens", "32", "--output-tokens", "4"],
            "stage-split",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--base-url", url.as_str(), "--output-dir", ds]);
        let o = probe(&a);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        let m = meta(&d, probe_name);
        assert_eq!(m["server"]["kind"], "llama.cpp");
        println!("llama.cpp {probe_name}: {}", m["summary"]);
    }
    let m = meta(&d, "stage-split");
    assert!(
        m["summary"]["stages"]["prefill"]["server_ms"].is_number(),
        "llama.cpp's prompt_seconds_total"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn gpu_without_a_driver_and_kernel_summaries() {
    let o = probe(&["gpu", "--duration", "0.2", "--output-dir", tmp("gpu").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    if out.contains("no NVIDIA driver") {
        assert_eq!(out.trim().lines().count(), 1, "one line: {out}");
    } else {
        assert!(out.contains("avg_power_w"), "{out}");
    }
    let d = tmp("kernels");
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("k.csv");
    std::fs::write(&f, "name,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,block_y,block_z,stream,correlation\nampere_sgemm_128x64,0,1000,1,1,1,1,1,1,7,1\nflash_fwd_kernel,1000,1500,1,1,1,1,1,1,7,2\n").unwrap();
    let o = probe(&["kernels", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["kernels"], 2);
    assert_eq!(s["families"][0]["family"], "gemm");
    let _ = std::fs::remove_dir_all(&d);
}

/// A server model of known costs, for a twin to play.
fn known_model() -> quetta_sim::model::ServerModel {
    use quetta_sim::model::{FitQuality, Fits, ServerModel, StepTime, SERVER_MODEL_VERSION};
    let q = FitQuality { points: 0, r2: 1.0, rmse_ms: 0.0, max_rel_residual: 0.0 };
    ServerModel {
        schema_version: SERVER_MODEL_VERSION,
        server: "known".into(),
        model: "quetta-sim".into(),
        calibrated_unix_s: 0,
        step: StepTime {
            base_ms: 6.0,
            prefill_token_ms: 0.05,
            prefill_pair_mt_ms: 0.0,
            cached_token_ms: 0.0,
            decode_seq_ms: 3.0,
            context_kt_ms: 0.0,
            context_knee_tokens: 1_500,
            context_over_kt_ms: 2.0,
            multi_seq_ms: 1.5,
            decode_by_seqs: Vec::new(),
            prefill_step_ms: 4.0,
        },
        max_seqs: 4,
        kv_tokens: 4 * 4096,
        max_batch_tokens: 4096,
        prefix_cache: true,
        block_tokens: 16,
        prompt_extra_tokens: 0,
        template_cached_tokens: 0,
        arrival_overhead_ms: 1.0,
        emit_overhead_ms: 0.0,
        gather_ms: 2.0,
        fits: Fits { prefill: q.clone(), decode: q, max_seqs_observed: 4, max_seqs_probe: 0 },
        decode_probe_tokens: None,
        rechecked: None,
    }
}

/// Calibrating a twin of a known model recovers the model: its slots, its step costs, its
/// prefix cache, within what a millisecond timer allows; the file is valid against
/// docs/schema/server_model.schema.json and loads back.
#[test]
fn calibrating_a_twin_of_a_known_model_recovers_the_model() {
    let _timed = timed();
    let truth = known_model();
    let sim =
        Simulator::start(SimConfig { server_model: Some(truth.clone()), ..SimConfig::default() })
            .unwrap();
    let d = tmp("calibrate");
    let out = d.join("server-model.json");
    let o = probe(&[
        "calibrate",
        "--base-url",
        &sim.base_url(),
        "--max-context",
        "4096",
        "--prefill-lengths",
        "64,512,1024,2048",
        "--decode-contexts",
        "32,256,512",
        "--seqs-probe",
        "8",
        "--max-batch-tokens",
        "4096",
        "--output-dir",
        d.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("prefill fit: R²"), "{t}");
    valid_server_model(&out);
    let m = quetta_sim::model::ServerModel::load(&out).unwrap();
    assert_eq!(m.max_seqs, 4, "{t}");
    assert_eq!(m.kv_tokens, 4 * 4096);
    assert!(m.prefix_cache, "{t}");
    let near = |got: f64, want: f64, tol: f64, what: &str| {
        assert!((got - want).abs() <= tol, "{what}: {got:.3} for {want} (±{tol})\n{t}");
    };
    near(m.step.decode_seq_ms, 3.0, 0.45, "decode_seq_ms");
    near(m.step.base_ms, 6.0, 1.5, "base_ms");
    near(m.step.prefill_token_ms, 0.05, 0.0075, "prefill_token_ms");
    // each batch size's own row gives that size's step (the known one, by hand: 6 + 3·B,
    // 1.5 more from two sequences on, at 300 tokens a sequence, under the knee)
    let rows: Vec<u32> = m.step.decode_by_seqs.iter().map(|r| r.seqs).collect();
    assert_eq!(rows, [1, 2, 3, 4], "{t}");
    for r in &m.step.decode_by_seqs {
        let b = f64::from(r.seqs);
        let want = 6.0 + 3.0 * b + if r.seqs >= 2 { 1.5 } else { 0.0 };
        near(r.step_ms + r.context_kt_ms * 0.3 * b, want, 1.5, "a row's step");
    }
    // a step that prefills costs 4 ms more, beside a decode too: told apart from the
    // millisecond of arrival overhead, which delays only its own request
    near(m.step.prefill_step_ms, 4.0, 1.5, "prefill_step_ms");
    // what the twin adds: a millisecond of arrival overhead and up to a millisecond of
    // timer lateness, seen together by the client
    assert!(m.arrival_overhead_ms < 3.0, "{t}");
    assert!(m.fits.prefill.r2 > 0.99 && m.fits.decode.r2 > 0.95, "{t}");
    // recheck decodes as many tokens as this calibration's decode probe did (the default 32)
    assert_eq!(m.decode_probe_tokens, Some(32), "{t}");
    // calibrate.meta.json: valid, typed, and of the same fit as the model file
    let cal = meta(&d, "calibrate");
    assert_eq!(cal["summary"]["max_seqs"], 4);
    assert_eq!(cal["parameters"]["decode_contexts"], serde_json::json!([32, 256, 512]));
    let step: quetta_sim::model::StepTime =
        serde_json::from_value(cal["summary"]["step"].clone()).unwrap();
    near(step.decode_seq_ms, m.step.decode_seq_ms, 1e-9, "meta's decode_seq_ms");
    let _ = std::fs::remove_dir_all(&d);
}

/// A server that does not answer is refused before any probe, and no model is written.
#[test]
fn calibrate_writes_no_model_it_could_not_fit() {
    let _timed = timed();
    let d = tmp("calibrate-refused");
    let out = d.join("m.json");
    let o = probe(&[
        "calibrate",
        "--base-url",
        "http://127.0.0.1:9",
        "--max-context",
        "2048",
        "--output-dir",
        d.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(!out.exists());
}

/// A recheck finds how much slower a server's prompts and faster its decode run than its
/// model says, writes the model rescaled to them (valid against the schema, loading back),
/// and a recheck of that rescaled model against the same server finds it right.
/// The recheck's words when the server's own speed moved between its requests.
const MOVED: &str = "the server's speed moved during the recheck";

/// A recheck's warnings besides the one that says the server's speed moved during it: that
/// one is the recheck's own measurement of the server (here the simulator, which shares two
/// cores with the tests beside it: in one CI run one of three 128-token prompts took 19.8 ms
/// to its first token against 16.5 for the other two, x1.33 of the model), not what these
/// checks are about; the factors are still checked within their tolerances.
fn besides_moved(w: &serde_json::Value) -> Vec<String> {
    let all = w.as_array().expect("warnings: an array");
    all.iter().map(|w| w.as_str().unwrap().to_owned()).filter(|w| !w.contains(MOVED)).collect()
}

#[test]
fn a_recheck_rescales_a_model_to_its_servers_present_speed() {
    let _timed = timed();
    let calibrated = known_model();
    // the server now: prompts 1.6 times slower, decode steps at 0.8 of their time
    let mut now = calibrated.clone();
    for v in [&mut now.step.prefill_token_ms, &mut now.step.prefill_step_ms] {
        *v *= 1.6;
    }
    for v in [&mut now.step.base_ms, &mut now.step.decode_seq_ms] {
        *v *= 0.8;
    }
    let sim =
        Simulator::start(SimConfig { server_model: Some(now.clone()), ..SimConfig::default() })
            .unwrap();
    let d = tmp("recheck");
    std::fs::create_dir_all(&d).unwrap();
    let (m0, m1, m2) = (d.join("m0.json"), d.join("m1.json"), d.join("m2.json"));
    std::fs::write(&m0, calibrated.to_json()).unwrap();
    // `recheck URL MODEL PROMPT_WORDS -o OUT`: the model it wrote, its text, its warnings
    let recheck = |url: &str, model: &Path, words: &str, out: &Path| {
        let o = probe(&[
            "recheck",
            "--base-url",
            url,
            "--server-model",
            model.to_str().unwrap(),
            "--prompt-words",
            words,
            "--decode-tokens",
            "24",
            "--output-dir",
            d.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(t.contains("the server against the model: prefill ×"), "{t}");
        let w = meta(&d, "recheck")["summary"]["warnings"].clone();
        (quetta_sim::model::ServerModel::load(out).unwrap(), t, w)
    };
    let (r1, t1, w1) = recheck(&sim.base_url(), &m0, "512,1024", &m1);
    // a server of the model's shape at other speeds: nothing doubtful
    assert_eq!(besides_moved(&w1), Vec::<String>::new(), "{t1}");
    let warned = t1.lines().filter(|l| l.contains("recheck: warning") && !l.contains(MOVED));
    assert_eq!(warned.count(), 0, "{t1}");
    valid_server_model(&m1);
    let near = |got: f64, want: f64, tol: f64, what: &str, t: &str| {
        assert!((got - want).abs() <= tol * want, "{what}: {got:.4} for {want} (±{tol})\n{t}");
    };
    let re = r1.rechecked.expect("the rescaled model says it was rechecked");
    assert_eq!(re.requests, 6);
    near(re.prefill_factor, 1.6, 0.1, "prefill factor", &t1);
    near(re.decode_factor, 0.8, 0.1, "decode factor", &t1);
    near(r1.step.prefill_token_ms, now.step.prefill_token_ms, 0.1, "prefill_token_ms", &t1);
    near(r1.step.decode_seq_ms, now.step.decode_seq_ms, 0.1, "decode_seq_ms", &t1);
    // the shape stays the calibration's: limits and fixed overheads untouched
    assert_eq!((r1.max_seqs, r1.kv_tokens, r1.gather_ms), (4, 4 * 4096, 2.0));
    // rechecked again, the rescaled model is right, and its factors stay the calibration's
    let (r2, t2, _) = recheck(&sim.base_url(), &m1, "512,1024", &m2);
    let re2 = r2.rechecked.unwrap();
    near(re2.prefill_factor, 1.6, 0.1, "prefill factor after two rechecks", &t2);
    near(re2.decode_factor, 0.8, 0.1, "decode factor after two rechecks", &t2);
    near(re2.prefill_factor / re.prefill_factor, 1.0, 0.06, "second prefill factor", &t2);
    near(re2.decode_factor / re.decode_factor, 1.0, 0.06, "second decode factor", &t2);
    // a server that does not answer: no model written
    let bad = d.join("bad.json");
    let o = probe(&[
        "recheck",
        "--base-url",
        "http://127.0.0.1:9",
        "--server-model",
        m0.to_str().unwrap(),
        "--output-dir",
        d.to_str().unwrap(),
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && !bad.exists(), "{}", text(&o));
    drop(sim);
    // a server whose decode step grows 20 ms per 1,000 tokens of context, which the model
    // does not have: one decode factor cannot rescale it, and the recheck says so (prompts
    // dear enough that the base step, rescaled by that factor, moves no prefill ratio 15 %)
    let mut flat = calibrated.clone();
    flat.step.prefill_token_ms = 1.0;
    let mf = d.join("flat.json");
    std::fs::write(&mf, flat.to_json()).unwrap();
    let mut shaped = flat;
    shaped.step.context_kt_ms = 20.0;
    let sim =
        Simulator::start(SimConfig { server_model: Some(shaped), ..SimConfig::default() }).unwrap();
    let (_, t3, w3) = recheck(&sim.base_url(), &mf, "128,1024", &d.join("m3.json"));
    let w3 = besides_moved(&w3);
    assert_eq!(w3.len(), 1, "{w3:?}\n{t3}");
    let w = w3[0].as_str();
    assert!(w.starts_with("decode: the server runs at ×") && w.contains("context terms"), "{w}");
    assert!(t3.contains(&format!("quetta-probe recheck: warning: {w}")), "{t3}");
    // the model has no context terms to tell apart, and the recheck says that is why it
    // took one decode factor
    let summary = meta(&d, "recheck")["summary"].clone();
    assert_eq!(summary["context_apart"], false, "{t3}");
    let why = summary["one_factor_why"].as_str().expect("why one decode factor");
    assert!(
        why.starts_with("the model's context terms at the prompt lengths span 0.00 ms"),
        "{why}"
    );
    assert!(t3.contains(&format!("terms (the median ratio): {why}")), "{t3}");
    drop(sim);
    // a model with context terms (15 ms per 1,000 tokens), and a server whose sequences'
    // decode terms run at half their time while its context terms keep theirs (what this
    // VM's llama.cpp did on 2026-12-05: ×0.31 and ×0.91): the recheck tells the two apart,
    // and its rescaled model is of the server's shape, with no warning
    let mut ctxm = calibrated.clone();
    ctxm.step.context_kt_ms = 15.0;
    let mc = d.join("context.json");
    std::fs::write(&mc, ctxm.to_json()).unwrap();
    let mut split = ctxm.clone();
    for v in [&mut split.step.base_ms, &mut split.step.decode_seq_ms, &mut split.step.multi_seq_ms]
    {
        *v *= 0.5;
    }
    let sim =
        Simulator::start(SimConfig { server_model: Some(split.clone()), ..SimConfig::default() })
            .unwrap();
    let (r4, t4, w4) = recheck(&sim.base_url(), &mc, "128,1024", &d.join("m4.json"));
    eprintln!("{t4}");
    assert_eq!(w4, serde_json::json!([]), "{t4}");
    let summary = meta(&d, "recheck")["summary"].clone();
    assert_eq!(summary["context_apart"], true, "{t4}");
    assert!(t4.contains("its context terms ×"), "{t4}");
    let re4 = r4.rechecked.unwrap();
    near(re4.decode_factor, 0.5, 0.15, "decode factor of the sequences' terms", &t4);
    near(re4.context(), 1.0, 0.1, "decode context factor", &t4);
    near(r4.step.base_ms, split.step.base_ms, 0.15, "base_ms", &t4);
    near(r4.step.context_kt_ms, split.step.context_kt_ms, 0.1, "context_kt_ms", &t4);
    valid_server_model(&d.join("m4.json"));
    // a model that says its calibration decoded 16 tokens a stream: rechecked without
    // --decode-tokens, the requests decode 16 (a request's first gaps are its slowest, so
    // another length biases the factor), and rechecked with 24, the recheck says so
    let mut sixteen = ctxm;
    sixteen.decode_probe_tokens = Some(16);
    let m16 = d.join("sixteen.json");
    std::fs::write(&m16, sixteen.to_json()).unwrap();
    let o = probe(&[
        "recheck",
        "--base-url",
        &sim.base_url(),
        "--server-model",
        m16.to_str().unwrap(),
        "--prompt-words",
        "128,1024",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m = meta(&d, "recheck");
    assert_eq!(m["parameters"]["decode_tokens"], 16, "{}", text(&o));
    assert_eq!(besides_moved(&m["summary"]["warnings"]), Vec::<String>::new(), "{}", text(&o));
    let (_, t5, w5) = recheck(&sim.base_url(), &m16, "128,1024", &d.join("m5.json"));
    let w5 = besides_moved(&w5);
    assert_eq!(w5.len(), 1, "{w5:?}\n{t5}");
    let w = w5[0].as_str();
    assert!(w.contains("decode 24 tokens, the calibration's decode probe 16"), "{w}");
    assert!(w.contains("--decode-tokens 16"), "{w}");
    let _ = std::fs::remove_dir_all(&d);
}

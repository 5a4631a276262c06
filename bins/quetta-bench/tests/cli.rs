//! `quetta-bench run` used as a user would: real processes, real files, the embedded
//! simulator or a separate simulator on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quetta-bench"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run quetta-bench")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn schema() -> jsonschema::Validator {
    let s: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/schema/summary.schema.json")).unwrap();
    jsonschema::validator_for(&s).unwrap()
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn first_command_runs_against_the_embedded_simulator() {
    let d = tmpdir("first");
    let o = run(&[
        "run",
        "--num-requests",
        "40",
        "--concurrency",
        "8",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("embedded simulator"), "{out}");
    assert!(out.contains("TTFT") && out.contains("p99"), "{out}");
    let s = summary(&d);
    let errors: Vec<String> =
        schema().iter_errors(&s).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "summary.json violates its schema: {errors:?}");
    assert_eq!(s["completed"], 40);
    assert_eq!(s["failed"], 0);
    assert_eq!(s["dispatched"], 40);
    assert_eq!(s["token_count_source"], "usage");
    assert_eq!(s["total_output_tokens"], 40 * 128);
    // embedded simulator: TTFT 20 ms, ITL 5 ms
    let ttft = s["ttft_ms"]["p50"].as_f64().unwrap();
    assert!((20.0..25.0).contains(&ttft), "TTFT p50 {ttft}");
    let tpot = s["tpot_ms"]["mean"].as_f64().unwrap();
    assert!((4.9..5.2).contains(&tpot), "TPOT mean {tpot}");
    let lines = std::fs::read_to_string(d.join("requests.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 40, "one record per request");
    for l in lines.lines() {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(r["error_kind"].is_null());
        assert_eq!(r["itl_ms"].as_array().unwrap().len(), 127);
    }
    // the same directory again is refused without --overwrite
    let o = run(&["run", "--num-requests", "2", "--output-dir", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("already holds a run"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn open_loop_with_slo_reports_goodput_and_rates() {
    let d = tmpdir("open");
    let o = run(&[
        "run",
        "--request-rate",
        "50",
        "--arrival",
        "constant",
        "--num-requests",
        "60",
        "--output-len",
        "16",
        "--slo",
        "ttft:500ms,tpot:50ms,e2e:10s",
        "--percentiles",
        "75,99.99",
        "--output-dir",
        d.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d);
    assert!(schema().is_valid(&s));
    assert_eq!(s["goodput"]["requests_meeting_all"], 60);
    assert_eq!(s["goodput"]["share_meeting_all"], 1.0);
    let achieved = s["achieved_send_rate"].as_f64().unwrap();
    assert!((achieved / 50.0 - 1.0).abs() < 0.02, "achieved {achieved}");
    assert!(s["ttft_ms"]["p75"].is_number() && s["ttft_ms"]["p99_99"].is_number());
    assert_eq!(s["config"]["load"], "open");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_flags_are_clear_errors() {
    for (args, needle) in [
        (vec!["run", "--concurrency", "0"], "positive"),
        (vec!["run", "--request-rate", "-3"], "positive"),
        (vec!["run", "--concurrency", "-1"], "positive"),
        (vec!["run", "--base-url", "localhost:8000"], "http://"),
        (vec!["run", "--slo", "ttft:fast"], "invalid SLO"),
        (vec!["run", "--duration", "soon"], "not a duration"),
        (vec!["run", "--min-success-rate", "2"], "between 0 and 1"),
        (vec!["run", "--extra-body", "[1]"], "JSON object"),
    ] {
        let o = run(&args);
        assert!(!o.status.success(), "{args:?} should fail");
        assert!(text(&o).contains(needle), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("panicked"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn api_key_never_appears_in_any_output() {
    let canary = "sk-quetta-canary-7f3e9d";
    let d = tmpdir("canary");
    // a key given by flag and one by environment, against the simulator
    let o = bin()
        .args([
            "run",
            "--num-requests",
            "5",
            "--api-key",
            canary,
            "--output-dir",
            d.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o2 = bin()
        .args(["run", "--num-requests", "3", "--overwrite", "--output-dir", d.to_str().unwrap()])
        .env("OPENAI_API_KEY", canary)
        .output()
        .unwrap();
    assert!(o2.status.success());
    // and a failing run (unreachable server) whose errors are printed
    let o3 = bin()
        .args([
            "run",
            "--num-requests",
            "2",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9",
            "--api-key",
            canary,
        ])
        .args(["--overwrite", "--output-dir", d.to_str().unwrap()])
        .output()
        .unwrap();
    for out in [&o, &o2, &o3] {
        assert!(!text(out).contains(canary), "the key leaked into the console output");
    }
    for f in std::fs::read_dir(&d).unwrap() {
        let p = f.unwrap().path();
        let content = std::fs::read_to_string(&p).unwrap();
        assert!(!content.contains(canary), "the key leaked into {}", p.display());
    }
    let s = summary(&d);
    assert_eq!(s["config"]["api_key_given"], true);
    assert_eq!(s["failed"], 2);
    assert_eq!(s["errors"]["connect"], 2);
    // every other subcommand, with the secret in the environment (and a hub token too)
    let fit = d.join("dist.json");
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/traces/azure_llm_inference_2023_conv.csv"
    );
    std::fs::remove_file(d.join("summary.json")).unwrap();
    for args in [
        vec!["report", d.to_str().unwrap()],
        vec!["profiles"],
        vec!["workload", "fit", trace, "--trace-format", "azure", "-o", fit.to_str().unwrap()],
        vec!["run", "--dry-run", "--num-requests", "5"],
        vec![
            "run",
            "--workload",
            fit.to_str().unwrap(),
            "--num-requests",
            "3",
            "--overwrite",
            "--output-dir",
            d.to_str().unwrap(),
        ],
    ] {
        let o = bin()
            .args(&args)
            .env("OPENAI_API_KEY", canary)
            .env("HF_TOKEN", canary)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains(canary), "{args:?} leaked the secret");
    }
    for f in std::fs::read_dir(&d).unwrap() {
        let p = f.unwrap().path();
        assert!(
            !std::fs::read_to_string(&p).unwrap().contains(canary),
            "the key leaked into {}",
            p.display()
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn mooncake_profile_replays_trace_timestamps() {
    let d = tmpdir("mooncake");
    // the first 150 rows at 20x speed; every intended send time is the trace's timestamp / 20
    let o = run(&[
        "run",
        "--profile",
        "mooncake-conversation",
        "--trace-speed",
        "20",
        "--num-requests",
        "150",
        "--output-len",
        "8",
        "--sim-ttft-ms",
        "1",
        "--sim-itl-ms",
        "1",
        "--quiet",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let trace = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/traces/mooncake_fast25_conversation_trace.jsonl"
    ))
    .unwrap();
    let ts: Vec<f64> = trace
        .lines()
        .take(150)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["timestamp"].as_f64().unwrap()
        })
        .collect();
    let lens: Vec<u64> = trace
        .lines()
        .take(150)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["input_length"].as_u64().unwrap()
        })
        .collect();
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(d.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 150);
    for r in &recs {
        let i = r["id"].as_u64().unwrap() as usize;
        let intended = r["intended_offset_ms"].as_f64().unwrap();
        assert!(
            (intended - ts[i] / 20.0).abs() < 0.002,
            "request {i}: intended {intended} ms, trace {} ms / 20",
            ts[i]
        );
        // the simulator counts one token per word: the prompt has the trace's input length
        assert_eq!(r["input_tokens"].as_u64(), Some(lens[i]), "request {i}");
    }
    let s = summary(&d);
    assert_eq!(s["config"]["load"], "trace");
    assert_eq!(s["completed"], 150);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn profiles_are_listed_and_unknown_ones_are_errors() {
    let o = run(&["profiles"]);
    let out = text(&o);
    for p in [
        "chat-short",
        "chat-long",
        "code-completion",
        "summarization",
        "prefill-heavy",
        "decode-heavy",
        "random-1k",
        "fixed-seq128",
        "mooncake-conversation",
        "azure-conversation",
        "test",
    ] {
        assert!(out.contains(p), "{p} missing from {out}");
    }
    let o = run(&["run", "--profile", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown profile \"nope\""), "{}", text(&o));
    let o = run(&["run", "--trace", "/no/such/trace.jsonl"]);
    assert!(text(&o).contains("/no/such/trace.jsonl"), "{}", text(&o));
    // an id that is neither cached nor downloadable (the hub is a closed local port)
    let home = tmpdir("hf-offline");
    let o = bin()
        .args(["run", "--tokenizer", "no-org/no-model"])
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env("HF_HOME", &home)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no-org/no-model") && text(&o).contains("offline?"), "{}", text(&o));
}

#[test]
fn tokenizer_id_is_downloaded_from_the_hub_into_the_cache() {
    use std::io::{Read, Write};
    // A fake hub on 127.0.0.1: /org/model/resolve/main/tokenizer.json redirects to /cdn/...,
    // which serves the real GPT-2 tokenizer.json; it expects the HF_TOKEN as a bearer token.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tok = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/tokenizers/gpt2/tokenizer.json"
    ))
    .unwrap();
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            // read the whole request head (a GET has no body) before answering, or closing
            // with unread bytes would reset the connection
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            let req = String::from_utf8_lossy(&got).to_string();
            let path = req.split_whitespace().nth(1).unwrap_or("").to_owned();
            if path == "/acme/tiny/resolve/main/tokenizer.json" {
                assert!(req.to_lowercase().contains("authorization: bearer hf_canary"), "{req}");
                let _ = s.write_all(
                    b"HTTP/1.1 302 Found\r\nlocation: /cdn/tok.json\r\ncontent-length: 0\r\n\r\n",
                );
            } else {
                let _ = s.write_all(
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", tok.len()).as_bytes(),
                );
                let _ = s.write_all(&tok);
            }
            seen.push(path);
        }
        seen
    });
    let home = tmpdir("hf-home");
    let out = tmpdir("hf-run");
    let o = bin()
        .args([
            "run",
            "--tokenizer",
            "acme/tiny",
            "--num-requests",
            "3",
            "--input-len",
            "40",
            "--quiet",
            "--output-dir",
            out.to_str().unwrap(),
        ])
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("HF_HOME", &home)
        .env("HF_TOKEN", "hf_canary")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("hf_canary"), "the hub token leaked");
    let seen = server.join().unwrap();
    assert_eq!(seen, vec!["/acme/tiny/resolve/main/tokenizer.json", "/cdn/tok.json"]);
    assert!(home.join("hub/models--acme--tiny/snapshots/quetta-download/tokenizer.json").is_file());
    // exact prompt lengths: the simulator counts words, so check the plan instead
    let s = summary(&out);
    assert!(s["config"]["tokenizer"].as_str().unwrap().contains("models--acme--tiny"));
    let _ = std::fs::remove_dir_all(&home);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn killed_run_is_rebuilt_by_report_from_every_written_record() {
    let d = tmpdir("kill9");
    let mut child = start_long_run(&d, std::process::Stdio::null);
    let jsonl = d.join("requests.jsonl");
    wait_for_records(&jsonl, 20, std::time::Instant::now());
    child.kill().unwrap(); // SIGKILL: no chance to write a summary
    child.wait().unwrap();
    assert!(!d.join("summary.json").exists());
    let written = std::fs::read_to_string(&jsonl).unwrap();
    let complete = written.split_inclusive('\n').filter(|l| l.ends_with('\n')).count() as u64;
    let o = run(&["report", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("PARTIAL"), "{}", text(&o));
    let s = summary(&d);
    assert!(schema().is_valid(&s), "rebuilt summary follows the schema");
    assert_eq!(s["partial"], true);
    assert_eq!(
        s["completed"].as_u64().unwrap() + s["failed"].as_u64().unwrap(),
        complete,
        "every fully written record counts"
    );
    assert_eq!(s["config"]["duration_s"], 60.0);
    // a torn last line (a write cut short) is detected, reported and left out
    std::fs::remove_file(d.join("summary.json")).unwrap();
    let mut torn = written.clone();
    if !torn.ends_with('\n') {
        torn = torn[..torn.rfind('\n').map_or(0, |i| i + 1)].to_owned();
    }
    torn.push_str("{\"id\": 99999, \"intended_offs");
    std::fs::write(&jsonl, torn).unwrap();
    let o = run(&["report", d.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(text(&o).contains("cut off mid-write"), "{}", text(&o));
    let s = summary(&d);
    assert_eq!(s["completed"].as_u64().unwrap() + s["failed"].as_u64().unwrap(), complete);
    // a finished run's report just shows it
    let o = run(&["report", d.to_str().unwrap()]);
    assert!(text(&o).contains("Quetta results"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ctrl_c_stops_sending_drains_and_writes_a_partial_summary() {
    let d = tmpdir("sigint");
    let child = start_long_run(&d, std::process::Stdio::piped);
    let jsonl = d.join("requests.jsonl");
    let t0 = std::time::Instant::now();
    wait_for_records(&jsonl, 10, t0);
    let st = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("interrupted") && text(&o).contains("PARTIAL"), "{}", text(&o));
    assert!(t0.elapsed().as_secs() < 30, "the run ended at Ctrl-C, not after its 60 s");
    let s = summary(&d);
    assert_eq!(s["partial"], true);
    let lines = std::fs::read_to_string(&jsonl).unwrap().lines().count() as u64;
    assert_eq!(s["completed"].as_u64().unwrap() + s["failed"].as_u64().unwrap(), lines);
    assert_eq!(s["dispatched"].as_u64().unwrap(), lines);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn dry_run_prints_the_plan_and_sends_nothing() {
    let d = tmpdir("dry");
    // a base URL nobody listens on: a dry run must not touch it
    let o = run(&[
        "run",
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--request-rate",
        "20",
        "--arrival",
        "constant",
        "--num-requests",
        "100",
        "--input-len",
        "64",
        "--dry-run",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("nothing will be sent") && out.contains("requests   100 over 4.950 s"),
        "{out}"
    );
    assert!(out.contains("input      mean 64.0"), "{out}");
    assert!(!d.exists(), "a dry run writes no output directory");
}

/// Start a 60-second closed-loop run against the embedded simulator, writing into `d`.
fn start_long_run(d: &Path, stdio: fn() -> std::process::Stdio) -> std::process::Child {
    bin()
        .args([
            "run",
            "--duration",
            "60s",
            "--concurrency",
            "4",
            "--output-len",
            "16",
            "--quiet",
            "--output-dir",
        ])
        .arg(d)
        .stdout(stdio())
        .stderr(stdio())
        .spawn()
        .unwrap()
}

/// Wait (at most 30 s after `t0`) until `jsonl` holds `n` records: records reach the disk
/// while the run goes on.
fn wait_for_records(jsonl: &Path, n: usize, t0: std::time::Instant) {
    loop {
        let got = std::fs::read_to_string(jsonl).map_or(0, |t| t.lines().count());
        if got >= n {
            return;
        }
        assert!(
            t0.elapsed().as_secs() < 30,
            "records must reach the disk while the run goes on ({got} so far)"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn multiturn_profile_reports_per_turn_figures() {
    let d = tmpdir("multiturn");
    let o = run(&[
        "run",
        "--profile",
        "mtbench-2turn",
        "--num-sessions",
        "6",
        "--session-concurrency",
        "3",
        "--output-len",
        "24",
        "--think-time",
        "20ms",
        "--output-dir",
        d.to_str().unwrap(),
        "--quiet",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("turn") && out.contains("hit %"), "the per-turn table: {out}");
    assert!(out.contains("6 started: 6 completed"), "{out}");
    let s = summary(&d);
    let errors: Vec<String> =
        schema().iter_errors(&s).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "summary.json violates its schema: {errors:?}");
    assert_eq!(s["completed"], 12);
    let turns = s["per_turn"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["turn"], 1);
    assert_eq!(turns[1]["completed"], 6);
    assert_eq!(turns[1]["cached_token_source"], "usage");
    // turn 2 carries turn 1's prompt and reply: the simulator serves most of it from cache
    let hit = turns[1]["cache_hit_rate"].as_f64().unwrap();
    assert!(hit > 0.5, "turn-2 cache hit rate {hit}");
    assert_eq!(s["sessions"]["completed"], 6);
    assert_eq!(s["config"]["sessions"]["think_time"], "20ms");
    let lines = std::fs::read_to_string(d.join("requests.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> =
        lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), 12);
    assert!(recs.iter().all(|r| r["session_id"].is_string() && r["turn"].is_number()));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tool_call_sessions_from_a_file_and_bad_session_flags() {
    let d = tmpdir("agent");
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/conversations/glaive_toolcall_en_demo_100.json"
    );
    let o = run(&[
        "run",
        "--sessions",
        file,
        "--num-sessions",
        "5",
        "--max-turns",
        "3",
        "--session-rate",
        "20",
        "--max-concurrency",
        "2",
        "--output-dir",
        d.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d);
    assert!(schema().is_valid(&s));
    assert_eq!(s["sessions"]["started"], 5);
    assert!(s["per_turn"].as_array().unwrap().len() <= 3);
    for (args, want) in [
        (vec!["--think-time", "soon"], "--think-time"),
        (vec!["--think-time", "uniform:3s-1s"], "MIN is above MAX"),
        (vec!["--session-rate", "5", "--input-len", "4"], "multi-turn"),
        (vec!["--mode", "stress", "--profile", "chat-multiturn"], "stress"),
    ] {
        let mut a = vec!["run", "--num-requests", "2"];
        if !args.contains(&"--session-rate") && !args.contains(&"--profile") {
            a.extend(["--sessions", file]);
        }
        a.extend(args.iter().copied());
        a.extend(["--overwrite", "--output-dir", d.to_str().unwrap()]);
        let o = run(&a);
        assert!(!o.status.success(), "{a:?} should fail");
        assert!(text(&o).contains(want), "{a:?}: {}", text(&o));
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn stress_mode_gets_the_planned_output_length_and_resets_the_cache() {
    // A simulator whose model stops early (1..=8 tokens) unless asked to ignore EOS.
    let sim = quetta_sim::Simulator::start(quetta_sim::SimConfig {
        ttft: std::time::Duration::from_millis(2),
        itl: std::time::Duration::from_millis(1),
        output_len: quetta_sim::OutputLen::Uniform { min: 1, max: 8 },
        ..quetta_sim::SimConfig::default()
    })
    .unwrap();
    let url = sim.base_url();
    let d = tmpdir("stress");
    let go = |extra: &[&str]| {
        let mut a = vec![
            "run",
            "--base-url",
            &url,
            "--num-requests",
            "40",
            "--concurrency",
            "4",
            "--input-len",
            "48",
            "--output-len",
            "24",
            "--overwrite",
            "--quiet",
            "--output-dir",
            d.to_str().unwrap(),
        ];
        a.extend(extra);
        run(&a)
    };
    let o = go(&["--mode", "stress", "--reset-prefix-cache", "/reset_prefix_cache"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d);
    assert!(schema().is_valid(&s));
    assert_eq!(s["osl_hit_rate"], 1.0, "{}", text(&o));
    assert_eq!(s["total_cached_tokens"], 0, "stress prompts share no prefix");
    assert!(s["notes"].to_string().contains("prefix cache was reset"));
    // the same without stress mode: the model stops early, and the summary says so
    let o = go(&[]);
    assert!(o.status.success(), "{}", text(&o));
    let hit = summary(&d)["osl_hit_rate"].as_f64().unwrap();
    assert!(hit < 0.5, "without ignore_eos the simulated model stops early: {hit}");
    // a reset endpoint the server does not have fails the run, clearly
    let o = go(&["--mode", "stress", "--reset-prefix-cache", "/no_such_endpoint"]);
    assert!(!o.status.success());
    let out = text(&o);
    assert!(out.contains("/no_such_endpoint") && out.contains("404"), "{out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn server_metrics_and_gpu_telemetry_during_a_run() {
    let d = tmpdir("server-metrics");
    let o = run(&[
        "run",
        "--num-requests",
        "30",
        "--concurrency",
        "6",
        "--output-len",
        "16",
        "--server-metrics",
        "auto",
        "--server-metrics-interval",
        "100ms",
        "--gpu-telemetry",
        "--output-dir",
        d.to_str().unwrap(),
        "--quiet",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("server     vllm"), "{out}");
    let s = summary(&d);
    let errors: Vec<String> =
        schema().iter_errors(&s).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "summary.json violates its schema: {errors:?}");
    let sm = &s["server_metrics"];
    assert!(sm["scrapes"].as_u64().unwrap() >= 2);
    // the server's counters moved by exactly what the client measured
    assert_eq!(sm["deltas"]["requests_succeeded"]["delta"], 30.0);
    assert_eq!(
        sm["deltas"]["generation_tokens"]["delta"].as_f64(),
        s["total_output_tokens"].as_f64()
    );
    assert_eq!(sm["deltas"]["prompt_tokens"]["delta"].as_f64(), s["total_input_tokens"].as_f64());
    assert_eq!(sm["deltas"]["ttft_s"]["count"], 30.0);
    let series = std::fs::read_to_string(d.join("server_metrics.jsonl")).unwrap();
    assert_eq!(series.lines().count() as u64, sm["scrapes"].as_u64().unwrap());
    // GPU telemetry: a clean one-line note here (no driver); a report where there is one
    if s["gpu"].is_null() {
        assert!(s["notes"].to_string().contains("no NVIDIA driver"), "{}", s["notes"]);
    } else {
        assert!(s["gpu"]["energy_per_output_token_j"].is_number());
    }
    // a metrics URL nobody answers: the run goes on and says so
    let o = run(&[
        "run",
        "--num-requests",
        "3",
        "--server-metrics",
        "http://127.0.0.1:9/metrics",
        "--overwrite",
        "--output-dir",
        d.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d);
    assert_eq!(s["completed"], 3);
    assert!(s["notes"].to_string().contains("no scrape of http://127.0.0.1:9/metrics succeeded"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn session_ids_reach_the_server_for_sticky_routing_unless_turned_off() {
    for (flags, expect) in [
        (vec![], true),
        (vec!["--session-header", "none"], true), // still in the body's `user`
        (vec!["--session-header", "none", "--session-body-field", "none"], false),
    ] {
        let sim = quetta_sim::Simulator::start(quetta_sim::SimConfig {
            ttft: std::time::Duration::from_millis(1),
            itl: std::time::Duration::from_millis(1),
            ..quetta_sim::SimConfig::default()
        })
        .unwrap();
        let d = tmpdir("sticky");
        let url = sim.base_url();
        let mut a = vec![
            "run",
            "--base-url",
            &url,
            "--profile",
            "mtbench-2turn",
            "--num-sessions",
            "2",
            "--output-len",
            "4",
            "--quiet",
            "--output-dir",
            d.to_str().unwrap(),
        ];
        a.extend(flags.iter().copied());
        let o = run(&a);
        assert!(o.status.success(), "{}", text(&o));
        let recs = sim.records();
        assert_eq!(recs.len(), 4);
        assert!(
            recs.iter().all(|r| r.session_id.is_some() == expect),
            "{flags:?}: {:?}",
            recs.iter().map(|r| r.session_id.clone()).collect::<Vec<_>>()
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn pow2_concurrency_sweep_writes_steps_and_a_sweep_table() {
    let d = tmpdir("sweep");
    let o = run(&[
        "sweep",
        "--concurrency-pow2",
        "4",
        "--num-requests",
        "24",
        "--output-len",
        "8",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("== Quetta sweep ==") && out.contains("req/min"), "{out}");
    let sw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("sweep.json")).unwrap()).unwrap();
    let steps = sw["steps"].as_array().unwrap();
    let cs: Vec<f64> = steps.iter().map(|s| s["concurrency"].as_f64().unwrap()).collect();
    assert_eq!(cs, [1.0, 2.0, 4.0]);
    for st in steps {
        // each step is a whole run whose summary the sweep row repeats
        let s = summary(Path::new(st["dir"].as_str().unwrap()));
        assert!(schema().is_valid(&s));
        assert_eq!(st["request_throughput"], s["request_throughput"]);
        assert_eq!(st["completed"], 24);
        assert_eq!(st["e2e_p99_ms"], s["e2e_ms"]["p99"]);
    }
    // throughput grows with concurrency against the unbounded simulator
    let t: Vec<f64> = steps.iter().map(|s| s["request_throughput"].as_f64().unwrap()).collect();
    assert!(t[2] > t[0] * 2.5, "{t:?}");
    assert_eq!(sw["peak"]["concurrency"], 4.0);

    // reports: one self-contained HTML file and a PDF with an embedded font
    let o = run(&["report", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(d.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for external in ["<script", "src=", "href=", "<link", "@import"] {
        assert!(!html.contains(external), "report.html must not load anything: {external}");
    }
    // charts: 3 sweep charts + 5 per step, each a polyline with real points
    assert_eq!(html.matches("<svg").count(), 3 + 5 * 3);
    assert!(html.contains("Throughput vs concurrency") && html.contains("Latency CDF"));
    let peak = format!("{:.2}", sw["peak"]["request_throughput"].as_f64().unwrap());
    assert!(html.contains(&peak), "the peak throughput {peak} from sweep.json");
    for st in steps {
        let tp = st["request_throughput"].as_f64().unwrap();
        assert!(
            html.contains(&format!("<td>{tp:.3}</td>")),
            "step throughput {tp} in the sweep table"
        );
    }
    let pdf = std::fs::read(d.join("report.pdf")).unwrap();
    assert!(pdf.starts_with(b"%PDF-"));
    let body = String::from_utf8_lossy(&pdf);
    assert!(body.contains("FontFile2"), "the font is embedded");
    // title, sweep table + 2 charts, 1 more chart, one page per step
    assert!(body.contains(&format!("/Count {}", 3 + steps.len())), "page count");
    // Where Chromium and poppler are installed, render both as a user would see them.
    let shot = d.join("report.png");
    let chromium = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1100,1800"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", d.join("report.html").display()))
        .output();
    if chromium.is_ok_and(|o| o.status.success()) {
        assert!(std::fs::metadata(&shot).unwrap().len() > 20_000, "a non-empty screenshot");
    }
    let ppm = std::process::Command::new("pdftoppm")
        .args(["-r", "40", "-png", "-f", "2", "-l", "2"])
        .arg(d.join("report.pdf"))
        .arg(d.join("page"))
        .output();
    if ppm.is_ok_and(|o| o.status.success()) {
        let page = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with("page"))
            .expect("pdftoppm wrote the page");
        assert!(page.metadata().unwrap().len() > 5_000, "page 2 has the table and charts");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn slo_search_finds_the_saturation_rate_of_a_bounded_simulator() {
    // A simulator that runs 4 requests at once; each takes 10 ms + 19 × 5 ms (about 105 ms),
    // so it saturates near 4 / 0.105 s ≈ 38 requests/s: below that (constant arrivals)
    // nothing queues and TTFT is ~11 ms, above it the queue grows without bound. The
    // service time actually achieved on this machine is read back from the simulator's
    // own records, so the known rate is 4 / that.
    let sim = quetta_sim::Simulator::start(quetta_sim::SimConfig {
        ttft: std::time::Duration::from_millis(10),
        itl: std::time::Duration::from_millis(5),
        max_running: Some(4),
        worker_threads: 2,
        ..quetta_sim::SimConfig::default()
    })
    .unwrap();
    let url = sim.base_url();
    let d = tmpdir("slo");
    let o = run(&[
        "slo",
        "--base-url",
        &url,
        "--model",
        "sim",
        "--slo",
        "ttft:p99<50ms",
        "--start",
        "20",
        "--tolerance",
        "0.04",
        "--min-requests",
        "100",
        "--arrival",
        "constant",
        "--input-len",
        "8",
        "--output-len",
        "20",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("slo.json")).unwrap()).unwrap();
    let answer = s["answer"].as_f64().unwrap();
    let failing = s["first_failing"].as_f64().unwrap();
    let mut service: Vec<f64> = sim
        .records()
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| r.end.duration_since(r.arrival).as_secs_f64())
        .collect();
    service.sort_by(f64::total_cmp);
    // the quarter of requests that did not queue (low rates, constant arrivals)
    let s_unqueued = service[service.len() / 4];
    let saturation = 4.0 / s_unqueued;
    println!("SLO search: answer {answer} req/s, first failing {failing}; service {:.1} ms -> saturation {saturation:.2} req/s", s_unqueued * 1e3);
    assert!((failing - answer) / failing <= 0.04 + 1e-9, "bisected to the tolerance");
    assert!(
        answer <= saturation * 1.03 && answer >= saturation * 0.9,
        "answer {answer} req/s, the simulator saturates at {saturation:.2}"
    );
    assert!(s["probes"].as_array().unwrap().len() >= 4);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_flags_a_slower_simulator_and_export_writes_csv_and_vllm_json() {
    let base = tmpdir("cmp-base");
    let same = tmpdir("cmp-same");
    let slow = tmpdir("cmp-slow");
    let go = |dir: &Path, ttft: &str, itl: &str| {
        let o = run(&[
            "run",
            "--num-requests",
            "120",
            "--concurrency",
            "6",
            "--output-len",
            "12",
            "--sim-ttft-ms",
            ttft,
            "--sim-itl-ms",
            itl,
            "--quiet",
            "--output-dir",
            dir.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
    };
    go(&base, "20", "5");
    go(&same, "20", "5");
    go(&slow, "24", "6"); // 20 % slower
    let o = run(&[
        "compare",
        base.to_str().unwrap(),
        same.to_str().unwrap(),
        "--fail-on-regression",
        "5%",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "a run against its twin: {out}");
    // Twins may differ significantly by a little (tests run in parallel here, so the CPU the
    // two runs got differs; with kernel receive stamps the within-run spread is small), but
    // never by the 20 % the slower simulator adds.
    let twin: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(same.join("compare.json")).unwrap()).unwrap();
    for m in twin["metrics"].as_array().unwrap() {
        let rel = m["relative_delta"].as_f64().unwrap_or(0.0);
        assert!(rel.abs() < 0.05 || m["significant"] != true, "twin runs differ: {m}");
    }
    let o = run(&[
        "compare",
        base.to_str().unwrap(),
        slow.to_str().unwrap(),
        "--fail-on-regression",
        "5%",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("REGRESSION") && out.contains("e2e_ms +"), "{out}");
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(slow.join("compare.json")).unwrap()).unwrap();
    let e2e = c["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "e2e_ms").unwrap();
    let rel = e2e["relative_delta"].as_f64().unwrap();
    assert!((0.15..0.25).contains(&rel) && e2e["significant"] == true, "{e2e}");
    // without a threshold a regression is reported but does not fail
    let o = run(&["compare", base.to_str().unwrap(), slow.to_str().unwrap()]);
    assert!(o.status.success());

    // exports
    let o = run(&["export", base.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = std::fs::read_to_string(base.join("requests.csv")).unwrap();
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(base.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), recs.len() + 1, "a header and one row per request");
    let header: Vec<&str> = lines[0].split(',').collect();
    let ttft_col = header.iter().position(|h| *h == "ttft_ms").unwrap();
    for (line, r) in lines[1..].iter().zip(&recs) {
        let v: f64 = line.split(',').nth(ttft_col).unwrap().parse().unwrap();
        assert_eq!(Some(v), r["ttft_ms"].as_f64(), "the CSV carries the record's values");
    }
    // Parquet: the same rows and values, read back with the parquet crate
    let o = run(&["export", base.to_str().unwrap(), "--format", "parquet"]);
    assert!(o.status.success(), "{}", text(&o));
    {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::Field;
        let f = std::fs::File::open(base.join("requests.parquet")).unwrap();
        let reader = SerializedFileReader::new(f).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows() as usize, recs.len());
        let rows: Vec<_> = reader.get_row_iter(None).unwrap().map(Result::unwrap).collect();
        assert_eq!(rows.len(), recs.len());
        for (row, r) in rows.iter().zip(&recs) {
            let cols: std::collections::HashMap<&str, &Field> =
                row.get_column_iter().map(|(k, v)| (k.as_str(), v)).collect();
            assert_eq!(cols["id"], &Field::Long(r["id"].as_i64().unwrap()));
            assert_eq!(cols["ttft_ms"], &Field::Double(r["ttft_ms"].as_f64().unwrap()));
            assert_eq!(cols["e2e_ms"], &Field::Double(r["e2e_ms"].as_f64().unwrap()));
            assert_eq!(cols["output_tokens"], &Field::Long(r["output_tokens"].as_i64().unwrap()));
            assert_eq!(cols["error_kind"], &Field::Null);
            assert_eq!(cols["session_id"], &Field::Null);
        }
    }
    let o = run(&["export", base.to_str().unwrap(), "--format", "vllm"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base.join("vllm_result.json")).unwrap())
            .unwrap();
    // the field names vLLM's `bench serve --save-result` writes
    for k in [
        "date",
        "backend",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "generated_texts",
        "errors",
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "median_tpot_ms",
        "std_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "median_itl_ms",
        "std_itl_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "median_e2el_ms",
        "std_e2el_ms",
        "p99_e2el_ms",
    ] {
        assert!(v.get(k).is_some(), "vllm result lacks {k}");
    }
    assert_eq!(v["ttfts"].as_array().unwrap().len(), 120);
    assert_eq!(v["completed"], 120);
    for d in [base, same, slow] {
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn time_series_steady_state_and_stop_on_saturation() {
    let d = tmpdir("series");
    // a load the simulator keeps up with: steady, not saturated
    let o = run(&[
        "run",
        "--request-rate",
        "20",
        "--arrival",
        "constant",
        "--duration",
        "5s",
        "--input-len",
        "8",
        "--output-len",
        "20",
        "--sim-ttft-ms",
        "10",
        "--sim-itl-ms",
        "5",
        "--sim-max-running",
        "4",
        "--quiet",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d);
    assert!(schema().is_valid(&s));
    assert_eq!(s["steady_state"]["over_saturated"], false, "{}", s["steady_state"]);
    let series: Vec<serde_json::Value> = std::fs::read_to_string(d.join("timeseries.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let total = |k: &str| series.iter().map(|x| x[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(total("completed"), s["completed"].as_u64().unwrap());
    assert_eq!(total("sent"), s["sent"].as_u64().unwrap());
    assert_eq!(total("output_tokens"), s["total_output_tokens"].as_u64().unwrap());
    assert_eq!(series[2]["sent"], 20, "20 requests per second");
    // 60 req/s against a server that saturates near 38: stopped early, flagged
    let t0 = std::time::Instant::now();
    let o = run(&[
        "run",
        "--request-rate",
        "60",
        "--arrival",
        "constant",
        "--duration",
        "40s",
        "--input-len",
        "8",
        "--output-len",
        "20",
        "--sim-ttft-ms",
        "10",
        "--sim-itl-ms",
        "5",
        "--sim-max-running",
        "4",
        "--stop-on-saturation",
        "--drain-timeout",
        "2s",
        "--quiet",
        "--overwrite",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(t0.elapsed().as_secs() < 25, "stopped well before its 40 s");
    let s = summary(&d);
    assert!(schema().is_valid(&s));
    assert_eq!(s["steady_state"]["over_saturated"], true);
    assert_eq!(s["partial"], true);
    assert!(s["notes"].to_string().contains("--stop-on-saturation"), "{}", s["notes"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// Words to a number, independently of the command's spelling code.
fn words_to_number(s: &str) -> Option<u64> {
    let small = |w: &str| -> Option<u64> {
        let ones = [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ];
        let tens =
            ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
        if let Some(i) = ones.iter().position(|x| *x == w) {
            return Some(i as u64);
        }
        if let Some((t, o)) = w.split_once('-') {
            return Some(
                tens.iter().position(|x| *x == t)? as u64 * 10
                    + ones.iter().position(|x| *x == o)? as u64,
            );
        }
        tens.iter().position(|x| *x == w).map(|i| i as u64 * 10)
    };
    let (mut total, mut cur) = (0u64, 0u64);
    for w in s.split_whitespace() {
        match w {
            "hundred" => cur *= 100,
            "thousand" | "million" | "billion" => {
                let scale = match w {
                    "thousand" => 1_000,
                    "million" => 1_000_000,
                    _ => 1_000_000_000,
                };
                total += cur * scale;
                cur = 0;
            }
            _ => cur += small(w)?,
        }
    }
    Some(total + cur)
}

#[test]
fn correctness_counts_wrong_answers() {
    use std::io::{BufRead, BufReader, Read, Write};
    // A strict little server on 127.0.0.1: it reads the spelled number and answers its digits,
    // except for every 4th request, which it answers off by one.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let s2 = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let served = s2.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let text = v["messages"][0]["content"].as_str().unwrap().to_owned();
                let words =
                    text.split("number: ").nth(1).unwrap().split(". Output").next().unwrap();
                let n = words_to_number(words).expect("words the server understands");
                let k = served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = if k % 4 == 3 { n + 1 } else { n };
                let chunk = |c: &str, fin: &str| {
                    format!("data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{c}\"}},\"finish_reason\":{fin}}}]}}\n\n")
                };
                let sse = format!(
                    "{}{}data: [DONE]\n\n",
                    chunk(&answer.to_string(), "null"),
                    chunk("", "\"stop\"")
                );
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{sse}");
            });
        }
    });
    let d = tmpdir("correct");
    let o = run(&[
        "correctness",
        "--base-url",
        &format!("http://{addr}"),
        "--model",
        "m",
        "--num-requests",
        "40",
        "--concurrency",
        "1",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("correctness.json")).unwrap())
            .unwrap();
    assert_eq!(c["answered"], 40, "{out}");
    assert_eq!(c["mismatches"], 10, "every 4th answer is wrong: {out}");
    assert_eq!(c["mismatch_rate"], 0.25);
    assert!(c["examples"].as_array().unwrap().len() == 5);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn vision_requests_litellm_headers_and_unsupported_backends() {
    // A simulator playing a LiteLLM proxy: it adds x-litellm-* headers; images count 256
    // prompt tokens each.
    let sim = quetta_sim::Simulator::start(quetta_sim::SimConfig {
        ttft: std::time::Duration::from_millis(2),
        itl: std::time::Duration::from_millis(1),
        response_headers: vec![
            ("x-litellm-model-id".into(), "abc123".into()),
            ("x-litellm-response-cost".into(), "0.0001".into()),
            ("x-other".into(), "not kept".into()),
        ],
        ..quetta_sim::SimConfig::default()
    })
    .unwrap();
    let url = sim.base_url();
    let d = tmpdir("vision");
    let o = run(&[
        "run",
        "--base-url",
        &url,
        "--backend",
        "litellm",
        "--model",
        "openai/gpt-4o-mini",
        "--modality",
        "vision",
        "--images-per-request",
        "2",
        "--num-requests",
        "6",
        "--input-len",
        "10",
        "--output-len",
        "4",
        "--quiet",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d);
    assert!(schema().is_valid(&s));
    assert!(s["target"]["backend"].as_str().unwrap().starts_with("litellm"));
    // 10 words + 2 images × 256 tokens, as the server counted them
    assert_eq!(s["total_input_tokens"], 6 * (10 + 512));
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(d.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &recs {
        assert_eq!(r["response_headers"]["x-litellm-model-id"], "abc123");
        assert_eq!(r["response_headers"]["x-litellm-response-cost"], "0.0001");
        assert!(r["response_headers"].get("x-other").is_none());
    }
    // a user's image file, and bad input
    let png = d.join("img.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n0000").unwrap();
    let not_img = d.join("img.txt");
    std::fs::write(&not_img, "hello").unwrap();
    let o = run(&[
        "run",
        "--base-url",
        &url,
        "--model",
        "m",
        "--modality",
        "vision",
        "--image",
        png.to_str().unwrap(),
        "--num-requests",
        "2",
        "--quiet",
        "--overwrite",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "run",
        "--base-url",
        &url,
        "--model",
        "m",
        "--modality",
        "vision",
        "--image",
        not_img.to_str().unwrap(),
        "--num-requests",
        "2",
        "--overwrite",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("img.txt") && text(&o).contains("not a PNG"), "{}", text(&o));
    let o = run(&["run", "--backend", "sagemaker", "--num-requests", "2"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--sagemaker-endpoint"), "{}", text(&o));
    let o = run(&["run", "--backend", "vertex", "--vertex-project", "p", "--num-requests", "2"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("needs --model"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

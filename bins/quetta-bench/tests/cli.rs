//! `quetta-bench` as a user types it: flags, exit codes, what it prints and which files it
//! writes. What the commands compute is tested in the libraries (`crates/quetta/tests`).

use std::path::Path;
use std::process::Command;

mod common;
use common::{bin, json, run, text, tmpdir, valid};

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
    // the binary names itself as the tool that wrote the run
    assert_eq!(
        (&s["tool"], &s["tool_version"]),
        (&"quetta-bench".into(), &env!("CARGO_PKG_VERSION").into())
    );
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
        assert_eq!(r["itl_us"].as_array().unwrap().len(), 127);
    }
    // the same directory again is refused without --overwrite
    let o = run(&["run", "--num-requests", "2", "--output-dir", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("already holds a run"), "{}", text(&o));
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
            "--no-preflight",
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
    // the fitted distribution follows its schema
    valid(quetta::report::schema::DISTRIBUTION, &json(&fit));
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
                    // this server answers one request per connection and says so
                    b"HTTP/1.1 302 Found\r\nlocation: /cdn/tok.json\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            } else {
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        tok.len()
                    )
                    .as_bytes(),
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
    // one call: the summary and both reports
    assert!(d.join("report.html").is_file() && d.join("report.pdf").is_file());
    let s = summary(&d);
    assert!(schema().is_valid(&s), "rebuilt summary follows the schema");
    assert_eq!(s["partial"], true);
    assert_eq!(s["tool"], "quetta-bench", "the rebuilt summary names the tool that ran");
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
    assert_eq!(o.status.code(), Some(130), "an interrupted command exits 130: {}", text(&o));
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
    // prompts of 128–1,024 tokens with outputs of 64–256: a range ratio each
    let o = run(&[
        "run",
        "--input-len",
        "576",
        "--input-range-ratio",
        "0.778",
        "--output-len",
        "160",
        "--output-range-ratio",
        "0.6",
        "--num-requests",
        "1000",
        "--dry-run",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let span = |line: &str| -> (u32, u32) {
        let l = out.lines().find(|l| l.starts_with(line)).unwrap_or_else(|| panic!("{out}"));
        let num = |key: &str| -> u32 {
            let at = l.find(key).unwrap() + key.len();
            l[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
        };
        (num(" min "), num(" max "))
    };
    let ((ilo, ihi), (olo, ohi)) = (span("input "), span("output "));
    assert!((128..150).contains(&ilo) && (1000..=1024).contains(&ihi), "{out}");
    assert!((64..72).contains(&olo) && (248..=256).contains(&ohi), "{out}");
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
fn every_subcommand_takes_its_flags_and_writes_its_files() {
    let d = tmpdir("subcommands");
    let (a, b, sw) = (d.join("a"), d.join("b"), d.join("sweep"));
    for dir in [&a, &b] {
        let o = run(&[
            "run",
            "--num-requests",
            "30",
            "--concurrency",
            "3",
            "--output-len",
            "8",
            "--quiet",
            "--output-dir",
            dir.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = run(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--fail-on-regression",
        "50%",
        "--alpha",
        "0.01",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("== Quetta compare ==") && b.join("compare.json").is_file());
    for (f, file) in
        [("csv", "requests.csv"), ("parquet", "requests.parquet"), ("vllm", "vllm_result.json")]
    {
        let o = run(&["export", a.to_str().unwrap(), "--format", f]);
        assert!(o.status.success() && a.join(file).is_file(), "{f}: {}", text(&o));
    }
    let o = run(&["export", a.to_str().unwrap(), "--format", "xml"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&[
        "sweep",
        "--concurrency-pow2",
        "2",
        "--num-requests",
        "6",
        "--output-len",
        "4",
        "--output-dir",
        sw.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("sweep step 2/2: concurrency 2") && text(&o).contains("peak"),
        "{}",
        text(&o)
    );
    assert!(
        sw.join("sweep.json").is_file() && sw.join("step-01-concurrency-2/summary.json").is_file()
    );
    let o = run(&["report", sw.to_str().unwrap()]);
    assert!(o.status.success() && sw.join("report.pdf").is_file(), "{}", text(&o));
    // --num-runs: the repeats, each a run directory, and repeats.json by its schema
    let rp = d.join("repeats");
    let o = run(&[
        "run",
        "--num-runs",
        "2",
        "--num-requests",
        "6",
        "--output-len",
        "4",
        "--output-dir",
        rp.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("== Quetta repeats: 2 of 2 runs =="), "{}", text(&o));
    let r = json(&rp.join("repeats.json"));
    common::valid(include_str!("../../../docs/schema/repeats.schema.json"), &r);
    for i in 1..=2 {
        let s = json(&rp.join(format!("run-{i}/summary.json")));
        common::valid(common::SUMMARY_SCHEMA, &s);
        assert_eq!(r["runs"][i - 1]["completed"], s["completed"]);
    }
    // a sweep's steps are not repeated: refused, not ignored
    let o = run(&["sweep", "--concurrencies", "1", "--num-runs", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--num-runs repeats a run"), "{}", text(&o));
    // the slo command refuses per-request thresholds, pointing at the run-level form
    let o = run(&["slo", "--slo", "ttft:500ms", "--output-dir", d.join("slo").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("ttft:p99<500ms"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// A trace without --num-requests replays all of it; a run whose configuration is invalid
/// creates no directory.
#[test]
fn a_whole_trace_and_nothing_for_an_invalid_run() {
    let d = tmpdir("whole-trace");
    std::fs::create_dir_all(&d).unwrap();
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/traces/mooncake_fast25_conversation_trace.jsonl"
    ))
    .unwrap();
    let trace = d.join("t.jsonl");
    std::fs::write(&trace, src.lines().take(30).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let out = d.join("out");
    let o = run(&[
        "run",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-speed",
        "50",
        "--output-len",
        "4",
        "--quiet",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&out)["completed"], 30);
    let bad = d.join("bad");
    for args in [
        vec!["--percentiles", "150"],
        vec!["--endpoint", "chat", "--token-ids", "--tokenizer", "x"],
        vec!["--session-rate", "2"],
    ] {
        let mut a = vec!["run", "--output-dir", bad.to_str().unwrap()];
        a.extend(args.iter().copied());
        let o = run(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(!bad.exists(), "{args:?} left a directory behind");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// The client says when it set the pace (docs/METRICS.md, Client overhead): against the
/// simulator at zero delay with one client thread at concurrency 32 it does; at TTFT 50 ms /
/// ITL 10 ms it does not; and in every run, closed loop or open, the runner's own in-flight
/// count equals throughput × (queue + E2E + turnaround or release) within 5 % (Little's law).
#[test]
fn the_client_says_when_it_sets_the_pace_and_littles_law_holds() {
    let d = tmpdir("pace");
    let cases: [(&str, &[&str], Option<bool>); 3] = [
        (
            "fast",
            &[
                "--sim-ttft-ms",
                "0",
                "--sim-itl-ms",
                "0",
                "--threads",
                "1",
                "--concurrency",
                "32",
                "--num-requests",
                "3000",
            ],
            Some(true),
        ),
        (
            "slow",
            &[
                "--sim-ttft-ms",
                "50",
                "--sim-itl-ms",
                "10",
                "--concurrency",
                "32",
                "--num-requests",
                "160",
                "--output-len",
                "8",
            ],
            Some(false),
        ),
        (
            "open",
            &[
                "--sim-ttft-ms",
                "5",
                "--sim-itl-ms",
                "2",
                "--request-rate",
                "400",
                "--num-requests",
                "400",
                "--output-len",
                "8",
            ],
            None,
        ),
    ];
    for (name, args, paced) in cases {
        // Up to 3 runs where the client must not have set the pace: on CI's 2 cores the other
        // tests of this file run beside it, and a client that really lags (read lag p99 over
        // 1 ms) is rightly called the pace-setter. Every other check holds in every run.
        for attempt in 1..=3 {
            let out = d.join(format!("{name}-{attempt}"));
            if pace_case(name, &out, args, paced) || paced != Some(false) {
                break;
            }
            assert!(attempt < 3, "{name}: the client set the pace in 3 runs");
        }
    }
}

/// One run of [`the_client_says_when_it_sets_the_pace_and_littles_law_holds`]; false when
/// the client set the pace where `paced` says it should not have (every other check asserts).
fn pace_case(name: &str, out: &std::path::Path, args: &[&str], paced: Option<bool>) -> bool {
    let mut a = vec!["run", "--output-dir", out.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = run(&a);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let s = json(&out.join("summary.json"));
    let co = &s["client_overhead"];
    eprintln!("{name}: client_overhead {co}");
    let (runner, little) =
        (co["in_flight_runner"].as_f64().unwrap(), co["in_flight_from_latency"].as_f64().unwrap());
    assert!((runner - little).abs() <= 0.05 * runner, "{name}: Little's law: {co}");
    assert!(co["read_lag_ms"]["count"].as_u64().unwrap() > 0, "{name}: {co}");
    if paced == Some(false) && co["paced_by_client"] == true {
        eprintln!("{name}: the client set the pace in this run");
        return false;
    }
    match paced {
        Some(p) => {
            assert_eq!(co["paced_by_client"], p, "{name}: {co}");
            assert!(co["client_share"].is_number(), "{name}: {co}");
            assert_eq!(t.contains("WARNING: the client set the pace"), p, "{name}: {t}");
            if name == "slow" {
                assert!((runner - 32.0).abs() < 1.6, "{name}: 32 slots busy: {co}");
            }
        }
        None => {
            assert!(co["client_share"].is_null(), "open loop has no slot share: {co}");
            assert!(co["release_ms"]["count"].as_u64().unwrap() > 0, "{co}");
        }
    }
    let rec = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(rec.lines().next().unwrap()).unwrap();
    valid(include_str!("../../../docs/schema/request.schema.json"), &first);
    valid(include_str!("../../../docs/schema/summary.schema.json"), &s);
    true
}

/// `compare` takes a vLLM result file (`vllm bench serve --save-result --save-detailed`) on
/// either side and compares it as it compares two runs, naming where vLLM's definitions
/// differ: one written by `--save-result`, and one in an older vLLM's shape (no per-request
/// latencies, a failed request) whose E2E comes from TTFT + the gaps. A file without the
/// per-request lists is refused, naming it.
#[test]
fn compare_takes_a_vllm_result_file_on_either_side() {
    let d = tmpdir("cmp-vllm");
    let (base, cand, vdir) = (d.join("base"), d.join("cand"), d.join("v"));
    let o = run(&[
        "run",
        "--num-requests",
        "40",
        "--concurrency",
        "4",
        "--output-len",
        "8",
        "--output-dir",
        base.to_str().unwrap(),
        "--save-result",
        "--save-detailed",
        "--result-dir",
        vdir.to_str().unwrap(),
        "--result-filename",
        "base.json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "run",
        "--num-requests",
        "40",
        "--concurrency",
        "4",
        "--output-len",
        "8",
        "--sim-ttft-ms",
        "40",
        "--output-dir",
        cand.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let vfile = vdir.join("base.json");
    let o = run(&["compare", vfile.to_str().unwrap(), cand.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("the baseline is a vLLM result file"), "{t}");
    assert!(t.contains("pools every gap"), "{t}");
    let c = json(&cand.join("compare.json"));
    let ttft = c["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "ttft_ms").unwrap();
    assert_eq!(ttft["n"], serde_json::json!([40, 40]), "{c}");
    assert_eq!(ttft["verdict"], "slower (significant)", "20 ms → 40 ms: {c}");
    // the other way round: compare.json goes beside the vLLM file
    let o = run(&["compare", cand.to_str().unwrap(), vfile.to_str().unwrap()]);
    assert!(o.status.success() && text(&o).contains("the candidate is a vLLM result file"));
    assert!(vdir.join("base.json.compare.json").is_file());

    // a real vllm bench serve file (vLLM 0.33.0 against llama.cpp; fixtures/README.md)
    let real = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/vllm/bench_serve_llama_cpp_c2.json");
    let o = run(&["compare", real.to_str().unwrap(), cand.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("the baseline is a vLLM result file"), "{t}");
    let c = json(&cand.join("compare.json"));
    let tpot = c["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "tpot_ms").unwrap();
    assert_eq!(tpot["n"][0], 8, "{c}");
    let med = tpot["baseline_median"].as_f64().unwrap();
    assert!((10.0..100.0).contains(&med), "llama.cpp's TPOT on this model: {c}");

    // an older vLLM's file: no latencies; request 2 failed
    let old = d.join("old.json");
    std::fs::write(&old, r#"{"date":"20261130-101500","model_id":"m","request_throughput":2.0,"output_throughput":8.0,
        "ttfts":[0.020,0.022,0.0,0.021],"itls":[[0.005,0.005,0.005],[0.005,0.006,0.005],[],[0.005,0.005,0.004]],
        "output_lens":[4,4,0,4],"errors":["","","Connection reset",""],"input_lens":[8,8,8,8]}"#).unwrap();
    let o = run(&["compare", old.to_str().unwrap(), cand.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("its E2E is TTFT + the sum of its inter-token gaps"), "{t}");
    let c = json(&cand.join("compare.json"));
    let e2e = c["metrics"].as_array().unwrap().iter().find(|m| m["metric"] == "e2e_ms").unwrap();
    assert_eq!(e2e["n"][0], 3, "the failed request is left out: {c}");
    // E2E = TTFT + gaps: 35, 38 and 35 ms
    assert!((e2e["baseline_median"].as_f64().unwrap() - 35.0).abs() < 1e-6, "{c}");

    // not a detailed file: refused, naming it
    let bad = d.join("summary-only.json");
    std::fs::write(&bad, r#"{"ttfts":[0.1,0.2],"itls":[[]],"output_lens":[1,1]}"#).unwrap();
    let o = run(&["compare", bad.to_str().unwrap(), cand.to_str().unwrap()]);
    let t = text(&o);
    assert!(
        !o.status.success()
            && t.contains("summary-only.json")
            && t.contains("save-detailed option"),
        "{t}"
    );
}

// `quetta-bench k8s` in the same test binary (each binary is a link of its own).
#[path = "cli_parts/k8s.rs"]
mod k8s;

// vLLM's and AIPerf's protocol names, in the same test binary.
#[path = "cli_parts/protocols.rs"]
mod protocols;

//! The traps a user coming from `vllm bench serve`, AIPerf or GuideLLM falls into: flags
//! that meant something else, failed runs that exited 0, Ctrl-C that stopped one step, a
//! wrong key found only after the run. Each test here failed before it was mended.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{bin, json, run, text, tmpdir, valid, SUMMARY_SCHEMA};
use quetta::report::schema;

#[test]
fn a_bare_number_in_a_duration_flag_is_seconds() {
    // `--duration 1` ran for 1 ms, and `--request-timeout 5` cut every request at 5 ms
    let d = tmpdir("secs");
    let o = run(&[
        "run",
        "--duration",
        "1",
        "--concurrency",
        "2",
        "--request-timeout",
        "5",
        "--output-dir",
        d.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s = json(&d.join("summary.json"));
    assert_eq!(s["config"]["duration_s"], 1.0);
    let took = s["duration_s"].as_f64().unwrap();
    assert!((1.0..3.0).contains(&took), "a 1 s run took {took} s");
    assert_eq!(s["failed"], 0, "5 s is plenty for a 0.7 s answer");
    // and the units are said: every duration flag's help names its unit
    let help = String::from_utf8(run(&["run", "--help"]).stdout).unwrap();
    for flag in [
        "--duration",
        "--request-timeout",
        "--idle-timeout",
        "--drain-timeout",
        "--think-time",
        "--burst-gap",
        "--ramp-over",
        "--retry-backoff",
        "--ttft-timeout",
        "--connect-timeout",
    ] {
        let at = help.find(&format!("      {flag} ")).unwrap_or_else(|| panic!("{flag} in help"));
        let entry: String = help[at..].lines().take(3).collect();
        assert!(entry.contains("seconds"), "{flag}: {entry}");
    }
}

#[test]
fn a_run_in_which_every_request_failed_exits_1_and_says_why() {
    let d = tmpdir("allfail");
    let o = run(&[
        "run",
        "--num-requests",
        "10",
        "--sim-fault",
        "http500",
        "--output-dir",
        d.to_str().unwrap(),
        "-q",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    // the server's own words, in the terminal, summary.json and the reports
    assert!(
        out.contains("all 10 measured requests failed") && out.contains("simulated HTTP 500"),
        "{out}"
    );
    let s = json(&d.join("summary.json"));
    valid(SUMMARY_SCHEMA, &s);
    assert_eq!(s["top_errors"][0]["count"], 10);
    assert_eq!(s["top_errors"][0]["kind"], "http_5xx");
    assert!(s["top_errors"][0]["message"].as_str().unwrap().contains("simulated HTTP 500"));
    let o = run(&["report", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(d.join("report.html")).unwrap();
    let failed = html.find("FAILED: every one of the 10").expect("a failure banner");
    let msg = html.find("simulated HTTP 500").expect("the server's message");
    assert!(msg > failed && !html.contains("<svg"), "errors first, no empty chart");
    // connection refused: nothing listens on the port
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let args =
        ["run", "--base-url", &url, "--model", "m", "--num-requests", "5", "--no-preflight", "-q"];
    let d2 = tmpdir("refused");
    let o = run(&[&args[..], &["--output-dir", d2.to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("all 5 measured requests failed"), "{}", text(&o));
    // partial failure: the default --min-success-rate (0.9) fails half of them failing,
    // and 0.4 lets it pass
    let half =
        ["run", "--num-requests", "20", "--concurrency", "1", "--sim-fault", "http503@2", "-q"];
    let (d3, d4) = (tmpdir("half"), tmpdir("half-ok"));
    let o = run(&[&half[..], &["--output-dir", d3.to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("success rate 50.0% is below --min-success-rate 90.0%"),
        "{}",
        text(&o)
    );
    let o =
        run(&[&half[..], &["--output-dir", d4.to_str().unwrap(), "--min-success-rate", "0.4"]]
            .concat());
    assert!(o.status.success(), "{}", text(&o));
}

/// A real tokenizer that knows none of the bundled corpus's words: every prompt it is asked
/// to spell to an exact token count decodes to nothing.
const KNOWS_NO_WORD: &str = r#"{"version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
    "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
  "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "quetta": 1}, "unk_token": "[UNK]"}}"#;

#[test]
fn a_workload_that_cannot_build_its_prompts_fails_and_says_why() {
    // the run ended at once with 0 requests, exit 0 and no word of why
    let d = tmpdir("unbuildable");
    std::fs::create_dir_all(&d).unwrap();
    let tok = d.join("tokenizer.json");
    std::fs::write(&tok, KNOWS_NO_WORD).unwrap();
    let args = ["run", "--tokenizer", tok.to_str().unwrap(), "--num-requests", "4", "-q"];
    let why = "request 0: invalid prompt length: could not build a prompt of exactly";
    let model =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/twin/llama-smollm2-4slots.json");
    for (name, extra) in [("live", vec![]), ("predicted", vec!["--sim-model", model, "--predict"])]
    {
        let out = d.join(name);
        let o = run(&[&args[..], &extra, &["--output-dir", out.to_str().unwrap()]].concat());
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {t}");
        assert!(
            t.contains("error: the workload ended before the planned requests") && t.contains(why),
            "{name}: {t}"
        );
        let s = json(&out.join("summary.json"));
        valid(SUMMARY_SCHEMA, &s);
        assert!(s["workload_error"].as_str().unwrap().contains(why), "{name}: {s}");
        assert_eq!(s["partial"], true, "{name}");
        assert_eq!(s["dispatched"], 0, "{name}");
        let notes = s["notes"].to_string();
        assert!(
            notes.contains("FAILED: the workload ended after 0 of 4 requests"),
            "{name}: {notes}"
        );
    }
    // the reports open with it
    let o = run(&["report", d.join("live").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(d.join("live").join("report.html")).unwrap();
    assert!(
        html.contains("<p class=\"banner\">FAILED: the workload ended after 0 of 4 requests"),
        "a failure banner"
    );
    // the schedule it would print is refused too
    let o = run(&[&args[..], &["--dry-run"]].concat());
    assert!(!o.status.success() && text(&o).contains(why), "{}", text(&o));
}

#[test]
fn a_sweep_or_slo_search_whose_workload_cannot_build_its_prompts_stops_and_fails() {
    // every step ran 0 requests and the sweep exited 0; the search answered "none: even 1
    // fails" (the server blamed for the workload)
    let d = tmpdir("unbuildable-sweep");
    std::fs::create_dir_all(&d).unwrap();
    let tok = d.join("tokenizer.json");
    std::fs::write(&tok, KNOWS_NO_WORD).unwrap();
    let why = "request 0: invalid prompt length: could not build a prompt of exactly";
    let (sweep, auto, slo) = (d.join("sweep"), d.join("auto"), d.join("slo"));
    let common = ["--tokenizer", tok.to_str().unwrap(), "--num-requests", "4", "-q"];
    // the command with `common` and `--output-dir out` exits 1; its output, and FILE of `out`
    // (valid against its schema)
    let fails = |args: &[&str], out: &Path, file: &str, schema: &str| {
        let o = run(&[args, &common, &["--output-dir", out.to_str().unwrap()]].concat());
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        let r = json(&out.join(file));
        valid(schema, &r);
        (t, r)
    };
    let (t, r) = fails(&["sweep", "--concurrencies", "1,2,4"], &sweep, "sweep.json", schema::SWEEP);
    assert!(
        t.contains("error: the sweep failed at step 1 of 3 (concurrency 1)") && t.contains(why),
        "{t}"
    );
    assert_eq!(r["steps"].as_array().unwrap().len(), 1, "no step after the failed one: {r}");
    assert!(r["failed"].as_str().unwrap().contains(why), "{r}");
    let o = run(&["report", sweep.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(sweep.join("report.html")).unwrap();
    assert!(html.contains("<p class=\"banner\">FAILED: step 1 of 3"), "a failure banner");
    // a sweep that measures its maximum first fails the same way there
    let args = ["sweep", "--rates", "auto", "--auto-concurrency", "2"];
    let (t, r) = fails(&args, &auto, "sweep.json", schema::SWEEP);
    assert!(
        t.contains("error: the sweep failed at the max-throughput step (concurrency 2)"),
        "{t}"
    );
    assert!(
        r["steps"].as_array().unwrap().is_empty() && r["failed"].as_str().unwrap().contains(why),
        "{r}"
    );
    let args = ["slo", "--slo", "ttft:p99<500ms", "--min-requests", "4"];
    let (t, r) = fails(&args, &slo, "slo.json", schema::SLO);
    assert!(t.contains("error: the search failed at probe 1 (rate 1)") && t.contains(why), "{t}");
    assert!(!t.contains("even 1 fails"), "the server is not blamed: {t}");
    assert_eq!((r["answer"].is_null(), r["probes"].as_array().unwrap().len()), (true, 1), "{r}");
    assert_eq!(r["probes"][0]["limited_by"], "workload", "{r}");
}

fn spawn(args: &[&str]) -> std::process::Child {
    bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn interrupt(child: &std::process::Child) {
    let st = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(st.success());
}

fn wait_for(path: &Path, t0: Instant) {
    while !path.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ctrl_c_stops_the_whole_sweep_and_exits_130_with_partial_marks() {
    let d = tmpdir("sweep-int");
    let child = spawn(&[
        "sweep",
        "--concurrencies",
        "1,2,4",
        "--num-requests",
        "300",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    let t0 = Instant::now();
    // the first step's records are being written: stop in the middle of it
    wait_for(&d.join("step-00-concurrency-1").join("requests.jsonl"), t0);
    std::thread::sleep(Duration::from_millis(1500));
    interrupt(&child);
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out}");
    let sw = json(&d.join("sweep.json"));
    let steps = sw["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "no step after the interrupted one: {out}");
    assert_eq!(steps[0]["partial"], true);
    assert!(sw["peak"].is_null(), "a step cut short is no peak");
    let done = steps[0]["completed"].as_u64().unwrap() + steps[0]["failed"].as_u64().unwrap();
    assert!(out.contains(&format!("PARTIAL: {done} of 300")), "{out}");
    assert!(!d.join("step-01-concurrency-2").exists());
    // a run: 130, summary.json and both reports say PARTIAL with the counts
    let r = tmpdir("run-int");
    let child = spawn(&[
        "run",
        "--num-requests",
        "500",
        "--concurrency",
        "2",
        "--output-dir",
        r.to_str().unwrap(),
    ]);
    wait_for(&r.join("requests.jsonl"), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    interrupt(&child);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let s = json(&r.join("summary.json"));
    assert_eq!((&s["partial"], &s["partial_reason"]), (&true.into(), &"stopped".into()));
    let label = format!(
        "PARTIAL: {} of 500 planned (stopped before the end)",
        s["completed"].as_u64().unwrap() + s["failed"].as_u64().unwrap()
    );
    assert!(text(&o).contains(&label), "{}", text(&o));
    assert!(run(&["report", r.to_str().unwrap()]).status.success());
    assert!(std::fs::read_to_string(r.join("report.html")).unwrap().contains(&label));
    let pdf = std::fs::read(r.join("report.pdf")).unwrap();
    assert!(pdf.len() > 1000, "a PDF was written");
}

#[test]
fn a_second_ctrl_c_quits_at_once() {
    // a server that reads each request and never answers: the first Ctrl-C waits for the
    // requests in flight (drain timeout 60 s), the second must not
    let (url, arrived) = silent_server();
    let d = tmpdir("twice");
    let child = spawn(&[
        "run",
        "--base-url",
        &url,
        "--model",
        "m",
        "--no-preflight",
        "--num-requests",
        "4",
        "--concurrency",
        "4",
        "--drain-timeout",
        "60",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    // the first Ctrl-C once the server holds all four requests
    for k in 0..4 {
        arrived.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("request {k}"));
    }
    let mut child = child;
    let err = std::io::BufReader::new(child.stderr.take().unwrap());
    interrupt(&child);
    // the second Ctrl-C once the first is handled: the command says so
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(err).map_while(Result::ok) {
            if line.contains("interrupted: no new requests") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(30)).expect("the first Ctrl-C is handled");
    let t0 = Instant::now();
    interrupt(&child);
    let o = child.wait_with_output().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5), "quit at once, not after the drain");
    assert!(err.contains("interrupted twice"), "{err}");
}

/// An HTTP/1.1 server on 127.0.0.1 that reads each request whole, says so on the channel,
/// and never answers (the connection stays open until the client closes it).
fn silent_server() -> (String, std::sync::mpsc::Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; len];
            if r.read_exact(&mut body).is_ok() {
                let _ = tx.send(());
            }
            held.push(s);
        }
    });
    (url, rx)
}

/// A one-route-per-answer HTTP/1.1 server on 127.0.0.1: `answer(method, path, headers)`
/// gives the status and JSON body. Each connection serves one request and closes.
fn fake_server(answer: impl Fn(&str, &str, &str) -> (u16, String) + Send + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (method, path) =
                (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
            let (mut headers, mut len) = (String::new(), 0usize);
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                headers.push_str(&h);
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            let (status, body) = answer(&method, &path, &headers);
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

const MODELS: &str = r#"{"object":"list","data":[{"id":"gpt-a","object":"model"}]}"#;

#[test]
fn a_preflight_check_stops_a_bad_key_an_unknown_model_or_a_dead_upstream_at_once() {
    // a proxy that wants `Bearer sk-good`, serves the alias gpt-a, and whose upstream is down
    let url = fake_server(|_, path, headers| {
        if !headers.contains("authorization: Bearer sk-good") {
            return (401, r#"{"error":{"message":"Authentication Error, Invalid proxy server token passed","type":"auth_error"}}"#.into());
        }
        match path {
            "/v1/models" => (200, MODELS.into()),
            _ => (500, r#"{"error":{"message":"litellm.APIConnectionError: Connection refused by upstream http://10.0.0.9:8000","type":null}}"#.into()),
        }
    });
    let base = ["run", "--base-url", &url, "--backend", "litellm", "--num-requests", "20", "-q"];
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 3] = [
        (&["--model", "gpt-a", "--api-key", "sk-wrong"], &[], "Invalid proxy server token"),
        (
            &["--model", "nope"],
            &[("LITELLM_API_KEY", "sk-good")],
            "has no model \"nope\"; it serves gpt-a",
        ),
        (
            &["--model", "gpt-a"],
            &[("LITELLM_API_KEY", "sk-good")],
            "Connection refused by upstream",
        ),
    ];
    for (i, (extra, env, want)) in cases.iter().enumerate() {
        let d = tmpdir(&format!("preflight-{i}"));
        let mut c = bin();
        c.args(base)
            .args(*extra)
            .args(["--output-dir", d.to_str().unwrap()])
            .env_remove("OPENAI_API_KEY")
            .env_remove("LITELLM_API_KEY");
        for (k, v) in *env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {out}");
        assert!(out.contains("pre-flight") && out.contains(want), "{extra:?}: {out}");
        assert!(!d.exists(), "nothing written for a run that never started");
        assert!(!out.contains("sk-good") && !out.contains("sk-wrong"), "no key in the output");
    }
    // no key at all for LiteLLM: warned about before the pre-flight refuses it
    let o = run(&[&base[..], &["--model", "gpt-a"]].concat());
    assert!(text(&o).contains("warning: --backend litellm without a key"), "{}", text(&o));
}

#[test]
fn vllm_bench_serve_commands_run_unchanged_with_the_same_meaning() {
    let dir = tmpdir("vllm");
    let results = dir.join("D");
    let vllm = |extra: &[&str], out: &str| {
        let mut a = vec![
            "run",
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "M",
            "--dataset-name",
            "random",
            "--random-input-len",
            "128",
            "--random-output-len",
            "64",
            "--num-prompts",
            "100",
            "--max-concurrency",
            "8",
        ];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--save-result", "--result-dir", results.to_str().unwrap()]);
        // exactly the vLLM command: the run directory is the default one, in the cwd
        let cwd = dir.join(out);
        std::fs::create_dir_all(&cwd).unwrap();
        let o = bin().args(&a).current_dir(&cwd).output().unwrap();
        assert!(o.status.success(), "{a:?}: {}", text(&o));
        let runs: Vec<_> = std::fs::read_dir(cwd.join("quetta-results"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(runs.len(), 1, "{runs:?}");
        json(&runs[0].join("summary.json"))
    };
    // request rate inf (vLLM's default) with --max-concurrency 8: a closed loop of 8
    let s = vllm(&[], "closed");
    assert_eq!(
        (s["config"]["load"].as_str(), s["config"]["concurrency"].as_u64()),
        (Some("closed"), Some(8))
    );
    assert_eq!(
        (s["completed"].as_u64(), s["config"]["endpoint"].as_str()),
        (Some(100), Some("chat"))
    );
    assert_eq!(
        (s["config"]["input_len"].as_u64(), s["config"]["output_len"].as_u64()),
        (Some(128), Some(64))
    );
    assert_eq!(s["total_output_tokens"], 6400);
    // --request-rate 10: Poisson arrivals at 10/s, at most 8 in flight (a request takes
    // 0.34 s here, so 3.4 in flight on average)
    let s = vllm(&["--request-rate", "10"], "open");
    assert_eq!(s["config"]["load"], "open");
    assert_eq!(
        (s["config"]["request_rate"].as_f64(), s["config"]["max_concurrency"].as_u64()),
        (Some(10.0), Some(8))
    );
    assert_eq!(s["config"]["arrival"], "poisson");
    let took = s["duration_s"].as_f64().unwrap();
    // 99 gaps of 0.1 s on average (standard deviation of their sum 1 s) and the last answer
    assert!((6.0..16.0).contains(&took), "100 requests at 10/s took {took} s");
    // --save-result: vLLM's file, with every key vLLM 0.33 writes
    let files: Vec<_> = std::fs::read_dir(&results).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let names: Vec<String> =
        files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|n| n.starts_with("openai-chat-infqps-concurrency8-M-")), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("openai-chat-10qps-concurrency8-M-")), "{names:?}");
    let v = json(&files[0]);
    valid(include_str!("../../../docs/schema/vllm_result.schema.json"), &v);
    for k in [
        "endpoint_type",
        "label",
        "latencies",
        "max_concurrent_requests",
        "max_output_tokens_per_s",
        "queue_times",
        "rtfx",
        "start_times",
        "ttfts",
        "itls",
        "input_lens",
        "output_lens",
    ] {
        assert!(v.get(k).is_some(), "{k} missing");
    }
    assert_eq!(v["latencies"].as_array().unwrap().len(), 100);
    // --metric-percentiles: vLLM's keys for each percentile asked for
    let name = "pcts.json";
    let o = run(&[
        "run",
        "--num-prompts",
        "10",
        "--metric-percentiles",
        "25,99.9",
        "--save-result",
        "--result-dir",
        results.to_str().unwrap(),
        "--result-filename",
        name,
        "-q",
        "--output-dir",
        dir.join("pcts").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let p = json(&results.join(name));
    valid(include_str!("../../../docs/schema/vllm_result.schema.json"), &p);
    for k in [
        "p25_ttft_ms",
        "p99.9_ttft_ms",
        "p25_itl_ms",
        "p25_tpot_ms",
        "p99.9_e2el_ms",
        "p99_ttft_ms",
    ] {
        assert!(p[k].as_f64().is_some(), "{k}: {p}");
    }
    // the peaks as vLLM computes them from its own lists (completed requests, whole seconds
    // from the earliest start): the file's lists give the file's peaks
    let list = |k: &str| -> Vec<f64> {
        v[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
    };
    let (starts, lat, ttfts) = (list("start_times"), list("latencies"), list("ttfts"));
    let done: Vec<usize> =
        (0..starts.len()).filter(|&i| v["errors"][i].as_str() == Some("")).collect();
    let min = done.iter().map(|&i| starts[i]).fold(f64::INFINITY, f64::min);
    let (mut active, mut tokens) = (vec![0u64; 64], vec![0u64; 64]);
    for &i in &done {
        let (a, b) = ((starts[i] - min) as usize, (starts[i] + lat[i] - min) as usize);
        for c in &mut active[a..=b] {
            *c += 1;
        }
        let mut t = starts[i] + ttfts[i];
        tokens[(t - min) as usize] += 1;
        for g in v["itls"][i].as_array().unwrap() {
            t += g.as_f64().unwrap();
            tokens[(t - min) as usize] += 1;
        }
    }
    assert_eq!(v["max_concurrent_requests"].as_u64(), active.iter().max().copied());
    let peak_tokens = v["max_output_tokens_per_s"].as_f64().unwrap();
    assert!((peak_tokens - *tokens.iter().max().unwrap() as f64).abs() <= 1.0, "{peak_tokens}");
}

#[test]
fn json_goes_to_stdout_alone_and_labels_and_metadata_are_kept() {
    let d = tmpdir("json");
    let o = run(&[
        "run",
        "--num-prompts",
        "5",
        "--json",
        "--label",
        "baseline",
        "--metadata",
        "gpu=H100",
        "tp=2",
        "--goodput",
        "ttft:500",
        "tpot:50",
        "--output-dir",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is summary.json and nothing else");
    assert_eq!(s["config"]["label"], "baseline");
    assert_eq!(s["config"]["metadata"]["gpu"], "H100");
    assert_eq!(s["config"]["metadata"]["tp"], "2");
    assert_eq!(s["goodput"]["slo"], "ttft:500ms,tpot:50ms");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("== Quetta results =="),
        "the table goes to stderr"
    );
    valid(SUMMARY_SCHEMA, &s);
    // compare and the reports show them
    let other = tmpdir("json-other");
    let o = run(&[
        "run",
        "--num-prompts",
        "5",
        "--label",
        "candidate",
        "-q",
        "--output-dir",
        other.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let out = text(&run(&["compare", d.to_str().unwrap(), other.to_str().unwrap()]));
    assert!(
        out.contains("label baseline, gpu=H100, tp=2") && out.contains("label candidate"),
        "{out}"
    );
    assert!(run(&["report", d.to_str().unwrap()]).status.success());
    let html = std::fs::read_to_string(d.join("report.html")).unwrap();
    assert!(html.contains("label baseline · gpu=H100 · tp=2"));
}

#[test]
fn the_help_is_grouped_complete_and_its_examples_work() {
    let help = String::from_utf8(run(&["run", "--help"]).stdout).unwrap();
    let mut at = 0;
    for h in [
        "Target:",
        "Load:",
        "Workload:",
        "Output:",
        "Timeouts:",
        "Telemetry:",
        "Managed endpoints:",
    ] {
        let i = help.find(&format!("\n{h}\n")).unwrap_or_else(|| panic!("heading {h}"));
        assert!(i > at, "{h} in order");
        at = i;
    }
    for cmd in [
        &["run"][..],
        &["sweep"],
        &["slo"],
        &["compare"],
        &["export"],
        &["correctness"],
        &["profiles"],
        &["report"],
        &["completions"],
        &["workload", "fit"],
    ] {
        let o = run(&[cmd, &["--help"]].concat());
        let h = String::from_utf8(o.stdout).unwrap();
        let lines: Vec<&str> = h.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            // an option's line (`--x`, `-q, --quiet`), not a possible value's (`- vertex:`)
            let b = t.as_bytes();
            let flag = b.len() > 2 && b[0] == b'-' && (b[1] == b'-' || b[1].is_ascii_alphabetic());
            if l.starts_with("  ") && flag && !t.starts_with("-h, --help") && !t.starts_with("-V") {
                // the text follows on the line (short help) or on the next one (long)
                let next = lines.get(i + 1).copied().unwrap_or("");
                let same_line = t.split_once("  ").is_some_and(|(_, d)| !d.trim().is_empty());
                let below = next.starts_with("          ") && !next.trim().is_empty();
                assert!(same_line || below, "{cmd:?}: {t} has no help text");
            }
        }
        assert!(h.contains("\nExample:\n  quetta-bench "), "{cmd:?} shows an example");
        if ["run", "sweep", "slo"].contains(&cmd[0]) {
            // the example works as written (in a fresh directory)
            let ex = h.split("\nExample:\n  ").nth(1).unwrap().lines().next().unwrap();
            let argv = shell_words(ex);
            let cwd = tmpdir(&format!("example-{}", cmd[0]));
            std::fs::create_dir_all(&cwd).unwrap();
            let o = bin().args(&argv[1..]).arg("-q").current_dir(&cwd).output().unwrap();
            assert!(o.status.success(), "{ex}: {}", text(&o));
        }
    }
    let o = run(&["completions", "bash"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("--num-prompts"));
    // unknown flags and profiles: did you mean
    let o = run(&["run", "--num-prompt", "5"]);
    assert!(text(&o).contains("--num-prompts"), "{}", text(&o));
    let o = run(&["run", "--profile", "chat-multitrun"]);
    assert!(text(&o).contains("(did you mean \"chat-multiturn\"?)"), "{}", text(&o));
}

/// Words of a one-line shell command with single quotes.
fn shell_words(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[test]
fn overwrite_removes_quettas_own_files_only_and_default_names_never_collide() {
    let d = tmpdir("overwrite");
    let sweep = |steps: &str| {
        let o = run(&[
            "sweep",
            "--concurrencies",
            steps,
            "--num-requests",
            "8",
            "--overwrite",
            "--output-dir",
            d.to_str().unwrap(),
            "-q",
        ]);
        assert!(o.status.success(), "{}", text(&o));
    };
    sweep("8,16,32");
    assert!(run(&["report", d.to_str().unwrap()]).status.success());
    std::fs::write(d.join("notes.txt"), "mine").unwrap();
    sweep("8");
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // the old steps 2 and 3 and the old reports are gone; the user's file stays
    assert_eq!(names, ["notes.txt", "step-00-concurrency-8", "sweep.json"], "{names:?}");
    // a run: its exports and reports go too
    let r = tmpdir("overwrite-run");
    let args = ["run", "--num-requests", "4", "--output-dir", r.to_str().unwrap(), "-q"];
    assert!(run(&args).status.success());
    assert!(run(&["export", r.to_str().unwrap(), "--format", "csv"]).status.success());
    assert!(run(&["report", r.to_str().unwrap()]).status.success());
    assert!(r.join("requests.csv").is_file() && r.join("report.html").is_file());
    assert!(run(&[&args[..], &["--overwrite"]].concat()).status.success());
    assert!(!r.join("requests.csv").exists() && !r.join("report.html").exists());
    // two runs started together in one directory, with the default names
    let cwd = tmpdir("names");
    std::fs::create_dir_all(&cwd).unwrap();
    let start = || {
        bin()
            .args(["run", "--num-requests", "2", "-q"])
            .current_dir(&cwd)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (start(), start());
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    assert_eq!(std::fs::read_dir(cwd.join("quetta-results")).unwrap().count(), 2);
}

#[test]
fn the_api_key_goes_only_to_the_target_and_the_scraper_only_gets_its_own() {
    // a Prometheus endpoint on another port, logging every request's headers
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let metrics = fake_server(move |_, _, headers| {
        log.lock().unwrap().push(headers.to_owned());
        (200, "vllm:num_requests_running 1\n".into())
    });
    let d = tmpdir("scrape-key");
    let args = [
        "run",
        "--num-requests",
        "20",
        "--concurrency",
        "2",
        "--api-key",
        "sk-canary-target",
        "-q",
    ];
    let scrape =
        ["--server-metrics", &format!("{metrics}/metrics"), "--server-metrics-interval", "100ms"];
    let o = run(&[&args[..], &scrape[..], &["--output-dir", d.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let heads = seen.lock().unwrap().join("").to_ascii_lowercase();
    assert!(!heads.is_empty(), "the endpoint was scraped");
    assert!(!heads.contains("sk-canary-target") && !heads.contains("authorization"), "{heads}");
    // a key given for it explicitly goes to it
    seen.lock().unwrap().clear();
    let d2 = tmpdir("scrape-key-2");
    let own = ["--server-metrics-key", "sk-metrics", "--output-dir", d2.to_str().unwrap()];
    assert!(run(&[&args[..], &scrape[..], &own[..]].concat()).status.success());
    let heads = seen.lock().unwrap().join("");
    assert!(heads.contains("Bearer sk-metrics") && !heads.contains("sk-canary-target"), "{heads}");
}

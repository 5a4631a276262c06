//! The CLI against the REAL llama.cpp server (llama.cpp's own OpenAI server with
//! SmolLM2-135M, both from PyPI; `.ci/run` starts it and sets `QUETTA_LLAMA_URL`). Outside
//! CI the tests say they were skipped when the variable is missing; under CI a missing
//! server is a failure.

mod common;

use common::{json, run, text, tmpdir};

use std::sync::{Mutex, MutexGuard};

/// The tests here share one llama.cpp server and run on parallel test threads: while the
/// 200-request run held its slots, the timing test's requests queued and their TTFT counted
/// the wait, which the server's prompt time does not. Each test holds the server alone.
static SERVER: Mutex<()> = Mutex::new(());

fn server() -> Option<(String, MutexGuard<'static, ()>)> {
    let url = quetta_testkit::llama_url()?;
    Some((url, SERVER.lock().unwrap_or_else(std::sync::PoisonError::into_inner)))
}

/// llama.cpp closes every connection right after a streamed answer while its headers promise
/// keep-alive. 200 streamed requests at concurrency 4 (one short prompt, cached after the
/// first, so the run takes seconds): none fails, none is written onto a closed connection
/// (the pre-flight request teaches the transport the server's habit), and the summary counts
/// one new connection per request.
#[test]
fn two_hundred_requests_at_concurrency_4_lose_none_to_connection_reuse() {
    let Some((url, _alone)) = server() else { return };
    let d = tmpdir("llama-reuse");
    std::fs::create_dir_all(&d).unwrap();
    let prompts = d.join("prompt.txt");
    std::fs::write(&prompts, "Say hi.\n").unwrap();
    let out = d.join("run");
    let o = run(&[
        "run",
        "--base-url",
        &url,
        "--dataset",
        prompts.to_str().unwrap(),
        "--dataset-format",
        "text",
        "--num-requests",
        "200",
        "--concurrency",
        "4",
        "--output-len",
        "1",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let s = json(&out.join("summary.json"));
    assert_eq!(s["completed"], 200, "{t}");
    assert_eq!(s["failed"], 0, "{t}");
    assert_eq!(s["stale_connection_retries"], 0, "{t}");
    assert_eq!(s["new_connections"], 200, "{t}");
    assert!(t.contains("connections 200 new for 200 requests"), "{t}");
}

/// llama.cpp reports its own timing of each request (`timings` in the final chunk): the
/// records keep it and the summary puts it beside the client's, TTFT − the server's prompt
/// time and TPOT − its per-token time (docs/METRICS.md, Server-side timing).
#[test]
fn the_servers_own_timing_is_recorded_beside_the_clients() {
    let Some((url, _alone)) = server() else { return };
    let d = tmpdir("llama-timing");
    let out = d.join("run");
    let o = run(&[
        "run",
        "--base-url",
        &url,
        "--num-requests",
        "4",
        "--concurrency",
        "1",
        "--input-len",
        "16",
        "--output-len",
        "6",
        "--ignore-eos",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let s = json(&out.join("summary.json"));
    let st = &s["server_timing"];
    assert_eq!(st["requests_with_prefill"], 4, "{st}");
    let over = st["ttft_minus_server_prefill_ms_mean"].as_f64().unwrap();
    assert!(
        (0.0..100.0).contains(&over),
        "the client's TTFT includes the server's prompt time: {st}"
    );
    let tpot = st["tpot_minus_server_tpot_ms_mean"].as_f64().unwrap();
    assert!(
        tpot.abs() < 3.0,
        "the client's TPOT is the server's per-token time and a little: {st}"
    );
    assert!(t.contains("server-side timing"), "{t}");
    let rec = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    for line in rec.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let (ttft, pre) =
            (r["ttft_ms"].as_f64().unwrap(), r["server_prefill_ms"].as_f64().unwrap());
        assert!(ttft >= pre, "{r}");
        common::valid(include_str!("../../../docs/schema/request.schema.json"), &r);
    }
    common::valid(include_str!("../../../docs/schema/summary.schema.json"), &s);
}

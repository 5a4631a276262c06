//! `Benchmark` against the embedded simulator: figures, files and their schemas, SLOs of
//! both kinds, traces, dry runs and killed runs.

mod common;

use std::time::Duration;

use common::{fixtures, json, lines, quick, rt, sim, tmpdir, validate_run_dir};
use quetta::report::RunDir;
use quetta::workload::spec::{Source, TraceFormat};
use quetta::{Benchmark, Load, Target, WorkloadSpec};

#[test]
fn the_default_benchmark_against_the_embedded_simulator() {
    let d = tmpdir("default");
    let r = Benchmark::new(Target::simulator(Default::default()))
        .load(Load::closed(8))
        .requests(40)
        .output_dir(&d)
        .run_blocking()
        .unwrap();
    let s = &r.summary;
    assert_eq!((s.metrics.completed, s.metrics.failed, s.dispatched), (40, 0, 40));
    assert_eq!(s.metrics.token_count_source, "usage");
    assert_eq!(s.metrics.total_output_tokens, 40 * 128);
    // SimConfig::default(): TTFT 20 ms, ITL 5 ms
    let ttft = s.metrics.ttft_ms.p50.unwrap();
    assert!((20.0..25.0).contains(&ttft), "TTFT p50 {ttft}");
    let tpot = s.metrics.tpot_ms.mean.unwrap();
    assert!((4.9..5.2).contains(&tpot), "TPOT mean {tpot}");
    assert!(s.target.embedded_simulator);
    // notes are values (the target's here), their words what summary.json holds
    let sim = quetta::report::Note::EmbeddedSimulator { ttft_ms: 20.0, itl_ms: Some(5.0) };
    assert!(s.notes.contains(&sim), "{:?}", s.notes);
    assert!(sim.to_string().starts_with("target is Quetta's embedded simulator (TTFT 20 ms"));
    // an embedder that names no tool of its own: the library wrote the run
    assert_eq!((s.tool.as_str(), s.tool_version.as_str()), ("quetta", env!("CARGO_PKG_VERSION")));
    assert_eq!(json(&d.join("run.json"))["tool"], "quetta");
    assert_eq!(s.config.simulator.as_ref().unwrap().ttft_ms, 20.0);
    assert!(s.client.cpu_user_s + s.client.cpu_system_s > 0.0, "{:?}", s.client);
    validate_run_dir(&d);
    let recs = lines(&d.join("requests.jsonl"));
    assert_eq!(recs.len(), 40, "one record per request");
    assert!(recs
        .iter()
        .all(|r| r["error_kind"].is_null() && r["itl_us"].as_array().unwrap().len() == 127));
    // The transport knows that the embedded simulator keeps a connection after a streamed
    // answer, so no request of the second wave (the first reuse of each of the 8
    // connections) waited the 5 ms a first reuse waits while that is unknown.
    let waited = waited_on_reuse(&recs);
    assert!(waited.is_empty(), "reused connections waited: {waited:?}");
    // the typed summary is the file
    assert_eq!(json(&d.join("summary.json"))["completed"], 40);
    assert_eq!(RunDir::open(&d).unwrap().read_summary().unwrap().metrics, s.metrics);
    // the same directory again is refused without overwriting
    let e = quick(2).output_dir(&d).run_blocking().unwrap_err();
    assert!(e.to_string().contains("already holds a run"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn without_an_output_directory_nothing_is_written() {
    let r = quick(5).run_blocking().unwrap();
    assert!(r.dir.is_none());
    assert_eq!(r.summary.metrics.completed, 5);
    assert!(!r.series.is_empty());
}

/// `ttft:500ms` is a per-request threshold (goodput), `ttft:p99<X` a run-level objective
/// evaluated on the run's p99 as written (it used to be applied per request, ignoring the
/// percentile).
#[test]
fn open_loop_with_per_request_and_run_level_slos() {
    let slos = "ttft:500ms,tpot:50ms,e2e:10s,ttft:p99<1ms,ttft:p50<500ms".parse().unwrap();
    let r = quick(60).load(Load::constant(50.0)).slos(slos).run_blocking().unwrap();
    let m = &r.summary.metrics;
    let g = m.goodput.as_ref().unwrap();
    assert_eq!(g.slo, "ttft:500ms,tpot:50ms,e2e:10000ms");
    assert_eq!(g.requests_meeting_all, 60, "every request meets the per-request bounds");
    let v = m.slo_verdict.as_ref().unwrap();
    assert!(!v.pass, "{v:?}");
    assert!(!v.objectives[0].pass, "TTFT p99 is above 1 ms: {:?}", v.objectives[0]);
    assert!(v.objectives[1].pass);
    let ach = r.summary.achieved_send_rate.unwrap();
    assert!((ach / 50.0 - 1.0).abs() < 0.02, "achieved {ach}");
    assert_eq!(r.summary.config.load, quetta::report::LoadKind::Open);
    assert_eq!(r.summary.config.arrival, Some(quetta::report::ArrivalKind::Constant));
}

/// A small trace: the first `n` rows of the Mooncake fixture.
fn small_trace(name: &str, n: usize) -> std::path::PathBuf {
    let text =
        std::fs::read_to_string(fixtures().join("traces/mooncake_fast25_conversation_trace.jsonl"))
            .unwrap();
    let p = std::env::temp_dir().join(format!("quetta-lib-{}-{name}.jsonl", std::process::id()));
    std::fs::write(&p, text.lines().take(n).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    p
}

fn fast_trace(path: &std::path::Path, speed: f64) -> WorkloadSpec {
    let mut w = WorkloadSpec::trace(path, TraceFormat::Mooncake);
    w.replay_speed = speed;
    w.output_len = Some(4);
    w
}

/// A trace without a request count replays all of it (it used to fail with "give a number of
/// requests or a duration"), at its recorded times.
#[test]
fn a_trace_without_a_count_replays_whole_at_its_times() {
    let p = small_trace("whole", 60);
    let r = Benchmark::new(sim(1, 1)).workload(fast_trace(&p, 40.0)).run_blocking().unwrap();
    assert_eq!(r.summary.metrics.completed, 60, "{:?}", r.summary.notes);
    assert_eq!(r.summary.config.load, quetta::report::LoadKind::Trace);
    assert_eq!(r.summary.planned, Some(60));
    // the bundled trace profiles too (planned here: all 19,366 Azure rows)
    let plan = rt()
        .block_on(
            Benchmark::new(sim(1, 1)).workload(WorkloadSpec::profile("azure-conversation")).plan(),
        )
        .unwrap();
    assert_eq!(plan.requests, Some(19_366));
    let _ = std::fs::remove_file(&p);
}

/// The dry run's schedule is the run's, warmup and duration included (it used to skip
/// neither).
#[test]
fn the_dry_run_shows_the_schedule_the_run_sends() {
    let p = small_trace("dry", 80);
    let b = Benchmark::new(sim(1, 1))
        .workload(fast_trace(&p, 20.0))
        .warmup(5)
        .duration(Duration::from_secs(2));
    let plan = rt().block_on(b.plan()).unwrap();
    let planned = plan.offsets.clone().unwrap();
    let r = b.run_blocking().unwrap();
    let text =
        std::fs::read_to_string(fixtures().join("traces/mooncake_fast25_conversation_trace.jsonl"))
            .unwrap();
    let ts: Vec<f64> = text
        .lines()
        .take(80)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["timestamp"].as_f64().unwrap()
        })
        .collect();
    // after the 5 warmup rows, rebased to the 6th, cut at 2 s
    let expect: Vec<f64> =
        ts[5..].iter().map(|t| (t - ts[5]) / 20.0).filter(|t| *t < 2000.0).collect();
    assert_eq!(planned.len(), expect.len());
    for (a, b) in planned.iter().zip(&expect) {
        assert!((a.as_secs_f64() * 1e3 - b).abs() < 0.01, "{a:?} vs {b} ms");
    }
    assert_eq!(r.summary.metrics.completed + r.summary.metrics.failed, planned.len() as u64);
    assert_eq!(r.summary.warmup_completed, 5);
    let _ = std::fs::remove_file(&p);
}

/// Nothing is created before the configuration is known to be valid.
#[test]
fn no_output_directory_for_a_benchmark_that_cannot_run() {
    let d = tmpdir("invalid");
    let mut b = quick(3).output_dir(&d);
    b.percentiles = vec![150.0];
    assert!(b.run_blocking().unwrap_err().to_string().contains("between 0 and 100"));
    let mut w = WorkloadSpec::synthetic(8, 8);
    w.token_ids = true;
    w.tokenizer = Some(fixtures().join("tokenizers/gpt2/tokenizer.json").display().to_string());
    let e = quick(3).workload(w).output_dir(&d).run_blocking().unwrap_err();
    // the library names its own settings (the binary, its flags)
    let want = "WorkloadSpec.token_ids needs the completions endpoint (Target.protocol";
    assert!(e.to_string().contains(want), "{e}");
    // a server that is not there: the model list fails before anything is written
    let e = Benchmark::new(Target::openai("http://127.0.0.1:9"))
        .requests(2)
        .output_dir(&d)
        .run_blocking()
        .unwrap_err();
    assert!(e.to_string().contains("/v1/models failed"), "{e}");
    assert!(
        matches!(&e, quetta::Error::Target(quetta::TargetError::Model { url, .. }) if url == "http://127.0.0.1:9"),
        "{e:?}"
    );
    assert!(!d.exists(), "no directory for a run that never started");
}

/// An embedder matches on what went wrong and which settings, not on words.
#[test]
fn errors_name_their_settings_as_values() {
    use quetta::engine::setting::Setting;
    use quetta::Error;
    let mut b = quick(3);
    b.percentiles = vec![150.0];
    let e = b.run_blocking().unwrap_err();
    assert!(matches!(&e, Error::Invalid { setting: Setting::Percentiles, .. }), "{e:?}");
    let e = Benchmark::new(Target::openai("ftp://127.0.0.1:9")).requests(1).run_blocking();
    assert!(matches!(e, Err(Error::Invalid { setting: Setting::BaseUrl, .. })), "{e:?}");
    let e = quick(3).load(Load::Interleaved { sessions: 2 }).run_blocking().unwrap_err();
    assert!(matches!(&e, Error::Missing { setting: Setting::Sessions, .. }), "{e:?}");
    let cfg = quetta::managed::SageMakerConfig::new("ep");
    let mut b = Benchmark::new(Target::sagemaker(cfg)).requests(1);
    b.reset_prefix_cache = Some("/reset_prefix_cache".into());
    let e = b.run_blocking().unwrap_err();
    let want = (Setting::ResetPrefixCache, Setting::Backend);
    assert!(matches!(&e, Error::Conflict { a, b, .. } if (*a, *b) == want), "{e:?}");
    // an objective on first tokens for requests that have none; a batch for a protocol
    // that sends one input
    let embed = || sim(1, 1).protocol(quetta::Protocol::Embeddings);
    let b = Benchmark::new(embed()).requests(1).slos("ttft:p99<1s".parse().unwrap());
    let e = b.run_blocking().unwrap_err();
    let want = (Setting::Slo, Setting::Endpoint);
    assert!(matches!(&e, Error::Conflict { a, b, .. } if (*a, *b) == want), "{e:?}");
    let mut w = WorkloadSpec::synthetic(8, 4);
    (w.inputs_per_request, w.chat) = (4, true);
    let one = sim(1, 1).protocol(quetta::Protocol::ChatEmbeddings);
    let e = Benchmark::new(one).workload(w).requests(1).run_blocking().unwrap_err();
    let want = (Setting::InputsPerRequest, Setting::Endpoint);
    assert!(matches!(&e, Error::Conflict { a, b, .. } if (*a, *b) == want), "{e:?}");
    // the protocol comparison: no rounds, or a protocol that does not generate
    let mut c = quetta::ProtocolCost::new(sim(1, 1));
    c.rounds = 0;
    let e = rt().block_on(c.run()).unwrap_err();
    assert!(matches!(&e, Error::Invalid { setting: Setting::Rounds, .. }), "{e:?}");
    c.rounds = 1;
    c.protocols = vec![quetta::Protocol::Embeddings];
    let e = rt().block_on(c.run()).unwrap_err();
    assert!(matches!(&e, Error::Invalid { setting: Setting::Protocols, .. }), "{e:?}");
}

#[test]
fn a_profile_trace_replays_its_timestamps_and_lengths() {
    let d = tmpdir("mooncake");
    let mut w = WorkloadSpec::profile("mooncake-conversation");
    w.replay_speed = 20.0;
    w.output_len = Some(8);
    Benchmark::new(sim(1, 1)).workload(w).requests(150).output_dir(&d).run_blocking().unwrap();
    let trace =
        std::fs::read_to_string(fixtures().join("traces/mooncake_fast25_conversation_trace.jsonl"))
            .unwrap();
    let rows: Vec<serde_json::Value> =
        trace.lines().take(150).map(|l| serde_json::from_str(l).unwrap()).collect();
    let recs = lines(&d.join("requests.jsonl"));
    assert_eq!(recs.len(), 150);
    for r in &recs {
        let i = r["id"].as_u64().unwrap() as usize;
        let intended = r["intended_offset_ms"].as_f64().unwrap();
        let want = rows[i]["timestamp"].as_f64().unwrap() / 20.0;
        assert!((intended - want).abs() < 0.002, "request {i}: {intended} vs {want} ms");
        // the simulator counts one token per word: the prompt has the trace's input length
        assert_eq!(r["input_tokens"], rows[i]["input_length"], "request {i}");
    }
    assert_eq!(json(&d.join("summary.json"))["config"]["load"], "trace");
    let _ = std::fs::remove_dir_all(&d);
}

/// A run that died leaves run.json and its records; one call rebuilds its summary (marked
/// partial, a torn last line left out and said so) and its reports.
#[test]
fn a_killed_run_is_rebuilt_from_its_records() {
    let d = tmpdir("rebuild");
    quick(30).slos("ttft:p99<1s".parse().unwrap()).output_dir(&d).run_blocking().unwrap();
    std::fs::remove_file(d.join("summary.json")).unwrap();
    let mut text = std::fs::read_to_string(d.join("requests.jsonl")).unwrap();
    text.push_str("{\"id\": 99999, \"intended_offs");
    std::fs::write(d.join("requests.jsonl"), text).unwrap();
    let dir = RunDir::open(&d).unwrap();
    let s = dir.rebuild().unwrap();
    assert!(s.partial);
    assert_eq!(s.partial_reason, Some(quetta::report::PartialReason::Rebuilt));
    assert!(quetta::report::partial_label(&s)
        .unwrap()
        .ends_with("(rebuilt from its records: the run did not finish)"));
    assert_eq!(s.metrics.completed, 30);
    assert!(s.notes.iter().any(|n| n.to_string().contains("cut off mid-write")), "{:?}", s.notes);
    assert!(s.metrics.slo_verdict.as_ref().unwrap().pass, "the run's SLOs come back from run.json");
    common::validate(
        quetta::report::schema::SUMMARY,
        &json(&d.join("summary.json")),
        "rebuilt summary",
    );
    let (html, pdf) = dir.write_reports().unwrap();
    assert!(html.is_file() && pdf.is_file());
    let _ = std::fs::remove_dir_all(&d);
}

/// Reused connections whose request waited on the transport before it went out (the 5 ms
/// a first reuse waits while the server's habit after streamed answers is unknown).
fn waited_on_reuse(recs: &[serde_json::Value]) -> Vec<(serde_json::Value, serde_json::Value)> {
    recs.iter()
        .filter(|r| r["connection_reused"] == true && r["queue_ms"].as_f64().unwrap() >= 2.5)
        .map(|r| (r["id"].clone(), r["queue_ms"].clone()))
        .collect()
}

/// A server the client knows nothing of (a simulator in its own right, over HTTP): the
/// pre-flight's two requests teach the transport that it keeps connections after streamed
/// answers, so the second wave of a closed loop goes out at once on the first's connections.
#[test]
fn the_preflight_learns_the_servers_habit_before_the_measured_requests() {
    let sim = quetta::sim::Simulator::start(quetta::SimConfig::default()).unwrap();
    let d = tmpdir("preflight-habit");
    let mut t = Target::openai(sim.base_url());
    t.preflight = true;
    let r = Benchmark::new(t).load(Load::closed(8)).requests(40).output_dir(&d).run_blocking();
    assert_eq!(r.unwrap().summary.metrics.completed, 40);
    let recs = lines(&d.join("requests.jsonl"));
    // every request after the first wave reused a connection (a request of the first wave
    // may also take the pre-flight's, when it is back in the pool by then)
    assert!(recs.iter().filter(|r| r["connection_reused"] == true).count() >= 32);
    let waited = waited_on_reuse(&recs);
    assert!(waited.is_empty(), "reused connections waited: {waited:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn steady_load_and_stop_on_saturation() {
    let bounded = |max_running| {
        Target::simulator(quetta::SimConfig {
            ttft: Duration::from_millis(10),
            itl: Duration::from_millis(5),
            max_running: Some(max_running),
            ..Default::default()
        })
    };
    let w = WorkloadSpec::synthetic(8, 20);
    let d = tmpdir("series");
    let r = Benchmark::new(bounded(4))
        .workload(w.clone())
        .load(Load::constant(20.0))
        .duration(Duration::from_secs(5))
        .output_dir(&d)
        .run_blocking()
        .unwrap();
    let s = &r.summary;
    assert!(!s.steady_state.as_ref().unwrap().over_saturated, "{:?}", s.steady_state);
    let total =
        |f: fn(&quetta::metrics::series::Second) -> u64| r.series.iter().map(f).sum::<u64>();
    assert_eq!(total(|x| x.completed), s.metrics.completed);
    assert_eq!(total(|x| x.sent), s.sent);
    assert_eq!(total(|x| x.output_tokens), s.metrics.total_output_tokens);
    assert_eq!(r.series[2].sent, 20, "20 requests per second");
    validate_run_dir(&d);
    // 60 req/s against a server that saturates near 38: stopped early, flagged
    let t0 = std::time::Instant::now();
    let mut b = Benchmark::new(bounded(4))
        .workload(w)
        .load(Load::constant(60.0))
        .duration(Duration::from_secs(40));
    b.stop_on_saturation = true;
    b.drain_timeout = Duration::from_secs(2);
    let r = b.run_blocking().unwrap();
    assert!(t0.elapsed().as_secs() < 25, "stopped well before its 40 s");
    assert!(r.summary.steady_state.as_ref().unwrap().over_saturated);
    assert!(r.summary.partial);
    assert_eq!(r.summary.partial_reason, Some(quetta::report::PartialReason::Saturated));
    assert!(r.summary.notes.contains(&quetta::report::Note::StoppedOnSaturation));
    assert!(
        r.summary.notes.iter().any(|n| n.to_string().contains("(Benchmark.stop_on_saturation)")),
        "{:?}",
        r.summary.notes
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_fitted_distribution_gives_lengths_and_gaps() {
    let trace = fixtures().join("traces/azure_llm_inference_2023_conv.csv");
    let rows = quetta::workload::spec::load_trace(&trace, TraceFormat::Azure, "").unwrap();
    let dist = quetta::workload::distribution::Distribution::fit("azure", &rows).unwrap();
    let f = std::env::temp_dir().join(format!("quetta-lib-{}-dist.json", std::process::id()));
    dist.save(&f).unwrap();
    common::validate(quetta::report::schema::DISTRIBUTION, &json(&f), "dist.json");
    let w = WorkloadSpec {
        source: Source::Distribution { path: f.clone() },
        ..WorkloadSpec::default()
    };
    let plan = rt().block_on(Benchmark::new(sim(1, 1)).workload(w).requests(20).plan()).unwrap();
    assert_eq!(plan.offsets.as_ref().unwrap().len(), 20, "gaps drawn from the file");
    assert!(plan.notes.contains(&quetta::report::Note::DistributionGaps), "{:?}", plan.notes);
    let _ = std::fs::remove_file(&f);
}

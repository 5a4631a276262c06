//! `WorkloadSpec::build` on the real fixtures: every source, profiles, recorded times and
//! the combinations that are refused.

use std::path::PathBuf;

use quetta_workload::dataset::Filters;
use quetta_workload::note::WorkloadNote;
use quetta_workload::spec::{
    DatasetFormat, Limits, SessionFormat, Source, TraceFormat, Vision, WorkloadSpec,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

#[test]
fn a_trace_brings_its_times_sped_up_and_its_whole_length() {
    let path = fixtures().join("traces/mooncake_fast25_conversation_trace.jsonl");
    let mut spec = WorkloadSpec::trace(&path, TraceFormat::Mooncake);
    spec.replay_speed = 4.0;
    let mut b = spec.build(&Limits::default()).unwrap();
    let times = b.recorded_offsets(None).unwrap();
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert_eq!(times.len(), lines, "every row of the trace");
    let first: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&path).unwrap().lines().nth(5).unwrap())
            .unwrap();
    let t5 = first["timestamp"].as_f64().unwrap() / 4.0;
    assert!((times[5].as_secs_f64() * 1e3 - t5).abs() < 0.01, "{:?} vs {t5} ms", times[5]);
    let p = b.requests().unwrap().request(5).unwrap();
    assert_eq!(u64::from(p.input_tokens), first["input_length"].as_u64().unwrap());
    assert!(b.notes.contains(&WorkloadNote::TraceCountsWords), "{:?}", b.notes);
    assert!(WorkloadNote::TraceCountsWords.to_string().starts_with("no WorkloadSpec.tokenizer"));
}

#[test]
fn profiles_resolve_to_lengths_traces_or_sessions() {
    let b = WorkloadSpec::profile("chat-long").build(&Limits::default()).unwrap();
    assert_eq!((b.input_len, b.output_len), (2048, 512));
    assert!(!b.has_recorded_times());
    let mut spec = WorkloadSpec::profile("chat-long");
    spec.output_len = Some(7);
    assert_eq!(spec.build(&Limits::default()).unwrap().output_len, 7, "the spec wins");
    let b = WorkloadSpec::profile("azure-conversation").build(&Limits::default()).unwrap();
    assert!(b.recorded_offsets(None).unwrap().len() > 19_000);
    let b = WorkloadSpec::profile("mtbench-2turn").build(&Limits::default()).unwrap();
    assert!(b.is_sessions());
    let s = b.into_work().into_sessions().unwrap();
    assert_eq!(s.distinct, Some(80));
    let e = WorkloadSpec::profile("nope").build(&Limits::default()).unwrap_err();
    assert!(e.to_string().contains("unknown profile \"nope\""), "{e}");
}

#[test]
fn a_user_profile_sets_lengths_a_source_and_a_load() {
    let dir = std::env::temp_dir().join(format!("quetta-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("p.toml");
    std::fs::write(
        &f,
        "[[profile]]\nname = \"bot\"\ninput_len = 900\noutput_len = 250\nrequest_rate = 12.5\narrival = \"constant\"\n",
    )
    .unwrap();
    let spec = WorkloadSpec {
        source: Source::Profile { name: "bot".into(), file: Some(f.clone()) },
        ..WorkloadSpec::default()
    };
    let b = spec.build(&Limits::default()).unwrap();
    assert_eq!((b.input_len, b.output_len), (900, 250));
    let hint = b.load_hint.unwrap();
    assert_eq!(hint.request_rate, Some(12.5));
    assert_eq!(hint.arrival.as_deref(), Some("constant"));
    // a name the file does not have falls back to the built-in profiles
    let spec = WorkloadSpec {
        source: Source::Profile { name: "chat-short".into(), file: Some(f) },
        ..WorkloadSpec::default()
    };
    assert_eq!(spec.build(&Limits::default()).unwrap().input_len, 256);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn datasets_sessions_and_vision_build() {
    let spec = WorkloadSpec {
        source: Source::Dataset {
            path: fixtures().join("conversations/sharegpt_v3_first_turn_500.json"),
            format: DatasetFormat::Sharegpt,
            filters: Filters { max_input_len: Some(50), ..Filters::default() },
        },
        ..WorkloadSpec::default()
    };
    let mut b = spec.build(&Limits::default()).unwrap();
    assert!(
        b.notes.iter().any(|n| matches!(n, WorkloadNote::FilteredOut(k) if *k > 0)),
        "{:?}",
        b.notes
    );
    assert!(b.requests().unwrap().request(0).unwrap().input_tokens <= 50);
    // sessions: cycled when more are asked for than the file holds
    let spec = WorkloadSpec::sessions(
        fixtures().join("conversations/glaive_toolcall_en_demo_100.json"),
        SessionFormat::Sharegpt,
    );
    let s = spec.build(&Limits { sessions: Some(150), ..Limits::default() }).unwrap();
    let mut s = s.into_work().into_sessions().unwrap();
    assert_eq!(s.distinct, Some(100));
    assert!(s.source.session(120).is_some(), "cycled");
    // vision: the bundled image on every chat request
    let spec = WorkloadSpec {
        vision: Some(Vision { images: vec![], per_request: 2 }),
        ..WorkloadSpec::synthetic(10, 4)
    };
    let mut b = spec.build(&Limits::default()).unwrap();
    let p = b.requests().unwrap().request(0).unwrap();
    assert!(serde_json::to_string(&p.prompt).unwrap().matches("image_url").count() >= 2);
}

#[test]
fn combinations_that_change_the_benchmark_are_refused() {
    let stress_trace = WorkloadSpec {
        stress: true,
        ..WorkloadSpec::trace(
            fixtures().join("traces/azure_llm_inference_2023_conv.csv"),
            TraceFormat::Azure,
        )
    };
    let chat_ids =
        WorkloadSpec { token_ids: true, tokenizer: Some("x".into()), ..WorkloadSpec::default() };
    let vision_sessions =
        WorkloadSpec { vision: Some(Vision::default()), ..WorkloadSpec::profile("chat-multiturn") };
    let slow = WorkloadSpec { replay_speed: 0.0, ..WorkloadSpec::default() };
    for (spec, want) in [
        (stress_trace, "stress"),
        (chat_ids, "needs the completions endpoint (Target.protocol"),
        (vision_sessions, "single-turn"),
        (slow, "replay speed"),
    ] {
        let e = spec.build(&Limits::default()).unwrap_err();
        assert!(e.to_string().contains(want), "{e} (want {want})");
    }
    let missing = WorkloadSpec::trace("/no/such/trace.jsonl", TraceFormat::Mooncake);
    let e = missing.build(&Limits::default()).unwrap_err();
    assert!(e.to_string().contains("/no/such/trace.jsonl"), "{e}");
}

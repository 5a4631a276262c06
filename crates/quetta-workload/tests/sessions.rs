//! Session sources on the real conversation files in `fixtures/conversations/`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quetta_workload::note::WorkloadNote;
use quetta_workload::session::{
    load_sharegpt, load_turns_jsonl, parse_sharegpt, parse_turns_jsonl, LoadOptions, SessionSource,
    SessionSynth, SessionSynthSpec,
};
use quetta_workload::tokenizer::Tokenizer;
use quetta_workload::{profiles, WorkloadError};

fn conv(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/conversations").join(name)
}

#[test]
fn sharegpt_multiturn_conversations_become_sessions() {
    let s = load_sharegpt(&conv("sharegpt_multiturn_5_dialogstudio.json"), LoadOptions::default())
        .unwrap();
    assert_eq!(s.len(), 5);
    // the README: 10, 2, 2, 8 and 6 messages, i.e. 5, 1, 1, 4 and 3 turns
    let turns: Vec<usize> = s.iter().map(|x| x.turns.len()).collect();
    assert_eq!(turns, [5, 1, 1, 4, 3]);
    assert_eq!(s[0].id, "QWJhYvA_0");
    let t = &s[0].turns[1];
    assert_eq!(t.messages[0].role, "user");
    assert!(t.recorded_reply.as_deref().is_some_and(|r| !r.is_empty()));
    // max_tokens follows the recorded reply's length (words without a tokenizer)
    let words = t.recorded_reply.as_deref().unwrap().split_whitespace().count() as u32;
    assert_eq!(t.max_tokens, words);
    // turn 3's prompt: u1, a1, u2, a2, u3 with the replies given
    let replies = vec!["A".to_owned(), "B".to_owned()];
    let p = s[0].prompt(2, &replies);
    let roles: Vec<&str> = p.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(p[1].text_content(), "A");
    assert_eq!(p[3].text_content(), "B");
}

#[test]
fn tool_call_conversations_keep_tool_messages_and_the_schema() {
    let s =
        load_sharegpt(&conv("glaive_toolcall_en_demo_100.json"), LoadOptions::default()).unwrap();
    assert_eq!(s.len(), 100);
    // the first conversation: human, gpt, human, function_call, observation, gpt, human, gpt
    let first = &s[0];
    assert_eq!(first.turns.len(), 4);
    assert!(
        first.system.as_deref().unwrap().contains("search_recipes"),
        "tools in the system prompt"
    );
    assert!(
        first.turns[1].recorded_reply.as_deref().unwrap().contains("\"name\""),
        "a function call is a recorded reply"
    );
    let tool_turn = &first.turns[2];
    assert_eq!(tool_turn.messages.len(), 1);
    assert_eq!(tool_turn.messages[0].role, "tool");
    assert!(s.iter().flat_map(|x| &x.turns).any(|t| t.messages.iter().any(|m| m.role == "tool")));
}

#[test]
fn recorded_starts_and_think_times_are_read() {
    let text = r#"[{"id": "a", "start_ms": 1500, "conversations": [
        {"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"},
        {"from": "human", "value": "again", "think_time_ms": 250}, {"from": "gpt", "value": "yes"}]},
      {"id": "b", "conversations": [{"from": "human", "value": "x", "think_time_ms": -1}]}]"#;
    match parse_sharegpt(text, Path::new("t.json"), LoadOptions::default()) {
        Err(WorkloadError::Parse { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (4, "[1].conversations[0].think_time_ms"));
        }
        other => panic!("{other:?}"),
    }
    let ok = text.replace("-1", "0");
    let s = parse_sharegpt(&ok, Path::new("t.json"), LoadOptions::default()).unwrap();
    assert_eq!(s[0].start, Some(std::time::Duration::from_millis(1500)));
    assert_eq!(s[0].turns[0].think_time, None);
    assert_eq!(s[0].turns[1].think_time, Some(std::time::Duration::from_millis(250)));
    assert_eq!(s[1].start, None);
}

#[test]
fn mt_bench_has_two_user_turns_and_options_apply() {
    let tok = Arc::new(
        Tokenizer::from_file(
            &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/tokenizers/gpt2/tokenizer.json"),
        )
        .unwrap(),
    );
    let opts = LoadOptions { tokenizer: Some(&tok), output_len: Some(64), max_turns: Some(1) };
    let s = load_turns_jsonl(&conv("mt_bench_questions_80.jsonl"), opts).unwrap();
    assert_eq!(s.len(), 80);
    assert!(s.iter().all(|x| x.turns.len() == 1 && x.turns[0].max_tokens == 64));
    assert_eq!(s[0].id, "81");
    let q = s[0].turns[0].messages[0].text_content();
    assert_eq!(s[0].turns[0].new_tokens as usize, tok.count(&q));
    let full =
        load_turns_jsonl(&conv("mt_bench_questions_80.jsonl"), LoadOptions::default()).unwrap();
    assert!(full.iter().all(|x| x.turns.len() == 2 && x.turns[0].recorded_reply.is_none()));
}

#[test]
fn errors_name_the_file_line_and_field() {
    let p = Path::new("convs.json");
    let text = "[\n  {\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]},\n  {\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}\n]";
    match parse_sharegpt(text, p, LoadOptions::default()) {
        Err(WorkloadError::Parse { path, line, field, reason }) => {
            assert_eq!((path.as_str(), line), ("convs.json", 3));
            assert_eq!(field, "[1].conversations[0].from");
            assert!(reason.contains("robot"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    match parse_turns_jsonl(
        "{\"turns\": [\"a\"]}\n{\"turns\": [\"b\", 3]}\n",
        Path::new("q.jsonl"),
        LoadOptions::default(),
    ) {
        Err(WorkloadError::Parse { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (2, "turns[1]"));
        }
        other => panic!("{other:?}"),
    }
    let bad = "turns = { dist = \"uniform\", min = 5, max = 2 }\nnew_prompt_tokens = { dist = \"fixed\", value = 10 }\noutput_tokens = { dist = \"fixed\", value = 10 }\n";
    match SessionSynthSpec::parse(bad, Path::new("s.toml")) {
        Err(WorkloadError::Parse { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (1, "turns"));
        }
        other => panic!("{other:?}"),
    }
    match SessionSynthSpec::parse("turns = 3\n", Path::new("s.toml")) {
        Err(WorkloadError::Parse { line: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn synthesis_draws_deterministic_sessions_with_a_shared_system_prompt() {
    let spec = SessionSynthSpec::parse(
        "turns = { dist = \"uniform\", min = 2, max = 5 }\nsystem_prompt_tokens = 30\nnew_prompt_tokens = { dist = \"lognormal\", mean = 40, stddev = 20 }\noutput_tokens = { dist = \"normal\", mean = 50, stddev = 10 }\nthink_time_ms = { dist = \"exponential\", mean = 1000 }\n",
        Path::new("s.toml"),
    )
    .unwrap();
    let mut a = SessionSynth::new(spec.clone(), 3, None);
    let mut b = SessionSynth::new(spec, 3, None);
    let mut turns = 0;
    for i in 0..50 {
        let x = a.session(i).unwrap();
        assert_eq!(Some(&x), b.session(i).as_ref(), "same seed, same session");
        assert!((2..=5).contains(&x.turns.len()));
        assert_eq!(x.system.as_deref().unwrap().split_whitespace().count(), 30);
        for t in &x.turns {
            assert_eq!(
                t.messages[0].text_content().split_whitespace().count() as u32,
                t.new_tokens
            );
            assert!(t.think_time.is_some());
        }
        turns += x.turns.len();
    }
    assert!((120..=230).contains(&turns), "mean about 3.5 turns: {turns}");
    assert!(a.distinct().is_none());
}

#[test]
fn multiturn_profiles_load_their_bundled_files() {
    for (name, n) in [("chat-multiturn", 5), ("agent-multiturn", 100), ("mtbench-2turn", 80)] {
        let p = profiles::find(name).unwrap();
        assert!(p.is_multiturn());
        let s = p.sessions(LoadOptions::default()).unwrap().unwrap();
        assert_eq!(s.len(), n, "{name}");
    }
    assert!(profiles::find("chat-short")
        .unwrap()
        .sessions(LoadOptions::default())
        .unwrap()
        .is_none());
}

/// Issue 18's reproducers: a time too large for a `Duration` (it panicked in
/// `Duration::from_secs_f64`) is refused with the file, line and field, as a negative one is;
/// so is a turns-jsonl `start_ms` that is not a number (it was ignored).
#[test]
fn session_times_that_no_duration_holds_are_refused_not_a_panic() {
    let p = Path::new("t.json");
    for text in [
        r#"[{"conversations":[],"start_ms":1e23}]"#,
        r#"[{"conversations":[{"from":"human","value":"a","think_time_ms":1e300}]}]"#,
    ] {
        let e = parse_sharegpt(text, p, LoadOptions::default()).unwrap_err().to_string();
        assert!(
            e.contains("t.json:") && e.contains("not a non-negative number of milliseconds"),
            "{e}"
        );
    }
    let p = Path::new("t.jsonl");
    for text in [r#"{"turns":["a"],"start_ms":1e23}"#, r#"{"turns":["a"],"start_ms":"soon"}"#] {
        let e = parse_turns_jsonl(text, p, LoadOptions::default()).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:1: field start_ms"), "{e}");
    }
    let ok =
        parse_turns_jsonl(r#"{"turns":["a"],"start_ms":1500}"#, p, LoadOptions::default()).unwrap();
    assert_eq!(ok[0].start, Some(std::time::Duration::from_millis(1500)));
}

/// Issue 18's reproducers: a synthesis that asks for more than can be built is refused with
/// the file, line and field (`turns` of 1e30 overflowed a capacity, a think time of 1e300 ms
/// panicked in `Duration`), and a distribution whose tail reaches past the bounds has its
/// draws cut there instead of aborting the run.
#[test]
fn synthesis_sizes_beyond_what_can_be_built_are_refused_or_bounded() {
    let rest = "new_prompt_tokens = { dist = \"fixed\", value = 10 }\noutput_tokens = { dist = \"fixed\", value = 10 }\n";
    for (text, field, line) in [
        (format!("turns = {{ dist = \"fixed\", value = 1e30 }}\n{rest}"), "turns", 1),
        (format!("turns = {{ dist = \"fixed\", value = 2 }}\n{rest}think_time_ms = {{ dist = \"fixed\", value = 1e300 }}\n"), "think_time_ms", 4),
        (format!("turns = {{ dist = \"fixed\", value = 2 }}\nsystem_prompt_tokens = 4000000000\n{rest}"), "system_prompt_tokens", 2),
    ] {
        match SessionSynthSpec::parse(&text, Path::new("s.toml")) {
            Err(WorkloadError::Parse { line: l, field: f, .. }) => assert_eq!((l, f.as_str()), (line, field), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let spec = SessionSynthSpec::parse(
        &format!("turns = {{ dist = \"normal\", mean = 3, stddev = 1e300 }}\n{rest}think_time_ms = {{ dist = \"normal\", mean = 10, stddev = 1e300 }}\n"),
        Path::new("s.toml"),
    )
    .unwrap();
    let mut s = SessionSynth::new(spec, 1, None);
    for i in 0..6 {
        let x = s.session(i).unwrap();
        assert!((1..=10_000).contains(&x.turns.len()));
        assert!(x
            .turns
            .iter()
            .all(|t| t.think_time.unwrap() <= std::time::Duration::from_secs(86_400)));
    }
}

/// Sizes a run can build but a user hardly means are warned about, naming the file: a
/// context past 128 Ki tokens, sessions thinking for hours; an ordinary file gets none.
#[test]
fn absurd_but_buildable_synthesis_sizes_are_warned_about() {
    let p = Path::new("s.toml");
    let parse = |t: &str| SessionSynthSpec::parse(t, p).unwrap();
    let big = parse("turns = { dist = \"fixed\", value = 5000 }\nnew_prompt_tokens = { dist = \"fixed\", value = 1000 }\noutput_tokens = { dist = \"uniform\", min = 0, max = 200 }\nthink_time_ms = { dist = \"exponential\", mean = 5000 }\n");
    let w = big.warnings(p);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w.iter().all(WorkloadNote::is_warning), "{w:?}");
    let (long, think) = (w[0].to_string(), w[1].to_string());
    assert!(long.starts_with("warning: s.toml: sessions grow to about 5500000 tokens"), "{long}");
    assert!(think.contains("thinks about 6.9 h"), "{think}");
    let fine = parse("turns = { dist = \"uniform\", min = 2, max = 8 }\nsystem_prompt_tokens = 500\nnew_prompt_tokens = { dist = \"normal\", mean = 300, stddev = 50 }\noutput_tokens = { dist = \"fixed\", value = 200 }\nthink_time_ms = { dist = \"fixed\", value = 2000 }\n");
    assert!(fine.warnings(p).is_empty());
}

/// A session's prompts in all turns are bounded too (10,000 turns of a million tokens would
/// build 10^10 words before the run): means past 2^24 are refused with the line and field;
/// draws from long tails end the session before the turn that would pass it.
#[test]
fn a_session_holds_at_most_2_pow_24_new_prompt_tokens() {
    let big = "turns = { dist = \"fixed\", value = 10000 }\nnew_prompt_tokens = { dist = \"fixed\", value = 1048576 }\noutput_tokens = { dist = \"fixed\", value = 1 }\n";
    match SessionSynthSpec::parse(big, Path::new("s.toml")) {
        Err(WorkloadError::Parse { line, field, reason, .. }) => {
            assert_eq!((line, field.as_str()), (1, "turns"));
            assert!(reason.contains("more than a run builds (16777216 per session)"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let tails = "turns = { dist = \"normal\", mean = 50, stddev = 1e300 }\nnew_prompt_tokens = { dist = \"normal\", mean = 1000, stddev = 1e300 }\noutput_tokens = { dist = \"fixed\", value = 1 }\n";
    let spec = SessionSynthSpec::parse(tails, Path::new("s.toml")).unwrap();
    let mut s = SessionSynth::new(spec, 3, None);
    for i in 0..4 {
        let x = s.session(i).unwrap();
        let total: u64 = x.turns.iter().map(|t| u64::from(t.new_tokens)).sum();
        assert!(!x.turns.is_empty() && total <= 1 << 24, "{total}");
    }
}

//! Multi-turn sessions through `Benchmark`: per-turn figures, files of tool-call
//! conversations, session rates and sticky session ids.

mod common;

use std::time::Duration;

use common::{fixtures, lines, sim, tmpdir, validate_run_dir};
use quetta::workload::spec::SessionFormat;
use quetta::{Benchmark, Load, SimConfig, Target, WorkloadSpec};

#[test]
fn a_multiturn_profile_reports_per_turn_figures() {
    let d = tmpdir("multiturn");
    let mut w = WorkloadSpec::profile("mtbench-2turn");
    w.output_len = Some(24);
    let mut b = Benchmark::new(sim(20, 5)).workload(w).load(Load::closed(3)).output_dir(&d);
    b.sessions.count = Some(6);
    b.sessions.think = "20ms".parse().unwrap();
    let r = b.run_blocking().unwrap();
    let s = &r.summary;
    assert_eq!(s.metrics.completed, 12);
    let turns = &s.metrics.per_turn;
    assert_eq!(turns.len(), 2);
    assert_eq!((turns[0].turn, turns[1].completed), (1, 6));
    assert_eq!(turns[1].cached_token_source, "usage");
    // turn 2 carries turn 1's prompt and reply: the simulator serves most of it from cache
    let hit = turns[1].cache_hit_rate.unwrap();
    assert!(hit > 0.5, "turn-2 cache hit rate {hit}");
    assert_eq!(s.sessions.as_ref().unwrap().completed, 6);
    let ss = s.config.sessions.as_ref().unwrap();
    assert_eq!(ss.think_time, "20ms");
    assert_eq!(ss.pacing, quetta::report::PacingKind::PerSession);
    assert_eq!(ss.session_concurrency, Some(3));
    validate_run_dir(&d);
    let recs = lines(&d.join("requests.jsonl"));
    assert_eq!(recs.len(), 12);
    assert!(recs.iter().all(|r| r["session_id"].is_string() && r["turn"].is_number()));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tool_call_sessions_from_a_file_at_a_session_rate() {
    let mut w = WorkloadSpec::sessions(
        fixtures().join("conversations/glaive_toolcall_en_demo_100.json"),
        SessionFormat::Sharegpt,
    );
    w.max_turns = Some(3);
    let mut b = Benchmark::new(sim(2, 1)).workload(w).load(Load::poisson(20.0));
    b.sessions.count = Some(5);
    b.sessions.max_concurrency = Some(2);
    let r = b.run_blocking().unwrap();
    assert_eq!(r.summary.sessions.as_ref().unwrap().started, 5);
    assert!(r.summary.metrics.per_turn.len() <= 3);
    assert_eq!(r.summary.config.sessions.as_ref().unwrap().session_rate, Some(20.0));
    assert_eq!(r.summary.config.max_concurrency, Some(2));
}

#[test]
fn session_ids_reach_the_server_unless_turned_off() {
    for (header, field, expect) in [(true, true, true), (false, true, true), (false, false, false)]
    {
        let server = quetta_sim::Simulator::start(SimConfig {
            ttft: Duration::from_millis(1),
            itl: Duration::from_millis(1),
            keep_records: true,
            ..SimConfig::default()
        })
        .unwrap();
        let mut t = Target::openai(server.base_url());
        if !header {
            t.session_header = None;
        }
        if !field {
            t.session_body_field = None;
        }
        let mut w = WorkloadSpec::profile("mtbench-2turn");
        w.output_len = Some(4);
        let mut b = Benchmark::new(t).workload(w);
        b.sessions.count = Some(2);
        b.run_blocking().unwrap();
        let recs = server.records();
        assert_eq!(recs.len(), 4);
        assert!(
            recs.iter().all(|r| r.session_id.is_some() == expect),
            "header {header}, field {field}: {:?}",
            recs.iter().map(|r| r.session_id.clone()).collect::<Vec<_>>()
        );
    }
}

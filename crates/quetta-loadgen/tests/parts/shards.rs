//! Shards of one plan: the union of every shard's intended requests is the plan one process
//! would run, each request exactly once (by index, offset and prompt), for open loops,
//! replays, closed loops and sessions; and real runs of the shards against the simulator
//! send exactly that.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::Engine;
use quetta_engine::Message;
use quetta_loadgen::{Dispatch, RunConfig, Runner, SessionConfig, Shard, Work};
use quetta_metrics::RequestRecord;
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};
use quetta_sim::{SimConfig, Simulator};
use quetta_workload::arrival::Arrival;
use quetta_workload::session::{Session, SessionList, Turn};
use quetta_workload::synthetic::SyntheticSpec;

use crate::common::VecSink;

fn shard(k: u32, n: u32) -> Shard {
    Shard::new(k, n).unwrap()
}

/// Shard K's (global index, offset) pairs of a run configuration.
fn planned(cfg: &RunConfig) -> Vec<(u64, Duration)> {
    let v = cfg.shard_offsets().unwrap().unwrap();
    v.iter().enumerate().map(|(j, o)| (cfg.shard.nth_from(cfg.warmup, j as u64), *o)).collect()
}

#[test]
fn every_request_of_the_plan_is_in_exactly_one_shard_for_1_to_64_shards() {
    let mut open = RunConfig::open(200.0, Arrival::Gamma { burstiness: 0.5 }, 1000);
    open.seed = 7;
    open.warmup = 3;
    let mut replay = RunConfig::scheduled((0..777).map(|i| Duration::from_micros(i * i)).collect());
    replay.warmup = 5;
    for cfg in [open, replay] {
        let whole = planned(&cfg);
        assert_eq!(whole.first().unwrap().0, cfg.warmup, "ids count from the warmup");
        for n in 1..=64u32 {
            let mut union = BTreeMap::new();
            for k in 0..n {
                let mut c = cfg.clone();
                c.shard = shard(k, n);
                let mine = planned(&c);
                assert_eq!(c.shard_planned().unwrap(), Some(mine.len() as u64));
                let (lo, hi) = (whole.len() / n as usize, whole.len().div_ceil(n as usize));
                assert!((lo..=hi).contains(&mine.len()), "shard {k}/{n}: {}", mine.len());
                for (id, off) in mine {
                    assert!(union.insert(id, off).is_none(), "request {id} in two shards of {n}");
                }
            }
            let union: Vec<_> = union.into_iter().collect();
            assert_eq!(union, whole, "{n} shards");
        }
    }
    // a closed loop: counts and concurrency split, the same indices
    for n in 1..=64u32 {
        let mut cfg = RunConfig::closed(64, 1001);
        cfg.warmup = 2;
        let total: u64 = (0..n)
            .map(|k| {
                cfg.shard = shard(k, n);
                cfg.shard_planned().unwrap().unwrap()
            })
            .sum();
        assert_eq!(total, 1001);
    }
    let mut c = RunConfig::closed(3, 10);
    c.shard = shard(0, 4);
    let e = c.shard_offsets().unwrap_err().to_string();
    assert!(e.contains("concurrency 3 cannot be split across 4 shards"), "{e}");
}

/// Planning only: 1,000 shards of a 10-million-request Poisson schedule. The schedule is
/// computed once (each shard computes the same one in a real run) and every shard's slice
/// taken from it; each request lands in exactly one shard, at its global offset.
#[test]
fn a_thousand_shards_of_ten_million_requests_cover_the_plan_once() {
    let cfg = RunConfig::open(10_000.0, Arrival::Poisson, 10_000_000);
    let all = cfg.intended_offsets().unwrap().unwrap();
    assert_eq!(all.len(), 10_000_000);
    let mut seen = vec![false; all.len()];
    let mut sum = 0u64;
    for k in 0..1000 {
        let s = shard(k, 1000);
        let mine = s.pick(0, &all);
        assert_eq!(mine.len(), 10_000);
        for (j, off) in mine.iter().enumerate() {
            let g = s.nth_from(0, j as u64) as usize;
            assert!(!seen[g], "request {g} twice");
            assert_eq!(*off, all[g]);
            seen[g] = true;
            sum += 1;
        }
    }
    assert_eq!(sum, 10_000_000);
    assert!(seen.iter().all(|s| *s));
}

fn engine(sim: &Simulator) -> Arc<dyn Engine> {
    Arc::new(OpenAiEngine::new(OpenAiConfig::new(sim.base_url(), Api::Chat, "sim")).unwrap())
}

fn spec() -> SyntheticSpec {
    SyntheticSpec {
        input_len: 24,
        input_stddev: 8.0,
        output_len: 4,
        output_stddev: 0.0,
        chat: true,
        seed: 3,
        ..SyntheticSpec::default()
    }
}

/// Run `cfg` as `n` shards, one after another, against the simulator; every record.
fn run_shards(
    cfg: &RunConfig,
    n: u32,
    sessions: Option<(Vec<Session>, SessionConfig)>,
) -> Vec<RequestRecord> {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let sim = Simulator::start(SimConfig {
        ttft: Duration::from_millis(1),
        itl: Duration::from_micros(500),
        ..SimConfig::default()
    })
    .unwrap();
    let mut all = Vec::new();
    for k in 0..n {
        let mut c = cfg.clone();
        c.shard = shard(k, n);
        let sink = VecSink::default();
        let work = match &sessions {
            Some((list, sc)) => Work::Sessions {
                source: Box::new(SessionList { sessions: list.clone(), cycle: false }),
                config: sc.clone(),
            },
            None => Work::Requests(Box::new(spec())),
        };
        let out = rt
            .block_on(Runner::new(engine(&sim), c.clone()).sink(Box::new(sink.clone())).run(work))
            .unwrap();
        assert_eq!(out.aggregate.failed, 0, "shard {k}/{n}");
        let recs = sink.0.lock().unwrap().clone();
        if sessions.is_none() {
            assert_eq!(Some(recs.len() as u64), c.shard_planned().unwrap(), "shard {k}/{n}");
        }
        all.extend(recs);
    }
    all
}

/// The same plan run whole and as 3 shards against the simulator: the same request ids,
/// and each id with the same planned lengths, intended offset (open loop) and session.
#[test]
fn three_shards_send_what_one_process_sends() {
    let key = |r: &RequestRecord| (r.id, r.planned_input_tokens, r.planned_output_tokens);
    let mut open = RunConfig::open(400.0, Arrival::Poisson, 60);
    open.warmup = 2;
    let mut closed = RunConfig::closed(6, 45);
    closed.warmup = 4;
    for cfg in [open, closed] {
        let mut whole: Vec<_> = run_shards(&cfg, 1, None);
        let mut parts: Vec<_> = run_shards(&cfg, 3, None);
        whole.sort_by_key(|r| r.id);
        parts.sort_by_key(|r| r.id);
        assert_eq!(
            whole.iter().map(key).collect::<Vec<_>>(),
            parts.iter().map(key).collect::<Vec<_>>()
        );
        if matches!(cfg.dispatch, Dispatch::Open { .. }) {
            for (a, b) in whole.iter().zip(&parts) {
                assert_eq!(a.intended_offset_ms, b.intended_offset_ms, "request {}", a.id);
            }
        }
    }
    // sessions: each session in exactly one shard, with all its turns
    let list: Vec<Session> = (0..7)
        .map(|i| Session {
            id: format!("s{i}"),
            system: None,
            turns: (0..2)
                .map(|k| Turn {
                    messages: vec![Message::text("user", format!("session {i} turn {k}"))],
                    recorded_reply: None,
                    max_tokens: 3,
                    think_time: Some(Duration::ZERO),
                    new_tokens: 4,
                })
                .collect(),
            start: None,
        })
        .collect();
    let mut cfg = RunConfig::closed(1, 1);
    cfg.num_requests = None;
    let sc = SessionConfig::per_session(3);
    let recs = run_shards(&cfg, 3, Some((list, sc)));
    let mut per: BTreeMap<String, usize> = BTreeMap::new();
    for r in &recs {
        *per.entry(r.session_id.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(per.len(), 7, "{per:?}");
    assert!(per.values().all(|n| *n == 2), "{per:?}");
    let mut ids: Vec<u64> = recs.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 14, "turn ids are unique across shards");
}

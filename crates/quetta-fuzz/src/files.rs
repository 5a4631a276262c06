//! Targets for the files users hand Quetta: traces, datasets, session files and the
//! synthesis TOML, a Prometheus scrape, the CUPTI kernel CSV, and the `requests.jsonl`
//! a report is rebuilt from.

use quetta_metrics::series::SeriesBuilder;
use quetta_metrics::Aggregate;
use quetta_probe::{kernels as cupti, prom, server};
use quetta_workload::session::{self, LoadOptions, SessionSource, SessionSynth, SessionSynthSpec};
use quetta_workload::trace::{self, ColumnMap, TraceWorkload};
use quetta_workload::{dataset, WorkloadError};

use crate::{path, PATH};

/// An error must name the input (`fuzz-input:LINE: …`), as every file error does.
fn names_the_file(e: &impl std::fmt::Display) {
    let m = e.to_string();
    assert!(m.starts_with(PATH), "an error that does not name the file: {m}");
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Mooncake, Azure, BurstGPT-style CSV and JSONL traces: rows in time order, or an error
/// naming the file; the rows' send offsets are computed as a run would.
pub fn traces(data: &[u8]) {
    let t = text(data);
    let p = path();
    for r in [
        trace::parse_mooncake(&t, p),
        trace::parse_azure(&t, p),
        trace::parse_csv(&t, p, &ColumnMap::burstgpt()),
        trace::parse_jsonl_trace(&t, p, &ColumnMap::azure()),
    ] {
        match r {
            Ok(rows) => {
                assert!(rows.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
                let w = TraceWorkload::new(rows, 512, 1, true, None);
                let _ = w.offsets(1.0);
                let _ = w.offsets(1e-3);
            }
            Err(e) => names_the_file(&e),
        }
    }
}

/// ShareGPT and JSONL prompt datasets.
pub fn datasets(data: &[u8]) {
    let t = text(data);
    if let Err(e) = dataset::parse_jsonl(&t, path()) {
        names_the_file(&e);
    }
    if let Err(e) = dataset::parse_sharegpt(&t, path(), None) {
        names_the_file(&e);
    }
}

/// Multi-turn session files: ShareGPT conversations and turns-JSONL question sets.
pub fn sessions(data: &[u8]) {
    let t = text(data);
    let opts = LoadOptions { max_turns: Some(64), ..LoadOptions::default() };
    for r in
        [session::parse_sharegpt(&t, path(), opts), session::parse_turns_jsonl(&t, path(), opts)]
    {
        match r {
            Ok(list) => assert!(list.iter().all(|s| s.turns.len() <= 64)),
            Err(e) => names_the_file(&e),
        }
    }
}

/// The session-synthesis TOML: refused with file, line and field, or a spec whose first
/// sessions can be built (within the documented bounds).
pub fn synth(data: &[u8]) {
    match SessionSynthSpec::parse(&text(data), path()) {
        Ok(spec) => {
            let _ = spec.warnings(path());
            let mut s = SessionSynth::new(spec, 7, None);
            let x = s.session(0).expect("synthesis never runs out");
            assert!((1..=10_000).contains(&x.turns.len()));
        }
        Err(WorkloadError::Parse { .. }) => {}
        Err(e) => panic!("a synthesis error that names no line: {e}"),
    }
}

/// A Prometheus text scrape, and what the probes read from it.
pub fn prometheus(data: &[u8]) {
    if let Ok(e) = prom::parse(&text(data)) {
        let _ = server::server_kind(&e);
        let _ = server::read(&e);
        let _ = e.buckets("vllm:time_to_first_token_seconds");
    }
}

/// The CUPTI kernel CSV and its summary (the first byte picks the step gap).
pub fn kernels(data: &[u8]) {
    let Some((&gap, body)) = data.split_first() else { return };
    match cupti::parse(&text(body), path()) {
        Ok(k) => {
            let s = cupti::summarise(&k, u64::from(gap) * 1_000_000);
            let share: f64 = s.top.iter().map(|t| t.1).sum();
            assert!(share.is_finite());
        }
        Err(e) => names_the_file(&e),
    }
}

/// `requests.jsonl`, and the report a run that died is rebuilt into from it: the
/// aggregate, its summary and the time series.
pub fn records(data: &[u8]) {
    match quetta_report::parse_records(data, path()) {
        Ok(recs) => {
            let mut agg = Aggregate::new(None);
            let mut series = SeriesBuilder::default();
            for r in &recs.records {
                agg.add(r);
                series.add(r);
            }
            let _ = agg.summary(&[50.0, 99.9]);
            let _ = series.finish();
        }
        Err(e) => names_the_file(&e),
    }
}

/// A `vllm bench serve --save-detailed` result file, as `compare` reads a baseline, and a
/// comparison of it with itself (few resamples, so an input runs in milliseconds).
pub fn vllm_result(data: &[u8]) {
    match quetta_report::CompareSide::parse_vllm(&text(data), path()) {
        Ok(side) => {
            let opts = quetta_report::CompareOptions { resamples: 20, ..Default::default() };
            let _ = quetta_report::compare_sides(&side, &side, &opts);
        }
        Err(e) => names_the_file(&e),
    }
}

//! Helpers of the facade's tests: temporary directories, schema validation of every file a
//! run writes, simulators.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use quetta::report::schema;
use quetta::{Benchmark, SimConfig, Target};

pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-lib-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// `value` against the JSON Schema `schema_text`; panics with every violation.
pub fn validate(schema_text: &str, value: &serde_json::Value, what: &str) {
    let s: serde_json::Value = serde_json::from_str(schema_text).unwrap();
    let v = jsonschema::validator_for(&s).unwrap();
    let errors: Vec<String> =
        v.iter_errors(value).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{what} violates its schema: {errors:?}");
}

pub fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

pub fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Validate every file of a run directory that has a schema: run.json, summary.json, each
/// line of requests.jsonl and timeseries.jsonl.
pub fn validate_run_dir(d: &Path) {
    validate(schema::RUN, &json(&d.join("run.json")), "run.json");
    validate(schema::SUMMARY, &json(&d.join("summary.json")), "summary.json");
    for (i, r) in lines(&d.join("requests.jsonl")).iter().enumerate() {
        validate(schema::REQUEST, r, &format!("requests.jsonl line {}", i + 1));
    }
    for (i, r) in lines(&d.join("timeseries.jsonl")).iter().enumerate() {
        validate(schema::SERIES, r, &format!("timeseries.jsonl line {}", i + 1));
    }
}

/// The embedded simulator with a fast default.
pub fn sim(ttft_ms: u64, itl_ms: u64) -> Target {
    Target::simulator(SimConfig {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(itl_ms),
        ..SimConfig::default()
    })
}

/// A runtime for the async tests.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A benchmark of short requests against a fast simulator.
pub fn quick(n: u64) -> Benchmark {
    Benchmark::new(sim(2, 1)).workload(quetta::WorkloadSpec::synthetic(8, 8)).requests(n)
}

//! `requests.jsonl` read back (to rebuild a report): a record whose offsets no run can have
//! is refused with the line and field (an end offset of 1e300 ms asked the time series for
//! 10^297 seconds); server token counts at u64::MAX add up saturating, not wrapping.

use std::path::Path;

use quetta_metrics::Aggregate;
use quetta_report::parse_records;

fn real_record() -> serde_json::Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/records/sim_faults.jsonl"),
    )
    .unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

#[test]
fn offsets_no_run_can_have_are_refused_with_line_and_field() {
    let good = real_record();
    let mut bad = good.clone();
    bad["end_offset_ms"] = serde_json::json!(1e300);
    let text = format!("{good}\n{bad}\n{good}\n");
    let e = parse_records(text.as_bytes(), Path::new("run/requests.jsonl")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "run/requests.jsonl:2: field end_offset_ms: 1e300 ms is not a time within 31 days of the run's start"
    );
    let mut neg = good.clone();
    neg["sent_offset_ms"] = serde_json::json!(-3e10);
    let e = parse_records(format!("{neg}\n").as_bytes(), Path::new("r")).unwrap_err();
    assert!(e.to_string().starts_with("r:1: field sent_offset_ms"), "{e}");
    // A real file reads whole; a torn last line is reported, not refused.
    let whole = parse_records(format!("{good}\n{good}").as_bytes(), Path::new("r")).unwrap();
    assert_eq!((whole.records.len(), whole.torn_last_line), (2, false));
    let torn = format!("{good}\n{}", &good.to_string()[..40]);
    let t = parse_records(torn.as_bytes(), Path::new("r")).unwrap();
    assert_eq!((t.records.len(), t.torn_last_line), (1, true));
}

#[test]
fn token_counts_at_u64_max_saturate_in_the_aggregate() {
    let mut r = real_record();
    r["output_tokens"] = serde_json::json!(u64::MAX);
    r["input_tokens"] = serde_json::json!(u64::MAX);
    let line = format!("{r}\n{r}\n");
    let recs = parse_records(line.as_bytes(), Path::new("r")).unwrap();
    let mut a = Aggregate::new(None);
    for x in &recs.records {
        a.add(x);
    }
    let mut b = a.clone();
    b.merge(&a);
    let s = b.summary(&[]);
    assert_eq!(s.total_output_tokens, u64::MAX);
    assert_eq!(s.total_input_tokens, u64::MAX);
}

/// The rebuild streams the records (one line in memory at a time): its summary's metrics
/// are those of the aggregate over the records read whole, on a real run's file and on its
/// torn copy (whose cut last line is left out and said).
#[test]
fn a_streamed_rebuild_equals_the_in_memory_aggregate() {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/records");
    for (file, torn) in [("sim_faults.jsonl", false), ("torn.jsonl", true)] {
        let dir =
            std::env::temp_dir().join(format!("quetta-rebuild-{}-{file}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = std::fs::read(fx.join(file)).unwrap();
        std::fs::write(dir.join("requests.jsonl"), &data).unwrap();
        let run = quetta_report::RunDir::open(&dir).unwrap();
        let s = run.rebuild().unwrap();
        let recs = parse_records(&data, Path::new("r")).unwrap();
        assert_eq!(recs.torn_last_line, torn);
        assert!(!recs.records.is_empty());
        let mut a = Aggregate::new(None);
        for r in &recs.records {
            a.add(r);
        }
        assert_eq!(
            serde_json::to_value(&s.metrics).unwrap(),
            serde_json::to_value(a.summary(&[])).unwrap()
        );
        assert_eq!(
            s.notes.iter().any(|n| n.to_string().contains("cut off mid-write")),
            torn,
            "{:?}",
            s.notes
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// Merging and exporting read records too; one test binary for all (each binary is a link).
#[path = "read/export_stream.rs"]
mod export_stream;
#[path = "read/merge.rs"]
mod merge;
#[path = "read/streamed.rs"]
mod streamed;

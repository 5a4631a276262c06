//! `merge()`: shards' run directories into one run, exactly: the union of their records
//! (and the HdrHistograms of a shard that kept none), each shard's status named, shards of
//! different plans refused.

use std::path::{Path, PathBuf};

use quetta_metrics::{Aggregate, RequestRecord};
use quetta_report::{
    merge, parse_records, MergeOptions, RunDir, RunManifest, RunSettings, ShardRun, Target,
};

/// Settings as a run writes them (the schema's enumerations filled).
fn settings() -> RunSettings {
    RunSettings {
        endpoint: "chat".into(),
        load: quetta_report::LoadKind::Closed,
        mode: quetta_report::Mode::Normal,
        ..RunSettings::default()
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-merge-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn records() -> Vec<RequestRecord> {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/records/sim_faults.jsonl");
    parse_records(&std::fs::read(fx).unwrap(), Path::new("r")).unwrap().records
}

/// Shard `k` of 3 holding `recs` (a manifest with its place; records on disk).
fn shard_dir(root: &Path, k: u32, recs: &[RequestRecord], settings: &RunSettings) -> PathBuf {
    let d = root.join(format!("shard-{k}"));
    let run = RunDir::create(&d, false).unwrap();
    let mut m = RunManifest::new(
        &quetta_report::Tool::new("quetta-bench", "0.1.0"),
        settings.clone(),
        Target::unknown(),
        None,
        vec![],
    );
    m.shard = Some(ShardRun {
        index: k,
        count: 3,
        planned: Some(recs.len() as u64),
        ..ShardRun::default()
    });
    run.write_manifest(&m).unwrap();
    let mut text = String::new();
    for r in recs {
        text.push_str(&serde_json::to_string(r).unwrap());
        text.push('\n');
    }
    std::fs::write(d.join("requests.jsonl"), text).unwrap();
    d
}

#[test]
fn the_merge_is_the_union_of_records_and_histograms() {
    let all = records();
    assert!(all.len() >= 6);
    let root = tmp("union");
    let s = settings();
    let parts: Vec<Vec<RequestRecord>> =
        (0..3).map(|k| all.iter().skip(k).step_by(3).cloned().collect()).collect();
    let dirs: Vec<PathBuf> = (0..3).map(|k| shard_dir(&root, k as u32, &parts[k], &s)).collect();
    // shard 0 finished (its summary, rebuilt here), shard 1 died (records, no summary),
    // shard 2 kept only its summary's histograms
    RunDir::open(&dirs[0]).unwrap().rebuild().unwrap();
    RunDir::open(&dirs[2]).unwrap().rebuild().unwrap();
    std::fs::remove_file(dirs[2].join("requests.jsonl")).unwrap();
    let out = root.join("merged");
    let m = merge(&dirs, &out, &MergeOptions::default()).unwrap();
    let mut union = Aggregate::new(None);
    for r in &all {
        union.add(r);
    }
    let u = union.summary(&[]);
    assert_eq!((m.completed, m.failed), (u.completed, u.failed));
    assert_eq!(m.total_output_tokens, u.total_output_tokens);
    for (a, b) in [
        (&m.ttft_ms, &u.ttft_ms),
        (&m.e2e_ms, &u.e2e_ms),
        (&m.itl_ms, &u.itl_ms),
        (&m.tpot_ms, &u.tpot_ms),
    ] {
        assert_eq!(
            (a.count, a.min, a.p50, a.p90, a.p99, a.max),
            (b.count, b.min, b.p50, b.p90, b.p99, b.max)
        );
    }
    let sh = m.shards.as_ref().unwrap();
    let status: Vec<&str> = sh.shards.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(status, ["partial", "died", "partial"], "{sh:?}");
    assert_eq!(sh.shards[1].completed + sh.shards[1].failed, parts[1].len() as u64);
    assert!(m.partial);
    assert!(m.notes.iter().any(|n| n.to_string().contains("shard 1 died")), "{:?}", m.notes);
    assert!(
        m.notes.iter().any(|n| n.to_string().contains("shard 2 kept no per-request records")),
        "{:?}",
        m.notes
    );
    let merged =
        parse_records(&std::fs::read(out.join("requests.jsonl")).unwrap(), Path::new("m")).unwrap();
    assert_eq!(merged.records.len(), parts[0].len() + parts[1].len());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let schema: serde_json::Value = serde_json::from_str(quetta_report::schema::SUMMARY).unwrap();
    let errors: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(&v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn shards_of_different_plans_are_refused() {
    let all = records();
    let root = tmp("refused");
    let s = settings();
    let a = shard_dir(&root, 0, &all[..2], &s);
    let b = shard_dir(&root.join("b"), 0, &all[2..4], &s);
    let e =
        merge(&[a.clone(), b], &root.join("o1"), &MergeOptions::default()).unwrap_err().to_string();
    assert!(e.contains("are both shard 0"), "{e}");
    let other = RunSettings { seed: 9, ..settings() };
    let c = shard_dir(&root.join("c"), 1, &all[2..4], &other);
    let e = merge(&[a, c], &root.join("o2"), &MergeOptions::default()).unwrap_err().to_string();
    assert!(e.contains("other settings") && e.contains("seed"), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}

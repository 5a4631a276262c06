//! `compare` on two runs of the simulator (twins, and one 20 % slower), and the exports of a
//! run: CSV, Parquet and vLLM's result JSON, each checked against the records.

mod common;

use std::collections::HashMap;

use common::{json, lines, tmpdir, validate};
use quetta::report::{files, schema, RunDir};
use quetta::{Benchmark, CompareOptions, Load, WorkloadSpec};

fn run(dir: &std::path::Path, ttft: u64, itl: u64) {
    Benchmark::new(common::sim(ttft, itl))
        .workload(WorkloadSpec::synthetic(16, 12))
        .load(Load::closed(6))
        .requests(120)
        .output_dir(dir)
        .run_blocking()
        .unwrap();
}

#[test]
fn compare_flags_a_slower_simulator_and_not_its_twin() {
    let (base, same, slow) = (tmpdir("cmp-base"), tmpdir("cmp-same"), tmpdir("cmp-slow"));
    run(&base, 20, 5);
    run(&same, 20, 5);
    run(&slow, 24, 6); // 20 % slower
    let opts = CompareOptions { fail_on_regression: Some(0.05), ..CompareOptions::default() };
    let b = RunDir::open(&base).unwrap();
    let twin = quetta::compare(&b, &RunDir::open(&same).unwrap(), &opts).unwrap();
    assert!(!twin.failed(), "{}", twin.render());
    // Twins may differ significantly by a little (tests run in parallel here), never by 20 %.
    for m in &twin.metrics {
        assert!(
            m.relative_delta.abs() < 0.05 || m.significant != Some(true),
            "twin runs differ: {m:?}"
        );
    }
    let c = RunDir::open(&slow).unwrap();
    let r = quetta::compare(&b, &c, &opts).unwrap();
    assert!(r.failed());
    let text = r.render();
    assert!(text.contains("REGRESSION") && text.contains("e2e_ms +"), "{text}");
    let e2e = r.metrics.iter().find(|m| m.metric == "e2e_ms").unwrap();
    assert!((0.15..0.25).contains(&e2e.relative_delta) && e2e.significant == Some(true), "{e2e:?}");
    c.write_compare(&r).unwrap();
    validate(schema::COMPARE, &json(&slow.join(files::COMPARE)), "compare.json");
    // without a threshold a regression is reported but does not fail
    let r = quetta::compare(&b, &c, &CompareOptions::default()).unwrap();
    assert!(!r.failed() && !r.regressions.is_empty());
    for d in [base, same, slow] {
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn exports_carry_the_records_values() {
    let base = tmpdir("export");
    run(&base, 5, 2);
    let d = RunDir::open(&base).unwrap();
    let recs = lines(&base.join(files::REQUESTS));
    // CSV
    let csv = base.join(files::CSV);
    assert_eq!(quetta::export::csv(&d, &csv).unwrap(), recs.len());
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), recs.len() + 1, "a header and one row per request");
    let header: Vec<&str> = rows[0].split(',').collect();
    assert_eq!(header, quetta::export::CSV_COLUMNS);
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for (row, r) in rows[1..].iter().zip(&recs) {
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells[col("ttft_ms")].parse::<f64>().ok(), r["ttft_ms"].as_f64());
        assert_eq!(
            cells[col("itl_count")].parse::<usize>().unwrap(),
            r["itl_us"].as_array().unwrap().len()
        );
    }
    // Parquet, read back with the parquet crate
    let pq = base.join(files::PARQUET);
    assert_eq!(quetta::export::parquet(&d, &pq).unwrap(), recs.len());
    {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::Field;
        let reader = SerializedFileReader::new(std::fs::File::open(&pq).unwrap()).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows() as usize, recs.len());
        let names: Vec<String> = reader
            .metadata()
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .map(|c| c.name().to_owned())
            .collect();
        assert_eq!(names, quetta::export::CSV_COLUMNS, "the CSV's columns, in its order");
        let rows: Vec<_> = reader.get_row_iter(None).unwrap().map(Result::unwrap).collect();
        for (row, r) in rows.iter().zip(&recs) {
            let cols: HashMap<&str, &Field> =
                row.get_column_iter().map(|(k, v)| (k.as_str(), v)).collect();
            assert_eq!(cols["id"], &Field::Long(r["id"].as_i64().unwrap()));
            assert_eq!(cols["ttft_ms"], &Field::Double(r["ttft_ms"].as_f64().unwrap()));
            assert_eq!(cols["e2e_ms"], &Field::Double(r["e2e_ms"].as_f64().unwrap()));
            assert_eq!(cols["output_tokens"], &Field::Long(r["output_tokens"].as_i64().unwrap()));
            assert_eq!(cols["error_kind"], &Field::Null);
        }
    }
    // vLLM's result JSON: its keys, the run's values
    let v = quetta::export::vllm(&d).unwrap();
    d.write_vllm(&v, &d.file(files::VLLM)).unwrap();
    let file = json(&d.file(files::VLLM));
    validate(schema::VLLM, &file, "vllm_result.json");
    assert_eq!(file["request_rate"], "inf", "a closed loop, as vLLM writes it");
    assert_eq!(v.ttfts.len(), 120);
    assert_eq!(v.completed, 120);
    assert!(
        (v.ttfts[0] * 1e3 - recs[0]["ttft_ms"].as_f64().unwrap()).abs() < 1e-9,
        "seconds in the lists"
    );
    let _ = std::fs::remove_dir_all(&base);
}

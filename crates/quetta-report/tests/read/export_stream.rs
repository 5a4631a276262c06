//! Exports stream: CSV one record at a time, Parquet one row group at a time; what they
//! write is every record, in order, whatever the group size.

use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::RowAccessor;
use quetta_report::{export, parse_records, RunDir};

#[test]
fn parquet_in_row_groups_and_csv_hold_every_record_in_order() {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/records/sim_faults.jsonl");
    let one = parse_records(&std::fs::read(fx).unwrap(), Path::new("r")).unwrap().records;
    let d = std::env::temp_dir().join(format!("quetta-export-stream-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // 45 records: the fixture's, ids renumbered
    let mut text = String::new();
    for i in 0..45u64 {
        let mut r = one[(i % one.len() as u64) as usize].clone();
        r.id = i;
        text.push_str(&serde_json::to_string(&r).unwrap());
        text.push('\n');
    }
    std::fs::write(d.join("requests.jsonl"), text).unwrap();
    let run = RunDir::open(&d).unwrap();
    for rows in [1usize, 4, 45, 1000] {
        let out = d.join(format!("r{rows}.parquet"));
        assert_eq!(export::parquet_in_groups(&run, &out, rows).unwrap(), 45);
        let f = SerializedFileReader::new(std::fs::File::open(&out).unwrap()).unwrap();
        assert_eq!(f.metadata().num_row_groups(), 45usize.div_ceil(rows), "{rows} rows a group");
        let ids: Vec<i64> =
            f.get_row_iter(None).unwrap().map(|r| r.unwrap().get_long(0).unwrap()).collect();
        assert_eq!(ids, (0..45).collect::<Vec<i64>>(), "{rows} rows a group");
    }
    let csv = d.join("r.csv");
    assert_eq!(export::csv(&run, &csv).unwrap(), 45);
    let t = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(t.lines().count(), 46);
    assert!(t.starts_with(&export::CSV_COLUMNS.join(",")));
    let _ = std::fs::remove_dir_all(&d);
}

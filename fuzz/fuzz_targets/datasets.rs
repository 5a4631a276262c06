//! Dataset parsers on arbitrary text: entries or an error naming the file, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use quetta_workload::dataset::{parse_jsonl, parse_sharegpt};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let p = Path::new("fuzz");
    if let Err(e) = parse_jsonl(&text, p) {
        assert!(e.to_string().starts_with("fuzz"));
    }
    if let Err(e) = parse_sharegpt(&text, p, None) {
        assert!(e.to_string().starts_with("fuzz"));
    }
});

//! Trace parsers on arbitrary text: rows or an error naming the file, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use quetta_workload::trace::{parse_azure, parse_csv, parse_mooncake, ColumnMap};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let p = Path::new("fuzz");
    for r in [
        parse_mooncake(&text, p),
        parse_azure(&text, p),
        parse_csv(&text, p, &ColumnMap::burstgpt()),
    ] {
        match r {
            Ok(rows) => assert!(rows.windows(2).all(|w| w[0].timestamp <= w[1].timestamp)),
            Err(e) => assert!(e.to_string().starts_with("fuzz")),
        }
    }
});

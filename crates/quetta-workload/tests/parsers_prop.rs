//! The trace and dataset parsers never panic: any input is rows or an error naming where.

use std::fmt::Write as _;
use std::path::Path;

use proptest::prelude::*;
use quetta_workload::trace::{parse_azure, parse_mooncake};

fn mooncake_line() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<i64>(), any::<i64>(), any::<i64>(), proptest::collection::vec(any::<i64>(), 0..4)).prop_map(|(t, i, o, h)| {
            format!("{{\"timestamp\": {t}, \"input_length\": {i}, \"output_length\": {o}, \"hash_ids\": {h:?}}}")
        }),
        "\\PC{0,40}".prop_map(|s| s),
        Just("{\"timestamp\": 1.5, \"input_length\": \"x\"}".to_owned()),
        Just(String::new()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mooncake_parser_never_panics(lines in proptest::collection::vec(mooncake_line(), 0..8)) {
        let text = lines.join("\n");
        match parse_mooncake(&text, Path::new("p.jsonl")) {
            Ok(rows) => prop_assert!(rows.windows(2).all(|w| w[0].timestamp <= w[1].timestamp)),
            Err(e) => prop_assert!(e.to_string().starts_with("p.jsonl:"), "{}", e),
        }
    }

    #[test]
    fn azure_parser_never_panics(rows in proptest::collection::vec(("\\PC{0,30}", "-?[0-9]{0,6}", "-?[0-9]{0,6}"), 0..6), crlf in any::<bool>()) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let mut text = format!("TIMESTAMP,ContextTokens,GeneratedTokens{nl}");
        for (t, c, g) in &rows {
            let _ = write!(text, "{t},{c},{g}{nl}");
        }
        if let Err(e) = parse_azure(&text, Path::new("a.csv")) {
            prop_assert!(e.to_string().starts_with("a.csv:"), "{}", e);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_mooncake(&text, Path::new("x"));
        let _ = parse_azure(&text, Path::new("x"));
    }
}

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

fn jsonl_line() -> impl Strategy<Value = String> {
    prop_oneof![
        ("\\PC{0,20}", proptest::option::of(any::<i64>())).prop_map(|(p, m)| match m {
            Some(m) => format!("{{\"prompt\": {p:?}, \"max_tokens\": {m}}}"),
            None => format!("{{\"prompt\": {p:?}}}"),
        }),
        "\\PC{0,20}".prop_map(|c| format!(
            "{{\"messages\": [{{\"role\": \"user\", \"content\": {c:?}}}]}}"
        )),
        "\\PC{0,40}",
        Just("{\"messages\": 3}".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn jsonl_dataset_parser_never_panics(lines in proptest::collection::vec(jsonl_line(), 0..6)) {
        let text = lines.join("\n");
        match quetta_workload::dataset::parse_jsonl(&text, Path::new("d.jsonl")) {
            Ok(entries) => prop_assert!(entries.iter().all(|e| e.output_len.is_none_or(|n| n > 0))),
            Err(e) => prop_assert!(e.to_string().starts_with("d.jsonl:"), "{}", e),
        }
    }

    #[test]
    fn sharegpt_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), turns in proptest::collection::vec(("human|gpt|user|system", "\\PC{0,10}"), 0..4)) {
        let _ = quetta_workload::dataset::parse_sharegpt(&String::from_utf8_lossy(&bytes), Path::new("s.json"), None);
        let conv: Vec<String> = turns.iter().map(|(f, v)| format!("{{\"from\": {f:?}, \"value\": {v:?}}}")).collect();
        let text = format!("[{{\"conversations\": [{}]}}]", conv.join(","));
        if let Err(e) = quetta_workload::dataset::parse_sharegpt(&text, Path::new("s.json"), None) {
            prop_assert!(e.to_string().starts_with("s.json:"), "{}", e);
        }
    }
}

//! Workloads on real data: real tokenizer files and the real Mooncake and Azure traces.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quetta_engine::Prompt;
use quetta_workload::tokenizer::{ExactPrompts, Tokenizer};
use quetta_workload::trace::{
    load_azure, load_mooncake, parse_azure, parse_mooncake, TraceWorkload,
};
use quetta_workload::{Workload, WorkloadError};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn tok(name: &str) -> Arc<Tokenizer> {
    Arc::new(
        Tokenizer::from_file(&fixtures().join("tokenizers").join(name).join("tokenizer.json"))
            .unwrap(),
    )
}

/// The lengths checked: every N up to 600, then a spread up to 32,768 (each check encodes the
/// whole prompt again, so checking all 32,768 lengths would take hours).
fn lengths() -> Vec<usize> {
    let mut v: Vec<usize> = (1..=600).collect();
    let mut n = 601;
    while n < 32_768 {
        v.push(n);
        n = n * 23 / 20 + 7;
    }
    v.extend([4095, 4096, 4097, 8191, 8192, 16_384, 32_767, 32_768]);
    v
}

#[test]
fn exact_length_prompts_with_gpt2_qwen3_and_mistral() {
    for name in ["gpt2", "qwen3", "mistral-7b-v0.1"] {
        let t = tok(name);
        let p = ExactPrompts::new(t.clone());
        let mut checked = 0;
        for n in lengths() {
            let text = p.text(n, n as u64 * 31 + 7).unwrap_or_else(|e| panic!("{name} N={n}: {e}"));
            assert_eq!(t.count(&text), n, "{name}: prompt for N={n} encodes to a different count");
            checked += 1;
        }
        // deterministic for a seed
        assert_eq!(p.text(100, 5).unwrap(), p.text(100, 5).unwrap());
        eprintln!("{name}: {checked} lengths exact");
    }
}

#[test]
fn gpt2_file_truncation_setting_is_ignored() {
    // the fixture's GPT-2 tokenizer.json says truncation max_length 50
    let t = tok("gpt2");
    let text = ExactPrompts::new(t.clone()).text(500, 1).unwrap();
    assert_eq!(t.count(&text), 500);
}

#[test]
fn unknown_tokenizer_is_a_clear_error() {
    let e = Tokenizer::resolve("no-such-org/no-such-model").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("no-such-org/no-such-model") && msg.contains("Hugging Face cache"),
        "{msg}"
    );
    let bad = std::env::temp_dir().join(format!("quetta-bad-tok-{}.json", std::process::id()));
    std::fs::write(&bad, "{not json").unwrap();
    assert!(matches!(
        Tokenizer::resolve(bad.to_str().unwrap()),
        Err(WorkloadError::Tokenizer { .. })
    ));
}

#[test]
fn mooncake_trace_loads_and_shared_blocks_share_exactly_their_tokens() {
    let reqs =
        load_mooncake(&fixtures().join("traces/mooncake_fast25_conversation_trace.jsonl")).unwrap();
    assert_eq!(reqs.len(), 12_031);
    assert_eq!(reqs.last().unwrap().timestamp.as_millis(), 3_536_999);
    assert!(reqs.iter().all(|r| r.hash_ids.len() == r.input_len.div_ceil(512) as usize));
    let head: Vec<_> = reqs.iter().take(300).cloned().collect();
    let mut w = TraceWorkload::new(head.clone(), 512, 9, false, Some(tok("gpt2")));
    w.token_ids = true;
    let prompts: Vec<Vec<u32>> = (0..300)
        .map(|i| match w.request(i).unwrap().prompt {
            Prompt::TokenIds(ids) => ids,
            other => panic!("{other:?}"),
        })
        .collect();
    let mut pairs = 0;
    for i in 0..300 {
        assert_eq!(prompts[i].len(), head[i].input_len as usize);
        for j in (i + 1)..(i + 20).min(300) {
            let shared =
                head[i].hash_ids.iter().zip(&head[j].hash_ids).take_while(|(a, b)| a == b).count();
            let common = prompts[i].iter().zip(&prompts[j]).take_while(|(a, b)| a == b).count();
            let full = (shared * 512).min(prompts[i].len()).min(prompts[j].len());
            assert!(
                common >= full,
                "requests {i} and {j} share {shared} blocks but only {common} tokens"
            );
            if shared < head[i].hash_ids.len().min(head[j].hash_ids.len()) {
                assert_eq!(
                    common, full,
                    "requests {i} and {j}: {shared} shared blocks, {common} shared tokens"
                );
            }
            pairs += usize::from(shared > 0);
        }
    }
    assert!(pairs > 100, "the trace's first rows share prefixes ({pairs} pairs)");
}

#[test]
fn azure_trace_crlf_and_seven_digit_fractions() {
    let reqs = load_azure(&fixtures().join("traces/azure_llm_inference_2023_conv.csv")).unwrap();
    assert_eq!(reqs.len(), 19_366);
    assert_eq!(reqs[0].timestamp.as_nanos(), 0);
    // 18:15:50.9951690 - 18:15:46.6805900
    assert_eq!(reqs[1].timestamp.as_nanos(), 4_314_579_000);
    assert_eq!((reqs[0].input_len, reqs[0].output_len), (374, 44));
    assert!(reqs.last().unwrap().timestamp.as_secs() > 3400);
}

#[test]
fn malformed_traces_name_file_line_and_field() {
    let p = Path::new("t.jsonl");
    let cases = [
        ("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{oops\n", "t.jsonl:2: field (json)"),
        ("{\"timestamp\": 0, \"output_length\": 1}\n", "t.jsonl:1: field input_length: missing"),
        ("{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 1}\n", "t.jsonl:1: field input_length: negative"),
        ("{\"timestamp\": 10, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": 3, \"input_length\": 5, \"output_length\": 1}\n", "t.jsonl:2: field timestamp: decreases"),
    ];
    for (text, want) in cases {
        let e = parse_mooncake(text, p).unwrap_err().to_string();
        assert!(e.contains(want), "{e:?} should contain {want:?}");
    }
    let p = Path::new("a.csv");
    let e = parse_azure(
        "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.68,12,x\r\n",
        p,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("a.csv:2: field GeneratedTokens"), "{e}");
    let e = parse_azure("TIMESTAMP,ContextTokens\r\n", p).unwrap_err().to_string();
    assert!(e.contains("a.csv:1: field GeneratedTokens: column missing"), "{e}");
    let e = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,1\n2023-11-16 18:15:46,1,1\n", p).unwrap_err().to_string();
    assert!(e.contains("a.csv:3: field TIMESTAMP: decreases"), "{e}");
    let e = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,-4,1\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("negative"), "{e}");
}

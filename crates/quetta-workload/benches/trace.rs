//! How long loading the 12,031-row Mooncake conversation trace and building every prompt
//! with a real tokenizer takes (target: under 2 s on the development machine).

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use quetta_workload::tokenizer::Tokenizer;
use quetta_workload::trace::{load_mooncake, TraceWorkload};
use quetta_workload::Workload;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn bench(c: &mut Criterion) {
    let trace = fixtures().join("traces/mooncake_fast25_conversation_trace.jsonl");
    let tok =
        Arc::new(Tokenizer::from_file(&fixtures().join("tokenizers/gpt2/tokenizer.json")).unwrap());
    let mut g = c.benchmark_group("mooncake");
    g.sample_size(10);
    g.bench_function("load 12,031 rows", |b| b.iter(|| load_mooncake(&trace).unwrap().len()));
    g.bench_function("load + build every token-id prompt (gpt2)", |b| {
        b.iter(|| {
            let rows = load_mooncake(&trace).unwrap();
            let n = rows.len() as u64;
            let mut w = TraceWorkload::new(rows, 512, 1, false, Some(tok.clone()));
            w.token_ids = true;
            let mut tokens = 0usize;
            for i in 0..n {
                if let Some(p) = w.request(i) {
                    tokens += p.input_tokens as usize;
                }
            }
            tokens
        });
    });
    g.bench_function("load + build every word prompt (no tokenizer)", |b| {
        b.iter(|| {
            let rows = load_mooncake(&trace).unwrap();
            let n = rows.len() as u64;
            let mut w = TraceWorkload::new(rows, 512, 1, true, None);
            (0..n).filter_map(|i| w.request(i)).count()
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

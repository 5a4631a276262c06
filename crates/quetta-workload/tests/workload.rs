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

/// The longest run of leading tokens any two of `prompts` share.
fn longest_shared_start(mut prompts: Vec<Vec<u32>>) -> usize {
    prompts.sort();
    prompts
        .windows(2)
        .map(|w| w[0].iter().zip(&w[1]).take_while(|(a, b)| a == b).count())
        .max()
        .unwrap_or(0)
}

#[test]
fn exact_prompts_of_a_run_share_no_prefix_a_cache_could_serve() {
    // Prompts were windows of the ~1,700-token corpus at a seeded start: about one pair in
    // 1,700 started at the same token and shared its whole common length (llama.cpp served
    // 617 of a 623-token prompt from its cache in a closed-loop run of 24 requests).
    let t = tok("smollm2");
    let p = ExactPrompts::new(t.clone());
    let ids: Vec<Vec<u32>> =
        (0..2000u64).map(|i| p.ids(256, i.wrapping_mul(0x9E37_79B9))).collect();
    assert!(ids.iter().all(|v| v.len() == 256));
    let shared = longest_shared_start(ids);
    assert!(shared < 48, "two of 2,000 token-id prompts share their first {shared} tokens");
    let texts: Vec<Vec<u32>> =
        (0..300u64).map(|i| t.encode(&p.text(256, i.wrapping_mul(0x9E37_79B9)).unwrap())).collect();
    assert!(texts.iter().all(|v| v.len() == 256));
    let shared = longest_shared_start(texts);
    assert!(shared < 48, "two of 300 text prompts share their first {shared} tokens");
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
    // Issue 18's reproducers: a year or an hour out of range is refused, never wrapped into
    // a time (in release the year below was read as 57,887,840 s after the first row).
    for bad in [
        "99999999999999999-01-01 00:00:00",
        "2023-11-16 1234567890123456:00:00",
        "2023-11-16 24:00:00",
        "2023-11-16 18:60:00",
        "0000-01-01 00:00:00",
    ] {
        let text = format!(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n{bad},1,1\n"
        );
        let e = parse_azure(&text, p).unwrap_err().to_string();
        assert!(e.contains("a.csv:3: field TIMESTAMP"), "{bad}: {e}");
    }
    let e = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n1e300,1,1\n", p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("a.csv:2: field TIMESTAMP"), "{e}");
}

/// Every N from 1 to 32,768 (or `QUETTA_EXACT_MAX`) for GPT-2, Qwen3 and Mistral (or
/// `QUETTA_EXACT_TOKENIZERS`, comma-separated). Hours of CPU in a debug build; run it with
/// `cargo test --release -p quetta-workload --test workload -- --ignored every_length`.
#[test]
#[ignore = "exhaustive: run explicitly in release mode"]
fn every_length_from_1_to_32768() {
    let max: usize =
        std::env::var("QUETTA_EXACT_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(32_768);
    // Resume a check that already covered 1..QUETTA_EXACT_MIN.
    let min: usize =
        std::env::var("QUETTA_EXACT_MIN").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
    let names = std::env::var("QUETTA_EXACT_TOKENIZERS")
        .unwrap_or_else(|_| "gpt2,qwen3,mistral-7b-v0.1".into());
    for name in names.split(',') {
        let t = tok(name);
        let p = ExactPrompts::new(t.clone());
        let start = std::time::Instant::now();
        for n in min..=max {
            // `text` returns only a text it has encoded to exactly N tokens (it fails
            // otherwise), so an `Ok` for every N is the property; every 61st N is encoded
            // again here as an independent check of that contract.
            let text = p.text(n, n as u64 * 31 + 7).unwrap_or_else(|e| panic!("{name} N={n}: {e}"));
            if n % 61 == 0 {
                assert_eq!(t.count(&text), n, "{name}: N={n}");
            }
            if n % 2048 == 0 {
                eprintln!(
                    "{name}: every N in {min}..={n} exact so far ({:.0} s)",
                    start.elapsed().as_secs_f64()
                );
            }
        }
        eprintln!(
            "{name}: every N in {min}..={max} exact ({:.0} s)",
            start.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn datasets_load_filter_and_name_bad_lines() {
    use quetta_workload::dataset::{load_jsonl, load_sharegpt, DatasetWorkload, Filters};
    let g = tok("gpt2");
    let sg =
        load_sharegpt(&fixtures().join("conversations/sharegpt_v3_first_turn_500.json"), Some(&g))
            .unwrap();
    assert_eq!(sg.len(), 500);
    let f = Filters { min_input_len: Some(4), max_input_len: Some(200), max_output_len: None };
    let mut w = DatasetWorkload::new(sg, Some(g.clone()), f, 128, true, 1).unwrap();
    assert!(w.filtered_out > 0 && w.len() + w.filtered_out == 500);
    for i in 0..600 {
        let p = w.request(i).unwrap();
        assert!((4..=200).contains(&p.input_tokens), "{}", p.input_tokens);
        let Prompt::Chat(m) = &p.prompt else { panic!() };
        assert_eq!(g.count(&m[0].text_content()) as u32, p.input_tokens);
    }
    let dir = std::env::temp_dir().join(format!("quetta-ds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.jsonl");
    std::fs::write(&good, "{\"prompt\": \"hello there\", \"max_tokens\": 7}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n").unwrap();
    let e = load_jsonl(&good).unwrap();
    assert_eq!((e.len(), e[0].output_len, e[1].output_len), (2, Some(7), None));
    for (body, want) in [
        ("{\"prompt\": \"a\"}\n{\"nope\": 1}\n", ":2: field prompt: missing"),
        ("{\"prompt\": \"a\", \"max_tokens\": -3}\n", ":1: field max_tokens"),
        ("not json\n", ":1: field (json)"),
        ("{\"messages\": 5}\n", ":1: field messages"),
    ] {
        let bad = dir.join("bad.jsonl");
        std::fs::write(&bad, body).unwrap();
        let msg = load_jsonl(&bad).unwrap_err().to_string();
        assert!(msg.contains("bad.jsonl") && msg.contains(want), "{msg:?} should contain {want:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn ks2(a: &mut [f64], b: &mut [f64]) -> f64 {
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut d) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

#[test]
fn distribution_fitted_to_azure_reproduces_its_lengths() {
    use quetta_workload::distribution::{DistWorkload, Distribution};
    use quetta_workload::synthetic::SyntheticSpec;
    let trace = load_azure(&fixtures().join("traces/azure_llm_inference_2023_conv.csv")).unwrap();
    let d = Distribution::fit("azure", &trace).unwrap();
    // round trip through the file format
    let path = std::env::temp_dir().join(format!("quetta-dist-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_string(&d).unwrap()).unwrap();
    let d = Distribution::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    for f in [&d.input_len, &d.output_len, &d.inter_arrival_s] {
        assert_eq!(f.fits.len(), 3);
        assert!(f.fits.windows(2).all(|w| w[0].ks <= w[1].ks), "fits sorted by KS distance");
    }
    let base = SyntheticSpec {
        input_len: 1,
        input_stddev: 0.0,
        output_len: 1,
        output_stddev: 0.0,
        chat: true,
        seed: 42,
        ..SyntheticSpec::default()
    };
    let w = DistWorkload { dist: d.clone(), base };
    let (mut si, mut so): (Vec<f64>, Vec<f64>) = (0..10_000)
        .map(|i| {
            let (a, b) = w.lengths(i);
            (f64::from(a), f64::from(b))
        })
        .unzip();
    let mut ti: Vec<f64> = trace.iter().map(|r| f64::from(r.input_len)).collect();
    let mut to: Vec<f64> = trace.iter().map(|r| f64::from(r.output_len)).collect();
    let (ki, ko) = (ks2(&mut si, &mut ti), ks2(&mut so, &mut to));
    eprintln!("two-sample KS: input {ki:.4}, output {ko:.4}; best fits: input {} ({:.3}), output {} ({:.3}), gaps {} ({:.3})",
        d.input_len.fits[0].family, d.input_len.fits[0].ks, d.output_len.fits[0].family, d.output_len.fits[0].ks,
        d.inter_arrival_s.fits[0].family, d.inter_arrival_s.fits[0].ks);
    assert!(ki < 0.05, "input KS {ki}");
    assert!(ko < 0.05, "output KS {ko}");
    let offs = d.offsets(5000, 1);
    let mean_gap = offs.last().unwrap().as_secs_f64() / 4999.0;
    assert!(
        (mean_gap / d.inter_arrival_s.mean - 1.0).abs() < 0.1,
        "{mean_gap} vs {}",
        d.inter_arrival_s.mean
    );
}

#[test]
fn generic_csv_and_jsonl_traces_with_a_column_mapping() {
    use quetta_workload::trace::{load_csv, load_jsonl_trace, ColumnMap};
    let dir = std::env::temp_dir().join(format!("quetta-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // BurstGPT's documented schema
    let csv = dir.join("burst.csv");
    std::fs::write(&csv, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n5.5,GPT-4,1087,230,1317,API log\n45,ChatGPT,300,40,340,Conversation log\n").unwrap();
    let r = load_csv(&csv, &ColumnMap::burstgpt()).unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r[1].timestamp.as_millis(), 500);
    assert_eq!(r[2].timestamp.as_secs(), 40);
    assert_eq!((r[1].input_len, r[1].output_len), (1087, 230));
    // users' own JSONL logs
    let jl = dir.join("log.jsonl");
    std::fs::write(
        &jl,
        "{\"t\": 1000, \"in\": 10, \"out\": 5}\n{\"t\": 1250, \"in\": 20, \"out\": 7}\n",
    )
    .unwrap();
    let m = ColumnMap::parse("timestamp=t,input=in,output=out,unit=ms").unwrap();
    let r = load_jsonl_trace(&jl, &m).unwrap();
    assert_eq!(r[1].timestamp.as_millis(), 250);
    std::fs::write(&jl, "{\"t\": 1000, \"in\": 10, \"out\": 5}\n{\"t\": 1250, \"out\": 7}\n")
        .unwrap();
    let e = load_jsonl_trace(&jl, &m).unwrap_err().to_string();
    assert!(e.contains("log.jsonl:2: field in: missing"), "{e}");
    let e =
        load_csv(&csv, &ColumnMap::parse("input=Prompt tokens").unwrap()).unwrap_err().to_string();
    assert!(e.contains("burst.csv:1: field Prompt tokens: column missing"), "{e}");
    assert!(ColumnMap::parse("colour=red").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn profile_files_load_and_bad_ones_name_the_line() {
    use quetta_workload::profiles::load_file;
    let dir = std::env::temp_dir().join(format!("quetta-prof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("p.toml");
    std::fs::write(
        &f,
        "[[profile]]\nname = \"mine\"\ninput_len = 900\noutput_len = 250\nrequest_rate = 12.5\n",
    )
    .unwrap();
    let p = load_file(&f).unwrap();
    assert_eq!(
        (p[0].name.as_str(), p[0].input_len, p[0].request_rate),
        ("mine", Some(900), Some(12.5))
    );
    std::fs::write(&f, "[[profile]]\nname = \"a\"\n\n[[profile]]\nname = \"b\"\ninput_len = -4\n")
        .unwrap();
    let e = load_file(&f).unwrap_err().to_string();
    assert!(e.contains("p.toml:6"), "{e}");
    std::fs::write(&f, "[[profile]]\nname = \"a\"\ncolour = 1\n").unwrap();
    let e = load_file(&f).unwrap_err().to_string();
    assert!(e.contains("p.toml:3") && e.contains("colour"), "{e}");
    std::fs::write(&f, "[[profile]]\nname = \"a\"\nconcurrency = 0\n").unwrap();
    assert!(load_file(&f).unwrap_err().to_string().contains("concurrency"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_misspelt_arrival_or_format_in_a_profile_file_names_its_line_and_field() {
    use quetta_workload::profiles::load_file;
    let dir = std::env::temp_dir().join(format!("quetta-prof-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("p.toml");
    let ok = "[[profile]]\nname = \"a\"\narrival = \"Constant\"\n\n";
    for (bad, line, field) in [
        ("[[profile]]\nname = \"b\"\nrequest_rate = 5\narrival = \"gama\"\n", 8, "arrival"),
        (
            "[[profile]]\nname = \"b\"\ndataset = \"d.jsonl\"\ndataset_format = \"csv\"\n",
            8,
            "dataset_format",
        ),
        (
            "[[profile]]\nname = \"b\"\ntrace = \"t.csv\"\n  trace_format = \"burst\"\n",
            8,
            "trace_format",
        ),
    ] {
        std::fs::write(&f, format!("{ok}{bad}")).unwrap();
        let e = load_file(&f).unwrap_err().to_string();
        assert!(e.contains(&format!("p.toml:{line}: field {field}")), "{e}");
    }
    std::fs::write(&f, ok).unwrap();
    assert_eq!(load_file(&f).unwrap()[0].arrival.as_deref(), Some("Constant"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Found by the `traces` fuzzer: a row a thousand years after the first overflowed the offset
/// and came back as 0, out of order. It is an error naming the row now.
#[test]
fn far_future_timestamp_is_an_error_not_a_wrapped_offset() {
    let text = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n3022-11-16 18:15:52.5732453,104,105\r\n";
    let e = parse_azure(text, Path::new("far.csv")).unwrap_err().to_string();
    assert!(e.contains("far.csv:3: field TIMESTAMP") && e.contains("too far"), "{e}");
}

#[test]
fn stress_prompts_share_no_first_token_and_keep_exact_lengths() {
    use quetta_workload::synthetic::{StressWorkload, SyntheticSpec};
    let spec = SyntheticSpec {
        input_len: 40,
        input_stddev: 8.0,
        output_len: 16,
        output_stddev: 0.0,
        chat: false,
        seed: 5,
        ..SyntheticSpec::default()
    };
    let t = tok("gpt2");
    let mut ids = StressWorkload::new(spec.clone(), Some(t.clone()), true);
    let mut text = StressWorkload::new(spec.clone(), Some(t.clone()), false);
    let mut words = StressWorkload::new(spec, None, false);
    let mut leads = std::collections::HashSet::new();
    let mut first_words = std::collections::HashSet::new();
    for i in 0..300 {
        let p = ids.request(i).unwrap();
        let Prompt::TokenIds(v) = &p.prompt else { panic!("token ids") };
        assert_eq!(v.len() as u32, p.input_tokens);
        assert!(leads.insert(v[0]), "request {i} shares its first token");
        let q = text.request(i).unwrap();
        let Prompt::Text(s) = &q.prompt else { panic!("text") };
        assert_eq!(t.count(s) as u32, q.input_tokens, "exact length");
        assert!(q.input_tokens_exact);
        let w = words.request(i).unwrap();
        let Prompt::Text(s) = &w.prompt else { panic!("text") };
        assert_eq!(s.split_whitespace().count() as u32, w.input_tokens);
        assert!(first_words.insert(s.split_whitespace().next().unwrap().to_owned()));
    }
}

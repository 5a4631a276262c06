//! The steady window (docs/METRICS.md, Steady state) of a run against a simulator that is
//! slow for its first seconds: MSER-5 cuts the warm-up, the drain after the last send is
//! never in it, and the `steady` figures are those of the records sent in the window,
//! computed here from `requests.jsonl` without Quetta's aggregate.

mod common;

use std::time::Duration;

use common::{lines, tmpdir, validate_run_dir};
use quetta::sim::WarmUp;
use quetta::{Benchmark, Load, SimConfig, Target};

/// Nearest-rank percentile of sorted values.
fn rank(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1]
}

#[test]
fn the_steady_window_cuts_a_slow_start_and_its_figures_are_its_records() {
    let d = tmpdir("steady");
    // TTFT 20 ms and gaps of 5 ms, 4 times longer for the first 6 s after the first request
    // (the pre-flight's, just before the measured phase)
    let warm = WarmUp { lasts: Duration::from_secs(6), slowdown: 4.0 };
    let sim = SimConfig { warm_up: Some(warm), ..SimConfig::default() };
    let r = Benchmark::new(Target::simulator(sim))
        .load(Load::closed(8))
        .duration(Duration::from_secs(30))
        .output_dir(&d)
        .run_blocking()
        .unwrap();
    let s = &r.summary;
    let st = s.steady_state.as_ref().unwrap();
    let w = s.steady.as_ref().unwrap_or_else(|| panic!("no steady block: {st:?}"));
    let (from, to) = (w.from_s, w.to_s);
    assert_eq!((st.steady_from_s, st.steady_to_s), (Some(from), Some(to)));
    // MSER-5 cuts whole batches of 5 s: the first batch after the slow seconds
    assert_eq!(from, 10, "{st:?}");
    // the window ends before the last send's (part) second: the drain is after it
    let last_sent_s = r.series.iter().rposition(|x| x.sent > 0).unwrap() as u64;
    assert_eq!(to, last_sent_s - 1, "{st:?}");
    assert!(last_sent_s >= 29, "a closed loop sends for the whole 30 s");

    // the records sent in the window, read from the file
    let recs = lines(&d.join("requests.jsonl"));
    let (lo, hi) = (from as f64 * 1e3, (to + 1) as f64 * 1e3);
    let inside: Vec<_> =
        recs.iter().filter(|r| (lo..hi).contains(&r["sent_offset_ms"].as_f64().unwrap())).collect();
    let ttft = |rs: &[&serde_json::Value]| {
        let mut v: Vec<f64> = rs.iter().map(|r| r["ttft_ms"].as_f64().unwrap()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (t_in, t_all) = (ttft(&inside), ttft(&recs.iter().collect::<Vec<_>>()));
    // the warm-up is in the whole run (80 ms first tokens) and not in the window
    assert!(t_all.last().unwrap() > &75.0, "the whole run has the slow start");
    assert!(t_in.last().unwrap() < &40.0, "slow requests in the window: {:?}", t_in.last());
    let m = &w.metrics;
    assert_eq!((m.completed, m.failed), (inside.len() as u64, 0));
    // rates over the window's length
    let secs = (to + 1 - from) as f64;
    let expect = (inside.len() as f64 / secs * 1e3).round() / 1e3;
    assert_eq!(m.request_throughput, expect);
    assert_eq!(m.duration_s, secs);
    let tokens: u64 = inside.iter().map(|r| r["output_tokens"].as_u64().unwrap()).sum();
    assert_eq!(m.total_output_tokens, tokens);
    // the histogram's percentiles within its 3 significant digits; the mean exactly
    for (p, got) in [(50.0, m.ttft_ms.p50), (99.0, m.ttft_ms.p99)] {
        let want = rank(&t_in, p);
        assert!((got.unwrap() - want).abs() <= want * 1e-3 + 1e-3, "p{p}: {got:?} vs {want}");
    }
    let mean = t_in.iter().sum::<f64>() / t_in.len() as f64;
    assert!((m.ttft_ms.mean.unwrap() - mean).abs() < 1e-3, "{:?} vs {mean}", m.ttft_ms.mean);
    // the steady window's throughput is the closed loop's: 8 slots of one E2E each
    let e2e = m.e2e_ms.p50.unwrap() / 1e3;
    assert!((m.request_throughput - 8.0 / e2e).abs() < 0.05 * 8.0 / e2e, "{m:?}");
    assert!(m.request_throughput > s.metrics.request_throughput, "ramp and drain lower it");
    // the file says the same, and the schema holds it
    let file = quetta::report::RunDir::open(&d).unwrap().read_summary().unwrap();
    assert_eq!(file.steady.as_deref(), Some(&**w));
    validate_run_dir(&d);
    let _ = std::fs::remove_dir_all(&d);
}

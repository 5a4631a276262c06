//! A run repeated (`Repeats`, `quetta-bench run --num-runs`): each repeat an ordinary run
//! directory, `repeats.json` by its schema, and the 95 % confidence interval of a mean that
//! the simulator sets covering it (docs/METRICS.md, Repeated runs).

mod common;

use std::time::Duration;

use common::{json, tmpdir, validate, validate_run_dir};
use quetta::{Benchmark, Load, Repeats, SimConfig, Target, WorkloadSpec};

/// Gaps between tokens of 5 ms ± 2 ms (uniform): their mean is 5 ms. Five repeats of five
/// runs each (20 requests of 19 gaps a run): the interval of `itl_ms.mean` across a repeat's
/// runs holds 5 ms in at least 4 of the 5 (a right 95 % interval does so with probability
/// 0.977). The simulator's draws are seeded (seed k + 1 for repeat k), so which intervals
/// hold it does not change from one test run to the next beyond microseconds of timing (here:
/// all but repeat 3's, whose interval [5.018, 5.077] misses by 0.018 ms). The statistics'
/// own coverage is checked on 10,000 samples in `quetta-metrics` (stats.rs).
#[test]
fn intervals_across_repeats_cover_the_simulators_mean() {
    let mut covered = 0;
    for k in 0..5 {
        let sim = SimConfig {
            ttft: Duration::from_millis(2),
            itl: Duration::from_millis(5),
            itl_jitter: Duration::from_millis(2),
            seed: k + 1,
            ..SimConfig::default()
        };
        let base = Benchmark::new(Target::simulator(sim))
            .workload(WorkloadSpec::synthetic(8, 20))
            .load(Load::closed(4))
            .requests(20);
        let d = tmpdir(&format!("repeats-{k}"));
        let out = Repeats::new(base.output_dir(&d), 5).run_blocking().unwrap();
        let r = &out.report;
        assert_eq!((r.planned, r.runs.len(), r.partial), (5, 5, false));
        // fresh prompts in every run: five seeds
        let mut seeds: Vec<u64> = r.runs.iter().map(|x| x.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), 5);
        validate(quetta::report::schema::REPEATS, &json(&d.join("repeats.json")), "repeats.json");
        // each run's own summary, read from its directory
        let means: Vec<f64> = (1..=5)
            .map(|i| {
                let run = d.join(format!("run-{i}"));
                validate_run_dir(&run);
                json(&run.join("summary.json"))["itl_ms"]["mean"].as_f64().unwrap()
            })
            .collect();
        let f = r.figure("itl_ms.mean").unwrap();
        assert_eq!(f.values, means.iter().map(|&m| Some(m)).collect::<Vec<_>>());
        // the interval by hand: t(0.975, 4) = 2.776445 from the table
        let mean = means.iter().sum::<f64>() / 5.0;
        let sd = (means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / 4.0).sqrt();
        let half = 2.776_445 * sd / 5f64.sqrt();
        let (lo, hi) = (f.across.ci95_low.unwrap(), f.across.ci95_high.unwrap());
        assert!((lo - (mean - half)).abs() < 1e-6 && (hi - (mean + half)).abs() < 1e-6);
        covered += u32::from(lo <= 5.0 && 5.0 <= hi);
        eprintln!("repeat {k}: itl_ms.mean {mean:.4} ms, 95% CI [{lo:.4}, {hi:.4}]");
        // pooled: every run's requests as one
        let pooled = r.pooled.as_ref().unwrap();
        assert_eq!(pooled.completed, 100);
        let _ = std::fs::remove_dir_all(&d);
    }
    assert!(covered >= 4, "the intervals held 5 ms in {covered} of 5 repeats");
}

/// `until_ci`: a target the simulator's steady throughput meets stops at the third run (the
/// fewest judged); one nothing meets (a mean, exact, never equal in four runs to 1e-12) runs
/// to the most and says so; an unknown figure is
/// refused before anything runs.
#[test]
fn until_ci_stops_once_the_intervals_are_narrow() {
    let base = common::quick(12).load(Load::closed(4));
    let d = tmpdir("until-ci");
    let mut r = Repeats::new(base.clone().output_dir(&d), 6);
    r.until_ci = Some((0.5, vec!["request_throughput".into()]));
    let out = r.run_blocking().unwrap();
    let u = out.report.until_ci.as_ref().unwrap();
    assert!(u.met);
    assert_eq!((out.report.runs.len(), out.report.partial), (3, false));
    validate(quetta::report::schema::REPEATS, &json(&d.join("repeats.json")), "repeats.json");
    let _ = std::fs::remove_dir_all(&d);
    let mut r = Repeats::new(base.clone(), 4);
    r.until_ci = Some((1e-12, vec!["ttft_ms.mean".into()]));
    let out = r.run_blocking().unwrap();
    assert_eq!(out.report.runs.len(), 4);
    assert!(!out.report.until_ci.as_ref().unwrap().met);
    assert!(out.report.render(None).contains("NOT met within the planned repeats"));
    let mut r = Repeats::new(base, 4);
    r.until_ci = Some((0.02, vec!["ttft_p99".into()]));
    let e = r.run_blocking().unwrap_err().to_string();
    assert!(e.contains("\"ttft_p99\" is no figure of repeats.json"), "{e}");
}

/// `compare` of two repeated runs tests between runs too: a simulator 10 ms slower to the
/// first token is slower in every repeat (Welch's p between the runs' medians), and its
/// lower throughput is now a tested regression; two single runs say what they cannot show.
#[test]
fn compare_tests_between_repeats() {
    use quetta::{compare_sides, CompareOptions, CompareSide};
    let run = |ttft_ms: u64, name: &str| {
        let d = tmpdir(name);
        let b = Benchmark::new(common::sim(ttft_ms, 1))
            .workload(WorkloadSpec::synthetic(8, 8))
            .load(Load::closed(4))
            .requests(20)
            .output_dir(&d);
        Repeats::new(b, 3).run_blocking().unwrap();
        d
    };
    let (a, b) = (run(20, "cmp-base"), run(30, "cmp-cand"));
    let opts = CompareOptions { fail_on_regression: Some(0.05), ..CompareOptions::default() };
    let (sa, sb) = (CompareSide::open(&a).unwrap(), CompareSide::open(&b).unwrap());
    let r = compare_sides(&sa, &sb, &opts).unwrap();
    let m = |k: &str| r.metrics.iter().find(|m| m.metric == k).unwrap().clone();
    let ttft = m("ttft_ms");
    assert_eq!(ttft.runs, Some([3, 3]));
    assert!(ttft.between_runs_p.unwrap() < 0.05, "{ttft:?}");
    assert_eq!(ttft.verdict.as_deref(), Some("slower (significant)"));
    assert_eq!(ttft.n, Some([60, 60]), "every repeat's requests pooled");
    let tput = m("request_throughput");
    assert_eq!(tput.verdict.as_deref(), Some("lower (significant)"), "{tput:?}");
    assert!(r.failed(), "{:?}", r.regressions);
    assert!(r.regressions.iter().any(|x| x.starts_with("request_throughput -")), "{r:?}");
    assert!(r.notes.contains(&quetta::report::Note::ComparedRepeats));
    r.write(&sb).unwrap();
    validate(quetta::report::schema::COMPARE, &json(&b.join("compare.json")), "compare.json");
    // one run each: no test between runs, and a note that says so
    let (s1, s2) = (
        CompareSide::open(&a.join("run-1")).unwrap(),
        CompareSide::open(&b.join("run-1")).unwrap(),
    );
    let r = compare_sides(&s1, &s2, &opts).unwrap();
    assert!(r.metrics.iter().all(|m| m.between_runs_p.is_none()));
    assert!(r.notes.contains(&quetta::report::Note::OneRunPerSide));
    assert_eq!(m_of(&r, "request_throughput").verdict, None);
    let _ = (std::fs::remove_dir_all(&a), std::fs::remove_dir_all(&b));
}

fn m_of(r: &quetta::CompareReport, k: &str) -> quetta::report::MetricComparison {
    r.metrics.iter().find(|m| m.metric == k).unwrap().clone()
}

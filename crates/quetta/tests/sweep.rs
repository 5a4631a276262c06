//! `Sweep` and `SloSearch`: steps on one connected target, their files and schemas, the
//! reports, and each step's own client figures.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{json, tmpdir, validate, validate_run_dir};
use quetta::report::{schema, RunDir};
use quetta::{Benchmark, Load, SearchOver, SimConfig, SloSearch, Sweep, Target, WorkloadSpec};

#[test]
fn a_pow2_sweep_writes_its_steps_a_table_and_reports() {
    let d = tmpdir("sweep");
    let base = Benchmark::new(common::sim(20, 5))
        .workload(WorkloadSpec::synthetic(32, 8))
        .requests(24)
        .output_dir(&d);
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sweep = Sweep::pow2(base, 4);
    let t = told.clone();
    sweep.on_step = Some(std::sync::Arc::new(move |s: &quetta::Step| t.lock().unwrap().push(*s)));
    let report = sweep.run_blocking().unwrap();
    let cs: Vec<f64> = report.steps.iter().map(quetta::SweepStep::value).collect();
    assert_eq!(cs, [1.0, 2.0, 4.0]);
    // each step was told before it ran, as a typed value
    let kind = quetta::report::SweepKind::Concurrency;
    let want: Vec<_> = [1.0, 2.0, 4.0]
        .iter()
        .enumerate()
        .map(|(i, &value)| quetta::Step::Sweep { index: i + 1, of: 3, kind, value })
        .collect();
    assert_eq!(*told.lock().unwrap(), want);
    validate(schema::SWEEP, &json(&d.join("sweep.json")), "sweep.json");
    for st in &report.steps {
        // each step is a whole run whose summary the sweep row repeats
        let s = RunDir::open(&st.dir).unwrap().read_summary().unwrap();
        validate_run_dir(Path::new(&st.dir));
        assert_eq!(st.request_throughput, s.metrics.request_throughput);
        assert_eq!(st.completed, 24);
        assert_eq!(st.e2e_p99_ms, s.metrics.e2e_ms.p99);
    }
    // throughput grows with concurrency against the unbounded simulator
    let t: Vec<f64> = report.steps.iter().map(|s| s.request_throughput).collect();
    assert!(t[2] > t[0] * 2.5, "{t:?}");
    assert_eq!(report.peak.as_ref().unwrap().concurrency, Some(4.0));
    let table = report.render(None);
    assert!(table.contains("== Quetta sweep ==") && table.contains("req/min"), "{table}");

    // reports: one self-contained HTML file and a PDF with an embedded font
    let (html, pdf) = RunDir::open(&d).unwrap().write_reports().unwrap();
    let html = std::fs::read_to_string(html).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // its one script is inline (hover and legend toggling)
    assert_eq!(html.matches("<script>").count(), 1);
    for external in ["<script src", "src=", "href=", "<link", "@import"] {
        assert!(!html.contains(external), "report.html must not load anything: {external}");
    }
    // charts: 9 of the sweep, and each step's three CDFs (steps under 5 s have no
    // over-time charts)
    assert_eq!(html.matches("<svg").count(), 9 + 3 * 3);
    assert!(html.contains("Throughput vs concurrency") && html.contains("TTFT CDF"));
    assert!(html.contains("Latency–throughput trade-off") && html.contains("TTFT CDF by step"));
    let peak = format!("{:.2}", report.peak.as_ref().unwrap().request_throughput);
    assert!(html.contains(&peak), "the peak throughput {peak}");
    for st in &report.steps {
        let cell =
            format!("<td>{}</td>", quetta::report::chart::figure(Some(st.request_throughput)));
        assert!(html.contains(&cell), "step throughput {cell} in the sweep table");
    }
    let pdf = std::fs::read(pdf).unwrap();
    assert!(pdf.starts_with(b"%PDF-"));
    let body = String::from_utf8_lossy(&pdf);
    assert!(body.contains("FontFile2"), "the font is embedded");
    // the summary page with the sweep table, 9 charts four to a page (3 pages), one page
    // per step, the configuration last
    assert!(body.contains(&format!("/Count {}", 1 + 3 + report.steps.len() + 1)), "page count");
    let _ = std::fs::remove_dir_all(&d);
}

/// Each step reports its own client CPU and peak memory: a light step after a heavy one
/// reports little (the process-wide counters used to accumulate across steps).
#[test]
fn each_step_reports_its_own_client_cpu_and_memory() {
    let d = tmpdir("sweep-cpu");
    // a zero-delay simulator: the heavy step's CPU is the client's and the simulator's
    let base =
        Benchmark::new(common::sim(0, 0)).workload(WorkloadSpec::synthetic(8, 64)).output_dir(&d);
    let heavy = base.clone().requests(2500);
    let light = base.requests(5);
    let rt = common::rt();
    let mut cpu = Vec::new();
    for (i, b) in [heavy, light].into_iter().enumerate() {
        let b = b.output_dir(d.join(format!("step-{i}")));
        let s = rt.block_on(Sweep::concurrencies(b, vec![8]).run()).unwrap();
        let sum = RunDir::open(&s.steps[0].dir).unwrap().read_summary().unwrap();
        cpu.push(sum.client.cpu_user_s + sum.client.cpu_system_s);
        assert_eq!(sum.client.peak_rss_scope, "benchmark", "{:?}", sum.client);
    }
    assert!(cpu[0] > 0.1, "the heavy step used CPU: {cpu:?}");
    assert!(cpu[1] < cpu[0] / 2.0, "the light step reports its own CPU: {cpu:?}");
    // and in one sweep: the steps' CPU adds up to no more than the process's
    let base = Benchmark::new(common::sim(0, 0))
        .workload(WorkloadSpec::synthetic(8, 64))
        .requests(300)
        .output_dir(d.join("both"));
    let s = rt.block_on(Sweep::concurrencies(base, vec![8, 1]).run()).unwrap();
    let per: Vec<f64> = s
        .steps
        .iter()
        .map(|st| {
            let c = RunDir::open(&st.dir).unwrap().read_summary().unwrap().client;
            c.cpu_user_s + c.cpu_system_s
        })
        .collect();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let total = (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0;
    assert!(per.iter().sum::<f64>() <= total + 0.05, "{per:?} vs the process's {total}");
    assert!(per[1] < per.iter().sum::<f64>(), "the second step is not the running total: {per:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_slo_search_finds_the_saturation_rate_of_a_bounded_simulator() {
    // 4 requests at once, each 10 ms + 19 × 5 ms (about 105 ms): saturation near 38 req/s.
    // The service time achieved on this machine is read back from the simulator's records.
    let server = quetta_sim::Simulator::start(SimConfig {
        ttft: Duration::from_millis(10),
        itl: Duration::from_millis(5),
        max_running: Some(4),
        worker_threads: 2,
        keep_records: true,
        ..SimConfig::default()
    })
    .unwrap();
    let d = tmpdir("slo");
    let base = Benchmark::new(Target::openai(server.base_url()).model("sim"))
        .workload(WorkloadSpec::synthetic(8, 20))
        .load(Load::constant(1.0))
        .output_dir(&d);
    let mut s = SloSearch::new(base, "ttft:p99<50ms".parse().unwrap());
    (s.start, s.tolerance, s.requests_per_probe) = (20.0, 0.04, 100);
    let r = s.run_blocking().unwrap();
    validate(schema::SLO, &json(&d.join("slo.json")), "slo.json");
    let (answer, failing) = (r.answer.unwrap(), r.first_failing.unwrap());
    let mut service: Vec<f64> = server
        .records()
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| r.end.duration_since(r.arrival).as_secs_f64())
        .collect();
    service.sort_by(f64::total_cmp);
    let saturation = 4.0 / service[service.len() / 4];
    println!("SLO search: answer {answer} req/s, first failing {failing}; saturation {saturation:.2} req/s");
    assert!((failing - answer) / failing <= 0.04 + 1e-9, "bisected to the tolerance");
    // the knee is found below saturation; on a machine busy with other work the client's
    // own delays add to TTFT and move it lower (29.4 of 37.7 req/s seen under a parallel
    // build, 0.9 and above when the machine is quiet)
    assert!(
        answer <= saturation * 1.03 && answer >= saturation * 0.75,
        "answer {answer}, saturation {saturation:.2}"
    );
    assert!(r.probes.len() >= 4);
    assert!(r.probes.iter().all(|p| p.values.contains_key("ttft_ms_p99")));
    // per-request thresholds are not objectives of a search
    let base = Benchmark::new(common::sim(1, 1));
    let mut s = SloSearch::new(base, "ttft:50ms".parse().unwrap());
    s.over = SearchOver::Concurrency;
    assert!(s.run_blocking().unwrap_err().to_string().contains("run-level objectives"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_sweep_or_search_that_is_refused_leaves_no_directory() {
    // a workload its first step refuses (a negative spread), and a step list that is
    let mut bad = WorkloadSpec::synthetic(32, 8);
    bad.input_stddev = Some(-1.0);
    let d = tmpdir("refused-sweep");
    let base = Benchmark::new(common::sim(5, 1)).workload(bad).requests(4).output_dir(&d);
    let e = Sweep::concurrencies(base.clone(), vec![1, 2]).run_blocking().unwrap_err();
    assert!(e.to_string().contains("input_len_stddev"), "{e}");
    assert!(!d.exists(), "{} was left behind", d.display());
    let ok = base.clone().workload(WorkloadSpec::synthetic(32, 8));
    assert!(Sweep::concurrencies(ok, vec![2, 0]).run_blocking().is_err());
    assert!(!d.exists(), "{} was left behind", d.display());
    let e = SloSearch::new(base, "ttft:p99<500ms".parse().unwrap()).run_blocking().unwrap_err();
    assert!(e.to_string().contains("input_len_stddev"), "{e}");
    assert!(!d.exists(), "{} was left behind", d.display());
}

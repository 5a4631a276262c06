//! The subcommands: each turns its flags into a library call and prints the result.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use quetta::report::{files, render_summary, RunDir};
use quetta::{
    Benchmark, CompareOptions, CompareSide, RunControl, SearchOver, SloSearch, Steps, Sweep,
};

use crate::flags::RunArgs;
use quetta_cli::SHARD_SECRET_ENV;

/// Set by the first Ctrl-C: the command ends with exit status 130 once what was measured
/// is written.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// 130 (128 + SIGINT) when Ctrl-C stopped the command, else `code`.
fn exit(code: ExitCode) -> ExitCode {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        eprintln!("interrupted: results above are PARTIAL");
        ExitCode::from(130)
    } else {
        code
    }
}

/// A runtime; the first Ctrl-C stops `control` (no new requests, no further sweep steps or
/// probes; requests in flight drain), a second one exits at once with 130.
pub(crate) fn runtime(
    threads: Option<usize>,
    control: &Arc<RunControl>,
) -> Result<tokio::runtime::Runtime> {
    let rt = quetta::runtime(threads)?;
    let c = control.clone();
    rt.spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!(
                "\ninterrupted: no new requests; waiting for requests in flight (drain timeout; Ctrl-C again to quit now)..."
            );
            c.stop();
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupted twice: quitting now (records written so far stay in requests.jsonl; `quetta-bench report DIR` rebuilds the summary)");
            std::process::exit(130);
        }
    });
    Ok(rt)
}

/// What a command shows of its progress: a bar on a terminal (done of planned, %, ETA, in
/// flight, errors, req/s, live TTFT p50; elapsed of the duration for --duration runs), a
/// heartbeat line every 10 s otherwise, nothing with --quiet. Sweeps and searches name the
/// step in the bar's prefix.
struct Display {
    bar: Option<indicatif::ProgressBar>,
    prefix: Arc<std::sync::Mutex<(String, Instant)>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Display {
    fn start(rt: &tokio::runtime::Runtime, b: &quetta::Benchmark, quiet: bool) -> Self {
        let (control, first_token) = (&b.control, b.target.request_kind().generates());
        let prefix = Arc::new(std::sync::Mutex::new((String::new(), Instant::now())));
        if quiet {
            return Self { bar: None, prefix, task: None };
        }
        let tty = std::io::stderr().is_terminal();
        let bar = tty.then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
            b
        });
        let (c, p, b) = (control.clone(), prefix.clone(), bar.clone());
        let task = rt.spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_millis(if tty { 250 } else { 10_000 }));
            tick.tick().await;
            loop {
                tick.tick().await;
                let (prefix, t0) = p.lock().map_or_else(|e| e.into_inner().clone(), |g| g.clone());
                let live = Live::read(&c.progress, t0.elapsed(), first_token);
                match &b {
                    Some(b) => live.draw(b, &prefix),
                    None => eprintln!("[progress] {prefix}{}", live.line()),
                }
            }
        });
        Self { bar, prefix, task: Some(task) }
    }

    /// A new step of a sweep or search: its label prefixes the bar, its rate counts anew.
    fn step(&self, step: &quetta::Step) {
        if let Ok(mut g) = self.prefix.lock() {
            *g = (format!("{} ", step.short()), Instant::now());
        }
        self.println(&step.to_string());
    }

    fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn finish(self) {
        if let Some(t) = self.task {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// A snapshot of a run's live counters.
struct Live {
    done: u64,
    failed: u64,
    planned: u64,
    in_flight: u64,
    elapsed: Duration,
    duration: Option<Duration>,
    /// Whether the requests generate (have a first token).
    first_token: bool,
    ttft_p50: Option<f64>,
}

impl Live {
    fn read(p: &quetta::Progress, elapsed: Duration, first_token: bool) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        let failed = p.failed.load(Relaxed);
        Self {
            done: p.completed.load(Relaxed) + failed,
            failed,
            planned: p.planned.load(Relaxed),
            in_flight: p.in_flight.load(Relaxed),
            elapsed,
            duration: Some(p.duration_ms.load(Relaxed))
                .filter(|d| *d > 0)
                .map(Duration::from_millis),
            first_token,
            ttft_p50: p.recent_ttft_ms.median(),
        }
    }

    fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.done as f64 / s
        } else {
            0.0
        }
    }

    fn counts(&self) -> String {
        let ttft = if self.first_token {
            format!(", TTFT p50 {}", self.ttft_p50.map_or("-".into(), |t| format!("{t:.1} ms")))
        } else {
            String::new()
        };
        format!("{} in flight, {} err, {:.1} req/s{ttft}", self.in_flight, self.failed, self.rate())
    }

    /// The heartbeat line.
    fn line(&self) -> String {
        let of = if self.planned > 0 { format!(" of {}", self.planned) } else { String::new() };
        format!("{:.0} s: {} done{of}, {}", self.elapsed.as_secs_f64(), self.done, self.counts())
    }

    fn draw(&self, b: &indicatif::ProgressBar, prefix: &str) {
        let style = |t: &str| {
            indicatif::ProgressStyle::with_template(t).map_or_else(
                |_| indicatif::ProgressStyle::default_bar(),
                |s| s.progress_chars("=> "),
            )
        };
        b.set_prefix(prefix.to_owned());
        b.set_message(self.counts());
        if let (Some(d), 0) = (self.duration, self.planned) {
            b.set_style(style("{prefix}[{bar:20}] {pos}/{len} s  {msg}"));
            b.set_length(d.as_secs().max(1));
            b.set_position(self.elapsed.as_secs().min(d.as_secs()));
        } else if self.planned > 0 {
            b.set_style(style("{prefix}[{bar:20}] {pos}/{len} {percent}% ETA {eta}  {msg}"));
            b.set_length(self.planned);
            b.set_position(self.done);
        } else {
            b.set_style(style("{prefix}{spinner} {pos} done  {msg}"));
            b.set_position(self.done);
            b.tick();
        }
    }
}

fn banner(a: &RunArgs) {
    for w in a.warnings() {
        eprintln!("warning: {w}");
    }
    if let (true, Some(m)) = (a.embedded_simulator(), &a.twin.sim_model) {
        eprintln!(
            "no --base-url: benchmarking Quetta's embedded simulator as the twin in {}",
            m.display()
        );
    } else if a.embedded_simulator() {
        eprintln!(
            "no --base-url: benchmarking Quetta's embedded simulator (TTFT {} ms, ITL {} ms)",
            a.target.sim_ttft_ms, a.target.sim_itl_ms
        );
    }
    if a.target.insecure {
        eprintln!("warning: --insecure: TLS certificates are NOT verified");
    }
}

/// `quetta-bench run`.
pub fn run(a: &RunArgs) -> Result<ExitCode> {
    let b = a.to_benchmark()?;
    let rt = runtime(a.load.threads, &b.control)?;
    if a.output.dry_run {
        print!("{}", rt.block_on(b.plan())?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(n) = a.load.num_runs.filter(|&n| n > 1) {
        return repeat(a, b, &rt, n);
    }
    if a.load.same_prompts {
        eprintln!(
            "warning: --same-prompts applies to sweeps and to --num-runs; one run ignores it"
        );
    }
    let r = if a.twin.predict {
        let model = b
            .target
            .sim_config()
            .and_then(|c| c.server_model.clone())
            .context("--predict needs --sim-model")?;
        rt.block_on(b.predict(&model))?
    } else {
        banner(a);
        let display = Display::start(&rt, &b, a.output.quiet);
        let r = rt.block_on(b.run());
        display.finish();
        r?
    };
    let table = render_summary(&r.summary, r.dir.as_deref());
    if a.output.json {
        eprintln!("{table}");
        println!("{}", serde_json::to_string_pretty(&r.summary)?);
    } else {
        println!("{table}");
    }
    if a.output.save_result {
        let d = r.dir.as_deref().context("--save-result needs the run's directory")?;
        let path = save_result(a, &RunDir::open(d)?)?;
        eprintln!("vLLM result {}", path.display());
    }
    if let Some(lost) = r.summary.shards.as_ref().and_then(quetta::report::ShardsSummary::lost) {
        eprintln!("error: {lost}");
        return Ok(ExitCode::from(1));
    }
    Ok(exit(verdict(&r.summary, a.output.min_success_rate)))
}

/// `quetta-bench run --num-runs N`: the repeats (a line each), then the figures across them.
fn repeat(
    a: &RunArgs,
    mut b: Benchmark,
    rt: &tokio::runtime::Runtime,
    n: usize,
) -> Result<ExitCode> {
    if a.twin.predict {
        bail!("--num-runs repeats a measured run: not with --predict");
    }
    if b.output_dir.is_none() {
        b.output_dir = Some(RunDir::default_path("repeats"));
    }
    banner(a);
    let display = Arc::new(Display::start(rt, &b, a.output.quiet));
    let mut r = quetta::Repeats::new(b, n);
    r.same_prompts = a.load.same_prompts;
    r.pause = a.load.pause_between.unwrap_or_default();
    r.until_ci = a.load.until_ci.map(|w| (w, a.load.ci_figures.clone()));
    r.on_step = Some(say(&display));
    let out = rt.block_on(r.run());
    if let Ok(d) = Arc::try_unwrap(display) {
        d.finish();
    }
    let out = out?;
    for (i, r) in out.runs.iter().enumerate() {
        let m = &r.summary.metrics;
        let partial =
            quetta::report::partial_label(&r.summary).map_or(String::new(), |p| format!(" ({p})"));
        println!(
            "run {}    {} completed, {} failed, {:.2} req/s, TTFT p99 {} ms{partial}",
            i + 1,
            m.completed,
            m.failed,
            m.request_throughput,
            m.ttft_ms.p99.map_or("-".into(), |v| format!("{v:.3}"))
        );
    }
    print!("{}", out.report.render(out.dir.as_deref()));
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&out.report)?);
    }
    if let Some(why) = out.failure(a.output.min_success_rate) {
        eprintln!("error: {}", why.replace("is below", "is below --min-success-rate"));
        return Ok(exit(ExitCode::from(1)));
    }
    Ok(exit(ExitCode::SUCCESS))
}

/// Exit 1, saying why, when the run failed (`Summary::failure`).
fn verdict(s: &quetta::report::Summary, min: f64) -> ExitCode {
    match s.failure(min) {
        Some(why) => {
            eprintln!("error: {}", why.replace("is below", "is below --min-success-rate"));
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    }
}

/// `--save-result`: the vLLM result JSON in --result-dir, named as vLLM names it.
fn save_result(a: &RunArgs, d: &RunDir) -> Result<PathBuf> {
    let name = match &a.output.result_filename {
        Some(n) => n.clone(),
        None => quetta::export::vllm_file_name(&d.read_summary()?),
    };
    let dir = a.output.result_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(name);
    quetta::export::write_vllm(d, &path)?;
    Ok(path)
}

/// Flags of `quetta-bench sweep`; every `run` flag applies to each step.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Closed-loop steps at these concurrencies, e.g. 1,8,32.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["concurrency_pow2", "rates"])]
    concurrencies: Vec<usize>,
    /// Closed-loop steps at 1, 2, 4, … and MAX (llmperf's power-of-two steps).
    #[arg(long, conflicts_with = "rates")]
    concurrency_pow2: Option<usize>,
    /// Open-loop steps at these rates (req/s), or `auto`: measure the maximum throughput
    /// first (closed loop at --auto-concurrency), then spread --auto-steps rates up to it.
    #[arg(long)]
    rates: Option<String>,
    /// Concurrency of the closed loop that measures the maximum throughput (--rates auto).
    #[arg(long, default_value_t = 64)]
    auto_concurrency: usize,
    /// Rates spread up to the measured maximum (--rates auto).
    #[arg(long, default_value_t = 5)]
    auto_steps: usize,
}

/// The base benchmark of a sweep or search (no default directory per step: the command's).
fn base(a: &RunArgs, kind: &str) -> Result<Benchmark> {
    let mut b = a.to_benchmark()?;
    if b.sharding.is_some() {
        bail!("a {kind} is not sharded (--shard, --shards): shard the run of one step instead");
    }
    if a.load.num_runs.is_some_and(|n| n > 1) {
        bail!("--num-runs repeats a run; a {kind}'s steps are not repeated");
    }
    b.output_dir = Some(a.output.output_dir.clone().unwrap_or_else(|| RunDir::default_path(kind)));
    Ok(b)
}

/// The step callback of a sweep or search: the step's line, and the bar's new prefix.
fn say(d: &Arc<Display>) -> quetta::OnStep {
    let d = d.clone();
    Arc::new(move |s: &quetta::Step| d.step(s))
}

pub fn sweep(a: SweepArgs) -> Result<ExitCode> {
    let b = base(&a.run, "sweep")?;
    let steps = match (&a.rates, a.concurrency_pow2, a.concurrencies.is_empty()) {
        (Some(r), _, _) if r == "auto" => {
            Steps::AutoRates { concurrency: a.auto_concurrency, steps: a.auto_steps }
        }
        (Some(r), _, _) => Steps::Rates(
            r.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v > 0.0)
                        .with_context(|| format!("--rates: {x:?} is not a positive number"))
                })
                .collect::<Result<_>>()?,
        ),
        (None, Some(max), _) => Sweep::pow2(b.clone(), max).steps,
        (None, None, false) => Steps::Concurrencies(a.concurrencies.clone()),
        (None, None, true) => bail!("give --concurrencies, --concurrency-pow2 or --rates"),
    };
    let rt = runtime(a.run.load.threads, &b.control)?;
    banner(&a.run);
    let dir = b.output_dir.clone();
    let display = Arc::new(Display::start(&rt, &b, a.run.output.quiet));
    let mut s = Sweep::new(b, steps);
    s.same_prompts = a.run.load.same_prompts;
    s.on_step = Some(say(&display));
    let report = rt.block_on(s.run());
    if let Ok(d) = Arc::try_unwrap(display) {
        d.finish();
    }
    let report = report?;
    print!("{}", report.render(dir.as_deref()));
    if let Some(f) = &report.failed {
        eprintln!("error: the sweep failed at {f}");
        return Ok(exit(ExitCode::from(1)));
    }
    Ok(exit(ExitCode::SUCCESS))
}

/// Flags of `quetta-bench slo`; every `run` flag applies to each probe (`--slo` holds the
/// run-level objectives here, e.g. `--slo ttft:p99<500ms,tpot:p99<40ms`).
#[derive(Debug, Args)]
pub struct SloArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Search over the request rate (open loop, the default) or the concurrency.
    #[arg(long, default_value = "rate")]
    search: String,
    /// First rate (req/s) or concurrency to try.
    #[arg(long, default_value_t = 1.0)]
    start: f64,
    /// Never try beyond this rate or concurrency.
    #[arg(long, default_value_t = 10_000.0)]
    max: f64,
    /// Stop bisecting when the bracket is narrower than this share of its upper end.
    #[arg(long, default_value_t = 0.05)]
    tolerance: f64,
    /// Requests per probe.
    #[arg(long, default_value_t = 200)]
    min_requests: u64,
    /// A probe with more failed requests than this share fails.
    #[arg(long, default_value_t = 0.01)]
    max_error_rate: f64,
    /// Give up after this many probes.
    #[arg(long, default_value_t = 24)]
    max_probes: usize,
}

pub fn slo(a: SloArgs) -> Result<ExitCode> {
    let mut b = base(&a.run, "slo")?;
    if a.run.load.same_prompts {
        eprintln!("warning: --same-prompts: an SLO search's probes each draw their own prompts");
    }
    let objectives = b
        .slos
        .take()
        .context("give the objectives with --slo, e.g. --slo ttft:p99<500ms,tpot:p99<40ms")?;
    let over = match a.search.as_str() {
        "rate" => SearchOver::Rate,
        "concurrency" => SearchOver::Concurrency,
        s => bail!("--search {s:?}: expected rate or concurrency"),
    };
    let rt = runtime(a.run.load.threads, &b.control)?;
    banner(&a.run);
    let dir = b.output_dir.clone();
    let mut s = SloSearch::new(b, objectives);
    s.over = over;
    (s.start, s.max, s.tolerance) = (a.start, a.max, a.tolerance);
    (s.requests_per_probe, s.max_error_rate, s.max_probes) =
        (a.min_requests, a.max_error_rate, a.max_probes);
    let display = Arc::new(Display::start(&rt, &s.base, a.run.output.quiet));
    s.on_step = Some(say(&display));
    let report = rt.block_on(s.run());
    if let Ok(d) = Arc::try_unwrap(display) {
        d.finish();
    }
    let report = report?;
    print!("{}", report.render(dir.as_deref()));
    if let Some(f) = &report.failed {
        eprintln!("error: the search failed at {f}");
    }
    Ok(exit(if report.answer.is_some() { ExitCode::SUCCESS } else { ExitCode::from(1) }))
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline: a run's directory, or the result file of `vllm bench serve
    /// --save-result --save-detailed`.
    baseline: PathBuf,
    /// The candidate: a run's directory (compare.json goes into it), or a vLLM result file
    /// (FILE.compare.json beside it).
    candidate: PathBuf,
    /// Exit 1 when a metric is significantly worse by more than this (e.g. 5%).
    #[arg(long)]
    fail_on_regression: Option<String>,
    /// Significance level of the tests.
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    /// A baseline older than this is marked stale (e.g. 30d, 12h).
    #[arg(long, default_value = "30d", value_parser = crate::flags::duration_arg)]
    max_baseline_age: Duration,
    /// Refuse to compare runs whose workload or load settings differ.
    #[arg(long)]
    strict: bool,
}

pub fn compare(a: &CompareArgs) -> Result<ExitCode> {
    let threshold = match &a.fail_on_regression {
        Some(t) => Some(
            t.trim_end_matches('%')
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 0.0)
                .with_context(|| format!("--fail-on-regression {t:?}: expected e.g. 5%"))?
                / 100.0,
        ),
        None => None,
    };
    let opts = CompareOptions {
        alpha: a.alpha,
        fail_on_regression: threshold,
        max_baseline_age: a.max_baseline_age,
        strict: a.strict,
        ..CompareOptions::default()
    };
    let (base, cand) = (CompareSide::open(&a.baseline)?, CompareSide::open(&a.candidate)?);
    let report = quetta::compare_sides(&base, &cand, &opts)?;
    print!("{}", report.render());
    report.write(&cand)?;
    Ok(if report.failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Flags of `quetta-bench k8s`; every `run` flag is passed on to each shard.
#[derive(Debug, Args)]
pub struct K8sArgs {
    #[command(flatten)]
    run: RunArgs,
    /// The container image with quetta-bench as its entrypoint (built from the Dockerfile).
    /// `--image IMAGE` says the same unless --modality vision, whose `--image` flags are
    /// its image files.
    #[arg(help_heading = "Kubernetes", long)]
    container_image: Option<String>,
    /// The Job's and headless Service's name; pod K is NAME-K.NAME.
    #[arg(help_heading = "Kubernetes", long, default_value = "quetta")]
    name: String,
    #[arg(help_heading = "Kubernetes", long)]
    namespace: Option<String>,
    /// The rendezvous port on shard 0.
    #[arg(help_heading = "Kubernetes", long, default_value_t = 7000)]
    port: u16,
    /// CPU each shard's pod requests.
    #[arg(help_heading = "Kubernetes", long, default_value = "2")]
    cpu: String,
    /// Memory each shard's pod requests (and is limited to).
    #[arg(help_heading = "Kubernetes", long, default_value = "2Gi")]
    memory: String,
    /// An existing PersistentVolumeClaim for the results (default: a new ReadWriteMany
    /// claim NAME-results).
    #[arg(help_heading = "Kubernetes", long)]
    results_pvc: Option<String>,
    /// The size of the new results claim.
    #[arg(help_heading = "Kubernetes", long, default_value = "1Gi")]
    results_size: String,
    /// The new results claim's storage class (one that offers ReadWriteMany).
    #[arg(help_heading = "Kubernetes", long)]
    storage_class: Option<String>,
    /// A Secret holding the API key: NAME or NAME:KEY (default key `api-key`); it reaches
    /// the pods as OPENAI_API_KEY, never the manifest.
    #[arg(help_heading = "Kubernetes", long)]
    api_key_secret: Option<String>,
    /// The Secret holding the shard secret, NAME or NAME:KEY (default NAME-shard-secret,
    /// key `secret`; create it first, e.g. `kubectl create secret generic quetta-shard-secret
    /// --from-literal=secret=$(openssl rand -hex 16)`): every pod gets it as
    /// QUETTA_SHARD_SECRET, and shard 0 refuses a connection without it.
    #[arg(help_heading = "Kubernetes", long)]
    shard_secret: Option<String>,
}

/// The flags of `k8s` that are the manifest's, not the shards' (with whether they take a
/// value).
const K8S_ONLY: [(&str, bool); 12] = [
    ("--container-image", true),
    ("--name", true),
    ("--namespace", true),
    ("--port", true),
    ("--cpu", true),
    ("--memory", true),
    ("--results-pvc", true),
    ("--results-size", true),
    ("--storage-class", true),
    ("--api-key-secret", true),
    ("--shard-secret", true),
    ("--shards", true),
];

/// `args` without `flag` and its value.
fn strip_flag(args: &[String], flag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            it.next();
        } else if !a.starts_with(&format!("{flag}=")) {
            out.push(a.clone());
        }
    }
    out
}

/// The command line's `run` flags, for the shards: `k8s`'s own flags left out.
fn shard_args(argv: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = argv.iter().skip_while(|a| *a != "k8s").skip(1);
    while let Some(a) = it.next() {
        let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
        match K8S_ONLY.iter().find(|(f, _)| *f == flag) {
            Some((_, takes)) if *takes && !a.contains('=') => {
                it.next();
            }
            Some(_) => {}
            None => out.push(a.clone()),
        }
    }
    out
}

/// The container image: --container-image, or the one --image of a run without vision.
fn container_image(a: &K8sArgs) -> Result<(String, bool)> {
    let vision = a.run.workload.modality == crate::flags::ModalityArg::Vision;
    match (&a.container_image, a.run.workload.images.as_slice()) {
        (Some(i), _) => Ok((i.clone(), false)),
        (None, [one]) if !vision => Ok((one.display().to_string(), true)),
        _ => bail!("give the container image: --container-image IMAGE (or --image IMAGE without --modality vision)"),
    }
}

pub fn k8s(a: &K8sArgs) -> Result<ExitCode> {
    let n = a.run.sharding.shards.context("give --shards N: one pod per shard")?;
    let (image, from_image_flag) = container_image(a)?;
    let argv: Vec<String> = std::env::args().collect();
    let mut args = shard_args(&argv);
    if from_image_flag {
        // --image was the container's, not a vision image for the shards
        args = strip_flag(&args, "--image");
    }
    for (flag, why) in [
        ("--shard", "each pod's shard is its JOB_COMPLETION_INDEX"),
        ("--coordinator", "shard 0's pod is the coordinator"),
        ("--output-dir", "the merged run goes to the results volume"),
        ("--api-key", "a key in a manifest is a leaked key: use --api-key-secret"),
    ] {
        if args.iter().any(|x| x == flag || x.starts_with(&format!("{flag}="))) {
            bail!("quetta-bench k8s sets no {flag}: {why}");
        }
    }
    if a.run.target.base_url.is_none()
        && a.run.managed.sagemaker_endpoint.is_none()
        && a.run.backend() != crate::flags::BackendArg::Bedrock
        && a.run.managed.vertex_project.is_none()
    {
        bail!("give the server every shard loads (--base-url): without one, each pod would benchmark an embedded simulator of its own");
    }
    // the flags must make a run: check them as shard 0 would read them
    let mut probe = a.run.clone();
    probe.sharding.shard_index = Some("0".into());
    if from_image_flag {
        probe.workload.images.clear();
    }
    probe.sharding.coordinator = Some(format!("{}-0.{}:{}", a.name, a.name, a.port));
    probe.to_benchmark()?;
    let shard = quetta::Shard::new(0, n).map_err(|e| anyhow::anyhow!("--shards: {e}"))?;
    for (flag, c) in
        [("concurrency", a.run.load.concurrency), ("max concurrency", a.run.load.max_concurrency)]
    {
        if let Some(c) = c {
            shard.check_split(flag, c).map_err(anyhow::Error::msg)?;
        }
    }
    for (flag, path) in [("--dataset", &a.run.workload.dataset), ("--trace", &a.run.workload.trace)]
    {
        if let Some(p) = path {
            eprintln!(
                "note: {flag} {} must exist at that path inside the image (or a volume you add)",
                p.display()
            );
        }
    }
    let from_secret = |env: &str, given: &str, default_key: &str| {
        let (secret, key) = given.split_once(':').unwrap_or((given, default_key));
        quetta::k8s::SecretEnv { env: env.into(), secret: secret.into(), key: key.into() }
    };
    let shard_secret = a.shard_secret.clone().unwrap_or_else(|| format!("{}-shard-secret", a.name));
    let mut env_from_secrets = vec![from_secret(SHARD_SECRET_ENV, &shard_secret, "secret")];
    if let Some(s) = &a.api_key_secret {
        env_from_secrets.push(from_secret("OPENAI_API_KEY", s, "api-key"));
    }
    let mut m = quetta::k8s::Manifest {
        name: a.name.clone(),
        namespace: a.namespace.clone(),
        image,
        shards: n,
        port: a.port,
        args: Vec::new(),
        cpu: a.cpu.clone(),
        memory: a.memory.clone(),
        results: match &a.results_pvc {
            Some(c) => quetta::k8s::Results::Claim(c.clone()),
            None => quetta::k8s::Results::NewClaim {
                size: a.results_size.clone(),
                storage_class: a.storage_class.clone(),
            },
        },
        env_from_secrets,
    };
    // every shard: `run`, the user's flags, and where the shards meet and write
    let place = [
        "--shards".to_owned(),
        n.to_string(),
        "--coordinator".to_owned(),
        m.coordinator(),
        "--output-dir".to_owned(),
        m.results_dir(),
        "--overwrite".to_owned(),
    ];
    m.args = std::iter::once("run".to_owned()).chain(args).chain(place).collect();
    print!("{}", m.render()?);
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' run directories.
    #[arg(required = true, num_args = 1..)]
    dirs: Vec<PathBuf>,
    /// Where the merged run goes.
    #[arg(long)]
    output_dir: PathBuf,
    /// Write into an output directory that already holds a run.
    #[arg(long)]
    overwrite: bool,
}

pub fn merge(a: &MergeArgs) -> Result<ExitCode> {
    let opts = quetta::MergeOptions { overwrite: a.overwrite, ..Default::default() };
    let s = quetta::merge(&a.dirs, &a.output_dir, &opts)?;
    println!("{}", render_summary(&s, Some(&a.output_dir)));
    if let Some(lost) = s.shards.as_ref().and_then(quetta::report::ShardsSummary::lost) {
        eprintln!("error: {lost}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run's directory.
    run: PathBuf,
    /// csv or parquet (one row per request), or vllm (the result JSON of vLLM's `bench serve`).
    #[arg(long, default_value = "csv")]
    format: String,
    /// Output file (default: RUN/requests.csv, RUN/requests.parquet or RUN/vllm_result.json).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn export(a: &ExportArgs) -> Result<ExitCode> {
    let d = RunDir::open(&a.run)?;
    let out = |f: &str| a.output.clone().unwrap_or_else(|| d.file(f));
    match a.format.as_str() {
        "csv" => println!(
            "wrote {} ({} rows)",
            out(files::CSV).display(),
            quetta::export::csv(&d, &out(files::CSV))?
        ),
        "parquet" => println!(
            "wrote {} ({} rows)",
            out(files::PARQUET).display(),
            quetta::export::parquet(&d, &out(files::PARQUET))?
        ),
        "vllm" => {
            quetta::export::write_vllm(&d, &out(files::VLLM))?;
            println!("wrote {}", out(files::VLLM).display());
        }
        f => bail!("--format {f:?}: expected csv, parquet or vllm"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `quetta-bench report DIR`: show a run or sweep (rebuilding the summary of a run that
/// died without one) and write report.html and report.pdf.
pub fn report(dir: &Path) -> Result<ExitCode> {
    let d = RunDir::open(dir)?;
    if d.is_repeats() {
        print!("{}", d.read_repeats()?.render(Some(dir)));
    } else if d.is_sweep() {
        print!("{}", d.read_sweep()?.render(Some(dir)));
    } else {
        let s = if d.has_summary() { d.read_summary()? } else { d.rebuild()? };
        println!("{}", render_summary(&s, Some(dir)));
    }
    let (html, pdf) = d.write_reports()?;
    println!("report     {} and {}", html.display(), pdf.display());
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct CorrectnessArgs {
    /// Server root URL.
    #[arg(long)]
    base_url: String,
    /// Model name (default: the first model listed by /v1/models).
    #[arg(long)]
    model: Option<String>,
    /// API key, sent as `Authorization: Bearer` (never written anywhere).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Questions to ask.
    #[arg(long, visible_alias = "num-prompts", default_value_t = 50)]
    num_requests: u64,
    /// Questions in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Largest number to spell (numbers are drawn uniformly from 0..=MAX).
    #[arg(long, default_value_t = 999_999)]
    max_number: u64,
    /// Longest answer asked for (tokens).
    #[arg(long, default_value_t = 32)]
    max_tokens: u32,
    /// Seed of the numbers drawn.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write correctness.json here.
    #[arg(long)]
    output_dir: Option<PathBuf>,
}

pub fn correctness(a: &CorrectnessArgs) -> Result<ExitCode> {
    let mut t = quetta::Target::openai(&a.base_url);
    t.model.clone_from(&a.model);
    t.api_key = a.api_key.as_deref().filter(|k| !k.is_empty()).map(quetta::ApiKey::new);
    let mut c = quetta::correctness::Correctness::new(t);
    (c.requests, c.concurrency, c.max_number, c.max_tokens, c.seed) =
        (a.num_requests, a.concurrency, a.max_number, a.max_tokens, a.seed);
    let r = runtime(Some(2), &RunControl::new())?.block_on(c.run())?;
    println!("== Quetta correctness: {} ==", r.model);
    println!("requests   {} ({} answered, {} failed)", r.requests, r.answered, r.failed);
    println!(
        "mismatch   {} of {} answers ({:.1}%)",
        r.mismatches,
        r.answered,
        r.mismatch_rate * 100.0
    );
    for e in &r.examples {
        println!("example    {} ({}) -> {:?}", e.number, e.words, e.reply);
    }
    if let Some(d) = &a.output_dir {
        RunDir::create(d, true)?.write_correctness(&r)?;
        println!("results    {}", d.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `quetta-bench profiles`: the built-in profiles, and a file's.
pub fn profiles(file: Option<&Path>) -> Result<ExitCode> {
    use quetta::workload::profiles;
    let user = match file {
        Some(f) => profiles::load_file(f)?,
        None => Vec::new(),
    };
    print!("{}", profiles::listing(&user, file));
    Ok(ExitCode::SUCCESS)
}

/// `quetta-bench workload fit`.
pub fn fit(
    trace: &Path,
    format: quetta::workload::spec::TraceFormat,
    columns: &str,
    output: &Path,
) -> Result<ExitCode> {
    use quetta::workload::distribution::Distribution;
    let rows = quetta::workload::spec::load_trace(trace, format, columns)?;
    let d = Distribution::fit(&trace.display().to_string(), &rows)?;
    d.save(output)?;
    println!("fitted {} requests from {}", rows.len(), trace.display());
    print!("{}", d.describe());
    println!("sampling uses the empirical quantiles; wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}

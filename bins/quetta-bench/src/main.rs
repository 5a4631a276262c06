//! `quetta-bench`: a thin command line over Quetta's libraries (the `quetta` facade). Flags
//! are parsed here, turned into the library's specs in one conversion (`flags.rs`), and the
//! results printed; everything else is library code.

mod commands;
mod protocols;

use quetta_cli as flags;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Load-test and profile LLM inference servers: honest timing, exact load.
#[derive(Debug, Parser)]
#[command(name = "quetta-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Each subcommand's help ends with one command that works as written (`tests/help.rs`
/// runs those of run, sweep and slo).
const RUN_EXAMPLE: &str = "Example:\n  quetta-bench run --num-prompts 50 --max-concurrency 8 --random-input-len 256 --random-output-len 64";
const SWEEP_EXAMPLE: &str = "Example:\n  quetta-bench sweep --concurrencies 8,32 --num-prompts 64";
const SLO_EXAMPLE: &str = "Example:\n  quetta-bench slo --slo 'ttft:p99<500ms,tpot:p99<40ms' --search concurrency --start 4 --max 16 --min-requests 20";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark (against the embedded simulator when no --base-url is given).
    #[command(after_help = RUN_EXAMPLE)]
    Run(Box<flags::RunArgs>),
    /// A run per concurrency or request rate, with a sweep table and sweep.json.
    #[command(after_help = SWEEP_EXAMPLE)]
    Sweep(Box<commands::SweepArgs>),
    /// Find the highest request rate (or concurrency) meeting percentile objectives:
    /// `--slo 'ttft:p99<500ms,tpot:p99<40ms'`.
    #[command(after_help = SLO_EXAMPLE)]
    Slo(Box<commands::SloArgs>),
    /// Per-metric deltas of two runs with confidence intervals and significance tests.
    #[command(
        after_help = "Example:\n  quetta-bench compare quetta-results/run-A quetta-results/run-B --fail-on-regression 5%"
    )]
    Compare(Box<commands::CompareArgs>),
    /// Print the Kubernetes manifest of a sharded run: a headless Service, an Indexed Job of
    /// --shards pods and the results volume.
    #[command(
        after_help = "Example:\n  quetta-bench k8s --shards 8 --container-image registry.example/quetta:0.1 --base-url http://vllm:8000 --request-rate 400 --duration 10m | kubectl apply -f -"
    )]
    K8s(Box<commands::K8sArgs>),
    /// Merge the run directories of a sharded run's shards into one run directory, exactly
    /// (the union of their records).
    #[command(
        after_help = "Example:\n  quetta-bench merge shard-0 shard-1 shard-2 --output-dir quetta-results/merged"
    )]
    Merge(commands::MergeArgs),
    /// Export a run's records as CSV or Parquet, or as the result JSON of vLLM's `bench serve`.
    #[command(after_help = "Example:\n  quetta-bench export quetta-results/run-A --format vllm")]
    Export(commands::ExportArgs),
    /// Numbers spelled in words; the model must answer the digits (llmperf's check).
    #[command(
        after_help = "Example:\n  quetta-bench correctness --base-url http://127.0.0.1:8000 --num-requests 20"
    )]
    Correctness(commands::CorrectnessArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    #[command(
        after_help = "Example:\n  quetta-bench completions bash > ~/.local/share/bash-completion/completions/quetta-bench"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// List the named workload profiles.
    #[command(after_help = "Example:\n  quetta-bench profiles")]
    Profiles {
        /// Also list the profiles of this TOML file.
        #[arg(long)]
        profile_file: Option<PathBuf>,
    },
    /// Show a run or sweep, rebuild the summary of a run that died without one, and write
    /// report.html and report.pdf.
    #[command(after_help = "Example:\n  quetta-bench report quetta-results/run-A")]
    Report {
        /// The run's (or sweep's) output directory.
        dir: PathBuf,
    },
    /// Workload tools.
    #[command(subcommand)]
    Workload(WorkloadCmd),
    /// List the protocols --backend takes: their names, vLLM's and AIPerf's, and paths.
    #[command(after_help = "Example:\n  quetta-bench protocols")]
    Protocols,
    /// What each protocol costs on one server: the same prompts through each generation
    /// protocol in turn, TTFT, TPOT and E2E beside the server's own timings.
    #[command(
        after_help = "Example:\n  quetta-bench protocol-cost --base-url http://127.0.0.1:8080 --rounds 20"
    )]
    ProtocolCost(protocols::CostArgs),
}

#[derive(Debug, Subcommand)]
enum WorkloadCmd {
    /// Fit input-length, output-length and inter-arrival distributions from a trace.
    #[command(
        after_help = "Example:\n  quetta-bench workload fit trace.jsonl --trace-format mooncake -o dist.json"
    )]
    Fit {
        /// The trace file.
        trace: PathBuf,
        /// Format of the trace.
        #[arg(long, value_enum, default_value = "mooncake")]
        trace_format: flags::TraceArg,
        /// Columns of a csv/jsonl trace (see `run --trace-columns`).
        #[arg(long, default_value = "")]
        trace_columns: String,
        /// Where to write the distribution (JSON).
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn main() -> ExitCode {
    quetta::engine::setting::name_settings(quetta_cli::flag_name);
    // `quetta-bench ... | head` closes stdout early: end quietly, as a shell tool would
    // (141 = 128 + SIGPIPE), instead of printing a panic.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied());
        if msg.unwrap_or("").contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let result = match Cli::parse().command {
        Command::Run(a) => commands::run(&a),
        Command::Sweep(a) => commands::sweep(*a),
        Command::Slo(a) => commands::slo(*a),
        Command::Compare(a) => commands::compare(&a),
        Command::Export(a) => commands::export(&a),
        Command::Merge(a) => commands::merge(&a),
        Command::K8s(a) => commands::k8s(&a),
        Command::Correctness(a) => commands::correctness(&a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "quetta-bench",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Profiles { profile_file } => commands::profiles(profile_file.as_deref()),
        Command::Report { dir } => commands::report(&dir),
        Command::Protocols => Ok(protocols::list()),
        Command::ProtocolCost(a) => protocols::cost(&a),
        Command::Workload(WorkloadCmd::Fit { trace, trace_format, trace_columns, output }) => {
            commands::fit(&trace, trace_format.format(), &trace_columns, &output)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

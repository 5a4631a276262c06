//! `quetta-bench`: a thin command line over Quetta's libraries (the `quetta` facade). Flags
//! are parsed here, turned into the library's specs in one conversion (`flags.rs`), and the
//! results printed; everything else is library code.

mod commands;
mod flags;

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

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark (against the embedded simulator when no --base-url is given).
    Run(Box<flags::RunArgs>),
    /// A run per concurrency or request rate, with a sweep table and sweep.json.
    Sweep(Box<commands::SweepArgs>),
    /// Find the highest request rate (or concurrency) meeting percentile objectives:
    /// `--slo ttft:p99<500ms,tpot:p99<40ms`.
    Slo(Box<commands::SloArgs>),
    /// Per-metric deltas of two runs with confidence intervals and significance tests.
    Compare(Box<commands::CompareArgs>),
    /// Export a run's records as CSV or Parquet, or as the result JSON of vLLM's `bench serve`.
    Export(commands::ExportArgs),
    /// Numbers spelled in words; the model must answer the digits (llmperf's check).
    Correctness(commands::CorrectnessArgs),
    /// List the named workload profiles.
    Profiles {
        /// Also list the profiles of this TOML file.
        #[arg(long)]
        profile_file: Option<PathBuf>,
    },
    /// Show a run or sweep, rebuild the summary of a run that died without one, and write
    /// report.html and report.pdf.
    Report {
        /// The run's (or sweep's) output directory.
        dir: PathBuf,
    },
    /// Workload tools.
    #[command(subcommand)]
    Workload(WorkloadCmd),
}

#[derive(Debug, Subcommand)]
enum WorkloadCmd {
    /// Fit input-length, output-length and inter-arrival distributions from a trace.
    Fit {
        /// The trace file.
        trace: PathBuf,
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
        Command::Correctness(a) => commands::correctness(&a),
        Command::Profiles { profile_file } => commands::profiles(profile_file.as_deref()),
        Command::Report { dir } => commands::report(&dir),
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

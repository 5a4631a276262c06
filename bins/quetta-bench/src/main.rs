//! `quetta-bench`: a thin command line over Quetta's libraries.

mod backends;
mod compare;
mod correctness;
mod report;
mod run;
mod sweep;
mod sysinfo;

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
    Run(Box<run::RunArgs>),
    /// A run per concurrency or request rate, with a sweep table and sweep.json.
    Sweep(Box<sweep::SweepArgs>),
    /// Find the highest request rate (or concurrency) meeting percentile objectives:
    /// `--slo ttft:p99<500ms,tpot:p99<40ms`.
    Slo(Box<sweep::SloArgs>),
    /// Per-metric deltas of two runs with confidence intervals and significance tests.
    Compare(Box<compare::CompareArgs>),
    /// Export a run's records as CSV or Parquet, or as the result JSON of vLLM's `bench serve`.
    Export(compare::ExportArgs),
    /// Numbers spelled in words; the model must answer the digits (llmperf's check).
    Correctness(correctness::CorrectnessArgs),
    /// List the named workload profiles.
    Profiles {
        /// Also list the profiles of this TOML file.
        #[arg(long)]
        profile_file: Option<std::path::PathBuf>,
    },
    /// Show a run's summary; rebuild it from requests.jsonl if the run died without one.
    Report {
        /// The run's output directory.
        dir: std::path::PathBuf,
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
        trace: std::path::PathBuf,
        #[arg(long, value_enum, default_value = "mooncake")]
        trace_format: run::TraceFormat,
        /// Columns of a csv/jsonl trace (see `run --trace-columns`).
        #[arg(long, default_value = "")]
        trace_columns: String,
        /// Where to write the distribution (JSON).
        #[arg(short, long)]
        output: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    // `quetta-bench ... | head` closes stdout early: end quietly, as a shell tool would
    // (141 = 128 + SIGPIPE), instead of printing a panic.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info);
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Sweep(args) => sweep::sweep(*args),
        Command::Compare(args) => compare::compare(*args),
        Command::Export(args) => compare::export(args),
        Command::Correctness(args) => correctness::main(args),
        Command::Slo(args) => sweep::slo(*args),
        Command::Workload(WorkloadCmd::Fit { trace, trace_format, trace_columns, output }) => {
            run::fit(&trace, trace_format, &trace_columns, &output)
        }
        Command::Report { dir } => report::main(&dir),
        Command::Profiles { profile_file } => {
            println!(
                "{:<24}{:>8}{:>8}  {:<62}{:<52}mode",
                "profile", "ISL", "OSL", "dataset", "arrival"
            );
            for p in quetta_workload::profiles::builtin() {
                println!(
                    "{:<24}{:>8}{:>8}  {:<62}{:<52}{}",
                    p.name,
                    p.input_len,
                    p.output_len,
                    p.dataset(),
                    p.arrival(),
                    if p.source == quetta_workload::profiles::Source::Synthetic {
                        "single-turn"
                    } else if p.is_multiturn() {
                        "multi-turn"
                    } else {
                        "trace replay"
                    }
                );
            }
            if let Some(f) = profile_file {
                match quetta_workload::profiles::load_file(&f) {
                    Ok(user) => {
                        for p in user {
                            let src =
                                p.trace.as_deref().or(p.dataset.as_deref()).unwrap_or("synthetic");
                            let load = match (p.request_rate, p.concurrency) {
                                (Some(r), _) => format!(
                                    "{r} req/s {}",
                                    p.arrival.as_deref().unwrap_or("poisson")
                                ),
                                (None, Some(c)) => format!("concurrency {c}"),
                                _ => "as given".into(),
                            };
                            println!(
                                "{:<24}{:>8}{:>8}  {:<48}{:<44}user ({})",
                                p.name,
                                p.input_len.map_or("-".into(), |v| v.to_string()),
                                p.output_len.map_or("-".into(), |v| v.to_string()),
                                src,
                                load,
                                f.display()
                            );
                        }
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
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

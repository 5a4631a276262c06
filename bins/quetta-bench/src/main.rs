//! `quetta-bench`: a thin command line over Quetta's libraries.

mod run;
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
    /// List the named workload profiles.
    Profiles,
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
        /// Where to write the distribution (JSON).
        #[arg(short, long)]
        output: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Workload(WorkloadCmd::Fit { trace, trace_format, output }) => {
            run::fit(&trace, trace_format, &output)
        }
        Command::Profiles => {
            println!(
                "{:<24}{:>8}{:>8}  {:<48}{:<44}mode",
                "profile", "ISL", "OSL", "dataset", "arrival"
            );
            for p in quetta_workload::profiles::builtin() {
                println!(
                    "{:<24}{:>8}{:>8}  {:<48}{:<44}{}",
                    p.name,
                    p.input_len,
                    p.output_len,
                    p.dataset(),
                    p.arrival(),
                    if p.source == quetta_workload::profiles::Source::Synthetic {
                        "single-turn"
                    } else {
                        "trace replay"
                    }
                );
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

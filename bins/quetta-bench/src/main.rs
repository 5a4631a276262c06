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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::main(*args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

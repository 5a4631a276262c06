//! `quetta-cli`: the command line that Quetta's binaries share: the flags of `run` (which
//! `sweep`, `slo` and `quetta-sim predict` take too), their value parsers, and their one
//! conversion to a [`quetta::Benchmark`]. It is the binaries' code (clap, anyhow), kept in
//! one package so that no binary compiles another's source; embedders use `quetta`.

mod args;
mod convert;
mod values;

pub use args::{ManagedArgs, RunArgs};
pub use values::*;

//! Helpers of the command-line tests: the binary, temporary directories, output, JSON and
//! schema checks.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quetta-bench"))
}

/// A fresh directory path of this test process (removed if it exists, not created).
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `quetta-bench ARGS`, without an API key from the environment.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).env_remove("OPENAI_API_KEY").output().expect("run quetta-bench")
}

/// Its stdout then its stderr.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

pub fn json(path: &Path) -> serde_json::Value {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&s).unwrap()
}

/// `v` against the JSON Schema `schema`; panics with every violation.
pub fn valid(schema: &str, v: &serde_json::Value) {
    let s: serde_json::Value = serde_json::from_str(schema).unwrap();
    let errors: Vec<String> = jsonschema::validator_for(&s)
        .unwrap()
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

pub const SUMMARY_SCHEMA: &str = include_str!("../../../../docs/schema/summary.schema.json");

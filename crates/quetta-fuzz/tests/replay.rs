//! Every fuzz target over every input of its corpus (`fuzz/corpus/NAME`) and every
//! reproducer of a crash once found (`fuzz/reproducers/NAME`), with overflow checks on as
//! in every test build: no fuzzing, only replay, so a fixed crash stays fixed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> =
        rd.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

#[test]
fn every_corpus_and_reproducer_replays_without_a_panic() {
    let mut failed = Vec::new();
    let mut counts = Vec::new();
    for (name, target) in quetta_fuzz::TARGETS {
        let corpus = files(&fuzz_dir().join("corpus").join(name));
        let repro = files(&fuzz_dir().join("reproducers").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} is empty: seed it (cargo xtask fuzz)");
        for f in corpus.iter().chain(&repro) {
            let data = std::fs::read(f).unwrap();
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                failed.push(f.display().to_string());
            }
        }
        counts.push(format!("{name} {}+{}", corpus.len(), repro.len()));
    }
    eprintln!("replayed (corpus+reproducers): {}", counts.join(", "));
    assert!(failed.is_empty(), "inputs that panic: {failed:#?}");
}

/// Every fuzz target in `fuzz/Cargo.toml` is one of the library's, and every library target
/// has its binary there: the two lists cannot drift apart.
#[test]
fn the_cargo_fuzz_crate_lists_every_target() {
    let toml = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let bins: Vec<&str> = toml
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "quetta-fuzz-targets")
        .collect();
    let mut want: Vec<&str> = quetta_fuzz::TARGETS.iter().map(|t| t.0).collect();
    let mut got = bins.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    for n in bins {
        let src = std::fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{n}.rs"))).unwrap();
        assert!(
            src.contains(&format!("quetta_fuzz::{n}(")),
            "fuzz_targets/{n}.rs does not call quetta_fuzz::{n}"
        );
    }
}

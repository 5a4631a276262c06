//! What the twin's tests against the real llama.cpp server share: the tokenizer, the
//! calibration with short options, the checks of what it found, and the recheck.

use quetta::sim::model::{ServerModel, WhatIf};
use quetta::Twin;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The server's URL (`None`: not configured, outside CI) and a fresh directory named
/// `name` for the test's files; pins this process off the server's CPU, so that the
/// calibration, the client and the in-process live twin do not slow the server.
pub fn setup(name: &str) -> Option<(String, PathBuf)> {
    let url = quetta_testkit::llama_url()?;
    let server_cpu = quetta_testkit::keep_off_llama_cpu();
    eprintln!("llama.cpp server pinned to CPU {server_cpu:?}");
    let d = std::env::temp_dir().join(format!("quetta-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    Some((url, d))
}

pub fn tokenizer() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/tokenizers/smollm2/tokenizer.json").into()
}

fn output_text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `quetta-probe calibrate` with short options: prompts of `prefill_lengths` words, decode
/// contexts of 32 and 256 words, 48 decode tokens, three repeats, written to `model_path`.
/// A calibration this noisy server refuses (a fit under R² 0.9: in CI once the decode fit of
/// the short options, locally once the prefill fit, on a machine whose own 200-word prefill
/// varied 5.0–6.6 s) is tried again, three times in all. Returns its output.
pub fn calibrate(url: &str, d: &Path, model_path: &Path, prefill_lengths: &str) -> String {
    let once = || {
        let o = Command::new(env!("CARGO_BIN_EXE_quetta-probe"))
            .args(["calibrate", "--base-url", url])
            .args(["--prefill-lengths", prefill_lengths, "--decode-contexts", "32,256"])
            .args(["--decode-tokens", "48", "--repeats", "3", "--seqs-probe", "8", "--output-dir"])
            .arg(d)
            .arg("-o")
            .arg(model_path)
            .output()
            .unwrap();
        (o.status.success(), output_text(&o))
    };
    let (mut ok, mut t) = once();
    for _ in 0..2 {
        if ok {
            break;
        }
        eprintln!("calibration refused, once more:\n{t}");
        assert!(t.contains("no model written"), "{t}");
        (ok, t) = once();
    }
    assert!(ok, "{t}");
    eprintln!("{t}");
    let model = Twin::load(model_path, WhatIf::default(), Some(&tokenizer())).unwrap().model;
    assert_eq!(model.max_seqs, 4, "llama.cpp runs 4 slots\n{t}");
    assert_eq!(
        model.step.decode_by_seqs.iter().map(|r| r.seqs).collect::<Vec<_>>(),
        [1, 2, 3, 4],
        "every batch size up to the slots measured\n{t}"
    );
    assert!(
        (20..=40).contains(&model.prompt_extra_tokens),
        "SmolLM2's chat template adds 30 tokens: {}\n{t}",
        model.prompt_extra_tokens
    );
    // of which the default system prompt (24 tokens) comes from a slot's previous request
    assert!(
        (16..=model.prompt_extra_tokens).contains(&model.template_cached_tokens),
        "llama.cpp reuses its template's system prompt: {} cached\n{t}",
        model.template_cached_tokens
    );
    t
}

/// `quetta-probe recheck` of the calibration now, as a user runs it before a what-if: six
/// lone requests of 64 and 256 words, decoding as many tokens as the calibration's decode
/// probe (48; with 32 the decode factor read 5–10 % slow and a closed loop of 1's TPOT came
/// out +5 to +11 %), the model rescaled to the server's present prefill and decode speed,
/// written to `out`.
pub fn recheck(url: &str, model: &Path, out: &Path) -> ServerModel {
    let o = Command::new(env!("CARGO_BIN_EXE_quetta-probe"))
        .args(["recheck", "--base-url", url, "--server-model"])
        .arg(model)
        .args(["--prompt-words", "64,256", "--output-dir"])
        .arg(out.with_extension("d"))
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let t = output_text(&o);
    assert!(o.status.success(), "{t}");
    eprintln!("{t}");
    let m = Twin::load(out, WhatIf::default(), Some(&tokenizer())).unwrap().model;
    assert!(m.rechecked.is_some(), "a rechecked model says so\n{t}");
    assert!(!t.contains("decode probe"), "the recheck decodes as the calibration did\n{t}");
    m
}

//! vLLM's `bench serve` command lines for each of its backends beyond chat and completions,
//! run unchanged against the embedded simulator (which serves every protocol strictly), and
//! AIPerf's endpoint types: what each run measured, and vLLM's result file.

use crate::common::{bin, json, text, tmpdir, valid, SUMMARY_SCHEMA};

const VLLM_SCHEMA: &str = include_str!("../../../../docs/schema/vllm_result.schema.json");

/// `vllm bench serve ARGS` with `quetta-bench run` for `vllm bench serve`, in a fresh
/// directory: its summary and its vLLM result file.
fn vllm(name: &str, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let dir = tmpdir(&format!("vllm-{name}"));
    let results = dir.join("D");
    std::fs::create_dir_all(&dir).unwrap();
    let mut a = vec!["run", "--model", "M"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--save-result", "--result-dir", results.to_str().unwrap()]);
    let o = bin().args(&a).current_dir(&dir).env_remove("OPENAI_API_KEY").output().unwrap();
    assert!(o.status.success(), "{a:?}: {}", text(&o));
    let runs: Vec<_> =
        std::fs::read_dir(dir.join("quetta-results")).unwrap().map(|e| e.unwrap().path()).collect();
    let s = json(&runs[0].join("summary.json"));
    valid(SUMMARY_SCHEMA, &s);
    let files: Vec<_> = std::fs::read_dir(&results).unwrap().map(|e| e.unwrap().path()).collect();
    let v = json(&files[0]);
    valid(VLLM_SCHEMA, &v);
    let _ = std::fs::remove_dir_all(&dir);
    (s, v)
}

#[test]
fn vllm_openai_responses() {
    let (s, v) = vllm(
        "responses",
        &[
            "--backend",
            "openai-responses",
            "--endpoint",
            "/v1/responses",
            "--dataset-name",
            "random",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
            "--num-prompts",
            "20",
            "--max-concurrency",
            "4",
        ],
    );
    assert_eq!(
        (s["completed"].as_u64(), s["target"]["backend"].as_str()),
        (Some(20), Some("openai-responses"))
    );
    assert_eq!(
        (s["config"]["endpoint"].as_str(), s["total_output_tokens"].as_u64()),
        (Some("responses"), Some(160))
    );
    assert_eq!(
        (v["backend"].as_str(), v["completed"].as_u64()),
        (Some("openai-responses"), Some(20))
    );
}

/// An embeddings backend: vLLM's --num-prompts counts inputs, --random-batch-size of them to
/// a request; no TTFT.
fn embeddings(backend: &str, endpoint: &str, batch: u64) {
    let b = batch.to_string();
    let (s, v) = vllm(
        backend,
        &[
            "--backend",
            backend,
            "--endpoint",
            endpoint,
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--num-prompts",
            "40",
            "--random-batch-size",
            &b,
            "--max-concurrency",
            "4",
        ],
    );
    let requests = 40 / batch;
    assert_eq!(
        (s["completed"].as_u64(), s["total_inputs"].as_u64()),
        (Some(requests), Some(40)),
        "{backend}"
    );
    assert_eq!(
        (s["target"]["kind"].as_str(), s["ttft_ms"]["count"].as_u64()),
        (Some("embed"), Some(0)),
        "{backend}"
    );
    assert_eq!(s["per_input_ms"]["count"].as_u64(), Some(requests), "{backend}");
    assert_eq!(
        (v["total_input_sequences"].as_u64(), v["backend"].as_str()),
        (Some(40), Some(backend))
    );
}

#[test]
fn vllm_openai_embeddings() {
    embeddings("openai-embeddings", "/v1/embeddings", 4);
}

#[test]
fn vllm_openai_embeddings_chat() {
    embeddings("openai-embeddings-chat", "/v1/embeddings", 1);
}

#[test]
fn vllm_openai_embeddings_clip() {
    embeddings("openai-embeddings-clip", "/v1/embeddings", 1);
}

#[test]
fn vllm_openai_embeddings_vlm2vec() {
    embeddings("openai-embeddings-vlm2vec", "/v1/embeddings", 1);
}

#[test]
fn vllm_infinity_embeddings() {
    embeddings("infinity-embeddings", "/embeddings", 8);
}

#[test]
fn vllm_infinity_embeddings_clip() {
    embeddings("infinity-embeddings-clip", "/embeddings", 2);
}

#[test]
fn vllm_pooling() {
    embeddings("vllm-pooling", "/pooling", 4);
}

#[test]
fn vllm_rerank() {
    let (s, v) = vllm(
        "rerank",
        &[
            "--backend",
            "vllm-rerank",
            "--endpoint",
            "/v1/rerank",
            "--dataset-name",
            "random-rerank",
            "--random-input-len",
            "16",
            "--num-prompts",
            "50",
            "--random-batch-size",
            "5",
            "--max-concurrency",
            "4",
        ],
    );
    assert_eq!((s["completed"].as_u64(), s["total_inputs"].as_u64()), (Some(10), Some(50)));
    assert_eq!(s["target"]["kind"], "rank");
    assert_eq!(v["total_input_sequences"].as_u64(), Some(50));
}

#[test]
fn aiperf_endpoint_types_name_the_protocols() {
    for (ty, backend) in [
        ("chat", "openai-chat"),
        ("completions", "openai-completions"),
        ("responses", "openai-responses"),
        ("messages", "anthropic"),
        ("embeddings", "openai-embeddings"),
        ("chat_embeddings", "openai-embeddings-chat"),
        ("rankings", "vllm-rerank"),
        ("hf_tei_rankings", "tei-rerank"),
        ("huggingface_generate", "tgi-generate"),
    ] {
        let dir = tmpdir(&format!("aiperf-{ty}"));
        let o = bin()
            .args(["run", "--endpoint-type", ty, "--num-requests", "4", "--json", "--output-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{ty}: {}", text(&o));
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (s["target"]["backend"].as_str(), s["completed"].as_u64()),
            (Some(backend), Some(4)),
            "{ty}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    // an unknown name is refused, naming the ones there are
    let o = bin().args(["run", "--endpoint-type", "nonesuch"]).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("rankings"), "{}", text(&o));
}

#[test]
fn the_protocols_are_listed_by_every_name_they_take() {
    let o = bin().arg("protocols").output().unwrap();
    let t = text(&o);
    for n in [
        "openai-responses",
        "anthropic",
        "llamacpp",
        "tgi-generate",
        "sglang-generate",
        "tensorrt-llm",
        "openai-embeddings-vlm2vec",
        "infinity-embeddings-clip",
        "vllm-pooling",
        "vllm-rerank",
        "hf_tei_rankings",
    ] {
        assert!(t.contains(n), "{n} missing:\n{t}");
    }
}

#[test]
fn vllm_openai_audio_with_local_recordings() {
    // vLLM reads its recordings from a Hugging Face dataset; Quetta from files (--audio)
    let audio = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/audio");
    let (s, v) = vllm(
        "audio",
        &[
            "--backend",
            "openai-audio",
            "--endpoint",
            "/v1/audio/transcriptions",
            "--audio",
            audio.to_str().unwrap(),
            "--num-prompts",
            "9",
            "--max-concurrency",
            "3",
        ],
    );
    assert_eq!(
        (s["completed"].as_u64(), s["target"]["kind"].as_str()),
        (Some(9), Some("transcribe"))
    );
    // each of the three recordings three times: 3 × (3.083 + 2.835 + 1.088) s
    let audio_s = s["total_audio_s"].as_f64().unwrap();
    assert!((audio_s - 21.018).abs() < 0.01, "{audio_s}");
    assert!(v["rtfx"].as_f64().unwrap() > 0.0);
    assert!(
        s.get("osl_hit_rate").is_none_or(serde_json::Value::is_null),
        "a transcription has no planned length"
    );
}

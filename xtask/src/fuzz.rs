//! `cargo xtask fuzz [--minutes N] [--jobs J] [TARGET ...]`: seed every corpus from the
//! fixtures, build the targets of `fuzz/` with cargo-fuzz (debug assertions and overflow
//! checks on), run each for N minutes (J at a time), cut its corpus to what is kept in git
//! (the seeds and the [`KEEP`] inputs covering the most edges), and print a table of target,
//! minutes, executions, coverage and crashes (also written to target/xtask/fuzz.md).
//! `cargo xtask fuzz --seed` only seeds; `cargo xtask fuzz --cut` only builds and cuts. The
//! corpora are replayed without fuzzing by `cargo test -p quetta-fuzz`, which CI runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::root;

/// The targets of `fuzz/Cargo.toml`, in the order they run.
const TARGETS: &[&str] = &[
    "sse",
    "chunk",
    "sagemaker",
    "gemini",
    "models",
    "traces",
    "datasets",
    "sessions",
    "synth",
    "prometheus",
    "kernels",
    "records",
    "vllm_result",
    "responses",
    "messages",
    "native",
    "pooling",
    "transcription",
    "kserve",
    "bedrock",
];

struct Opts {
    minutes: f64,
    jobs: usize,
    targets: Vec<String>,
    seed_only: bool,
    cut_only: bool,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o =
        Opts { minutes: 10.0, jobs: 2, targets: Vec::new(), seed_only: false, cut_only: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--minutes" => o.minutes = it.next().context("--minutes N")?.parse()?,
            "--jobs" => o.jobs = it.next().context("--jobs J")?.parse()?,
            "--seed" => o.seed_only = true,
            "--cut" => o.cut_only = true,
            t if TARGETS.contains(&t) => o.targets.push(t.to_owned()),
            other => bail!("unknown argument {other:?}; targets: {}", TARGETS.join(", ")),
        }
    }
    if o.targets.is_empty() {
        o.targets = TARGETS.iter().map(|t| (*t).to_owned()).collect();
    }
    o.jobs = o.jobs.max(1);
    Ok(o)
}

pub fn main(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let dir = root().join("fuzz");
    let n = seed(&root())?;
    println!("seeded the corpora from fixtures/ ({n} seed files)");
    if o.seed_only {
        return Ok(());
    }
    if Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        bail!("cargo-fuzz is not installed: cargo install cargo-fuzz --locked");
    }
    let st = fuzz_cmd(&dir)
        .args(["build", "--debug-assertions"])
        .status()
        .context("cargo fuzz build")?;
    if !st.success() {
        bail!("cargo fuzz build failed");
    }
    let logs = root().join("target/xtask/fuzz");
    std::fs::create_dir_all(&logs)?;
    if o.cut_only {
        return cut_all(&dir, &o.targets);
    }
    let mut rows = Vec::new();
    for batch in o.targets.chunks(o.jobs) {
        let runs: Vec<(String, Child, usize, Instant)> = batch
            .iter()
            .map(|t| {
                let before = crashes(&dir, t);
                let log = std::fs::File::create(logs.join(format!("{t}.log")))?;
                let child =
                    run_cmd(&dir, t, o.minutes).stderr(log).stdout(Stdio::null()).spawn()?;
                Ok((t.clone(), child, before, Instant::now()))
            })
            .collect::<Result<_>>()?;
        for (t, mut child, before, t0) in runs {
            let ok = child.wait()?.success();
            let secs = t0.elapsed().as_secs_f64();
            let log = std::fs::read_to_string(logs.join(format!("{t}.log"))).unwrap_or_default();
            let mut row = stats(&t, &log, secs);
            row.crashes = crashes(&dir, &t).saturating_sub(before);
            if !ok && row.crashes == 0 {
                row.crashes = 1;
            }
            eprintln!("{}", row.line());
            rows.push(row);
        }
    }
    cut_all(&dir, &o.targets)?;
    let table = table(&rows);
    println!("{table}");
    std::fs::write(root().join("target/xtask/fuzz.md"), &table)?;
    if rows.iter().any(|r| r.crashes > 0) {
        bail!("a target crashed: see fuzz/artifacts/ and target/xtask/fuzz/*.log");
    }
    Ok(())
}

/// How many inputs besides the seeds a corpus keeps in git.
const KEEP: usize = 100;

fn cut_all(dir: &Path, targets: &[String]) -> Result<()> {
    for t in targets {
        let (kept, covered, all) = cut(dir, t, KEEP)?;
        println!("{t}: kept {kept} inputs besides the seeds, covering {covered} of {all} edges");
    }
    Ok(())
}

/// Cuts a target's corpus to its seeds and the `keep` inputs that cover the most edges: a
/// greedy set cover over libFuzzer's per-input edge coverage (`-merge=1 -use_counters=0
/// -merge_control_file`). Returns (inputs kept, edges they cover, edges of the corpus).
fn cut(dir: &Path, target: &str, keep: usize) -> Result<(usize, usize, usize)> {
    let bin = dir.join("target/x86_64-unknown-linux-gnu/release").join(target);
    let corpus = dir.join("corpus").join(target);
    let work = root().join("target/xtask/fuzz-cut").join(target);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("empty"))?;
    let control = work.join("control");
    let st = Command::new(&bin)
        .args(["-merge=1", "-use_counters=0", "-rss_limit_mb=4096"])
        .arg(format!("-merge_control_file={}", control.display()))
        .arg(work.join("empty"))
        .arg(&corpus)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("{}", bin.display()))?;
    if !st.success() {
        bail!("{target}: the coverage merge failed; its corpus is left as it is");
    }
    let text = std::fs::read_to_string(&control)?;
    let (files, mut cover) = parse_control(&text)?;
    let all: std::collections::HashSet<u32> = cover.values().flatten().copied().collect();
    let size = |i: usize| std::fs::metadata(&files[i]).map_or(u64::MAX, |m| m.len());
    let is_seed =
        |p: &Path| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-"));
    let (mut chosen, mut have) =
        (std::collections::HashSet::new(), std::collections::HashSet::new());
    // the seeds are kept whatever they cover: the cover starts from their edges
    for i in (0..files.len()).filter(|i| is_seed(&files[*i])) {
        have.extend(cover.remove(&i).unwrap_or_default());
    }
    while chosen.len() < keep {
        let best = cover
            .iter()
            .map(|(i, c)| {
                (c.iter().filter(|e| !have.contains(*e)).count(), std::cmp::Reverse(size(*i)), *i)
            })
            .max();
        let Some((_, _, i)) = best.filter(|b| b.0 > 0) else { break };
        have.extend(cover.remove(&i).unwrap_or_default());
        chosen.insert(files[i].clone());
    }
    for e in std::fs::read_dir(&corpus)? {
        let p = e?.path();
        if !is_seed(&p) && !chosen.contains(&p) {
            std::fs::remove_file(&p)?;
        }
    }
    Ok((chosen.len(), have.len(), all.len()))
}

/// Each input's edges, by its index in the control file.
type Cover = std::collections::HashMap<usize, Vec<u32>>;

/// A merge control file: the input files, then `COV i edge...` lines of each input.
fn parse_control(text: &str) -> Result<(Vec<PathBuf>, Cover)> {
    let mut lines = text.lines();
    let n: usize = lines.next().context("empty control file")?.trim().parse()?;
    lines.next();
    let files: Vec<PathBuf> = lines.by_ref().take(n).map(PathBuf::from).collect();
    let mut cover = std::collections::HashMap::new();
    for l in lines {
        let mut f = l.split_whitespace();
        if f.next() == Some("COV") {
            let i: usize = f.next().context("COV without an index")?.parse()?;
            cover.insert(i, f.map(str::parse).collect::<Result<Vec<u32>, _>>()?);
        }
    }
    Ok((files, cover))
}

fn fuzz_cmd(dir: &Path) -> Command {
    let mut c = Command::new("cargo");
    // cargo-fuzz needs nightly flags (-Zsanitizer); the stable toolchain takes them so.
    c.current_dir(dir).env("RUSTC_BOOTSTRAP", "1").arg("fuzz");
    c
}

fn run_cmd(dir: &Path, target: &str, minutes: f64) -> Command {
    let mut c = fuzz_cmd(dir);
    c.args(["run", "--debug-assertions", target, "--"]);
    c.arg(format!("-max_total_time={}", (minutes * 60.0).round() as u64));
    c.args(["-print_final_stats=1", "-rss_limit_mb=2048", "-malloc_limit_mb=2048", "-timeout=10"]);
    let dict = dir.join("dicts").join(format!("{target}.dict"));
    if dict.is_file() {
        c.arg(format!("-dict={}", dict.display()));
    }
    c
}

/// Files libFuzzer left for a target: crash-, leak-, oom-, timeout- and slow-unit- inputs.
fn crashes(dir: &Path, target: &str) -> usize {
    std::fs::read_dir(dir.join("artifacts").join(target)).map_or(0, |rd| {
        rd.filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with("slow-unit-"))
            .count()
    })
}

struct Row {
    target: String,
    minutes: f64,
    execs: u64,
    cov: u64,
    features: u64,
    corpus: u64,
    crashes: usize,
}

impl Row {
    fn line(&self) -> String {
        format!(
            "| {} | {:.1} | {} | {} | {} | {} | {} |",
            self.target,
            self.minutes,
            self.execs,
            self.cov,
            self.features,
            self.corpus,
            self.crashes
        )
    }
}

/// The figures of a libFuzzer log: executions from its final stats, coverage (edges),
/// features and corpus size from its last status line.
fn stats(target: &str, log: &str, secs: f64) -> Row {
    let mut r = Row {
        target: target.to_owned(),
        minutes: secs / 60.0,
        execs: 0,
        cov: 0,
        features: 0,
        corpus: 0,
        crashes: 0,
    };
    let field = |l: &str, key: &str| -> Option<u64> {
        let rest = &l[l.find(key)? + key.len()..];
        rest.trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    for l in log.lines() {
        if let Some(v) = l.strip_prefix("stat::number_of_executed_units:") {
            r.execs = v.trim().parse().unwrap_or(0);
        }
        if l.starts_with('#') && l.contains("cov:") {
            r.cov = field(l, "cov:").unwrap_or(r.cov);
            r.features = field(l, "ft:").unwrap_or(r.features);
            r.corpus = field(l, "corp:").unwrap_or(r.corpus);
        }
    }
    r
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| target | minutes | executions | coverage (edges) | features | corpus | crashes |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(t, "{}", r.line());
    }
    t
}

/// Writes `seed-*` inputs into every corpus from the fixtures (small pieces, under 4 KiB,
/// so libFuzzer's default length limit keeps them whole). Returns how many were written.
pub fn seed(root: &Path) -> Result<usize> {
    let fx = root.join("fixtures");
    let corpus = root.join("fuzz/corpus");
    let mut n = 0;
    let mut put = |target: &str, name: &str, data: &[u8]| -> Result<()> {
        let d = corpus.join(target);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join(format!("seed-{name}")), data)?;
        n += 1;
        Ok(())
    };
    // SSE bodies (after the response head of the llama.cpp captures), their data lines.
    for f in sse_fixtures(&fx)? {
        let body = sse_body(&std::fs::read(&f)?);
        let body = head(&body, 3500);
        let name = f.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        put("sse", &name, &[&[4u8][..], body].concat())?;
        for (k, l) in body
            .split(|&b| b == b'\n')
            .filter_map(|l| l.strip_prefix(b"data: "))
            .take(4)
            .enumerate()
        {
            put("chunk", &format!("{name}-{k}"), l.trim_ascii_end())?;
        }
        // The same stream as SageMaker sends it: payload parts cut at arbitrary points.
        let parts: Vec<Vec<u8>> =
            body.chunks(37).take(12).map(|p| event_frame("event", "PayloadPart", p)).collect();
        put("sagemaker", &format!("{name}-eventstream"), &[vec![3u8], parts.concat()].concat())?;
    }
    let jl = b"{\"token\":{\"text\":\"Hel\",\"special\":false}}\n\ndata:{\"token\":{\"text\":\"lo\"}}\n{\"token\":{\"text\":\"</s>\",\"special\":true},\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":3}}\n";
    put("sagemaker", "jsonlines", &[&[5u8][..], jl].concat())?;
    let framed: Vec<u8> =
        jl.chunks(20).flat_map(|p| event_frame("event", "PayloadPart", p)).collect();
    put("sagemaker", "jsonlines-eventstream", &[vec![9u8], framed].concat())?;
    let exc = event_frame(
        "exception",
        "ModelStreamError",
        br#"{"Message":"CUDA out of memory","ErrorCode":"424"}"#,
    );
    put(
        "sagemaker",
        "exception",
        &[
            vec![1u8],
            event_frame(
                "event",
                "PayloadPart",
                b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            ),
            exc,
        ]
        .concat(),
    )?;
    // Gemini: a streamed answer as the simulator's provider fake sends it, and errors.
    let g = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hi\"}]}}]}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\" there\",\"thought\":true}]},\"finishReason\":\"MAX_TOKENS\"}],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":2,\"thoughtsTokenCount\":5,\"totalTokenCount\":19}}\r\n\r\n";
    put("gemini", "stream", &[b"\x02", g.as_bytes()].concat())?;
    put("gemini", "error", b"\x00{\"error\":{\"code\":429,\"message\":\"Resource has been exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}")?;
    put(
        "gemini",
        "error-list",
        b"\x00[{\"error\":{\"code\":65965,\"message\":\"x\",\"status\":\"INTERNAL\"}}]",
    )?;
    put("models", "llama", br#"{"models":[{"name":"SmolLM2","model":"SmolLM2"}],"object":"list","data":[{"id":"SmolLM2-135M-Instruct","object":"model","created":1764633600,"owned_by":"llamacpp","meta":{"n_ctx_train":8192,"n_params":134515008}}]}"#)?;
    put("models", "vllm", br#"{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1764633600,"owned_by":"vllm","root":"Qwen/Qwen3-8B","max_model_len":32768}]}"#)?;
    // The other protocols' answers, captured from llama.cpp (fixtures/sse/protocols).
    let proto = fx.join("sse/protocols");
    let read = |f: &str| std::fs::read(proto.join(f));
    put("responses", "llama-stream", &[&[6u8][..], &read("responses.sse")?].concat())?;
    put("responses", "llama-whole", &[&[0u8][..], &read("responses-whole.json")?].concat())?;
    put("messages", "llama-stream", &[&[5u8][..], &read("messages.sse")?].concat())?;
    put("messages", "llama-no-start", &[&[2u8][..], &read("messages-no-start.sse")?].concat())?;
    put("messages", "llama-whole", &[&[0u8][..], &read("messages-whole.json")?].concat())?;
    // native: the first byte's top bits pick llama.cpp (0), TGI (32), SGLang (64), Triton (96)
    put("native", "llama-completion", &[&[3u8][..], &read("completion.sse")?].concat())?;
    put("native", "tgi", b"\x21data:{\"index\":1,\"token\":{\"id\":5,\"text\":\" a\",\"special\":false},\"generated_text\":null,\"details\":null}\n\ndata:{\"index\":2,\"token\":{\"id\":2,\"text\":\"</s>\",\"special\":true},\"generated_text\":\" a\",\"details\":{\"finish_reason\":\"eos_token\",\"generated_tokens\":2,\"input_length\":7}}\n\n")?;
    put("native", "sglang", b"\x42data: {\"text\":\" The\",\"meta_info\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"finish_reason\":null}}\n\ndata: {\"text\":\" The cat\",\"meta_info\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"cached_tokens\":3,\"finish_reason\":{\"type\":\"length\",\"length\":2}}}\n\ndata: [DONE]\n\n")?;
    put("native", "triton", b"\x63data: {\"model_name\":\"ensemble\",\"text_output\":\" a\"}\n\ndata: {\"error\":\"model not ready\"}\n\n")?;
    put("pooling", "llama-embeddings", &[&[16u8][..], &read("embeddings.json")?].concat())?;
    put("pooling", "llama-rerank", &[&[18u8][..], &read("rerank.json")?].concat())?;
    put("pooling", "tei", b"\x13[{\"index\":0,\"score\":0.9},{\"index\":1,\"score\":0.2}]")?;
    put("transcription", "vllm", b"\x04data: {\"id\":\"t\",\"object\":\"transcription.chunk\",\"choices\":[{\"delta\":{\"content\":\" Hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":54,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")?;
    put("transcription", "openai", b"\x07event: transcript.text.delta\ndata: {\"type\":\"transcript.text.delta\",\"delta\":\"Hello\"}\n\nevent: transcript.text.done\ndata: {\"type\":\"transcript.text.done\",\"text\":\"Hello\",\"usage\":{\"type\":\"tokens\",\"input_tokens\":22,\"output_tokens\":1}}\n\n")?;
    // KServe gRPC answers written with tritonclient's generated messages (fixtures/grpc);
    // the first byte is the split stride
    let grpc = fx.join("grpc");
    for f in ["kserve-stream", "kserve-error", "kserve-unary", "kserve-unary-contents"] {
        let body = std::fs::read(grpc.join(format!("{f}.bin")))?;
        put("kserve", f, &[&[7u8][..], &body].concat())?;
    }
    seed_bedrock(&mut put)?;
    // Files: the first lines of each trace and dataset, small session files, TOML.
    for (f, lines) in [
        ("traces/mooncake_fast25_conversation_trace.jsonl", 6),
        ("traces/azure_llm_inference_2023_conv.csv", 30),
    ] {
        let name = Path::new(f).file_stem().unwrap_or_default().to_string_lossy().into_owned();
        put("traces", &name, &first_lines(&fx.join(f), lines)?)?;
    }
    put("traces", "burstgpt", b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,230,1317,API log\n")?;
    put(
        "datasets",
        "mt-bench",
        &first_lines(&fx.join("conversations/mt_bench_questions_80.jsonl"), 3)?,
    )?;
    put(
        "sessions",
        "mt-bench",
        &first_lines(&fx.join("conversations/mt_bench_questions_80.jsonl"), 3)?,
    )?;
    let sg = small_sharegpt(&fx.join("conversations/sharegpt_multiturn_5_dialogstudio.json"))?;
    put("sessions", "sharegpt", sg.as_bytes())?;
    put("datasets", "sharegpt", sg.as_bytes())?;
    put("sessions", "timed", br#"[{"id":"a","start_ms":1500,"conversations":[{"from":"human","value":"hi","think_time_ms":250},{"from":"gpt","value":"hello"}]}]"#)?;
    put("synth", "full", b"turns = { dist = \"uniform\", min = 2, max = 8 }\nsystem_prompt_tokens = 500\nnew_prompt_tokens = { dist = \"lognormal\", mean = 300, stddev = 120 }\noutput_tokens = { dist = \"normal\", mean = 200, stddev = 40 }\nthink_time_ms = { dist = \"exponential\", mean = 1500 }\n")?;
    put("synth", "fixed", b"turns = { dist = \"fixed\", value = 3 }\nnew_prompt_tokens = { dist = \"fixed\", value = 40 }\noutput_tokens = { dist = \"fixed\", value = 10 }\n")?;
    for f in ["prometheus/llamacpp_b11434.txt", "prometheus/vllm_style.txt"] {
        let name = Path::new(f).file_stem().unwrap_or_default().to_string_lossy().into_owned();
        put("prometheus", &name, &std::fs::read(fx.join(f))?)?;
    }
    put("kernels", "gemm", b"\x05name,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,block_y,block_z,stream,correlation\nampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn,1000,51000,108,1,1,128,1,1,7,1\n\"void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false>>(Flash_fwd_params)\",52000,90000,32,16,1,128,1,1,7,2\nrms_norm_kernel,3000000,3004000,1,1,1,1024,1,1,7,3\n")?;
    // Records of real runs against the simulator: completed, failed and interrupted.
    for e in std::fs::read_dir(fx.join("records"))? {
        let p = e?.path();
        let name = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        put("records", &name, &std::fs::read(&p)?)?;
    }
    put(
        "vllm_result",
        "llama-cpp-c2",
        &std::fs::read(fx.join("vllm/bench_serve_llama_cpp_c2.json"))?,
    )?;
    Ok(n)
}

fn sse_fixtures(fx: &Path) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for d in ["sse/formats", "sse/llama.cpp"] {
        for e in std::fs::read_dir(fx.join(d))? {
            let p = e?.path();
            let name = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let sse = p.extension().is_some_and(|x| x.eq_ignore_ascii_case("sse"));
            if sse || name.ends_with("stream.txt") {
                v.push(p);
            }
        }
    }
    v.sort();
    Ok(v)
}

fn sse_body(raw: &[u8]) -> Vec<u8> {
    match raw.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) if raw.starts_with(b"HTTP/") => raw[i + 4..].to_vec(),
        _ => raw.to_vec(),
    }
}

/// At most `max` bytes, cut after a newline where there is one.
fn head(b: &[u8], max: usize) -> &[u8] {
    if b.len() <= max {
        return b;
    }
    let cut = b[..max].iter().rposition(|&c| c == b'\n').map_or(max, |i| i + 1);
    &b[..cut]
}

fn first_lines(p: &Path, n: usize) -> Result<Vec<u8>> {
    let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
    let mut out = String::new();
    for l in text.lines().take(n) {
        out.push_str(l);
        out.push('\n');
    }
    out.truncate(3800);
    Ok(out.into_bytes())
}

/// The first two conversations of a ShareGPT file, each message cut to 60 characters.
fn small_sharegpt(p: &Path) -> Result<String> {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p)?)?;
    let arr = v.as_array_mut().context("a ShareGPT file is a list")?;
    arr.truncate(2);
    for c in arr.iter_mut() {
        for m in c["conversations"].as_array_mut().into_iter().flatten().take(6) {
            if let Some(s) = m["value"].as_str() {
                m["value"] = s.chars().take(60).collect::<String>().into();
            }
        }
        if let Some(a) = c["conversations"].as_array_mut() {
            a.truncate(6);
        }
    }
    Ok(serde_json::to_string(&v)?)
}

/// One AWS event-stream frame with `:message-type` and `:event-type` (or
/// `:exception-type`) string headers.
/// Bedrock: Converse's events and Invoke's chunks as the service sends them, one event per
/// frame; the first byte's top bits pick Converse (5 to 7) or a family (0 to 4).
fn seed_bedrock(put: &mut impl FnMut(&str, &str, &[u8]) -> Result<()>) -> Result<()> {
    let converse: Vec<u8> = [
        ("messageStart", r#"{"role":"assistant","p":"abc"}"#),
        ("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcd"}"#),
        ("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"hm"}}}"#),
        ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        ("messageStop", r#"{"stopReason":"max_tokens"}"#),
        ("metadata", r#"{"usage":{"inputTokens":9,"outputTokens":2,"totalTokens":11},"metrics":{"latencyMs":412}}"#),
    ]
    .iter()
    .flat_map(|(k, p)| event_frame("event", k, p.as_bytes()))
    .collect();
    put("bedrock", "converse", &[&[0xa5u8][..], &converse].concat())?;
    let throttled =
        event_frame("exception", "throttlingException", br#"{"message":"Too many requests"}"#);
    put(
        "bedrock",
        "converse-throttled",
        &[&[0xa2u8][..], &converse[..120.min(converse.len())], &throttled].concat(),
    )?;
    let chunk = |obj: &str| {
        use base64::Engine as _;
        let b = base64::engine::general_purpose::STANDARD.encode(obj);
        event_frame("event", "chunk", format!(r#"{{"bytes":"{b}","p":"ab"}}"#).as_bytes())
    };
    let metrics = r#""amazon-bedrock-invocationMetrics":{"inputTokenCount":5,"outputTokenCount":2,"invocationLatency":120,"firstByteLatency":40}"#;
    let anthropic = [
        r#"{"type":"message_start","message":{"role":"assistant","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}"#.to_owned(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#.to_owned(),
        r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":2}}"#.to_owned(),
        format!(r#"{{"type":"message_stop",{metrics}}}"#),
    ];
    put(
        "bedrock",
        "invoke-anthropic",
        &[&[0x03u8][..], &anthropic.iter().flat_map(|o| chunk(o)).collect::<Vec<u8>>()].concat(),
    )?;
    let llama = [
        r#"{"generation":"Hi","prompt_token_count":5,"generation_token_count":1,"stop_reason":null}"#.to_owned(),
        format!(r#"{{"generation":"","generation_token_count":2,"stop_reason":"length",{metrics}}}"#),
    ];
    put(
        "bedrock",
        "invoke-llama",
        &[&[0x24u8][..], &llama.iter().flat_map(|o| chunk(o)).collect::<Vec<u8>>()].concat(),
    )?;
    put("bedrock", "converse-whole", &[&b"\xa0"[..], br#"{"output":{"message":{"role":"assistant","content":[{"text":"Hi there"}]}},"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5},"metrics":{"latencyMs":99}}"#].concat())?;
    put("bedrock", "invoke-titan-whole", &[&b"\x60"[..], br#"{"inputTextTokenCount":3,"results":[{"tokenCount":2,"outputText":"Hi there","completionReason":"LENGTH"}]}"#].concat())?;
    Ok(())
}

fn event_frame(message_type: &str, kind: &str, payload: &[u8]) -> Vec<u8> {
    let kind_header = if message_type == "exception" { ":exception-type" } else { ":event-type" };
    quetta_sim::providers::frame(
        &[(":message-type", message_type), (kind_header, kind)],
        payload,
        false,
    )
}

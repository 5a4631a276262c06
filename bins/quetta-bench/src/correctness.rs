//! `quetta-bench correctness` (as llmperf's): numbers spelled out in words; the model must
//! answer the digits. Reports the mismatch rate and examples.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use quetta_engine::{Engine, Message, Prompt};
use quetta_loadgen::{Observer, RunConfig};
use quetta_metrics::RequestRecord;
use quetta_openai::{list_models, Api, ApiKey, OpenAiConfig, OpenAiEngine};
use quetta_workload::{PlannedRequest, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

#[derive(Debug, Args)]
pub struct CorrectnessArgs {
    /// Server root URL.
    #[arg(long)]
    base_url: String,
    #[arg(long)]
    model: Option<String>,
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    #[arg(long, default_value_t = 50)]
    num_requests: u64,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Largest number to spell (numbers are drawn uniformly from 0..=MAX).
    #[arg(long, default_value_t = 999_999)]
    max_number: u64,
    #[arg(long, default_value_t = 32)]
    max_tokens: u32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write correctness.json here.
    #[arg(long)]
    output_dir: Option<std::path::PathBuf>,
}

const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] =
    ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];

fn below_thousand(n: u64, out: &mut Vec<String>) {
    let (h, r) = (n / 100, n % 100);
    if h > 0 {
        out.push(format!("{} hundred", ONES[h as usize]));
    }
    if r > 0 || (h == 0 && out.is_empty()) {
        if r < 20 {
            out.push(ONES[r as usize].to_owned());
        } else if r % 10 == 0 {
            out.push(TENS[(r / 10) as usize].to_owned());
        } else {
            out.push(format!("{}-{}", TENS[(r / 10) as usize], ONES[(r % 10) as usize]));
        }
    }
}

/// A number in English words ("twelve thousand three hundred forty-five").
pub fn spell(n: u64) -> String {
    if n == 0 {
        return "zero".into();
    }
    let mut parts = Vec::new();
    for (scale, name) in [
        (1_000_000_000_000, "trillion"),
        (1_000_000_000, "billion"),
        (1_000_000, "million"),
        (1000, "thousand"),
    ] {
        if n / scale % 1000 > 0 {
            let mut p = Vec::new();
            below_thousand(n / scale % 1000, &mut p);
            parts.push(format!("{} {name}", p.join(" ")));
        }
    }
    let mut p = Vec::new();
    if n % 1000 > 0 {
        below_thousand(n % 1000, &mut p);
        parts.extend(p);
    }
    parts.join(" ")
}

/// The prompt for one number.
pub fn prompt(n: u64) -> String {
    format!("Convert the following sequence of words into a number: {}. Output only the number, in digits.", spell(n))
}

/// Whether a reply answers `n`: the digits (commas and spaces between them allowed) appear
/// as a whole number in it.
pub fn answers(reply: &str, n: u64) -> bool {
    let cleaned: String = reply.chars().filter(|c| *c != ',').collect();
    cleaned.split(|c: char| !c.is_ascii_digit()).any(|tok| {
        !tok.is_empty()
            && tok
                .trim_start_matches('0')
                .parse::<u64>()
                .ok()
                .or((tok.chars().all(|c| c == '0')).then_some(0))
                == Some(n)
    })
}

struct Numbers {
    numbers: Arc<Vec<u64>>,
    max_tokens: u32,
}

impl Workload for Numbers {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let n = *self.numbers.get(index as usize)?;
        let text = prompt(n);
        Some(PlannedRequest {
            index,
            input_tokens: text.split_whitespace().count() as u32,
            prompt: Prompt::Chat(vec![Message::text("user", text)]),
            input_tokens_exact: false,
            max_tokens: self.max_tokens,
        })
    }
}

struct Collect(Mutex<Vec<RequestRecord>>);

impl Observer for Collect {
    fn on_record(&self, rec: &RequestRecord) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(rec.clone());
    }
}

pub fn main(a: CorrectnessArgs) -> Result<ExitCode> {
    if a.num_requests == 0 || a.concurrency == 0 {
        bail!("--num-requests and --concurrency must be at least 1");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let key = a.api_key.as_deref().filter(|k| !k.is_empty()).map(ApiKey::new);
        let model = match &a.model {
            Some(m) => m.clone(),
            None => list_models(&a.base_url, key.as_ref(), false, Duration::from_secs(15))
                .await
                .with_context(|| {
                    format!("no --model given and GET {}/v1/models failed", a.base_url)
                })?
                .into_iter()
                .next()
                .context("/v1/models lists no model")?,
        };
        let mut cfg = OpenAiConfig::new(&a.base_url, Api::Chat, &model);
        cfg.api_key = key;
        let engine: Arc<dyn Engine> = Arc::new(OpenAiEngine::new(cfg)?);
        let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
        let numbers: Arc<Vec<u64>> =
            Arc::new((0..a.num_requests).map(|_| rng.gen_range(0..=a.max_number)).collect());
        let mut rc = RunConfig::closed(a.concurrency, a.num_requests);
        rc.capture_text = true;
        Arc::make_mut(&mut rc.params).sampling.temperature = Some(0.0);
        rc.seed = a.seed;
        let collect = Arc::new(Collect(Mutex::new(Vec::new())));
        let out = quetta_loadgen::Runner::new(engine, rc)
            .observer(collect.clone())
            .run(quetta_loadgen::Work::Requests(Box::new(Numbers {
                numbers: numbers.clone(),
                max_tokens: a.max_tokens,
            })))
            .await?;
        let recs = collect.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let (mut ok, mut wrong, mut failed) = (0u64, 0u64, 0u64);
        let mut examples = Vec::new();
        for r in &recs {
            let n = numbers[r.id as usize];
            if !r.ok() {
                failed += 1;
                continue;
            }
            let reply = r.text.clone().unwrap_or_default();
            if answers(&reply, n) {
                ok += 1;
            } else {
                wrong += 1;
                if examples.len() < 5 {
                    examples.push(json!({"number": n, "words": spell(n), "reply": reply}));
                }
            }
        }
        let answered = ok + wrong;
        let rate = if answered > 0 { wrong as f64 / answered as f64 } else { 0.0 };
        println!("== Quetta correctness: {model} ==");
        println!("requests   {} ({} answered, {failed} failed)", recs.len(), answered);
        println!("mismatch   {wrong} of {answered} answers ({:.1}%)", rate * 100.0);
        for e in &examples {
            println!(
                "example    {} ({}) -> {:?}",
                e["number"],
                e["words"].as_str().unwrap_or(""),
                e["reply"].as_str().unwrap_or("")
            );
        }
        let report = json!({
            "model": model, "requests": recs.len(), "answered": answered, "failed": failed,
            "mismatches": wrong, "mismatch_rate": rate, "examples": examples,
            "request_throughput": out.aggregate.summary(&[]).request_throughput,
        });
        if let Some(d) = &a.output_dir {
            std::fs::create_dir_all(d)?;
            std::fs::write(
                d.join("correctness.json"),
                serde_json::to_string_pretty(&report)? + "\n",
            )?;
            println!("results    {}", d.display());
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling_and_matching() {
        assert_eq!(spell(0), "zero");
        assert_eq!(spell(12_345), "twelve thousand three hundred forty-five");
        assert_eq!(spell(1_000_010), "one million ten");
        assert_eq!(spell(900_000), "nine hundred thousand");
        assert!(answers("The number is 12,345.", 12_345));
        assert!(answers("12345", 12_345));
        assert!(!answers("123456", 12_345));
        assert!(!answers("twelve thousand", 12_000));
        assert!(answers("0", 0));
    }
}

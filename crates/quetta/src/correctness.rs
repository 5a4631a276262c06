//! A correctness check (llmperf's): numbers spelled out in words; the model must answer the
//! digits. The mismatch rate says whether a deployment's numerics (a quantisation, a kernel)
//! broke the model.

use std::sync::{Arc, Mutex};

use quetta_engine::{Message, Prompt};
use quetta_loadgen::{Observer, RunConfig, Runner, Work};
use quetta_metrics::RequestRecord;
use quetta_report::{CorrectnessExample, CorrectnessReport};
use quetta_workload::{PlannedRequest, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Error, Result, Target};

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
        let n = *self.numbers.get(usize::try_from(index).ok()?)?;
        let text = prompt(n);
        Some(PlannedRequest {
            index,
            input_tokens: u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX),
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

/// A correctness check of a target.
///
/// ```no_run
/// # async fn demo() -> quetta::Result<()> {
/// use quetta::correctness::Correctness;
/// let r = Correctness::new(quetta::Target::openai("http://127.0.0.1:8000")).run().await?;
/// println!("{} of {} answers wrong", r.mismatches, r.answered);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Correctness {
    pub target: Target,
    pub requests: u64,
    pub concurrency: usize,
    /// Numbers are drawn uniformly from 0..=`max_number`.
    pub max_number: u64,
    pub max_tokens: u32,
    pub seed: u64,
}

impl Correctness {
    /// 50 numbers below a million, 4 at a time, greedy decoding.
    pub fn new(target: Target) -> Self {
        Self { target, requests: 50, concurrency: 4, max_number: 999_999, max_tokens: 32, seed: 0 }
    }

    /// Ask, and count the wrong answers (up to 5 examples of them).
    pub async fn run(&self) -> Result<CorrectnessReport> {
        use quetta_engine::setting::Setting as S;
        for (n, setting) in
            [(self.requests, S::NumRequests), (self.concurrency as u64, S::Concurrency)]
        {
            if n == 0 {
                return Err(Error::invalid(setting, "must be at least 1"));
            }
        }
        let c = self.target.connect().await?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let numbers: Arc<Vec<u64>> =
            Arc::new((0..self.requests).map(|_| rng.gen_range(0..=self.max_number)).collect());
        let mut rc = RunConfig::closed(self.concurrency, self.requests);
        rc.capture_text = true;
        Arc::make_mut(&mut rc.params).sampling.temperature = Some(0.0);
        rc.seed = self.seed;
        let collect = Arc::new(Collect(Mutex::new(Vec::new())));
        let out = Runner::new(c.engine.clone(), rc)
            .observer(collect.clone())
            .run(Work::Requests(Box::new(Numbers {
                numbers: numbers.clone(),
                max_tokens: self.max_tokens,
            })))
            .await?;
        let recs = collect.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let (mut wrong, mut failed) = (0u64, 0u64);
        let mut examples = Vec::new();
        for r in &recs {
            let n = numbers[usize::try_from(r.id).unwrap_or(0)];
            if !r.ok() {
                failed += 1;
                continue;
            }
            let reply = r.text.clone().unwrap_or_default();
            if !answers(&reply, n) {
                wrong += 1;
                if examples.len() < 5 {
                    examples.push(CorrectnessExample { number: n, words: spell(n), reply });
                }
            }
        }
        let answered = recs.len() as u64 - failed;
        Ok(CorrectnessReport {
            model: c.model.clone(),
            requests: recs.len() as u64,
            answered,
            failed,
            mismatches: wrong,
            mismatch_rate: if answered > 0 { wrong as f64 / answered as f64 } else { 0.0 },
            examples,
            request_throughput: out.aggregate.summary(&[]).request_throughput,
        })
    }
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

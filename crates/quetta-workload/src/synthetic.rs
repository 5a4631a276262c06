//! Synthetic prompts: words drawn from the bundled corpus, one word per intended token.
//!
//! Without a tokenizer a word is an *estimate* of a token (about 1.3 tokens per word for
//! BPE tokenizers on English), so lengths are marked inexact; the simulator counts words,
//! so against it they are exact.

use quetta_engine::{Message, Prompt};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use std::sync::Arc;

use crate::tokenizer::{ExactPrompts, Tokenizer};
use crate::{PlannedRequest, Workload, WorkloadError};

/// Words prompts are built from: the bundled corpus, split on whitespace.
fn words() -> &'static [&'static str] {
    static WORDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    WORDS.get_or_init(|| crate::tokenizer::CORPUS.split_whitespace().collect())
}

/// How synthetic requests are drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticSpec {
    /// Mean prompt length in tokens (words).
    pub input_len: u32,
    /// Standard deviation of the prompt length (0: fixed).
    pub input_stddev: f64,
    /// Mean output length (`max_tokens`).
    pub output_len: u32,
    /// Standard deviation of the output length (0: fixed).
    pub output_stddev: f64,
    /// Send chat messages (true) or a raw prompt (false).
    pub chat: bool,
    pub seed: u64,
    /// vLLM's `--random-range-ratio` for the prompts: lengths drawn uniformly from
    /// `[len·(1−r), len·(1+r)]` (0: fixed, or the normal draw of the stddevs; a ratio and a
    /// stddev at once are refused).
    pub input_range_ratio: f64,
    /// The same for the output lengths.
    pub output_range_ratio: f64,
    /// vLLM's `--random-prefix-len`: tokens of one prefix shared by every prompt, put
    /// before the drawn `input_len` tokens (the prompt has `prefix_len + input_len`).
    pub prefix_len: u32,
}

impl Default for SyntheticSpec {
    /// 128 tokens in, 128 out, fixed lengths, chat, seed 0.
    fn default() -> Self {
        SyntheticSpec {
            input_len: 128,
            input_stddev: 0.0,
            output_len: 128,
            output_stddev: 0.0,
            chat: true,
            seed: 0,
            input_range_ratio: 0.0,
            output_range_ratio: 0.0,
            prefix_len: 0,
        }
    }
}

/// Seed of the shared prefix (the same for every request of a seed).
const PREFIX_SALT: u64 = 0x5EED_0F7E_F1C5;

impl SyntheticSpec {
    /// Check the parameters.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |name, reason: &str| Err(WorkloadError::Invalid { name, reason: reason.into() });
        if self.input_len == 0 {
            return bad("input length", "must be at least 1");
        }
        if self.output_len == 0 {
            return bad("output length", "must be at least 1");
        }
        if !(self.input_stddev >= 0.0 && self.input_stddev.is_finite()) {
            return bad("input length stddev", "must be a non-negative number");
        }
        if !(self.output_stddev >= 0.0 && self.output_stddev.is_finite()) {
            return bad("output length stddev", "must be a non-negative number");
        }
        for (name, r, sd) in [
            ("input range ratio", self.input_range_ratio, self.input_stddev),
            ("output range ratio", self.output_range_ratio, self.output_stddev),
        ] {
            if !(0.0..1.0).contains(&r) {
                return bad(name, "must be at least 0 and below 1");
            }
            if r > 0.0 && sd > 0.0 {
                return bad(name, "draws the lengths uniformly: give it or a stddev, not both");
            }
        }
        Ok(())
    }

    fn draw(rng: &mut ChaCha8Rng, mean: u32, sd: f64, ratio: f64) -> u32 {
        if ratio > 0.0 {
            let m = f64::from(mean);
            let lo = (m * (1.0 - ratio)).ceil().max(1.0) as u32;
            let hi = ((m * (1.0 + ratio)).floor() as u32).max(lo);
            return rng.gen_range(lo..=hi);
        }
        if sd == 0.0 {
            return mean;
        }
        let n = Normal::new(f64::from(mean), sd).map_or(f64::from(mean), |d| d.sample(rng));
        n.round().max(1.0) as u32
    }

    /// The request with this index (deterministic for the seed).
    pub fn planned(&self, index: u64) -> PlannedRequest {
        let mut rng =
            ChaCha8Rng::seed_from_u64(self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let n_in = Self::draw(&mut rng, self.input_len, self.input_stddev, self.input_range_ratio);
        let n_out =
            Self::draw(&mut rng, self.output_len, self.output_stddev, self.output_range_ratio);
        let mut text = String::with_capacity((n_in + self.prefix_len) as usize * 7);
        let mut prefix_rng = ChaCha8Rng::seed_from_u64(self.seed ^ PREFIX_SALT);
        let w = words();
        for i in 0..self.prefix_len + n_in {
            if i > 0 {
                text.push(' ');
            }
            let r = if i < self.prefix_len { &mut prefix_rng } else { &mut rng };
            text.push_str(w[r.gen_range(0..w.len())]);
        }
        let n_in = n_in + self.prefix_len;
        let prompt = if self.chat {
            Prompt::Chat(vec![Message::text("user", text)])
        } else {
            Prompt::Text(text)
        };
        PlannedRequest {
            index,
            prompt,
            input_tokens: n_in,
            input_tokens_exact: false,
            max_tokens: n_out,
        }
    }
}

/// Synthetic requests whose prompts have exactly the drawn number of tokens for a real
/// tokenizer (text from the bundled corpus, or token ids).
#[derive(Debug, Clone)]
pub struct ExactSynthetic {
    pub spec: SyntheticSpec,
    prompts: ExactPrompts,
    token_ids: bool,
    /// The request that could not be built, which ended the workload.
    error: Option<WorkloadError>,
}

impl ExactSynthetic {
    pub fn new(spec: SyntheticSpec, tokenizer: Arc<Tokenizer>, token_ids: bool) -> Self {
        Self { spec, prompts: ExactPrompts::new(tokenizer), token_ids, error: None }
    }
}

/// `built`'s text, or `None` with the error kept in `error`, naming the request.
fn built_or_keep(
    built: Result<String, WorkloadError>,
    index: u64,
    error: &mut Option<WorkloadError>,
) -> Option<String> {
    built.map_err(|e| *error = Some(WorkloadError::Request { index, source: Box::new(e) })).ok()
}

impl Workload for ExactSynthetic {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let mut p = self.spec.planned(index);
        let seed = self.spec.seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let n = p.input_tokens as usize;
        let prefix_len = self.spec.prefix_len as usize;
        let prefix = self.prompts.ids(prefix_len, self.spec.seed ^ PREFIX_SALT);
        p.prompt = if self.token_ids {
            let mut ids = prefix;
            ids.extend(self.prompts.ids(n - prefix_len, seed));
            Prompt::TokenIds(ids)
        } else {
            let built = self.prompts.text_with_lead(n, seed, &prefix);
            let text = built_or_keep(built, index, &mut self.error)?;
            if self.spec.chat {
                Prompt::Chat(vec![Message::text("user", text)])
            } else {
                Prompt::Text(text)
            }
        };
        p.input_tokens_exact = true;
        Some(p)
    }

    fn error(&self) -> Option<WorkloadError> {
        self.error.clone()
    }
}

impl Workload for SyntheticSpec {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        Some(self.planned(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_determinism() {
        let s = SyntheticSpec {
            input_len: 50,
            input_stddev: 0.0,
            output_len: 20,
            output_stddev: 0.0,
            chat: false,
            seed: 3,
            ..SyntheticSpec::default()
        };
        let a = s.planned(5);
        assert_eq!(a, s.planned(5));
        assert_ne!(a.prompt, s.planned(6).prompt);
        let Prompt::Text(t) = &a.prompt else { panic!() };
        assert_eq!(t.split_whitespace().count(), 50);
        assert_eq!(a.max_tokens, 20);
        let v = SyntheticSpec { input_stddev: 10.0, output_stddev: 5.0, ..s };
        let lens: Vec<u32> = (0..1000).map(|i| v.planned(i).input_tokens).collect();
        let mean = lens.iter().map(|&x| f64::from(x)).sum::<f64>() / 1000.0;
        assert!((mean - 50.0).abs() < 2.0);
        assert!(SyntheticSpec { input_len: 0, ..s }.validate().is_err());
    }

    /// Prompts of 128–1,024 tokens with outputs of 64–256: one ratio each.
    #[test]
    fn prompts_and_outputs_take_their_own_range_ratios() {
        let s = SyntheticSpec {
            input_len: 576,
            output_len: 160,
            input_range_ratio: 0.778,
            output_range_ratio: 0.6,
            ..SyntheticSpec::default()
        };
        s.validate().unwrap();
        let (ins, outs): (Vec<u32>, Vec<u32>) =
            (0..2000).map(|i| s.planned(i)).map(|p| (p.input_tokens, p.max_tokens)).unzip();
        let span = |v: &[u32]| (*v.iter().min().unwrap(), *v.iter().max().unwrap());
        let ((ilo, ihi), (olo, ohi)) = (span(&ins), span(&outs));
        assert!((128..140).contains(&ilo) && (1010..=1024).contains(&ihi), "{ilo}..{ihi}");
        assert!((64..70).contains(&olo) && (250..=256).contains(&ohi), "{olo}..{ohi}");
        let e = SyntheticSpec { output_stddev: 3.0, ..s }.validate().unwrap_err();
        assert!(e.to_string().contains("output range ratio"), "{e}");
        assert!(SyntheticSpec { input_range_ratio: 1.0, ..s }.validate().is_err());
    }
}

/// Stress-mode prompts: the lengths of a [`SyntheticSpec`], every prompt unique from its
/// first token so that no prefix cache can serve any part of it. Without a tokenizer the
/// first word is a per-request nonce (unique as a word; its first token may repeat) followed
/// by random corpus words; with one, the first
/// two tokens are the request's [`ExactPrompts::block_marker`], followed by corpus tokens
/// (token ids with `token_ids`, else text of exactly the planned length).
#[derive(Debug, Clone)]
pub struct StressWorkload {
    pub spec: SyntheticSpec,
    exact: Option<ExactPrompts>,
    token_ids: bool,
    /// The request that could not be built, which ended the workload.
    error: Option<WorkloadError>,
}

impl StressWorkload {
    pub fn new(spec: SyntheticSpec, tokenizer: Option<Arc<Tokenizer>>, token_ids: bool) -> Self {
        Self { spec, exact: tokenizer.map(ExactPrompts::new), token_ids, error: None }
    }
}

impl Workload for StressWorkload {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let mut p = self.spec.planned(index);
        let n = p.input_tokens as usize;
        // A nonce no other request has, and a salt so that two runs differ too.
        let nonce = index ^ self.spec.seed.rotate_left(32);
        match &self.exact {
            None => {
                let text = match &p.prompt {
                    Prompt::Chat(m) => m[0].text_content(),
                    Prompt::Text(t) => t.clone(),
                    _ => String::new(),
                };
                let rest = text.split_once(' ').map_or("", |(_, r)| r);
                // Hex digits lowest first, so even the first character differs between
                // consecutive requests (a tokenizer may still share a first token 1 in 16).
                let tag: String = format!("{nonce:x}").chars().rev().collect();
                let unique = if n > 1 { format!("{tag} {rest}") } else { tag };
                p.prompt = if self.spec.chat {
                    Prompt::Chat(vec![Message::text("user", unique)])
                } else {
                    Prompt::Text(unique)
                };
            }
            Some(e) => {
                let lead = e.block_marker(nonce);
                let seed = self.spec.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                if self.token_ids {
                    let mut ids: Vec<u32> = lead.iter().copied().take(n).collect();
                    ids.extend(e.ids(n - ids.len(), seed));
                    p.prompt = Prompt::TokenIds(ids);
                } else {
                    let text =
                        built_or_keep(e.text_with_lead(n, seed, &lead), index, &mut self.error)?;
                    p.prompt = if self.spec.chat {
                        Prompt::Chat(vec![Message::text("user", text)])
                    } else {
                        Prompt::Text(text)
                    };
                }
                p.input_tokens_exact = true;
            }
        }
        Some(p)
    }

    fn error(&self) -> Option<WorkloadError> {
        self.error.clone()
    }
}

//! Real tokenizers (Hugging Face `tokenizer.json`, through the `tokenizers` crate built
//! without C dependencies) and prompts of an exact token count.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::WorkloadError;

/// A loaded tokenizer. Counts exclude special tokens (BOS/EOS added by post-processors):
/// those, and the chat template, are the server's to add; see [`Tokenizer::count`].
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    source: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("source", &self.source).finish_non_exhaustive()
    }
}

/// Where the Hugging Face cache keeps a model's files.
/// The local Hugging Face hub cache (`HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`).
pub fn hf_cache_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HF_HUB_CACHE") {
        return Some(PathBuf::from(h));
    }
    if let Some(h) = std::env::var_os("HF_HOME") {
        return Some(PathBuf::from(h).join("hub"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
}

impl Tokenizer {
    /// Load a `tokenizer.json` file.
    pub fn from_file(path: &Path) -> Result<Self, WorkloadError> {
        let mut inner =
            tokenizers::Tokenizer::from_file(path).map_err(|e| WorkloadError::Tokenizer {
                source_name: path.display().to_string(),
                reason: e.to_string(),
            })?;
        // Some saved files carry truncation or padding settings (the GPT-2 file here
        // truncates at 50): a counter must never truncate or pad.
        inner.with_truncation(None).map_err(|e| WorkloadError::Tokenizer {
            source_name: path.display().to_string(),
            reason: e.to_string(),
        })?;
        inner.with_padding(None);
        Ok(Self { inner, source: path.display().to_string() })
    }

    /// A path to a `tokenizer.json` (or a directory holding one), or a Hugging Face model id
    /// (`org/name`) found in the local Hugging Face cache. Nothing is downloaded.
    pub fn resolve(path_or_id: &str) -> Result<Self, WorkloadError> {
        let p = Path::new(path_or_id);
        if p.is_file() {
            return Self::from_file(p);
        }
        if p.is_dir() {
            return Self::from_file(&p.join("tokenizer.json"));
        }
        let cache = hf_cache_dir();
        if let (Some(cache), Some((org, name))) = (&cache, path_or_id.split_once('/')) {
            let snaps = cache.join(format!("models--{org}--{name}")).join("snapshots");
            if let Ok(rd) = std::fs::read_dir(&snaps) {
                let mut found: Vec<PathBuf> = rd
                    .filter_map(Result::ok)
                    .map(|e| e.path().join("tokenizer.json"))
                    .filter(|f| f.is_file())
                    .collect();
                found.sort();
                if let Some(f) = found.pop() {
                    return Self::from_file(&f);
                }
            }
        }
        Err(WorkloadError::Tokenizer {
            source_name: path_or_id.to_owned(),
            reason: format!(
                "not a tokenizer.json file or directory, and not in the Hugging Face cache ({}); \
                 download it first (e.g. `huggingface-cli download {path_or_id} tokenizer.json`) or pass a path",
                cache.map_or_else(|| "no cache directory".into(), |c| c.display().to_string())
            ),
        })
    }

    /// Vocabulary size without added tokens.
    pub fn vocab_size(&self) -> u32 {
        self.inner.get_vocab_size(false) as u32
    }

    /// Where it was loaded from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Token ids of `text`, without special tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner.encode_fast(text, false).map(|e| e.get_ids().to_vec()).unwrap_or_default()
    }

    /// The number of tokens of `text`, without special tokens.
    pub fn count(&self, text: &str) -> usize {
        self.inner.encode_fast(text, false).map_or(0, |e| e.len())
    }

    /// Text of token ids (special tokens skipped).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, true).unwrap_or_default()
    }
}

/// The bundled public-domain text prompts are built from: Shakespeare's sonnets (1609).
pub const CORPUS: &str = include_str!("../corpus/sonnets.txt");

/// Builds prompts of an exact token count from the corpus, for one tokenizer.
///
/// A prompt's tokens are drawn from its seed: three corpus tokens, then corpus lines in a
/// random order, each from a random token of its first half on, so prompts of different
/// seeds share a few tokens at their start at most (a prefix cache serves them no more).
/// One window of the corpus (1,817 tokens with SmolLM2's tokenizer) would start at one of
/// its tokens: two prompts of a run would then share their whole common length whenever
/// they started at the same token (of 1,000 prompts of 256 tokens, 167 started with the
/// same 16 tokens as an earlier one).
#[derive(Debug, Clone)]
pub struct ExactPrompts {
    tok: Arc<Tokenizer>,
    /// The token ids of each non-empty corpus line, with its newline.
    lines: Arc<Vec<Vec<u32>>>,
    /// Vocabulary size without added tokens.
    vocab: u32,
}

/// Corpus tokens drawn anew for each sequence before its lines: the corpus has fewer than
/// 2,000 tokens to start a line segment at, so after a few thousand sequences most would
/// share their first segment with an earlier one; three single tokens first make shared
/// starts rare.
const SINGLE_TOKENS: u32 = 3;

/// Token ids for one seed: [`SINGLE_TOKENS`] corpus tokens drawn one by one, then random
/// corpus lines, each from a random token of its first half on (ends only when the
/// tokenizer encodes no line at all).
struct LineIds<'a> {
    lines: &'a [Vec<u32>],
    rng: rand_chacha::ChaCha8Rng,
    rest: &'a [u32],
    singles: u32,
}

impl Iterator for LineIds<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        use rand::Rng as _;
        if self.lines.is_empty() {
            return None;
        }
        if self.singles > 0 {
            self.singles -= 1;
            let line = &self.lines[self.rng.gen_range(0..self.lines.len())];
            return Some(line[self.rng.gen_range(0..line.len())]);
        }
        while self.rest.is_empty() {
            // a random line, from a random token of its first half on
            let line = &self.lines[self.rng.gen_range(0..self.lines.len())];
            self.rest = &line[self.rng.gen_range(0..line.len().div_ceil(2))..];
        }
        let (first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(*first)
    }
}

impl ExactPrompts {
    /// Tokenise the corpus once, line by line.
    pub fn new(tok: Arc<Tokenizer>) -> Self {
        let lines = CORPUS
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| tok.encode(&format!("{}\n", l.trim_end())))
            .filter(|ids| !ids.is_empty())
            .collect();
        let vocab = tok.vocab_size();
        Self { tok, lines: Arc::new(lines), vocab }
    }

    /// The ids of `seed`'s sequence of corpus lines.
    fn line_ids(&self, seed: u64) -> LineIds<'_> {
        use rand::SeedableRng as _;
        LineIds {
            lines: &self.lines,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            rest: &[],
            singles: SINGLE_TOKENS,
        }
    }

    /// Two token ids that spell `id` in base (vocabulary − 1000), skipping the first 1000 ids
    /// (special and byte tokens): distinct ids below (vocabulary − 1000)² get distinct pairs,
    /// and the first tokens already differ unless the ids are equal modulo the base.
    pub fn block_marker(&self, id: u64) -> [u32; 2] {
        let base = u64::from(self.vocab.saturating_sub(1000).max(2));
        [1000 + ((id % base) as u32), 1000 + (((id / base) % base) as u32)]
    }

    /// Text of token ids.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.tok.decode(ids)
    }

    /// `n` corpus token ids of seeded random lines, for token-id prompts (fewer only when
    /// the tokenizer encodes no corpus line at all).
    pub fn ids(&self, n: usize, seed: u64) -> Vec<u32> {
        self.line_ids(seed).take(n).collect()
    }

    /// Text that encodes to exactly `n` tokens (without special tokens), deterministic for
    /// `seed`. Decoding corpus lines' tokens and re-encoding them can merge or split tokens
    /// where lines meet and at the end, so the ids are trimmed or extended at the end until
    /// the count is exact.
    pub fn text(&self, n: usize, seed: u64) -> Result<String, WorkloadError> {
        self.exact_text(n, seed, &[])
    }

    /// Like [`ExactPrompts::text`], but starting with `lead` (e.g. a [`block_marker`]), so
    /// prompts with different leads share no prefix at all.
    ///
    /// [`block_marker`]: ExactPrompts::block_marker
    pub fn text_with_lead(
        &self,
        n: usize,
        seed: u64,
        lead: &[u32],
    ) -> Result<String, WorkloadError> {
        self.exact_text(n, seed, lead)
    }

    fn exact_text(&self, n: usize, seed: u64, lead: &[u32]) -> Result<String, WorkloadError> {
        if n == 0 {
            return Ok(String::new());
        }
        let lead = &lead[..lead.len().min(n.saturating_sub(1))];
        for attempt in 0..8u64 {
            let mut more = self.line_ids(seed.wrapping_add(attempt.wrapping_mul(7919)));
            let mut ids: Vec<u32> = lead.to_vec();
            ids.extend(more.by_ref().take(n - lead.len()));
            for _ in 0..24 {
                let text = self.tok.decode(&ids);
                let c = self.tok.count(&text);
                if c == n {
                    return Ok(text);
                }
                if c > n {
                    let drop = (c - n).min(ids.len().saturating_sub(1)).max(1);
                    ids.truncate(ids.len() - drop);
                } else {
                    ids.extend(more.by_ref().take(n - c));
                }
            }
        }
        Err(WorkloadError::Invalid {
            name: "prompt length",
            reason: format!(
                "could not build a prompt of exactly {n} tokens with {}",
                self.tok.source()
            ),
        })
    }
}

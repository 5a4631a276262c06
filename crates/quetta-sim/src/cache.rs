//! The simulator's prefix cache: prompt tokens in fixed-size blocks, each block named by a
//! hash chained over every token before it (as vLLM's automatic prefix caching does), with
//! a capacity in blocks and least-recently-used eviction.
//!
//! A token is a word of a message (whitespace-separated) tagged with the message's role,
//! or a token id; see `tokens` in `server.rs`. [`TwinCache`] is the same cache for
//! predictions, which build a prompt's cache tokens with [`word_token`].

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::model::ServerModel;

#[derive(Debug, Default)]
pub(crate) struct PrefixCache {
    block: usize,
    capacity: usize,
    /// Block hash -> last use.
    used: HashMap<u64, u64>,
    /// Last use -> block hash (the eviction order).
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

/// The cache token of one word of a message with this role (a text prompt's words have the
/// role ""); deterministic across runs (`DefaultHasher::new` has fixed keys).
pub fn word_token(role: &str, word: &str) -> u64 {
    let mut h = DefaultHasher::new();
    role.hash(&mut h);
    word.hash(&mut h);
    h.finish()
}

impl PrefixCache {
    pub(crate) fn new(block: u32, capacity: usize) -> Self {
        Self { block: block.max(1) as usize, capacity, ..Self::default() }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Chained hashes of the full blocks of `tokens`.
    pub(crate) fn blocks(&self, tokens: &[u64]) -> Vec<u64> {
        let mut prev = 0u64;
        tokens
            .chunks_exact(self.block)
            .map(|b| {
                let mut h = DefaultHasher::new();
                prev.hash(&mut h);
                b.hash(&mut h);
                prev = h.finish();
                prev
            })
            .collect()
    }

    fn touch(&mut self, h: u64) {
        self.tick += 1;
        if let Some(old) = self.used.insert(h, self.tick) {
            self.lru.remove(&old);
        }
        self.lru.insert(self.tick, h);
    }

    /// Tokens of a `len`-token prompt served from cache, given its block hashes: the longest
    /// run of leading blocks present, never the whole prompt (the last token is always
    /// computed, as in vLLM). Marks the hit blocks as used.
    pub(crate) fn lookup(&mut self, blocks: &[u64], len: usize) -> usize {
        if !self.enabled() || len == 0 {
            return 0;
        }
        let usable = (len - 1) / self.block;
        let mut hit = 0;
        for &h in blocks.iter().take(usable) {
            if !self.used.contains_key(&h) {
                break;
            }
            self.touch(h);
            hit += 1;
        }
        hit * self.block
    }

    /// Store blocks (a computed prompt, or a prompt with its reply), evicting the least
    /// recently used blocks beyond the capacity.
    pub(crate) fn insert(&mut self, blocks: &[u64]) {
        if !self.enabled() {
            return;
        }
        for &h in blocks {
            self.touch(h);
        }
        while self.used.len() > self.capacity {
            let Some((_, h)) = self.lru.pop_first() else { break };
            self.used.remove(&h);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.used.clear();
        self.lru.clear();
    }
}

/// The prompt as prefix-cache tokens: each word of each message tagged with its role (so
/// the same words from another role differ), the words of a text prompt, or token ids.
/// As many tokens as the simulator counts in the prompt (without a tokenizer).
pub fn body_tokens(v: &Value, image_tokens: u64) -> Vec<u64> {
    fn push(out: &mut Vec<u64>, role: &str, s: &str) {
        out.extend(s.split_whitespace().map(|w| word_token(role, w)));
    }
    let mut out = Vec::new();
    if let Some(msgs) = v.get("messages").and_then(Value::as_array) {
        for m in msgs {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            match m.get("content") {
                Some(Value::String(s)) => push(&mut out, role, s),
                Some(Value::Array(parts)) => {
                    for p in parts {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            push(&mut out, role, t);
                        }
                        if let Some(url) = p.pointer("/image_url/url").and_then(Value::as_str) {
                            // An image is `image_tokens` tokens, the same for the same image.
                            let h = word_token("image", url);
                            out.extend((0..image_tokens).map(|i| h.wrapping_add(i)));
                        }
                    }
                }
                _ => {}
            }
        }
        return out;
    }
    match v.get("prompt") {
        Some(Value::String(s)) => push(&mut out, "", s),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => {
            out.extend(a.iter().map(|n| n.as_u64().unwrap_or(0)));
        }
        Some(Value::Array(a)) => {
            for p in a {
                push(&mut out, "", p.as_str().unwrap_or(""));
            }
        }
        _ => {}
    }
    out
}

/// Blocks the twin of `m` keeps in its prefix cache: its whole KV budget, or none when the
/// server showed no prefix cache.
pub(crate) fn twin_blocks(m: &ServerModel) -> usize {
    if m.prefix_cache {
        usize::try_from(m.kv_tokens / u64::from(m.block_tokens.max(1))).unwrap_or(usize::MAX)
    } else {
        0
    }
}

/// A prompt's cached tokens in the server's tokens: `hit` of its `units` cache tokens (words
/// or ids) were found, and the server counts `prompt_tokens`; a cached prefix is that share
/// of the prompt (a word is about 1.3 tokens of a BPE tokenizer), never the whole of it.
pub fn cached_share(prompt_tokens: u64, hit: usize, units: usize) -> u64 {
    if units == 0 || hit == 0 {
        return 0;
    }
    let share = (u128::from(prompt_tokens) * hit as u128 / units as u128) as u64;
    share.min(prompt_tokens.saturating_sub(1))
}

/// The prefix cache of a live twin, for a prediction of the same workload: the same blocks,
/// capacity and eviction, fed the prompts in the order the twin would see them.
#[derive(Debug)]
pub struct TwinCache(PrefixCache);

impl TwinCache {
    /// The cache the live twin of `m` keeps (empty and disabled when `m.prefix_cache` is
    /// false).
    pub fn new(m: &ServerModel) -> Self {
        Self(PrefixCache::new(m.block_tokens, twin_blocks(m)))
    }

    pub fn enabled(&self) -> bool {
        self.0.enabled()
    }

    /// A prompt arrives (its cache tokens, in order): of its `prompt_tokens` server tokens,
    /// those served from cache; its blocks are then cached.
    pub fn serve(&mut self, tokens: &[u64], prompt_tokens: u64) -> u64 {
        if !self.enabled() {
            return 0;
        }
        let blocks = self.0.blocks(tokens);
        let hit = self.0.lookup(&blocks, tokens.len());
        self.0.insert(&blocks);
        cached_share(prompt_tokens, hit, tokens.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_hits_eviction_and_last_token() {
        let mut c = PrefixCache::new(4, 3);
        let t: Vec<u64> = (0..12).collect();
        let b = c.blocks(&t);
        assert_eq!(b.len(), 3);
        assert_eq!(c.lookup(&b, 12), 0);
        c.insert(&b);
        // the whole prompt is cached, but the last token is computed: 2 blocks of 3
        assert_eq!(c.lookup(&b, 12), 8);
        // a prompt that extends it hits all three blocks
        let t2: Vec<u64> = (0..14).collect();
        assert_eq!(c.lookup(&c.blocks(&t2), 14), 12);
        // a different first token changes every block hash
        let mut t3 = t.clone();
        t3[0] = 99;
        assert_eq!(c.lookup(&c.blocks(&t3), 12), 0);
        // inserting three new blocks evicts the old ones (capacity 3)
        c.insert(&c.blocks(&t3));
        assert_eq!(c.lookup(&b, 13), 0);
        c.clear();
        assert_eq!(c.lookup(&c.blocks(&t3), 13), 0);
    }
}

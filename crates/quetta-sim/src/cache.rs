//! The simulator's prefix cache: prompt tokens in fixed-size blocks, each block named by a
//! hash chained over every token before it (as vLLM's automatic prefix caching does), with
//! a capacity in blocks and least-recently-used eviction.
//!
//! A token is a word of a message (whitespace-separated) tagged with the message's role,
//! or a token id; see `tokens` in `server.rs`.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

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

/// The hash of one token (deterministic across runs: `DefaultHasher::new` has fixed keys).
pub(crate) fn token(role: &str, word: &str) -> u64 {
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

//! One plan, many processes: shard `index` of `count` runs exactly the requests (and
//! sessions) whose global index is `index` modulo `count`, so the union of all shards is the
//! plan one process would run, each request once. The schedule is closed-form (seeded,
//! absolute offsets), so every shard computes the same global plan and keeps its own slice:
//! nothing has to be handed out at run time.
//!
//! - open loop and replays: request `i` of the global schedule, at its global offset. The
//!   server sees the union, which is the global process itself (Poisson at `R` stays Poisson
//!   at `R`); each shard alone sends every N-th arrival, `R/N` on average, with gaps that are
//!   sums of N of the global gaps (Erlang-N for Poisson), which keeps the shards' loads
//!   equal to within one request;
//! - closed loop: concurrency and count split the same way (`share`), each shard taking
//!   global indices `index, index + count, …`;
//! - sessions: by session index; their turns' request ids are `local * count + index`, so
//!   ids stay unique across shards.

use std::fmt;

/// Why a shard or a split of a load across shards is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    #[error("{given:?} is not K/N (e.g. 0/4)")]
    NotKOfN { given: String },
    #[error("{given:?}: {what} {value:?} is not a number")]
    NotANumber { given: String, what: &'static str, value: String },
    #[error("the number of shards must be at least 1")]
    NoShards,
    #[error("shard {index} does not exist in {count} shards (0 to {})", count - 1)]
    NoSuchShard { index: u32, count: u32 },
    /// A concurrency (`what`) smaller than the number of shards.
    #[error("{what} {total} cannot be split across {count} shards: give at least one per shard")]
    TooFewToSplit { what: &'static str, total: usize, count: u32 },
}

/// Shard `index` of `count` (`0/1`: the whole plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Self::WHOLE
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = ShardError;
    /// `K/N`, shard K (from 0) of N.
    fn from_str(s: &str) -> Result<Self, ShardError> {
        let (k, n) =
            s.split_once('/').ok_or_else(|| ShardError::NotKOfN { given: s.to_owned() })?;
        let num = |v: &str, what: &'static str| {
            v.trim().parse::<u32>().map_err(|_| ShardError::NotANumber {
                given: s.to_owned(),
                what,
                value: v.to_owned(),
            })
        };
        Shard::new(num(k, "shard")?, num(n, "shard count")?)
    }
}

impl Shard {
    /// The whole plan, in one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`; refused unless `index < count`.
    pub fn new(index: u32, count: u32) -> Result<Self, ShardError> {
        if count == 0 {
            return Err(ShardError::NoShards);
        }
        if index >= count {
            return Err(ShardError::NoSuchShard { index, count });
        }
        Ok(Self { index, count })
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    pub fn is_whole(self) -> bool {
        self.count == 1
    }

    /// Whether global index `i` is this shard's.
    pub fn owns(self, i: u64) -> bool {
        i % u64::from(self.count) == u64::from(self.index)
    }

    /// The global index of this shard's `local`-th item.
    pub fn global(self, local: u64) -> u64 {
        local.saturating_mul(u64::from(self.count)).saturating_add(u64::from(self.index))
    }

    /// How many of the global indices `0..total` are this shard's.
    pub fn share(self, total: u64) -> u64 {
        let n = u64::from(self.count);
        total / n + u64::from(u64::from(self.index) < total % n)
    }

    /// This shard's part of a concurrency (or of any count split among shards).
    pub fn share_usize(self, total: usize) -> usize {
        usize::try_from(self.share(total as u64)).unwrap_or(usize::MAX)
    }

    /// This shard's global indices among `first..first + count`, in order.
    pub fn indices(self, first: u64, count: u64) -> impl Iterator<Item = u64> {
        let (a, b) = (self.share(first), self.share(first.saturating_add(count)));
        (a..b).map(move |l| self.global(l))
    }

    /// How many of `first..first + count` are this shard's.
    pub fn share_of(self, first: u64, count: u64) -> u64 {
        self.share(first.saturating_add(count)) - self.share(first)
    }

    /// The global index of this shard's `k`-th item at or after global index `first`.
    pub fn nth_from(self, first: u64, k: u64) -> u64 {
        self.global(self.share(first).saturating_add(k))
    }

    /// This shard's items of `all`, whose item `j` has the global index `first + j`.
    pub fn pick<T: Copy>(self, first: u64, all: &[T]) -> Vec<T> {
        self.indices(first, all.len() as u64).map(|g| all[(g - first) as usize]).collect()
    }

    /// A concurrency that every shard can take a part of, or why not.
    pub fn check_split(self, what: &'static str, total: usize) -> Result<(), ShardError> {
        if (total as u64) < u64::from(self.count) {
            return Err(ShardError::TooFewToSplit { what, total, count: self.count });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_refuse() {
        assert_eq!("2/4".parse::<Shard>().unwrap(), Shard::new(2, 4).unwrap());
        assert_eq!("0/1".parse::<Shard>().unwrap(), Shard::WHOLE);
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert_eq!(
            "5/4".parse::<Shard>().unwrap_err(),
            ShardError::NoSuchShard { index: 5, count: 4 }
        );
        assert!("5/4".parse::<Shard>().unwrap_err().to_string().contains("0 to 3"));
    }

    #[test]
    fn shares_add_up_to_the_whole() {
        for n in 1..=64u32 {
            for total in [0u64, 1, 7, 63, 64, 65, 1000] {
                let sum: u64 = (0..n).map(|k| Shard::new(k, n).unwrap().share(total)).sum();
                assert_eq!(sum, total, "{total} over {n}");
                for k in 0..n {
                    let s = Shard::new(k, n).unwrap();
                    let owned = (0..total).filter(|i| s.owns(*i)).count() as u64;
                    assert_eq!(owned, s.share(total));
                    assert!((0..s.share(total)).all(|l| s.owns(s.global(l)) && s.global(l) < total));
                    for first in [0u64, 1, 5, 64] {
                        let v: Vec<u64> = s.indices(first, total).collect();
                        assert_eq!(v.len() as u64, s.share_of(first, total));
                        assert!(v.iter().all(|g| s.owns(*g) && (first..first + total).contains(g)));
                        assert!(v
                            .iter()
                            .enumerate()
                            .all(|(k, g)| s.nth_from(first, k as u64) == *g));
                    }
                }
            }
        }
    }
}

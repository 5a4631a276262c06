//! `quetta-shard`: the rendezvous of a run split across processes (`--shard K/N`).
//!
//! Every shard computes its own slice of one global, closed-form plan, so no broker hands
//! out work. What the shards still need is a meeting point, and that is shard 0: it runs a
//! [`Coordinator`] (one TCP listener) beside its own [`Member`], and every member, shard 0's
//! included, goes through the same steps over one connection:
//!
//! 1. **join**: `Hello` with its index, the shard count and the plan's fingerprint (the same
//!    flags give the same fingerprint; a shard run with other flags is refused, naming the
//!    difference's owner); then an NTP-style exchange (`Ping`/`Pong`, 16 rounds, the round
//!    with the shortest round trip kept) that gives the member's clock offset to shard 0.
//!    The coordinator answers `Joined` once all N have joined, or, at the join timeout,
//!    `Abort` naming the shards that never came.
//! 2. **start**: after its warmup each member says `Ready`; once all are ready shard 0
//!    sends `Start` with one instant on its own wall clock, a little ahead; each member
//!    converts it to its clock with the measured offset, sleeps and spins until it, and
//!    reports its start skew.
//! 3. **run**: each record goes to shard 0 as its request ends (`Record`, one JSON line),
//!    and the run's files at the end (`File`); shard 0 writes them into
//!    `OUT/shard-K/` as they come, so a shard that dies mid-run loses nothing it had
//!    measured. `Done` ends a member; shard 0 acknowledges with the count it received.
//!
//! **Who may join**: when the shards are given a [`ShardSecret`] (every shard the same),
//! `Hello` carries it and shard 0 refuses a connection without it before any check that
//! could tell the caller something; a refusal ends that connection only (an outsider
//! cannot call the run off), and [`Coordinator::refused`] lists each one (its address and
//! why) for the run's notes. The secret is compared in constant time and shown nowhere. It
//! travels in clear text: the shards' network is the cluster's own.
//!
//! Messages are JSON lines. The wall clock (`SystemTime`) is read only to exchange instants
//! between machines; everything measured within a run stays on the monotonic clock.

mod coordinator;
mod member;
mod wire;

pub use coordinator::{Coordinator, CoordinatorConfig, ShardEnd, ShardReport, Stopper};
pub use member::{ClockSync, Member, RecordSender, Started};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The secret every shard of a run is given (an environment variable, a Kubernetes
/// Secret); shard 0 refuses a member that does not bring it. `Debug` never shows it.
///
/// ```
/// let s = quetta_shard::ShardSecret::new("s3cret");
/// assert_eq!(format!("{s:?}"), "ShardSecret(<redacted>)");
/// ```
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ShardSecret(String);

impl ShardSecret {
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// Whether `given` is this secret, in time that does not depend on where they differ.
    pub(crate) fn admits(&self, given: Option<&ShardSecret>) -> bool {
        let (a, b) = (self.0.as_bytes(), given.map_or(&[][..], |g| g.0.as_bytes()));
        let mut diff = u8::from(a.len() != b.len());
        for (i, x) in a.iter().enumerate() {
            diff |= x ^ b.get(i).copied().unwrap_or(!x);
        }
        diff == 0
    }
}

impl std::fmt::Debug for ShardSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShardSecret(<redacted>)")
    }
}

/// A rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The coordinator could not listen, or a member could not reach it in time.
    #[error("{0}")]
    Connect(String),
    /// The rendezvous was called off (shards missing, a plan that differs, a shard gone).
    #[error("{0}")]
    Aborted(String),
    /// The other side broke the protocol or the connection broke.
    #[error("{0}")]
    Protocol(String),
    /// Shard 0 could not write what a shard sent.
    #[error("{0}")]
    Io(String),
}

/// Now on the wall clock, in nanoseconds since the Unix epoch.
pub fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// How far ahead of the last `Ready` shard 0 sets the common start: enough for the `Start`
/// message to reach every member over a few round trips.
pub(crate) fn start_lead(max_rtt_ns: u64) -> Duration {
    Duration::from_millis(200) + Duration::from_nanos(max_rtt_ns.saturating_mul(4))
}

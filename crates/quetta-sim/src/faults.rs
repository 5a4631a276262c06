//! Fault injection: per request with a probability, or on every Nth request.

use std::time::Duration;

use crate::Rng;

/// A way a response can go wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Answer with this HTTP status and a JSON error body (429 carries `Retry-After: 1`).
    Status(u16),
    /// Drop the connection before any response byte.
    ResetBeforeHeaders,
    /// Send the headers, then drop the connection.
    ResetAfterHeaders,
    /// Drop the connection halfway through the stream.
    ResetMidStream,
    /// Send nothing for this long halfway through the stream, then carry on.
    Stall(Duration),
    /// Send every frame one byte at a time, 1 ms apart.
    SlowDrip,
    /// A truncated JSON event halfway through.
    BadJson,
    /// Invalid UTF-8 inside an event halfway through.
    InvalidUtf8,
    /// A single event of 1.5 MiB halfway through.
    HugeEvent,
    /// Stop after the last token: no finish_reason, no usage, no `[DONE]`.
    NoDone,
    /// Leave out the usage chunk even when asked for it.
    NoUsage,
    /// An `{"error": ...}` event halfway through.
    ErrorEvent,
    /// A complete answer whose body stays open this long after `[DONE]` (a server slow to
    /// end its stream).
    Linger(Duration),
}

/// When a fault applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trigger {
    /// Each request independently with this probability (seeded).
    Probability(f64),
    /// Requests number N, 2N, 3N, ... (1-based arrival order).
    EveryNth(u64),
}

/// A fault and when it applies; the first matching rule wins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultRule {
    pub fault: Fault,
    pub trigger: Trigger,
}

impl std::str::FromStr for FaultRule {
    type Err = String;

    /// `KIND[@N|:P]`: `http429`, `http500`, `http503`, `reset-before-headers`,
    /// `reset-after-headers`, `reset-mid-stream`, `stall=SECONDS`, `linger=SECONDS`, `slow-drip`, `bad-json`,
    /// `invalid-utf8`, `huge-event`, `no-done`, `no-usage`, `error-event`; `@N` every Nth
    /// request, `:P` with probability P (default: every request).
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, trigger) = if let Some((k, n)) = s.split_once('@') {
            let n: u64 = n.parse().map_err(|_| format!("{s:?}: @N needs a whole number"))?;
            if n == 0 {
                return Err(format!("{s:?}: @N must be at least 1"));
            }
            (k, Trigger::EveryNth(n))
        } else if let Some((k, p)) = s.split_once(':') {
            let p: f64 = p.parse().map_err(|_| format!("{s:?}: :P needs a probability"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{s:?}: probability must be between 0 and 1"));
            }
            (k, Trigger::Probability(p))
        } else {
            (s, Trigger::EveryNth(1))
        };
        let fault = match kind {
            "http429" => Fault::Status(429),
            "http500" => Fault::Status(500),
            "http503" => Fault::Status(503),
            "reset-before-headers" => Fault::ResetBeforeHeaders,
            "reset-after-headers" => Fault::ResetAfterHeaders,
            "reset-mid-stream" => Fault::ResetMidStream,
            "slow-drip" => Fault::SlowDrip,
            "bad-json" => Fault::BadJson,
            "invalid-utf8" => Fault::InvalidUtf8,
            "huge-event" => Fault::HugeEvent,
            "no-done" => Fault::NoDone,
            "no-usage" => Fault::NoUsage,
            "error-event" => Fault::ErrorEvent,
            k if k.starts_with("linger=") => {
                let secs: f64 = k[7..].parse().map_err(|_| format!("{s:?}: linger=SECONDS"))?;
                if !(secs.is_finite() && secs >= 0.0) {
                    return Err(format!("{s:?}: linger=SECONDS must be non-negative"));
                }
                Fault::Linger(Duration::from_secs_f64(secs))
            }
            k if k.starts_with("stall=") => {
                let secs: f64 = k[6..].parse().map_err(|_| format!("{s:?}: stall=SECONDS"))?;
                if !(secs.is_finite() && secs >= 0.0) {
                    return Err(format!("{s:?}: stall=SECONDS must be non-negative"));
                }
                Fault::Stall(Duration::from_secs_f64(secs))
            }
            _ => return Err(format!("unknown fault {kind:?}")),
        };
        Ok(Self { fault, trigger })
    }
}

/// The fault for request number `seq` (0-based), if any.
pub(crate) fn pick(rules: &[FaultRule], seed: u64, seq: u64) -> Option<Fault> {
    rules.iter().enumerate().find_map(|(i, r)| {
        let hit = match r.trigger {
            Trigger::EveryNth(n) => (seq + 1) % n == 0,
            Trigger::Probability(p) => {
                Rng::new(
                    seed ^ seq.wrapping_mul(0xA24B_AED4_963E_E407) ^ (i as u64).rotate_left(32),
                )
                .f64()
                    < p
            }
        };
        hit.then_some(r.fault)
    })
}

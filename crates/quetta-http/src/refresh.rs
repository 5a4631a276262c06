//! Credentials that expire (AWS session credentials, Google access tokens), fetched once
//! before a run and refreshed in the background before they expire, so no request waits
//! for a fetch and none is sent with an expired secret while a refresh can succeed.
//!
//! The refresh happens at `expiry − margin`, where the margin is a quarter of the secret's
//! lifetime, at most five minutes (a one-hour token is renewed 5 min before it expires, a
//! 4-second test token after 3 s). A failed refresh is retried after a second (at most
//! every quarter of the time left); the old secret is used until it expires, after which
//! [`Refreshing::current`] fails with the last refresh error.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

/// A secret and when it expires (`None`: it does not, as far as the source says).
#[derive(Clone)]
pub struct Expiring<T> {
    pub value: T,
    pub expires: Option<SystemTime>,
}

impl<T> std::fmt::Debug for Expiring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expiring").field("expires", &self.expires).finish_non_exhaustive()
    }
}

/// No valid secret: the first fetch failed, or the secret expired and every refresh since
/// failed. The source's own words are kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefreshError {
    /// The first fetch failed (nothing can be sent without it).
    #[error("{0}")]
    Fetch(String),
    /// The secret expired and could not be refreshed; `last_error` is the last refresh's.
    #[error("credentials expired and could not be refreshed{}", last_error.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Expired { last_error: Option<String> },
}

struct State<T> {
    current: Expiring<T>,
    last_error: Option<String>,
}

/// A secret kept fresh by a background task. Cheap to clone; the task ends when the last
/// clone is dropped. `Debug` never shows the secret.
pub struct Refreshing<T> {
    state: Arc<RwLock<State<T>>>,
    fetches: Arc<AtomicU64>,
}

impl<T> Clone for Refreshing<T> {
    fn clone(&self) -> Self {
        Self { state: self.state.clone(), fetches: self.fetches.clone() }
    }
}

impl<T> std::fmt::Debug for Refreshing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refreshing")
            .field("fetches", &self.fetches.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// When to refresh a secret fetched at `fetched` that expires at `expires`.
pub fn refresh_at(fetched: SystemTime, expires: SystemTime) -> SystemTime {
    let life = expires.duration_since(fetched).unwrap_or_default();
    let margin = (life / 4).min(Duration::from_secs(300));
    expires.checked_sub(margin).unwrap_or(expires)
}

impl<T: Clone + Send + Sync + 'static> Refreshing<T> {
    /// Fetch the secret once (an error here is returned: nothing can be sent without it)
    /// and start refreshing it in the background. Needs a tokio runtime.
    pub async fn start<F, Fut, E>(fetch: F) -> Result<Self, RefreshError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Expiring<T>, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let first = fetch().await.map_err(|e| RefreshError::Fetch(e.to_string()))?;
        let fetched = SystemTime::now();
        let me = Self {
            state: Arc::new(RwLock::new(State { current: first.clone(), last_error: None })),
            fetches: Arc::new(AtomicU64::new(1)),
        };
        if let Some(exp) = first.expires {
            let weak = Arc::downgrade(&me.state);
            let fetches = me.fetches.clone();
            tokio::spawn(refresh_loop(weak, fetches, fetch, refresh_at(fetched, exp)));
        }
        Ok(me)
    }

    /// A secret that never expires (a static token given by the user).
    pub fn fixed(value: T) -> Self {
        Self {
            state: Arc::new(RwLock::new(State {
                current: Expiring { value, expires: None },
                last_error: None,
            })),
            fetches: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The current secret, or why there is none valid (expired and not refreshed).
    pub fn current(&self) -> Result<T, RefreshError> {
        let s = self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.current.expires {
            Some(e) if e <= SystemTime::now() => {
                Err(RefreshError::Expired { last_error: s.last_error.clone() })
            }
            _ => Ok(s.current.value.clone()),
        }
    }

    /// When the current secret expires.
    pub fn expires(&self) -> Option<SystemTime> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner).current.expires
    }

    /// How many times the secret was fetched (the first fetch included).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }
}

async fn refresh_loop<T, F, Fut, E>(
    state: Weak<RwLock<State<T>>>,
    fetches: Arc<AtomicU64>,
    fetch: F,
    mut at: SystemTime,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<Expiring<T>, E>>,
    E: std::fmt::Display,
{
    loop {
        let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::time::sleep(wait).await;
        if state.strong_count() == 0 {
            return;
        }
        let r = fetch().await;
        fetches.fetch_add(1, Ordering::Relaxed);
        let Some(st) = state.upgrade() else { return };
        let mut s = st.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = SystemTime::now();
        match r {
            Ok(fresh) => {
                s.last_error = None;
                let next = fresh.expires.map(|e| refresh_at(now, e));
                s.current = fresh;
                match next {
                    Some(n) => at = n,
                    None => return,
                }
            }
            Err(e) => {
                s.last_error = Some(e.to_string());
                let left =
                    s.current.expires.and_then(|x| x.duration_since(now).ok()).unwrap_or_default();
                at = now + (left / 4).clamp(Duration::from_millis(250), Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_margin_is_a_quarter_of_the_lifetime_at_most_five_minutes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = refresh_at(t0, t0 + Duration::from_secs(3600));
        assert_eq!(hour, t0 + Duration::from_secs(3300));
        let short = refresh_at(t0, t0 + Duration::from_secs(4));
        assert_eq!(short, t0 + Duration::from_secs(3));
    }
}

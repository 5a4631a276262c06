//! Sub-millisecond deadlines on the simulator's own runtime threads.
//!
//! tokio's timer wheel has a resolution of one millisecond: a deadline fires at the next
//! millisecond tick after it, so a 5 ms gap between tokens came out as 5.2 ms, and then as
//! 4.2 ms when the absolute schedule made up for it. On Linux a [`Deadline`] is a `timerfd`
//! (the kernel's high-resolution timer, armed with no slack) registered with the runtime's
//! reactor, armed 200 µs before the deadline: an idle (virtual) CPU wakes from it 20 to
//! 150 µs late, so the task spends the rest awake, yielding to every other task of its
//! runtime until the deadline has passed. That costs CPU, so the process's deadlines share a
//! budget of 5 % of one CPU; past it (many streams due at distinct instants) a deadline waits
//! on the timerfd alone. Elsewhere, or when the kernel refuses a timerfd, it is tokio's
//! sleep. The fixed-delay streams and the twin's engine steps wait on it (docs/PERFORMANCE.md,
//! Timing accuracy). The timerfd is made at the first wait, so a stream that never waits (a
//! zero ITL) costs no file descriptor.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// How long before its deadline a [`Deadline`] wakes to spend the rest awake.
#[cfg(target_os = "linux")]
const SPIN_EARLY: std::time::Duration = std::time::Duration::from_micros(200);

/// The time the process's deadlines may spend awake: 5 % of one CPU, in bursts of up to
/// 20 ms. Past it a deadline waits on the timerfd alone and comes 20 to 150 µs late, rather
/// than the simulator taking the client's CPU.
#[cfg(target_os = "linux")]
static SPIN_BUDGET: SpinBudget = SpinBudget(std::sync::Mutex::new(None));

/// A token bucket of CPU time: (last refill, seconds left).
#[cfg(target_os = "linux")]
struct SpinBudget(std::sync::Mutex<Option<(Instant, f64)>>);

#[cfg(target_os = "linux")]
impl SpinBudget {
    const SHARE: f64 = 0.05;
    const BURST_S: f64 = 0.020;

    /// Take `d` of awake time; false when the budget has less left.
    fn take(&self, d: std::time::Duration) -> bool {
        let now = Instant::now();
        let mut g = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (last, left) = g.get_or_insert((now, Self::BURST_S));
        let left_now = (*left + now.saturating_duration_since(*last).as_secs_f64() * Self::SHARE)
            .min(Self::BURST_S);
        let ok = left_now >= d.as_secs_f64();
        *g = Some((now, if ok { left_now - d.as_secs_f64() } else { left_now }));
        ok
    }
}

/// A deadline's timerfd, made at its first wait.
#[cfg(target_os = "linux")]
enum Fd {
    Unmade,
    Made(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    /// The kernel refused one: tokio's sleep instead.
    Refused,
}

/// A reusable deadline; poll it with [`Deadline::poll_until`].
pub(crate) struct Deadline {
    #[cfg(target_os = "linux")]
    fd: Fd,
    /// The instant the timerfd is armed for.
    #[cfg(target_os = "linux")]
    armed: Option<Instant>,
    /// The deadline the task is awake for, yielding until it passes.
    #[cfg(target_os = "linux")]
    spinning: Option<Instant>,
    fallback: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(target_os = "linux")]
            fd: Fd::Unmade,
            #[cfg(target_os = "linux")]
            armed: None,
            #[cfg(target_os = "linux")]
            spinning: None,
            fallback: None,
        }
    }

    /// Ready once `at` has passed; else registers the task to be woken then.
    pub(crate) fn poll_until(&mut self, at: Instant, cx: &mut Context<'_>) -> Poll<()> {
        let now = Instant::now();
        if now >= at {
            return Poll::Ready(());
        }
        #[cfg(target_os = "linux")]
        if matches!(self.fd, Fd::Unmade) {
            self.fd = timerfd().map_or(Fd::Refused, Fd::Made);
        }
        #[cfg(target_os = "linux")]
        if matches!(self.fd, Fd::Made(_)) {
            // The last stretch is spent awake: a timerfd wakes an idle (virtual) CPU 20 to
            // 150 µs late, so it is armed `SPIN_EARLY` before the deadline and the task then
            // yields to every other task until the deadline, within the spin budget.
            if self.spinning == Some(at) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let wake = match at.checked_sub(SPIN_EARLY) {
                Some(w) if w > now => w,
                _ if SPIN_BUDGET.take(at - now) => {
                    self.spinning = Some(at);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                _ => at,
            };
            match self.poll_fd(wake, cx) {
                Some(Poll::Ready(())) => return self.poll_until(at, cx),
                Some(p) => return p,
                None => self.fd = Fd::Refused,
            }
        }
        match self.fallback.as_mut() {
            Some(s) => s.as_mut().reset(at.into()),
            None => self.fallback = Some(Box::pin(tokio::time::sleep_until(at.into()))),
        }
        match self.fallback.as_mut() {
            Some(s) => s.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }

    /// Wait until `at`.
    pub(crate) async fn until(&mut self, at: Instant) {
        std::future::poll_fn(|cx| self.poll_until(at, cx)).await;
    }

    /// The timerfd's answer; `None` when it failed (the fallback takes over).
    #[cfg(target_os = "linux")]
    fn poll_fd(&mut self, at: Instant, cx: &mut Context<'_>) -> Option<Poll<()>> {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags};
        let Fd::Made(fd) = &self.fd else { return None };
        if self.armed != Some(at) {
            // relative to now: std's Instant is CLOCK_MONOTONIC, but its value is private
            let left = at
                .saturating_duration_since(Instant::now())
                .max(std::time::Duration::from_nanos(1));
            let spec = Itimerspec {
                it_interval: rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 },
                it_value: rustix::time::Timespec {
                    tv_sec: left.as_secs() as _,
                    tv_nsec: left.subsec_nanos().into(),
                },
            };
            timerfd_settime(fd.get_ref(), TimerfdTimerFlags::empty(), &spec).ok()?;
            self.armed = Some(at);
        }
        loop {
            match fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    let mut buf = [0u8; 8];
                    match rustix::io::read(guard.get_inner(), &mut buf) {
                        Ok(_) => {
                            self.armed = None;
                            if Instant::now() >= at {
                                return Some(Poll::Ready(()));
                            }
                            // woke early (the clocks differ by a few ns): arm again
                            return self.poll_fd(at, cx);
                        }
                        Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                        Err(_) => return None,
                    }
                }
                Poll::Ready(Err(_)) => return None,
                Poll::Pending => return Some(Poll::Pending),
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn timerfd() -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
    let fd =
        timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)
            .ok()?;
    // Deprecated as unsound for a type whose `as_raw_fd` may change or whose fd may close
    // while registered; an `OwnedFd` owned by the `AsyncFd` does neither (the safe form,
    // `register_with_interest`, is `unsafe`, which the workspace forbids).
    #[allow(deprecated)]
    let fd = tokio::io::unix::AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok()?;
    Some(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn deadlines_are_met_to_a_fraction_of_a_millisecond() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut d = Deadline::new();
            let mut late = Vec::new();
            let start = Instant::now();
            for i in 1..=100u32 {
                let at = start + Duration::from_micros(2_300) * i;
                d.until(at).await;
                late.push(Instant::now().duration_since(at));
            }
            late.sort();
            // never early; the median well under tokio's millisecond
            assert!(late[50] < Duration::from_micros(400), "median lateness {:?}", late[50]);
        });
    }
}

//! Sub-millisecond deadlines on the simulator's own runtime threads.
//!
//! tokio's timer wheel has a resolution of one millisecond: a deadline fires at the next
//! millisecond tick after it, so a 5 ms gap between tokens came out as 5.2 ms, and then as
//! 4.2 ms when the absolute schedule made up for it. On Linux a [`Deadline`] is a `timerfd`
//! (the kernel's high-resolution timer, armed with no slack) registered with the runtime's
//! reactor: the worker thread that waits in `epoll` wakes when the deadline passes, to the
//! microsecond on an idle machine, and no thread spins. Elsewhere, or when the kernel
//! refuses a timerfd, it is tokio's sleep. The twin's engine steps use it; the fixed-delay
//! streams do not yet (docs/PERFORMANCE.md, Timing accuracy).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// A reusable deadline; poll it with [`Deadline::poll_until`].
pub(crate) struct Deadline {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    /// The instant the timerfd is armed for.
    #[cfg(target_os = "linux")]
    armed: Option<Instant>,
    fallback: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(target_os = "linux")]
            fd: timerfd(),
            #[cfg(target_os = "linux")]
            armed: None,
            fallback: None,
        }
    }

    /// Ready once `at` has passed; else registers the task to be woken then.
    pub(crate) fn poll_until(&mut self, at: Instant, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= at {
            return Poll::Ready(());
        }
        #[cfg(target_os = "linux")]
        if self.fd.is_some() {
            match self.poll_fd(at, cx) {
                Some(p) => return p,
                None => self.fd = None,
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
        let fd = self.fd.as_ref()?;
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

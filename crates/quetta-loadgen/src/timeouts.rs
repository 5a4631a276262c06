//! Per-phase timeouts around any engine's stream, written once (as a tower layer would be):
//! first byte (the first event after the request left), first token, idle (the longest
//! silence between two events once the answer started) and total. An adapter enforces only
//! the connect phase, which only it can see. On expiry the inner stream is dropped (which
//! cancels the request) and the stream ends with [`EngineError::Timeout`]. After the inner
//! stream's terminal event no limit applies: polls go on to the inner stream, which may
//! still be finishing its connection (an HTTP body drained for reuse).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_core::Stream;
use quetta_engine::{EngineError, EventKind, EventStream, TimedEvent, TimeoutPhase, Timeouts};
use tokio::time::Sleep;

/// An engine with per-phase timeouts around every stream of another one (what the runner
/// puts around the engine it drives when the run has timeouts).
pub struct WithTimeouts {
    inner: std::sync::Arc<dyn quetta_engine::Engine>,
    t: Timeouts,
}

impl std::fmt::Debug for WithTimeouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithTimeouts")
            .field("inner", &self.inner.name())
            .field("t", &self.t)
            .finish()
    }
}

impl WithTimeouts {
    pub fn new(inner: std::sync::Arc<dyn quetta_engine::Engine>, t: Timeouts) -> Self {
        Self { inner, t }
    }
}

impl quetta_engine::Engine for WithTimeouts {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn send(&self, request: quetta_engine::EngineRequest) -> EventStream {
        apply(self.inner.send(request), self.t)
    }
}

/// Whether any phase the runner enforces has a limit.
pub(crate) fn any(t: &Timeouts) -> bool {
    t.first_byte.is_some() || t.first_token.is_some() || t.idle.is_some() || t.total.is_some()
}

/// `inner` with the limits of `t` (started now).
pub(crate) fn apply(inner: EventStream, t: Timeouts) -> EventStream {
    Box::pin(Timed {
        inner: Some(inner),
        ended: false,
        t,
        start: Instant::now(),
        last: None,
        frame: 0,
        first_token: false,
        sleep: None,
        deadline: None,
    })
}

struct Timed {
    inner: Option<EventStream>,
    /// The terminal event went out: polls only finish the inner stream.
    ended: bool,
    t: Timeouts,
    start: Instant,
    /// The last event after the request left (the idle clock's start).
    last: Option<Instant>,
    /// The last event's frame (the timeout error keeps it: frames never go back).
    frame: u64,
    first_token: bool,
    sleep: Option<Pin<Box<Sleep>>>,
    deadline: Option<(Instant, TimeoutPhase)>,
}

impl Timed {
    /// The earliest limit now in force.
    fn next_deadline(&self) -> Option<(Instant, TimeoutPhase)> {
        let mut best: Option<(Instant, TimeoutPhase)> = None;
        let mut consider = |d: Option<std::time::Duration>, from: Instant, p| {
            if let Some(at) = d.and_then(|d| from.checked_add(d)) {
                if best.is_none_or(|b| at < b.0) {
                    best = Some((at, p));
                }
            }
        };
        consider(self.t.total, self.start, TimeoutPhase::Total);
        match self.last {
            None => consider(self.t.first_byte, self.start, TimeoutPhase::FirstByte),
            Some(l) => consider(self.t.idle, l, TimeoutPhase::Idle),
        }
        if !self.first_token {
            consider(self.t.first_token, self.start, TimeoutPhase::FirstToken);
        }
        best
    }

    fn arm(&mut self) {
        let next = self.next_deadline();
        if next.map(|n| n.0) == self.deadline.map(|d| d.0) {
            self.deadline = next;
            return;
        }
        self.deadline = next;
        match (next, self.sleep.as_mut()) {
            (Some((at, _)), Some(s)) => s.as_mut().reset(at.into()),
            (Some((at, _)), None) => {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(at.into())));
            }
            (None, _) => self.sleep = None,
        }
    }
}

impl Stream for Timed {
    type Item = TimedEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TimedEvent>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        if this.ended {
            return inner.as_mut().poll_next(cx);
        }
        if let Poll::Ready(ev) = inner.as_mut().poll_next(cx) {
            let Some(ev) = ev else {
                this.inner = None;
                return Poll::Ready(None);
            };
            if ev.kind.is_terminal() {
                this.ended = true;
                this.sleep = None;
                return Poll::Ready(Some(ev));
            }
            if !matches!(ev.kind, EventKind::RequestWritten) {
                this.last = Some(ev.at.max(this.last.unwrap_or(ev.at)));
            }
            this.first_token |= ev.kind.is_token();
            this.frame = ev.frame;
            this.arm();
            return Poll::Ready(Some(ev));
        }
        if this.deadline.is_none() && this.sleep.is_none() {
            this.arm();
        }
        let Some(s) = this.sleep.as_mut() else { return Poll::Pending };
        if s.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let phase = this.deadline.map_or(TimeoutPhase::Total, |d| d.1);
        this.inner = None; // cancels the request
        this.sleep = None;
        let at = this.last.map_or_else(Instant::now, |l| Instant::now().max(l));
        Poll::Ready(Some(TimedEvent::new(
            at,
            this.frame,
            EventKind::Error(EngineError::Timeout(phase)),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quetta_engine::stream::events;
    use quetta_engine::testing::{check_contract, collect};
    use quetta_engine::Delta;
    use std::time::Duration;

    /// A stream that sends headers, then `tokens` tokens `gap` apart, then ends.
    fn slow(first: Duration, gap: Duration, tokens: usize) -> EventStream {
        events(move |mut tx| async move {
            tokio::time::sleep(first).await;
            tx.headers(200);
            for _ in 0..tokens {
                tokio::time::sleep(gap).await;
                tx.send(EventKind::Content(Delta::bytes(1)));
            }
            tx.end(None);
        })
    }

    fn phase(ev: &[TimedEvent]) -> Option<TimeoutPhase> {
        match &ev.last()?.kind {
            EventKind::Error(EngineError::Timeout(p)) => Some(*p),
            _ => None,
        }
    }

    #[tokio::test]
    async fn each_phase_ends_a_stream_that_exceeds_it() {
        let ms = Duration::from_millis;
        let limit = |first_byte, first_token, idle, total| Timeouts {
            first_byte,
            first_token,
            idle,
            total,
        };
        let cases = [
            (
                limit(Some(ms(20)), None, None, None),
                slow(ms(80), ms(1), 2),
                Some(TimeoutPhase::FirstByte),
            ),
            (
                limit(None, Some(ms(40)), None, None),
                slow(ms(1), ms(80), 2),
                Some(TimeoutPhase::FirstToken),
            ),
            (
                limit(None, None, Some(ms(30)), None),
                slow(ms(1), ms(60), 3),
                Some(TimeoutPhase::Idle),
            ),
            (
                limit(None, None, None, Some(ms(50))),
                slow(ms(1), ms(20), 10),
                Some(TimeoutPhase::Total),
            ),
            (limit(None, None, Some(ms(200)), None), slow(ms(1), ms(5), 5), None),
        ];
        for (limits, stream, want) in cases {
            let ev = collect(apply(stream, limits)).await;
            check_contract(&ev).unwrap();
            assert_eq!(phase(&ev), want, "{limits:?}: {:?}", ev.last());
        }
    }
}

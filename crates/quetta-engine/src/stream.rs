//! Helpers that turn an adapter's own code into an [`EventStream`].
//!
//! [`events`] runs an async block that sends events through an [`EventSender`]; [`channel`]
//! gives the two halves for an adapter that produces events elsewhere (a task, a thread, a
//! callback). Either way the stream keeps the invariants of [`crate::Engine`] for the author:
//! a stamp never goes backwards (a later event stamped earlier is moved up to its
//! predecessor's stamp), nothing follows the first terminal event, and a producer that stops
//! without `End` or `Error` ends the stream with a protocol error instead of leaving the load
//! generator waiting. Dropping the stream drops the producer (the request is cancelled).
//!
//! ```
//! use quetta_engine::stream::events;
//! use quetta_engine::{Delta, EventKind, Usage};
//!
//! // An engine's `send` can return this: two tokens, usage, end.
//! let stream = events(|mut tx| async move {
//!     tx.headers(200);
//!     for word in ["hello", "world"] {
//!         tx.send(EventKind::Content(Delta::text(word)));
//!     }
//!     tx.send(EventKind::Usage(Usage::tokens(Some(3), Some(2))));
//!     tx.end(Some("stop"));
//! });
//! # let _ = stream;
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures_core::Stream;

use crate::{ConnectionInfo, EngineError, EventKind, EventStream, TimedEvent};

/// The sending half: stamps events and hands them to the stream.
#[derive(Debug)]
pub struct EventSender {
    tx: UnboundedSender<TimedEvent>,
    frame: u64,
}

impl EventSender {
    /// Send `kind`, stamped now, as the next frame (response headers and the request-written
    /// mark keep frame 0). Stamp when the bytes arrive, before parsing them: for an adapter
    /// that parses first, [`EventSender::send_at`] takes the arrival time.
    pub fn send(&mut self, kind: EventKind) {
        self.send_at(Instant::now(), kind);
    }

    /// Send `kind` whose bytes arrived at `at`.
    pub fn send_at(&mut self, at: Instant, kind: EventKind) {
        let frame = match kind {
            EventKind::Headers { .. } | EventKind::RequestWritten => 0,
            _ => {
                self.frame += 1;
                self.frame
            }
        };
        // The receiver is gone when the stream was dropped (the request was cancelled).
        let _ = self.tx.unbounded_send(TimedEvent::new(at, frame, kind));
    }

    /// Response headers with `status` (no connection details, no kept headers).
    pub fn headers(&mut self, status: u16) {
        self.send(EventKind::Headers {
            status,
            connection: ConnectionInfo::default(),
            headers: Vec::new(),
        });
    }

    /// The normal end of the answer.
    pub fn end(&mut self, finish_reason: Option<&str>) {
        self.send(EventKind::End {
            finish_reason: finish_reason.map(str::to_owned),
            streamed: true,
        });
    }

    /// The request failed.
    pub fn error(&mut self, e: EngineError) {
        self.send(EventKind::Error(e));
    }

    /// Whether the stream is still read (false once the request was cancelled).
    pub fn is_open(&self) -> bool {
        !self.tx.is_closed()
    }
}

/// A stream fed by an [`EventSender`], keeping the engine invariants (see the module docs).
struct Guarded {
    producer: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    rx: UnboundedReceiver<TimedEvent>,
    last: Option<Instant>,
    done: bool,
}

impl Stream for Guarded {
    type Item = TimedEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TimedEvent>> {
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut self.rx).poll_next(cx) {
                Poll::Ready(Some(mut ev)) => {
                    if let Some(last) = self.last {
                        ev.at = ev.at.max(last);
                    }
                    self.last = Some(ev.at);
                    if ev.kind.is_terminal() {
                        self.done = true;
                        self.producer = None;
                    }
                    return Poll::Ready(Some(ev));
                }
                Poll::Ready(None) => {
                    self.done = true;
                    self.producer = None;
                    let at = self.last.map_or_else(Instant::now, |l| Instant::now().max(l));
                    let e = EngineError::Protocol(
                        "the engine's event stream ended without End or Error".into(),
                    );
                    return Poll::Ready(Some(TimedEvent::new(at, 0, EventKind::Error(e))));
                }
                Poll::Pending => {}
            }
            let Some(p) = self.producer.as_mut() else { return Poll::Pending };
            match p.as_mut().poll(cx) {
                // The producer finished: its sender is gone, so the queue drains and closes.
                Poll::Ready(()) => self.producer = None,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// An event stream and the sender that feeds it (from a task, a thread or a callback). The
/// stream ends after the first terminal event, or with a protocol error once every sender is
/// dropped without one.
pub fn channel() -> (EventSender, EventStream) {
    let (tx, rx) = unbounded();
    (
        EventSender { tx, frame: 0 },
        Box::pin(Guarded { producer: None, rx, last: None, done: false }),
    )
}

/// An event stream driven by `producer`: the future runs as the stream is polled (on the
/// caller's task, so it may use the caller's runtime), and each event it sends is yielded as
/// soon as it is sent.
pub fn events<F, Fut>(producer: F) -> EventStream
where
    F: FnOnce(EventSender) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = unbounded();
    let fut = producer(EventSender { tx, frame: 0 });
    Box::pin(Guarded { producer: Some(Box::pin(fut)), rx, last: None, done: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{check_contract, collect};
    use crate::{Delta, Usage};

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn an_async_block_becomes_a_stream_that_keeps_the_contract() {
        let s = events(|mut tx| async move {
            tx.headers(200);
            tx.send(EventKind::Content(Delta::text("a")));
            tx.send(EventKind::Usage(Usage::tokens(Some(1), Some(1))));
            tx.end(Some("stop"));
            tx.send(EventKind::Content(Delta::text("after the end")));
        });
        let ev = block_on(collect(s));
        assert_eq!(ev.len(), 4, "nothing after the terminal event: {ev:?}");
        check_contract(&ev).unwrap();
        assert_eq!(ev.iter().map(|e| e.frame).collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn a_producer_that_stops_early_ends_with_a_protocol_error() {
        let s = events(|mut tx| async move {
            tx.headers(200);
        });
        let ev = block_on(collect(s));
        assert!(
            matches!(&ev[1].kind, EventKind::Error(EngineError::Protocol(m)) if m.contains("without End"))
        );
        check_contract(&ev).unwrap();
        // a channel whose sender is dropped, likewise
        let (tx, s) = channel();
        drop(tx);
        let ev = block_on(collect(s));
        assert_eq!(ev.len(), 1);
        assert!(ev[0].kind.is_terminal());
    }

    #[test]
    fn stamps_never_go_backwards() {
        let (mut tx, s) = channel();
        let t = Instant::now();
        tx.send_at(t + std::time::Duration::from_millis(5), EventKind::FirstByte);
        tx.send_at(t, EventKind::Content(Delta::bytes(1)));
        tx.end(None);
        let ev = block_on(collect(s));
        assert!(ev[1].at >= ev[0].at);
        check_contract(&ev).unwrap();
    }
}

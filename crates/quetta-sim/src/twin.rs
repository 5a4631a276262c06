//! The live twin: one task runs the [`Engine`] on the real clock, requests reach it over a
//! channel, and each stream is told the instant of each of its tokens.
//!
//! The engine's timeline is kept exactly: a step ends `StepTime::ms` after it began, and
//! the next begins there, however late the task woke, so wake-up delays never add up; a
//! token is stamped with its step's end and its chunk leaves as soon after as the stream
//! is polled. A request whose stream is gone (its client disconnected) is aborted at its
//! next token, as a real server notices a closed connection when it writes.
//!
//! Requests the scheduler first sees at one instant (those that shared a gather window, or
//! arrived during one step) join the queue in the client's order (`x-quetta-request-id`),
//! then by arrival: which of them reached the socket first is a race of the client's tasks
//! that the twin does not pass on, so that the live twin and a prediction of the same plan
//! (which sends in plan order) queue them alike.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::engine::{Engine, EngineRequest, Token};
use crate::model::ServerModel;

/// A request for the twin's engine, and where its token instants go.
#[derive(Debug)]
pub(crate) struct Submit {
    pub(crate) req: EngineRequest,
    /// The client's request id, when it sent one: the queue order of simultaneous requests.
    pub(crate) order: Option<u64>,
    pub(crate) tokens: UnboundedSender<Instant>,
}

/// Take the pending requests that have reached the scheduler by `now` (`pending` sorted
/// latest first), in the order they join the queue: the client's, then arrival.
fn arrived(pending: &mut Vec<Submit>, now: u64) -> Vec<Submit> {
    let split = pending.partition_point(|s| s.req.at_ns > now);
    let mut batch = pending.split_off(split);
    batch.sort_by_key(|s| (s.order.unwrap_or(u64::MAX), s.req.at_ns, s.req.id));
    batch
}

/// Run the engine until every sender of `rx` is gone.
pub(crate) async fn drive(model: ServerModel, epoch: Instant, mut rx: UnboundedReceiver<Submit>) {
    let mut engine = Engine::new(&model);
    let emit = Duration::from_secs_f64(model.emit_overhead_ms / 1e3);
    let at = |ns: u64| epoch + Duration::from_nanos(ns);
    let ns = |t: Instant| t.saturating_duration_since(epoch).as_nanos() as u64;
    let mut streams: HashMap<u64, UnboundedSender<Instant>> = HashMap::new();
    // requests whose arrival overhead has not passed yet, earliest last
    let mut pending: Vec<Submit> = Vec::new();
    let mut out: Vec<Token> = Vec::new();
    let mut now = ns(Instant::now());
    let mut deadline = crate::precise::Deadline::new();
    loop {
        while let Ok(s) = rx.try_recv() {
            pending.push(s);
        }
        // a request that finds the engine idle opens its gather window: wait it out, and
        // those that reach the scheduler meanwhile share the first step
        let first = pending.iter().map(|s| s.req.at_ns).min().filter(|&a| a <= now);
        if let Some(start) = first.map(|a| engine.step_start(a)).filter(|&s| s > now) {
            deadline.until(at(start)).await;
            now = start;
            while let Ok(s) = rx.try_recv() {
                pending.push(s);
            }
        }
        pending.sort_by_key(|s| std::cmp::Reverse(s.req.at_ns));
        for s in arrived(&mut pending, now) {
            streams.insert(s.req.id, s.tokens);
            engine.submit(s.req);
        }
        if let Some(end) = engine.begin_step(now) {
            deadline.until(at(end)).await;
            engine.end_step(&mut out);
            for t in out.drain(..) {
                let gone = match streams.get(&t.id) {
                    Some(tx) => tx.send(at(t.at_ns) + emit).is_err(),
                    None => true,
                };
                if gone {
                    // the client went away: a server aborts the request, freeing its slot
                    engine.abort(t.id);
                }
                if t.last || gone {
                    streams.remove(&t.id);
                }
            }
            now = end;
            continue;
        }
        // Idle: wait for a request, or for a pending one's overhead to pass.
        let next = pending.last().map(|s| s.req.at_ns);
        tokio::select! {
            m = rx.recv() => match m {
                Some(s) => pending.push(s),
                None if pending.is_empty() => return,
                None => {}
            },
            () = sleep_to(&mut deadline, next.map(at)) => {}
        }
        let real = ns(Instant::now());
        now = pending.iter().map(|s| s.req.at_ns).min().map_or(real, |a| a.min(real)).max(now);
    }
}

async fn sleep_to(d: &mut crate::precise::Deadline, t: Option<Instant>) {
    match t {
        Some(t) => d.until(t).await,
        None => std::future::pending().await,
    }
}

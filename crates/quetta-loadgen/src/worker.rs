//! The one worker function every load policy uses.

use std::future::poll_fn;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use quetta_engine::{Engine, EngineError, EngineRequest, EventKind, EventStream};
use quetta_metrics::Observation;

/// What is left of a stream after its terminal event. [`Tail::finish`] polls it to its end,
/// which lets the adapter finish its connection (an HTTP body read to its end goes back to
/// the pool); callers do it after the record is delivered and before the request's slot is
/// given back, so the next request finds the connection. Dropping it gives the connection up.
#[must_use = "finish the tail so the connection can be reused"]
pub struct Tail(Option<EventStream>);

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Tail(..)" } else { "Tail(None)" })
    }
}

impl Tail {
    pub async fn finish(self) {
        if let Some(mut s) = self.0 {
            while poll_fn(|cx| s.as_mut().poll_next(cx)).await.is_some() {}
        }
    }
}

/// Start an observation of `request` (before it is sent).
pub(crate) fn begin(
    request: &EngineRequest,
    planned_input_tokens: u32,
    intended: Instant,
    started: Instant,
    run_start: Instant,
) -> Observation {
    let off = |t: Instant| t.saturating_duration_since(run_start);
    let cap = request.max_tokens.map_or(256, |m| m as usize + 1).min(1 << 16);
    Observation {
        id: request.request_id,
        session_id: request.session_id.clone(),
        intended: off(intended),
        started: off(started),
        planned_input_tokens,
        planned_output_tokens: request.max_tokens.unwrap_or(0),
        streamed: request.stream,
        inputs: request.prompt.input_count(),
        audio_s: request.prompt.audio_seconds(),
        itl_us: Vec::with_capacity(cap),
        text: request.capture_text.then(String::new),
        ..Observation::default()
    }
}

/// Send one request and observe it to its terminal event, filling `o` as events arrive (so
/// a caller that abandons the future keeps every timing taken so far); the rest of the
/// stream is returned.
///
/// `run_start` is the zero of every offset. Nothing here locks or allocates per token: the
/// gap buffer is sized from `max_tokens` up front.
pub async fn observe(
    engine: &dyn Engine,
    request: EngineRequest,
    run_start: Instant,
    o: &mut Observation,
) -> Tail {
    let off = |t: Instant| t.saturating_duration_since(run_start);
    // `send` builds the request (the JSON body of a long prompt takes a while); the request
    // leaves on the first poll, so that is where `sent` is stamped.
    o.kind = engine.kind();
    let mut stream = engine.send(request);
    o.sent = Some(off(Instant::now()));
    let mut last_token: Option<Instant> = None;
    let mut last_frame = None;
    loop {
        let Some(ev) = poll_fn(|cx| stream.as_mut().poll_next(cx)).await else {
            // A stream must end with End or Error; one that just stops breaks the contract.
            o.end = off(Instant::now());
            o.error = Some(EngineError::Protocol("event stream ended without End or Error".into()));
            return Tail(None);
        };
        // Read lag: once per frame of the answer, how long its bytes waited for the client
        // to handle them (a write, a failure or the connection facts are no arrival).
        let arrival = !matches!(
            ev.kind,
            EventKind::RequestWritten | EventKind::Connection(_) | EventKind::Error(_)
        );
        if arrival && last_frame != Some(ev.frame) {
            last_frame = Some(ev.frame);
            o.read_lag_sum += Instant::now().saturating_duration_since(ev.at);
            o.read_lag_frames += 1;
        }
        match ev.kind {
            EventKind::Headers { status, connection, headers } => {
                o.headers = Some(off(ev.at));
                o.status = Some(status);
                o.connection = Some(connection);
                o.response_headers = headers;
            }
            EventKind::Connection(connection) => o.connection = Some(connection),
            // The adapter saw the request's first byte leave: that, not the handover, is the
            // send (docs/METRICS.md).
            EventKind::RequestWritten => o.sent = Some(off(ev.at)),
            EventKind::FirstByte => o.first_byte = Some(off(ev.at)),
            kind @ (EventKind::Content(_) | EventKind::Reasoning(_) | EventKind::ToolCall(_)) => {
                o.token_chunks += 1;
                match last_token {
                    None => o.first_token = Some(off(ev.at)),
                    Some(prev) => {
                        let gap = ev.at.saturating_duration_since(prev).as_micros();
                        o.itl_us.push(u32::try_from(gap).unwrap_or(u32::MAX));
                    }
                }
                last_token = Some(ev.at);
                match kind {
                    EventKind::Content(d) => {
                        if o.first_output.is_none() {
                            o.first_output = Some(off(ev.at));
                        }
                        if let (Some(t), Some(s)) = (o.text.as_mut(), d.text) {
                            t.push_str(&s);
                        }
                    }
                    EventKind::Reasoning(_) => o.reasoning_chunks += 1,
                    _ => {}
                }
            }
            EventKind::Usage(u) => o.usage = Some(u),
            EventKind::ServerTiming(t) => o.server_timing = Some(t),
            EventKind::End { finish_reason, streamed } => {
                o.end = off(ev.at);
                o.finish_reason = finish_reason;
                o.streamed = streamed;
                if !streamed {
                    // One answer, no stream: TTFT equals E2E, and there is no ITL; an
                    // embedding or a ranking has no token at all.
                    if o.kind.generates() {
                        o.first_token = o.first_token.or(Some(o.end));
                    }
                    o.itl_us.clear();
                }
                return Tail(Some(stream));
            }
            EventKind::Error(e) => {
                o.end = off(ev.at);
                o.error = Some(e);
                return Tail(Some(stream));
            }
            _ => {}
        }
    }
}

/// Send one request and return its observation (no cancellation; drop the future to
/// abandon it). For embedders who drive requests themselves.
pub async fn execute(
    engine: &dyn Engine,
    request: EngineRequest,
    planned_input_tokens: u32,
    intended: Instant,
    started: Instant,
    run_start: Instant,
) -> Observation {
    let mut o = begin(&request, planned_input_tokens, intended, started, run_start);
    observe(engine, request, run_start, &mut o).await.finish().await;
    o
}

/// Owns an in-flight observation. Delivered to the recorder when finished, or, if the
/// task is aborted (drain timeout, Ctrl-C), on drop as `Cancelled` with the partial timings.
pub(crate) struct Guard {
    pub obs: Option<Observation>,
    tx: mpsc::Sender<Observation>,
    run_start: Instant,
}

impl Guard {
    pub(crate) fn new(obs: Observation, tx: mpsc::Sender<Observation>, run_start: Instant) -> Self {
        Self { obs: Some(obs), tx, run_start }
    }

    /// Deliver the finished observation; returns whether it succeeded, and its TTFT (sent
    /// to first token).
    pub(crate) fn finish(mut self) -> (bool, Option<Duration>) {
        let o = self.obs.take().expect("observation present until finished");
        let ok = o.error.is_none();
        let ttft = o.first_token.zip(o.sent).map(|(f, s)| f.saturating_sub(s));
        let _ = self.tx.send(o);
        (ok, ttft)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut o) = self.obs.take() {
            o.end = Instant::now().saturating_duration_since(self.run_start);
            o.error = Some(EngineError::Cancelled);
            let _ = self.tx.send(o);
        }
    }
}

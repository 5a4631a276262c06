//! A contract checker for adapter authors' tests: does a stream keep every rule the load
//! generator and the metrics rely on?
//!
//! ```
//! use quetta_engine::testing::check_contract;
//! use quetta_engine::{Delta, EventKind, TimedEvent};
//! use std::time::Instant;
//!
//! let t = Instant::now();
//! let ok = vec![
//!     TimedEvent::new(t, 1, EventKind::Content(Delta::bytes(3))),
//!     TimedEvent::new(t, 2, EventKind::End { finish_reason: None, streamed: true }),
//! ];
//! assert!(check_contract(&ok).is_ok());
//! assert!(check_contract(&ok[..1]).is_err(), "no terminal event");
//! ```

use std::future::poll_fn;

use crate::{Engine, EngineRequest, EventKind, EventStream, TimedEvent};

/// A rule a stream broke; `index` is the offending event's position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractViolation {
    #[error("the stream yielded no event")]
    Empty,
    #[error("the stream does not end with End or Error (last event: {last})")]
    NoTerminal { last: String },
    #[error("event {index} comes after the terminal event")]
    AfterTerminal { index: usize },
    #[error("event {index} is a second {what}")]
    Repeated { index: usize, what: &'static str },
    #[error("event {index} is stamped before the event before it")]
    TimeWentBack { index: usize },
    #[error("event {index} has frame {frame}, below the frame before it")]
    FrameWentBack { index: usize, frame: u64 },
    #[error("event {index} ({what}) comes before the response headers")]
    BeforeHeaders { index: usize, what: &'static str },
    #[error("event {index}: RequestWritten after the response headers")]
    WrittenAfterHeaders { index: usize },
    #[error("event {index}: the delta's text is {found} though capture_text is {asked}")]
    CaptureText { index: usize, asked: bool, found: &'static str },
}

fn label(k: &EventKind) -> &'static str {
    match k {
        EventKind::RequestWritten => "RequestWritten",
        EventKind::Headers { .. } => "Headers",
        EventKind::Connection(_) => "Connection",
        EventKind::FirstByte => "FirstByte",
        EventKind::Content(_) => "Content",
        EventKind::Reasoning(_) => "Reasoning",
        EventKind::ToolCall(_) => "ToolCall",
        EventKind::Empty => "Empty",
        EventKind::Usage(_) => "Usage",
        EventKind::ServerTiming(_) => "ServerTiming",
        EventKind::End { .. } => "End",
        EventKind::Error(_) => "Error",
    }
}

/// Check a whole stream's events against the rules of [`crate::Engine`]: it ends with
/// exactly one terminal event and nothing after it; at most one `Headers`, `FirstByte`,
/// `RequestWritten` and `Connection`, `RequestWritten` before `Headers`; stamps and frame indexes never decrease; when
/// there are headers, no body event comes before them.
pub fn check_contract(events: &[TimedEvent]) -> Result<(), ContractViolation> {
    let last = events.last().ok_or(ContractViolation::Empty)?;
    if !last.kind.is_terminal() {
        return Err(ContractViolation::NoTerminal { last: label(&last.kind).into() });
    }
    let headers_at = events.iter().position(|e| matches!(e.kind, EventKind::Headers { .. }));
    let mut seen = [false; 4];
    for (i, e) in events.iter().enumerate() {
        if e.kind.is_terminal() && i + 1 < events.len() {
            return Err(ContractViolation::AfterTerminal { index: i + 1 });
        }
        if i > 0 {
            let prev = &events[i - 1];
            if e.at < prev.at {
                return Err(ContractViolation::TimeWentBack { index: i });
            }
            if e.frame < prev.frame {
                return Err(ContractViolation::FrameWentBack { index: i, frame: e.frame });
            }
        }
        let once = match e.kind {
            EventKind::Headers { .. } => Some(0),
            EventKind::FirstByte => Some(1),
            EventKind::RequestWritten => Some(2),
            EventKind::Connection(_) => Some(3),
            _ => None,
        };
        if let Some(k) = once {
            if seen[k] {
                return Err(ContractViolation::Repeated { index: i, what: label(&e.kind) });
            }
            seen[k] = true;
        }
        match (&e.kind, headers_at) {
            (EventKind::RequestWritten, Some(h)) if i > h => {
                return Err(ContractViolation::WrittenAfterHeaders { index: i });
            }
            (k, Some(h)) if i < h && (k.is_token() || matches!(k, EventKind::Usage(_))) => {
                return Err(ContractViolation::BeforeHeaders { index: i, what: label(k) });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Poll `stream` to its end (at most 10 million events) and return what it yielded.
pub async fn collect(mut stream: EventStream) -> Vec<TimedEvent> {
    let mut out = Vec::new();
    while let Some(ev) = poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        out.push(ev);
        if out.len() >= 10_000_000 {
            break;
        }
    }
    out
}

/// Send `request` to `engine`, read the whole answer and check it: the stream's contract,
/// and that delta text is there exactly when the request asked for it (`capture_text`).
/// Returns the events for further checks.
pub async fn check_engine(
    engine: &dyn Engine,
    request: EngineRequest,
) -> Result<Vec<TimedEvent>, ContractViolation> {
    let asked = request.capture_text;
    let events = collect(engine.send(request)).await;
    check_contract(&events)?;
    for (i, e) in events.iter().enumerate() {
        let (EventKind::Content(d) | EventKind::Reasoning(d) | EventKind::ToolCall(d)) = &e.kind
        else {
            continue;
        };
        match (asked, &d.text) {
            (false, Some(_)) => {
                return Err(ContractViolation::CaptureText { index: i, asked, found: "kept" })
            }
            (true, None) if d.bytes > 0 => {
                return Err(ContractViolation::CaptureText { index: i, asked, found: "missing" })
            }
            _ => {}
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnectionInfo, Delta, EngineError};
    use std::time::{Duration, Instant};

    #[test]
    fn every_rule_is_checked() {
        let t = Instant::now();
        let ev =
            |ms: u64, frame: u64, kind| TimedEvent::new(t + Duration::from_millis(ms), frame, kind);
        let headers = || EventKind::Headers {
            status: 200,
            connection: ConnectionInfo::default(),
            headers: vec![],
        };
        let tok = || EventKind::Content(Delta::bytes(1));
        let end = || EventKind::End { finish_reason: None, streamed: true };
        let good = vec![
            ev(0, 0, EventKind::RequestWritten),
            ev(1, 0, headers()),
            ev(2, 1, tok()),
            ev(3, 2, end()),
        ];
        assert_eq!(check_contract(&good), Ok(()));
        let cases: Vec<(Vec<TimedEvent>, &str)> = vec![
            (vec![], "no event"),
            (vec![ev(0, 0, tok())], "does not end"),
            (vec![ev(0, 0, end()), ev(1, 1, tok()), ev(2, 2, end())], "after the terminal"),
            (vec![ev(0, 0, headers()), ev(1, 0, headers()), ev(2, 1, end())], "second Headers"),
            (vec![ev(5, 0, tok()), ev(1, 1, end())], "stamped before"),
            (vec![ev(0, 3, tok()), ev(1, 1, end())], "below the frame"),
            (
                vec![ev(0, 0, tok()), ev(1, 0, headers()), ev(2, 1, end())],
                "before the response headers",
            ),
            (
                vec![
                    ev(0, 0, headers()),
                    ev(1, 0, EventKind::RequestWritten),
                    ev(2, 1, EventKind::Error(EngineError::Incomplete)),
                ],
                "RequestWritten after",
            ),
        ];
        for (events, want) in cases {
            let e = check_contract(&events).unwrap_err();
            assert!(e.to_string().contains(want), "{e} (want {want})");
        }
    }
}

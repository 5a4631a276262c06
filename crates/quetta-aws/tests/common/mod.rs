//! What the AWS adapters' tests share: a request's events, its text and its error.

use std::future::poll_fn;
use std::pin::Pin;

use quetta_engine::{Engine, EngineError, EngineRequest, EventKind, TimedEvent};

/// Every event of `req` sent through `e`.
pub async fn collect(e: &dyn Engine, req: EngineRequest) -> Vec<TimedEvent> {
    let mut s = e.send(req);
    let mut v = Vec::new();
    while let Some(ev) =
        poll_fn(|cx| futures_core::Stream::poll_next(Pin::as_mut(&mut s), cx)).await
    {
        v.push(ev);
    }
    v
}

/// The answer's text.
pub fn text(ev: &[TimedEvent]) -> String {
    ev.iter()
        .filter_map(|e| match &e.kind {
            EventKind::Content(d) => d.text.clone(),
            _ => None,
        })
        .collect()
}

/// The error that ended the answer, if one did.
pub fn error(ev: &[TimedEvent]) -> Option<&EngineError> {
    ev.iter().find_map(|e| match &e.kind {
        EventKind::Error(x) => Some(x),
        _ => None,
    })
}

//! A custom adapter written against `quetta-engine` alone: an engine that "generates" by
//! echoing the prompt's words back, one token per event, spaced by a fixed delay.
//!
//! Run it with `cargo run -p quetta-engine --example echo_engine`.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use quetta_engine::{
    ConnectionInfo, Delta, Engine, EngineRequest, EventKind, EventStream, Prompt, TimedEvent, Usage,
};

/// Echoes the prompt back, one word every `delay`.
struct EchoEngine {
    delay: Duration,
}

struct EchoStream {
    words: Vec<String>,
    next: usize,
    started: bool,
    delay: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    done: bool,
    prompt_tokens: u64,
}

impl Stream for EchoStream {
    type Item = TimedEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TimedEvent>> {
        let ev = |kind| Poll::Ready(Some(TimedEvent { at: Instant::now(), frame: 0, kind }));
        if self.done {
            return Poll::Ready(None);
        }
        if !self.started {
            self.started = true;
            return ev(EventKind::Headers {
                status: 200,
                connection: ConnectionInfo::default(),
                headers: vec![],
            });
        }
        if self.next < self.words.len() {
            let delay = self.delay;
            let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(delay)));
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.timer = None;
            let w = self.words[self.next].clone();
            self.next += 1;
            return ev(EventKind::Content(Delta { bytes: w.len() as u32, text: Some(w) }));
        }
        if self.next == self.words.len() {
            self.next += 1;
            let n = self.words.len() as u64;
            return ev(EventKind::Usage(Usage {
                prompt_tokens: Some(self.prompt_tokens),
                completion_tokens: Some(n),
                ..Usage::default()
            }));
        }
        self.done = true;
        ev(EventKind::End { finish_reason: Some("stop".into()), streamed: true })
    }
}

use std::future::Future;

impl Engine for EchoEngine {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let text = match &request.prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::TokenIds(ids) => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
            Prompt::Chat(msgs) => format!("{} messages", msgs.len()),
            _ => String::new(),
        };
        let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
        let max = request.max_tokens.map_or(words.len(), |m| m as usize);
        Box::pin(EchoStream {
            prompt_tokens: words.len() as u64,
            words: words.into_iter().take(max).collect(),
            next: 0,
            started: false,
            delay: self.delay,
            timer: None,
            done: false,
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let engine = EchoEngine { delay: Duration::from_millis(5) };
    let mut stream = engine.send(EngineRequest::new(1, Prompt::Text("the quick brown fox".into())));
    let start = Instant::now();
    while let Some(ev) = poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        println!("{:>8.3} ms  {:?}", ev.at.duration_since(start).as_secs_f64() * 1e3, ev.kind);
    }
}

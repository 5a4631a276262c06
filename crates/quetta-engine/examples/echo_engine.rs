//! A custom adapter written against `quetta-engine` alone: an engine that "generates" by
//! echoing the prompt's words back, one token per event, spaced by a fixed delay. The
//! stream helper keeps the contract (stamps, one terminal event); the text is kept only when
//! the request asks for it (`capture_text`), as every adapter must.
//!
//! Run it with `cargo run -p quetta-engine --example echo_engine`.

use std::time::{Duration, Instant};

use quetta_engine::stream::events;
use quetta_engine::testing::check_engine;
use quetta_engine::{Delta, Engine, EngineRequest, EventKind, EventStream, Prompt, Usage};

/// Echoes the prompt back, one word every `delay`.
struct EchoEngine {
    delay: Duration,
}

impl Engine for EchoEngine {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn send(&self, request: EngineRequest) -> EventStream {
        let text = match &request.prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::TokenIds(ids) => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
            Prompt::Chat(msgs) => {
                msgs.iter().map(quetta_engine::Message::text_content).collect::<Vec<_>>().join(" ")
            }
            _ => String::new(),
        };
        let delay = self.delay;
        events(move |mut tx| async move {
            tx.headers(200);
            let words: Vec<&str> = text.split_whitespace().collect();
            let max = request.max_tokens.map_or(words.len(), |m| m as usize);
            let n = words.len().min(max);
            for w in &words[..n] {
                tokio::time::sleep(delay).await;
                tx.send(EventKind::Content(Delta::of(w, request.capture_text)));
            }
            tx.send(EventKind::Usage(Usage::tokens(Some(words.len() as u64), Some(n as u64))));
            tx.end(Some("stop"));
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let engine = EchoEngine { delay: Duration::from_millis(5) };
    let mut req = EngineRequest::new(1, Prompt::Text("the quick brown fox".into()));
    req.capture_text = true;
    let start = Instant::now();
    // check_engine reads the whole answer and checks it against the engine contract
    let events = check_engine(&engine, req).await.expect("the echo engine keeps the contract");
    for ev in events {
        println!("{:>8.3} ms  {:?}", ev.at.duration_since(start).as_secs_f64() * 1e3, ev.kind);
    }
}

//! Test helpers: a scripted HTTP/1.1 server on 127.0.0.1 that replays raw bytes exactly as
//! told (frame by frame, with delays, or cut off), and event collection.
#![allow(dead_code)]

use std::future::poll_fn;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quetta_engine::{Engine, EngineRequest, EventKind, TimedEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server answers on one connection.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A chunked response: each element is written as one HTTP chunk, `gap` apart.
    Chunked {
        status: u16,
        headers: Vec<(String, String)>,
        frames: Vec<Vec<u8>>,
        gap: Duration,
        cut: bool,
    },
    /// Raw bytes written as they are, then the connection is closed.
    Raw(Vec<u8>),
}

impl Reply {
    pub fn sse(frames: Vec<Vec<u8>>) -> Self {
        Reply::Chunked {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            frames,
            gap: Duration::ZERO,
            cut: false,
        }
    }
}

pub struct ScriptServer {
    pub addr: SocketAddr,
    pub served: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl ScriptServer {
    /// Serve `replies` in turn (the last one repeats), one request per connection.
    pub fn start(replies: Vec<Reply>) -> Self {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let s2 = served.clone();
        let replies = Arc::new(replies);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        let serve = async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else { return };
                let i = s2.fetch_add(1, Ordering::SeqCst);
                let reply = replies[i.min(replies.len() - 1)].clone();
                tokio::spawn(async move {
                    // read the request head and body
                    let mut buf = Vec::new();
                    let mut tmp = [0u8; 4096];
                    loop {
                        let n = sock.read(&mut tmp).await.unwrap_or(0);
                        if n == 0 { return; }
                        buf.extend_from_slice(&tmp[..n]);
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..p]).to_lowercase();
                            let len = head.lines().find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))).unwrap_or(0);
                            while buf.len() < p + 4 + len {
                                let n = sock.read(&mut tmp).await.unwrap_or(0);
                                if n == 0 { return; }
                                buf.extend_from_slice(&tmp[..n]);
                            }
                            break;
                        }
                    }
                    match reply {
                        Reply::Raw(bytes) => {
                            let _ = sock.write_all(&bytes).await;
                        }
                        Reply::Chunked { status, headers, frames, gap, cut } => {
                            let mut head = format!("HTTP/1.1 {status} X\r\ntransfer-encoding: chunked\r\nconnection: close\r\n");
                            for (k, v) in headers { head.push_str(&k); head.push_str(": "); head.push_str(&v); head.push_str("\r\n"); }
                            head.push_str("\r\n");
                            let _ = sock.write_all(head.as_bytes()).await;
                            for f in frames {
                                if !gap.is_zero() { tokio::time::sleep(gap).await; }
                                let mut c = format!("{:x}\r\n", f.len()).into_bytes();
                                c.extend_from_slice(&f);
                                c.extend_from_slice(b"\r\n");
                                if sock.write_all(&c).await.is_err() { return; }
                                let _ = sock.flush().await;
                            }
                            if !cut {
                                let _ = sock.write_all(b"0\r\n\r\n").await;
                            }
                        }
                    }
                    let _ = sock.shutdown().await;
                });
            }
        };
        tokio::select! { () = serve => {}, _ = stopped => {} }
        });
        });
        Self { addr, served, stop: Some(stop) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Drive an engine's stream to its end.
pub async fn collect(engine: &dyn Engine, req: EngineRequest) -> Vec<TimedEvent> {
    let mut s = engine.send(req);
    let mut out = Vec::new();
    while let Some(ev) = poll_fn(|cx| s.as_mut().poll_next(cx)).await {
        out.push(ev);
    }
    out
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Counts of event kinds: (content, reasoning, tool_call, empty, usage).
pub fn counts(events: &[TimedEvent]) -> (usize, usize, usize, usize, usize) {
    let mut c = (0, 0, 0, 0, 0);
    for e in events {
        match e.kind {
            EventKind::Content(_) => c.0 += 1,
            EventKind::Reasoning(_) => c.1 += 1,
            EventKind::ToolCall(_) => c.2 += 1,
            EventKind::Empty => c.3 += 1,
            EventKind::Usage(_) => c.4 += 1,
            _ => {}
        }
    }
    c
}

/// "stop:REASON" or "error:KIND" or "incomplete" for the terminal event.
pub fn ending(events: &[TimedEvent]) -> String {
    match events.last().map(|e| &e.kind) {
        Some(EventKind::End { finish_reason, .. }) => {
            format!("stop:{}", finish_reason.clone().unwrap_or_default())
        }
        Some(EventKind::Error(e)) if e.kind() == "incomplete" => "incomplete".into(),
        Some(EventKind::Error(e)) => format!("error:{}", e.kind()),
        other => format!("no terminal event: {other:?}"),
    }
}

/// The connection facts of a response's `Headers` event (after `RequestWritten`, if any).
pub fn connection_of(events: &[TimedEvent]) -> quetta_engine::ConnectionInfo {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Headers { connection, .. } => Some(*connection),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Headers in {events:?}"))
}

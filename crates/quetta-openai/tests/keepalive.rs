//! Connection reuse against servers with real-world keep-alive habits, over 127.0.0.1: a
//! request is never written onto a connection the server has closed or said it will close,
//! is resent only when the server provably never received it, and a failed request still
//! says which connection it went over (docs/METRICS.md, Connections).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::collect;
use quetta_engine::{ConnectionInfo, Engine, EngineError, EngineRequest, EventKind, Prompt};
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};

const SSE: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// How the test server treats each connection.
#[derive(Clone, Copy)]
struct Habit {
    /// Close the connection right after this many responses (llama.cpp: 1, without saying so).
    close_after: Option<usize>,
    /// Read this request (1-based) on a connection, then hang up without answering.
    hang_up_on: Option<usize>,
    /// Sent as the `Keep-Alive` header of every response.
    keep_alive: Option<&'static str>,
}

/// Requests the server read, as (connection, request on it), 1-based.
type Seen = Arc<Mutex<Vec<(usize, usize)>>>;

/// One whole request (head and `content-length` body), or `None` at the end of the stream.
fn read_request(s: &mut TcpStream) -> Option<()> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..p]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= p + 4 + len {
                return Some(());
            }
        }
        let n = s.read(&mut buf).ok().filter(|n| *n > 0)?;
        got.extend_from_slice(&buf[..n]);
    }
}

fn serve(habit: Habit) -> (String, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for (conn, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                for n in 1.. {
                    if read_request(&mut s).is_none() {
                        return;
                    }
                    log.lock().unwrap().push((conn + 1, n));
                    if habit.hang_up_on == Some(n) {
                        return;
                    }
                    let ka =
                        habit.keep_alive.map_or(String::new(), |k| format!("keep-alive: {k}\r\n"));
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{ka}transfer-encoding: chunked\r\n\r\n{:x}\r\n{SSE}\r\n0\r\n\r\n",
                        SSE.len()
                    );
                    if s.write_all(resp.as_bytes()).is_err() || habit.close_after == Some(n) {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

fn engine(url: &str) -> Arc<dyn Engine> {
    Arc::new(OpenAiEngine::new(OpenAiConfig::new(url, Api::Chat, "m")).unwrap())
}

fn request(id: u64) -> EngineRequest {
    EngineRequest::new(id, Prompt::Text("x".into()))
}

/// The connection facts a request's events carry (its `Headers`, or `Connection` before an
/// error), and whether it ended well.
fn outcome(events: &[quetta_engine::TimedEvent]) -> (Option<ConnectionInfo>, Result<(), String>) {
    let conn = events.iter().find_map(|e| match &e.kind {
        EventKind::Headers { connection, .. } | EventKind::Connection(connection) => {
            Some(*connection)
        }
        _ => None,
    });
    let end = match &events.last().unwrap().kind {
        EventKind::End { .. } => Ok(()),
        other => Err(format!("{other:?}")),
    };
    (conn, end)
}

/// Like llama.cpp: every streamed response is followed at once by a close, while the
/// headers promise keep-alive. Sequential and 4-way concurrent requests all succeed, none
/// is ever written onto a closed connection (each connection carried one request), and
/// once the habit is seen no request even tries a pooled connection.
#[tokio::test]
async fn a_server_that_closes_after_each_stream_never_gets_a_request_on_a_dead_connection() {
    let (url, seen) = serve(Habit {
        close_after: Some(1),
        hang_up_on: None,
        keep_alive: Some("timeout=5, max=100"),
    });
    let e = engine(&url);
    let mut resent = 0;
    for id in 0..20 {
        let (conn, end) = outcome(&collect(e.as_ref(), request(id)).await);
        assert_eq!(end, Ok(()), "request {id}");
        let conn = conn.expect("connection facts");
        assert!(!conn.reused, "request {id} went over a new connection");
        resent += usize::from(conn.retried_stale);
        // the next request follows at once, as a closed loop's does
    }
    let mut tasks = Vec::new();
    for id in 20..60 {
        let e = e.clone();
        tasks.push(tokio::spawn(async move { outcome(&collect(e.as_ref(), request(id)).await) }));
    }
    for t in tasks {
        let (conn, end) = t.await.unwrap();
        assert_eq!(end, Ok(()));
        resent += usize::from(conn.unwrap().retried_stale);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 60, "each request reached the server once: {seen:?}");
    assert!(
        seen.iter().all(|&(_, n)| n == 1),
        "no request on a connection after its close: {seen:?}"
    );
    // Only the first reuse, before the habit is known, can meet a closed connection; it is
    // refused before a byte is written and sent on a new one.
    assert!(resent <= 1, "{resent} requests needed a resend");
}

/// `Keep-Alive: max=2`: the third request goes over a new connection without a failed
/// attempt, and no connection carries more than two.
#[tokio::test]
async fn keep_alive_max_is_honoured() {
    let (url, seen) =
        serve(Habit { close_after: None, hang_up_on: None, keep_alive: Some("timeout=30, max=2") });
    let e = engine(&url);
    let mut reused = Vec::new();
    for id in 0..6 {
        let (conn, end) = outcome(&collect(e.as_ref(), request(id)).await);
        assert_eq!(end, Ok(()));
        let conn = conn.unwrap();
        assert!(!conn.retried_stale);
        reused.push(conn.reused);
    }
    assert_eq!(reused, [false, true, false, true, false, true]);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().all(|&(_, n)| n <= 2), "{seen:?}");
}

/// `Keep-Alive: timeout=1`: a connection idle past half a second (the limit less a margin)
/// is not written on; the request goes over a new connection, and the idle one never sees it.
#[tokio::test]
async fn keep_alive_timeout_is_honoured() {
    let (url, seen) =
        serve(Habit { close_after: None, hang_up_on: None, keep_alive: Some("timeout=1") });
    let e = engine(&url);
    let (c1, end) = outcome(&collect(e.as_ref(), request(1)).await);
    assert_eq!(end, Ok(()));
    assert!(!c1.unwrap().reused);
    let (c2, _) = outcome(&collect(e.as_ref(), request(2)).await);
    assert!(c2.unwrap().reused, "well within the timeout the connection is reused");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (c3, end) = outcome(&collect(e.as_ref(), request(3)).await);
    assert_eq!(end, Ok(()));
    let c3 = c3.unwrap();
    assert!(!c3.reused && c3.connect.is_some(), "{c3:?}");
    assert_eq!(seen.lock().unwrap().clone(), [(1, 1), (1, 2), (2, 1)]);
}

/// A server that read the request and then hung up may have acted on it: the request is not
/// sent again; it fails in words that say so, and its record still names its connection.
#[tokio::test]
async fn a_request_the_server_may_have_received_is_not_resent() {
    let (url, seen) = serve(Habit { close_after: None, hang_up_on: Some(2), keep_alive: None });
    let e = engine(&url);
    let (_, end) = outcome(&collect(e.as_ref(), request(1)).await);
    assert_eq!(end, Ok(()));
    let events = collect(e.as_ref(), request(2)).await;
    let (conn, _) = outcome(&events);
    let EventKind::Error(EngineError::ConnectionClosed(msg)) = &events.last().unwrap().kind else {
        panic!("{events:?}")
    };
    assert!(msg.contains("may have received it"), "{msg}");
    let conn = conn.expect("a failed request carries its connection");
    assert!(conn.reused && !conn.retried_stale, "{conn:?}");
    assert_eq!(seen.lock().unwrap().clone(), [(1, 1), (1, 2)], "sent once, never again");
}

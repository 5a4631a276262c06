//! Broken servers give typed errors, never a panic or a hang.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{collect, Reply, ScriptServer};
use quetta_engine::{
    Engine, EngineError, EngineRequest, EventKind, Prompt, TimeoutPhase, Timeouts,
};
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};

/// The adapter, inside the runner's per-phase timeouts when any are set (as a run drives it).
fn engine(url: &str, timeouts: Timeouts) -> Arc<dyn Engine> {
    let mut cfg = OpenAiConfig::new(url, Api::Chat, "m");
    cfg.max_event_bytes = 64 * 1024;
    let e: Arc<dyn Engine> = Arc::new(OpenAiEngine::new(cfg).unwrap());
    if timeouts == Timeouts::default() {
        e
    } else {
        Arc::new(quetta_loadgen::WithTimeouts::new(e, timeouts))
    }
}

async fn run(reply: Reply, timeouts: Timeouts) -> (Vec<quetta_engine::TimedEvent>, EngineError) {
    let server = ScriptServer::start(vec![reply]);
    let e = engine(&server.url(), timeouts);
    let events = tokio::time::timeout(
        Duration::from_secs(10),
        collect(e.as_ref(), EngineRequest::new(1, Prompt::Text("x".into()))),
    )
    .await
    .expect("the adapter must not hang");
    let err = match &events.last().unwrap().kind {
        EventKind::Error(e) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    (events, err)
}

const TOKEN: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";

#[tokio::test]
async fn close_mid_stream_is_connection_closed_with_partial_events_kept() {
    let reply = Reply::Chunked {
        status: 200,
        headers: vec![],
        frames: vec![TOKEN.to_vec(), TOKEN.to_vec()],
        gap: Duration::from_millis(5),
        cut: true,
    };
    let (events, err) = run(reply, Timeouts::default()).await;
    assert_eq!(err.kind(), "connection_closed", "{err}");
    assert_eq!(events.iter().filter(|e| matches!(e.kind, EventKind::Content(_))).count(), 2);
}

#[tokio::test]
async fn http_429_with_json_body_and_retry_after() {
    let body = br#"{"error":{"message":"Rate limit reached","type":"rate_limit"}}"#;
    let raw = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 2\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        String::from_utf8_lossy(body)
    );
    let (_, err) = run(Reply::Raw(raw.into_bytes()), Timeouts::default()).await;
    match err {
        EngineError::HttpStatus { status: 429, body_excerpt, retry_after } => {
            assert!(body_excerpt.contains("Rate limit reached"));
            assert_eq!(retry_after.as_deref(), Some("2"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn http_500_with_json_body() {
    let reply = Reply::Chunked {
        status: 500,
        headers: vec![("content-type".into(), "application/json".into())],
        frames: vec![br#"{"error":{"message":"CUDA out of memory"}}"#.to_vec()],
        gap: Duration::ZERO,
        cut: false,
    };
    let (_, err) = run(reply, Timeouts::default()).await;
    assert_eq!(err.kind(), "http_5xx");
    assert!(err.to_string().contains("CUDA out of memory"));
}

#[tokio::test]
async fn malformed_event_is_a_protocol_error() {
    let (_, err) = run(
        Reply::sse(vec![TOKEN.to_vec(), b"data: {\"choices\": [\n\n".to_vec()]),
        Timeouts::default(),
    )
    .await;
    assert_eq!(err.kind(), "protocol");
}

#[tokio::test]
async fn invalid_utf8_is_a_protocol_error() {
    let (_, err) = run(
        Reply::sse(vec![
            b"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}\n\n".to_vec()
        ]),
        Timeouts::default(),
    )
    .await;
    assert_eq!(err.kind(), "protocol");
}

#[tokio::test]
async fn oversized_event_is_a_protocol_error_not_an_allocation() {
    let mut big = b"data: {\"choices\":[{\"delta\":{\"content\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 200 * 1024));
    let frames: Vec<Vec<u8>> = big.chunks(16 * 1024).map(<[u8]>::to_vec).collect();
    let (_, err) = run(Reply::sse(frames), Timeouts::default()).await;
    assert_eq!(err.kind(), "protocol");
    assert!(err.to_string().contains("larger than"));
}

#[tokio::test]
async fn error_object_mid_stream_is_a_server_error() {
    let (_, err) = run(
        Reply::sse(vec![
            TOKEN.to_vec(),
            br#"data: {"error":{"message":"boom"}}"#.to_vec(),
            b"\n\n".to_vec(),
        ]),
        Timeouts::default(),
    )
    .await;
    assert_eq!(err, EngineError::ServerError("boom".into()));
}

#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = engine(&format!("http://127.0.0.1:{port}"), Timeouts::default());
    let events = collect(e.as_ref(), EngineRequest::new(1, Prompt::Text("x".into()))).await;
    assert!(matches!(&events[0].kind, EventKind::Error(EngineError::Connect(_))), "{events:?}");
}

#[tokio::test]
async fn idle_and_first_token_timeouts_fire_by_phase() {
    let stall = Reply::Chunked {
        status: 200,
        headers: vec![],
        frames: vec![TOKEN.to_vec(), TOKEN.to_vec()],
        gap: Duration::from_secs(3),
        cut: false,
    };
    let t0 = Instant::now();
    let (_, err) = run(
        stall.clone(),
        Timeouts { first_token: Some(Duration::from_millis(200)), ..Timeouts::default() },
    )
    .await;
    assert_eq!(err, EngineError::Timeout(TimeoutPhase::FirstToken));
    assert!(t0.elapsed() < Duration::from_secs(2));
    let drip = Reply::Chunked {
        status: 200,
        headers: vec![],
        frames: vec![TOKEN.to_vec(), TOKEN.to_vec(), TOKEN.to_vec()],
        gap: Duration::from_millis(400),
        cut: false,
    };
    let (events, err) =
        run(drip, Timeouts { idle: Some(Duration::from_millis(250)), ..Timeouts::default() }).await;
    assert_eq!(err, EngineError::Timeout(TimeoutPhase::Idle));
    assert!(events.iter().all(|e| !matches!(e.kind, EventKind::Content(_))));
    let (_, err) =
        run(stall, Timeouts { total: Some(Duration::from_millis(150)), ..Timeouts::default() })
            .await;
    assert_eq!(err, EngineError::Timeout(TimeoutPhase::Total));
}

#[tokio::test]
async fn token_ids_on_chat_is_a_request_error() {
    let e = engine("http://127.0.0.1:9", Timeouts::default());
    let events = collect(e.as_ref(), EngineRequest::new(1, Prompt::TokenIds(vec![1, 2]))).await;
    assert_eq!(events.len(), 1);
    assert!(matches!(&events[0].kind, EventKind::Error(EngineError::Request(_))));
}

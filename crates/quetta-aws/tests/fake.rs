//! The SageMaker adapter against the strict local fake: SigV4 checked by an independent
//! implementation, real event-stream frames (split payload parts, one byte per chunk, a
//! bad CRC, a model-stream exception), both payload formats, InvokeEndpoint.

use std::time::Duration;

use quetta_aws::{static_credentials, CredentialSource, Payload, SageMakerConfig, SageMakerEngine};
use quetta_engine::{EngineRequest, EventKind, Prompt};
use quetta_sim::providers::{AwsKey, FakeConfig, ProviderFake};

mod common;
use common::{collect, error, text};

const AKID: &str = "AKIDQUETTATEST";
const SECRET: &str = "canary-secret-wJalrXUtnFEMI-K7MDENG";

fn fake(f: impl FnOnce(&mut FakeConfig)) -> ProviderFake {
    let mut c = FakeConfig {
        aws: Some(AwsKey {
            access_key_id: AKID.into(),
            secret_access_key: SECRET.into(),
            region: "us-west-2".into(),
        }),
        ..FakeConfig::default()
    };
    f(&mut c);
    ProviderFake::start(c).unwrap()
}

async fn engine(fake: &ProviderFake, secret: &str, payload: Payload) -> SageMakerEngine {
    let mut c = SageMakerConfig::new("my-endpoint");
    c.region = Some("us-west-2".into());
    c.endpoint_url = Some(fake.base_url());
    c.credentials =
        CredentialSource::Static(static_credentials(AKID, secret, Some("session-token-xyz")));
    c.payload = payload;
    c.inference_component = Some("ic-1".into());
    c.custom_attributes = Some("trace=1".into());
    SageMakerEngine::new(c).await.unwrap()
}

fn req(id: u64, n: u32, stream: bool) -> EngineRequest {
    let mut r = EngineRequest::new(id, Prompt::Text("tell me about event streams".into()));
    r.max_tokens = Some(n);
    r.stream = stream;
    r.capture_text = true;
    r
}

#[tokio::test]
async fn signed_streaming_request_with_openai_payload() {
    let f = fake(|_| {});
    let e = engine(&f, SECRET, Payload::OpenAi).await;
    let ev = collect(&e, req(1, 12, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(ev.iter().filter(|x| matches!(x.kind, EventKind::Content(_))).count(), 12);
    assert!(matches!(ev.last().unwrap().kind, EventKind::End { .. }));
    let usage = ev.iter().find_map(|x| match x.kind {
        EventKind::Usage(u) => Some(u),
        _ => None,
    });
    assert_eq!(usage.unwrap().completion_tokens, Some(12));
    let r = &f.records()[0];
    assert_eq!(r.status, 200, "{:?}", r.error);
    assert!(r.path.ends_with("/endpoints/my-endpoint/invocations-response-stream"));
    let h = |n: &str| r.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(h("x-amzn-sagemaker-inference-component").as_deref(), Some("ic-1"));
    assert_eq!(h("x-amzn-sagemaker-custom-attributes").as_deref(), Some("trace=1"));
    assert_eq!(h("x-amz-security-token").as_deref(), Some("session-token-xyz"));
    // The client's arrival stamps follow the fake's sends (each token completes in one frame).
    let client: Vec<_> =
        ev.iter().filter(|x| matches!(x.kind, EventKind::Content(_))).map(|x| x.at).collect();
    for (c, s) in client.iter().zip(&r.chunks) {
        assert!(c >= s);
    }
}

#[tokio::test]
async fn a_wrong_secret_is_rejected_and_reported_as_an_auth_error() {
    let f = fake(|_| {});
    let e = engine(&f, "not-the-secret", Payload::OpenAi).await;
    let ev = collect(&e, req(1, 4, true)).await;
    let err = error(&ev).expect("an error");
    assert_eq!(err.kind(), "auth", "{err}");
    assert!(err.to_string().contains("InvalidSignatureException"), "{err}");
    assert_eq!(f.records()[0].status, 403);
    assert!(!format!("{ev:?}").contains("not-the-secret"));
}

#[tokio::test]
async fn frames_delivered_one_byte_at_a_time() {
    let f = fake(|c| c.split_every_byte = true);
    let e = engine(&f, SECRET, Payload::OpenAi).await;
    let ev = collect(&e, req(2, 10, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(text(&ev).split_whitespace().count(), 10);
    assert!(ev.iter().filter(|x| x.frame > 0).count() > 0);
    let frames = ev.iter().map(|x| x.frame).max().unwrap();
    assert!(frames > 1000, "one body chunk per byte: {frames} frames");
}

#[tokio::test]
async fn a_bad_crc_fails_the_request_after_the_tokens_before_it() {
    let f = fake(|c| c.bad_crc_at = Some(3));
    let e = engine(&f, SECRET, Payload::OpenAi).await;
    let ev = collect(&e, req(3, 8, true)).await;
    let err = error(&ev).expect("an error");
    assert_eq!(err.kind(), "protocol", "{err}");
    assert!(err.to_string().contains("event-stream frame"), "{err}");
    // tokens 0..2 arrived and are kept; token 3's second part has the bad CRC
    assert_eq!(text(&ev).split_whitespace().count(), 3, "{}", text(&ev));
}

#[tokio::test]
async fn a_model_stream_error_is_a_model_error() {
    let f = fake(|c| c.model_stream_error_at = Some(2));
    let e = engine(&f, SECRET, Payload::OpenAi).await;
    let ev = collect(&e, req(4, 8, true)).await;
    let err = error(&ev).expect("an error");
    assert_eq!(err.kind(), "model_error", "{err}");
    assert!(err.to_string().contains("ModelStreamError"), "{err}");
    assert_eq!(text(&ev).split_whitespace().count(), 2);
}

#[tokio::test]
async fn jumpstart_json_lines_streamed_and_invoke_endpoint() {
    let f = fake(|_| {});
    let e = engine(&f, SECRET, Payload::JumpStart).await;
    let ev = collect(&e, req(5, 6, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(text(&ev).split_whitespace().count(), 6);
    match &ev.last().unwrap().kind {
        EventKind::End { finish_reason, streamed } => {
            assert_eq!(finish_reason.as_deref(), Some("length"));
            assert!(streamed);
        }
        k => panic!("{k:?}"),
    }
    let body: serde_json::Value = serde_json::from_str(&f.records()[0].body).unwrap();
    assert_eq!(body["parameters"]["max_new_tokens"], 6);
    // InvokeEndpoint (not streamed): one answer, labelled as not streamed.
    let ev = collect(&e, req(6, 5, false)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(text(&ev).split_whitespace().count(), 5);
    assert!(matches!(ev.last().unwrap().kind, EventKind::End { streamed: false, .. }));
    assert!(f.records()[1].path.ends_with("/endpoints/my-endpoint/invocations"));
    let _ = Duration::ZERO;
}

#[tokio::test]
async fn aws_error_types_map_to_typed_kinds() {
    for (code, t, kind) in [
        (429, "ThrottlingException", "throttled"),
        (424, "ModelError", "model_error"),
        (400, "ValidationError", "validation"),
        (503, "ServiceUnavailable", "http_5xx"),
    ] {
        let f = fake(|c| c.aws_error = Some((code, t.into())));
        let e = engine(&f, SECRET, Payload::OpenAi).await;
        let ev = collect(&e, req(1, 4, true)).await;
        let err = error(&ev).expect("an error");
        assert_eq!(err.kind(), kind, "{t}: {err}");
        assert!(err.to_string().contains(t) || kind == "http_5xx", "{err}");
    }
}

/// A server that answers the streaming call 200 with a JSON body that never ends (a
/// proxy's page, a container that ignored the stream): the request fails at the headers,
/// saying what came, rather than buffering the body until a timeout.
#[tokio::test]
async fn a_streamed_answer_that_is_not_an_event_stream_fails_at_the_headers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let _ = s.read(&mut buf).await.unwrap();
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(b"10\r\n{\"message\":\"busy\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let mut c = SageMakerConfig::new("my-endpoint");
    c.region = Some("us-west-2".into());
    c.endpoint_url = Some(url);
    c.credentials = CredentialSource::Static(static_credentials(AKID, SECRET, None));
    let e = SageMakerEngine::new(c).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), collect(&e, req(1, 4, true)))
        .await
        .expect("the request fails at once");
    let err = error(&ev).expect("an error").to_string();
    assert!(err.contains("\"application/json\", not an AWS event stream"), "{err}");
    server.abort();
}

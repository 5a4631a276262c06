//! The Bedrock adapter against the strict local fake: SigV4 for the service `bedrock`
//! checked by an independent implementation (and, in `botocore.rs`, by AWS's own signer),
//! Converse and Invoke for each built-in model family, streamed and whole, model ids as
//! profiles and ARNs, throttling and exception events typed.

use std::time::Duration;

use quetta_aws::{
    static_credentials, AwsError, BedrockApi, BedrockConfig, BedrockEngine, CredentialSource,
    Family,
};
use quetta_engine::{Engine, EngineRequest, EventKind, Message, Prompt, ServerTiming, TimedEvent};
use quetta_sim::providers::{AwsKey, FakeConfig, ProviderFake};

mod common;
use common::{collect, error, text};

const AKID: &str = "AKIDQUETTABEDROCK";
const SECRET: &str = "canary-bedrock-secret-wJalrXUtnFEMI";
const TTFT_MS: u64 = 20;
const ITL_MS: u64 = 2;

fn fake(f: impl FnOnce(&mut FakeConfig)) -> ProviderFake {
    let mut c = FakeConfig {
        aws: Some(AwsKey {
            access_key_id: AKID.into(),
            secret_access_key: SECRET.into(),
            region: "eu-central-1".into(),
        }),
        ttft: Duration::from_millis(TTFT_MS),
        itl: Duration::from_millis(ITL_MS),
        ..FakeConfig::default()
    };
    f(&mut c);
    ProviderFake::start(c).unwrap()
}

fn config(fake: &ProviderFake, model: &str, api: BedrockApi, secret: &str) -> BedrockConfig {
    let mut c = BedrockConfig::new(model);
    c.api = api;
    c.region = Some("eu-central-1".into());
    c.endpoint_url = Some(fake.base_url());
    c.credentials =
        CredentialSource::Static(static_credentials(AKID, secret, Some("bedrock-session-token")));
    c
}

async fn engine(fake: &ProviderFake, model: &str, api: BedrockApi) -> BedrockEngine {
    BedrockEngine::new(config(fake, model, api, SECRET)).await.unwrap()
}

fn req(id: u64, n: u32, stream: bool) -> EngineRequest {
    let mut r = EngineRequest::new(
        id,
        Prompt::Chat(vec![
            Message::text("system", "answer in few words"),
            Message::text("user", "tell me about event streams"),
        ]),
    );
    r.max_tokens = Some(n);
    r.stream = stream;
    r.capture_text = true;
    r
}

fn tokens(ev: &[TimedEvent]) -> Vec<&TimedEvent> {
    ev.iter().filter(|e| matches!(e.kind, EventKind::Content(_))).collect()
}

fn usage(ev: &[TimedEvent]) -> Option<quetta_engine::Usage> {
    ev.iter().find_map(|x| match x.kind {
        EventKind::Usage(u) => Some(u),
        _ => None,
    })
}

fn timing(ev: &[TimedEvent]) -> Option<ServerTiming> {
    ev.iter().find_map(|x| match x.kind {
        EventKind::ServerTiming(t) => Some(t),
        _ => None,
    })
}

fn finish(ev: &[TimedEvent]) -> Option<String> {
    ev.iter().find_map(|x| match &x.kind {
        EventKind::End { finish_reason, .. } => finish_reason.clone(),
        _ => None,
    })
}

/// The fake's planned time of token `i`, in ms.
fn planned(i: u64) -> f64 {
    (TTFT_MS + ITL_MS * i) as f64
}

#[tokio::test]
async fn converse_stream_is_signed_decoded_and_timed_at_arrival() {
    let f = fake(|_| {});
    let e = engine(&f, "us.anthropic.claude-3-5-haiku-20241022-v1:0", BedrockApi::Converse).await;
    assert_eq!(e.name(), "bedrock-converse");
    let ev = collect(&e, req(1, 12, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(tokens(&ev).len(), 12);
    assert_eq!(text(&ev).split_whitespace().count(), 12);
    assert_eq!(usage(&ev).unwrap().completion_tokens, Some(12));
    assert_eq!(timing(&ev).unwrap().total_ms, Some(planned(11)));
    assert_eq!(finish(&ev).as_deref(), Some("max_tokens"));
    let r = &f.records()[0];
    assert_eq!(r.status, 200, "{:?}", r.error);
    assert!(
        r.path.ends_with("/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"),
        "{}",
        r.path
    );
    // The system prompt went apart from the conversation, as Converse wants it.
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["system"][0]["text"], "answer in few words");
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
    assert_eq!(body["inferenceConfig"]["maxTokens"], 12);
    let h = |n: &str| r.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(h("x-amz-security-token").as_deref(), Some("bedrock-session-token"));
    // Each token's arrival is stamped after the fake handed its frame to the socket.
    for (c, s) in tokens(&ev).iter().zip(&r.chunks) {
        assert!(c.at >= *s);
    }
}

#[tokio::test]
async fn converse_whole_answer() {
    let f = fake(|_| {});
    let e = engine(&f, "amazon.nova-pro-v1:0", BedrockApi::Converse).await;
    let ev = collect(&e, req(2, 5, false)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(text(&ev).split_whitespace().count(), 5);
    assert_eq!(usage(&ev).unwrap().completion_tokens, Some(5));
    assert_eq!(timing(&ev).unwrap().total_ms, Some(planned(4)));
    assert!(f.records()[0].path.ends_with("/converse"));
}

/// Every built-in family, streamed and whole, each body accepted by the fake's own checks
/// of that family; token counts and the service's latencies from the invocation metrics
/// (streamed) or the `x-amzn-bedrock-*` headers (whole).
#[tokio::test]
async fn invoke_speaks_each_family_streamed_and_whole() {
    let f = fake(|_| {});
    let models = [
        ("anthropic.claude-3-haiku-20240307-v1:0", "anthropic", "max_tokens"),
        ("meta.llama3-1-8b-instruct-v1:0", "llama", "length"),
        ("mistral.mistral-7b-instruct-v0:2", "mistral", "length"),
        ("amazon.titan-text-express-v1", "titan", "LENGTH"),
        ("amazon.nova-lite-v1:0", "nova", "max_tokens"),
    ];
    for (i, (model, fam, stop)) in models.into_iter().enumerate() {
        let e = engine(&f, model, BedrockApi::Invoke).await;
        assert_eq!(e.family().unwrap().name, fam);
        let id = 10 + 2 * i as u64;
        let ev = collect(&e, req(id, 7, true)).await;
        assert!(error(&ev).is_none(), "{model}: {:?} {:?}", error(&ev), f.records().last());
        assert_eq!(tokens(&ev).len(), 7, "{model}");
        assert_eq!(text(&ev).split_whitespace().count(), 7, "{model}");
        assert_eq!(usage(&ev).unwrap().completion_tokens, Some(7), "{model}");
        let t = timing(&ev).unwrap();
        assert_eq!((t.first_token_ms, t.total_ms), (Some(planned(0)), Some(planned(6))), "{model}");
        assert_eq!(finish(&ev).as_deref(), Some(stop), "{model}");

        let ev = collect(&e, req(id + 1, 4, false)).await;
        assert!(error(&ev).is_none(), "{model}: {:?}", error(&ev));
        assert_eq!(text(&ev).split_whitespace().count(), 4, "{model}");
        assert_eq!(usage(&ev).unwrap().completion_tokens, Some(4), "{model}");
        assert_eq!(timing(&ev).unwrap().total_ms, Some(planned(3)), "{model}");
        assert_eq!(finish(&ev).as_deref(), Some(stop), "{model}");
    }
    let paths: Vec<String> = f.records().iter().map(|r| r.path.clone()).collect();
    assert!(paths[0]
        .ends_with("/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream"));
    assert!(paths[1].ends_with("/invoke"));
    assert!(f.records().iter().all(|r| r.status == 200));
}

/// An inference-profile ARN travels percent-encoded in the path (and is signed so);
/// a provisioned-throughput ARN names no family: Invoke is refused before the run unless
/// one is given, Converse needs none.
#[tokio::test]
async fn arns_as_model_ids() {
    let f = fake(|_| {});
    let arn = "arn:aws:bedrock:eu-central-1:123456789012:inference-profile/eu.meta.llama3-2-3b-instruct-v1:0";
    let e = engine(&f, arn, BedrockApi::Invoke).await;
    let ev = collect(&e, req(1, 3, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(tokens(&ev).len(), 3);
    assert!(f.records()[0].path.contains(
        "/model/arn%3Aaws%3Abedrock%3Aeu-central-1%3A123456789012%3Ainference-profile%2Feu.meta.llama3-2-3b-instruct-v1%3A0/"
    ));

    let pt = "arn:aws:bedrock:eu-central-1:123456789012:provisioned-model/anthropic-claude-pt1";
    let e = BedrockEngine::new(config(&f, pt, BedrockApi::Invoke, SECRET)).await.unwrap_err();
    assert!(matches!(e, AwsError::UnknownFamily { .. }), "{e}");
    assert!(e.to_string().contains("provisioned-model/anthropic-claude-pt1"), "{e}");
    let mut c = config(&f, pt, BedrockApi::Invoke, SECRET);
    c.family = Some(Family::named("anthropic").unwrap());
    let e = BedrockEngine::new(c).await.unwrap();
    let ev = collect(&e, req(2, 3, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    let e = engine(&f, pt, BedrockApi::Converse).await;
    let ev = collect(&e, req(3, 3, true)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
}

#[tokio::test]
async fn throttling_and_exceptions_are_typed() {
    // Every third request over the quota: 429 ThrottlingException, a throttled failure.
    let f = fake(|c| c.throttle_every = Some(3));
    let e = engine(&f, "anthropic.claude-3-haiku-20240307-v1:0", BedrockApi::Converse).await;
    let mut kinds = Vec::new();
    for i in 0..9 {
        let ev = collect(&e, req(i, 2, true)).await;
        kinds.push(error(&ev).map(|e| (e.kind(), e.to_string())));
    }
    let throttled: Vec<_> = kinds.iter().flatten().collect();
    assert_eq!(throttled.len(), 3, "{kinds:?}");
    for (k, m) in throttled {
        assert_eq!(*k, "throttled");
        assert!(m.contains("ThrottlingException") && m.contains("Too many requests"), "{m}");
    }
    assert!(kinds[2].is_some() && kinds[5].is_some() && kinds[8].is_some());

    // Exception events in the stream, after tokens: typed by their exception type.
    for (kind, want) in [
        ("throttlingException", "throttled"),
        ("modelStreamErrorException", "model_error"),
        ("validationException", "validation"),
        ("internalServerException", "server_error"),
    ] {
        for api in [BedrockApi::Converse, BedrockApi::Invoke] {
            let f = fake(|c| c.bedrock_exception_at = Some((3, kind.into())));
            let e = engine(&f, "meta.llama3-1-8b-instruct-v1:0", api).await;
            let ev = collect(&e, req(1, 8, true)).await;
            let err = error(&ev).expect("an error");
            assert_eq!(err.kind(), want, "{kind} {api:?}: {err}");
            assert!(err.to_string().contains(kind), "{err}");
            assert_eq!(tokens(&ev).len(), 3, "{kind} {api:?}");
        }
    }
}

#[tokio::test]
async fn a_wrong_secret_is_an_auth_error_that_shows_no_secret() {
    let f = fake(|_| {});
    let e = BedrockEngine::new(config(
        &f,
        "amazon.nova-lite-v1:0",
        BedrockApi::Converse,
        "wrong-secret-value",
    ))
    .await
    .unwrap();
    let ev = collect(&e, req(1, 4, true)).await;
    let err = error(&ev).expect("an error");
    assert_eq!(err.kind(), "auth", "{err}");
    assert!(err.to_string().contains("InvalidSignatureException"), "{err}");
    assert_eq!(f.records()[0].status, 403);
    let all = format!("{ev:?} {e:?}");
    assert!(!all.contains("wrong-secret-value") && !all.contains("bedrock-session-token"), "{all}");
}

#[tokio::test]
async fn frames_one_byte_at_a_time() {
    let f = fake(|c| c.split_every_byte = true);
    for api in [BedrockApi::Converse, BedrockApi::Invoke] {
        let e = engine(&f, "anthropic.claude-3-haiku-20240307-v1:0", api).await;
        let ev = collect(&e, req(1, 9, true)).await;
        assert!(error(&ev).is_none(), "{:?}", error(&ev));
        assert_eq!(tokens(&ev).len(), 9);
        let frames = ev.iter().map(|x| x.frame).max().unwrap();
        assert!(frames > 1000, "one body chunk per byte: {frames} frames");
    }
}

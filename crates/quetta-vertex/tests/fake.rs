//! The Vertex AI adapter against the strict local fake: the service-account JWT is verified
//! by the fake's token endpoint, tokens expire and are refreshed during a long run, and the
//! adapter's timestamps are compared with the fake's recorded send times.

// Each test holds the serial lock for its whole body on purpose.
#![allow(clippy::await_holding_lock)]

use std::future::poll_fn;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant};

use quetta_engine::{Engine, EngineRequest, EventKind, Prompt, TimedEvent};
use quetta_http::{Transport, TransportConfig};
use quetta_sim::providers::{FakeConfig, GoogleAuth, ProviderFake};
use quetta_vertex::{auth, Source, VertexApi, VertexConfig, VertexEngine};

/// The tests of this file run one at a time: the timing test must not measure the others.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

const EMAIL: &str = "quetta-test@quetta-test.iam.gserviceaccount.com";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/google")
}

fn fake(lifetime: Duration, f: impl FnOnce(&mut FakeConfig)) -> ProviderFake {
    let mut c = FakeConfig {
        google: Some(GoogleAuth {
            public_key_der: std::fs::read(fixtures().join("test-sa-pub.der")).unwrap(),
            client_email: EMAIL.into(),
            token_lifetime: lifetime,
            user: Some(("client-1".into(), "user-secret-1".into(), "refresh-1".into())),
        }),
        ..FakeConfig::default()
    };
    f(&mut c);
    ProviderFake::start(c).unwrap()
}

/// A service-account key file pointing at the fake's token endpoint.
fn key_file(fake: &ProviderFake, dir: &std::path::Path, pem: &str) -> PathBuf {
    let p = dir.join("sa.json");
    let v = serde_json::json!({
        "type": "service_account", "project_id": "quetta-test", "private_key_id": "k1",
        "private_key": pem, "client_email": EMAIL, "token_uri": fake.token_url()
    });
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-vertex-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cfg(fake: &ProviderFake, api: VertexApi, key: PathBuf) -> VertexConfig {
    let mut c = VertexConfig::new("quetta-test", "us-central1", "gemini-2.0-flash-001");
    c.api = api;
    c.endpoint_url = Some(fake.base_url());
    c.credentials_file = Some(key);
    if api == VertexApi::Predict {
        c.endpoint_id = Some("1234".into());
    }
    c
}

async fn collect(e: &VertexEngine, req: EngineRequest) -> Vec<TimedEvent> {
    let mut s = e.send(req);
    let mut v = Vec::new();
    while let Some(ev) =
        poll_fn(|cx| futures_core::Stream::poll_next(Pin::as_mut(&mut s), cx)).await
    {
        v.push(ev);
    }
    v
}

fn req(id: u64, n: u32) -> EngineRequest {
    let mut r = EngineRequest::new(id, Prompt::Text("say something about tokens".into()));
    r.max_tokens = Some(n);
    r.capture_text = true;
    r
}

fn error(ev: &[TimedEvent]) -> Option<&quetta_engine::EngineError> {
    ev.iter().find_map(|e| match &e.kind {
        EventKind::Error(x) => Some(x),
        _ => None,
    })
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn gemini_sse_timestamps_match_the_fakes_sends_within_1ms_p99() {
    let _serial = serial();
    let f = fake(Duration::from_secs(3600), |c| {
        c.ttft = Duration::from_millis(30);
        c.itl = Duration::from_millis(2);
    });
    let dir = tmpdir("timing");
    let pem = std::fs::read_to_string(fixtures().join("test-sa-key.pem")).unwrap();
    let e = VertexEngine::new(cfg(&f, VertexApi::Gemini, key_file(&f, &dir, &pem))).await.unwrap();
    assert!(e.credentials_source().contains(EMAIL));
    // As for the OpenAI adapter's timing test: each token's client stamp within 1 ms of the
    // fake's send at p99 (so an ITL, with two stamped ends, within 2 ms); up to 5 attempts on
    // a shared 2-core VM; a client that stamps late fails every one.
    let mut seen = Vec::new();
    for attempt in 0..5u64 {
        let ev = collect(&e, req(attempt + 1, 500)).await;
        assert!(error(&ev).is_none(), "{:?}", error(&ev));
        let client: Vec<Instant> =
            ev.iter().filter(|x| matches!(x.kind, EventKind::Content(_))).map(|x| x.at).collect();
        let rec = f.records().into_iter().find(|r| r.request_id == Some(attempt + 1)).unwrap();
        assert_eq!(client.len(), 500);
        assert_eq!(rec.chunks.len(), 500);
        assert!(
            rec.path.ends_with(
                "/publishers/google/models/gemini-2.0-flash-001:streamGenerateContent?alt=sse"
            ),
            "{}",
            rec.path
        );
        let lag: Vec<f64> = client
            .iter()
            .zip(&rec.chunks)
            .map(|(c, s)| {
                assert!(c >= s);
                c.duration_since(*s).as_secs_f64() * 1e3
            })
            .collect();
        let itl: Vec<f64> = client
            .windows(2)
            .zip(rec.chunks.windows(2))
            .map(|(c, s)| ((c[1] - c[0]).as_secs_f64() - (s[1] - s[0]).as_secs_f64()).abs() * 1e3)
            .collect();
        let ttft_diff = (client[0] - rec.arrival).as_secs_f64() * 1e3
            - (rec.chunks[0] - rec.arrival).as_secs_f64() * 1e3;
        let usage = ev
            .iter()
            .find_map(|x| match x.kind {
                EventKind::Usage(u) => Some(u),
                _ => None,
            })
            .unwrap();
        assert_eq!(usage.completion_tokens, Some(500));
        assert!(
            matches!(&ev.last().unwrap().kind, EventKind::End { finish_reason: Some(r), .. } if r == "length")
        );
        let (l, i) = (p99(lag), p99(itl));
        eprintln!("attempt {attempt}: arrival - send p99 {l:.3} ms, |ITL diff| p99 {i:.3} ms, TTFT diff {ttft_diff:.3} ms");
        seen.push((l, i));
        if l < 1.0 && i < 2.0 {
            return;
        }
    }
    panic!("Gemini timestamps missed 1 ms p99 in every attempt: {seen:?}");
}

#[tokio::test]
async fn a_key_the_service_account_does_not_have_is_refused_by_the_token_endpoint() {
    let _serial = serial();
    let f = fake(Duration::from_secs(3600), |_| {});
    let dir = tmpdir("wrongkey");
    // A different RSA key, made by openssl for this test: the JWT's signature cannot verify.
    let other = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .output();
    let Ok(o) = other else {
        eprintln!("openssl not found; skipped");
        return;
    };
    let pem = String::from_utf8(o.stdout).unwrap();
    let err =
        VertexEngine::new(cfg(&f, VertexApi::Gemini, key_file(&f, &dir, &pem))).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("Invalid JWT Signature"), "{msg}");
    assert!(!msg.contains("PRIVATE KEY"), "{msg}");
    assert!(f.issued().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_refreshed_before_they_expire_in_a_long_run() {
    let _serial = serial();
    // Tokens live 3 s; the run lasts 7 s of back-to-back requests. Every request must be
    // accepted (the fake answers 401 to an expired token) and tokens must be fetched a
    // few times, not per request.
    let f = fake(Duration::from_secs(3), |c| {
        c.ttft = Duration::from_millis(10);
        c.itl = Duration::from_millis(5);
    });
    let dir = tmpdir("refresh");
    let pem = std::fs::read_to_string(fixtures().join("test-sa-key.pem")).unwrap();
    let e = VertexEngine::new(cfg(&f, VertexApi::Gemini, key_file(&f, &dir, &pem))).await.unwrap();
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(7) {
        n += 1;
        let ev = collect(&e, req(n, 20)).await;
        assert!(error(&ev).is_none(), "request {n} at {:?}: {:?}", t0.elapsed(), error(&ev));
    }
    let issued = f.issued();
    eprintln!("{n} requests, {} tokens issued, {} fetches", issued.len(), e.token_fetches());
    assert!(issued.len() >= 3, "{issued:?}");
    assert!(u64::try_from(issued.len()).unwrap() < n / 5, "tokens fetched per request?");
    for w in issued.windows(2) {
        assert!(w[1].issued < w[0].expires, "a token was replaced only after it expired: {w:?}");
    }
    assert!(f.records().iter().all(|r| r.status == 200));
}

#[tokio::test]
async fn openai_compatible_and_predict_endpoints() {
    let _serial = serial();
    let f = fake(Duration::from_secs(3600), |_| {});
    let dir = tmpdir("apis");
    let pem = std::fs::read_to_string(fixtures().join("test-sa-key.pem")).unwrap();
    let e = VertexEngine::new(cfg(&f, VertexApi::OpenAi, key_file(&f, &dir, &pem))).await.unwrap();
    let ev = collect(&e, req(1, 7)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    assert_eq!(ev.iter().filter(|x| matches!(x.kind, EventKind::Content(_))).count(), 7);
    let r = f.records().into_iter().find(|r| r.request_id == Some(1)).unwrap();
    assert!(
        r.path.ends_with("/locations/us-central1/endpoints/openapi/chat/completions"),
        "{}",
        r.path
    );

    let e = VertexEngine::new(cfg(&f, VertexApi::Predict, key_file(&f, &dir, &pem))).await.unwrap();
    let ev = collect(&e, req(2, 5)).await;
    assert!(error(&ev).is_none(), "{:?}", error(&ev));
    // not streamed: one answer, labelled so; no invented inter-token gaps
    assert_eq!(ev.iter().filter(|x| matches!(x.kind, EventKind::Content(_))).count(), 1);
    assert!(matches!(ev.last().unwrap().kind, EventKind::End { streamed: false, .. }));
    let r = f.records().into_iter().find(|r| r.request_id == Some(2)).unwrap();
    assert!(r.path.ends_with("/endpoints/1234:predict"), "{}", r.path);
}

#[tokio::test]
async fn user_credentials_metadata_server_and_a_bad_token() {
    let _serial = serial();
    let f = fake(Duration::from_secs(3600), |_| {});
    let t = Transport::new(&TransportConfig::default()).unwrap();
    let user = Source::User {
        client_id: "client-1".into(),
        client_secret: "user-secret-1".into(),
        refresh_token: "refresh-1".into(),
        token_uri: f.token_url(),
    };
    let tok = auth::fetch_token(&user, &t, auth::CLOUD_PLATFORM).await.unwrap();
    assert!(tok.value.starts_with("ya29.fake-"));
    let bad = Source::User {
        client_id: "client-1".into(),
        client_secret: "wrong".into(),
        refresh_token: "refresh-1".into(),
        token_uri: f.token_url(),
    };
    let err = auth::fetch_token(&bad, &t, auth::CLOUD_PLATFORM).await.unwrap_err().to_string();
    assert!(err.contains("invalid_grant") && !err.contains("wrong"), "{err}");
    let host = f.base_url().trim_start_matches("http://").to_owned();
    let md = auth::fetch_token(&Source::Metadata { host }, &t, auth::CLOUD_PLATFORM).await.unwrap();
    assert!(md.expires.is_some());
    let grants: Vec<String> = f.issued().into_iter().map(|i| i.grant).collect();
    assert_eq!(grants, ["refresh_token", "metadata"]);

    // A token the server does not know: 401 UNAUTHENTICATED, reported as an auth error.
    let mut c = VertexConfig::new("quetta-test", "us-central1", "gemini-2.0-flash-001");
    c.endpoint_url = Some(f.base_url());
    let e = VertexEngine::with_token(
        c,
        t,
        quetta_http::refresh::Refreshing::fixed("ya29.not-issued".into()),
        "test".into(),
    )
    .unwrap();
    let ev = collect(&e, req(9, 3)).await;
    let err = error(&ev).expect("an error");
    assert_eq!(err.kind(), "auth", "{err}");
    assert!(!err.to_string().contains("ya29.not-issued"));
}

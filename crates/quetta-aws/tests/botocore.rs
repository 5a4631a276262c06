//! The Bedrock fake against AWS's own Python SDK (`scripts/bedrock-botocore-client.py`):
//! botocore signs with its SigV4 signer (ARNs in the path included) and parses the fake's
//! event-stream frames with its own parser, so the fake that Quetta's adapter is tested
//! against agrees with AWS's SDK, not only with Quetta. A body changed after botocore
//! signed it is refused. Without Python's botocore the test is skipped outside CI and
//! fails under CI (`.ci/run` installs it).

use std::time::Duration;

use quetta_sim::providers::{AwsKey, FakeConfig, ProviderFake};
use serde_json::Value;

const AKID: &str = "AKIDBOTOCORE";
const SECRET: &str = "botocore-canary-secret";
const REGION: &str = "ap-southeast-2";

fn botocore() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import botocore.session, botocore.auth"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install Python's botocore (pip install botocore)"
        );
        eprintln!("skipped: no Python botocore (pip install botocore)");
    }
    ok
}

fn call(fake: &ProviderFake, args: &[&str]) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/bedrock-botocore-client.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(["--endpoint", &fake.base_url(), "--region", REGION])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", AKID)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_SESSION_TOKEN", "botocore-session")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

#[test]
fn botocore_signs_what_the_fake_accepts_and_parses_what_it_streams() {
    if !botocore() {
        return;
    }
    let f = ProviderFake::start(FakeConfig {
        aws: Some(AwsKey {
            access_key_id: AKID.into(),
            secret_access_key: SECRET.into(),
            region: REGION.into(),
        }),
        ttft: Duration::from_millis(15),
        itl: Duration::from_millis(1),
        ..FakeConfig::default()
    })
    .unwrap();

    let v = call(&f, &["converse", "apac.anthropic.claude-3-5-sonnet-20241022-v2:0", "6"]);
    let deltas: Vec<&str> =
        v["deltas"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert_eq!(deltas.len(), 6, "{v}");
    assert_eq!(v["stop"], "max_tokens");
    assert_eq!(v["usage"]["outputTokens"], 6);
    assert_eq!(v["latency_ms"], 15 + 5);

    let v = call(&f, &["converse-whole", "amazon.nova-micro-v1:0", "3"]);
    assert_eq!(v["text"].as_str().unwrap().split_whitespace().count(), 3, "{v}");
    assert_eq!(v["usage"]["outputTokens"], 3);

    let arn = "arn:aws:bedrock:ap-southeast-2:123456789012:inference-profile/apac.anthropic.claude-3-haiku-20240307-v1:0";
    let v = call(&f, &["invoke", arn, "4"]);
    assert_eq!(v["deltas"].as_array().unwrap().len(), 4, "{v}");
    assert_eq!(v["metrics"]["outputTokenCount"], 4);
    assert_eq!(v["metrics"]["firstByteLatency"], 15);

    let v = call(&f, &["tampered", "anthropic.claude-3-haiku-20240307-v1:0"]);
    assert_eq!(v["status"], 403, "{v}");
    assert_eq!(v["error_type"], "InvalidSignatureException");

    // The fake saw botocore's requests: signed for bedrock in the region, the ARN
    // percent-encoded in the path.
    let r = f.records();
    assert_eq!(r.len(), 4);
    assert!(
        r[..3].iter().all(|r| r.status == 200),
        "{:?}",
        r.iter().map(|r| &r.error).collect::<Vec<_>>()
    );
    let auth = r[0].headers.iter().find(|(k, _)| k == "authorization").unwrap().1.clone();
    assert!(auth.contains(&format!("/{REGION}/bedrock/aws4_request")), "{auth}");
    assert!(
        r[2].path
            .contains("arn%3Aaws%3Abedrock%3Aap-southeast-2%3A123456789012%3Ainference-profile%2F"),
        "{}",
        r[2].path
    );
}

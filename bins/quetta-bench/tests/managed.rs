//! `quetta-bench run --backend sagemaker|vertex` as a user runs it, against the strict local
//! fakes: credentials from real AWS profile files and a Google key file, requests checked by
//! the fakes (SigV4, JWT, bearer tokens), and every output searched for the secrets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use quetta_sim::providers::{AwsKey, FakeConfig, GoogleAuth, ProviderFake};

const AWS_SECRET: &str = "canary-aws-secret-0b9f1c2d";
const AWS_TOKEN: &str = "canary-aws-session-token-77aa";
const USER_SECRET: &str = "canary-google-client-secret-5e1";

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quetta-managed-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The binary with no AWS or Google settings inherited from the machine.
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quetta-bench"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_")
            || k.starts_with("GOOGLE_")
            || k == "CLOUDSDK_CONFIG"
            || k == "GCE_METADATA_HOST"
        {
            c.env_remove(k);
        }
    }
    c.env("AWS_EC2_METADATA_DISABLED", "true");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// Every file under `dir` (and the console) is free of every canary.
fn assert_no_secret(dir: &Path, consoles: &[&Output], canaries: &[&str]) {
    for o in consoles {
        for c in canaries {
            assert!(!text(o).contains(c), "{c} leaked into the console output");
        }
    }
    let mut stack = vec![dir.to_owned()];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for f in std::fs::read_dir(&d).unwrap() {
            let p = f.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            files += 1;
            let bytes = std::fs::read(&p).unwrap();
            for c in canaries {
                assert!(
                    !bytes.windows(c.len()).any(|w| w == c.as_bytes()),
                    "{c} leaked into {}",
                    p.display()
                );
            }
        }
    }
    assert!(files >= 3, "outputs were written: {files}");
}

/// A SageMaker fake that accepts `akid` with the test secret in `region`.
fn aws_fake(akid: &str, region: &str, f: impl FnOnce(&mut FakeConfig)) -> ProviderFake {
    let mut c = FakeConfig {
        aws: Some(AwsKey {
            access_key_id: akid.into(),
            secret_access_key: AWS_SECRET.into(),
            region: region.into(),
        }),
        ..FakeConfig::default()
    };
    f(&mut c);
    ProviderFake::start(c).unwrap()
}

fn aws_files(dir: &Path, secret: &str) -> (PathBuf, PathBuf) {
    let creds = dir.join("credentials");
    std::fs::write(
        &creds,
        format!("[quetta]\naws_access_key_id = AKIDQUETTACLI\naws_secret_access_key = {secret}\naws_session_token = {AWS_TOKEN}\n"),
    )
    .unwrap();
    let config = dir.join("config");
    std::fs::write(&config, "[profile quetta]\nregion = eu-west-1\n").unwrap();
    (creds, config)
}

/// `quetta-bench run` against the SageMaker fake's endpoint `ep`, results into `out`.
fn sagemaker_cmd(fake: &ProviderFake, out: &Path) -> Command {
    let mut c = bin();
    c.args(["run", "--backend", "sagemaker", "--sagemaker-endpoint", "ep"])
        .args(["--aws-endpoint-url", &fake.base_url(), "--overwrite", "--output-dir"])
        .arg(out);
    c
}

fn sagemaker_run(fake: &ProviderFake, d: &Path, secret: &str, extra: &[&str]) -> Output {
    let (creds, config) = aws_files(d, secret);
    let out = d.join("out");
    bin()
        .args([
            "run",
            "--backend",
            "sagemaker",
            "--sagemaker-endpoint",
            "llama-ep",
            "--aws-profile",
            "quetta",
        ])
        .args(["--aws-endpoint-url", &fake.base_url(), "--num-requests", "8", "--concurrency", "2"])
        .args([
            "--output-len",
            "12",
            "--input-len",
            "20",
            "--overwrite",
            "--output-dir",
            out.to_str().unwrap(),
        ])
        .args(extra)
        .env("AWS_SHARED_CREDENTIALS_FILE", &creds)
        .env("AWS_CONFIG_FILE", &config)
        .output()
        .unwrap()
}

#[test]
fn sagemaker_run_with_profile_credentials_and_no_secret_in_any_output() {
    let fake = aws_fake("AKIDQUETTACLI", "eu-west-1", |_| {});
    let d = tmpdir("sm");
    let o = sagemaker_run(&fake, &d, AWS_SECRET, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&d.join("out"));
    assert_eq!(s["completed"], 8, "{}", text(&o));
    assert_eq!(s["failed"], 0);
    assert_eq!(s["target"]["backend"], "sagemaker");
    assert_eq!(
        s["output_tokens_total"].as_u64().or(s["tokens"]["output"].as_u64()).unwrap_or(96),
        96
    );
    let recs = fake.records();
    assert_eq!(
        recs.iter().filter(|r| r.status == 200).count(),
        8,
        "{:?}",
        recs.iter().map(|r| &r.error).collect::<Vec<_>>()
    );
    assert!(recs
        .iter()
        .all(|r| r.headers.iter().any(|(k, v)| k == "x-amz-security-token" && v == AWS_TOKEN)));
    // Vision through the OpenAI payload: the image parts reach the container.
    let ov = sagemaker_run(&fake, &d, AWS_SECRET, &["--modality", "vision"]);
    assert!(ov.status.success(), "{}", text(&ov));
    assert!(fake.records().iter().rev().take(8).all(|r| r.body.contains("data:image/png;base64,")));
    // JumpStart payload, with a report rendered from the run
    let o2 = sagemaker_run(&fake, &d, AWS_SECRET, &["--sagemaker-payload", "jumpstart"]);
    assert!(o2.status.success(), "{}", text(&o2));
    assert_eq!(summary(&d.join("out"))["completed"], 8);
    let o3 = bin().args(["report", d.join("out").to_str().unwrap()]).output().unwrap();
    assert!(o3.status.success(), "{}", text(&o3));
    // A wrong secret: every request is refused by the fake and recorded as an auth error.
    let o4 = sagemaker_run(&fake, &d, "canary-wrong-secret-3c", &[]);
    let s = summary(&d.join("out"));
    assert_eq!(s["failed"], 8, "{}", text(&o4));
    assert_eq!(s["errors"]["auth"], 8, "{}", s["errors"]);
    assert_no_secret(
        &d.join("out"),
        &[&o, &o2, &o3, &o4],
        &[AWS_SECRET, AWS_TOKEN, "canary-wrong-secret-3c"],
    );
    let _ = std::fs::remove_dir_all(&d);
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/google")
}

#[test]
fn vertex_run_with_a_service_account_key_and_no_secret_in_any_output() {
    let fake = ProviderFake::start(FakeConfig {
        google: Some(GoogleAuth {
            public_key_der: std::fs::read(fixtures().join("test-sa-pub.der")).unwrap(),
            client_email: "cli@quetta-test.iam.gserviceaccount.com".into(),
            token_lifetime: Duration::from_secs(3600),
            user: Some(("cid".into(), USER_SECRET.into(), "canary-refresh-token-9d".into())),
        }),
        ..FakeConfig::default()
    })
    .unwrap();
    let d = tmpdir("vx");
    let pem = std::fs::read_to_string(fixtures().join("test-sa-key.pem")).unwrap();
    let key = d.join("sa.json");
    std::fs::write(
        &key,
        serde_json::json!({"type": "service_account", "private_key": pem, "private_key_id": "k1",
            "client_email": "cli@quetta-test.iam.gserviceaccount.com", "token_uri": fake.token_url()})
        .to_string(),
    )
    .unwrap();
    let out = d.join("out");
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut c = bin();
        c.args([
            "run",
            "--backend",
            "vertex",
            "--vertex-project",
            "quetta-test",
            "--model",
            "gemini-2.0-flash-001",
        ])
        .args([
            "--vertex-endpoint-url",
            &fake.base_url(),
            "--num-requests",
            "6",
            "--concurrency",
            "2",
        ])
        .args(["--output-len", "10", "--overwrite", "--output-dir", out.to_str().unwrap()])
        .args(extra);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let key_s = key.to_str().unwrap().to_owned();
    let o = run(&[], &[("GOOGLE_APPLICATION_CREDENTIALS", &key_s)]);
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(s["completed"], 6, "{}", text(&o));
    assert_eq!(s["target"]["backend"], "vertex-gemini");
    let o_vision = run(&["--modality", "vision", "--vertex-credentials", &key_s], &[]);
    assert!(o_vision.status.success(), "{}", text(&o_vision));
    assert_eq!(summary(&out)["completed"], 6);
    let bodies: Vec<String> = fake.records().iter().map(|r| r.body.clone()).collect();
    assert!(bodies.iter().any(|b| b.contains("inlineData")), "images went as inline data");
    // gcloud user credentials from the well-known file
    let gdir = d.join("gcloud");
    std::fs::create_dir_all(&gdir).unwrap();
    std::fs::write(
        gdir.join("application_default_credentials.json"),
        serde_json::json!({"type": "authorized_user", "client_id": "cid", "client_secret": USER_SECRET,
            "refresh_token": "canary-refresh-token-9d", "token_uri": fake.token_url()})
        .to_string(),
    )
    .unwrap();
    let o_user = run(&["--vertex-api", "openai"], &[("CLOUDSDK_CONFIG", gdir.to_str().unwrap())]);
    assert!(o_user.status.success(), "{}", text(&o_user));
    assert_eq!(summary(&out)["completed"], 6);
    // A token the fake never issued, given by environment: 401s, recorded as auth errors.
    let o_bad = run(&[], &[("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.canary-static-token")]);
    let s = summary(&out);
    assert_eq!(s["errors"]["auth"], 6, "{}", text(&o_bad));
    let key_body = pem.lines().nth(3).unwrap().to_owned();
    assert_no_secret(
        &out,
        &[&o, &o_vision, &o_user, &o_bad],
        &[
            USER_SECRET,
            "canary-refresh-token-9d",
            "ya29.canary-static-token",
            "ya29.fake-",
            &key_body,
        ],
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sagemaker_credentials_from_a_credential_process_are_refreshed_before_expiry() {
    // The profile's credential_process prints credentials that expire 4 s later and logs
    // each call; a 7 s run must never send expired credentials (the fake would still accept
    // the secret, so the check is the call log: a few refreshes, not one per request).
    let fake = aws_fake("AKIDPROCESS", "us-east-2", |_| {});
    let d = tmpdir("process");
    let log = d.join("calls.log");
    let script = d.join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho call >> '{}'\nexp=$(date -u -d '+4 seconds' +%Y-%m-%dT%H:%M:%SZ)\nprintf '{{\"Version\": 1, \"AccessKeyId\": \"AKIDPROCESS\", \"SecretAccessKey\": \"{AWS_SECRET}\", \"SessionToken\": \"{AWS_TOKEN}\", \"Expiration\": \"%s\"}}' \"$exp\"\n",
            log.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = d.join("config");
    std::fs::write(
        &config,
        format!("[profile proc]\nregion = us-east-2\ncredential_process = {}\n", script.display()),
    )
    .unwrap();
    let out = d.join("out");
    let o = sagemaker_cmd(&fake, &out)
        .args(["--duration", "7s", "--concurrency", "2", "--output-len", "20"])
        .env("AWS_CONFIG_FILE", &config)
        .env("AWS_SHARED_CREDENTIALS_FILE", d.join("none"))
        .env("AWS_PROFILE", "proc")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&out);
    let calls = std::fs::read_to_string(&log).unwrap().lines().count();
    eprintln!("{} requests completed, credential_process called {calls} times", s["completed"]);
    assert_eq!(s["failed"], 0, "{}", text(&o));
    assert!(s["completed"].as_u64().unwrap() > 50);
    assert!(
        (2..=6).contains(&calls),
        "credential_process called {calls} times in 7 s (expiry every 4 s)"
    );
    assert_no_secret(&out, &[&o], &[AWS_SECRET, AWS_TOKEN]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sagemaker_credentials_from_the_container_endpoint_and_instance_metadata() {
    // The rest of the standard chain, served by the fake on 127.0.0.1: ECS/EKS container
    // credentials (refreshed: they expire every 3 s in a 5 s run), then IMDSv2.
    let fake = aws_fake("AKIDCHAIN", "ap-south-1", |c| {
        c.aws_credentials_lifetime = Duration::from_secs(3);
    });
    let d = tmpdir("chain");
    let out = d.join("out");
    let base = || {
        let mut c = sagemaker_cmd(&fake, &out);
        c.args(["--concurrency", "2", "--output-len", "10"])
            .env("AWS_REGION", "ap-south-1")
            .env("AWS_CONFIG_FILE", d.join("none"))
            .env("AWS_SHARED_CREDENTIALS_FILE", d.join("none"));
        c
    };
    let o = base()
        .args(["--duration", "5s"])
        .env("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/ecs-credentials", fake.base_url()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&out);
    assert_eq!(s["failed"], 0, "{}", text(&o));
    let container = fake.issued().iter().filter(|i| i.grant == "container").count();
    eprintln!("{} requests, container credentials fetched {container} times", s["completed"]);
    assert!((2..=4).contains(&container), "{container} fetches in 5 s with a 3 s lifetime");
    let o2 = base()
        .args(["--num-requests", "5"])
        .env("AWS_EC2_METADATA_DISABLED", "false")
        .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", fake.base_url())
        .output()
        .unwrap();
    assert!(o2.status.success(), "{}", text(&o2));
    assert_eq!(summary(&out)["completed"], 5, "{}", text(&o2));
    assert!(fake.issued().iter().any(|i| i.grant == "imds"));
    assert_no_secret(&out, &[&o, &o2], &[AWS_SECRET, "fake-session-", "imds-session-token"]);
    let _ = std::fs::remove_dir_all(&d);
}

/// `quetta-bench` with the AWS profile files of `aws_files` in `dir`.
fn aws_cli(dir: &Path) -> impl Fn(&[&str]) -> Output {
    let (creds, config) = aws_files(dir, AWS_SECRET);
    move |args: &[&str]| {
        bin()
            .args(args)
            .env("AWS_SHARED_CREDENTIALS_FILE", &creds)
            .env("AWS_CONFIG_FILE", &config)
            .env("AWS_PROFILE", "quetta")
            .output()
            .unwrap()
    }
}

/// The load of the Bedrock runs: 8 requests, 2 at a time, 12 tokens each.
const BEDROCK_LOAD: [&str; 11] = [
    "--num-requests",
    "8",
    "--concurrency",
    "2",
    "--output-len",
    "12",
    "--input-len",
    "20",
    "--overwrite",
    "--min-success-rate",
    "0.5",
];

const BEDROCK_MODEL: [&str; 2] = ["--model", "eu.anthropic.claude-3-7-sonnet-20250219-v1:0"];

/// Bedrock over its quota: a throttled request is a failure of its kind, counted and warned
/// about; with retries, the throttled attempts are said, not hidden in the successes. And
/// the service's own latency beside the client's.
#[test]
fn bedrock_throttling_is_counted_and_said_even_when_retried() {
    // every 6th signed request over the quota (the pre-flight's one is the first: a managed
    // endpoint's transport knows its habit, so no second request is billed to learn it)
    let fake = aws_fake("AKIDQUETTACLI", "eu-west-1", |c| {
        c.throttle_every = Some(6);
        c.ttft = Duration::from_millis(20);
        c.itl = Duration::from_millis(2);
    });
    let d = tmpdir("bedrock-quota");
    let cmd = aws_cli(&d);
    let url = fake.base_url();
    let target = ["--backend", "bedrock", "--aws-endpoint-url", url.as_str()];
    let a = d.join("runs/a");
    let oa = cmd(&[
        &["run"][..],
        &target,
        &BEDROCK_MODEL,
        &BEDROCK_LOAD,
        &["--output-dir", a.to_str().unwrap()],
    ]
    .concat());
    assert!(oa.status.success(), "{}", text(&oa));
    let s = summary(&a);
    assert_eq!(s["target"]["backend"], "bedrock-converse");
    // requests 2..=9 of the fake's count: the 6th is throttled, no other
    assert_eq!(
        (s["completed"].as_u64(), s["failed"].as_u64()),
        (Some(7), Some(1)),
        "{}",
        text(&oa)
    );
    assert_eq!(s["errors"]["throttled"], 1, "{}", s["errors"]);
    assert_eq!(fake.records().len(), 1 + 8, "one pre-flight request, then the run's 8");
    assert!(text(&oa).contains("WARNING: the provider throttled 1 of 8 requests"), "{}", text(&oa));
    // the service's latency (its planned 20 + 2 × 11 ms) beside the client's E2E
    let st = &s["server_timing"];
    assert_eq!(st["requests_with_e2e"], 7, "{st}");
    assert_eq!(st["server_e2e_ms_mean"], 42.0, "{st}");
    let over = st["e2e_minus_server_e2e_ms_mean"].as_f64().unwrap();
    assert!((0.0..20.0).contains(&over), "E2E − the service's latency: {over} ms");
    let recs = std::fs::read_to_string(a.join("requests.jsonl")).unwrap();
    assert_eq!(recs.matches("\"server_e2e_ms\":42.0").count(), 7);
    assert_eq!(recs.matches("\"error_kind\":\"throttled\"").count(), 1);
    // retried: the throttled attempts (the fake's 12th and 18th) are said, not hidden
    let ar = d.join("runs/retried");
    let args = ["run", "--no-preflight", "--retries", "2", "--retry-backoff", "10ms"];
    let o = cmd(&[
        &args[..],
        &target,
        &BEDROCK_MODEL,
        &BEDROCK_LOAD,
        &["--output-dir", ar.to_str().unwrap()],
    ]
    .concat());
    assert!(o.status.success(), "{}", text(&o));
    let s = summary(&ar);
    assert_eq!(
        (s["completed"].as_u64(), s["throttled_retries"].as_u64()),
        (Some(8), Some(2)),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("throttled 0 of 8 requests (rate limit or quota), which failed, and 2 earlier attempts that were sent again"), "{}", text(&o));
    assert_no_secret(&d.join("runs"), &[&oa, &o], &[AWS_SECRET, AWS_TOKEN]);
    let _ = std::fs::remove_dir_all(&d);
}

/// `quetta-bench run|sweep|slo|compare|export|report` against Bedrock's fake with profile
/// credentials: Converse and Invoke (an inference-profile ARN), a provisioned-throughput ARN
/// without a family refused before the run, and every output searched for the secrets.
#[test]
fn bedrock_runs_sweeps_and_comparisons_with_no_secret_in_any_output() {
    let fake = aws_fake("AKIDQUETTACLI", "eu-west-1", |_| {});
    let d = tmpdir("bedrock");
    let cmd = aws_cli(&d);
    let url = fake.base_url();
    let target = ["--backend", "bedrock", "--aws-endpoint-url", url.as_str()];
    let load = BEDROCK_LOAD;
    let (a, b) = (d.join("runs/a"), d.join("runs/b"));
    let oa = cmd(&[
        &["run"][..],
        &target,
        &BEDROCK_MODEL,
        &load,
        &["--output-dir", a.to_str().unwrap()],
    ]
    .concat());
    assert!(oa.status.success(), "{}", text(&oa));
    assert_eq!(summary(&a)["completed"], 8, "{}", text(&oa));
    let arn = "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.meta.llama3-2-3b-instruct-v1:0";
    let invoke = ["--model", arn, "--bedrock-api", "invoke"];
    let ob =
        cmd(&[&["run"][..], &target, &invoke, &load, &["--output-dir", b.to_str().unwrap()]]
            .concat());
    assert!(ob.status.success(), "{}", text(&ob));
    let s = summary(&b);
    assert_eq!(s["target"]["backend"], "bedrock-invoke");
    assert_eq!(s["completed"], 8, "{}", text(&ob));
    assert_eq!(s["server_timing"]["server_ttft_ms_mean"], 20.0, "{}", s["server_timing"]);
    // the family cannot be told from a provisioned-throughput ARN: refused before the run
    let pt = [
        "--model",
        "arn:aws:bedrock:eu-west-1:123456789012:provisioned-model/pt1",
        "--bedrock-api",
        "invoke",
    ];
    let op = cmd(&[
        &["run"][..],
        &target,
        &pt,
        &load,
        &["--output-dir", d.join("pt").to_str().unwrap()],
    ]
    .concat());
    assert!(!op.status.success());
    assert!(text(&op).contains("cannot tell the request body of Bedrock model"), "{}", text(&op));

    let (sw, slo) = (d.join("runs/sweep"), d.join("runs/slo"));
    let osw = cmd(&[
        &["sweep", "--concurrencies", "1,2"][..],
        &target,
        &BEDROCK_MODEL,
        &load,
        &["--output-dir", sw.to_str().unwrap()],
    ]
    .concat());
    assert!(osw.status.success(), "{}", text(&osw));
    let sweep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sw.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(sweep["steps"].as_array().unwrap().len(), 2, "{sweep}");
    let search = [
        "slo",
        "--slo",
        "ttft:p90<5000ms",
        "--search",
        "concurrency",
        "--start",
        "1",
        "--max",
        "2",
        "--min-requests",
        "8",
    ];
    let oslo = cmd(&[
        &search[..],
        &target,
        &BEDROCK_MODEL,
        &load[4..],
        &["--output-dir", slo.to_str().unwrap()],
    ]
    .concat());
    assert!(oslo.status.success(), "{}", text(&oslo));
    assert!(slo.join("slo.json").exists(), "{}", text(&oslo));
    let oc = cmd(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(oc.status.success(), "{}", text(&oc));
    let mut outs = vec![oa, ob, op, osw, oslo, oc];
    for f in ["csv", "parquet", "vllm"] {
        let o = cmd(&["export", a.to_str().unwrap(), "--format", f]);
        assert!(o.status.success(), "{f}: {}", text(&o));
        outs.push(o);
    }
    let csv = std::fs::read_to_string(a.join("requests.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",server_ttft_ms,server_e2e_ms"));
    let o = cmd(&["report", a.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    outs.push(o);
    let consoles: Vec<&Output> = outs.iter().collect();
    assert_no_secret(&d.join("runs"), &consoles, &[AWS_SECRET, AWS_TOKEN]);
    let _ = std::fs::remove_dir_all(&d);
}

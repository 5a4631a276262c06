//! KServe v2 over gRPC against a server of another gRPC implementation
//! (`scripts/kserve-grpc-server.py`: Python's grpcio with the stubs `tritonclient` generates
//! from Triton's protobuf files): streamed answers counted as the server sent them, TTFT
//! and ITL as the server's own send times give them, the unary call, failures in the
//! server's words (an error response mid-stream, an unknown model, a wrong key), and the
//! pre-flight check (live, ready, every tensor sent listed in the model's metadata).

use std::sync::Arc;
use std::time::Instant;

use quetta_engine::{Engine, EngineRequest, Prompt};
use quetta_metrics::RequestRecord;
use quetta_openai::{Api, ApiKey, OpenAiConfig};
use quetta_protocols::{Options, Protocol};
use quetta_testkit::KserveServer;

fn engine(url: &str, model: &str, key: Option<&str>) -> Arc<dyn Engine> {
    let mut cfg = OpenAiConfig::new(url, Api::Chat, model);
    cfg.api_key = key.map(ApiKey::new);
    quetta_protocols::engine(Protocol::KserveGrpc, cfg, Options::default()).unwrap()
}

async fn send(e: &dyn Engine, id: u64, text: &str, tokens: u32, stream: bool) -> RequestRecord {
    send_at(e, id, text, tokens, stream).await.0
}

/// The record, and the monotonic instant (ns) its offsets count from.
async fn send_at(
    e: &dyn Engine,
    id: u64,
    text: &str,
    tokens: u32,
    stream: bool,
) -> (RequestRecord, f64) {
    let mut req = EngineRequest::new(id, Prompt::Text(text.into()));
    req.max_tokens = Some(tokens);
    req.stream = stream;
    let now = Instant::now();
    let o = quetta_loadgen::execute(e, req, 5, now, now, now).await;
    (RequestRecord::from_observation(o), quetta_testkit::monotonic_ns(now))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// One server, one request at a time (the server's gaps are then its own, not a CPU shared
/// with another test's requests): streamed answers first, then the other calls.
#[test]
fn an_independent_kserve_server() {
    let Some(srv) = KserveServer::start(&["--ttft-ms", "5", "--itl-ms", "1", "--api-key", "k1"])
    else {
        return;
    };
    let rt = rt();
    streams_as_the_server_sent(&srv, &rt);
    the_unary_call_and_failures_in_the_servers_words(&srv, &rt);
    preflight(&srv, &rt);
}

fn transport() -> quetta_http::Transport {
    let cfg = quetta_http::TransportConfig { http2: true, ..Default::default() };
    quetta_http::Transport::new(&cfg).unwrap()
}

fn preflight(srv: &KserveServer, rt: &tokio::runtime::Runtime) {
    use quetta_protocols::kserve::{self, PreflightError};
    let t = transport();
    let base = format!("http://127.0.0.1:{}", srv.port);
    let check = |key: Option<&str>, model| {
        let key = key.map(quetta_http::fetch::ApiKey::new);
        rt.block_on(kserve::preflight(&t, &base, key.as_ref(), model, kserve::Tensors::TensorRtLlm))
    };
    check(Some("k1"), "ensemble").unwrap();
    assert_eq!(check(Some("k1"), "llama"), Err(PreflightError::NotReady("llama".into())));
    let e = check(Some("nope"), "ensemble").unwrap_err().to_string();
    assert!(e.starts_with("ServerLive: ") && e.contains("UNAUTHENTICATED"), "{e}");
}

/// A model without one of the tensors every request sends is refused before the run,
/// the tensor named.
#[test]
fn preflight_names_a_tensor_the_model_lacks() {
    use quetta_protocols::kserve::{self, PreflightError};
    let Some(srv) = KserveServer::start(&["--without-input", "max_tokens"]) else { return };
    let base = format!("http://127.0.0.1:{}", srv.port);
    let t = transport();
    let r =
        rt().block_on(kserve::preflight(&t, &base, None, "ensemble", kserve::Tensors::TensorRtLlm));
    match r {
        Err(PreflightError::MissingTensor { direction: "input", tensor, listed, .. }) => {
            assert_eq!(tensor, "max_tokens");
            assert!(listed.starts_with("text_input, stream"), "{listed}");
        }
        other => panic!("{other:?}"),
    }
}

fn streams_as_the_server_sent(srv: &KserveServer, rt: &tokio::runtime::Runtime) {
    let e = engine(&srv.url(), "ensemble", Some("k1"));
    let n = 20u64;
    let recs = rt.block_on(futures_seq(&*e, n));
    let log = srv.requests();
    assert_eq!(log.len(), n as usize, "the server answered every request");
    let (mut late, mut itl_c, mut itl_s) = (0.0, 0.0, 0.0);
    for (r, origin) in &recs {
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.output_tokens, Some(16), "one token a response");
        let id = r.id.to_string();
        let s = log.iter().find(|l| l["id"].as_str() == Some(id.as_str())).expect("logged");
        let ms = |k: &str| -> Vec<f64> {
            s[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() / 1e6).collect()
        };
        let (sends, written) = (ms("sends_ns"), ms("written_ns"));
        assert_eq!((sends.len(), written.len()), (16, 16));
        // the first token's arrival as the client stamped it, on the one clock both read:
        // never before the server made it, and soon after its send had completed
        let first = origin / 1e6 + r.first_token_offset_ms.unwrap();
        assert!(first >= sends[0], "stamped {} ms before the server sent it", sends[0] - first);
        late += first - written[0];
        itl_c += r.itl_mean_ms().unwrap();
        itl_s += (sends[15] - sends[0]) / 15.0;
    }
    let k = n as f64;
    let (late, itl_c, itl_s) = (late / k, itl_c / k, itl_s / k);
    println!("first token stamped {late:.3} ms after its send completed (mean); ITL mean: client {itl_c:.4} ms, server {itl_s:.4} ms");
    assert!(late < 0.5, "the first token stamped {late} ms after its send completed");
    assert!((itl_c - itl_s).abs() < 0.05, "ITL {itl_c} against {itl_s}");
}

async fn futures_seq(e: &dyn Engine, n: u64) -> Vec<(RequestRecord, f64)> {
    let mut v = Vec::new();
    for id in 1..=n {
        v.push(send_at(e, id, "tell me", 16, true).await);
    }
    v
}

fn the_unary_call_and_failures_in_the_servers_words(
    srv: &KserveServer,
    rt: &tokio::runtime::Runtime,
) {
    let ok = engine(&srv.url(), "ensemble", Some("k1"));
    // unary ModelInfer: one response with the whole text
    let r = rt.block_on(send(&*ok, 1, "hi", 5, false));
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.finish_reason, None);
    // an error response mid-stream fails the request after its two tokens
    let r = rt.block_on(send(&*ok, 2, "please FAIL_AFTER_2", 6, true));
    assert_eq!(r.error_kind.as_deref(), Some("server_error"));
    assert!(r.error.as_deref().unwrap().contains("model crashed"), "{:?}", r.error);
    assert_eq!(r.token_chunks, 2);
    // an unknown model: Triton's words, in an error response
    let other = engine(&srv.url(), "llama", Some("k1"));
    let r = rt.block_on(send(&*other, 3, "hi", 3, true));
    assert!(r.error.as_deref().unwrap().contains("unknown model: 'llama'"), "{:?}", r.error);
    // a wrong key: the call's status, UNAUTHENTICATED
    let bad = engine(&srv.url(), "ensemble", Some("nope"));
    let r = rt.block_on(send(&*bad, 4, "hi", 3, true));
    assert_eq!(r.error_kind.as_deref(), Some("auth"), "{:?}", r.error);
    assert!(
        r.error.as_deref().unwrap().contains("UNAUTHENTICATED: invalid API key"),
        "{:?}",
        r.error
    );
}

/// A model shaped like Triton's vLLM backend (`--vllm`): the pre-flight passes with the
/// vLLM layout and refuses the ensemble's (naming `max_tokens`); streamed requests get the
/// tokens their sampling parameters ask for, and the server read those parameters as sent.
#[test]
fn the_vllm_backends_tensors() {
    use quetta_protocols::kserve::{self, PreflightError, Tensors};
    let Some(srv) = KserveServer::start(&["--vllm", "--ttft-ms", "2", "--itl-ms", "1"]) else {
        return;
    };
    let rt = rt();
    let t = transport();
    let base = format!("http://127.0.0.1:{}", srv.port);
    let check =
        |tensors: Tensors| rt.block_on(kserve::preflight(&t, &base, None, "vllm_model", tensors));
    check(Tensors::Vllm).unwrap();
    match check(Tensors::TensorRtLlm) {
        Err(PreflightError::MissingTensor { tensor, .. }) => assert_eq!(tensor, "max_tokens"),
        other => panic!("{other:?}"),
    }
    let cfg = OpenAiConfig::new(srv.url(), Api::Chat, "vllm_model");
    let mut opts = Options::default();
    opts.kserve_tensors = Tensors::Vllm;
    let e = quetta_protocols::engine(Protocol::KserveGrpc, cfg, opts).unwrap();
    for (id, n) in [(1, 6), (2, 11)] {
        let r = rt.block_on(send(e.as_ref(), id, "tell me", n, true));
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.output_tokens, Some(u64::from(n)), "{r:?}");
    }
    let log = srv.requests();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1]["sampling_parameters"], serde_json::json!({"max_tokens": 11}));
    // the ensemble's layout sent to it is refused in Triton's words
    let e = engine(&srv.url(), "vllm_model", None);
    let r = rt.block_on(send(e.as_ref(), 3, "tell me", 4, true));
    let err = r.error.expect("refused");
    assert!(err.contains("unexpected inference input 'max_tokens'"), "{err}");
}

/// A model shaped like TensorRT-LLM's `tensorrt_llm` (`--ids`): token ids in (`input_ids`
/// with its length), `output_ids` out; the output tokens are the ids counted, streamed (one
/// a response) and unary (all in one); the pre-flight checks the layout's tensors and
/// output.
#[test]
fn the_tensorrt_llm_models_token_ids() {
    use quetta_protocols::kserve::{self, PreflightError, Tensors};
    let Some(srv) = KserveServer::start(&["--ids", "--ttft-ms", "2", "--itl-ms", "1"]) else {
        return;
    };
    let rt = rt();
    let t = transport();
    let base = format!("http://127.0.0.1:{}", srv.port);
    let check =
        |tensors: Tensors| rt.block_on(kserve::preflight(&t, &base, None, "tensorrt_llm", tensors));
    check(Tensors::TokenIds).unwrap();
    match check(Tensors::TensorRtLlm) {
        Err(PreflightError::MissingTensor { tensor, .. }) => assert_eq!(tensor, "text_input"),
        other => panic!("{other:?}"),
    }
    let cfg = OpenAiConfig::new(srv.url(), Api::Chat, "tensorrt_llm");
    let mut opts = Options::default();
    opts.kserve_tensors = Tensors::TokenIds;
    let e = quetta_protocols::engine(Protocol::KserveGrpc, cfg, opts).unwrap();
    for (id, n, stream) in [(1, 6, true), (2, 4, false)] {
        let mut req = EngineRequest::new(id, Prompt::TokenIds(vec![5, 6, 7, 8, 9]));
        req.max_tokens = Some(n);
        req.stream = stream;
        let now = Instant::now();
        let r = RequestRecord::from_observation(rt.block_on(quetta_loadgen::execute(
            e.as_ref(),
            req,
            5,
            now,
            now,
            now,
        )));
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.output_tokens, Some(u64::from(n)), "{r:?}");
        assert_eq!(r.token_chunks, if stream { n } else { 1 }, "{r:?}");
    }
    // a text prompt cannot go to a model of token ids
    let mut req = EngineRequest::new(3, Prompt::Text("hi".into()));
    req.max_tokens = Some(2);
    let now = Instant::now();
    let o = rt.block_on(quetta_loadgen::execute(e.as_ref(), req, 5, now, now, now));
    let err = o.error.expect("refused").to_string();
    assert!(err.contains("takes token ids"), "{err}");
}

/// `grpcs://`: the grpcio server over TLS with a certificate of a throw-away CA made here.
/// Trusting the CA (`ca_cert`) the streamed request is answered; without it the handshake
/// fails as a TLS error; `insecure` goes without it.
#[test]
fn grpcs_with_the_servers_ca_and_without() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let dir = std::env::temp_dir().join(format!("quetta-grpcs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "quetta grpcs test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &rcgen::Issuer::new(ca, ca_key)).unwrap();
    let (cert, key, ca_pem) = (dir.join("cert.pem"), dir.join("key.pem"), dir.join("ca.pem"));
    std::fs::write(&cert, leaf_cert.pem()).unwrap();
    std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
    std::fs::write(&ca_pem, ca_cert.pem()).unwrap();
    let Some(srv) = KserveServer::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]) else {
        return;
    };
    let rt = rt();
    let url = format!("grpcs://127.0.0.1:{}", srv.port);
    let run = |ca: Option<&std::path::Path>, insecure: bool| {
        let mut cfg = OpenAiConfig::new(url.clone(), Api::Chat, "ensemble");
        cfg.ca_cert = ca.map(std::path::Path::to_path_buf);
        cfg.insecure = insecure;
        let e = quetta_protocols::engine(Protocol::KserveGrpc, cfg, Options::default()).unwrap();
        rt.block_on(send(e.as_ref(), 1, "tell me", 5, true))
    };
    let r = run(Some(&ca_pem), false);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.output_tokens, Some(5));
    let r = run(None, false);
    assert_eq!(r.error_kind.as_deref(), Some("tls"), "{:?}", r.error);
    let r = run(None, true);
    assert!(r.error.is_none(), "{:?}", r.error);
    let _ = std::fs::remove_dir_all(&dir);
}

//! https with certificate verification: a local TLS server whose certificate is signed by a
//! throw-away CA generated here. Without trusting that CA the handshake must fail (typed as
//! TLS); trusting it with `ca_cert` works and the TLS time is reported apart from TCP
//! connect; `insecure` works without the CA.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::collect;
use quetta_engine::{EngineRequest, EventKind, Prompt};
use quetta_openai::{Api, OpenAiConfig, OpenAiEngine};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HANDSHAKE_DELAY: Duration = Duration::from_millis(100);

struct Tls {
    port: u16,
    ca_pem: String,
}

fn start_tls_server() -> Tls {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "quetta test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf_cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let std_l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_l.set_nonblocking(true).unwrap();
    let port = std_l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(std_l).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                let acc = acceptor.clone();
                tokio::spawn(async move {
                    // A slow handshake: the request can only leave after it.
                    tokio::time::sleep(HANDSHAKE_DELAY).await;
                    let Ok(mut tls) = acc.accept(s).await else { return };
                    let mut buf = vec![0u8; 8192];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = tls.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                    }
                    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"secure\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
                    let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                    let _ = tls.write_all(resp.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
    });
    Tls { port, ca_pem: ca_cert.pem() }
}

async fn ask(cfg: OpenAiConfig) -> Vec<quetta_engine::TimedEvent> {
    let e = OpenAiEngine::new(cfg).unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        collect(&e, EngineRequest::new(1, Prompt::Text("x".into()))),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn https_verifies_certificates_and_times_tls_apart() {
    let srv = start_tls_server();
    let url = format!("https://localhost:{}", srv.port);
    // not trusted: a typed TLS error
    let ev = ask(OpenAiConfig::new(&url, Api::Chat, "m")).await;
    match &ev.last().unwrap().kind {
        EventKind::Error(e) => assert_eq!(e.kind(), "tls", "{e}"),
        other => panic!("an untrusted certificate must fail, got {other:?}"),
    }
    // trusted through ca_cert
    let ca = std::env::temp_dir().join(format!("quetta-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, &srv.ca_pem).unwrap();
    let mut cfg = OpenAiConfig::new(&url, Api::Chat, "m");
    cfg.ca_cert = Some(ca.clone());
    let t0 = Instant::now();
    let ev = ask(cfg).await;
    assert!(matches!(ev.last().unwrap().kind, EventKind::End { .. }), "{:?}", ev.last());
    let connection = common::connection_of(&ev);
    assert!(connection.connect.is_some() && connection.tls.is_some(), "{connection:?}");
    assert!(connection.tls.unwrap() >= HANDSHAKE_DELAY, "{connection:?}");
    // `sent` is the request's write, after the handshake (which is in `tls`), so the time to
    // the response does not include it
    let at = |want: fn(&EventKind) -> bool| ev.iter().find(|e| want(&e.kind)).unwrap().at;
    let written = at(|k| matches!(k, EventKind::RequestWritten));
    let headers = at(|k| matches!(k, EventKind::Headers { .. }));
    assert!(written >= t0 + HANDSHAKE_DELAY, "the request left before the handshake ended");
    assert!(headers >= written && headers - written < HANDSHAKE_DELAY, "{:?}", headers - written);
    // insecure: no verification
    let mut cfg = OpenAiConfig::new(&url, Api::Chat, "m");
    cfg.insecure = true;
    let ev = ask(cfg).await;
    assert!(matches!(ev.last().unwrap().kind, EventKind::End { .. }), "{:?}", ev.last());
    // a CA file that is not PEM is a clear configuration error
    std::fs::write(&ca, "not a certificate").unwrap();
    let mut cfg = OpenAiConfig::new(&url, Api::Chat, "m");
    cfg.ca_cert = Some(ca.clone());
    let err = OpenAiEngine::new(cfg).unwrap_err().to_string();
    assert!(err.contains("no PEM certificate"), "{err}");
    let _ = std::fs::remove_file(&ca);
}

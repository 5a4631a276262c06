//! rustls client configuration: verified by default (system roots plus an optional CA file),
//! with an explicit, loud opt-out for self-signed test deployments.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::BuildError;

/// Build the TLS configuration. `alpn_h2` offers HTTP/2 through ALPN.
pub(crate) fn client_config(
    insecure: bool,
    ca_cert: Option<&Path>,
    alpn_h2: bool,
) -> Result<ClientConfig, BuildError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| BuildError::Tls(e.to_string()))?;
    let mut cfg = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path).map_err(|e| {
                BuildError::Tls(format!("cannot read CA file {}: {e}", path.display()))
            })?;
            let mut n = 0;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| {
                    BuildError::Tls(format!("bad certificate in {}: {e}", path.display()))
                })?;
                roots
                    .add(cert)
                    .map_err(|e| BuildError::Tls(format!("bad CA in {}: {e}", path.display())))?;
                n += 1;
            }
            if n == 0 {
                return Err(BuildError::Tls(format!("no PEM certificate in {}", path.display())));
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = if alpn_h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(cfg)
}

/// Accepts any certificate, but still checks handshake signatures. Only with `--insecure`.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

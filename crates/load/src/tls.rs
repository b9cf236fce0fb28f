//! HTTPS for the load generator: a rustls client that trusts a given CA file
//! (`--ca`) or, for self-signed test certificates, nothing at all (`--insecure`), with
//! session resumption kept per viewer: each session gets its own resumption cache, so a
//! viewer's later connections resume its own TLS session, as a player's would.
//!
//! The handshake runs inside the request that opens the connection, so its time is part
//! of that request's time to first byte and completion time.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::common::InputError;
use crate::record::{Failure, FailureReason};

/// The ALPN protocol id of HTTP/2 over TLS.
pub const ALPN_H2: &[u8] = b"h2";

/// TLS sessions a viewer remembers (one server, so a couple suffice; TLS 1.3 servers send
/// two tickets per handshake).
const VIEWER_SESSIONS: usize = 4;

/// How the server's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Certificates chaining to the CA certificates in this PEM file.
    Ca(PathBuf),
    /// Any certificate (self-signed test servers); the handshake's signatures are still
    /// checked, the chain, the validity dates and the host name are not.
    Insecure,
}

/// The client side of HTTPS runs: configuration shared by every viewer.
#[derive(Clone)]
pub struct TlsClient {
    base: Arc<ClientConfig>,
    name: ServerName<'static>,
    trust: Trust,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("name", &self.name)
            .field("trust", &self.trust)
            .finish()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsClient {
    /// A client for `server_name` (the target's host: a DNS name or an IP address).
    pub fn new(trust: Trust, server_name: &str) -> Result<TlsClient, InputError> {
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| InputError(format!("--target host {server_name:?}: {e}")))?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| InputError(format!("TLS configuration: {e}")))?;
        let mut cfg = match &trust {
            Trust::Ca(path) => {
                let bad =
                    |e: &dyn fmt::Display| InputError(format!("--ca {}: {e}", path.display()));
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
                    roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
                }
                if roots.is_empty() {
                    return Err(bad(&"no CERTIFICATE block found"));
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            Trust::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
                .with_no_client_auth(),
        };
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsClient {
            base: Arc::new(cfg),
            name,
            trust,
        })
    }

    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// The rustls configuration (trust, protocol versions, ALPN `http/1.1`), for clients
    /// outside the load generator (`vodkit live push` over https).
    pub fn config(&self) -> Arc<ClientConfig> {
        self.base.clone()
    }

    /// The same client offering only `h2` in ALPN (`--http 2`): a server that cannot speak
    /// HTTP/2 over TLS is found out at the handshake.
    pub fn for_http2(&self) -> TlsClient {
        let mut cfg = (*self.base).clone();
        cfg.alpn_protocols = vec![ALPN_H2.to_vec()];
        TlsClient {
            base: Arc::new(cfg),
            ..self.clone()
        }
    }

    /// A connector with its own resumption cache: one per viewer.
    pub fn viewer(&self) -> TlsConnector {
        let mut cfg = (*self.base).clone();
        cfg.resumption = Resumption::in_memory_sessions(VIEWER_SESSIONS);
        TlsConnector::from(Arc::new(cfg))
    }

    /// Handshake over `tcp`.
    pub async fn handshake(
        &self,
        connector: &TlsConnector,
        tcp: TcpStream,
    ) -> Result<TlsStream<TcpStream>, Failure> {
        connector
            .connect(self.name.clone(), tcp)
            .await
            .map_err(|e| Failure::new(FailureReason::Connect, format!("TLS handshake: {e}")))
    }
}

/// `--insecure`: accept any certificate, but still verify the handshake signatures made
/// with it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        let e = TlsClient::new(Trust::Ca(empty), "localhost").unwrap_err();
        assert!(
            e.0.contains("--ca") && e.0.contains("no CERTIFICATE"),
            "{e}"
        );
        let missing = TlsClient::new(Trust::Ca(dir.path().join("none.pem")), "localhost");
        assert!(missing.is_err());
        assert!(TlsClient::new(Trust::Insecure, "127.0.0.1").is_ok());
    }
}

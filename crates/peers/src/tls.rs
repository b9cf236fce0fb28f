//! HTTPS for the peers: the certificate files a TLS peer serves with, the
//! nginx and Apache directives for them (TLS 1.3 only, session cache and tickets on,
//! sendfile still on where the server allows it), and a readiness probe over TLS that
//! trusts only the run's CA.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::quoted;

/// A certificate, its key and the CA that signed it (all PEM files in the run directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// The TLS 1.3 suite the TLS comparisons use (seed 003's Atlas and Netflix both encrypt
/// with AES-GCM; 128-bit keys as in the measurement).
pub const NGINX_CIPHERSUITES: &str = "TLS_AES_128_GCM_SHA256";

/// The `listen` parameter and the `ssl_*` directives of an nginx `server` block.
pub fn nginx_directives(files: &TlsFiles) -> String {
    format!(
        "        ssl_certificate {cert};\n\
        \x20       ssl_certificate_key {key};\n\
        \x20       ssl_protocols TLSv1.3;\n\
        \x20       ssl_conf_command Ciphersuites {NGINX_CIPHERSUITES};\n\
        \x20       ssl_session_cache shared:vodkit_tls:16m;\n\
        \x20       ssl_session_tickets on;\n",
        cert = quoted(&files.cert),
        key = quoted(&files.key),
    )
}

/// Apache's mod_ssl lines (after `Listen`): the module, the engine and the files.
pub fn apache_directives(files: &TlsFiles, module_dir: &str, run_dir: &std::path::Path) -> String {
    format!(
        "LoadModule socache_shmcb_module {module_dir}/mod_socache_shmcb.so\n\
LoadModule ssl_module {module_dir}/mod_ssl.so\n\
SSLEngine on\n\
SSLProtocol -all +TLSv1.3\n\
SSLOpenSSLConfCmd Ciphersuites {NGINX_CIPHERSUITES}\n\
SSLSessionCache \"shmcb:{cache}(1048576)\"\n\
SSLSessionTickets on\n\
SSLCertificateFile {cert}\n\
SSLCertificateKeyFile {key}\n",
        cache = run_dir.join("ssl_scache").display(),
        cert = quoted(&files.cert),
        key = quoted(&files.key),
    )
}

/// The status of `GET path` (first byte) from 127.0.0.1:port over TLS, trusting `files.ca`
/// for the name `localhost`.
pub fn https_status(port: u16, path: &str, files: &TlsFiles) -> std::io::Result<u16> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&files.ca).map_err(std::io::Error::other)? {
        roots
            .add(c.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).map_err(std::io::Error::other)?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    tcp.set_read_timeout(Some(Duration::from_secs(2)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-0\r\nConnection: close\r\n\r\n"
    )?;
    s.flush()?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head)?;
    crate::status_of(&head[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> TlsFiles {
        TlsFiles {
            cert: "/r/cert.pem".into(),
            key: "/r/key.pem".into(),
            ca: "/r/ca.pem".into(),
        }
    }

    #[test]
    fn nginx_and_apache_get_tls13_with_the_run_files() {
        let n = nginx_directives(&files());
        assert!(n.contains("ssl_protocols TLSv1.3;"), "{n}");
        assert!(n.contains("ssl_certificate_key \"/r/key.pem\";"), "{n}");
        assert!(n.contains("Ciphersuites TLS_AES_128_GCM_SHA256"), "{n}");
        let a = apache_directives(&files(), "/m", std::path::Path::new("/run"));
        assert!(a.contains("SSLProtocol -all +TLSv1.3\n"), "{a}");
        assert!(a.contains("SSLCertificateKeyFile \"/r/key.pem\"\n"), "{a}");
        assert!(a.contains("LoadModule ssl_module /m/mod_ssl.so\n"), "{a}");
    }
}

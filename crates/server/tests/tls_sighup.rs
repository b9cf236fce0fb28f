//! SIGHUP on the foreground HTTPS server (`run_until_signal`, what `vodkit serve` runs):
//! the certificate is re-read, new connections get the new one, and a connection opened
//! before keeps working. Its own test binary, because the signal goes to the whole process.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use vodkit_server::tls::{selfsigned, TlsSettings};
use vodkit_testkit::server::pattern;

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(ca: &Path, addr: SocketAddr) -> Result<Tls, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).map_err(|e| e.to_string())?;
    }
    Ok(s)
}

/// One keep-alive request for the first `n` bytes; returns the body.
fn get(s: &mut Tls, n: usize) -> Vec<u8> {
    write!(
        s,
        "GET /v.mp4 HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-{}\r\n\r\n",
        n - 1
    )
    .unwrap();
    s.flush().unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0, "closed early");
        got.extend_from_slice(&chunk[..k]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() >= end + 4 + n {
                return got[end + 4..end + 4 + n].to_vec();
            }
        }
    }
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_connections() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("v.mp4"), pattern(100_000)).unwrap();
    let certs = dir.path().join("certs");
    let files = selfsigned::write_dir(&certs).unwrap();
    let old_ca = dir.path().join("old-ca.pem");
    std::fs::copy(&files.ca, &old_ca).unwrap();
    let mut config = vodkit_server::ServerConfig::new(&root);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.worker_threads = 2;
    config.tls = Some(TlsSettings::new(&files.cert, &files.key));
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        vodkit_server::run_until_signal(config, move |addr, _| tx.send(addr).unwrap())
    });
    let addr = rx.recv_timeout(Duration::from_secs(20)).expect("ready");
    let mut open = connect(&old_ca, addr).unwrap();
    assert_eq!(get(&mut open, 100), pattern(100));
    // A new pair from a new CA, then SIGHUP.
    selfsigned::write_dir(&certs).unwrap();
    // SAFETY: sending a signal to our own process; the server's handler receives it.
    unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while connect(&files.ca, addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "the new certificate was not loaded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(connect(&old_ca, addr).is_err(), "old CA no longer verifies");
    // The connection from before the reload goes on.
    assert_eq!(get(&mut open, 5000), pattern(5000));
    drop(open);
    // SAFETY: as above.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    let result = server.join().unwrap();
    assert!(result.is_ok(), "{result:?}");
}

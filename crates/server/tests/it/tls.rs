//! HTTPS on the origin: curl with `--cacert` gets exact bytes for single and
//! multiple ranges over TLS 1.3 and 1.2; plaintext on the TLS port is closed without an
//! HTTP answer; half-open handshakes do not block others and time out; a world-readable
//! key is refused; a certificate reload keeps open connections; sessions resume.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{pattern, TestServer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vodkit_server::tls::{selfsigned, TlsSettings};
use vodkit_testkit::{needs, Need};

fn tls_server(certs: &Path, tune: impl FnOnce(&mut vodkit_server::ServerConfig)) -> TestServer {
    let files = selfsigned::write_dir(certs).unwrap();
    TestServer::start_with(|c| {
        c.tls = Some(TlsSettings::new(&files.cert, &files.key));
        tune(c);
    })
}

/// [`tls_server`] for a test driven by curl, its certificates (`ca.pem` among them) in the
/// directory returned; `None`, the skip said, where curl is not installed.
fn curl_tls_server(
    tune: impl FnOnce(&mut vodkit_server::ServerConfig),
) -> Option<(tempfile::TempDir, TestServer)> {
    if !needs(&[Need::Tool("curl")]) {
        return None;
    }
    let certs = tempfile::tempdir().unwrap();
    let s = tls_server(certs.path(), tune);
    Some((certs, s))
}

fn curl(args: &[&str]) -> std::process::Output {
    common::run_ok(Command::new("curl").args(args))
}

#[test]
fn curl_gets_exact_ranges_and_multiranges_over_tls() {
    let Some((certs, s)) = curl_tls_server(|_| {}) else {
        return;
    };
    let ca = certs.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let url = format!("https://127.0.0.1:{}/video.mp4", s.addr.port());
    let b = pattern(1024 * 1024 + 3);
    for version in [&["--tlsv1.3"][..], &["--tlsv1.2", "--tls-max", "1.2"][..]] {
        let mut args = vec!["-sS", "--http1.1", "--cacert", ca, "-r", "1000-299999"];
        args.extend_from_slice(version);
        args.push(&url);
        assert_eq!(curl(&args).stdout, &b[1000..300_000], "{version:?}");
    }
    // The whole file (crosses the 2 MiB-window and 256 KiB-chunk loops' edges).
    assert_eq!(curl(&["-sS", "--cacert", ca, &url]).stdout, b);
    // Multiple ranges: the same multipart answer as the plaintext server gives for the same
    // bytes, once each response's boundary (it depends on the file's identity) is masked.
    let plain = TestServer::start();
    std::fs::copy(s.root().join("video.mp4"), plain.root().join("video.mp4")).unwrap();
    let ranges = "0-99,5000-5099,1048570-";
    let tls_out = mask_boundary(curl(&["-sS", "--cacert", ca, "-r", ranges, &url]).stdout);
    let plain_out = mask_boundary(curl(&["-sS", "-r", ranges, &plain.url("/video.mp4")]).stdout);
    assert_eq!(tls_out, plain_out);
    assert_eq!(tls_out.matches_count(b"Content-Range: bytes "), 3);
    assert!(tls_out.windows(100).any(|w| w == &b[5000..5100]));
    // Without the CA curl refuses the certificate.
    let out = Command::new("curl").args(["-sS", &url]).output().unwrap();
    assert!(!out.status.success());
}

/// Replace the multipart boundary (the first line, after `--`) by `B` everywhere.
fn mask_boundary(body: Vec<u8>) -> Vec<u8> {
    let eol = body.windows(2).position(|w| w == b"\r\n").unwrap();
    let boundary = body[2..eol].to_vec();
    assert!(boundary.len() > 8);
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i..].starts_with(&boundary) {
            out.push(b'B');
            i += boundary.len();
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    out
}

trait CountMatches {
    fn matches_count(&self, needle: &[u8]) -> usize;
}

impl CountMatches for Vec<u8> {
    fn matches_count(&self, needle: &[u8]) -> usize {
        self.windows(needle.len()).filter(|w| *w == needle).count()
    }
}

#[test]
fn plaintext_on_the_tls_port_gets_a_clean_close() {
    let certs = tempfile::tempdir().unwrap();
    let s = tls_server(certs.path(), |_| {});
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /video.mp4 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let r = c.read_to_end(&mut got);
    // Closed (EOF or reset), not left hanging until the read timeout.
    if let Err(e) = &r {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "connection left open: {e}"
        );
    }
    assert!(!got.starts_with(b"HTTP/"), "plaintext answer: {got:?}");
    assert!(got.len() < 64, "at most a TLS alert: {} bytes", got.len());
    // Nothing of the file leaked.
    assert!(!got.windows(8).any(|w| w == &pattern(64)[..8]));
    assert_eq!(s.stats().tls_handshake_failures, 1);
}

#[test]
fn a_thousand_half_open_handshakes_do_not_stop_a_client() {
    vodkit_server::raise_fd_limit();
    let certs = tempfile::tempdir().unwrap();
    let s = tls_server(certs.path(), |c| {
        if let Some(t) = c.tls.as_mut() {
            t.handshake_timeout = Duration::from_secs(2);
        }
    });
    let mut idle = Vec::with_capacity(1000);
    for i in 0..1000 {
        let mut c = TcpStream::connect(s.addr).unwrap();
        if i % 2 == 0 {
            // The first bytes of a ClientHello record, then silence.
            c.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
        }
        idle.push(c);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ca = certs.path().join("ca.pem");
    let body = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(1), fetch(&client(&ca), s.addr, "0-9"))
            .await
            .expect("a normal client is served while 1,000 handshakes hang")
    });
    assert_eq!(body, &pattern(10)[..]);
    // The half-open ones are cut at the handshake timeout and their slots freed.
    std::thread::sleep(Duration::from_millis(3500));
    let st = s.stats();
    assert!(
        st.tls_handshake_failures >= 1000,
        "{}",
        st.tls_handshake_failures
    );
    assert_eq!(st.connections_open, 0);
    drop(idle);
}

#[test]
fn a_world_readable_key_is_refused_with_one_line() {
    use std::os::unix::fs::PermissionsExt;
    let certs = tempfile::tempdir().unwrap();
    let files = selfsigned::write_dir(certs.path()).unwrap();
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut config = vodkit_server::ServerConfig::new(root.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.tls = Some(TlsSettings::new(&files.cert, &files.key));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(vodkit_server::Server::bind(config))
        .unwrap_err()
        .to_string();
    assert!(e.contains("world-readable") && e.contains("key.pem"), "{e}");
    assert!(!e.contains('\n'));
}

fn client(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

type ClientStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn connect(cfg: &Arc<rustls::ClientConfig>, addr: std::net::SocketAddr) -> ClientStream {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await
        .unwrap()
}

/// One keep-alive GET of a closed range on an open connection; returns the body.
async fn get(s: &mut ClientStream, range: &str) -> Vec<u8> {
    let req = format!("GET /video.mp4 HTTP/1.1\r\nHost: localhost\r\nRange: bytes={range}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed early");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let mut body = buf[end + 4..].to_vec();
            while body.len() < len {
                let n = s.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                body.extend_from_slice(&chunk[..n]);
            }
            return body;
        }
    }
}

async fn fetch(
    cfg: &Arc<rustls::ClientConfig>,
    addr: std::net::SocketAddr,
    range: &str,
) -> Vec<u8> {
    let mut s = connect(cfg, addr).await;
    get(&mut s, range).await
}

#[test]
fn reload_keeps_open_connections_and_sessions_resume() {
    let certs = tempfile::tempdir().unwrap();
    let s = tls_server(certs.path(), |_| {});
    let old_ca = certs.path().join("old-ca.pem");
    std::fs::copy(certs.path().join("ca.pem"), &old_ca).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let old = client(&old_ca);
    rt.block_on(async {
        let mut open = connect(&old, s.addr).await;
        assert_eq!(open.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(get(&mut open, "0-99").await, &pattern(100)[..]);
        // A second connection with the same client config resumes the session.
        let again = connect(&old, s.addr).await;
        assert_eq!(
            again.get_ref().1.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed)
        );
        drop(again);
        // New certificate from a new CA, then reload.
        selfsigned::write_dir(certs.path()).unwrap();
        assert_eq!(s.reload_tls(), Ok(true));
        // The open connection goes on.
        assert_eq!(get(&mut open, "200-299").await, &pattern(300)[200..]);
        // New connections get the new certificate: the new CA verifies it...
        let new = client(&certs.path().join("ca.pem"));
        assert_eq!(fetch(&new, s.addr, "5-9").await, &pattern(10)[5..]);
        // ...and a fresh client that trusts only the old CA refuses it.
        let fresh_old = client(&old_ca);
        let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let r = tokio_rustls::TlsConnector::from(fresh_old)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await;
        assert!(r.is_err());
    });
}

#[test]
fn direct_io_bodies_go_out_over_tls_without_the_page_cache() {
    let Some((certs, s)) = curl_tls_server(|c| {
        c.io.mode = vodkit_server::IoMode::Direct;
        c.io.memory = vodkit_server::io::MemorySetting::Budget(128 << 20);
        c.io.stats_every = None;
    }) else {
        return;
    };
    let path = s.root().join("video.mp4");
    let f = std::fs::File::open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    f.sync_all().unwrap();
    vodkit_prefetch::residency::drop_cached(&f, 0, 0).unwrap();
    let missing = || {
        vodkit_prefetch::residency::check(&f, 0, len, len, Default::default())
            .unwrap()
            .missing
    };
    if missing() != len {
        return vodkit_testkit::skip(format_args!(
            "the test filesystem keeps the pages of {} cached",
            path.display()
        ));
    }
    let ca = certs.path().join("ca.pem");
    let url = format!("https://localhost:{}/video.mp4", s.addr.port());
    let b = pattern(len as usize);
    let out = curl(&[
        "-sS",
        "--cacert",
        ca.to_str().unwrap(),
        "-r",
        "4095-700000",
        &url,
    ]);
    assert_eq!(out.stdout, &b[4095..700_001]);
    let out = curl(&["-sS", "--cacert", ca.to_str().unwrap(), &url]);
    assert_eq!(out.stdout, b);
    assert_eq!(
        missing(),
        len,
        "direct reads kept the file out of the page cache"
    );
    assert!(s.stats().bytes_from_disk > 0);
}

#[test]
fn live_segments_published_and_served_over_tls_come_back_intact() {
    // A live origin over HTTPS: a segment large enough to be kept in a memory file (sent
    // through rustls from the file, not with sendfile) and a small playlist kept on the
    // heap both come back byte for byte.
    let Some((certs, s)) = curl_tls_server(|c| {
        c.ingest = Some(vodkit_server::live::IngestConfig::new("/live/", "tok"));
    }) else {
        return;
    };
    let ca = certs.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let base = format!("https://127.0.0.1:{}/live/s0/", s.addr.port());
    let seg = pattern(700_001);
    assert!(seg.len() as u64 >= vodkit_server::live::MAPPED_MIN);
    let playlist = b"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nseg-0.m4s\n".to_vec();
    for (name, bytes) in [("seg-0.m4s", &seg), ("index.m3u8", &playlist)] {
        let file = certs.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let url = format!("{base}{name}");
        let out = curl(&[
            "-sS",
            "--cacert",
            ca,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "Authorization: Bearer tok",
            "-T",
            file.to_str().unwrap(),
            &url,
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "201", "PUT {name}");
        assert_eq!(
            &curl(&["-sS", "--cacert", ca, &url]).stdout,
            bytes,
            "{name}"
        );
    }
}

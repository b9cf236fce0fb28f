//! HTTPS for the origin: the rustls server configuration (TLS 1.3 and 1.2, ALPN
//! `http/1.1`, and `h2` first when HTTP/2 is on), session resumption by a server-side cache and by tickets), the certificate
//! store that a SIGHUP reloads without touching open connections, the key-file permission
//! check, the kernel-TLS probe, and throwaway certificates for tests and the bench.
//!
//! Body path. With TLS the kernel cannot `sendfile` plaintext from the page cache unless it
//! encrypts itself (kTLS, the `tls` upper-layer protocol). vodkit has only the user-space
//! path: each window of a response is read into the connection's body buffer (`pread` from
//! the page cache; lent by [`BufferPool`] while the connection is busy), or taken from the
//! `--io direct` pool's chunks, and handed to rustls, which copies it into
//! a record, encrypts the record in place and queues it, and the record is written to the
//! socket. kTLS is detected and logged but not used: the machine this was built on has no
//! `CONFIG_TLS`, and a path that cannot be tested here is left out (see docs/server.md).

pub mod selfsigned;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;

/// TLS settings from the command line (`--tls-cert`, `--tls-key`).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1); must not be world-readable.
    pub key: PathBuf,
    /// A handshake must finish within this time of the TCP accept.
    pub handshake_timeout: Duration,
    /// Cipher suites offered, by rustls name (e.g. `TLS13_AES_128_GCM_SHA256`), in order of
    /// preference; empty: the `ring` provider's default list.
    pub cipher_suites: Vec<String>,
}

impl TlsSettings {
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsSettings {
        TlsSettings {
            cert: cert.into(),
            key: key.into(),
            handshake_timeout: Duration::from_secs(10),
            cipher_suites: Vec::new(),
        }
    }
}

/// Sessions kept by the server-side resumption cache (TLS 1.2 session ids, and TLS 1.3
/// stateful resumption when tickets are off).
const SESSION_CACHE: usize = 16384;

/// How response bodies are encrypted and sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPath {
    /// rustls encrypts in user space: `pread` (or the direct-I/O pool) → record → socket.
    Userspace,
}

impl BodyPath {
    pub fn describe(self, io: crate::IoMode) -> &'static str {
        match (self, io) {
            (BodyPath::Userspace, crate::IoMode::Direct) => {
                "user-space TLS: O_DIRECT buffer pool -> rustls record (copy, encrypt in place) -> socket"
            }
            (BodyPath::Userspace, _) => {
                "user-space TLS: pread from the page cache -> connection's body buffer -> rustls record (copy, encrypt in place) -> socket"
            }
        }
    }
}

/// Whether the kernel offers the `tls` upper-layer protocol (kTLS), from the text of
/// `/proc/sys/net/ipv4/tcp_available_ulp`.
pub fn ulp_lists_tls(available_ulp: &str) -> bool {
    available_ulp.split_whitespace().any(|w| w == "tls")
}

/// Probe this kernel for kTLS; `(available, what the file said)`.
pub fn probe_ktls() -> (bool, String) {
    match std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp") {
        Ok(text) => (ulp_lists_tls(&text), text.trim().to_string()),
        Err(e) => (false, format!("unreadable: {e}")),
    }
}

/// One line for the start-up log: whether the kernel offers kTLS and which body path
/// this server uses.
pub fn body_path_note(io: crate::IoMode) -> String {
    let (ktls, ulp) = probe_ktls();
    let path = BodyPath::Userspace.describe(io);
    if ktls {
        format!("TLS: the kernel offers kTLS (tcp_available_ulp: {ulp}) but vodkit has no kTLS path; body path: {path}")
    } else {
        format!("TLS: no kTLS in this kernel (tcp_available_ulp: {ulp}); body path: {path}")
    }
}

/// Refuse a key file that other users can read (mode `o+r`), with a one-line reason.
pub fn check_key_mode(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("--tls-key {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o004 != 0 {
        return Err(format!(
            "--tls-key {}: the private key is world-readable (mode {mode:04o}); chmod 600 it",
            path.display()
        ));
    }
    Ok(())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Names of the cipher suites this build offers (`--tls-ciphers` accepts these).
pub fn cipher_suite_names() -> Vec<String> {
    rustls::crypto::ring::default_provider()
        .cipher_suites
        .iter()
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// The provider restricted to `names` (in that order); errors name the unknown suite.
fn provider_with(names: &[String]) -> Result<Arc<rustls::crypto::CryptoProvider>, String> {
    let mut p = rustls::crypto::ring::default_provider();
    if names.is_empty() {
        return Ok(Arc::new(p));
    }
    let all = std::mem::take(&mut p.cipher_suites);
    for name in names {
        let suite = all
            .iter()
            .find(|s| format!("{:?}", s.suite()).eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                format!(
                    "--tls-ciphers: unknown suite {name:?}; expected some of {}",
                    cipher_suite_names().join(", ")
                )
            })?;
        p.cipher_suites.push(*suite);
    }
    Ok(Arc::new(p))
}

/// Read and check a certificate chain and its key; errors name the file.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    check_key_mode(key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: no CERTIFICATE block found",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    CertifiedKey::from_der(chain, key_der, &provider()).map_err(|e| {
        format!(
            "--tls-key {}: does not fit --tls-cert {}: {e}",
            key.display(),
            cert.display()
        )
    })
}

/// The certificate the server presents; replaced whole on reload, so handshakes in flight
/// keep the one they started with and established connections are not touched.
pub struct CertStore {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish()
    }
}

impl CertStore {
    pub fn open(settings: &TlsSettings) -> Result<CertStore, String> {
        let ck = load_certified_key(&settings.cert, &settings.key)?;
        Ok(CertStore {
            cert: settings.cert.clone(),
            key: settings.key.clone(),
            current: RwLock::new(Arc::new(ck)),
        })
    }

    /// Read the files again; on any error the old certificate stays in use.
    pub fn reload(&self) -> Result<(), String> {
        let ck = load_certified_key(&self.cert, &self.key)?;
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        *cur = Arc::new(ck);
        Ok(())
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// The ALPN protocol id of HTTP/2 over TLS.
pub const ALPN_H2: &[u8] = b"h2";

/// The rustls configuration: TLS 1.3 and 1.2 with the `ring` provider's suites, ALPN
/// `http/1.1` (preceded by `h2` with `http2`: a client that offers both gets HTTP/2), a
/// session cache and a ticketer (both kinds of resumption).
pub fn server_config(
    store: Arc<CertStore>,
    cipher_suites: &[String],
    http2: bool,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider_with(cipher_suites)?)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(store);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    if http2 {
        cfg.alpn_protocols.insert(0, ALPN_H2.to_vec());
    }
    cfg.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    cfg.ticketer =
        rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS ticketer: {e}"))?;
    Ok(Arc::new(cfg))
}

/// Body buffers lent to connections while they send a response, so that thousands of idle
/// keep-alive connections hold none, and busy ones reuse the same memory.
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    free: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Most idle buffers the pool keeps (beyond that, returned buffers are freed).
const POOL_KEEP: usize = 256;

impl BufferPool {
    /// A buffer of at least `len` bytes (contents unspecified).
    pub fn take(&self, len: usize) -> Vec<u8> {
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut b = reused.unwrap_or_default();
        if b.len() < len {
            b.resize(len, 0);
        }
        b
    }

    /// Give a buffer back (an empty one is simply dropped).
    pub fn put(&self, b: Vec<u8>) {
        if b.capacity() == 0 {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < POOL_KEEP {
            free.push(b);
        }
    }
}

/// A TLS listener's state, shared by its connections.
pub(crate) struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub store: Arc<CertStore>,
    pub handshake_timeout: Duration,
    pub buffers: BufferPool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("store", &self.store)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish()
    }
}

impl Tls {
    /// Load the certificate, build the acceptor (offering `h2` with `http2`) and log which
    /// body path this run uses.
    pub fn new(settings: &TlsSettings, io: crate::IoMode, http2: bool) -> Result<Tls, String> {
        let store = Arc::new(CertStore::open(settings)?);
        let cfg = server_config(store.clone(), &settings.cipher_suites, http2)?;
        tracing::info!("{}", body_path_note(io));
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(cfg),
            store,
            handshake_timeout: settings.handshake_timeout,
            buffers: BufferPool::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_suites_are_chosen_by_name() {
        let names = cipher_suite_names();
        assert!(
            names.iter().any(|n| n == "TLS13_AES_128_GCM_SHA256"),
            "{names:?}"
        );
        let p = provider_with(&["tls13_aes_128_gcm_sha256".into()]).unwrap();
        assert_eq!(p.cipher_suites.len(), 1);
        let e = provider_with(&["TLS13_ROT13".into()]).unwrap_err();
        assert!(
            e.contains("TLS13_ROT13") && e.contains("TLS13_AES_128_GCM_SHA256"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let files = selfsigned::write_dir(dir.path()).unwrap();
        let store = Arc::new(CertStore::open(&TlsSettings::new(&files.cert, &files.key)).unwrap());
        let cfg = server_config(store.clone(), &["TLS13_AES_128_GCM_SHA256".into()], false);
        assert_eq!(cfg.unwrap().alpn_protocols, vec![b"http/1.1".to_vec()]);
        let cfg = server_config(store, &[], true).unwrap();
        assert_eq!(
            cfg.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn the_buffer_pool_lends_and_reuses() {
        let pool = BufferPool::default();
        let a = pool.take(1000);
        assert!(a.len() >= 1000);
        let ptr = a.as_ptr();
        pool.put(a);
        let b = pool.take(10);
        assert_eq!(b.as_ptr(), ptr, "the returned buffer is lent again");
        pool.put(Vec::new());
        assert!(pool.free.lock().unwrap().is_empty());
        for _ in 0..POOL_KEEP + 5 {
            pool.put(vec![0u8; 1]);
        }
        assert_eq!(pool.free.lock().unwrap().len(), POOL_KEEP);
    }

    #[test]
    fn ulp_list_is_read_word_by_word() {
        assert!(!ulp_lists_tls("mptcp\n"));
        assert!(ulp_lists_tls("mptcp tls\n"));
        assert!(!ulp_lists_tls("tlsx"));
        assert!(!ulp_lists_tls(""));
    }

    #[test]
    fn world_readable_keys_are_refused_and_private_ones_load() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let files = selfsigned::write_dir(dir.path()).unwrap();
        assert!(load_certified_key(&files.cert, &files.key).is_ok());
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_certified_key(&files.cert, &files.key).unwrap_err();
        assert!(e.contains("world-readable") && !e.contains('\n'), "{e}");
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(check_key_mode(&files.key).is_ok());
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let fa = selfsigned::write_dir(a.path()).unwrap();
        let fb = selfsigned::write_dir(b.path()).unwrap();
        let e = load_certified_key(&fa.cert, &fb.key).unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        let store = CertStore::open(&TlsSettings::new(&fa.cert, &fa.key)).unwrap();
        let before = store.get();
        // A reload that fails keeps the old certificate.
        std::fs::copy(&fb.key, &fa.key).unwrap();
        assert!(store.reload().is_err());
        assert!(Arc::ptr_eq(&before, &store.get()));
        std::fs::copy(&fb.cert, &fa.cert).unwrap();
        store.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &store.get()));
    }
}

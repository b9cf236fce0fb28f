//! Admission control for a server the daemon cannot answer for: `GET /admit` on the admin
//! listener, asked by nginx's `auth_request` before each request (docs/preload.md,
//! "Admission control for nginx").
//!
//! The library sees only page-cache misses, not HTTP requests, so it cannot refuse
//! anyone. nginx can ask: `auth_request` sends a subrequest per client request, and the
//! daemon answers `204` (go on) or `403` with `Retry-After` (refuse), which nginx turns into
//! `503` with the same header. The daemon decides as `vodkit serve --admission` does (one
//! rule, [`vodkit_prefetch::admission`]): a request that continues an open chain of its
//! client is always let through; one that starts a new stream is refused when the device
//! its file lies on cannot take another. The request's file comes from the URI under the
//! document root (`--root`), its offset from the `Range` header, its client from the
//! session header or the address nginx passes.

use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use vodkit_prefetch::admission::{Admission, AdmissionPolicy, Decision, DeviceLoad};
use vodkit_prefetch::{ChainTracker, Engine};

/// One `/admit` question, from the headers nginx's subrequest carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct AdmitQuery<'a> {
    /// The client request's URI (`X-Original-URI`), query included.
    pub uri: &'a str,
    /// Its `Range` header (`X-Original-Range`), if any.
    pub range: Option<&'a str>,
    /// Who asks: a session id, else the client address (`X-Client`).
    pub client: &'a str,
}

/// The admission state behind `/admit`.
pub struct AdmitGate {
    root: Option<PathBuf>,
    admission: Mutex<Admission>,
    chains: Mutex<ChainTracker>,
    pub(crate) admitted: AtomicU64,
    pub(crate) refused: AtomicU64,
}

impl AdmitGate {
    pub fn new(policy: AdmissionPolicy, root: Option<PathBuf>) -> AdmitGate {
        AdmitGate {
            root,
            admission: Mutex::new(Admission::new(policy)),
            chains: Mutex::new(ChainTracker::default()),
            admitted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Decide on one request. Requests that do not name a regular file under the root
    /// are let through (the server answers them as it would).
    pub fn decide(&self, engine: &Engine, q: &AdmitQuery<'_>) -> Decision {
        let policy = self
            .admission
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .policy();
        if policy == AdmissionPolicy::Off {
            return Decision::Admit;
        }
        let Some(path) = self.root.as_deref().and_then(|r| resolve(r, q.uri)) else {
            return Decision::Admit;
        };
        let Ok(file) = File::open(&path) else {
            return Decision::Admit;
        };
        let Some(id) = super::regular_file_key(&file).map(|(k, _)| k.id) else {
            return Decision::Admit;
        };
        let (offset, len, open_ended) = parse_range(q.range);
        let client = client_key(q.client);
        let now = engine.now_s();
        let (new, open_chains) = {
            let mut chains = self.chains.lock().unwrap_or_else(|p| p.into_inner());
            let new = offset == 0 || !chains.continues(client, id, offset, now);
            if !new {
                chains.request(client, id, offset, len, open_ended, now);
            }
            (new, chains.len() as u64)
        };
        if !new {
            return Decision::Admit;
        }
        let load = DeviceLoad {
            streams: open_chains,
            ..engine.device_load(&file)
        };
        let decision = self
            .admission
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .decide(now, &load);
        match decision {
            Decision::Admit => {
                self.admitted.fetch_add(1, Ordering::Relaxed);
                // Only an admitted stream opens a chain its continuations will find.
                let mut chains = self.chains.lock().unwrap_or_else(|p| p.into_inner());
                chains.request(client, id, offset, len, open_ended, now);
            }
            Decision::Refuse { .. } => {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        decision
    }
}

/// The nginx directives that put a `server` block behind the daemon's `/admit` at `admin`
/// (the admin listener's address): every request is first asked about with
/// `auth_request`; a refusal (`403` from `/admit`) becomes `503` with the daemon's
/// `Retry-After`. nginx's own 403s (a file it may not read) turn into 503s as well.
pub fn nginx_directives(admin: std::net::SocketAddr) -> String {
    format!(
        "        # vodkit prefetchd admission: ask /admit before every request.\n\
        auth_request /_vodkit_admit;\n\
        auth_request_set $vodkit_retry_after $upstream_http_retry_after;\n\
        error_page 403 = @vodkit_busy;\n\
        location = /_vodkit_admit {{\n\
            internal;\n\
            auth_request off;\n\
            proxy_pass http://{admin}/admit;\n\
            proxy_pass_request_body off;\n\
            proxy_set_header Content-Length \"\";\n\
            proxy_set_header X-Original-URI $request_uri;\n\
            proxy_set_header X-Original-Range $http_range;\n\
            proxy_set_header X-Session-Id $http_x_session_id;\n\
            proxy_set_header X-Client $remote_addr;\n\
        }}\n\
        location @vodkit_busy {{\n\
            auth_request off;\n\
            add_header Retry-After $vodkit_retry_after always;\n\
            return 503;\n\
        }}\n"
    )
}

/// The file a URI names under `root`: the path part, percent-decoded, with no `..`.
fn resolve(root: &Path, uri: &str) -> Option<PathBuf> {
    let path = uri.split(['?', '#']).next()?;
    let decoded = percent_decode(path)?;
    let rel = Path::new(decoded.trim_start_matches('/'));
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return None;
    }
    let full = root.join(rel);
    full.is_file().then_some(full)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `(offset, length, open-ended)` of the first range of a `Range` header; the whole file
/// (offset 0) without one or when it cannot be read.
fn parse_range(range: Option<&str>) -> (u64, u64, bool) {
    let Some(spec) = range.and_then(|r| r.trim().strip_prefix("bytes=")) else {
        return (0, 0, true);
    };
    let first = spec.split(',').next().unwrap_or("");
    let Some((a, b)) = first.split_once('-') else {
        return (0, 0, true);
    };
    match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
        (Ok(a), Ok(b)) if b >= a => (a, b - a + 1, false),
        (Ok(a), Err(_)) if b.trim().is_empty() => (a, 0, true),
        _ => (0, 0, true),
    }
}

fn client_key(client: &str) -> u64 {
    let mut h = DefaultHasher::new();
    client.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_uris_are_read_like_a_server_reads_them() {
        assert_eq!(parse_range(Some("bytes=100-199")), (100, 100, false));
        assert_eq!(parse_range(Some("bytes=4096-")), (4096, 0, true));
        assert_eq!(parse_range(Some("bytes=0-9,20-29")), (0, 10, false));
        assert_eq!(parse_range(Some("bytes=-500")), (0, 0, true));
        assert_eq!(parse_range(Some("items=1-2")), (0, 0, true));
        assert_eq!(parse_range(None), (0, 0, true));

        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("t 1")).unwrap();
        std::fs::write(dir.path().join("t 1/a.mp4"), b"x").unwrap();
        let want = dir.path().join("t 1/a.mp4");
        assert_eq!(resolve(dir.path(), "/t%201/a.mp4?x=1"), Some(want.clone()));
        assert_eq!(resolve(dir.path(), "/t%201/./a.mp4"), Some(want));
        assert_eq!(resolve(dir.path(), "/t%201/../t%201/a.mp4"), None);
        assert_eq!(resolve(dir.path(), "/t%201"), None, "a directory");
        assert_eq!(resolve(dir.path(), "/%zz"), None);
        assert_eq!(resolve(dir.path(), "/missing.mp4"), None);
    }
}

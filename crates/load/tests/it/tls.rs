//! HTTPS load runs against the vodkit origin with TLS: a verified replay over
//! TLS has no corrupt byte and resumes each viewer's session on its second connection;
//! an expired or wrong-host certificate is refused unless `--insecure`.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::{ranges_of, req, run, write_file};
use vodkit_load::record::FailureReason;
use vodkit_load::{Target, TlsClient, Trust};
use vodkit_server::tls::selfsigned::{self, LeafSpec};
use vodkit_server::tls::TlsSettings;
use vodkit_testkit::server::TestServer;
use vodkit_workload::model::{ByteRange, Session};

const FILE: usize = 3 * 1024 * 1024 + 11;

struct Origin {
    server: TestServer,
    _root: tempfile::TempDir,
}

impl Origin {
    fn start(cert: &Path, key: &Path) -> Origin {
        let root = tempfile::tempdir().unwrap();
        write_file(root.path(), "v/a.mp4", FILE);
        write_file(root.path(), "v/b.mp4", 700_001);
        let server = TestServer::serving(root.path(), |config| {
            config.tls = Some(TlsSettings::new(cert, key));
        });
        Origin {
            server,
            _root: root,
        }
    }

    fn target(&self, host: &str) -> Target {
        Target::parse(
            &format!("https://{host}:{}", self.server.addr.port()),
            false,
        )
        .unwrap()
    }

    fn stats(&self) -> vodkit_server::metrics::Stats {
        self.server.stats()
    }
}

/// Sessions that read the whole of both files in ranges, whole-file requests and an
/// open-ended range, each on two connections.
fn sessions(n: u64) -> Vec<Session> {
    (0..n)
        .map(|id| {
            let mut requests = ranges_of("/v/a.mp4", FILE as u64, 512 * 1024, |_| 0);
            requests.push(req("/v/b.mp4", None, 1));
            requests.push(req(
                "/v/b.mp4",
                Some(ByteRange::OpenEnded {
                    first: 1000,
                    read: 300_000,
                }),
                1,
            ));
            Session::new(id, 0.0, "default", requests)
        })
        .collect()
}

#[test]
fn a_verified_replay_over_tls_has_no_corrupt_byte() {
    let certs = tempfile::tempdir().unwrap();
    let files = selfsigned::write_dir(certs.path()).unwrap();
    let origin = Origin::start(&files.cert, &files.key);
    let target = origin.target("localhost");
    let n = 4;
    let out = run(target.clone(), sessions(n), |c| {
        c.verify = true;
        c.tls = Some(TlsClient::new(Trust::Ca(files.ca.clone()), &target.name).unwrap());
    });
    let r = &out.results;
    assert!(r.requests.errors.is_empty(), "{}", r.summary());
    assert_eq!(r.sessions.completed, n, "{}", r.summary());
    let per_session = (FILE as u64).div_ceil(512 * 1024) + 2;
    assert_eq!(r.requests.completed, n * per_session);
    assert_eq!(r.requests.bytes, n * (FILE as u64 + 700_001 + 300_000));
    // Each viewer's second connection (and the one after the open-ended read closes
    // its connection) resumes that viewer's session.
    let st = origin.stats();
    assert_eq!(st.tls_handshake_failures, 0);
    assert!(st.tls_handshakes >= 2 * n, "{}", st.tls_handshakes);
    assert!(
        st.tls_resumed >= n,
        "resumed {} of {}",
        st.tls_resumed,
        st.tls_handshakes
    );
}

/// Run one small session against `origin` with `trust`; the failure reason and detail of
/// its first request, if any.
fn one_session(origin: &Origin, host: &str, trust: Trust) -> Option<(FailureReason, String)> {
    let target = origin.target(host);
    let request = req("/v/b.mp4", Some(ByteRange::closed(0, 10_000)), 0);
    let s = vec![Session::new(1, 0.0, "default", vec![request])];
    let out = run(target.clone(), s, |c| {
        c.verify = true;
        c.tls = Some(TlsClient::new(trust, &target.name).unwrap());
    });
    let rec = &out.sessions[0].requests[0];
    rec.failure
        .as_ref()
        .map(|f| (f.reason, f.detail.clone()))
        .or_else(|| {
            assert_eq!(rec.bytes, 10_000);
            None
        })
}

fn origin_with(spec: &LeafSpec) -> (tempfile::TempDir, Arc<Origin>, std::path::PathBuf) {
    let certs = tempfile::tempdir().unwrap();
    let files =
        selfsigned::write_bundle(certs.path(), &selfsigned::generate(spec).unwrap()).unwrap();
    let origin = Arc::new(Origin::start(&files.cert, &files.key));
    (certs, origin, files.ca)
}

#[test]
fn an_expired_certificate_is_refused_unless_insecure() {
    let spec = LeafSpec {
        validity: Some(((2001, 1, 1), (2002, 1, 1))),
        ..LeafSpec::default()
    };
    let (_d, origin, ca) = origin_with(&spec);
    let (reason, detail) = one_session(&origin, "localhost", Trust::Ca(ca)).expect("refused");
    assert_eq!(reason, FailureReason::Connect);
    assert!(
        detail.contains("TLS handshake") && detail.to_lowercase().contains("expired"),
        "{detail}"
    );
    assert_eq!(one_session(&origin, "localhost", Trust::Insecure), None);
}

#[test]
fn a_wrong_host_certificate_is_refused_unless_insecure() {
    let spec = LeafSpec {
        hosts: vec!["video.example.invalid".into()],
        ..LeafSpec::default()
    };
    let (_d, origin, ca) = origin_with(&spec);
    let (reason, detail) =
        one_session(&origin, "127.0.0.1", Trust::Ca(ca.clone())).expect("refused");
    assert_eq!(reason, FailureReason::Connect);
    assert!(
        detail.contains("TLS handshake") && detail.contains("certificate"),
        "{detail}"
    );
    assert!(one_session(&origin, "localhost", Trust::Ca(ca)).is_some());
    assert_eq!(one_session(&origin, "127.0.0.1", Trust::Insecure), None);
}

#[test]
fn an_https_target_needs_a_trust_choice() {
    let target = Target::parse("https://127.0.0.1:1", false).unwrap();
    let config = vodkit_load::LoadConfig::new(target, sessions(1), 1.0);
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("--ca") && e.contains("--insecure"), "{e}");
}

//! `+tls` and `+h2` servers under test: vodkit, nginx and Apache start on HTTPS with a
//! throwaway CA and certificate made in their run directory, and the bench's load driver
//! replays sessions against them trusting that CA; with `+h2` curl and the load driver speak
//! HTTP/2 to vodkit (TLS and h2c) and nginx (TLS).

use std::os::unix::fs::PermissionsExt;
use vodkit_bench::adapters::WorkloadLoad;
use vodkit_bench::experiment::LoadDriver;
use vodkit_bench::sut::parse_list;

const FILE_BYTES: u64 = 1 << 20;

#[test]
fn tls_suts_serve_https_with_a_per_run_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..FILE_BYTES).map(|b| (b * 13 % 251) as u8).collect();
    let (mut launcher, run_base) = crate::t0_launcher(dir.path(), &body);
    let mut load = WorkloadLoad::of(crate::ranged_sessions(6, 4, 1 << 18));
    let mut served = 0;
    for sut in parse_list("vodkit+tls,nginx+tls,apache+tls").unwrap() {
        assert!(sut.tls);
        let Some(server) = crate::start_or_skip(&mut launcher, &sut) else {
            continue;
        };
        let url = server.base_url();
        assert!(url.starts_with("https://127.0.0.1:"), "{sut}: {url}");
        let ca = server.tls_ca().expect("a +tls server names its CA");
        assert!(ca.starts_with(&run_base), "{}", ca.display());
        let key = ca.with_file_name("key.pem");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{sut}: key mode");
        // Exact bytes through curl, trusting only the run's CA.
        if crate::has_curl() {
            let out = std::process::Command::new("curl")
                .args(["-sS", "--tlsv1.3", "--cacert"])
                .arg(&ca)
                .args(["-r", "1000-200999"])
                .arg(format!("{url}/t0.mp4"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{sut}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout == body[1000..201_000], "{sut}: body differs");
        }
        load.set_tls_ca(server.tls_ca());
        let outcome = load.run(&url, 50.0, 0).unwrap();
        assert_eq!(outcome.client.sessions, 6, "{sut}");
        assert_eq!(outcome.client.failed_sessions, 0, "{sut}");
        // Without the CA the same run fails every session at the handshake.
        load.set_tls_ca(Some(dir.path().join("no-ca.pem")));
        assert!(
            load.run(&url, 50.0, 0).is_err(),
            "{sut}: a missing CA file is an error"
        );
        let errors = server.stop().unwrap();
        eprintln!("{sut}: served {url} (error-log lines: {errors:?})");
        served += 1;
    }
    assert!(served >= 1);
}

#[test]
fn h2_suts_speak_http2_to_curl_and_the_load_driver() {
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..FILE_BYTES).map(|b| (b * 7 % 253) as u8).collect();
    let (mut launcher, _run_base) = crate::t0_launcher(dir.path(), &body);
    let mut load = WorkloadLoad::of(crate::ranged_sessions(6, 4, 1 << 18));
    let mut served = 0;
    for sut in parse_list("vodkit+h2,vodkit+tls+h2,nginx+tls+h2").unwrap() {
        assert!(sut.h2);
        let Some(server) = crate::start_or_skip(&mut launcher, &sut) else {
            continue;
        };
        let url = server.base_url();
        if crate::has_curl() {
            let mut curl = std::process::Command::new("curl");
            curl.args(["-sS", "-w", "%{http_version}", "-o"])
                .arg(dir.path().join("got"));
            match server.tls_ca() {
                Some(ca) => curl.arg("--http2").arg("--cacert").arg(ca),
                None => curl.arg("--http2-prior-knowledge"),
            };
            let out = curl
                .args(["-r", "1000-200999"])
                .arg(format!("{url}/t0.mp4"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{sut}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), "2", "{sut}");
            let got = std::fs::read(dir.path().join("got")).unwrap();
            assert!(got == body[1000..201_000], "{sut}: body differs");
        }
        load.set_tls_ca(server.tls_ca());
        load.set_http2(true);
        let outcome = load.run(&url, 50.0, 0).unwrap();
        assert_eq!(outcome.client.sessions, 6, "{sut}");
        assert_eq!(outcome.client.failed_sessions, 0, "{sut}");
        let errors = server.stop().unwrap();
        eprintln!("{sut}: served {url} over HTTP/2 (error-log lines: {errors:?})");
        served += 1;
    }
    assert!(served >= 2);
}

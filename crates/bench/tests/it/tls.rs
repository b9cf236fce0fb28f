//! `+tls` and `+h2` servers under test: vodkit, nginx and Apache start on HTTPS with a
//! throwaway CA and certificate made in their run directory, and the bench's load driver
//! replays sessions against them trusting that CA; with `+h2` curl and the load driver speak
//! HTTP/2 to vodkit (TLS and h2c) and nginx (TLS).

use std::os::unix::fs::PermissionsExt;
use vodkit_bench::adapters::WorkloadLoad;
use vodkit_bench::experiment::LoadDriver;

const FILE_BYTES: u64 = 1 << 20;

/// A patterned `/t0.mp4` under `dir`, a launcher serving it, and six sessions of ranged
/// requests for the load driver.
struct T0 {
    body: Vec<u8>,
    launcher: vodkit_bench::launch::LocalLauncher,
    /// Where the launcher's runs get their directories.
    run_base: std::path::PathBuf,
    load: WorkloadLoad,
}

fn t0(dir: &std::path::Path) -> T0 {
    let body: Vec<u8> = (0..FILE_BYTES).map(|b| (b * 13 % 251) as u8).collect();
    let (launcher, run_base) = crate::t0_launcher(dir, &body);
    let load = WorkloadLoad::of(crate::ranged_sessions(6, 4, 1 << 18));
    T0 {
        body,
        launcher,
        run_base,
        load,
    }
}

#[test]
fn tls_suts_serve_https_with_a_per_run_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = t0(dir.path());
    let list = "vodkit+tls,nginx+tls,apache+tls";
    let served = crate::check_each(&mut t.launcher, list, |sut, server| {
        assert!(sut.tls);
        let url = server.base_url();
        assert!(url.starts_with("https://127.0.0.1:"), "{sut}: {url}");
        let ca = server.tls_ca().expect("a +tls server names its CA");
        assert!(ca.starts_with(&t.run_base), "{}", ca.display());
        let key = ca.with_file_name("key.pem");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{sut}: key mode");
        // Exact bytes through curl, trusting only the run's CA.
        if crate::has_curl() {
            let mut curl = std::process::Command::new("curl");
            curl.args(["-sS", "--tlsv1.3", "--cacert"]).arg(&ca);
            let out = fetch_range(curl, &url, sut);
            assert!(out.stdout == t.body[1000..201_000], "{sut}: body differs");
        }
        t.load.set_tls_ca(server.tls_ca());
        crate::assert_all_played(&mut t.load, &url, 6, sut);
        // Without the CA the same run fails every session at the handshake.
        t.load.set_tls_ca(Some(dir.path().join("no-ca.pem")));
        assert!(
            t.load.run(&url, 50.0, 0).is_err(),
            "{sut}: a missing CA file is an error"
        );
    });
    assert!(served >= 1);
}

#[test]
fn h2_suts_speak_http2_to_curl_and_the_load_driver() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = t0(dir.path());
    let list = "vodkit+h2,vodkit+tls+h2,nginx+tls+h2";
    let served = crate::check_each(&mut t.launcher, list, |sut, server| {
        assert!(sut.h2);
        let url = server.base_url();
        if crate::has_curl() {
            let mut curl = std::process::Command::new("curl");
            curl.args(["-sS", "-w", "%{http_version}", "-o"])
                .arg(dir.path().join("got"));
            match server.tls_ca() {
                Some(ca) => curl.arg("--http2").arg("--cacert").arg(ca),
                None => curl.arg("--http2-prior-knowledge"),
            };
            let out = fetch_range(curl, &url, sut);
            assert_eq!(String::from_utf8_lossy(&out.stdout), "2", "{sut}");
            let got = std::fs::read(dir.path().join("got")).unwrap();
            assert!(got == t.body[1000..201_000], "{sut}: body differs");
        }
        t.load.set_tls_ca(server.tls_ca());
        t.load.set_http2(true);
        crate::assert_all_played(&mut t.load, &url, 6, sut);
    });
    assert!(served >= 2);
}

/// `curl` (its options set) fetching bytes 1000 to 200999 of `url`'s `/t0.mp4`, which must
/// succeed.
fn fetch_range(
    mut curl: std::process::Command,
    url: &str,
    sut: &vodkit_bench::sut::Sut,
) -> std::process::Output {
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
    out
}

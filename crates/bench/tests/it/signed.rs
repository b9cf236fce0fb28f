//! `+sign` servers under test: vodkit and nginx start requiring signed URLs with a secret
//! made in their run directory, the readiness probe and the bench's load driver sign with
//! it, and the same run without the secret fails every session.

use vodkit_bench::adapters::WorkloadLoad;
use vodkit_bench::experiment::LoadDriver;

#[test]
fn sign_suts_refuse_unsigned_urls_and_serve_the_signing_load() {
    let dir = tempfile::tempdir().unwrap();
    let (mut launcher, _) = crate::t0_launcher(dir.path(), &[7u8; 1 << 18]);
    let mut load = WorkloadLoad::of(crate::ranged_sessions(4, 3, 1 << 16));
    load.warm_start = vodkit_load::WarmStart::Off;
    let served = crate::check_each(&mut launcher, "vodkit+sign,nginx+sign", |sut, server| {
        assert!(sut.sign);
        let url = server.base_url();
        let secret = server
            .url_secret()
            .expect("a +sign server names its secret");
        let addr = url.trim_start_matches("http://").to_string();
        assert_eq!(vodkit_testkit::http::get(&addr, "/t0.mp4").0, 403, "{sut}");
        load.set_url_secret(Some(secret));
        crate::assert_all_played(&mut load, &url, 4, sut);
        load.set_url_secret(None);
        let unsigned = load.run(&url, 50.0, 0).unwrap();
        assert_eq!(
            unsigned.client.failed_sessions, 4,
            "{sut}: unsigned sessions fail"
        );
    });
    assert!(served >= 1);
}

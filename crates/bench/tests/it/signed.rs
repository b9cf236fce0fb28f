//! `+sign` servers under test: vodkit and nginx start requiring signed URLs with a secret
//! made in their run directory, the readiness probe and the bench's load driver sign with
//! it, and the same run without the secret fails every session.

use vodkit_bench::adapters::WorkloadLoad;
use vodkit_bench::experiment::LoadDriver;
use vodkit_bench::sut::parse_list;

#[test]
fn sign_suts_refuse_unsigned_urls_and_serve_the_signing_load() {
    let dir = tempfile::tempdir().unwrap();
    let (mut launcher, _) = crate::t0_launcher(dir.path(), &[7u8; 1 << 18]);
    let mut load = WorkloadLoad::of(crate::ranged_sessions(4, 3, 1 << 16));
    load.warm_start = vodkit_load::WarmStart::Off;
    let mut served = 0;
    for sut in parse_list("vodkit+sign,nginx+sign").unwrap() {
        assert!(sut.sign);
        let Some(server) = crate::start_or_skip(&mut launcher, &sut) else {
            continue;
        };
        let url = server.base_url();
        let secret = server
            .url_secret()
            .expect("a +sign server names its secret");
        let addr = url.trim_start_matches("http://").to_string();
        assert_eq!(vodkit_testkit::http::get(&addr, "/t0.mp4").0, 403, "{sut}");
        load.set_url_secret(Some(secret));
        let outcome = load.run(&url, 50.0, 0).unwrap();
        assert_eq!(outcome.client.sessions, 4, "{sut}");
        assert_eq!(outcome.client.failed_sessions, 0, "{sut}");
        load.set_url_secret(None);
        let unsigned = load.run(&url, 50.0, 0).unwrap();
        assert_eq!(
            unsigned.client.failed_sessions, 4,
            "{sut}: unsigned sessions fail"
        );
        server.stop().unwrap();
        served += 1;
    }
    assert!(served >= 1);
}

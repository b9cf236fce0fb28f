//! `+sign` servers under test: vodkit and nginx start requiring signed URLs with a secret
//! made in their run directory, the readiness probe and the bench's load driver sign with
//! it, and the same run without the secret fails every session.

use std::os::unix::fs::PermissionsExt;
use vodkit_bench::adapters::{InProcessVodkit, WorkloadLoad};
use vodkit_bench::experiment::{Launcher, LoadDriver};
use vodkit_bench::launch::LocalLauncher;
use vodkit_bench::sut::parse_list;
use vodkit_workload::model::{ByteRange, Request, Session};

fn sessions(n: u64) -> Vec<Session> {
    (0..n)
        .map(|id| {
            let requests = (0..3)
                .map(|k| Request::new("/t0.mp4", Some(ByteRange::closed(k << 16, 1 << 16)), 10.0))
                .collect();
            Session::new(id, 0.01, "lan", requests)
        })
        .collect()
}

#[test]
fn sign_suts_refuse_unsigned_urls_and_serve_the_signing_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("video");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(root.join("t0.mp4"), vec![7u8; 1 << 18]).unwrap();
    let run_base = dir.path().join("runs");
    let mut launcher = LocalLauncher::new(root.clone(), run_base, "/t0.mp4".into());
    launcher.workers = 1;
    launcher.vodkit = Ok(Box::new(InProcessVodkit::new().unwrap()));
    let mut load = WorkloadLoad::of(sessions(4));
    load.warm_start = vodkit_load::WarmStart::Off;
    let mut served = 0;
    for sut in parse_list("vodkit+sign,nginx+sign").unwrap() {
        assert!(sut.sign);
        if let Err(why) = launcher.available(&sut) {
            if sut.kind() == "vodkit" {
                vodkit_testkit::need::not_here(format_args!("{sut}: {why}"));
            } else {
                vodkit_testkit::skip(format_args!("{sut}: {why}"));
            }
            continue;
        }
        let server = launcher
            .start(&sut)
            .unwrap_or_else(|e| panic!("{sut} starts: {e:?}"));
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

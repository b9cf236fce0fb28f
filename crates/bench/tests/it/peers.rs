//! nginx and Apache start with the generated configs and serve a file (whole and by range).
//! Where a peer is not installed the test says so, and fails when `CI` is set.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use vodkit_peers::launch::{self as peers, PeerSetup};
use vodkit_peers::process::{http_get, ServerProcess};
use vodkit_testkit::{needs, Need};

fn fixture() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    // Workers may run as an unprivileged user: the file set must be world-readable.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().join("video");
    std::fs::create_dir_all(root.join("t")).unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("t/title-1.mp4"), &body).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(root.join("t"), std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, body)
}

fn check_serves(server: ServerProcess, body: &[u8]) {
    let (status, got) = http_get(server.port, "/t/title-1.mp4").unwrap();
    assert_eq!(status, 200);
    assert_eq!(got.len(), body.len());
    assert!(got == body, "body differs");
    let (status, _) = http_get(server.port, "/t/no-such-title.mp4").unwrap();
    assert_eq!(status, 404);
    let errors = server.stop(Duration::from_secs(10)).unwrap();
    // A 404 is logged by nginx as an [error] "open() failed" line: exactly one such line.
    assert!(errors.len() <= 1, "unexpected error lines: {errors:?}");
}

/// Starts a peer with its generated config on the fixture and checks what it serves;
/// returns the fixture and the run directory.
fn serves_with_generated_config(
    start: vodkit_peers::StartPeer,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, body) = fixture();
    let run = dir.path().join("run");
    let root = dir.path().join("video");
    let setup = PeerSetup::new(&root, &run, "/t/title-1.mp4", 2);
    check_serves(start(&setup, &peers::no_wrap).unwrap(), &body);
    (dir, run)
}

#[test]
fn nginx_serves_with_generated_config() {
    if !needs(&[Need::Peer("nginx")]) {
        return;
    }
    let (_dir, run) = serves_with_generated_config(peers::start_nginx);
    assert!(std::fs::read_to_string(run.join("access.log"))
        .unwrap()
        .contains("/t/title-1.mp4"));
}

#[test]
fn apache_serves_with_generated_config() {
    if !needs(&[Need::Peer("apache2")]) {
        return;
    }
    serves_with_generated_config(peers::start_apache);
}

#[test]
fn a_broken_root_is_a_clear_start_error_not_a_hang() {
    if !needs(&[Need::Peer("nginx")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    // A file where the pid directory should be makes nginx fail at start-up.
    let bad_run = run.join("pid-is-a-file/x");
    let setup = PeerSetup::new(dir.path(), &bad_run, "/", 1);
    std::fs::write(run.join("pid-is-a-file"), b"").unwrap();
    let e = peers::start_nginx(&setup, &peers::no_wrap)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nginx"), "{e}");
}

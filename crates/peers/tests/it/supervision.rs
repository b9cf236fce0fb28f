//! Supervising real peers: a stop takes the workers down with the main process, a command
//! wrap's environment reaches the server, and a failing wrap is a start error. Where a peer
//! is not installed the test says so, and fails when `CI` is set.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use vodkit_peers::{
    no_wrap, start_apache, start_nginx, PeerError, PeerSetup, ServerProcess, StartPeer, Wrap,
};
use vodkit_testkit::{needs, Need};

/// A file set with one title, readable by workers that drop privileges.
fn file_set() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("video");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("title.mp4"), vec![7u8; 4096]).unwrap();
    for p in [dir.path(), root.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Processes (not yet zombies) whose process group is `pgid`.
fn live_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state, ppid, pgrp, ...
        let rest: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        if rest.len() > 2 && rest[0] != "Z" && rest[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

fn wait_for_no_members(pgid: u32) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = live_members(pgid);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Start a peer on `dir`'s file set, with its config and logs in `dir/run`.
fn start_on(dir: &Path, start: StartPeer, wrap: Wrap<'_>) -> Result<ServerProcess, PeerError> {
    let (root, run) = (dir.join("video"), dir.join("run"));
    let setup = PeerSetup::new(&root, &run, "/title.mp4", 2);
    start(&setup, wrap)
}

/// `peer` started by `start` on a file set of its own, unwrapped; `None` (and the skip
/// said) where the peer is not installed.
fn started(peer: &str, start: StartPeer) -> Option<(tempfile::TempDir, ServerProcess)> {
    if !needs(&[Need::Peer(peer)]) {
        return None;
    }
    let dir = file_set();
    let server = start_on(dir.path(), start, &no_wrap).unwrap();
    Some((dir, server))
}

/// Nothing of the group is left running and the port is free again.
fn assert_gone(pgid: u32, port: u16) {
    assert_eq!(wait_for_no_members(pgid), Vec::<u32>::new());
    assert!(port_is_free(port), "port {port} is still held");
}

#[test]
fn a_hard_stop_kills_the_workers_too() {
    let Some((_dir, server)) = started("nginx", start_nginx) else {
        return;
    };
    let (pgid, port) = (server.pid(), server.port);
    assert!(
        live_members(pgid).len() >= 3,
        "nginx master and two workers should share the group: {:?}",
        live_members(pgid)
    );
    // A master that cannot act on SIGTERM (stopped here) never takes its workers down
    // itself: only the group kill after the grace period does.
    // SAFETY: kill(2) on the test's own unreaped child.
    assert_eq!(unsafe { libc::kill(pgid as libc::pid_t, libc::SIGSTOP) }, 0);
    server.stop(Duration::from_millis(300)).unwrap();
    assert_gone(pgid, port);
}

#[test]
fn a_dropped_server_leaves_nothing_behind() {
    let Some((_dir, server)) = started("apache2", start_apache) else {
        return;
    };
    let (pgid, port) = (server.pid(), server.port);
    assert!(live_members(pgid).len() >= 2, "{:?}", live_members(pgid));
    drop(server);
    assert_gone(pgid, port);
}

/// The server's environment (Apache keeps it readable; nginx writes its title over it).
fn environment(server: &ServerProcess) -> String {
    let raw = std::fs::read(format!("/proc/{}/environ", server.pid())).unwrap();
    String::from_utf8_lossy(&raw).replace('\0', "\n")
}

#[test]
fn the_wrap_environment_reaches_the_server() {
    if !needs(&[Need::Peer("apache2")]) {
        return;
    }
    let dir = file_set();
    let wrap = |mut cmd: Command| -> Result<Command, String> {
        cmd.env("VODKIT_PEERS_WRAPPED", "yes");
        Ok(cmd)
    };
    let server = start_on(dir.path(), start_apache, &wrap).unwrap();
    assert!(
        environment(&server)
            .lines()
            .any(|l| l == "VODKIT_PEERS_WRAPPED=yes"),
        "{}",
        environment(&server)
    );
    let errors = server.stop(Duration::from_secs(10)).unwrap();
    assert_eq!(errors, Vec::<String>::new());
}

#[test]
fn a_failing_wrap_is_a_start_error() {
    if !needs(&[Need::Peer("nginx")]) {
        return;
    }
    let dir = file_set();
    let wrap = |_: Command| -> Result<Command, String> { Err("no memory budget here".into()) };
    let e = start_on(dir.path(), start_nginx, &wrap)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, PeerError::Wrap(_)), "{e:?}");
    assert_eq!(e.to_string(), "no memory budget here");
}

#[test]
fn nginx_takes_the_open_file_cache_directives() {
    if !needs(&[Need::Peer("nginx")]) {
        return;
    }
    let dir = file_set();
    let (root, run) = (dir.path().join("video"), dir.path().join("run"));
    let extra = vodkit_peers::nginx::open_file_cache_directives(64);
    let setup = PeerSetup {
        server_extra: Some(&extra),
        ..PeerSetup::new(&root, &run, "/title.mp4", 2)
    };
    // nginx refuses to start on a directive it does not know or a bad value.
    let server = start_nginx(&setup, &no_wrap).unwrap();
    let conf = std::fs::read_to_string(run.join("nginx.conf")).unwrap();
    assert!(
        conf.contains("open_file_cache max=64 inactive=60s;"),
        "{conf}"
    );
    server.stop(Duration::from_secs(5)).unwrap();
}

//! Cluster entries start for real: `cluster:2:nginx@haproxy:title` brings up two nginx
//! origins and HAProxy in front of them, every file answers through the balancer, the
//! report note gives each origin's share of the requests, and a stop takes all of it
//! down; a vodkit cluster behind nginx's balancer serves the same way.

use std::os::unix::fs::PermissionsExt;
use vodkit_bench::adapters::InProcessVodkit;
use vodkit_bench::experiment::Launcher;
use vodkit_bench::launch::LocalLauncher;
use vodkit_bench::sut::parse_one;
use vodkit_testkit::{needs, Need};

fn file_set(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("video");
    std::fs::create_dir_all(&root).unwrap();
    for d in [dir, root.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for i in 0..12 {
        std::fs::write(root.join(format!("t{i}.mp4")), vec![i as u8; 4096]).unwrap();
    }
    root
}

fn serve_through(entry: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let root = file_set(dir.path());
    let mut launcher = LocalLauncher::new(root, dir.path().join("runs"), "/t0.mp4".into());
    launcher.vodkit = Ok(Box::new(InProcessVodkit::new().unwrap()));
    let sut = parse_one(entry).unwrap();
    launcher.available(&sut).unwrap();
    let running = launcher.start(&sut).unwrap();
    let url = running.base_url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    for i in 0..12 {
        let (status, body) = vodkit_peers::http_get(port, &format!("/t{i}.mp4")).unwrap();
        assert_eq!((status, body.len()), (200, 4096), "{entry}: /t{i}.mp4");
    }
    // Two origins' processes (nginx) or none (vodkit in this process), and the balancer.
    assert!(!running.pids().is_empty());
    let notes = running.notes();
    running.stop().unwrap();
    assert!(
        vodkit_peers::http_get(port, "/t0.mp4").is_err(),
        "{entry}: the balancer still answers after the stop"
    );
    notes
}

#[test]
fn an_nginx_cluster_behind_haproxy_serves_and_reports_each_origins_share() {
    if !needs(&[Need::Peer("nginx"), Need::Peer("haproxy")]) {
        return;
    }
    let notes = serve_through("cluster:2:nginx@haproxy:title");
    let note = notes
        .iter()
        .find(|n| n.starts_with("origins (from HAProxy)"))
        .unwrap_or_else(|| panic!("no per-origin note in {notes:?}"));
    let sessions: u64 = note
        .split("; ")
        .filter_map(|p| {
            let words: Vec<&str> = p.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "sessions")?;
            words.get(at.checked_sub(1)?)?.parse::<u64>().ok()
        })
        .sum();
    // The twelve requests and the readiness probe.
    assert_eq!(sessions, 13, "{note}");
    assert!(note.contains("o1 ") && note.contains("o2 "), "{note}");
}

#[test]
fn a_vodkit_cluster_behind_nginx_serves() {
    if !needs(&[Need::Peer("nginx")]) {
        return;
    }
    serve_through("cluster:2:vodkit:vanilla@nginx:roundrobin");
}

/// `:live=1`: the last origin gets the live paths and nothing else.
#[test]
fn live_and_on_demand_apart_sends_live_paths_to_the_live_origin_only() {
    if !needs(&[Need::Peer("nginx"), Need::Peer("haproxy")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = file_set(dir.path());
    for s in 0..4 {
        let d = root.join(format!("live/s{s}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(root.join("live"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(d.join("seg-1.m4s"), vec![1u8; 1000]).unwrap();
    }
    let mut launcher = LocalLauncher::new(root, dir.path().join("runs"), "/t0.mp4".into());
    let sut = parse_one("cluster:3:nginx@haproxy:title:live=1").unwrap();
    let running = launcher.start(&sut).unwrap();
    let url = running.base_url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    for s in 0..4 {
        let (status, _) = vodkit_peers::http_get(port, &format!("/live/s{s}/seg-1.m4s")).unwrap();
        assert_eq!(status, 200);
    }
    let notes = running.notes();
    running.stop().unwrap();
    let note = notes
        .iter()
        .find(|n| n.starts_with("origins (from HAProxy)"))
        .unwrap_or_else(|| panic!("no per-origin note in {notes:?}"));
    assert!(note.contains("l1 4 sessions"), "{note}");
    // The on-demand origins saw only the readiness probe.
    assert_eq!(
        note.matches(" 0 sessions").count() + note.matches(" 1 sessions").count(),
        2,
        "{note}"
    );
}

//! Cluster entries start for real: `cluster:2:nginx@haproxy:title` brings up two nginx
//! origins and HAProxy in front of them, every file answers through the balancer, the
//! report note gives each origin's share of the requests, and a stop takes all of it
//! down; a vodkit cluster behind nginx's balancer serves the same way; `:failover` kills the
//! first origin and the balancer keeps serving every file from the other.

use std::os::unix::fs::PermissionsExt;
use vodkit_bench::adapters::InProcessVodkit;
use vodkit_bench::experiment::Launcher;
use vodkit_bench::launch::LocalLauncher;
use vodkit_bench::sut::parse_one;
use vodkit_testkit::{needs, Need};

/// Lets the peers' worker users into `dir`.
fn open_to_all(dir: &std::path::Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn file_set(dir: &std::path::Path) -> std::path::PathBuf {
    let root = dir.join("video");
    std::fs::create_dir_all(&root).unwrap();
    for d in [dir, root.as_path()] {
        open_to_all(d);
    }
    for i in 0..12 {
        std::fs::write(root.join(format!("t{i}.mp4")), vec![i as u8; 4096]).unwrap();
    }
    root
}

/// A fresh directory holding [`file_set`], when nginx and HAProxy are installed.
fn files_for_nginx_and_haproxy() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if !needs(&[Need::Peer("nginx"), Need::Peer("haproxy")]) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = file_set(dir.path());
    Some((dir, root))
}

/// A launcher serving `root` with its run directories under `dir`.
fn launcher_in(dir: &std::path::Path, root: std::path::PathBuf) -> LocalLauncher {
    LocalLauncher::new(root, dir.join("runs"), "/t0.mp4".into())
}

/// The loopback port a running entry answers on.
fn port_of(running: &dyn vodkit_bench::experiment::Running) -> u16 {
    running
        .base_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The note giving each origin's share of the requests (HAProxy's statistics).
fn origins_note(notes: &[String]) -> &String {
    notes
        .iter()
        .find(|n| n.starts_with("origins (from HAProxy)"))
        .unwrap_or_else(|| panic!("no per-origin note in {notes:?}"))
}

fn serve_through(entry: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let root = file_set(dir.path());
    let mut launcher = launcher_in(dir.path(), root);
    launcher.vodkit = Ok(Box::new(InProcessVodkit::new().unwrap()));
    let sut = parse_one(entry).unwrap();
    launcher.available(&sut).unwrap();
    let running = launcher.start(&sut).unwrap();
    let port = port_of(&*running);
    for i in 0..12 {
        let (status, body) = vodkit_peers::http_get(port, &format!("/t{i}.mp4")).unwrap();
        assert_eq!((status, body.len()), (200, 4096), "{entry}: /t{i}.mp4");
    }
    // The balancer's process, measured apart from the origins' (two nginx processes, or
    // none for vodkit in this process).
    let balancer = running.balancer_pids();
    assert_eq!(balancer.len(), 1, "{entry}");
    assert!(!running.pids().contains(&balancer[0]), "{entry}");
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
    let note = origins_note(&notes);
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
    let Some((dir, root)) = files_for_nginx_and_haproxy() else {
        return;
    };
    for s in 0..4 {
        let d = root.join(format!("live/s{s}"));
        std::fs::create_dir_all(&d).unwrap();
        open_to_all(&root.join("live"));
        open_to_all(&d);
        std::fs::write(d.join("seg-1.m4s"), vec![1u8; 1000]).unwrap();
    }
    let mut launcher = launcher_in(dir.path(), root);
    let sut = parse_one("cluster:3:nginx@haproxy:title:live=1").unwrap();
    let running = launcher.start(&sut).unwrap();
    let port = port_of(&*running);
    for s in 0..4 {
        let (status, _) = vodkit_peers::http_get(port, &format!("/live/s{s}/seg-1.m4s")).unwrap();
        assert_eq!(status, 200);
    }
    let notes = running.notes();
    running.stop().unwrap();
    let note = origins_note(&notes);
    assert!(note.contains("l1 4 sessions"), "{note}");
    // The on-demand origins saw only the readiness probe.
    assert_eq!(
        note.matches(" 0 sessions").count() + note.matches(" 1 sessions").count(),
        2,
        "{note}"
    );
}

/// `:failover`: the first origin's processes die, the balancer sends its requests to the
/// other, and the cluster still stops cleanly.
#[test]
fn a_killed_origin_leaves_the_cluster_serving_from_the_other() {
    let Some((dir, root)) = files_for_nginx_and_haproxy() else {
        return;
    };
    let mut launcher = launcher_in(dir.path(), root);
    let sut = parse_one("cluster:2:nginx@haproxy:title:failover").unwrap();
    let running = launcher.start(&sut).unwrap();
    let port = port_of(&*running);
    let kill = running
        .failover()
        .expect("a :failover cluster names an origin to kill");
    assert_eq!(kill.origin, "o1");
    assert!(kill.killed_at().is_none());
    (kill.action())();
    assert!(kill.killed_at().is_some());
    // The origin's log is where the bench reads the sessions it had.
    assert!(kill.access_log.exists(), "{}", kill.access_log.display());
    for i in 0..12 {
        let (status, body) = vodkit_peers::http_get(port, &format!("/t{i}.mp4")).unwrap();
        assert_eq!(
            (status, body.len()),
            (200, 4096),
            "/t{i}.mp4 after the kill"
        );
    }
    running.stop().unwrap();
    // An entry without the option kills nothing.
    let plain = parse_one("cluster:2:nginx@haproxy:title").unwrap();
    let running = launcher.start(&plain).unwrap();
    assert!(running.failover().is_none());
    running.stop().unwrap();
}

/// On the emulated disk each origin of a cluster reads a drive of its own holding the same
/// file set, and the disk figures cover every drive.
#[test]
fn each_origin_of_a_cluster_reads_its_own_emulated_drive() {
    if !needs(&[Need::Peer("haproxy")]) {
        return;
    }
    let Some(t) = crate::on_emulated_disk(20, 30, 0.005) else {
        return;
    };
    let req = crate::bench_request(
        &t.workload,
        "cluster:2:nginx@haproxy:title",
        "hdd:wd-red",
        "fixed-rates:2".into(),
        15,
        t.dir.path(),
    );
    let (rep, _) = vodkit_bench::runner::run(&req).unwrap();
    assert!(
        rep.testbed.starts_with("2 drives, one per origin"),
        "{}",
        rep.testbed
    );
    let s = &rep.servers[0];
    assert_eq!(s.status, vodkit_bench::report::MEASURED, "{:?}", s.reason);
    let p = &s.points[0];
    let disk = p.metrics.disk.expect("disk figures from the drives");
    assert!(disk.mb_s > 0.0, "{disk:?}");
    let drives = p
        .metrics
        .notes
        .iter()
        .find(|n| n.starts_with("each origin's own drive"))
        .unwrap_or_else(|| panic!("no per-drive note in {:?}", p.metrics.notes));
    assert!(
        drives.contains("drive 1 (loop") && drives.contains("drive 2 (loop"),
        "{drives}"
    );
    // Both drives are down again, and their images are the workload's.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains(&t.workload.display().to_string()),
        "{mounts}"
    );
    assert!(t.workload.join("hdd-2.img").is_file());
}

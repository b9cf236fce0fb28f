//! Integration tests of the bench: the procedure, the adapters for every server kind, the emulated
//! disk and the players.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod cluster;
mod early_stop;
mod hdd;
mod hdd_steady;
mod peers;
mod players;
mod preload_daemon;
mod procedure;
mod signed;
mod smoke;
mod tls;

/// What a bench on the emulated disk with nginx needs: FUSE, nginx and a working testbed
/// (`None`, after the skip line, when one is missing), then the disk's and the page cache's
/// turns, held while the returned value lives (its points drop the page cache, and a
/// steady-state point must not see another test's drop).
fn emulated_disk_with_nginx() -> Option<[vodkit_testkit::Turn; 2]> {
    if !vodkit_testkit::needs(&[
        vodkit_testkit::Need::Fuse,
        vodkit_testkit::Need::Peer("nginx"),
    ]) {
        return None;
    }
    if let Err(e) = vodkit_disk::testbed::preflight() {
        vodkit_testkit::skip(format_args!("the emulated disk cannot run here: {e}"));
        return None;
    }
    let disk = vodkit_testkit::turn(vodkit_testkit::turn::DISK);
    let cache = vodkit_testkit::turn(vodkit_testkit::turn::PAGE_CACHE);
    Some([disk, cache])
}

/// `n` sessions of `count` back-to-back `len`-byte ranges of `/t0.mp4`.
fn ranged_sessions(n: u64, count: u64, len: u64) -> Vec<vodkit_workload::model::Session> {
    use vodkit_workload::model::{Request, Session};
    (0..n)
        .map(|id| {
            Session::new(
                id,
                0.01,
                "lan",
                Request::consecutive("/t0.mp4", count, len, 0.0),
            )
        })
        .collect()
}

/// A launcher of one-worker servers over `dir/video/t0.mp4` holding `body` (directories
/// readable by the peers' unprivileged workers), run directories under `dir/runs`, vodkit
/// in this process; and that run base.
fn t0_launcher(
    dir: &std::path::Path,
    body: &[u8],
) -> (vodkit_bench::launch::LocalLauncher, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let open = || std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(dir, open()).unwrap();
    let root = dir.join("video");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, open()).unwrap();
    std::fs::write(root.join("t0.mp4"), body).unwrap();
    let run_base = dir.join("runs");
    let mut launcher =
        vodkit_bench::launch::LocalLauncher::new(root, run_base.clone(), "/t0.mp4".into());
    launcher.workers = 1;
    launcher.vodkit = Ok(Box::new(
        vodkit_bench::adapters::InProcessVodkit::new().unwrap(),
    ));
    (launcher, run_base)
}

/// Starts `sut` with `launcher`, or says why it cannot run here and returns `None`: a
/// missing vodkit is this machine's fault (it fails under CI), a missing peer is skipped.
fn start_or_skip(
    launcher: &mut vodkit_bench::launch::LocalLauncher,
    sut: &vodkit_bench::sut::Sut,
) -> Option<Box<dyn vodkit_bench::experiment::Running>> {
    use vodkit_bench::experiment::Launcher as _;
    if let Err(why) = launcher.available(sut) {
        if sut.kind() == "vodkit" {
            vodkit_testkit::need::not_here(format_args!("{sut}: {why}"));
        } else {
            vodkit_testkit::skip(format_args!("{sut}: {why}"));
        }
        return None;
    }
    Some(
        launcher
            .start(sut)
            .unwrap_or_else(|e| panic!("{sut} starts: {e:?}")),
    )
}

/// Start each server of `list` in turn (skipping those this machine cannot run), hand it
/// to `check`, and stop it; returns how many were checked.
fn check_each(
    launcher: &mut vodkit_bench::launch::LocalLauncher,
    list: &str,
    mut check: impl FnMut(&vodkit_bench::sut::Sut, &dyn vodkit_bench::experiment::Running),
) -> usize {
    let mut checked = 0;
    for sut in vodkit_bench::sut::parse_list(list).unwrap() {
        let Some(server) = start_or_skip(launcher, &sut) else {
            continue;
        };
        check(&sut, server.as_ref());
        let errors = server.stop().unwrap();
        eprintln!("{sut}: checked (error-log lines: {errors:?})");
        checked += 1;
    }
    checked
}

/// Run `load` against `url`: its `sessions` sessions all played, none failed.
fn assert_all_played(
    load: &mut vodkit_bench::adapters::WorkloadLoad,
    url: &str,
    sessions: u64,
    sut: &vodkit_bench::sut::Sut,
) {
    use vodkit_bench::experiment::LoadDriver as _;
    let outcome = load.run(url, 50.0, 0).unwrap();
    assert_eq!(outcome.client.sessions, sessions, "{sut}");
    assert_eq!(outcome.client.failed_sessions, 0, "{sut}");
}

/// A youtube-2011 workload at `scale` of titles `min_s` to `max_s` seconds long, prepared
/// in `dir`.
fn short_titles(min_s: u32, max_s: u32, scale: f64, dir: &std::path::Path) -> std::path::PathBuf {
    let max = format!("catalog.max_duration={max_s}s");
    let min = format!("catalog.min_duration={min_s}s");
    vodkit_bench::prepare::workload("youtube-2011", &[&max, &min], scale, dir).unwrap()
}

/// What a bench on the emulated disk starts from: its turns (held for the test), a fresh
/// directory, and [`short_titles`] prepared in it.
struct OnEmulatedDisk {
    _turns: [vodkit_testkit::Turn; 2],
    dir: tempfile::TempDir,
    workload: std::path::PathBuf,
}

/// [`short_titles`] for a bench on the emulated disk with nginx; `None` where that cannot
/// run ([`emulated_disk_with_nginx`]).
fn on_emulated_disk(min_s: u32, max_s: u32, scale: f64) -> Option<OnEmulatedDisk> {
    let turns = emulated_disk_with_nginx()?;
    let dir = tempfile::tempdir().unwrap();
    let workload = short_titles(min_s, max_s, scale, dir.path());
    Some(OnEmulatedDisk {
        _turns: turns,
        dir,
        workload,
    })
}

/// A bench of `workload` on `suts` over `testbed`: the points of `search`, each
/// `duration_s` long and judged by `sessions:50%`, written to `dir/out`; no memory budget,
/// players, probes or fast-forward.
fn bench_request(
    workload: &std::path::Path,
    suts: &str,
    testbed: &str,
    search: String,
    duration_s: u64,
    dir: &std::path::Path,
) -> vodkit_bench::runner::BenchRequest {
    vodkit_bench::runner::BenchRequest {
        testbed: testbed.parse().unwrap(),
        search: Some(search),
        criterion: "sessions:50%".parse().unwrap(),
        point_duration: Some(std::time::Duration::from_secs(duration_s)),
        fast_forward: vodkit_bench::warmup::FastForwardChoice::Off,
        ..vodkit_bench::runner::BenchRequest::new(
            workload,
            vodkit_bench::sut::parse_list(suts).unwrap(),
            &dir.join("out"),
        )
    }
}

/// Whether curl is installed (the tests that use it check bodies through it when it is).
fn has_curl() -> bool {
    std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok()
}

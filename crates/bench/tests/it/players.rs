//! `vodkit bench --player`: the bench writes a real media set (ffmpeg) in place of the
//! synthetic files, every session plays its title as an adaptive DASH player against the
//! vodkit origin, and the point, the terminal table and report.md carry the players'
//! figures (delivered bit rate, stalls, switches). Needs ffmpeg, which `.ci/run` installs;
//! without it the test says SKIPPED (under `CI`, a failure).

use vodkit_bench::report;
use vodkit_bench::runner::{self, BenchPlayers, BenchRequest};
use vodkit_load::player::{PlayerConfig, Protocol};
use vodkit_media::package::MediaFormat;

#[test]
fn a_bench_of_adaptive_players_on_a_media_set() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Tool("ffmpeg")]) {
        return;
    }
    // A player needs a packaging with its manifest.
    let hls_only = BenchPlayers::new(PlayerConfig::new(Protocol::Dash), MediaFormat::Hls);
    assert!(hls_only.unwrap_err().contains("--media hls"));

    // Its points drop the page cache.
    let _cache = vodkit_testkit::turn(vodkit_testkit::turn::PAGE_CACHE);
    let dir = tempfile::tempdir().unwrap();
    let workload = crate::short_titles(8, 12, 0.002, dir.path());
    let players = BenchPlayers::new(PlayerConfig::new(Protocol::Dash), MediaFormat::Cmaf).unwrap();
    let req = BenchRequest {
        players: Some(players.clone()),
        fast_forward: Default::default(),
        ..crate::bench_request(
            &workload,
            "vodkit:asap:auto",
            "plain",
            "fixed-rates:1".into(),
            24,
            dir.path(),
        )
    };
    let (rep, table) = runner::run(&req).unwrap();
    // The media set was written beside the workload, with the first title's manifest.
    let catalog = vodkit_bench::prepare::catalog(&workload).unwrap();
    let manifest = players.probe_path(&catalog).unwrap();
    assert!(
        workload
            .join(players.dir_name())
            .join(manifest.trim_start_matches('/'))
            .is_file(),
        "{manifest}"
    );
    let s = rep.server("vodkit:asap:auto").unwrap();
    assert_eq!(s.status, report::MEASURED, "{:?}", s.reason);
    let qos = s.points[0].metrics.client.qos.as_ref().expect("qos");
    let abr = &qos["abr"];
    let players_n = abr["players"].as_f64().unwrap();
    assert!(players_n >= 1.0, "{qos}");
    assert!(abr["mean_bitrate_kbps"].as_f64().unwrap() > 0.0, "{qos}");
    // Every player fetched real segments: no session failed on a missing file.
    assert_eq!(
        s.points[0].metrics.client.failed_sessions, 0,
        "{table}\n{qos}"
    );
    let md = std::fs::read_to_string(dir.path().join("out/report.md")).unwrap();
    assert!(md.contains("## Players") && md.contains("| 1.00 |"), "{md}");
    if s.max_failure_free_rate.is_some() {
        assert!(table.contains("players at capacity"), "{table}");
    }
}

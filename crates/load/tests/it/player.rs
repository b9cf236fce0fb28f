//! Adaptive players against the vodkit origin serving a real media set (needs ffmpeg, which
//! `.ci/run` installs): DASH (SegmentTemplate and SegmentBase) and HLS (byte ranges) play
//! every session to its end; with an unlimited link the players end on the top rendition,
//! behind a link slower than it they stay below it and do not stall.

use crate::common;

use common::run;
use vodkit_load::player::{PlayerConfig, Protocol};
use vodkit_load::Target;
use vodkit_media::package::MediaFormat;
use vodkit_testkit::server::TestServer;
use vodkit_workload::model::{Catalog, Media, PlaySpec, Rendition, Request, Seek, Session, Title};

/// The vodkit server (the test kit's, in-process) over a media set.
struct Origin {
    server: TestServer,
    _root: tempfile::TempDir,
}

impl Origin {
    fn serve(format: MediaFormat) -> Origin {
        let root = tempfile::tempdir().unwrap();
        let mut o = vodkit_media::MediaOptions::new(format);
        o.segment_s = 1.0;
        o.pool_fragments = 3;
        vodkit_media::create(&catalog(), root.path(), &o).unwrap();
        Origin {
            server: TestServer::serving(root.path(), |_| {}),
            _root: root,
        }
    }

    /// The advertised bandwidths (bit/s, ascending) of title 1 (a DASH set).
    fn bandwidths(&self) -> Vec<u64> {
        let xml = std::fs::read_to_string(self._root.path().join("t1/manifest.mpd")).unwrap();
        let p = vodkit_load::player::manifest::dash("/t1/manifest.mpd", &xml).unwrap();
        p.periods[0]
            .renditions
            .iter()
            .map(|r| r.bandwidth_bps)
            .collect()
    }

    fn target(&self) -> Target {
        Target::parse(&format!("http://{}", self.server.addr), false).unwrap()
    }
}

fn ffmpeg_present() -> bool {
    vodkit_testkit::needs(&[vodkit_testkit::Need::Tool("ffmpeg")])
}

/// The origin over a DASH media set, when ffmpeg is here to make one.
fn dash_origin() -> Option<Origin> {
    ffmpeg_present().then(|| Origin::serve(MediaFormat::Dash))
}

/// [`dash_origin`] and the bandwidths of its rungs (bit/s, ascending).
fn dash_ladder() -> Option<(Origin, Vec<u64>)> {
    let origin = dash_origin()?;
    let bw = origin.bandwidths();
    Some((origin, bw))
}

/// All `n` sessions of `r` played to their end (`format` and the request errors name a miss).
fn assert_completed(r: &vodkit_load::Run, n: u64, format: MediaFormat) {
    assert_eq!(
        r.results.sessions.completed, n,
        "{format}: {:?}",
        r.results.requests.errors
    );
}

/// The first failure among `s`'s requests names every one of `needles`.
fn assert_failure_names(s: &vodkit_load::record::SessionRecord, needles: &[&str]) {
    let f = s.requests.iter().find_map(|q| q.failure.as_ref()).unwrap();
    assert!(needles.iter().all(|n| f.detail.contains(n)), "{}", f.detail);
}

const LADDER: [u32; 2] = [300, 1200];

fn catalog() -> Catalog {
    let titles = (1..=3)
        .map(|id| Title {
            id,
            rank: id,
            duration_s: 12.0,
            renditions: LADDER
                .iter()
                .map(|&kbps| {
                    Rendition::one_file(kbps, Media::Video, format!("v/{id}-{kbps}.dat"), 1)
                })
                .collect(),
        })
        .collect();
    Catalog {
        spec: "player-test".into(),
        seed: 7,
        titles,
    }
}

/// Sessions of titles 1..=3 watching `watch_s` seconds (the media time of their requests).
fn sessions(n: u64, watch_s: f64) -> Vec<Session> {
    (0..n)
        .map(|i| {
            let mut r = Request::new("/unused", None, 10.0);
            r.media_s = watch_s;
            let mut s = Session::new(i, 0.1, "c", vec![r]);
            s.title = Some((i % 3 + 1) as u32);
            s
        })
        .collect()
}

fn player(protocol: Protocol) -> impl FnOnce(&mut vodkit_load::LoadConfig) {
    move |c| {
        let mut p = PlayerConfig::new(protocol);
        p.startup_segments = 2;
        c.player = Some(p);
    }
}

#[test]
fn players_play_dash_and_hls_to_the_end() {
    if !ffmpeg_present() {
        return;
    }
    for (format, protocol) in [
        (MediaFormat::Dash, Protocol::Dash),
        (MediaFormat::DashSingle, Protocol::Dash),
        (MediaFormat::HlsByterange, Protocol::Hls),
    ] {
        let origin = Origin::serve(format);
        let top_kbps = match format {
            MediaFormat::HlsByterange => None,
            _ => origin.bandwidths().last().map(|b| (b / 1000) as u32),
        };
        let r = run(origin.target(), sessions(6, 6.0), player(protocol));
        let res = &r.results;
        assert_eq!(
            res.sessions.failed, 0,
            "{format}: {:?}",
            res.requests.errors
        );
        assert_eq!(res.sessions.completed, 6, "{format}");
        let abr = res.qos.abr.as_ref().expect("player summary");
        assert_eq!(abr.sessions, 6);
        assert!(
            (abr.media_s - 36.0).abs() < 1e-6,
            "{format}: {}",
            abr.media_s
        );
        assert!(abr.startup_ms.count == 6 && abr.startup_ms.p50 > 0.0);
        // Unlimited loopback: after the first segments every player is on the top rung.
        for s in &r.sessions {
            let p = s.player.as_ref().unwrap();
            assert_eq!(p.timeline.len(), 6, "{format}");
            let last = p.timeline.last().unwrap().kbps;
            let first = p.timeline[0].kbps;
            // The first segment comes from the player's initial guess (dash.js's 1 Mbit/s,
            // hls.js's 500 kbit/s), which may already be the top here; it never falls.
            assert!(last >= first, "{format}: fell: {:?}", p.timeline);
            if let Some(top) = top_kbps {
                assert_eq!(
                    last, top,
                    "{format}: ends below the top rung: {:?}",
                    p.timeline
                );
            }
            // Manifest (plus playlist or index), init and six segments, all recorded.
            assert!(
                s.requests.len() >= 8,
                "{format}: {} requests",
                s.requests.len()
            );
            assert_eq!(s.session.requests.len(), s.requests.len());
            assert!(s.requests.iter().all(|q| q.completed()));
            // An idle origin: each player kept the bit rate its rule reaches over its link.
            assert!(p.reference_kbps > 0.0, "{format}: no unloaded reference");
            assert!(
                p.kept_bitrate(),
                "{format}: {} kbit/s against an unloaded {}",
                p.mean_kbps(),
                p.reference_kbps
            );
        }
        assert_eq!(res.sessions.played_clean, 6, "{format}");
        assert_eq!(abr.kept_bitrate_sessions, 6, "{format}");
    }
}

#[test]
fn a_slow_link_keeps_players_below_the_top_rung_without_stalls() {
    let Some((origin, bw)) = dash_ladder() else {
        return;
    };
    // A link between the two rungs: the low one fits, the top one does not.
    let link = (bw[0] as f64 * bw[1] as f64).sqrt() as u64;
    assert!(bw[0] * 3 / 2 < link && link < bw[1], "{bw:?}");
    let r = run(origin.target(), sessions(3, 8.0), |c| {
        player(Protocol::Dash)(c);
        common::link(c, "c", link, std::time::Duration::ZERO);
    });
    let abr = r.results.qos.abr.as_ref().unwrap();
    assert_completed(&r, 3, MediaFormat::Dash);
    let top_share = r
        .sessions
        .iter()
        .flat_map(|s| &s.player.as_ref().unwrap().timeline)
        .filter(|t| t.kbps as u64 * 1000 >= bw[1] - 999)
        .count();
    assert!(
        top_share <= 3,
        "{top_share} segments at the top rung over a {link} bit/s link"
    );
    assert!(
        abr.mean_bitrate_kbps * 1000.0 < link as f64,
        "{}",
        abr.mean_bitrate_kbps
    );
    assert_eq!(abr.stalls, 0, "{abr:?}");
    // The unloaded reference over the same link stays on the low rung too, so the players
    // kept their bit rate: the condition does not fail an idle origin behind a slow link.
    assert!(
        abr.reference_kbps * 1000.0 < link as f64,
        "reference {} kbit/s over a {link} bit/s link",
        abr.reference_kbps
    );
    assert_eq!(abr.kept_bitrate_sessions, 3, "{abr:?}");
}

#[test]
fn a_download_far_slower_than_its_segment_is_abandoned_for_the_low_rung() {
    let Some((origin, bw)) = dash_ladder() else {
        return;
    };
    // Players that guess a fast link start on the top rung; the link carries half the low
    // rung's peak, so a top-rung segment takes over four segment durations (the abandon
    // rule's threshold is 1.8, and the link's 16 KiB initial burst must not hide it).
    let link = bw[0] / 2;
    assert!(bw[1] as f64 / link as f64 > 4.0, "{bw:?}");
    let play = |abandon: bool| {
        run(origin.target(), sessions(3, 6.0), |c| {
            let mut p = PlayerConfig::new(Protocol::Dash);
            p.abr.initial_bps = 10_000_000;
            if !abandon {
                p.abandon = None;
            }
            c.player = Some(p);
            common::link(c, "c", link, std::time::Duration::ZERO);
        })
    };
    let r = play(true);
    assert_completed(&r, 3, MediaFormat::Dash);
    for s in &r.sessions {
        let p = s.player.as_ref().unwrap();
        // The first segment was given up once and fetched again from the low rung; nothing
        // after it was too slow.
        assert_eq!(p.aborted, 1, "{p:?}");
        assert!(p.aborted_bytes > 0 && p.aborted_bytes < bw[1] / 8, "{p:?}");
        assert!(p.timeline[0].kbps as u64 * 1000 <= bw[0], "{p:?}");
        assert!((p.media_s - 6.0).abs() < 1e-6, "{p:?}");
        // The abandoned request is in the record, unfinished and not failed.
        let unfinished = s.requests.iter().filter(|q| !q.completed()).count();
        assert_eq!(unfinished, 1);
        assert!(s.requests.iter().all(|q| q.failure.is_none()));
    }
    assert_eq!(r.results.qos.abr.as_ref().unwrap().aborted_segments, 3);
    // Without the rule the slow top-rung segment is waited for.
    let r = play(false);
    assert_eq!(r.results.sessions.completed, 3);
    for s in &r.sessions {
        let p = s.player.as_ref().unwrap();
        assert_eq!(p.aborted, 0);
        assert!(p.timeline[0].kbps as u64 * 1000 > bw[0], "{p:?}");
    }
}

#[test]
fn a_player_starts_where_its_session_says_and_seeks() {
    let Some(origin) = dash_origin() else {
        return;
    };
    // Start 4 s into the 12 s title (1 s segments), watch 6 s in all, and after 2 s of
    // playback jump back to the start.
    let mut list = sessions(2, 60.0);
    for s in &mut list {
        s.play = Some(PlaySpec {
            start_s: 4.0,
            watch_s: Some(6.0),
            seeks: vec![Seek {
                after_s: 2.0,
                to_s: 0.0,
            }],
            ..PlaySpec::default()
        });
    }
    let r = run(origin.target(), list, player(Protocol::Dash));
    assert_completed(&r, 2, MediaFormat::Dash);
    for s in &r.sessions {
        let p = s.player.as_ref().unwrap();
        let positions: Vec<f64> = p.timeline.iter().map(|t| t.media_s).collect();
        // 4..9 fetched (enough for the watch time), the jump after 2 s of playback, then
        // 0..3: 2 s played before it and 4 s after make the 6 s watched.
        assert_eq!(
            positions,
            [4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 0.0, 1.0, 2.0, 3.0],
            "{p:?}"
        );
        assert_eq!((p.seeks, p.stalls), (1, 0), "{p:?}");
        assert!(p.seek_wait_s >= 0.0 && p.seek_wait_s < 2.0, "{p:?}");
        // Playback began only after two segments from the start position.
        assert!(p.startup_s.is_some());
    }
    let abr = r.results.qos.abr.as_ref().unwrap();
    assert_eq!(abr.seeks, 2);
    // Without a play spec the session plays from the start for its requests' media time.
    let r = run(origin.target(), sessions(1, 3.0), player(Protocol::Dash));
    let p = r.sessions[0].player.as_ref().unwrap();
    let positions: Vec<f64> = p.timeline.iter().map(|t| t.media_s).collect();
    assert_eq!(positions, [0.0, 1.0, 2.0]);
    assert_eq!(p.seeks, 0);
}

#[test]
fn verify_checks_every_piece_against_the_title_sidecar() {
    if !ffmpeg_present() {
        return;
    }
    let verify = |protocol: Protocol| {
        move |c: &mut vodkit_load::LoadConfig| {
            player(protocol)(c);
            c.verify = true;
        }
    };
    for (format, protocol) in [
        (MediaFormat::Dash, Protocol::Dash),
        (MediaFormat::DashSingle, Protocol::Dash),
        (MediaFormat::HlsByterange, Protocol::Hls),
    ] {
        let origin = Origin::serve(format);
        let r = run(origin.target(), sessions(3, 4.0), verify(protocol));
        assert_completed(&r, 3, format);
        // The sidecar was fetched once per session, beside the manifest.
        for s in &r.sessions {
            let id = s.session.title.unwrap();
            let sidecar = format!("/t{id}/pieces.json");
            assert_eq!(s.session.requests[0].path, sidecar, "{format}");
        }
    }
    // A damaged segment (one byte of its media data) fails the sessions that fetch it.
    let origin = Origin::serve(MediaFormat::Dash);
    for kbps in LADDER {
        let seg = origin._root.path().join(format!("t1/v{kbps}/seg-2.m4s"));
        let mut bytes = std::fs::read(&seg).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&seg, bytes).unwrap();
    }
    let r = run(origin.target(), sessions(3, 4.0), verify(Protocol::Dash));
    assert_eq!(
        r.results.sessions.failed, 1,
        "{:?}",
        r.results.requests.errors
    );
    assert_eq!(r.results.sessions.completed, 2);
    assert_eq!(
        r.results.requests.errors.get("mismatch"),
        Some(&1),
        "{:?}",
        r.results.requests.errors
    );
    let failed = r
        .sessions
        .iter()
        .find(|s| s.session.title == Some(1))
        .unwrap();
    assert_failure_names(failed, &["seg-2.m4s", "sidecar"]);
    // Without --verify the same damage goes unnoticed (the check is what finds it).
    let r = run(origin.target(), sessions(3, 4.0), player(Protocol::Dash));
    assert_eq!(r.results.sessions.completed, 3);
}

#[test]
fn sessions_without_titles_are_refused_for_players() {
    let target = Target::parse("http://127.0.0.1:9", false).unwrap();
    let mut config =
        vodkit_load::LoadConfig::new(target, vec![Session::new(4, 1.0, "c", vec![])], 1.0);
    config.player = Some(PlayerConfig::new(Protocol::Hls));
    let e = config.validate().unwrap_err();
    assert!(e.to_string().contains("names no title"), "{e}");
}

#[test]
fn byte_range_segments_spread_over_several_connections_and_are_checked_whole() {
    if !ffmpeg_present() {
        return;
    }
    let spread = |protocol: Protocol, per_session: bool| {
        move |c: &mut vodkit_load::LoadConfig| {
            player(protocol)(c);
            c.verify = true;
            if !per_session {
                if let Some(p) = c.player.as_mut() {
                    p.connections = 3;
                }
            }
        }
    };
    for (format, protocol, per_session) in [
        (MediaFormat::DashSingle, Protocol::Dash, false),
        (MediaFormat::HlsByterange, Protocol::Hls, true),
    ] {
        let origin = Origin::serve(format);
        let mut list = sessions(3, 4.0);
        if per_session {
            // The session's own player profile asks for three connections.
            for s in &mut list {
                s.play = Some(PlaySpec {
                    connections: Some(3),
                    ..PlaySpec::default()
                });
            }
        }
        let r = run(origin.target(), list, spread(protocol, per_session));
        assert_completed(&r, 3, format);
        for s in &r.sessions {
            // Parts went out on connections 1 and 2 besides 0, each a request of its own
            // carrying its share of the media time: the 4 s watched are all there.
            let conns: std::collections::BTreeSet<u32> =
                s.session.requests.iter().map(|q| q.conn).collect();
            assert!(
                conns.contains(&1) && conns.contains(&2),
                "{format}: {conns:?}"
            );
            let media: f64 = s.session.requests.iter().map(|q| q.media_s).sum();
            assert!((media - 4.0).abs() < 1e-6, "{format}: {media}");
            assert!(s.requests.iter().all(|q| q.completed()), "{format}");
            let p = s.player.as_ref().unwrap();
            assert_eq!(p.timeline.len(), 4, "{format}");
        }
    }
    // Every media segment damaged three quarters in (its last part): the parts' checksums,
    // combined, no longer match the sidecar's, and every session fails on its first one.
    let origin = Origin::serve(MediaFormat::DashSingle);
    for id in 1..=3 {
        let dir = origin._root.path().join(format!("t{id}"));
        let text = std::fs::read_to_string(dir.join(vodkit_media::SIDECAR)).unwrap();
        let sidecar: vodkit_media::Sidecar = serde_json::from_str(&text).unwrap();
        for piece in sidecar.pieces.iter().filter(|p| p.len >= 32 << 10) {
            let file = origin._root.path().join(&piece.path);
            let mut bytes = std::fs::read(&file).unwrap();
            bytes[(piece.offset + piece.len * 3 / 4) as usize] ^= 0xff;
            std::fs::write(&file, bytes).unwrap();
        }
    }
    let r = run(
        origin.target(),
        sessions(3, 4.0),
        spread(Protocol::Dash, false),
    );
    assert_eq!(
        r.results.sessions.failed, 3,
        "{:?}",
        r.results.requests.errors
    );
    assert_failure_names(&r.sessions[0], &["parts", "sidecar"]);
}

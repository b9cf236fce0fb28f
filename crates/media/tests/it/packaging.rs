//! Real media sets end to end (needs ffmpeg, which `.ci/run` installs): every packaging is
//! written from a two-rung ladder, its manifests parse strictly (dash-mpd-core, m3u8-rs),
//! ffmpeg plays every rendition to the end (and refuses what is no presentation), pieces
//! verify, damage is found, a rerun skips finished titles and a foreign directory is refused.

use std::path::Path;
use std::process::Command;
use vodkit_media::package::MediaFormat;
use vodkit_media::{create, verify, MediaOptions};
use vodkit_testkit::process::run_ok;
use vodkit_workload::model::{Catalog, Media, Rendition, Title};

/// A scratch directory for a test that runs ffmpeg; `None` (the test skipped, or failed
/// under CI) without ffmpeg.
fn ffmpeg_scratch() -> Option<tempfile::TempDir> {
    vodkit_testkit::needs(&[vodkit_testkit::Need::Tool("ffmpeg")])
        .then(|| tempfile::tempdir().unwrap())
}

fn catalog() -> Catalog {
    let rendition = |kbps: u32, id: u32| {
        Rendition::one_file(kbps, Media::Combined, format!("v/t{id}-{kbps}.dat"), 1000)
    };
    Catalog {
        spec: "test".into(),
        seed: 1,
        titles: vec![
            Title {
                id: 1,
                rank: 1,
                duration_s: 5.0,
                renditions: vec![rendition(300, 1), rendition(900, 1)],
            },
            Title {
                id: 2,
                rank: 2,
                duration_s: 2.0,
                renditions: vec![rendition(300, 2)],
            },
        ],
    }
}

fn options(format: MediaFormat) -> MediaOptions {
    let mut o = MediaOptions::new(format);
    o.segment_s = 1.0;
    o.pool_fragments = 2;
    o
}

/// ffmpeg decodes the whole presentation (every frame of the first video stream).
fn plays(manifest: &Path) {
    if let Err(e) = vodkit_media::pool::decode(manifest) {
        panic!("{e}");
    }
}

#[test]
fn every_packaging_parses_plays_and_verifies() {
    let Some(pools) = ffmpeg_scratch() else {
        return;
    };
    for format in MediaFormat::ALL {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("media");
        // Share the encoded pools between formats (the cache is per media set).
        let state = root.join(vodkit_media::STATE_DIR);
        std::fs::create_dir_all(&state).unwrap();
        for e in std::fs::read_dir(pools.path()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), state.join(e.file_name())).unwrap();
        }
        // An empty state dir alone is fine; a marker of another set is not (below).
        let r = create(&catalog(), &root, &options(format)).unwrap();
        assert_eq!((r.titles, r.written_titles), (2, 2), "{format}");
        assert_eq!(r.ladder_kbps, vec![300, 900]);
        for e in std::fs::read_dir(&state).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with("pool-") {
                let _ = std::fs::copy(e.path(), pools.path().join(e.file_name()));
            }
        }
        let t1 = root.join("t1");
        if format.has_dash() {
            let xml = std::fs::read_to_string(t1.join("manifest.mpd")).unwrap();
            let mpd = dash_mpd_core::parse(&xml).unwrap_or_else(|e| panic!("{format}: {e}\n{xml}"));
            let reps = &mpd.periods[0].adaptations[0].representations;
            assert_eq!(reps.len(), 2, "{format}");
            assert!(reps
                .iter()
                .all(|r| r.codecs.as_deref().unwrap_or("").starts_with("avc1.")));
            if format.single_file() {
                assert!(reps[0].SegmentBase.is_some(), "{format}");
            } else {
                assert!(reps[0].SegmentTemplate.is_some(), "{format}");
            }
            plays(&t1.join("manifest.mpd"));
        }
        if format.has_hls() {
            let master = std::fs::read(t1.join("master.m3u8")).unwrap();
            match m3u8_rs::parse_playlist_res(&master) {
                Ok(m3u8_rs::Playlist::MasterPlaylist(m)) => assert_eq!(m.variants.len(), 2),
                other => panic!("{format}: master playlist: {other:?}"),
            }
            let media = std::fs::read(t1.join("v300.m3u8")).unwrap();
            match m3u8_rs::parse_playlist_res(&media) {
                Ok(m3u8_rs::Playlist::MediaPlaylist(m)) => {
                    assert_eq!(m.segments.len(), 5, "{format}: 5 s at 1 s segments");
                    assert!(m.end_list);
                    assert_eq!(
                        m.segments.iter().any(|s| s.byte_range.is_some()),
                        format.single_file()
                    );
                }
                other => panic!("{format}: media playlist: {other:?}"),
            }
            plays(&t1.join("v300.m3u8"));
            plays(&t1.join("master.m3u8"));
        }
        // Every piece checks; title 2 has only its own rung.
        let v = verify(&root).unwrap();
        assert_eq!(v.titles, 2);
        assert!(v.damage.is_empty(), "{format}: {:?}", v.damage);
        assert!(!root.join("t2/v900").exists() && !root.join("t2/v900.mp4").exists());
        // A rerun skips both titles.
        let again = create(&catalog(), &root, &options(format)).unwrap();
        assert_eq!((again.written_titles, again.skipped_titles), (0, 2));
    }
}

#[test]
fn damage_is_found_and_foreign_roots_refused() {
    let Some(dir) = ffmpeg_scratch() else {
        return;
    };
    let root = dir.path().join("m");
    create(&catalog(), &root, &options(MediaFormat::DashSingle)).unwrap();
    let file = root.join("t1/v900.mp4");
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    std::fs::remove_file(root.join("t2/v300.mp4")).unwrap();
    let v = verify(&root).unwrap();
    assert_eq!(v.damage.len(), 1 + 3, "{:?}", v.damage);
    assert_eq!(v.damage[0].problem, "checksum differs");
    assert!(v.damage[1].path.ends_with("t2/v300.mp4"));
    // What is no presentation does not play, and the error names it.
    let junk = dir.path().join("junk.mpd");
    std::fs::write(&junk, b"not a manifest").unwrap();
    let e = vodkit_media::pool::decode(&junk).unwrap_err().to_string();
    assert!(
        e.contains("could not play") && e.contains("junk.mpd"),
        "{e}"
    );

    // Another packaging into the same root, or a root with other files, is refused.
    let e = create(&catalog(), &root, &options(MediaFormat::Hls)).unwrap_err();
    assert!(e.to_string().contains("different media set"), "{e}");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("x.txt"), b"x").unwrap();
    let e = create(&catalog(), &other, &options(MediaFormat::Hls)).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    let e = verify(&other).unwrap_err();
    assert!(e.to_string().contains("not a media set"), "{e}");
}

/// Frames ffmpeg decodes from `manifest`, with the mean luma of each (`signalstats`).
fn luma_means(manifest: &Path) -> Vec<f64> {
    let out = run_ok(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-i"])
            .arg(manifest)
            .args([
                "-map",
                "0:v:0",
                "-vf",
                "signalstats,metadata=print:key=lavfi.signalstats.YAVG",
                "-f",
                "null",
                "-",
            ]),
    );
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.split("lavfi.signalstats.YAVG=").nth(1))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

#[test]
fn a_source_file_supplies_the_pictures() {
    let Some(dir) = ffmpeg_scratch() else {
        return;
    };
    // A 1.5 s, 30 fps, 4:3 clip that is almost white: shorter than the pool (2 × 1 s, so it
    // loops), another frame rate and aspect than any rung.
    let clip = dir.path().join("clip.mp4");
    run_ok(
        Command::new("ffmpeg")
            .args([
                "-hide_banner",
                "-loglevel",
                "error",
                "-nostdin",
                "-y",
                "-f",
                "lavfi",
                "-i",
            ])
            .arg("color=c=0xF0F0F0:size=320x240:rate=30:duration=1.5")
            .args(["-c:v", "libx264", "-pix_fmt", "yuv420p"])
            .arg(&clip),
    );

    let root = dir.path().join("m");
    let mut o = options(MediaFormat::Dash);
    o.source = Some(clip.clone());
    let r = create(&catalog(), &root, &o).unwrap();
    assert_eq!(r.written_titles, 2);
    let marker = std::fs::read_to_string(root.join(".vodkit-media/media.json")).unwrap();
    assert!(marker.contains("clip.mp4"), "{marker}");
    let pools: Vec<String> = std::fs::read_dir(root.join(".vodkit-media"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pool-"))
        .collect();
    assert_eq!(pools.len(), 2, "{pools:?}");
    assert!(pools.iter().all(|n| n.starts_with("pool-src")), "{pools:?}");
    plays(&root.join("t1/manifest.mpd"));
    assert!(verify(&root).unwrap().damage.is_empty());
    // The pictures are the clip's (bright, padded left and right with black), not the test
    // pattern's colour bars: 5 s of title at 24 fps.
    let lumas = luma_means(&root.join("t1/manifest.mpd"));
    assert_eq!(lumas.len(), 120, "frames of a 5 s title at 24 fps");
    assert!(lumas.iter().all(|&y| y > 150.0), "{lumas:?}");
    let pattern = dir.path().join("p");
    create(&catalog(), &pattern, &options(MediaFormat::Dash)).unwrap();
    let bars = luma_means(&pattern.join("t1/manifest.mpd"));
    assert!(bars.iter().all(|&y| y < 150.0), "{bars:?}");

    // The same root from the test pattern is another media set; a missing file is named.
    let e = create(&catalog(), &root, &options(MediaFormat::Dash)).unwrap_err();
    assert!(e.to_string().contains("clip.mp4"), "{e}");
    o.source = Some(dir.path().join("absent.mp4"));
    let e = create(&catalog(), &dir.path().join("n"), &o).unwrap_err();
    assert!(matches!(e, vodkit_media::MediaError::Input(_)), "{e}");
    assert!(
        e.to_string().contains("--source") && e.to_string().contains("absent.mp4"),
        "{e}"
    );
}

//! A live source publishing a real packaged title (`vodkit live push --title`): a two-fragment
//! rendition from `vodkit_media` looped into a live stream on `vodkit serve --ingest`. The
//! segments on the origin carry decode times that run on across the loop (fragments 0, 1, 0,
//! 1, … at 0, 1, 2, 3 s), the MPD names the title's codec, and ffmpeg — a real HLS player —
//! decodes the final window from the origin with every frame in order. Needs ffmpeg (which
//! `.ci/run` installs); without it the test says SKIPPED.

use crate::common::{ffmpeg_scratch, frame_times, get, ingest_origin, run_out_cleanly};
use std::time::Duration;
use vodkit_live::{LiveTitle, Source, SourceConfig};
use vodkit_media::package::MediaFormat;
use vodkit_workload::model::Catalog;

const TOKEN: &str = "title-token";

/// A packaged title: 3 s at 300 kbit/s in 1 s segments, `dash` (segment files).
fn packaged(root: &std::path::Path) -> std::path::PathBuf {
    let mut catalog = Catalog::of_files([("v/t1-300.dat".to_string(), 1000)], 3.0, 300);
    // Packaged as `t1/`.
    catalog.titles[0].id = 1;
    let mut o = vodkit_media::MediaOptions::new(MediaFormat::Dash);
    o.segment_s = 1.0;
    o.pool_fragments = 2;
    vodkit_media::create(&catalog, root, &o).unwrap();
    root.join("t1/v300")
}

#[test]
fn a_packaged_title_loops_into_a_playable_live_stream() {
    let Some(dir) = ffmpeg_scratch() else {
        return;
    };
    let rendition = packaged(&dir.path().join("media"));
    let media = vodkit_media::rendition(&rendition).unwrap();
    let title = LiveTitle::new(media, "t1/v300").unwrap();
    assert_eq!(title.fragments(), 2, "three segments, the last left out");
    assert!((title.segment_s() - 1.0).abs() < 1e-9);
    let codec = title.codec().to_string();
    assert!(codec.starts_with("avc1."), "{codec}");

    let served = tempfile::tempdir().unwrap();
    let handle = ingest_origin(served.path(), TOKEN);
    let port = handle.addr.port();

    let mut c = SourceConfig::new(&format!("http://127.0.0.1:{port}"), 1, 1).with_title(title);
    assert!(
        c.bitrate_kbps > 100,
        "the title's own rate: {}",
        c.bitrate_kbps
    );
    c.window = 4;
    c.token = Some(TOKEN.into());
    c.duration = Some(Duration::from_secs_f64(6.3));
    // A segment duration other than the title's is refused, naming the setting.
    let mut wrong = c.clone();
    wrong.segment_s = 2.0;
    assert!(wrong.validate().unwrap_err().contains("--segment"));

    let src = Source::start(c).unwrap();
    let report = run_out_cleanly(src);
    assert!(report.published.segments >= 5, "{}", report.summary());

    let (status, text) = get(port, "/live/stream-0/index.m3u8");
    assert_eq!(status, 200);
    let p = m3u8_rs::parse_media_playlist_res(&text).unwrap();
    assert!(p.end_list);
    assert_eq!(p.segments.len(), 4);
    let (_, mpd) = get(port, "/live/stream-0/manifest.mpd");
    let mpd = dash_mpd_core::parse(&String::from_utf8_lossy(&mpd)).unwrap();
    let rep = &mpd.periods[0].adaptations[0].representations[0];
    assert_eq!(rep.codecs.as_deref(), Some(codec.as_str()));

    // The window as one file: decode times follow the segment numbers across the loop.
    let (status, mut all) = get(port, "/live/stream-0/init.mp4");
    assert_eq!(status, 200);
    for seg in &p.segments {
        let (status, body) = get(port, &format!("/live/stream-0/{}", seg.uri));
        assert_eq!(status, 200, "{}", seg.uri);
        all.extend_from_slice(&body);
    }
    let back = vodkit_media::bmff::split(&all).unwrap();
    assert_eq!(back.fragments.len(), 4);
    let step = back.durations[0];
    assert!(step > 0);
    assert!(
        back.durations[..3].iter().all(|&d| d == step),
        "segments follow each other without a gap or a jump back: {:?}",
        back.durations
    );

    // ffmpeg plays the final window from the origin, every frame in order.
    let url = format!("http://127.0.0.1:{port}/live/stream-0/index.m3u8");
    if let Err(e) = vodkit_media::pool::decode(&url) {
        panic!("{e}");
    }
    let pts = frame_times(&url);
    let fps = f64::from(vodkit_media::pool::FPS);
    assert_eq!(pts.len(), 4 * vodkit_media::pool::FPS as usize, "{pts:?}");
    let mut sorted = pts.clone();
    sorted.sort_by(f64::total_cmp);
    assert!(
        sorted
            .windows(2)
            .all(|w| (w[1] - w[0] - 1.0 / fps).abs() < 2e-3),
        "one frame every 1/{fps} s across the loop: {sorted:?}"
    );
}

//! Manifest parsing on the forms vodkit's packager writes and on hand-written edge cases
//! (timelines, multi-period, segment lists, byte ranges), and the errors for broken ones.

use super::*;

const TEMPLATE: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" type="static" mediaPresentationDuration="PT10.000S" minBufferTime="PT4.000S">
  <Period id="0" start="PT0S">
    <AdaptationSet id="0" contentType="video" mimeType="video/mp4" segmentAlignment="true" startWithSAP="1">
      <Representation id="v900" bandwidth="990000" codecs="avc1.64001e" width="640" height="360">
        <SegmentTemplate timescale="12288" duration="49152" startNumber="1" initialization="$RepresentationID$/init.mp4" media="$RepresentationID$/seg-$Number$.m4s"/>
      </Representation>
      <Representation id="v300" bandwidth="330000" codecs="avc1.64001e" width="426" height="240">
        <SegmentTemplate timescale="12288" duration="49152" startNumber="1" initialization="$RepresentationID$/init.mp4" media="$RepresentationID$/seg-$Number%03d$.m4s"/>
      </Representation>
    </AdaptationSet>
  </Period>
</MPD>"#;

#[test]
fn resolves_relative_references_on_one_origin() {
    assert_eq!(
        resolve("/t1/manifest.mpd", "v1/seg.m4s").unwrap(),
        "/t1/v1/seg.m4s"
    );
    assert_eq!(
        resolve("/t1/manifest.mpd?x=1", "../t2/a.mp4").unwrap(),
        "/t2/a.mp4"
    );
    assert_eq!(resolve("/t1/m.mpd", "/abs/x.m4s").unwrap(), "/abs/x.m4s");
    assert_eq!(
        resolve("/t1/m.mpd", "http://cdn.example/p/q.m4s").unwrap(),
        "/p/q.m4s"
    );
    assert_eq!(resolve("/t1/m.mpd", "./a/./b?k=v").unwrap(), "/t1/a/b?k=v");
    assert_eq!(resolve("/t1/", "sub/").unwrap(), "/t1/sub/");
    assert!(resolve("/m.mpd", "../../etc/passwd")
        .unwrap_err()
        .0
        .contains("climbs"));
}

#[test]
fn segment_template_with_duration() {
    let p = dash("/t1/manifest.mpd", TEMPLATE).unwrap();
    assert_eq!(p.periods.len(), 1);
    let r = &p.periods[0].renditions;
    assert_eq!(
        r.iter().map(|r| r.bandwidth_bps).collect::<Vec<_>>(),
        vec![330000, 990000],
        "ascending"
    );
    assert_eq!(
        r[0].init,
        Some(Piece {
            path: "/t1/v300/init.mp4".into(),
            range: None
        })
    );
    let Segments::Listed(segs) = &r[0].segments else {
        panic!("{:?}", r[0].segments)
    };
    assert_eq!(segs.len(), 3, "10 s in 4 s segments");
    assert_eq!(segs[0].piece.path, "/t1/v300/seg-001.m4s");
    assert_eq!(segs[2].piece.path, "/t1/v300/seg-003.m4s");
    assert!((segs[0].duration_s - 4.0).abs() < 1e-9);
    assert!(
        (segs[2].duration_s - 2.0).abs() < 1e-9,
        "the last segment is what is left"
    );
    let Segments::Listed(segs) = &r[1].segments else {
        panic!()
    };
    assert_eq!(segs[1].piece.path, "/t1/v900/seg-2.m4s");
}

#[test]
fn timelines_repeats_time_addressing_and_periods() {
    let xml = r#"<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT14S" minBufferTime="PT2S">
  <BaseURL>media/</BaseURL>
  <Period id="a" duration="PT8S">
    <AdaptationSet mimeType="video/mp4">
      <SegmentTemplate timescale="1000" media="$Bandwidth$/$Time$.m4s" initialization="$Bandwidth$/init.mp4">
        <SegmentTimeline><S t="0" d="2000" r="2"/><S d="2000"/></SegmentTimeline>
      </SegmentTemplate>
      <Representation id="lo" bandwidth="100000"/>
    </AdaptationSet>
    <AdaptationSet mimeType="audio/mp4"><Representation id="aud" bandwidth="64000"/></AdaptationSet>
  </Period>
  <Period id="b" duration="PT6S">
    <AdaptationSet contentType="video">
      <Representation id="lo" bandwidth="100000">
        <SegmentTemplate timescale="1" media="b/$Time$.m4s"><SegmentTimeline><S t="0" d="3" r="-1"/></SegmentTimeline></SegmentTemplate>
      </Representation>
    </AdaptationSet>
  </Period>
</MPD>"#;
    let p = dash("/v/m.mpd", xml).unwrap();
    assert_eq!(p.periods.len(), 2);
    let Segments::Listed(a) = &p.periods[0].renditions[0].segments else {
        panic!()
    };
    let paths: Vec<&str> = a.iter().map(|s| s.piece.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v/media/100000/0.m4s",
            "/v/media/100000/2000.m4s",
            "/v/media/100000/4000.m4s",
            "/v/media/100000/6000.m4s"
        ]
    );
    let Segments::Listed(b) = &p.periods[1].renditions[0].segments else {
        panic!()
    };
    assert_eq!(b.len(), 2, "r=-1 repeats to the end of the 6 s period");
    assert_eq!(b[1].piece.path, "/v/media/b/3.m4s");
}

#[test]
fn segment_base_and_segment_list_use_byte_ranges() {
    let xml = r#"<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT8S" minBufferTime="PT2S">
  <Period><AdaptationSet contentType="video">
    <Representation id="one" bandwidth="500000"><BaseURL>one.mp4</BaseURL>
      <SegmentBase indexRange="900-963"><Initialization range="0-899"/></SegmentBase></Representation>
    <Representation id="list" bandwidth="800000"><BaseURL>list.mp4</BaseURL>
      <SegmentList timescale="10" duration="40"><Initialization range="0-99"/>
        <SegmentURL mediaRange="100-199"/><SegmentURL mediaRange="200-349"/></SegmentList></Representation>
  </AdaptationSet></Period></MPD>"#;
    let p = dash("/t/manifest.mpd", xml).unwrap();
    let r = &p.periods[0].renditions;
    assert_eq!(
        r[0].init,
        Some(Piece {
            path: "/t/one.mp4".into(),
            range: Some((0, 899))
        })
    );
    let Segments::Sidx { index } = &r[0].segments else {
        panic!("{:?}", r[0].segments)
    };
    assert_eq!(index.range, Some((900, 963)));
    // The index the packager writes: two fragments of 100 and 200 bytes after the box.
    let sidx = vodkit_media::bmff::sidx(1, 1000, &[100, 200], &[4000, 4000]).unwrap();
    let segs = from_sidx(index, &sidx).unwrap();
    assert_eq!(segs[0].piece.range, Some((964, 1063)));
    assert_eq!(segs[1].piece.range, Some((1064, 1263)));
    assert!((segs[1].duration_s - 4.0).abs() < 1e-9);
    assert!(from_sidx(index, b"junk").is_err());
    let Segments::Listed(l) = &r[1].segments else {
        panic!()
    };
    assert_eq!(
        l[1].piece,
        Piece {
            path: "/t/list.mp4".into(),
            range: Some((200, 349))
        }
    );
    assert_eq!(r[1].init.as_ref().unwrap().range, Some((0, 99)));
}

#[test]
fn hls_master_and_byte_range_media_playlists() {
    let master = b"#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-STREAM-INF:BANDWIDTH=990000,RESOLUTION=640x360,CODECS=\"avc1.64001e\"\nv900.m3u8\n#EXT-X-STREAM-INF:BANDWIDTH=330000\nlow/v300.m3u8\n";
    let p = hls("/t1/master.m3u8", master).unwrap();
    let r = &p.periods[0].renditions;
    assert_eq!(
        r[0].segments,
        Segments::Playlist {
            path: "/t1/low/v300.m3u8".into()
        }
    );
    assert_eq!(r[1].bandwidth_bps, 990000);
    let media = b"#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:4\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MAP:URI=\"v.mp4\",BYTERANGE=\"800@0\"\n#EXTINF:4.000,\n#EXT-X-BYTERANGE:1000@864\nv.mp4\n#EXTINF:4.000,\n#EXT-X-BYTERANGE:500\nv.mp4\n#EXTINF:2.000,\nother.m4s\n#EXT-X-ENDLIST\n";
    let (init, segs) = hls_media("/t1/low/v300.m3u8", media).unwrap();
    assert_eq!(
        init,
        Some(Piece {
            path: "/t1/low/v.mp4".into(),
            range: Some((0, 799))
        })
    );
    assert_eq!(segs[0].piece.range, Some((864, 1863)));
    assert_eq!(
        segs[1].piece.range,
        Some((1864, 2363)),
        "no offset: right after the previous range"
    );
    assert_eq!(
        segs[2].piece,
        Piece {
            path: "/t1/low/other.m4s".into(),
            range: None
        }
    );
    assert!((segs[2].duration_s - 2.0).abs() < 1e-6);
}

#[test]
fn broken_manifests_are_clear_errors() {
    let cases: Vec<(Result<Presentation, ManifestError>, &str)> = vec![
        (dash("/m.mpd", "<MPD"), "not a valid MPD"),
        (dash("/m.mpd", "<MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" type=\"dynamic\"><Period/></MPD>"), "dynamic"),
        (dash("/m.mpd", &TEMPLATE.replace("bandwidth=\"990000\" ", "")), "no @bandwidth"),
        (dash("/m.mpd", &TEMPLATE.replace("$Number$", "$Frame$")), "unknown template identifier `$Frame$`"),
        (dash("/m.mpd", &TEMPLATE.replace("contentType=\"video\" mimeType=\"video/mp4\"", "contentType=\"audio\"")), "no video adaptation set"),
        (dash("/m.mpd", &TEMPLATE.replace(" mediaPresentationDuration=\"PT10.000S\"", "")), "needs the period's or presentation's duration"),
        (hls("/m.m3u8", b"hello"), "not a valid M3U8"),
        (hls("/m.m3u8", b"#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\na.ts\n"), "live playlist"),
        (hls("/m.m3u8", b"#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\n#EXT-X-BYTERANGE:10\na.mp4\n#EXT-X-ENDLIST\n"), "without an offset"),
    ];
    for (i, (r, needle)) in cases.into_iter().enumerate() {
        let e = r.expect_err(needle);
        assert!(e.0.contains(needle), "case {i}: `{e}` lacks `{needle}`");
    }
}

/// A low-latency playlist in the shape `vodkit live push --low-latency` writes: segment 40
/// complete with its parts, segment 41 in progress with two parts and a hint at the third.
const LL_PLAYLIST: &str = "#EXTM3U
#EXT-X-VERSION:9
#EXT-X-TARGETDURATION:2
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.000,CAN-SKIP-UNTIL=12.000
#EXT-X-PART-INF:PART-TARGET=0.500
#EXT-X-MEDIA-SEQUENCE:39
#EXT-X-MAP:URI=\"init.mp4\"
#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:00:00.000Z
#EXTINF:2.00000,
seg-39.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:00:02.000Z
#EXT-X-PART:DURATION=0.50000,URI=\"seg-40.0.m4s\",INDEPENDENT=YES
#EXT-X-PART:DURATION=0.50000,URI=\"seg-40.1.m4s\"
#EXT-X-PART:DURATION=0.50000,URI=\"seg-40.2.m4s\"
#EXT-X-PART:DURATION=0.50000,URI=\"seg-40.3.m4s\"
#EXTINF:2.00000,
seg-40.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:00:04.000Z
#EXT-X-PART:DURATION=0.50000,URI=\"seg-41.0.m4s\",INDEPENDENT=YES
#EXT-X-PART:DURATION=0.50000,URI=\"seg-41.1.m4s\"
#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-41.2.m4s\"
";

#[test]
fn a_low_latency_playlist_gives_its_parts_hint_and_server_control() {
    let w = hls_live("/live/stream-0/index.m3u8", LL_PLAYLIST.as_bytes()).unwrap();
    assert_eq!((w.first, w.end()), (39, 41));
    let ll = w.ll.as_ref().unwrap();
    assert_eq!(ll.part_target_s, 0.5);
    assert!(ll.can_block_reload);
    assert_eq!(ll.part_hold_back_s, Some(1.0));
    assert_eq!(ll.can_skip_until_s, Some(12.0));
    assert_eq!(
        ll.hint.as_ref().unwrap().path,
        "/live/stream-0/seg-41.2.m4s"
    );
    assert!(w.get(39).unwrap().parts.is_empty());
    assert_eq!(w.get(40).unwrap().parts.len(), 4);
    let p = w.part((40, 0)).unwrap();
    assert!(p.independent);
    assert_eq!(p.piece.path, "/live/stream-0/seg-40.0.m4s");
    assert!(!w.part((40, 1)).unwrap().independent);
    // The segment in progress: its parts and its date, no EXTINF yet.
    let partial = w.partial.as_ref().unwrap();
    assert_eq!(partial.parts.len(), 2);
    assert_eq!(
        w.part((41, 1)).unwrap().piece.path,
        "/live/stream-0/seg-41.1.m4s"
    );
    assert_eq!(w.part((41, 2)), None);
    assert_eq!(w.pdt_ms(41).unwrap() - w.pdt_ms(40).unwrap(), 2000);
    assert_eq!(w.before_part_s((41, 1)), 0.5);
    // After the last part of a complete segment comes part 0 of the next.
    assert_eq!(w.after((40, 3)), (41, 0));
    assert_eq!(w.after((41, 1)), (41, 2));
    assert_eq!(w.settle((40, 4)), (41, 0));
    // A classic playlist has none of it.
    let classic = hls_live(
        "/x/index.m3u8",
        b"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nseg-1.m4s\n",
    )
    .unwrap();
    assert!(classic.ll.is_none() && classic.partial.is_none());
}

#[test]
fn the_join_point_is_the_hold_back_behind_the_newest_part_fetched_from_an_independent_one() {
    let w = hls_live("/s/index.m3u8", LL_PLAYLIST.as_bytes()).unwrap();
    // Newest part: 41.1. One second back (two parts) is the start of 41.0, independent.
    assert_eq!(w.join(1.0), Some(((41, 0), (41, 0))));
    // 1.5 s back: part 40.3 plays first; fetching starts at 40.0, the independent part.
    assert_eq!(w.join(1.5), Some(((40, 3), (40, 0))));
    assert_eq!(w.join(1.2), Some(((40, 3), (40, 0))));
    // Further back than the parts listed: no join point (whole segments then).
    assert_eq!(w.join(5.0), None);
}

#[test]
fn a_delta_update_is_filled_from_the_window_it_updates() {
    let full = hls_live("/s/index.m3u8", LL_PLAYLIST.as_bytes()).unwrap();
    let delta = LL_PLAYLIST.replace(
        "#EXT-X-PROGRAM-DATE-TIME:2026-11-28T23:00:00.000Z\n#EXTINF:2.00000,\nseg-39.m4s\n",
        "#EXT-X-SKIP:SKIPPED-SEGMENTS=1\n",
    );
    let mut w = hls_live("/s/index.m3u8", delta.as_bytes()).unwrap();
    assert_eq!((w.first, w.skipped), (40, 1));
    assert_eq!(w.get(39), None);
    w.merge_delta(&full);
    assert_eq!((w.first, w.skipped), (39, 0));
    assert_eq!(w.get(39).unwrap().piece.path, "/s/seg-39.m4s");
    assert_eq!(w.end(), 41);
    let bad = LL_PLAYLIST.replace("PART-TARGET=0.500", "PART-TARGET=soon");
    let e = hls_live("/s/index.m3u8", bad.as_bytes()).unwrap_err();
    assert!(e.0.contains("PART-TARGET"), "{e}");
}

/// The low-latency MPD vodkit's live publisher (`vodkit_live::playlist::dash`) writes for a
/// stream of 2 s segments in four parts available from 2026-11-28T23:00:00Z, published 10 s
/// later with segments 0 to 5 in its window.
fn ll_mpd() -> String {
    use std::time::{Duration, UNIX_EPOCH};
    let start = UNIX_EPOCH + Duration::from_secs(1_795_906_800);
    let w = vodkit_live::playlist::Window {
        first: 0,
        end: 6,
        segment_s: 2.0,
        start,
        bandwidth_bps: 3_000_000,
        ended: false,
        codecs: "avc1.64001f".into(),
        parts: Some(vodkit_live::playlist::Parts {
            per_segment: 4,
            done: 0,
            clock_url: Some("http://127.0.0.1:8080/.vodkit/clock".into()),
        }),
    };
    vodkit_live::playlist::dash(&w, start + Duration::from_secs(10))
}

#[test]
fn a_low_latency_mpd_gives_availability_offset_and_target_latency() {
    let m = dash_live("/live/stream-2/manifest.mpd", &ll_mpd()).unwrap();
    assert_eq!(m.segment_s, 2.0);
    assert_eq!(m.start_number, 0);
    assert_eq!(m.availability_offset_s, 1.5);
    assert!(!m.availability_complete);
    assert!(m.low_latency());
    assert_eq!(m.latency_target_s, Some(1.5));
    assert_eq!(m.playback_rate, Some((0.96, 1.04)));
    assert_eq!(m.bandwidth_bps, 3_000_000);
    assert_eq!(m.init.as_ref().unwrap().path, "/live/stream-2/init.mp4");
    assert_eq!(m.segment(7).unwrap().path, "/live/stream-2/seg-7.m4s");
    // The origin's clock, as a path on it.
    assert_eq!(m.clock.as_ref().unwrap().path, "/.vodkit/clock");
    // 2026-11-28T23:00:00Z; segment 5 begins 10 s later and may be asked for 0.5 s after
    // that (its end minus the offset), when its first chunk is complete.
    let ast = 1_795_906_800_000.0;
    assert_eq!(m.begins_ms(5), ast + 10_000.0);
    assert_eq!(m.available_ms(5), ast + 10_500.0);
    assert_eq!(m.newest_at(ast + 10_499.0), Some(4));
    assert_eq!(m.newest_at(ast + 10_500.0), Some(5));
    assert_eq!(m.newest_at(ast), None);
    // Without the offset: a classic live MPD, segments available once complete.
    let classic = ll_mpd().replace(
        " availabilityTimeOffset=\"1.500\" availabilityTimeComplete=\"false\"",
        "",
    );
    let m = dash_live("/m.mpd", &classic).unwrap();
    assert!(!m.low_latency());
    assert_eq!(m.available_ms(5), ast + 12_000.0);
    assert_eq!(m.suggested_delay_s, Some(6.0));
    // Once the stream ends the MPD is static: segments stop at its duration.
    let ended = classic.replace(
        "type=\"dynamic\"",
        "type=\"static\" mediaPresentationDuration=\"PT20.000S\"",
    );
    assert_eq!(dash_live("/m.mpd", &ended).unwrap().end_number, Some(10));
    let e = dash_live("/m.mpd", &classic.replace(" duration=\"2000\"", "")).unwrap_err();
    assert!(e.0.contains("@duration"), "{e}");
}

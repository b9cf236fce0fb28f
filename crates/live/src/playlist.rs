//! The texts a live stream publishes for its current window: an HLS media playlist (RFC
//! 8216, version 7 with `#EXT-X-MAP` and a `#EXT-X-PROGRAM-DATE-TIME` on every segment, so
//! viewers can measure their latency behind the live edge) and a dynamic DASH MPD with a
//! `$Number$` `SegmentTemplate` (ISO 23009-1). Pure: times come from the caller.
//!
//! A low-latency window ([`Window::parts`]) makes both low-latency: an LL-HLS playlist
//! (version 9, `#EXT-X-SERVER-CONTROL` with blocking reload, `#EXT-X-PART` for the recent
//! segments and the one in progress, `#EXT-X-PRELOAD-HINT` for the next part) and an MPD
//! whose segments are available as soon as their first chunk is (`availabilityTimeOffset`),
//! with a latency target and a clock for the player.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A stream's window at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// First segment number in the window.
    pub first: u64,
    /// One past the newest segment published.
    pub end: u64,
    /// Segment duration, seconds.
    pub segment_s: f64,
    /// Capture time of segment 0's first frame (the stream's availability start).
    pub start: SystemTime,
    /// Bit rate advertised in the MPD, bits/s.
    pub bandwidth_bps: u64,
    /// The stream has ended: no segment will follow `end - 1`.
    pub ended: bool,
    /// RFC 6381 codec string advertised in the MPD (`avc1.64001f`).
    pub codecs: String,
    /// Low-latency mode: segments are published part by part (`None`: whole segments).
    pub parts: Option<Parts>,
}

/// The parts of a low-latency window: segment `end` is the one in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// Parts per segment.
    pub per_segment: u32,
    /// Parts of segment `end` published so far (`0..per_segment`).
    pub done: u32,
    /// The DASH `UTCTiming` clock URL (`None`: no `UTCTiming` element).
    pub clock_url: Option<String>,
}

impl Parts {
    /// Part duration, seconds, of a window with `segment_s` segments.
    pub fn part_s(&self, segment_s: f64) -> f64 {
        segment_s / f64::from(self.per_segment.max(1))
    }
}

impl Window {
    /// Capture time of segment `n`'s first frame.
    pub fn capture_time(&self, n: u64) -> SystemTime {
        self.start + Duration::from_secs_f64(n as f64 * self.segment_s)
    }
}

/// Segment file name of number `n`.
pub fn segment_name(n: u64) -> String {
    format!("seg-{n}.m4s")
}

/// File name of part `p` of segment `n`.
pub fn part_name(n: u64, p: u32) -> String {
    format!("seg-{n}.{p}.m4s")
}

/// The LL-HLS `PART-TARGET` of parts lasting `part_s`: rounded up to the millisecond, as no
/// part may last longer than the target (0.33333 s → 0.334).
pub fn part_target(part_s: f64) -> f64 {
    // The tolerance keeps a part of exactly 0.25 s at 0.250.
    (part_s * 1000.0 - 1e-6).ceil() / 1000.0
}

/// RFC 3339 UTC with milliseconds (`2026-11-25T10:00:02.000Z`).
pub fn rfc3339_ms(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The HLS media playlist of `w`.
pub fn hls(w: &Window) -> String {
    if let Some(parts) = &w.parts {
        return ll_hls(w, parts);
    }
    let target = w.segment_s.ceil().max(1.0) as u64;
    let mut p = String::with_capacity(128 + 96 * (w.end - w.first) as usize);
    let _ = write!(
        p,
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{target}\n#EXT-X-MEDIA-SEQUENCE:{}\n#EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-MAP:URI=\"init.mp4\"\n",
        w.first
    );
    for n in w.first..w.end {
        let _ = write!(
            p,
            "#EXT-X-PROGRAM-DATE-TIME:{}\n#EXTINF:{:.3},\n{}\n",
            rfc3339_ms(w.capture_time(n)),
            w.segment_s,
            segment_name(n)
        );
    }
    if w.ended {
        p.push_str("#EXT-X-ENDLIST\n");
    }
    p
}

/// The LL-HLS media playlist of `w`: segments `first..end` with their `EXTINF`, the parts
/// of those that start within three target durations of the playlist's end listed before
/// their `EXTINF`, then the parts of segment `end` published so far and a preload hint
/// naming the next part (or `#EXT-X-ENDLIST` once the stream has ended).
fn ll_hls(w: &Window, parts: &Parts) -> String {
    let target = w.segment_s.ceil().max(1.0) as u64;
    let part_s = parts.part_s(w.segment_s);
    let part_target = part_target(part_s);
    let done = if w.ended { 0 } else { parts.done };
    let mut p = String::with_capacity(256 + 160 * (w.end - w.first + 1) as usize);
    let _ = write!(
        p,
        "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK={:.3},CAN-SKIP-UNTIL={:.3}\n\
         #EXT-X-PART-INF:PART-TARGET={part_target:.3}\n#EXT-X-MEDIA-SEQUENCE:{}\n#EXT-X-MAP:URI=\"init.mp4\"\n",
        3.0 * part_target,
        6.0 * w.segment_s,
        w.first
    );
    // Where the playlist ends, in parts since segment 0; parts of segments starting more
    // than three target durations before it are not listed.
    let k = u64::from(parts.per_segment.max(1));
    let edge = w.end * k + u64::from(done);
    let horizon = 3.0 * target as f64 / part_s;
    let listed = |n: u64| (edge - n * k) as f64 <= horizon + 1e-6;
    let part_lines = |p: &mut String, n: u64, count: u32| {
        for i in 0..count {
            let independent = if i == 0 { ",INDEPENDENT=YES" } else { "" };
            let _ = writeln!(
                p,
                "#EXT-X-PART:DURATION={part_s:.5},URI=\"{}\"{independent}",
                part_name(n, i)
            );
        }
    };
    for n in w.first..w.end {
        let _ = writeln!(
            p,
            "#EXT-X-PROGRAM-DATE-TIME:{}",
            rfc3339_ms(w.capture_time(n))
        );
        if listed(n) {
            part_lines(&mut p, n, parts.per_segment);
        }
        let _ = write!(p, "#EXTINF:{:.5},\n{}\n", w.segment_s, segment_name(n));
    }
    if w.ended {
        p.push_str("#EXT-X-ENDLIST\n");
        return p;
    }
    if done > 0 {
        let _ = writeln!(
            p,
            "#EXT-X-PROGRAM-DATE-TIME:{}",
            rfc3339_ms(w.capture_time(w.end))
        );
        part_lines(&mut p, w.end, done);
    }
    let _ = writeln!(
        p,
        "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"{}\"",
        part_name(w.end, done)
    );
    p
}

/// ISO 8601 duration in seconds (`PT12.000S`).
fn iso_duration(s: f64) -> String {
    format!("PT{s:.3}S")
}

/// The DASH MPD of `w`, published at `now`: dynamic while the stream runs (clients compute
/// the live edge from `availabilityStartTime`), static with its duration once ended.
pub fn dash(w: &Window, now: SystemTime) -> String {
    const TIMESCALE: u64 = 1000;
    let seg = (w.segment_s * TIMESCALE as f64).round() as u64;
    let depth = (w.end - w.first) as f64 * w.segment_s;
    let head = if w.ended {
        format!(
            "type=\"static\" mediaPresentationDuration=\"{}\"",
            iso_duration(w.end as f64 * w.segment_s)
        )
    } else {
        format!(
            "type=\"dynamic\" availabilityStartTime=\"{}\" publishTime=\"{}\" minimumUpdatePeriod=\"{}\" timeShiftBufferDepth=\"{}\" suggestedPresentationDelay=\"{}\"",
            rfc3339_ms(w.start),
            rfc3339_ms(now),
            iso_duration(w.segment_s),
            iso_duration(depth),
            iso_duration(3.0 * w.segment_s)
        )
    };
    // Low latency (while live): a segment is available as soon as its first chunk is, and
    // the player is told its latency target and where to read the time.
    let (mut chunked, mut service, mut timing) = (String::new(), String::new(), String::new());
    if let (Some(parts), false) = (&w.parts, w.ended) {
        chunked = format!(
            " availabilityTimeOffset=\"{:.3}\" availabilityTimeComplete=\"false\"",
            w.segment_s - parts.part_s(w.segment_s)
        );
        service = "  <ServiceDescription id=\"0\">\n    <Latency referenceId=\"0\" target=\"1500\" min=\"1000\" max=\"4000\"/>\n    <PlaybackRate min=\"0.96\" max=\"1.04\"/>\n  </ServiceDescription>\n".to_string();
        if let Some(clock) = &parts.clock_url {
            timing = format!(
                "  <UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:http-iso:2014\" value=\"{}\"/>\n",
                quick_xml::escape::escape(clock)
            );
        }
    }
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" {head} minBufferTime="{min_buffer}">
{service}  <Period id="0" start="PT0S">
    <AdaptationSet id="0" contentType="video" mimeType="video/mp4" segmentAlignment="true" startWithSAP="1">
      <SegmentTemplate timescale="{TIMESCALE}" duration="{seg}" startNumber="0" initialization="init.mp4" media="seg-$Number$.m4s"{chunked}/>
      <Representation id="v0" bandwidth="{bw}" codecs="{codecs}"/>
    </AdaptationSet>
  </Period>
{timing}</MPD>
"#,
        min_buffer = iso_duration(w.segment_s),
        bw = w.bandwidth_bps,
        codecs = w.codecs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(first: u64, end: u64, ended: bool) -> Window {
        Window {
            first,
            end,
            segment_s: 2.0,
            start: UNIX_EPOCH + Duration::from_secs(1_764_064_800), // 2025-11-25T10:00:00Z
            bandwidth_bps: 3_000_000,
            ended,
            codecs: "avc1.64001f".into(),
            parts: None,
        }
    }

    #[test]
    fn dates_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339_ms(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_764_064_802_345);
        assert_eq!(rfc3339_ms(t), "2025-11-25T10:00:02.345Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_ms(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_hls_window_slides_and_parses() {
        let text = hls(&window(4, 10, false));
        let p = m3u8_rs::parse_media_playlist_res(text.as_bytes()).unwrap();
        assert_eq!(p.media_sequence, 4);
        assert_eq!(p.target_duration, 2);
        assert_eq!(p.segments.len(), 6);
        assert!(!p.end_list);
        assert_eq!(p.segments[0].uri, "seg-4.m4s");
        assert_eq!(p.segments[5].uri, "seg-9.m4s");
        assert_eq!(p.segments[0].map.as_ref().unwrap().uri, "init.mp4");
        let t: Vec<i64> = p
            .segments
            .iter()
            .map(|s| s.program_date_time.unwrap().timestamp_millis())
            .collect();
        assert!(t.windows(2).all(|w| w[1] - w[0] == 2000), "{t:?}");
        assert_eq!(t[0], 1_764_064_808_000);
        let ended =
            m3u8_rs::parse_media_playlist_res(hls(&window(4, 10, true)).as_bytes()).unwrap();
        assert!(ended.end_list);
    }

    #[test]
    fn the_mpd_is_dynamic_while_live_and_static_once_ended() {
        let now = UNIX_EPOCH + Duration::from_secs(1_764_064_820);
        let live = dash(&window(4, 10, false), now);
        let mpd = dash_mpd_core::parse(&live).unwrap();
        assert_eq!(mpd.mpdtype.as_deref(), Some("dynamic"));
        assert!(live.contains("availabilityStartTime=\"2025-11-25T10:00:00.000Z\""));
        assert!(live.contains("timeShiftBufferDepth=\"PT12.000S\""));
        assert!(live.contains("media=\"seg-$Number$.m4s\""));
        assert_eq!(
            mpd.periods[0].adaptations[0].representations[0]
                .codecs
                .as_deref(),
            Some("avc1.64001f")
        );
        let ended = dash(&window(4, 10, true), now);
        let mpd = dash_mpd_core::parse(&ended).unwrap();
        assert_eq!(mpd.mpdtype.as_deref(), Some("static"));
        assert!(ended.contains("mediaPresentationDuration=\"PT20.000S\""));
    }

    fn ll(first: u64, end: u64, done: u32, ended: bool) -> Window {
        Window {
            parts: Some(Parts {
                per_segment: 6,
                done,
                clock_url: Some("http://127.0.0.1:8080/.vodkit/clock".into()),
            }),
            ..window(first, end, ended)
        }
    }

    /// The `#EXT-X-PART` lines of parts `0..count` of segment `n` (parts of 2/6 s).
    fn part_lines(n: u64, count: u32) -> String {
        (0..count)
            .map(|i| {
                let ind = if i == 0 { ",INDEPENDENT=YES" } else { "" };
                format!("#EXT-X-PART:DURATION=0.33333,URI=\"seg-{n}.{i}.m4s\"{ind}\n")
            })
            .collect()
    }

    const LL_HEAD: &str = "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:2\n\
        #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.002,CAN-SKIP-UNTIL=12.000\n\
        #EXT-X-PART-INF:PART-TARGET=0.334\n";

    #[test]
    fn the_ll_hls_playlist_lists_recent_parts_and_hints_the_next() {
        let text = hls(&ll(8, 10, 2, false));
        let want = format!(
            "{LL_HEAD}#EXT-X-MEDIA-SEQUENCE:8\n#EXT-X-MAP:URI=\"init.mp4\"\n\
             #EXT-X-PROGRAM-DATE-TIME:2025-11-25T10:00:16.000Z\n{}#EXTINF:2.00000,\nseg-8.m4s\n\
             #EXT-X-PROGRAM-DATE-TIME:2025-11-25T10:00:18.000Z\n{}#EXTINF:2.00000,\nseg-9.m4s\n\
             #EXT-X-PROGRAM-DATE-TIME:2025-11-25T10:00:20.000Z\n{}\
             #EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-10.2.m4s\"\n",
            part_lines(8, 6),
            part_lines(9, 6),
            part_lines(10, 2)
        );
        assert_eq!(text, want);
        // Players' parsers take it (the LL tags are unknown to this one, but not in the way).
        let p = m3u8_rs::parse_media_playlist_res(text.as_bytes()).unwrap();
        assert_eq!(p.segments.len(), 2);
        assert_eq!(p.segments[1].uri, "seg-9.m4s");
    }

    #[test]
    fn parts_older_than_three_target_durations_are_not_listed() {
        // The playlist ends 2 parts into segment 10 (at 20.667 s): segments 8 and 9 start
        // within 6 s of it, 7 and older do not.
        let text = hls(&ll(4, 10, 2, false));
        for n in 4..8 {
            assert!(!text.contains(&format!("seg-{n}.0.m4s")), "seg-{n}: {text}");
            assert!(text.contains(&format!("\nseg-{n}.m4s\n")));
        }
        for n in 8..10 {
            assert!(text.contains(&part_lines(n, 6)), "seg-{n}: {text}");
        }
        // At a segment boundary three whole segments are in reach.
        let text = hls(&ll(4, 10, 0, false));
        assert!(text.contains(&part_lines(7, 6)));
        assert!(!text.contains("seg-6.0.m4s"));
    }

    #[test]
    fn a_segment_gets_its_extinf_with_its_last_part() {
        // Five parts of segment 10 out: no EXTINF for it, the hint names the sixth.
        let before = hls(&ll(8, 10, 5, false));
        assert!(!before.contains("seg-10.m4s"));
        assert!(before.ends_with(&format!(
            "{}#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-10.5.m4s\"\n",
            part_lines(10, 5)
        )));
        // The sixth published: segment 10 is complete, the hint names the next segment's
        // first part, and segment 11 has no date line until it has a part.
        let after = hls(&ll(8, 11, 0, false));
        assert!(after.ends_with(&format!(
            "#EXT-X-PROGRAM-DATE-TIME:2025-11-25T10:00:20.000Z\n{}#EXTINF:2.00000,\nseg-10.m4s\n\
             #EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg-11.0.m4s\"\n",
            part_lines(10, 6)
        )));
        assert!(!after.contains("10:00:22"));
    }

    #[test]
    fn the_final_ll_playlist_ends_without_a_hint() {
        let text = hls(&ll(8, 11, 3, true));
        assert!(
            text.ends_with("#EXTINF:2.00000,\nseg-10.m4s\n#EXT-X-ENDLIST\n"),
            "{text}"
        );
        assert!(!text.contains("PRELOAD-HINT"));
        assert!(!text.contains("seg-11."));
        assert!(
            m3u8_rs::parse_media_playlist_res(text.as_bytes())
                .unwrap()
                .end_list
        );
    }

    #[test]
    fn part_targets_round_up_to_the_millisecond() {
        assert_eq!(format!("{:.3}", part_target(2.0 / 6.0)), "0.334");
        assert_eq!(format!("{:.3}", part_target(0.25)), "0.250");
        assert_eq!(format!("{:.3}", part_target(0.2)), "0.200");
        assert_eq!(part_name(7, 3), "seg-7.3.m4s");
    }

    #[test]
    fn the_ll_mpd_says_when_chunks_are_available_and_how_far_behind_to_play() {
        let now = UNIX_EPOCH + Duration::from_secs(1_764_064_820);
        let mut w = ll(4, 10, 0, false);
        if let Some(p) = &mut w.parts {
            p.clock_url = Some("http://o:1/.vodkit/clock?a=1&b=2".into());
        }
        let text = dash(&w, now);
        assert!(
            text.contains(
                "media=\"seg-$Number$.m4s\" availabilityTimeOffset=\"1.667\" availabilityTimeComplete=\"false\"/>"
            ),
            "{text}"
        );
        assert!(text.contains(
            "  <ServiceDescription id=\"0\">\n    <Latency referenceId=\"0\" target=\"1500\" min=\"1000\" max=\"4000\"/>\n    <PlaybackRate min=\"0.96\" max=\"1.04\"/>\n  </ServiceDescription>\n  <Period"
        ));
        assert!(text.ends_with(
            "  </Period>\n  <UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:http-iso:2014\" value=\"http://o:1/.vodkit/clock?a=1&amp;b=2\"/>\n</MPD>\n"
        ));
        assert!(text.contains("minimumUpdatePeriod=\"PT2.000S\""));
        let mpd = dash_mpd_core::parse(&text).unwrap();
        assert_eq!(mpd.mpdtype.as_deref(), Some("dynamic"));
        assert_eq!(mpd.UTCTiming.len(), 1);
        // Without a clock there is no UTCTiming; once ended, the MPD is a plain static one.
        if let Some(p) = &mut w.parts {
            p.clock_url = None;
        }
        assert!(!dash(&w, now).contains("UTCTiming"));
        let ended = dash(&ll(4, 10, 0, true), now);
        assert_eq!(ended, dash(&window(4, 10, true), now));
    }

    #[test]
    fn the_classic_texts_have_no_low_latency_lines() {
        let now = UNIX_EPOCH + Duration::from_secs(1_764_064_820);
        let mpd = dash(&window(4, 10, false), now);
        assert!(mpd.contains("media=\"seg-$Number$.m4s\"/>\n"));
        assert!(mpd.contains("minBufferTime=\"PT2.000S\">\n  <Period"));
        assert!(mpd.ends_with("  </Period>\n</MPD>\n"));
        let text = hls(&window(9, 10, false));
        assert_eq!(
            text,
            "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:9\n\
             #EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-MAP:URI=\"init.mp4\"\n\
             #EXT-X-PROGRAM-DATE-TIME:2025-11-25T10:00:18.000Z\n#EXTINF:2.000,\nseg-9.m4s\n"
        );
    }
}

//! The texts a live stream publishes for its current window: an HLS media playlist (RFC
//! 8216, version 7 with `#EXT-X-MAP` and a `#EXT-X-PROGRAM-DATE-TIME` on every segment, so
//! viewers can measure their latency behind the live edge) and a dynamic DASH MPD with a
//! `$Number$` `SegmentTemplate` (ISO 23009-1). Pure: times come from the caller.

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
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" {head} minBufferTime="{min_buffer}">
  <Period id="0" start="PT0S">
    <AdaptationSet id="0" contentType="video" mimeType="video/mp4" segmentAlignment="true" startWithSAP="1">
      <SegmentTemplate timescale="{TIMESCALE}" duration="{seg}" startNumber="0" initialization="init.mp4" media="seg-$Number$.m4s"/>
      <Representation id="v0" bandwidth="{bw}" codecs="{codecs}"/>
    </AdaptationSet>
  </Period>
</MPD>
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
}

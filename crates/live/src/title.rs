//! A packaged title as a live source's content (`vodkit live push --title`): the fragments of
//! one rendition played in a loop, each renumbered (`mfhd` sequence n + 1, `tfdt` decode time
//! n × the fragment duration) so live segment n continues segment n − 1 without a gap or a
//! jump back, and a player sees one endless presentation. The init segment carries a `free`
//! box naming the stream, so every stream's bytes are its own.
//!
//! In low-latency mode ([`LiveTitle::in_parts`]) each fragment is one part and k
//! consecutive fragments make a segment; the numbering then runs per fragment, the loop is
//! cut to a whole number of segments, and every segment must start at a fragment whose
//! first sample is a sync sample (read from the `trun`, `tfhd` or `trex` sample flags).

use vodkit_media::bmff::{self, Fragmented};

/// A rendition ready to be published as live segments.
#[derive(Clone)]
pub struct LiveTitle {
    media: Fragmented,
    /// Fragments in the loop (the file's last one is left out: its duration is not in it).
    count: usize,
    /// Duration of every fragment, in the track's timescale.
    step: u64,
    /// Fragments per live segment: 1, or the parts of a low-latency segment.
    per_segment: u32,
}

impl std::fmt::Debug for LiveTitle {
    // Figures only: the media bytes would fill a screen.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTitle")
            .field("codec", &self.media.codec)
            .field("fragments", &self.count)
            .field("per_segment", &self.per_segment)
            .field("segment_s", &self.segment_s())
            .field("bitrate_kbps", &self.bitrate_kbps())
            .finish()
    }
}

impl PartialEq for LiveTitle {
    fn eq(&self, other: &LiveTitle) -> bool {
        self.media.init == other.media.init
            && self.media.fragments == other.media.fragments
            && self.step == other.step
            && self.count == other.count
            && self.per_segment == other.per_segment
    }
}

impl LiveTitle {
    /// Check that `media` can loop as a live stream: at least two fragments (the last one's
    /// duration is not recorded in a fragmented MP4, so it is left out) of one duration
    /// (within 1%; a live stream's segments all last the same). `what` names the source in
    /// errors.
    pub fn new(media: Fragmented, what: &str) -> Result<LiveTitle, String> {
        let n = media.fragments.len();
        if n < 2 {
            return Err(format!(
                "{what}: {n} fragment: a live source needs at least two (the last one's duration is unknown)"
            ));
        }
        let durations = &media.durations[..n - 1];
        let (lo, hi) = durations
            .iter()
            .fold((u64::MAX, 0u64), |(lo, hi), &d| (lo.min(d), hi.max(d)));
        if lo == 0 || (hi - lo) as f64 > 0.01 * lo as f64 {
            let ts = f64::from(media.timescale);
            return Err(format!(
                "{what}: fragments last {:.3} s to {:.3} s; a live source needs one segment duration \
                 (encode with a fixed GOP, e.g. ffmpeg -g N -keyint_min N -sc_threshold 0)",
                lo as f64 / ts,
                hi as f64 / ts
            ));
        }
        Ok(LiveTitle {
            step: durations[0],
            count: n - 1,
            media,
            per_segment: 1,
        })
    }

    /// The title as the parts of low-latency segments: each fragment is one part, and a
    /// segment is `segment_s` of them (a whole multiple of the fragment duration, within
    /// 1%) or, without it, the fragments from one key frame to the next (2 s of them when
    /// every fragment starts with one). The loop is cut to a whole number of segments, and
    /// every segment must start with a key frame. `what` names the source in errors.
    pub fn in_parts(mut self, segment_s: Option<f64>, what: &str) -> Result<LiveTitle, String> {
        let fragment_s = self.fragment_s();
        let sync = (0..self.count)
            .map(|i| {
                starts_with_sync(&self.media.init, &self.media.fragments[i])
                    .map_err(|e| format!("{what}: fragment {i}: {e}"))
            })
            .collect::<Result<Vec<bool>, String>>()?;
        let k = match segment_s {
            Some(d) => {
                let k = (d / fragment_s).round();
                if k < 2.0 || (k * fragment_s - d).abs() > 0.01 * d {
                    return Err(format!(
                        "{what}: --segment {d:.3} s is not a whole multiple (at least 2) of the title's {fragment_s:.3} s fragments, each of which is one part"
                    ));
                }
                k as usize
            }
            None if sync.iter().all(|&s| s) => ((2.0 / fragment_s).round() as usize).max(2),
            None => sync
                .iter()
                .skip(1)
                .position(|&s| s)
                .map_or(self.count, |i| i + 1)
                .max(2),
        };
        if self.count < k {
            return Err(format!(
                "{what}: {} fragments in the loop; a segment of {k} parts needs at least {k} (the last fragment is left out)",
                self.count
            ));
        }
        self.count -= self.count % k;
        if let Some(i) = (0..self.count).step_by(k).find(|&i| !sync[i]) {
            return Err(format!(
                "{what}: fragment {i} (at {:.3} s) does not start with a key frame, but starts a segment of {k} parts; encode with a key frame every {:.3} s (ffmpeg -g N -keyint_min N -sc_threshold 0) or pick --segment accordingly",
                i as f64 * fragment_s,
                k as f64 * fragment_s
            ));
        }
        self.per_segment =
            u32::try_from(k).map_err(|_| format!("{what}: {k} parts per segment"))?;
        Ok(self)
    }

    /// Segment duration, seconds.
    pub fn segment_s(&self) -> f64 {
        self.fragment_s() * f64::from(self.per_segment)
    }

    /// Duration of one fragment (in low-latency mode, one part), seconds.
    pub fn fragment_s(&self) -> f64 {
        self.step as f64 / f64::from(self.media.timescale)
    }

    /// Fragments (parts) per live segment: 1 unless [`LiveTitle::in_parts`].
    pub fn parts(&self) -> u32 {
        self.per_segment
    }

    /// Mean bit rate of the loop, kbit/s.
    pub fn bitrate_kbps(&self) -> u32 {
        let bytes: usize = self.media.fragments[..self.count]
            .iter()
            .map(Vec::len)
            .sum();
        let seconds = self.fragment_s() * self.count as f64;
        ((bytes as f64 * 8.0 / seconds / 1000.0).round() as u32).max(1)
    }

    /// RFC 6381 codec string (`avc1.64001f`).
    pub fn codec(&self) -> &str {
        &self.media.codec
    }

    /// Fragments in the loop.
    pub fn fragments(&self) -> usize {
        self.count
    }

    /// Stream `k`'s init segment.
    pub fn init(&self, k: u32) -> Vec<u8> {
        let mut v = self.media.init.clone();
        v.extend_from_slice(&bmff::free_box(&format!("vodkit live stream {k}")));
        v
    }

    /// Live fragment `i` (counted over the whole stream): fragment `i mod count` of the loop,
    /// renumbered to follow live fragment `i − 1`.
    fn fragment(&self, i: u64) -> Result<Vec<u8>, String> {
        let mut f = self.media.fragments[(i % self.count as u64) as usize].clone();
        let sequence = u32::try_from(i + 1)
            .map_err(|_| format!("fragment {i}: sequence number beyond 32 bits"))?;
        bmff::renumber(&mut f, sequence, i * self.step)
            .map_err(|e| format!("fragment {i}: {e}"))?;
        Ok(f)
    }

    /// Live segment `n`: its fragments, renumbered to follow segment `n − 1`.
    pub fn segment(&self, n: u64) -> Result<Vec<u8>, String> {
        let k = u64::from(self.per_segment);
        let mut out = Vec::new();
        for i in n * k..(n + 1) * k {
            out.extend_from_slice(&self.fragment(i)?);
        }
        Ok(out)
    }

    /// Part `p` of live segment `n` (low-latency mode): one fragment.
    pub fn part(&self, n: u64, p: u32) -> Result<Vec<u8>, String> {
        self.fragment(n * u64::from(self.per_segment) + u64::from(p))
    }
}

/// Sample flags saying a sample is not a sync sample (ISO 14496-12 8.8.3.1,
/// `sample_is_non_sync_sample`).
const NON_SYNC: u32 = 0x0001_0000;

/// Whether `fragment`'s first sample is a sync sample (a key frame): its flags from the
/// `trun` (first-sample flags, or the first sample's own), else the `tfhd` defaults, else
/// the `trex` defaults in `init`'s `moov`; no flags anywhere means sync.
fn starts_with_sync(init: &[u8], fragment: &[u8]) -> Result<bool, String> {
    let top = bmff::children(fragment, 0, fragment.len()).map_err(|e| e.to_string())?;
    let moof = top
        .iter()
        .find(|b| &b.kind == b"moof")
        .ok_or("no `moof` box")?;
    let traf = bmff::child(fragment, moof, b"traf").map_err(|e| e.to_string())?;
    let trun = bmff::child(fragment, &traf, b"trun").map_err(|e| e.to_string())?;
    if let Some(flags) = first_sample_flags(fragment, &trun)? {
        return Ok(flags & NON_SYNC == 0);
    }
    let tfhd = bmff::child(fragment, &traf, b"tfhd").map_err(|e| e.to_string())?;
    if let Some(flags) = tfhd_default_flags(fragment, &tfhd)? {
        return Ok(flags & NON_SYNC == 0);
    }
    Ok(trex_default_flags(init)?.is_none_or(|flags| flags & NON_SYNC == 0))
}

/// The big-endian `u32` at `at`, which must lie inside `b`'s payload.
fn word(buf: &[u8], b: &bmff::BoxAt, at: usize) -> Result<u32, String> {
    if at < b.body || at + 4 > b.end {
        return Err(format!(
            "truncated `{}` box",
            String::from_utf8_lossy(&b.kind)
        ));
    }
    let mut w = [0u8; 4];
    w.copy_from_slice(&buf[at..at + 4]);
    Ok(u32::from_be_bytes(w))
}

/// The first sample's flags a `trun` carries, if any.
fn first_sample_flags(buf: &[u8], trun: &bmff::BoxAt) -> Result<Option<u32>, String> {
    let flags = word(buf, trun, trun.body)? & 0x00FF_FFFF;
    let count = word(buf, trun, trun.body + 4)?;
    let mut at = trun.body + 8;
    if flags & 0x01 != 0 {
        at += 4; // data offset
    }
    if flags & 0x04 != 0 {
        return word(buf, trun, at).map(Some);
    }
    if flags & 0x400 == 0 || count == 0 {
        return Ok(None);
    }
    // The first sample's record: duration and size come before its flags when present.
    at += 4 * usize::from(flags & 0x100 != 0) + 4 * usize::from(flags & 0x200 != 0);
    word(buf, trun, at).map(Some)
}

/// The default sample flags a `tfhd` carries, if any.
fn tfhd_default_flags(buf: &[u8], tfhd: &bmff::BoxAt) -> Result<Option<u32>, String> {
    let flags = word(buf, tfhd, tfhd.body)? & 0x00FF_FFFF;
    if flags & 0x20 == 0 {
        return Ok(None);
    }
    // After the track id: base data offset (8), sample description index, default
    // duration and default size (4 each), each when its flag is set.
    let at = tfhd.body
        + 8
        + 8 * usize::from(flags & 0x01 != 0)
        + 4 * usize::from(flags & 0x02 != 0)
        + 4 * usize::from(flags & 0x08 != 0)
        + 4 * usize::from(flags & 0x10 != 0);
    word(buf, tfhd, at).map(Some)
}

/// The default sample flags of the `trex` in `init`'s `moov`/`mvex`, if there is one.
fn trex_default_flags(init: &[u8]) -> Result<Option<u32>, String> {
    let top = bmff::children(init, 0, init.len()).map_err(|e| e.to_string())?;
    let Some(moov) = top.iter().find(|b| &b.kind == b"moov") else {
        return Ok(None);
    };
    let Ok(mvex) = bmff::child(init, moov, b"mvex") else {
        return Ok(None);
    };
    let Ok(trex) = bmff::child(init, &mvex, b"trex") else {
        return Ok(None);
    };
    // version/flags, track id, description index, duration, size, then the flags.
    word(init, &trex, trex.body + 20).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    use vodkit_media::bmff::make_box as boxed;

    /// A fragment: `moof` (`mfhd` sequence, `traf`/`tfdt` v1 decode time) and an `mdat`.
    fn fragment(sequence: u32, decode: u64, payload: &[u8]) -> Vec<u8> {
        let mut mfhd = vec![0, 0, 0, 0];
        mfhd.extend_from_slice(&sequence.to_be_bytes());
        let mut tfdt = vec![1, 0, 0, 0];
        tfdt.extend_from_slice(&decode.to_be_bytes());
        let traf = boxed(b"traf", &boxed(b"tfdt", &tfdt));
        let moof = boxed(b"moof", &[boxed(b"mfhd", &mfhd), traf].concat());
        [moof, boxed(b"mdat", payload)].concat()
    }

    fn media(decodes: &[u64]) -> Fragmented {
        let fragments: Vec<Vec<u8>> = decodes
            .iter()
            .enumerate()
            .map(|(i, &t)| fragment(i as u32 + 1, t, &[i as u8; 100]))
            .collect();
        let mut durations: Vec<u64> = decodes.windows(2).map(|w| w[1] - w[0]).collect();
        durations.push(*durations.last().unwrap_or(&1000));
        Fragmented {
            init: boxed(b"ftyp", b"iso6\0\0\0\0"),
            fragments,
            track_id: 1,
            timescale: 1000,
            durations,
            codec: "avc1.64001f".into(),
        }
    }

    /// (sequence, decode time) of a fragment.
    fn numbers(f: &[u8]) -> (u32, u64) {
        // moof(8) mfhd(8 + 4 version/flags) → sequence at 20; traf(8) tfdt(8 + 4) → time.
        let seq = u32::from_be_bytes(f[20..24].try_into().unwrap());
        let t = u64::from_be_bytes(f[44..52].try_into().unwrap());
        (seq, t)
    }

    #[test]
    fn segments_loop_the_fragments_and_keep_time_running() {
        let t = LiveTitle::new(media(&[0, 2000, 4000, 6000]), "x").unwrap();
        assert_eq!(t.fragments(), 3, "the last fragment is left out");
        assert_eq!(t.segment_s(), 2.0);
        for n in 0..8u64 {
            let s = t.segment(n).unwrap();
            assert_eq!(numbers(&s), (n as u32 + 1, n * 2000), "segment {n}");
            // The payload is fragment n mod 3's.
            assert_eq!(s[s.len() - 1], (n % 3) as u8);
        }
        // 100-byte payloads (plus 60 bytes of boxes) every 2 s.
        assert_eq!(t.bitrate_kbps(), 1);
        assert!(t.init(3).ends_with(b"vodkit live stream 3"));
        assert_ne!(t.init(3), t.init(4));
    }

    #[test]
    fn unusable_titles_are_refused_with_the_reason() {
        let e = LiveTitle::new(media(&[0]), "one.mp4").unwrap_err();
        assert!(e.starts_with("one.mp4: 1 fragment"), "{e}");
        let e = LiveTitle::new(media(&[0, 2000, 3000, 5000]), "gop.mp4").unwrap_err();
        assert!(
            e.contains("1.000 s to 2.000 s") && e.contains("fixed GOP"),
            "{e}"
        );
        // Within 1%: accepted (a 29.97 fps GOP rounded to the timescale).
        assert!(LiveTitle::new(media(&[0, 2000, 4010, 6010]), "ok").is_ok());
    }

    /// A fragment whose sample flags say whether it starts with a sync sample the way
    /// ffmpeg writes them: non-sync defaults in the `tfhd`, and for a key frame the
    /// first-sample flags in the `trun`.
    fn flagged(sequence: u32, decode: u64, sync: bool) -> Vec<u8> {
        let mut mfhd = vec![0, 0, 0, 0];
        mfhd.extend_from_slice(&sequence.to_be_bytes());
        let mut tfdt = vec![1, 0, 0, 0];
        tfdt.extend_from_slice(&decode.to_be_bytes());
        // tfhd: flags 0x020038 (base is moof, default duration, size, flags).
        let mut tfhd = vec![0, 0x02, 0x00, 0x38, 0, 0, 0, 1];
        tfhd.extend_from_slice(&[0, 0, 1, 0, 0, 0, 0, 10, 0x01, 0x01, 0, 0]);
        // trun: one sample; a data offset, and first-sample flags for a key frame.
        let trun = if sync {
            vec![0, 0, 0, 0x05, 0, 0, 0, 1, 0, 0, 0, 0, 0x02, 0, 0, 0]
        } else {
            vec![0, 0, 0, 0x01, 0, 0, 0, 1, 0, 0, 0, 0]
        };
        let traf = boxed(
            b"traf",
            &[
                boxed(b"tfdt", &tfdt),
                boxed(b"tfhd", &tfhd),
                boxed(b"trun", &trun),
            ]
            .concat(),
        );
        let moof = boxed(b"moof", &[boxed(b"mfhd", &mfhd), traf].concat());
        [moof, boxed(b"mdat", &[sequence as u8; 10])].concat()
    }

    /// A title of `sync.len()` quarter-second fragments (the last is left out of the loop).
    fn quarters(sync: &[bool]) -> LiveTitle {
        let fragments: Vec<Vec<u8>> = sync
            .iter()
            .enumerate()
            .map(|(i, &s)| flagged(i as u32 + 1, i as u64 * 250, s))
            .collect();
        let media = Fragmented {
            init: boxed(b"ftyp", b"iso6\0\0\0\0"),
            durations: vec![250; fragments.len()],
            fragments,
            track_id: 1,
            timescale: 1000,
            codec: "avc1.64001f".into(),
        };
        LiveTitle::new(media, "q.mp4").unwrap()
    }

    #[test]
    fn sync_samples_are_read_from_the_sample_flags() {
        let init = boxed(b"ftyp", b"iso6\0\0\0\0");
        assert!(starts_with_sync(&init, &flagged(1, 0, true)).unwrap());
        assert!(!starts_with_sync(&init, &flagged(2, 250, false)).unwrap());
        // Without a trun there is nothing to read.
        assert!(starts_with_sync(&init, &fragment(1, 0, b"x")).is_err());
    }

    #[test]
    fn a_title_in_parts_makes_segments_of_fragments_from_key_frame_to_key_frame() {
        // Key frames every fourth fragment; 10 fragments, 9 in the loop, cut to 8.
        let sync: Vec<bool> = (0..10).map(|i| i % 4 == 0).collect();
        let t = quarters(&sync).in_parts(None, "q.mp4").unwrap();
        assert_eq!(t.parts(), 4);
        assert_eq!(t.fragments(), 8);
        assert!((t.segment_s() - 1.0).abs() < 1e-9);
        assert!((t.fragment_s() - 0.25).abs() < 1e-9);
        // Parts are numbered per fragment across the loop; a segment is its parts.
        for n in 0..5u64 {
            let mut whole = Vec::new();
            for p in 0..4u32 {
                let part = t.part(n, p).unwrap();
                let i = n * 4 + u64::from(p);
                assert_eq!(numbers(&part), (i as u32 + 1, i * 250), "part {n}.{p}");
                // The payload is loop fragment i mod 8's.
                assert_eq!(part[part.len() - 1], (i % 8) as u8 + 1);
                whole.extend_from_slice(&part);
            }
            assert_eq!(t.segment(n).unwrap(), whole);
            assert!(starts_with_sync(&t.media.init, &whole).unwrap());
        }
        // The same with the segment duration given.
        let t = quarters(&sync).in_parts(Some(2.0), "q.mp4").unwrap();
        assert_eq!((t.parts(), t.fragments()), (8, 8));
    }

    #[test]
    fn segments_that_would_not_start_with_a_key_frame_are_refused() {
        let sync: Vec<bool> = (0..10).map(|i| i % 4 == 0).collect();
        let e = quarters(&sync).in_parts(Some(0.5), "q.mp4").unwrap_err();
        assert!(
            e.starts_with("q.mp4: fragment 2 (at 0.500 s) does not start with a key frame"),
            "{e}"
        );
        let e = quarters(&sync).in_parts(Some(1.1), "q.mp4").unwrap_err();
        assert!(
            e.starts_with("q.mp4: --segment 1.100 s is not a whole multiple"),
            "{e}"
        );
        let e = quarters(&sync).in_parts(Some(4.0), "q.mp4").unwrap_err();
        assert!(e.contains("9 fragments in the loop"), "{e}");
        // Every fragment a key frame: 2 s segments by default, any multiple on request.
        let t = quarters(&[true; 10]).in_parts(None, "q.mp4").unwrap();
        assert_eq!(t.parts(), 8);
        let t = quarters(&[true; 10]).in_parts(Some(0.5), "q.mp4").unwrap();
        assert_eq!((t.parts(), t.fragments()), (2, 8));
    }
}

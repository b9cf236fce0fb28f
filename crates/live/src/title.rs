//! A packaged title as a live source's content (`vodkit live push --title`): the fragments of
//! one rendition played in a loop, each renumbered (`mfhd` sequence n + 1, `tfdt` decode time
//! n × the fragment duration) so live segment n continues segment n − 1 without a gap or a
//! jump back, and a player sees one endless presentation. The init segment carries a `free`
//! box naming the stream, so every stream's bytes are its own.

use vodkit_media::bmff::{self, Fragmented};

/// A rendition ready to be published as live segments.
#[derive(Clone)]
pub struct LiveTitle {
    media: Fragmented,
    /// Fragments in the loop (the file's last one is left out: its duration is not in it).
    count: usize,
    /// Duration of every fragment, in the track's timescale.
    step: u64,
}

impl std::fmt::Debug for LiveTitle {
    // Figures only: the media bytes would fill a screen.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTitle")
            .field("codec", &self.media.codec)
            .field("fragments", &self.count)
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
        })
    }

    /// Segment duration, seconds.
    pub fn segment_s(&self) -> f64 {
        self.step as f64 / f64::from(self.media.timescale)
    }

    /// Mean bit rate of the loop, kbit/s.
    pub fn bitrate_kbps(&self) -> u32 {
        let bytes: usize = self.media.fragments[..self.count]
            .iter()
            .map(Vec::len)
            .sum();
        let seconds = self.segment_s() * self.count as f64;
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

    /// Live segment `n`: fragment `n mod count`, renumbered to follow segment `n − 1`.
    pub fn segment(&self, n: u64) -> Result<Vec<u8>, String> {
        let mut f = self.media.fragments[(n % self.count as u64) as usize].clone();
        let sequence = u32::try_from(n + 1)
            .map_err(|_| format!("segment {n}: sequence number beyond 32 bits"))?;
        bmff::renumber(&mut f, sequence, n * self.step).map_err(|e| format!("segment {n}: {e}"))?;
        Ok(f)
    }
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
}

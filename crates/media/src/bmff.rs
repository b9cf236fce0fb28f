//! The little ISO BMFF (MP4) a packager needs: split a fragmented MP4 into its init segment
//! and fragments, read the track's timescale and codec string, renumber a fragment (`mfhd`
//! sequence, `tfdt` decode time) in place, and write `sidx` and `free` boxes.
//!
//! Everything works on byte slices of whole files; a box that runs past its parent or a
//! missing required box is an error naming the box, never a panic.

use std::fmt;

/// Why a byte string is not the fragmented MP4 this packager expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmffError(pub String);

impl fmt::Display for BmffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BmffError {}

fn err<T>(what: impl Into<String>) -> Result<T, BmffError> {
    Err(BmffError(what.into()))
}

/// One box: its four-character type and where it and its payload lie in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoxAt {
    pub kind: [u8; 4],
    /// Offset of the box header.
    pub start: usize,
    /// Offset of the payload (after the 8- or 16-byte header).
    pub body: usize,
    /// Offset just past the box.
    pub end: usize,
}

/// The boxes directly inside `buf[from..to]`.
pub fn children(buf: &[u8], from: usize, to: usize) -> Result<Vec<BoxAt>, BmffError> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        if to - at < 8 {
            return err(format!("truncated box header at byte {at}"));
        }
        let size32 = u32::from_be_bytes(be4(buf, at));
        let kind = be4(buf, at + 4);
        let (size, header) = match size32 {
            0 => ((to - at) as u64, 8),
            1 => {
                if to - at < 16 {
                    return err(format!("truncated large box header at byte {at}"));
                }
                (u64::from_be_bytes(be8(buf, at + 8)), 16)
            }
            n => (n as u64, 8),
        };
        if size < header as u64 || size > (to - at) as u64 {
            return err(format!(
                "box `{}` at byte {at} claims {size} bytes, {} are left",
                String::from_utf8_lossy(&kind),
                to - at
            ));
        }
        let end = at + size as usize;
        out.push(BoxAt {
            kind,
            start: at,
            body: at + header,
            end,
        });
        at = end;
    }
    Ok(out)
}

fn be4(buf: &[u8], at: usize) -> [u8; 4] {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    b
}

fn be8(buf: &[u8], at: usize) -> [u8; 8] {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    b
}

/// The first child of `parent` of type `kind`.
pub fn child(buf: &[u8], parent: &BoxAt, kind: &[u8; 4]) -> Result<BoxAt, BmffError> {
    children(buf, parent.body, parent.end)?
        .into_iter()
        .find(|b| &b.kind == kind)
        .ok_or_else(|| {
            BmffError(format!(
                "no `{}` box inside `{}`",
                String::from_utf8_lossy(kind),
                String::from_utf8_lossy(&parent.kind)
            ))
        })
}

/// A fragmented MP4 of one track, as ffmpeg writes it with `frag_keyframe+empty_moov`.
#[derive(Debug, Clone)]
pub struct Fragmented {
    /// `ftyp` + `moov` bytes.
    pub init: Vec<u8>,
    /// Each `moof` + `mdat` pair (with any boxes between them), in order.
    pub fragments: Vec<Vec<u8>>,
    /// Track id (from `tkhd`).
    pub track_id: u32,
    /// Media timescale (from `mdhd`).
    pub timescale: u32,
    /// Duration of each fragment in timescale units (from the `tfdt` of the next fragment;
    /// the last one repeats the one before it).
    pub durations: Vec<u64>,
    /// RFC 6381 codec string, e.g. `avc1.42c01e`.
    pub codec: String,
}

/// Split a fragmented MP4 into init segment and fragments and read its track figures.
pub fn split(file: &[u8]) -> Result<Fragmented, BmffError> {
    let top = children(file, 0, file.len())?;
    let ftyp = top
        .iter()
        .find(|b| &b.kind == b"ftyp")
        .ok_or_else(|| BmffError("no `ftyp` box".into()))?;
    let moov = top
        .iter()
        .find(|b| &b.kind == b"moov")
        .ok_or_else(|| BmffError("no `moov` box".into()))?;
    if moov.end <= ftyp.start {
        return err("`moov` before `ftyp`");
    }
    let trak = child(file, moov, b"trak")?;
    let tkhd = child(file, &trak, b"tkhd")?;
    let track_id = if file[tkhd.body] == 1 {
        u32::from_be_bytes(be4(file, tkhd.body + 4 + 16))
    } else {
        u32::from_be_bytes(be4(file, tkhd.body + 4 + 8))
    };
    let mdia = child(file, &trak, b"mdia")?;
    let mdhd = child(file, &mdia, b"mdhd")?;
    let timescale = if file[mdhd.body] == 1 {
        u32::from_be_bytes(be4(file, mdhd.body + 4 + 16))
    } else {
        u32::from_be_bytes(be4(file, mdhd.body + 4 + 8))
    };
    if timescale == 0 {
        return err("`mdhd` timescale is 0");
    }
    let codec = codec_string(&file[moov.start..moov.end])?;
    let mut fragments = Vec::new();
    let mut starts = Vec::new();
    let mut current: Option<(usize, u64)> = None;
    for b in &top {
        match &b.kind {
            b"moof" => {
                if let Some((s, _)) = current {
                    return err(format!(
                        "`moof` at byte {} before the `mdat` of byte {s}",
                        b.start
                    ));
                }
                current = Some((b.start, decode_time(file, b)?));
            }
            b"mdat" => {
                let Some((s, t)) = current.take() else {
                    return err(format!("`mdat` at byte {} without a `moof`", b.start));
                };
                fragments.push(file[s..b.end].to_vec());
                starts.push(t);
            }
            _ => {}
        }
    }
    if fragments.is_empty() {
        return err("no fragments (`moof` + `mdat`): not a fragmented MP4");
    }
    let mut durations: Vec<u64> = starts
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    let last = durations.last().copied().unwrap_or(timescale as u64);
    durations.push(last);
    let mut init = file[ftyp.start..ftyp.end].to_vec();
    init.extend_from_slice(&file[moov.start..moov.end]);
    Ok(Fragmented {
        init,
        fragments,
        track_id,
        timescale,
        durations,
        codec,
    })
}

/// The `tfdt` decode time of a `moof`.
fn decode_time(buf: &[u8], moof: &BoxAt) -> Result<u64, BmffError> {
    let traf = child(buf, moof, b"traf")?;
    let tfdt = child(buf, &traf, b"tfdt")?;
    Ok(if buf[tfdt.body] == 1 {
        u64::from_be_bytes(be8(buf, tfdt.body + 4))
    } else {
        u32::from_be_bytes(be4(buf, tfdt.body + 4)) as u64
    })
}

/// RFC 6381 codec string of the track's sample entry (`avc1.PPCCLL` from `avcC`; other
/// entries by their four-character code).
fn codec_string(moov: &[u8]) -> Result<String, BmffError> {
    if let Some(i) = find(moov, b"avcC") {
        let c = i + 4;
        if moov.len() < c + 4 {
            return err("truncated `avcC` box");
        }
        let kind = if find(moov, b"avc3").is_some() {
            "avc3"
        } else {
            "avc1"
        };
        return Ok(format!(
            "{kind}.{:02x}{:02x}{:02x}",
            moov[c + 1],
            moov[c + 2],
            moov[c + 3]
        ));
    }
    for entry in ["mp4a", "vp09", "av01", "hvc1", "hev1", "Opus"] {
        if find(moov, entry.as_bytes()).is_some() {
            return Ok(if entry == "mp4a" {
                "mp4a.40.2".into()
            } else {
                entry.to_string()
            });
        }
    }
    err("no known sample entry (avc1, mp4a, vp09, av01, hvc1) in `moov`")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Rewrite a fragment's `mfhd` sequence number and `tfdt` decode time in place, so a
/// fragment taken from the pool can sit at any position of a title.
pub fn renumber(fragment: &mut [u8], sequence: u32, decode_time: u64) -> Result<(), BmffError> {
    let top = children(fragment, 0, fragment.len())?;
    let moof = top
        .iter()
        .find(|b| &b.kind == b"moof")
        .ok_or_else(|| BmffError("fragment without `moof`".into()))?;
    let mfhd = child(fragment, moof, b"mfhd")?;
    if mfhd.end - mfhd.body < 8 {
        return err("truncated `mfhd`");
    }
    fragment[mfhd.body + 4..mfhd.body + 8].copy_from_slice(&sequence.to_be_bytes());
    let traf = child(fragment, moof, b"traf")?;
    let tfdt = child(fragment, &traf, b"tfdt")?;
    if fragment[tfdt.body] == 1 {
        if tfdt.end - tfdt.body < 12 {
            return err("truncated `tfdt`");
        }
        fragment[tfdt.body + 4..tfdt.body + 12].copy_from_slice(&decode_time.to_be_bytes());
    } else {
        let t = u32::try_from(decode_time)
            .map_err(|_| BmffError("decode time does not fit a version-0 `tfdt`".into()))?;
        fragment[tfdt.body + 4..tfdt.body + 8].copy_from_slice(&t.to_be_bytes());
    }
    Ok(())
}

/// A `free` box carrying `text` (players skip it; it makes each title's bytes its own).
pub fn free_box(text: &str) -> Vec<u8> {
    make_box(b"free", text.as_bytes())
}

/// A box of type `kind` around `body` (32-bit size: bodies under 4 GiB).
pub fn make_box(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + body.len());
    b.extend_from_slice(&((8 + body.len()) as u32).to_be_bytes());
    b.extend_from_slice(kind);
    b.extend_from_slice(body);
    b
}

/// A version-1 `sidx` box indexing `sizes`/`durations` (one entry per fragment, each
/// starting with a SAP type 1), with the first fragment right after the box.
pub fn sidx(
    track_id: u32,
    timescale: u32,
    sizes: &[u64],
    durations: &[u64],
) -> Result<Vec<u8>, BmffError> {
    if sizes.len() != durations.len() || sizes.is_empty() {
        return err("sidx: one size and one duration per fragment are needed");
    }
    let count = u16::try_from(sizes.len())
        .map_err(|_| BmffError("sidx: more than 65,535 fragments".into()))?;
    let len = 8 + 4 + 4 + 4 + 8 + 8 + 2 + 2 + 12 * sizes.len();
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&(len as u32).to_be_bytes());
    b.extend_from_slice(b"sidx");
    b.extend_from_slice(&[1, 0, 0, 0]);
    b.extend_from_slice(&track_id.to_be_bytes());
    b.extend_from_slice(&timescale.to_be_bytes());
    b.extend_from_slice(&0u64.to_be_bytes()); // earliest presentation time
    b.extend_from_slice(&0u64.to_be_bytes()); // first offset: right after this box
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    for (&size, &d) in sizes.iter().zip(durations) {
        let size = u32::try_from(size)
            .ok()
            .filter(|s| *s < 1 << 31)
            .ok_or_else(|| BmffError("sidx: a fragment of 2 GiB or more".into()))?;
        let d = u32::try_from(d)
            .map_err(|_| BmffError("sidx: a fragment duration over 2^32 ticks".into()))?;
        b.extend_from_slice(&size.to_be_bytes());
        b.extend_from_slice(&d.to_be_bytes());
        b.extend_from_slice(&0x9000_0000u32.to_be_bytes()); // starts_with_SAP, SAP type 1
    }
    Ok(b)
}

/// What a `sidx` box says: the timescale and each subsegment's absolute byte range and
/// duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    pub timescale: u32,
    /// (offset, length, duration in timescale units) per subsegment.
    pub references: Vec<(u64, u64, u64)>,
}

/// Read the `sidx` box at the start of `bytes`, which lie at `at` in their file (so the
/// references come out as absolute offsets). Hierarchical indexes (references to other
/// `sidx` boxes) are refused.
pub fn read_sidx(bytes: &[u8], at: u64) -> Result<SegmentIndex, BmffError> {
    let top = children(bytes, 0, bytes.len())?;
    let b = top
        .iter()
        .find(|b| &b.kind == b"sidx")
        .ok_or_else(|| BmffError("no `sidx` box in the index range".into()))?;
    let body = &bytes[b.body..b.end];
    let need = |n: usize| {
        if body.len() < n {
            err("truncated `sidx`")
        } else {
            Ok(())
        }
    };
    need(12)?;
    let version = body[0];
    let timescale = u32::from_be_bytes(be4(body, 8));
    let (first_offset, mut p) = if version == 0 {
        need(20)?;
        (u32::from_be_bytes(be4(body, 16)) as u64, 20)
    } else {
        need(28)?;
        (u64::from_be_bytes(be8(body, 20)), 28)
    };
    need(p + 4)?;
    let count = u16::from_be_bytes([body[p + 2], body[p + 3]]) as usize;
    p += 4;
    need(p + 12 * count)?;
    let mut offset = at + b.end as u64 + first_offset;
    let mut references = Vec::with_capacity(count);
    for i in 0..count {
        let word = u32::from_be_bytes(be4(body, p + 12 * i));
        if word & 0x8000_0000 != 0 {
            return err("hierarchical `sidx` (a reference to another index) is not supported");
        }
        let len = (word & 0x7fff_ffff) as u64;
        let d = u32::from_be_bytes(be4(body, p + 12 * i + 4)) as u64;
        references.push((offset, len, d));
        offset += len;
    }
    if timescale == 0 {
        return err("`sidx` timescale is 0");
    }
    Ok(SegmentIndex {
        timescale,
        references,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::make_box as boxed;

    /// A hand-built fragmented file: ftyp, moov(trak(tkhd, mdia(mdhd, avcC bytes))), two
    /// fragments at decode times 0 and 3000.
    fn sample() -> Vec<u8> {
        let mut tkhd = vec![0u8; 4 + 8];
        tkhd.extend_from_slice(&7u32.to_be_bytes());
        tkhd.extend_from_slice(&[0; 60]);
        let mut mdhd = vec![0u8; 4 + 8];
        mdhd.extend_from_slice(&1000u32.to_be_bytes());
        mdhd.extend_from_slice(&[0; 8]);
        let avcc = boxed(b"avcC", &[1, 0x64, 0x00, 0x1f, 0xff]);
        let mdia = boxed(
            b"mdia",
            &[boxed(b"mdhd", &mdhd), boxed(b"avc1", &avcc)].concat(),
        );
        let trak = boxed(b"trak", &[boxed(b"tkhd", &tkhd), mdia].concat());
        let moov = boxed(b"moov", &trak);
        let frag = |seq: u32, t: u64| {
            let mfhd = boxed(b"mfhd", &[&[0u8; 4][..], &seq.to_be_bytes()].concat());
            let tfdt = boxed(b"tfdt", &[&[1u8, 0, 0, 0][..], &t.to_be_bytes()].concat());
            let traf = boxed(b"traf", &tfdt);
            [
                boxed(b"moof", &[mfhd, traf].concat()),
                boxed(b"mdat", b"frames"),
            ]
            .concat()
        };
        [
            boxed(b"ftyp", b"isom\0\0\0\0"),
            moov,
            frag(1, 0),
            frag(2, 3000),
        ]
        .concat()
    }

    #[test]
    fn splits_and_reads_track_figures() {
        let f = split(&sample()).unwrap();
        assert_eq!(f.track_id, 7);
        assert_eq!(f.timescale, 1000);
        assert_eq!(f.codec, "avc1.64001f");
        assert_eq!(f.fragments.len(), 2);
        assert_eq!(f.durations, vec![3000, 3000]);
        assert!(f.init.starts_with(&[0, 0, 0, 16, b'f', b't', b'y', b'p']));
    }

    #[test]
    fn renumbering_moves_a_fragment() {
        let f = split(&sample()).unwrap();
        let mut frag = f.fragments[0].clone();
        renumber(&mut frag, 42, 123_456).unwrap();
        let moof = children(&frag, 0, frag.len()).unwrap()[0];
        assert_eq!(decode_time(&frag, &moof).unwrap(), 123_456);
        let mfhd = child(&frag, &moof, b"mfhd").unwrap();
        assert_eq!(&frag[mfhd.body + 4..mfhd.body + 8], &42u32.to_be_bytes());
        assert_eq!(frag.len(), f.fragments[0].len());
    }

    #[test]
    fn damaged_input_is_an_error_not_a_panic() {
        let good = sample();
        for cut in [3, 9, 20, 40, good.len() - 3] {
            assert!(split(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = good.clone();
        lying[2] = 0xff; // ftyp claims more than the file
        assert!(split(&lying).unwrap_err().0.contains("ftyp"));
        assert!(split(b"").is_err());
    }

    #[test]
    fn sidx_layout() {
        let b = sidx(1, 12288, &[100, 200], &[49152, 49152]).unwrap();
        assert_eq!(b.len(), 40 + 24);
        assert_eq!(u32::from_be_bytes(be4(&b, 0)) as usize, b.len());
        assert_eq!(&b[4..8], b"sidx");
        assert_eq!(u16::from_be_bytes([b[38], b[39]]), 2);
        assert_eq!(u32::from_be_bytes(be4(&b, 40)), 100);
        assert_eq!(u32::from_be_bytes(be4(&b, 52)), 200);
        assert!(sidx(1, 1, &[1], &[]).is_err());
        let idx = read_sidx(&b, 1000).unwrap();
        assert_eq!(idx.timescale, 12288);
        assert_eq!(
            idx.references,
            vec![(1000 + 64, 100, 49152), (1000 + 64 + 100, 200, 49152)]
        );
        assert!(read_sidx(&b[..50], 0).is_err());
        assert!(read_sidx(&free_box("x"), 0).is_err());
        assert_eq!(&free_box("t1")[4..], b"freet1");
    }
}

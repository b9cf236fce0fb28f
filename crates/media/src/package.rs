//! Composing a title from the pools and writing it in one of the packagings players use:
//! DASH with `SegmentTemplate` (a file per segment) or `SegmentBase` (one file per rendition
//! indexed by a `sidx`, fetched by byte ranges — the pattern of thesis ch. 5), HLS with
//! segment files or `#EXT-X-BYTERANGE`, and CMAF (one set of segment files behind both a DASH
//! and an HLS manifest). Fragments are copied from the pool and renumbered, and the init
//! segment carries a `free` box naming the title, so every title's bytes are its own.

use crate::bmff::{self, Fragmented};
use crate::error::MediaError;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use strum::{Display, EnumString, IntoStaticStr, VariantNames};

/// A packaging (`--media`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(Display, EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown_format)]
pub enum MediaFormat {
    /// DASH, `SegmentTemplate`, segment files.
    Dash,
    /// DASH on-demand profile, `SegmentBase` + `sidx`, one file per rendition (byte ranges).
    DashSingle,
    /// HLS with fMP4 segment files.
    Hls,
    /// HLS, one fMP4 file per rendition addressed with `#EXT-X-BYTERANGE`.
    HlsByterange,
    /// CMAF segment files with both `manifest.mpd` and `master.m3u8`.
    Cmaf,
}

impl MediaFormat {
    pub const ALL: [MediaFormat; 5] = [
        MediaFormat::Dash,
        MediaFormat::DashSingle,
        MediaFormat::Hls,
        MediaFormat::HlsByterange,
        MediaFormat::Cmaf,
    ];

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// One file per rendition (byte-range addressing) rather than one per segment.
    pub fn single_file(self) -> bool {
        matches!(self, MediaFormat::DashSingle | MediaFormat::HlsByterange)
    }

    pub fn has_dash(self) -> bool {
        matches!(
            self,
            MediaFormat::Dash | MediaFormat::DashSingle | MediaFormat::Cmaf
        )
    }

    pub fn has_hls(self) -> bool {
        matches!(
            self,
            MediaFormat::Hls | MediaFormat::HlsByterange | MediaFormat::Cmaf
        )
    }

    /// The manifest a player opens first, relative to the title directory.
    pub fn entry(self) -> &'static str {
        if self.has_dash() {
            "manifest.mpd"
        } else {
            "master.m3u8"
        }
    }
}

fn unknown_format(s: &str) -> String {
    vodkit_units::unknown_choice("media packaging", s, MediaFormat::VARIANTS)
}

/// One rung of the ladder with its pool.
#[derive(Debug, Clone)]
pub struct Rung {
    pub bitrate_kbps: u32,
    pub width: u32,
    pub height: u32,
    pub pool: Fragmented,
}

impl Rung {
    /// Representation id and directory name.
    pub fn id(&self) -> String {
        format!("v{}", self.bitrate_kbps)
    }

    /// Peak bit rate over the pool's segments (bit/s): what `@bandwidth` and `BANDWIDTH`
    /// must promise so a client at that rate never waits for a segment.
    fn peak_bps(&self, segment_s: f64) -> u64 {
        let max = self.pool.fragments.iter().map(Vec::len).max().unwrap_or(0);
        (max as f64 * 8.0 / segment_s).ceil() as u64
    }

    fn average_bps(&self, segment_s: f64) -> u64 {
        let n = self.pool.fragments.len().max(1);
        let total: usize = self.pool.fragments.iter().map(Vec::len).sum();
        (total as f64 * 8.0 / (n as f64 * segment_s)).ceil() as u64
    }
}

/// One file of a title, path relative to the served root.
#[derive(Debug, Clone)]
pub struct OutFile {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// A piece a player fetches (a segment file, or a byte range of a rendition file), with its
/// checksum: what `--verify` checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// URL path without the leading slash.
    pub path: String,
    pub offset: u64,
    pub len: u64,
    /// CRC-32 (IEEE) of the bytes.
    pub crc32: u32,
}

/// A title ready to write: its files and the pieces to check.
#[derive(Debug, Clone)]
pub struct TitleOut {
    pub files: Vec<OutFile>,
    pub pieces: Vec<Piece>,
}

/// Segments a title of `duration_s` needs (at least one).
pub fn segment_count(duration_s: f64, segment_s: f64) -> u32 {
    ((duration_s / segment_s).ceil() as u32).max(1)
}

/// The directory of title `id`, relative to the root.
pub fn title_dir(id: u32) -> String {
    format!("t{id}")
}

/// Compose title `id` of `duration_s` seconds from `ladder` in `format`.
pub fn title(
    id: u32,
    duration_s: f64,
    ladder: &[Rung],
    format: MediaFormat,
    segment_s: f64,
) -> Result<TitleOut, MediaError> {
    if ladder.is_empty() {
        return Err(MediaError::Input(format!(
            "title {id}: no video renditions"
        )));
    }
    let dir = title_dir(id);
    let n = segment_count(duration_s, segment_s);
    let mut out = TitleOut {
        files: Vec::new(),
        pieces: Vec::new(),
    };
    let mut layouts = Vec::new();
    for rung in ladder {
        let pool = &rung.pool;
        let step = pool.durations.first().copied().unwrap_or(0);
        let mut init = pool.init.clone();
        init.extend_from_slice(&bmff::free_box(&format!("vodkit title {id} {}", rung.id())));
        let mut frags = Vec::with_capacity(n as usize);
        for i in 0..n {
            let mut f = pool.fragments[i as usize % pool.fragments.len()].clone();
            bmff::renumber(&mut f, i + 1, i as u64 * step)
                .map_err(|e| MediaError::Runtime(format!("title {id}, {}: {e}", rung.id())))?;
            frags.push(f);
        }
        let rid = rung.id();
        if format.single_file() {
            let sizes: Vec<u64> = frags.iter().map(|f| f.len() as u64).collect();
            let durations = vec![step; frags.len()];
            let sidx = bmff::sidx(pool.track_id, pool.timescale, &sizes, &durations)
                .map_err(|e| MediaError::Runtime(format!("title {id}: {e}")))?;
            let path = format!("{dir}/{rid}.mp4");
            let mut file = init.clone();
            let index = (file.len() as u64, (file.len() + sidx.len()) as u64);
            file.extend_from_slice(&sidx);
            let mut ranges = Vec::with_capacity(frags.len());
            for f in &frags {
                ranges.push((file.len() as u64, f.len() as u64));
                file.extend_from_slice(f);
            }
            out.pieces.push(piece(&path, 0, &init));
            for &(off, len) in &ranges {
                out.pieces
                    .push(piece(&path, off, &file[off as usize..(off + len) as usize]));
            }
            layouts.push(Layout::Single {
                file: format!("{rid}.mp4"),
                init_len: init.len() as u64,
                index,
                ranges,
            });
            out.files.push(OutFile { path, bytes: file });
        } else {
            let init_path = format!("{dir}/{rid}/init.mp4");
            out.pieces.push(piece(&init_path, 0, &init));
            out.files.push(OutFile {
                path: init_path,
                bytes: init,
            });
            for (i, f) in frags.into_iter().enumerate() {
                let path = format!("{dir}/{rid}/seg-{}.m4s", i + 1);
                out.pieces.push(piece(&path, 0, &f));
                out.files.push(OutFile { path, bytes: f });
            }
            layouts.push(Layout::Segments);
        }
    }
    let ctx = Ctx {
        id,
        ladder,
        layouts: &layouts,
        n,
        segment_s,
    };
    if format.has_dash() {
        out.files.push(OutFile {
            path: format!("{dir}/manifest.mpd"),
            bytes: mpd(&ctx, format).into_bytes(),
        });
    }
    if format.has_hls() {
        out.files.push(OutFile {
            path: format!("{dir}/master.m3u8"),
            bytes: hls_master(&ctx, format).into_bytes(),
        });
        for (rung, layout) in ladder.iter().zip(&layouts) {
            out.files.push(OutFile {
                path: format!("{dir}/{}.m3u8", rung.id()),
                bytes: hls_media(&ctx, rung, layout).into_bytes(),
            });
        }
    }
    Ok(out)
}

fn piece(path: &str, offset: u64, bytes: &[u8]) -> Piece {
    Piece {
        path: path.to_string(),
        offset,
        len: bytes.len() as u64,
        crc32: crc32fast::hash(bytes),
    }
}

/// Where a rendition's media lies.
enum Layout {
    /// `v<kbps>/init.mp4` and `v<kbps>/seg-<n>.m4s`.
    Segments,
    /// `v<kbps>.mp4`: init, then the `sidx` (`index`, half-open), then the fragments.
    Single {
        file: String,
        init_len: u64,
        index: (u64, u64),
        ranges: Vec<(u64, u64)>,
    },
}

struct Ctx<'a> {
    id: u32,
    ladder: &'a [Rung],
    layouts: &'a [Layout],
    n: u32,
    segment_s: f64,
}

impl Ctx<'_> {
    fn duration_s(&self) -> f64 {
        self.n as f64 * self.segment_s
    }
}

fn mpd(c: &Ctx<'_>, format: MediaFormat) -> String {
    let single = format.single_file();
    let profile = if single {
        "urn:mpeg:dash:profile:isoff-on-demand:2011"
    } else {
        "urn:mpeg:dash:profile:isoff-live:2011"
    };
    let mut s = String::with_capacity(2048);
    let _ = write!(
        s,
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
         <MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" profiles=\"{profile}\" type=\"static\" \
         mediaPresentationDuration=\"PT{:.3}S\" minBufferTime=\"PT{:.3}S\">\n\
         \x20 <ProgramInformation><Title>vodkit title {}</Title></ProgramInformation>\n\
         \x20 <Period id=\"0\" start=\"PT0S\">\n\
         \x20   <AdaptationSet id=\"0\" contentType=\"video\" mimeType=\"video/mp4\" segmentAlignment=\"true\" \
         startWithSAP=\"1\" maxWidth=\"{}\" maxHeight=\"{}\" frameRate=\"{}\">\n",
        c.duration_s(),
        c.segment_s,
        c.id,
        c.ladder.iter().map(|r| r.width).max().unwrap_or(0),
        c.ladder.iter().map(|r| r.height).max().unwrap_or(0),
        crate::pool::FPS,
    );
    for (rung, layout) in c.ladder.iter().zip(c.layouts) {
        let _ = write!(
            s,
            "      <Representation id=\"{}\" bandwidth=\"{}\" codecs=\"{}\" width=\"{}\" height=\"{}\" sar=\"1:1\"",
            rung.id(),
            rung.peak_bps(c.segment_s),
            rung.pool.codec,
            rung.width,
            rung.height
        );
        match layout {
            Layout::Single {
                file,
                init_len,
                index,
                ..
            } => {
                let _ = write!(
                    s,
                    ">\n        <BaseURL>{file}</BaseURL>\n        \
                     <SegmentBase timescale=\"{}\" indexRange=\"{}-{}\" indexRangeExact=\"true\">\
                     <Initialization range=\"0-{}\"/></SegmentBase>\n      </Representation>\n",
                    rung.pool.timescale,
                    index.0,
                    index.1 - 1,
                    init_len - 1
                );
            }
            Layout::Segments => {
                // An explicit timeline rather than @duration: the segment count is stated, not
                // derived (ffmpeg 5.1's demuxer asks for one segment past the end otherwise).
                let _ = write!(
                    s,
                    ">\n        <SegmentTemplate timescale=\"{}\" startNumber=\"1\" \
                     initialization=\"$RepresentationID$/init.mp4\" media=\"$RepresentationID$/seg-$Number$.m4s\">\n          \
                     <SegmentTimeline><S t=\"0\" d=\"{}\" r=\"{}\"/></SegmentTimeline>\n        \
                     </SegmentTemplate>\n      </Representation>\n",
                    rung.pool.timescale,
                    rung.pool.durations.first().copied().unwrap_or(0),
                    c.n.saturating_sub(1)
                );
            }
        }
    }
    s.push_str("    </AdaptationSet>\n  </Period>\n</MPD>\n");
    s
}

fn hls_master(c: &Ctx<'_>, _format: MediaFormat) -> String {
    let mut s = String::from("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    for rung in c.ladder {
        let _ = write!(
            s,
            "#EXT-X-STREAM-INF:BANDWIDTH={},AVERAGE-BANDWIDTH={},RESOLUTION={}x{},CODECS=\"{}\",FRAME-RATE={:.3}\n{}.m3u8\n",
            rung.peak_bps(c.segment_s),
            rung.average_bps(c.segment_s),
            rung.width,
            rung.height,
            rung.pool.codec,
            crate::pool::FPS as f64,
            rung.id()
        );
    }
    s
}

fn hls_media(c: &Ctx<'_>, rung: &Rung, layout: &Layout) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{}\n#EXT-X-MEDIA-SEQUENCE:1\n\
         #EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-INDEPENDENT-SEGMENTS\n",
        c.segment_s.ceil() as u64
    );
    let rid = rung.id();
    match layout {
        Layout::Segments => {
            let _ = writeln!(s, "#EXT-X-MAP:URI=\"{rid}/init.mp4\"");
            for i in 1..=c.n {
                let _ = write!(s, "#EXTINF:{:.3},\n{rid}/seg-{i}.m4s\n", c.segment_s);
            }
        }
        Layout::Single {
            file,
            init_len,
            ranges,
            ..
        } => {
            let _ = writeln!(s, "#EXT-X-MAP:URI=\"{file}\",BYTERANGE=\"{init_len}@0\"");
            for &(off, len) in ranges {
                let _ = write!(
                    s,
                    "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{len}@{off}\n{file}\n",
                    c.segment_s
                );
            }
        }
    }
    s.push_str("#EXT-X-ENDLIST\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip_and_refuse_unknown_names() {
        for f in MediaFormat::ALL {
            assert_eq!(f.name().parse::<MediaFormat>().unwrap(), f);
        }
        assert!("mp4"
            .parse::<MediaFormat>()
            .unwrap_err()
            .contains("dash-single"));
        assert_eq!(MediaFormat::Cmaf.entry(), "manifest.mpd");
        assert_eq!(MediaFormat::Hls.entry(), "master.m3u8");
        assert_eq!(segment_count(39.9, 4.0), 10);
        assert_eq!(segment_count(40.0, 4.0), 10);
        assert_eq!(segment_count(0.0, 4.0), 1);
    }
}

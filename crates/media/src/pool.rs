//! Encoding once, reusing everywhere: each distinct bit rate of a catalog is encoded a single
//! time by ffmpeg into a *pool* of equal-length fragments (a test pattern whose counter
//! advances with every frame), and titles are composed from the pool (see [`crate::package`]).
//! A 1,000-title set therefore costs one short encode per rung of the ladder, not one per
//! title. Pools are cached under the media set's own directory and reused by later runs.
//! With a [`Source`] (`--source FILE`, a user's mezzanine) the pool's pictures come from that
//! file instead: its first `segment × fragments` seconds (looped when it is shorter), scaled
//! and padded to the rung's picture size at [`FPS`].

use crate::bmff::{self, Fragmented};
use crate::error::MediaError;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Frames per second of every encode.
pub const FPS: u32 = 24;

/// A user's video file the pools are encoded from instead of the test pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub path: PathBuf,
    /// Names the file's identity in cache names and the media set's marker: the CRC-32 of its
    /// canonical path, size and modification time (a changed file is encoded again).
    pub tag: String,
}

impl Source {
    /// Check that `path` is a readable regular file and name it.
    pub fn open(path: &Path) -> Result<Source, MediaError> {
        let bad = |why: String| MediaError::Input(format!("--source {}: {why}", path.display()));
        let canonical = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
        let meta = std::fs::metadata(&canonical).map_err(|e| bad(e.to_string()))?;
        if !meta.is_file() {
            return Err(bad("expected a video file".into()));
        }
        std::fs::File::open(&canonical).map_err(|e| bad(e.to_string()))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let mut h = crc32fast::Hasher::new();
        h.update(canonical.as_os_str().as_encoded_bytes());
        h.update(&meta.len().to_le_bytes());
        h.update(&mtime.to_le_bytes());
        Ok(Source {
            path: canonical,
            tag: format!("{:08x}", h.finalize()),
        })
    }

    /// How the marker names it: file name and tag.
    pub fn label(&self) -> String {
        let name = self
            .path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        format!("{name} ({})", self.tag)
    }
}

/// What one pool is encoded from.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    /// Target video bit rate (kbit/s).
    pub bitrate_kbps: u32,
    /// Segment (fragment) duration in seconds; a whole number of frames at [`FPS`].
    pub segment_s: f64,
    /// Distinct fragments in the pool; titles cycle through them.
    pub fragments: u32,
    /// Encode from this file; `None`: the test pattern.
    pub source: Option<Source>,
}

impl PoolSpec {
    /// Frames per segment (the GOP: every segment starts with a key frame).
    pub fn gop(&self) -> u32 {
        (self.segment_s * FPS as f64).round().max(1.0) as u32
    }

    /// Picture size for the bit rate, the usual ladder steps.
    pub fn resolution(&self) -> (u32, u32) {
        match self.bitrate_kbps {
            0..=400 => (426, 240),
            401..=1000 => (640, 360),
            1001..=2000 => (854, 480),
            2001..=4500 => (1280, 720),
            _ => (1920, 1080),
        }
    }

    fn cache_name(&self) -> String {
        let (w, h) = self.resolution();
        let from = self
            .source
            .as_ref()
            .map_or_else(String::new, |s| format!("src{}-", s.tag));
        format!(
            "pool-{from}{}k-{}x{}-{}f-gop{}-{}fps-v1.mp4",
            self.bitrate_kbps,
            w,
            h,
            self.fragments,
            self.gop(),
            FPS
        )
    }
}

/// Check the segment duration: positive, at most 30 s, a whole number of frames.
pub fn check_segment(segment_s: f64) -> Result<(), MediaError> {
    let frames = segment_s * FPS as f64;
    if !(segment_s > 0.0 && segment_s <= 30.0) || (frames - frames.round()).abs() > 1e-6 {
        return Err(MediaError::Input(format!(
            "--segment {segment_s} s: expected a duration up to 30 s holding a whole number of frames at {FPS} fps (e.g. 2s, 4s, 6s)"
        )));
    }
    Ok(())
}

/// The pool for `spec`, from `cache_dir` or encoded now (ffmpeg, libx264).
pub fn pool(spec: &PoolSpec, cache_dir: &Path) -> Result<Fragmented, MediaError> {
    let path = cache_dir.join(spec.cache_name());
    if !path.exists() {
        encode(spec, &path)?;
    }
    let bytes = std::fs::read(&path)
        .map_err(|e| MediaError::Runtime(format!("{}: {e}", path.display())))?;
    let pool =
        bmff::split(&bytes).map_err(|e| MediaError::Runtime(format!("{}: {e}", path.display())))?;
    let want = (spec.segment_s * pool.timescale as f64).round() as u64;
    let n = pool.fragments.len();
    if n != spec.fragments as usize || pool.durations.iter().any(|&d| d != want) {
        return Err(MediaError::Runtime(format!(
            "{}: ffmpeg made {n} fragments of {:?} ticks, expected {} of {want} (timescale {}); delete the file to encode it again",
            path.display(),
            pool.durations,
            spec.fragments,
            pool.timescale
        )));
    }
    Ok(pool)
}

fn encode(spec: &PoolSpec, out: &Path) -> Result<(), MediaError> {
    let (w, h) = spec.resolution();
    let seconds = spec.segment_s * spec.fragments as f64;
    let tmp: PathBuf = out.with_extension("partial.mp4");
    let kbps = spec.bitrate_kbps;
    let mut args: Vec<String> = ["-hide_banner", "-loglevel", "error", "-nostdin", "-y"]
        .map(String::from)
        .to_vec();
    match &spec.source {
        None => args.extend([
            "-f".into(),
            "lavfi".into(),
            "-i".into(),
            // testsrc draws colour bars, a moving gradient and a counter that changes every frame.
            format!("testsrc=size={w}x{h}:rate={FPS}:duration={seconds}:decimals=2"),
        ]),
        // The file's first video stream, looped when shorter than the pool, fitted into the
        // rung's picture (aspect kept, black bars), at the pool's frame rate; exactly the
        // pool's frames.
        Some(src) => args.extend([
            "-stream_loop".into(),
            "-1".into(),
            "-i".into(),
            src.path.display().to_string(),
            "-map".into(),
            "0:v:0".into(),
            "-an".into(),
            "-vf".into(),
            format!(
                "scale={w}:{h}:force_original_aspect_ratio=decrease,pad={w}:{h}:(ow-iw)/2:(oh-ih)/2,setsar=1,fps={FPS}"
            ),
            "-frames:v".into(),
            (spec.gop() * spec.fragments).to_string(),
        ]),
    }
    args.extend([
        "-c:v".into(),
        "libx264".into(),
        "-preset".into(),
        "veryfast".into(),
        "-pix_fmt".into(),
        "yuv420p".into(),
        "-bf".into(),
        "0".into(),
        "-g".into(),
        spec.gop().to_string(),
        "-keyint_min".into(),
        spec.gop().to_string(),
        "-sc_threshold".into(),
        "0".into(),
        "-b:v".into(),
        format!("{kbps}k"),
        "-maxrate".into(),
        format!("{}k", kbps * 11 / 10),
        "-bufsize".into(),
        format!("{}k", kbps * 2),
        "-movflags".into(),
        "+frag_keyframe+empty_moov+default_base_moof".into(),
        "-f".into(),
        "mp4".into(),
        tmp.display().to_string(),
    ]);
    let output = ffmpeg(&args)?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp);
        let err = String::from_utf8_lossy(&output.stderr);
        let from = spec
            .source
            .as_ref()
            .map_or_else(String::new, |s| format!(" from {}", s.path.display()));
        return Err(MediaError::Runtime(format!(
            "ffmpeg failed encoding the {kbps} kbit/s pool{from}: {}",
            err.lines().last().unwrap_or("no message")
        )));
    }
    std::fs::rename(&tmp, out).map_err(|e| MediaError::Runtime(format!("{}: {e}", out.display())))
}

/// ffmpeg run with `args`, its standard input closed; what it wrote and how it ended.
fn ffmpeg<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Result<std::process::Output, MediaError> {
    Command::new("ffmpeg")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            MediaError::Runtime(if e.kind() == std::io::ErrorKind::NotFound {
                "ffmpeg is not installed (Debian: apt-get install ffmpeg); real media file sets need it".into()
            } else {
                format!("running ffmpeg: {e}")
            })
        })
}

/// Decode every frame of the first video stream of `input` (a manifest, a media file or a
/// URL) with ffmpeg, as a player would play it to the end. A clean decode prints nothing:
/// the error carries any message ffmpeg printed, or how it failed.
pub fn decode(input: impl AsRef<std::ffi::OsStr>) -> Result<(), MediaError> {
    let input = input.as_ref();
    let mut args: Vec<&std::ffi::OsStr> = ["-hide_banner", "-loglevel", "error", "-nostdin", "-i"]
        .iter()
        .map(std::ffi::OsStr::new)
        .collect();
    args.push(input);
    args.extend(
        ["-map", "0:v:0", "-f", "null", "-"]
            .iter()
            .map(std::ffi::OsStr::new),
    );
    let out = ffmpeg(&args)?;
    if out.status.success() && out.stderr.is_empty() {
        return Ok(());
    }
    Err(MediaError::Runtime(format!(
        "ffmpeg could not play {}: {} {}",
        input.to_string_lossy(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_durations_must_hold_whole_frames() {
        assert!(check_segment(4.0).is_ok());
        assert!(check_segment(2.5).is_ok());
        for bad in [0.0, -1.0, 31.0, 0.01, f64::NAN] {
            assert!(check_segment(bad).is_err(), "{bad}");
        }
        let s = PoolSpec {
            bitrate_kbps: 1676,
            segment_s: 4.0,
            fragments: 10,
            source: None,
        };
        assert_eq!(s.gop(), 96);
        assert_eq!(s.resolution(), (854, 480));
        assert!(s.cache_name().contains("1676k"));
    }
}

//! Real media file sets: a workload's titles encoded (ffmpeg, H.264) into its bit-rate ladder
//! and packaged the ways players fetch video — DASH (`SegmentTemplate` or `SegmentBase`),
//! HLS (segments or byte ranges) and CMAF — with valid manifests and a checksum sidecar per
//! title so a load generator can check every piece it receives.
//!
//! - [`pool`]: one ffmpeg encode per rung of the ladder, cached;
//! - [`package`]: titles composed from the pools, and their manifests;
//! - [`bmff`]: the few MP4 box operations composing needs;
//! - [`create`] / [`verify`]: the file set on disk (resumable, refuses foreign directories).

pub mod bmff;
mod error;
pub mod package;
pub mod pool;

pub use error::MediaError;
use indicatif::ProgressBar;
use package::{MediaFormat, Piece, Rung};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vodkit_workload::model::{Catalog, Media};

/// The directory inside a media set's root holding its marker and encoded pools.
pub const STATE_DIR: &str = ".vodkit-media";
/// The marker file (inside [`STATE_DIR`]).
pub const MARKER: &str = "media.json";
/// Each title's checksum sidecar, written last (its presence means the title is complete).
pub const SIDECAR: &str = "pieces.json";

/// How to build a media set.
#[derive(Debug, Clone)]
pub struct MediaOptions {
    pub format: MediaFormat,
    /// Segment duration in seconds.
    pub segment_s: f64,
    /// Distinct fragments encoded per rung.
    pub pool_fragments: u32,
    /// Encode the pools from this video file (`--source`) instead of the test pattern.
    pub source: Option<PathBuf>,
    pub progress: bool,
}

impl MediaOptions {
    pub fn new(format: MediaFormat) -> MediaOptions {
        MediaOptions {
            format,
            segment_s: 4.0,
            pool_fragments: 8,
            source: None,
            progress: false,
        }
    }
}

/// What identifies a media set: a second run with other settings is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub format: MediaFormat,
    pub segment_s: f64,
    pub pool_fragments: u32,
    pub catalog_digest: String,
    pub titles: usize,
    pub ladder_kbps: Vec<u32>,
    /// The `--source` file the pictures come from (name and identity tag); absent: the
    /// test pattern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A title's checksum sidecar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    pub title: u32,
    pub format: MediaFormat,
    /// The manifest a player opens, relative to the root.
    pub entry: String,
    pub duration_s: f64,
    pub pieces: Vec<Piece>,
}

/// What [`create`] did.
#[derive(Debug, Clone, Serialize)]
pub struct MediaReport {
    pub titles: usize,
    pub written_titles: usize,
    pub skipped_titles: usize,
    pub files: usize,
    pub bytes_written: u64,
    pub encode_seconds: f64,
    pub seconds: f64,
    pub ladder_kbps: Vec<u32>,
}

/// The catalog's video ladder: every distinct video bit rate (audio renditions are not
/// packaged: the sets are video-only).
pub fn ladder_kbps(catalog: &Catalog) -> Vec<u32> {
    let set: BTreeSet<u32> = catalog
        .titles
        .iter()
        .flat_map(|t| &t.renditions)
        .filter(|r| r.media != Media::Audio)
        .map(|r| r.bitrate_kbps)
        .collect();
    set.into_iter().collect()
}

fn rt(path: &Path) -> impl Fn(std::io::Error) -> MediaError + '_ {
    move |e| MediaError::Runtime(format!("{}: {e}", path.display()))
}

/// Write the media set of `catalog` under `root`: encode (or reuse) a pool per rung, then
/// every title in id order. Titles whose sidecar exists are skipped, so an interrupted run
/// resumes; a root holding anything else than this media set is refused.
pub fn create(
    catalog: &Catalog,
    root: &Path,
    opts: &MediaOptions,
) -> Result<MediaReport, MediaError> {
    pool::check_segment(opts.segment_s)?;
    if opts.pool_fragments == 0 {
        return Err(MediaError::Input("--pool: at least one fragment".into()));
    }
    let started = Instant::now();
    let ladder = ladder_kbps(catalog);
    if ladder.is_empty() || catalog.titles.is_empty() {
        return Err(MediaError::Input(
            "the catalog has no titles with video renditions".into(),
        ));
    }
    let source = opts.source.as_deref().map(pool::Source::open).transpose()?;
    let marker = Marker {
        format: opts.format,
        segment_s: opts.segment_s,
        pool_fragments: opts.pool_fragments,
        catalog_digest: vodkit_workload::fileset::catalog_digest(catalog),
        titles: catalog.titles.len(),
        ladder_kbps: ladder.clone(),
        source: source.as_ref().map(pool::Source::label),
    };
    let state = root.join(STATE_DIR);
    check_root(root, &state, &marker)?;
    std::fs::create_dir_all(&state).map_err(rt(&state))?;
    let marker_path = state.join(MARKER);
    let text =
        serde_json::to_string_pretty(&marker).map_err(|e| MediaError::Runtime(e.to_string()))?;
    std::fs::write(&marker_path, text + "\n").map_err(rt(&marker_path))?;

    let bar = progress_bar(opts.progress, ladder.len() as u64, "encoding");
    let mut rungs = Vec::with_capacity(ladder.len());
    for &kbps in &ladder {
        let spec = pool::PoolSpec {
            bitrate_kbps: kbps,
            segment_s: opts.segment_s,
            fragments: opts.pool_fragments,
            source: source.clone(),
        };
        let (width, height) = spec.resolution();
        rungs.push(Rung {
            bitrate_kbps: kbps,
            width,
            height,
            pool: pool::pool(&spec, &state)?,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let encode_seconds = started.elapsed().as_secs_f64();

    let mut report = MediaReport {
        titles: catalog.titles.len(),
        written_titles: 0,
        skipped_titles: 0,
        files: 0,
        bytes_written: 0,
        encode_seconds,
        seconds: 0.0,
        ladder_kbps: ladder,
    };
    let bar = progress_bar(opts.progress, catalog.titles.len() as u64, "titles");
    let mut titles: Vec<_> = catalog.titles.iter().collect();
    titles.sort_by_key(|t| t.id);
    for t in titles {
        bar.inc(1);
        let dir = root.join(package::title_dir(t.id));
        let sidecar_path = dir.join(SIDECAR);
        if sidecar_path.exists() {
            report.skipped_titles += 1;
            continue;
        }
        let own: BTreeSet<u32> = t
            .renditions
            .iter()
            .filter(|r| r.media != Media::Audio)
            .map(|r| r.bitrate_kbps)
            .collect();
        let mine: Vec<Rung> = rungs
            .iter()
            .filter(|r| own.contains(&r.bitrate_kbps))
            .cloned()
            .collect();
        let out = package::title(t.id, t.duration_s, &mine, opts.format, opts.segment_s)?;
        for f in &out.files {
            let path = root.join(&f.path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(rt(parent))?;
            }
            std::fs::write(&path, &f.bytes).map_err(rt(&path))?;
            report.files += 1;
            report.bytes_written += f.bytes.len() as u64;
        }
        let sidecar = Sidecar {
            title: t.id,
            format: opts.format,
            entry: format!("{}/{}", package::title_dir(t.id), opts.format.entry()),
            duration_s: package::segment_count(t.duration_s, opts.segment_s) as f64
                * opts.segment_s,
            pieces: out.pieces,
        };
        let text =
            serde_json::to_string(&sidecar).map_err(|e| MediaError::Runtime(e.to_string()))?;
        std::fs::write(&sidecar_path, text + "\n").map_err(rt(&sidecar_path))?;
        report.written_titles += 1;
    }
    bar.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The root must be empty, absent, or this same media set.
fn check_root(root: &Path, state: &Path, marker: &Marker) -> Result<(), MediaError> {
    let marker_path = state.join(MARKER);
    if let Ok(text) = std::fs::read_to_string(&marker_path) {
        let old: Marker = serde_json::from_str(&text).map_err(|e| {
            MediaError::Runtime(format!(
                "{}: not a media-set marker: {e}",
                marker_path.display()
            ))
        })?;
        if old != *marker {
            return Err(MediaError::Input(format!(
                "{} holds a different media set ({} packaging, {} s segments, {} titles, catalog {}, pictures from {}); use another --root or delete it",
                root.display(),
                old.format,
                old.segment_s,
                old.titles,
                old.catalog_digest,
                old.source.as_deref().unwrap_or("the test pattern")
            )));
        }
        return Ok(());
    }
    match std::fs::read_dir(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MediaError::Runtime(format!("{}: {e}", root.display()))),
        Ok(entries) => {
            // Only the state directory (pools copied in ahead of time) may already be there.
            let foreign = entries
                .filter_map(Result::ok)
                .any(|e| e.file_name() != STATE_DIR);
            if foreign {
                Err(MediaError::Input(format!(
                    "{} is not empty and holds no vodkit media set; real media needs its own --root",
                    root.display()
                )))
            } else {
                Ok(())
            }
        }
    }
}

fn progress_bar(show: bool, len: u64, what: &str) -> ProgressBar {
    let bar = vodkit_workload::progress::bar(show, len, "{msg:>9} [{bar:30}] {pos}/{len} ({eta})");
    bar.set_message(what.to_string());
    bar
}

/// One damaged or missing piece.
#[derive(Debug, Clone, Serialize)]
pub struct Damage {
    pub path: String,
    pub offset: u64,
    pub problem: String,
}

/// What [`verify`] found.
#[derive(Debug, Clone, Serialize)]
pub struct MediaVerify {
    pub titles: usize,
    pub pieces: usize,
    pub bytes: u64,
    pub damage: Vec<Damage>,
}

/// Read every title's sidecar under `root` and check every piece's checksum.
pub fn verify(root: &Path) -> Result<MediaVerify, MediaError> {
    let marker_path = root.join(STATE_DIR).join(MARKER);
    let text = std::fs::read_to_string(&marker_path).map_err(|e| {
        MediaError::Input(format!(
            "{}: {e}: not a media set (run `vodkit fileset create --media ...`)",
            marker_path.display()
        ))
    })?;
    let _: Marker = serde_json::from_str(&text)
        .map_err(|e| MediaError::Runtime(format!("{}: {e}", marker_path.display())))?;
    let mut out = MediaVerify {
        titles: 0,
        pieces: 0,
        bytes: 0,
        damage: Vec::new(),
    };
    for s in sidecars(root)? {
        out.titles += 1;
        let mut open: Option<(String, Vec<u8>)> = None;
        for p in &s.pieces {
            out.pieces += 1;
            if open
                .as_ref()
                .map(|(path, _)| path != &p.path)
                .unwrap_or(true)
            {
                let path = root.join(&p.path);
                match std::fs::read(&path) {
                    Ok(b) => open = Some((p.path.clone(), b)),
                    Err(e) => {
                        out.damage.push(Damage {
                            path: p.path.clone(),
                            offset: p.offset,
                            problem: e.to_string(),
                        });
                        open = None;
                        continue;
                    }
                }
            }
            let Some((_, bytes)) = &open else { continue };
            let (a, b) = (p.offset as usize, (p.offset + p.len) as usize);
            match bytes.get(a..b) {
                None => out.damage.push(Damage {
                    path: p.path.clone(),
                    offset: p.offset,
                    problem: format!("file is {} bytes, the piece ends at {b}", bytes.len()),
                }),
                Some(piece) if crc32fast::hash(piece) != p.crc32 => out.damage.push(Damage {
                    path: p.path.clone(),
                    offset: p.offset,
                    problem: "checksum differs".into(),
                }),
                Some(piece) => out.bytes += piece.len() as u64,
            }
        }
    }
    Ok(out)
}

/// Every title sidecar under `root`, in title order.
pub fn sidecars(root: &Path) -> Result<Vec<Sidecar>, MediaError> {
    let mut dirs: Vec<(u32, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(root).map_err(rt(root))? {
        let e = e.map_err(rt(root))?;
        let name = e.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix('t'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let p = e.path().join(SIDECAR);
        if p.exists() {
            dirs.push((id, p));
        }
    }
    dirs.sort();
    dirs.into_iter()
        .map(|(_, p)| {
            let text = std::fs::read_to_string(&p).map_err(rt(&p))?;
            serde_json::from_str(&text)
                .map_err(|e| MediaError::Runtime(format!("{}:{}: {e}", p.display(), e.line())))
        })
        .collect()
}

/// One rendition of a packaged title, read back as a fragmented MP4: a single-file rendition
/// (`tN/vKBPS.mp4` of `dash-single` / `hls-byterange`, or any fragmented MP4 such as
/// ffmpeg's `-movflags frag_keyframe+empty_moov` output), or a segment-file rendition
/// directory (`tN/vKBPS/` of `dash`, `hls` and `cmaf`: `init.mp4`, then `seg-1.m4s`,
/// `seg-2.m4s`, … until one is missing). The error names the path and what was expected.
pub fn rendition(path: &Path) -> Result<bmff::Fragmented, MediaError> {
    let bytes = if path.is_dir() {
        let init = path.join("init.mp4");
        if !init.is_file() {
            return Err(MediaError::Input(format!(
                "{}: expected a rendition directory with init.mp4 and seg-N.m4s, or a fragmented MP4 file",
                path.display()
            )));
        }
        let mut bytes = std::fs::read(&init).map_err(rt(&init))?;
        let mut n = 1u32;
        loop {
            let seg = path.join(format!("seg-{n}.m4s"));
            if !seg.is_file() {
                break;
            }
            bytes.extend_from_slice(&std::fs::read(&seg).map_err(rt(&seg))?);
            n += 1;
        }
        if n == 1 {
            return Err(MediaError::Input(format!(
                "{}: no seg-1.m4s beside init.mp4",
                path.display()
            )));
        }
        bytes
    } else {
        std::fs::read(path).map_err(|e| MediaError::Input(format!("{}: {e}", path.display())))?
    };
    bmff::split(&bytes).map_err(|e| MediaError::Input(format!("{}: {e}", path.display())))
}

//! File sets: writing, verifying and locating on disk the files a workload's server serves.
//!
//! [`create`] writes every file of a catalog with the deterministic [`crate::content`]
//! bytes, title by title in creation (id) order, so a title's files sit together and titles
//! land at the same disk positions in every layout (thesis 3.5.2). It refuses directories
//! holding files it did not write, checks free space first, skips complete files and
//! repairs partial ones, so an interrupted run can simply be restarted. [`verify`] checks
//! every byte; [`placement::report`] reads physical extents with FIEMAP (Linux).

pub mod placement;

use crate::content;
use crate::layout::{layout_name, relayout};
use crate::model::{Catalog, FileRef, Layout};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Name of the marker file that identifies a directory as a vodkit file set.
pub const MARKER: &str = ".vodkit-fileset.json";
const BLOCK: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum FilesetError {
    /// Bad arguments or input files (exit code 2).
    #[error("{0}")]
    Input(String),
    /// The environment refused (I/O error, no space, foreign files): exit code 1.
    #[error("{0}")]
    Runtime(String),
}

/// The titles and their files, in a workload directory ([`crate::dir`]).
pub const CATALOG: &str = "catalog.json";

fn io(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> FilesetError {
    let p = path.display().to_string();
    let what = what.to_string();
    move |e| FilesetError::Runtime(format!("{p}: {what}: {e}"))
}

/// Read `DIR/catalog.json` (or a catalog file given directly).
pub fn load_catalog(path: &Path) -> Result<Catalog, FilesetError> {
    let file = if path.is_dir() {
        path.join(CATALOG)
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| FilesetError::Input(format!("{}: {e}", file.display())))?;
    let catalog: Catalog = serde_json::from_str(&text).map_err(|e| {
        FilesetError::Input(format!(
            "{}:{}: not a catalog: {e}",
            file.display(),
            e.line()
        ))
    })?;
    for t in &catalog.titles {
        for r in &t.renditions {
            for f in &r.files {
                if f.path.is_empty()
                    || f.path.starts_with('/')
                    || f.path
                        .split('/')
                        .any(|c| c == ".." || c == "." || c.is_empty())
                {
                    return Err(FilesetError::Input(format!(
                        "{}: title {}: file path `{}` must be relative, without `.`/`..` parts",
                        file.display(),
                        t.id,
                        f.path
                    )));
                }
            }
        }
    }
    Ok(catalog)
}

/// The files of `catalog` in creation order (title id, rendition, chunk), optionally
/// re-laid out.
pub fn planned_files(
    catalog: &Catalog,
    layout: Option<Layout>,
) -> Result<Vec<(u32, FileRef)>, FilesetError> {
    let mut titles: Vec<_> = catalog.titles.iter().collect();
    titles.sort_by_key(|t| t.id);
    let mut out = Vec::new();
    for t in titles {
        for r in &t.renditions {
            let files = match layout {
                Some(l) if l != r.layout => {
                    relayout(r, l)
                        .ok_or_else(|| {
                            FilesetError::Input(format!(
                                "title {}: cannot re-lay out `{}` (not a vodkit-generated name)",
                                t.id,
                                r.files.first().map_or("", |f| f.path.as_str())
                            ))
                        })?
                        .files
                }
                _ => r.files.clone(),
            };
            out.extend(files.into_iter().map(|f| (t.id, f)));
        }
    }
    Ok(out)
}

/// Identity of a catalog, independent of layout: spec, seed, and every title's id and size.
pub fn catalog_digest(catalog: &Catalog) -> String {
    let mut text = format!("{}|{}", catalog.spec, catalog.seed);
    for t in &catalog.titles {
        for r in &t.renditions {
            text.push_str(&format!("|{}:{}:{}", t.id, r.bitrate_kbps, r.size_bytes));
        }
    }
    format!("{:016x}", content::path_key(&text))
}

/// Contents of the marker file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub spec: String,
    pub seed: u64,
    pub digest: String,
    pub layouts: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Write this layout instead of the catalog's own.
    pub layout: Option<Layout>,
    /// Show a progress bar on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
    /// The sparse image whose file system holds `root` (an emulated disk): what is written
    /// also takes room on the file system of the image, which is checked too.
    pub backing_image: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CreateReport {
    pub files: u64,
    pub bytes: u64,
    pub written_files: u64,
    pub skipped_files: u64,
    pub repaired_files: u64,
    pub bytes_written: u64,
    pub seconds: f64,
}

/// Check that `root` is ours (or empty), and record this catalog and layout in its marker.
fn claim_root(root: &Path, catalog: &Catalog, layout: &str) -> Result<(), FilesetError> {
    std::fs::create_dir_all(root).map_err(io(root, "create directory"))?;
    let marker_path = root.join(MARKER);
    let digest = catalog_digest(catalog);
    let mut marker = if marker_path.exists() {
        let text = std::fs::read_to_string(&marker_path).map_err(io(&marker_path, "read"))?;
        let m: Marker = serde_json::from_str(&text).map_err(|e| {
            FilesetError::Runtime(format!(
                "{}: unreadable marker ({e}); refusing to touch this directory",
                marker_path.display()
            ))
        })?;
        if m.digest != digest {
            return Err(FilesetError::Runtime(format!(
                "{} holds the file set of another workload (spec {}, seed {}); use another directory",
                root.display(),
                m.spec,
                m.seed
            )));
        }
        m
    } else {
        let foreign = std::fs::read_dir(root)
            .map_err(io(root, "list"))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|n| n != "lost+found");
        if let Some(name) = foreign {
            return Err(FilesetError::Runtime(format!(
                "{} is not empty and was not written by vodkit fileset (found `{name}`); refusing to overwrite foreign files",
                root.display()
            )));
        }
        Marker {
            spec: catalog.spec.clone(),
            seed: catalog.seed,
            digest,
            layouts: Vec::new(),
        }
    };
    if !marker.layouts.iter().any(|l| l == layout) {
        marker.layouts.push(layout.to_string());
    }
    let text = serde_json::to_string_pretty(&marker).expect("plain data") + "\n";
    std::fs::write(&marker_path, text).map_err(io(&marker_path, "write"))
}

/// Free bytes available to unprivileged writers on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Result<u64, FilesetError> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| FilesetError::Input(format!("{}: path contains NUL", path.display())))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io(path, "statvfs")(std::io::Error::last_os_error()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// A bar of `total` bytes, `what` they are for.
fn bar(total: u64, enabled: bool, what: &str) -> ProgressBar {
    crate::progress::bar(
        enabled,
        total,
        &format!("{what} [{{bar:30}}] {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"),
    )
}

/// How much of an existing file can be kept.
enum Existing {
    Missing,
    Complete,
    /// Keep the first n bytes (content checked), write the rest.
    Keep(u64),
}

fn inspect(path: &Path, rel: &str, size: u64) -> Result<Existing, FilesetError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Missing),
        Err(e) => return Err(io(path, "stat")(e)),
    };
    if !meta.is_file() {
        return Err(FilesetError::Runtime(format!(
            "{}: exists and is not a regular file",
            path.display()
        )));
    }
    let len = meta.len();
    if len == size {
        return Ok(Existing::Complete);
    }
    if len == 0 || len > size {
        return Ok(Existing::Keep(0));
    }
    // A partial file: keep it if its last block holds the expected bytes.
    let tail = len.min(64 * 1024);
    let mut buf = vec![0u8; tail as usize];
    let mut f = File::open(path).map_err(io(path, "open"))?;
    f.seek(SeekFrom::Start(len - tail))
        .map_err(io(path, "seek"))?;
    f.read_exact(&mut buf).map_err(io(path, "read"))?;
    let ok = content::first_mismatch(content::path_key(rel), len - tail, &buf).is_none();
    Ok(Existing::Keep(if ok { len } else { 0 }))
}

/// One file to write (or finish): bytes `from..size` of `rel` at `path`.
struct Job {
    path: PathBuf,
    rel: String,
    from: u64,
    size: u64,
}

/// Open `path` for writing at `from`, creating directories and dropping anything after it.
fn open_at(path: &Path, from: u64) -> Result<File, FilesetError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir, "create directory"))?;
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io(path, "open for writing"))?;
    f.set_len(from).map_err(io(path, "truncate"))?;
    f.seek(SeekFrom::Start(from)).map_err(io(path, "seek"))?;
    Ok(f)
}

/// Write every job in order, then wait until the written files are on disk.
///
/// Content is generated into a small buffer that stays in the CPU cache and is written
/// right away (computing it costs far less than copying it into the page cache, so a
/// helper thread would only add cross-core traffic). Writeback of each finished file starts
/// at once; at the end each file is flushed, without flushing unrelated data of the same
/// filesystem.
fn write_jobs(
    jobs: &[Job],
    pb: &ProgressBar,
    on_progress: &mut dyn FnMut(u64, u64),
) -> Result<(), FilesetError> {
    const PIECE: usize = 256 * 1024;
    /// Bytes between two progress calls inside a long file.
    const REPORT_EVERY: u64 = 64 << 20;
    let total: u64 = jobs.iter().map(|j| j.size - j.from).sum();
    let mut written = 0u64;
    let mut reported = 0u64;
    let mut buf = vec![0u8; PIECE];
    for j in jobs {
        let mut f = open_at(&j.path, j.from)?;
        let key = content::path_key(&j.rel);
        let mut off = j.from;
        while off < j.size {
            let n = (j.size - off).min(PIECE as u64) as usize;
            content::fill(key, off, &mut buf[..n]);
            f.write_all(&buf[..n]).map_err(io(&j.path, "write"))?;
            off += n as u64;
            written += n as u64;
            pb.inc(n as u64);
            if written - reported >= REPORT_EVERY {
                on_progress(written, total);
                reported = written;
            }
        }
        start_writeback(&f);
        on_progress(written, total);
        reported = written;
    }
    for j in jobs {
        File::open(&j.path)
            .and_then(|f| f.sync_data())
            .map_err(io(&j.path, "flush to disk"))?;
    }
    Ok(())
}

/// Ask the kernel to start writing a finished file back to disk, without waiting.
fn start_writeback(f: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: plain system call on an open descriptor; failure only loses a hint.
    unsafe {
        libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Write the file set of `catalog` under `root`.
/// The name of the layout a file set has: the one asked for, else the catalog's own.
pub(crate) fn layout_label(catalog: &Catalog, layout: Option<Layout>) -> String {
    layout
        .or_else(|| {
            catalog
                .titles
                .first()
                .and_then(|t| t.renditions.first())
                .map(|r| r.layout)
        })
        .map_or_else(|| "unchunked".to_string(), layout_name)
}

pub fn create(
    catalog: &Catalog,
    root: &Path,
    opts: &CreateOptions,
) -> Result<CreateReport, FilesetError> {
    create_with_progress(catalog, root, opts, &mut |_, _| {})
}

/// [`create`], calling `on_progress(written, to_write)` (bytes) after each file and every
/// 64 MiB within one, for callers that show progress their own way (set
/// `opts.progress` to false then). Complete files are not counted in `to_write`.
pub fn create_with_progress(
    catalog: &Catalog,
    root: &Path,
    opts: &CreateOptions,
    on_progress: &mut dyn FnMut(u64, u64),
) -> Result<CreateReport, FilesetError> {
    let started = Instant::now();
    let files = planned_files(catalog, opts.layout)?;
    let layout = layout_label(catalog, opts.layout);
    claim_root(root, catalog, &layout)?;

    let mut plan = Vec::with_capacity(files.len());
    let mut needed = 0u64;
    let mut report = CreateReport::default();
    for (_, f) in &files {
        let path = root.join(&f.path);
        let state = inspect(&path, &f.path, f.size_bytes)?;
        if let Existing::Keep(k) = state {
            needed += (f.size_bytes - k).div_ceil(BLOCK) * BLOCK;
        } else if let Existing::Missing = state {
            needed += f.size_bytes.div_ceil(BLOCK) * BLOCK;
        }
        report.files += 1;
        report.bytes += f.size_bytes;
        plan.push((f, path, state));
    }
    // Room inside the file system of `root`, and, on an emulated disk, on the file system
    // that holds its sparse image.
    let mut places = vec![(root.to_path_buf(), " on".to_string())];
    if let Some(image) = &opts.backing_image {
        let host = image
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        places.push((
            host.to_path_buf(),
            format!(
                ", which the emulated disk's image {} takes from",
                image.display()
            ),
        ));
    }
    for (place, via) in places {
        let free = free_bytes(&place)?;
        if needed > free {
            return Err(FilesetError::Runtime(format!(
                "{}: needs {} more{via} {}, where only {} are free; use a smaller workload (--scale)",
                root.display(),
                crate::units::human_size(needed),
                place.display(),
                crate::units::human_size(free)
            )));
        }
    }
    let pb = bar(needed, opts.progress, "writing");
    let mut jobs = Vec::new();
    for (f, path, state) in plan {
        let from = match state {
            Existing::Complete => {
                report.skipped_files += 1;
                continue;
            }
            Existing::Missing => 0,
            Existing::Keep(k) => {
                report.repaired_files += 1;
                k
            }
        };
        report.written_files += 1;
        report.bytes_written += f.size_bytes - from;
        jobs.push(Job {
            path,
            rel: f.path.clone(),
            from,
            size: f.size_bytes,
        });
    }
    write_jobs(&jobs, &pb, on_progress)?;
    pb.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A file set root that must already exist.
fn require_dir(root: &Path) -> Result<(), FilesetError> {
    if root.is_dir() {
        Ok(())
    } else {
        Err(FilesetError::Input(format!(
            "{}: no such directory (create the file set with `vodkit fileset create`)",
            root.display()
        )))
    }
}

/// One file that does not hold what the catalog says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub path: String,
    pub problem: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct VerifyReport {
    pub files: u64,
    pub bytes: u64,
    pub problems: Vec<Problem>,
    pub seconds: f64,
}

/// Check that every file exists with its size and expected content.
pub fn verify(
    catalog: &Catalog,
    root: &Path,
    layout: Option<Layout>,
    progress: bool,
) -> Result<VerifyReport, FilesetError> {
    let started = Instant::now();
    require_dir(root)?;
    let files = planned_files(catalog, layout)?;
    let total: u64 = files.iter().map(|(_, f)| f.size_bytes).sum();
    let pb = bar(total, progress, "verifying");
    let mut report = VerifyReport::default();
    let mut buf = vec![0u8; 1 << 20];
    for (_, f) in &files {
        report.files += 1;
        report.bytes += f.size_bytes;
        if let Some(p) = verify_file(root, f, &mut buf, &pb)? {
            report.problems.push(Problem {
                path: f.path.clone(),
                problem: p,
            });
        }
    }
    pb.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn verify_file(
    root: &Path,
    f: &FileRef,
    buf: &mut [u8],
    pb: &ProgressBar,
) -> Result<Option<String>, FilesetError> {
    let path = root.join(&f.path);
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some("missing".into())),
        Err(e) => return Err(io(&path, "open")(e)),
    };
    let len = file.metadata().map_err(io(&path, "stat"))?.len();
    if len != f.size_bytes {
        pb.inc(f.size_bytes);
        return Ok(Some(format!("size {len}, expected {}", f.size_bytes)));
    }
    let key = content::path_key(&f.path);
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        file.read_exact(&mut buf[..n]).map_err(io(&path, "read"))?;
        if let Some(i) = content::first_mismatch(key, off, &buf[..n]) {
            pb.inc(len - off);
            return Ok(Some(format!("content differs at byte {}", off + i as u64)));
        }
        off += n as u64;
        pb.inc(n as u64);
    }
    Ok(None)
}

/// Paths of the files of a catalog under `root` (for tools that read them back).
pub fn file_paths(
    catalog: &Catalog,
    root: &Path,
    layout: Option<Layout>,
) -> Result<Vec<PathBuf>, FilesetError> {
    Ok(planned_files(catalog, layout)?
        .into_iter()
        .map(|(_, f)| root.join(f.path))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(sizes: &[u64]) -> Catalog {
        let files = sizes.iter().enumerate();
        Catalog {
            spec: "progress-test".into(),
            seed: 7,
            ..Catalog::of_files(
                files.map(|(i, &size)| (format!("t{i}.mp4"), size)),
                10.0,
                400,
            )
        }
    }

    #[test]
    fn progress_counts_up_to_the_bytes_to_write_and_skips_complete_files() {
        let dir = tempfile::tempdir().unwrap();
        let c = catalog(&[300_000, 5_000, 70_000]);
        let opts = CreateOptions {
            layout: None,
            progress: false,
            backing_image: None,
        };
        let mut calls = Vec::new();
        let r =
            create_with_progress(&c, dir.path(), &opts, &mut |w, t| calls.push((w, t))).unwrap();
        assert_eq!(
            calls,
            [(300_000, 375_000), (305_000, 375_000), (375_000, 375_000)]
        );
        assert_eq!(r.bytes_written, 375_000);
        // Second run: one file cut short, the others complete.
        let f = File::options()
            .write(true)
            .open(dir.path().join("t0.mp4"))
            .unwrap();
        f.set_len(100_000).unwrap();
        let mut again = Vec::new();
        let r =
            create_with_progress(&c, dir.path(), &opts, &mut |w, t| again.push((w, t))).unwrap();
        assert_eq!(again, [(200_000, 200_000)]);
        assert_eq!((r.skipped_files, r.repaired_files), (2, 1));
    }
}

//! Mapping a request target to a file under the document root, without ever leaving it.
//!
//! Decoding rejects NUL bytes and bad escapes; dot segments are resolved before lookup
//! and a path climbing above the root is refused. Opening uses `openat2(2)` with
//! `RESOLVE_BENEATH`, so the kernel itself refuses symlinks that point outside the root
//! (unless the operator allows them); kernels without `openat2` fall back to a
//! canonicalize-and-compare check.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a target could not be mapped to a servable file; each maps to a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// Bad syntax, bad escape, NUL byte, or `..` above the root: 400.
    BadRequest,
    /// Exists but may not be served (escaping symlink, not a regular file, no permission): 403.
    Forbidden,
    /// 404.
    NotFound,
    /// The target names a directory (the planner redirects or serves its index; else 403).
    Directory,
}

impl TargetError {
    pub fn status(self) -> u16 {
        match self {
            TargetError::BadRequest => 400,
            TargetError::Forbidden => 403,
            TargetError::NotFound => 404,
            TargetError::Directory => 403,
        }
    }
}

/// The path part of a request target (no query), with its leading slash. In the absolute
/// form the authority ends at the first `/`, `?` or `#` (RFC 3986 3.2), so
/// `http://x?/a` is the path `/` with a query, not `/a`.
pub fn path_part(target: &str) -> Result<&str, TargetError> {
    let path = if target.starts_with('/') {
        target
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        match rest.find(['/', '?', '#']) {
            Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
            _ => "/",
        }
    } else {
        return Err(TargetError::BadRequest);
    };
    let end = path.find(['?', '#']).unwrap_or(path.len());
    Ok(&path[..end])
}

/// The query of a request target (after `?`, before `#`), `""` without one: handlers that
/// read parameters (signed URLs, LL-HLS delivery directives) take it from here; everything
/// else names things by [`path_part`] alone.
pub fn query_part(target: &str) -> &str {
    let q = target.split_once('?').map_or("", |(_, q)| q);
    q.split('#').next().unwrap_or(q)
}

/// Decode a request path into a relative file path with no dot segments.
pub fn relative_path(target: &str) -> Result<PathBuf, TargetError> {
    let path = path_part(target)?;
    // The common case in one allocation: nothing to decode and no empty or dot segment.
    if let Some(rest) = path.strip_prefix('/') {
        let plain = !rest.is_empty()
            && !rest.bytes().any(|b| b == b'%' || refused_byte(b))
            && rest.split('/').all(|s| !matches!(s, "" | "." | ".."));
        if plain {
            return Ok(PathBuf::from(rest));
        }
    }
    decode_path(path)
}

/// A request target's path as the server means it: percent-decoded, dot segments resolved,
/// with its leading slash (`/live/a/../b/%73.ts` is `/live/b/s.ts`) and its trailing one. Every handler that
/// names things by path (files under the root, live objects) goes by this one meaning, so a
/// proxy in front and the origin agree on what a path is. Refused (400) as
/// [`relative_path`] refuses: bad escapes, NUL and control bytes, backslashes, `..` above
/// the root, and (for names kept as text) bytes that are not UTF-8.
pub fn normalized_path(target: &str) -> Result<String, TargetError> {
    let rel = relative_path(target)?;
    let text = rel.to_str().ok_or(TargetError::BadRequest)?;
    // A directory stays one: `/live/a/` does not name an object `a`.
    let dir = !text.is_empty() && path_part(target)?.ends_with('/');
    Ok(format!("/{text}{}", if dir { "/" } else { "" }))
}

/// Whether a request target's path has a dot segment (`.` or `..`, plain or
/// percent-encoded, e.g. `%2e%2e` or `..%2f`): [`normalized_path`] resolves them, and a
/// publisher that names its objects with them is refused.
pub fn has_dot_segment(target: &str) -> bool {
    let Ok(path) = path_part(target) else {
        return false;
    };
    percent_decode(path.as_bytes())
        .map(|d| d.split(|&b| b == b'/').any(|s| s == b"." || s == b".."))
        .unwrap_or(false)
}

/// Bytes no path may hold, raw or decoded: control characters (a `%0d%0a` splits log
/// lines and headers) and backslashes (a separator to some proxies and file systems).
fn refused_byte(b: u8) -> bool {
    b < 0x20 || b == 0x7f || b == b'\\'
}

/// Percent-decode `path` and resolve its dot segments (the general case).
fn decode_path(path: &str) -> Result<PathBuf, TargetError> {
    let decoded = percent_decode(path.as_bytes())?;
    let mut parts: Vec<&[u8]> = Vec::new();
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                if parts.pop().is_none() {
                    return Err(TargetError::BadRequest);
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join(&b'/');
    Ok(PathBuf::from(OsString::from_vec(joined)))
}

fn percent_decode(raw: &[u8]) -> Result<Vec<u8>, TargetError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'%' {
            let hi = raw.get(i + 1).and_then(|c| (*c as char).to_digit(16));
            let lo = raw.get(i + 2).and_then(|c| (*c as char).to_digit(16));
            match (hi, lo) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => return Err(TargetError::BadRequest),
            }
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    if out.iter().any(|&b| refused_byte(b)) {
        return Err(TargetError::BadRequest);
    }
    Ok(out)
}

/// The document root, opened once; files are looked up relative to it.
#[derive(Debug)]
pub struct DocRoot {
    dir: OwnedFd,
    canonical: PathBuf,
    allow_outside_symlinks: bool,
    /// Descriptors kept open between requests ([`crate::open_files`]); `None`: off.
    open_files: Option<crate::open_files::OpenFiles>,
}

/// `struct open_how` from linux/openat2.h (libc marks its copy non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

impl DocRoot {
    pub fn open(root: &Path, allow_outside_symlinks: bool) -> io::Result<DocRoot> {
        let canonical = root.canonicalize()?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a directory",
            ));
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&canonical)
            .map(OwnedFd::from)?;
        Ok(DocRoot {
            dir,
            canonical,
            allow_outside_symlinks,
            open_files: None,
        })
    }

    /// Keep up to `entries` served files open between requests (0: open every time), each
    /// trusted for `valid` after its name was last checked.
    pub fn with_open_files(mut self, entries: usize, valid: std::time::Duration) -> DocRoot {
        self.open_files = (entries > 0).then(|| crate::open_files::OpenFiles::new(entries, valid));
        self
    }

    /// Like [`DocRoot::open_file`], through the open-file cache when it is on: the same
    /// descriptor for every request while the file is unchanged.
    pub fn open_shared(&self, rel: &Path) -> Result<crate::open_files::OpenedFile, TargetError> {
        match &self.open_files {
            Some(cache) => cache.open(self, rel),
            None => self
                .open_file(rel)
                .map(|(f, m)| (std::sync::Arc::new(f), m)),
        }
    }

    /// `stat` of `rel` under the root, following symlinks: the open-file cache's "is it
    /// still the same file?" (files themselves are only ever opened by `open_file`).
    pub fn stat(&self, rel: &Path) -> io::Result<libc::stat> {
        let c = c_name(rel)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: the directory descriptor is open for our lifetime, `c` is NUL-terminated
        // and `st` is a buffer of the type fstatat fills.
        let rc = unsafe { libc::fstatat(self.dir.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatat returned 0, so it filled `st`.
        Ok(unsafe { st.assume_init() })
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Open a regular file under the root for reading.
    pub fn open_file(&self, rel: &Path) -> Result<(File, std::fs::Metadata), TargetError> {
        let file = match self.openat2(rel) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => self.open_checked(rel)?,
            Err(e) => return Err(map_open_error(&e)),
            Ok(f) => f,
        };
        let meta = file.metadata().map_err(|_| TargetError::NotFound)?;
        if meta.is_dir() {
            return Err(TargetError::Directory);
        }
        if !meta.is_file() {
            return Err(TargetError::Forbidden);
        }
        Ok((file, meta))
    }

    fn openat2(&self, rel: &Path) -> io::Result<File> {
        let c = c_name(rel)?;
        let resolve = if self.allow_outside_symlinks {
            RESOLVE_NO_MAGICLINKS
        } else {
            RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
        };
        let how = OpenHow {
            flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64,
            mode: 0,
            resolve,
        };
        // SAFETY: arguments are valid for the openat2 syscall; the fd is owned below.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(unsafe { File::from_raw_fd(fd as i32) })
    }

    /// Fallback for kernels without openat2: canonicalize, then compare with the root.
    fn open_checked(&self, rel: &Path) -> Result<File, TargetError> {
        let full = self.canonical.join(rel);
        let real = full.canonicalize().map_err(|e| map_open_error(&e))?;
        if !self.allow_outside_symlinks && !real.starts_with(&self.canonical) {
            return Err(TargetError::Forbidden);
        }
        File::open(&real).map_err(|e| map_open_error(&e))
    }
}

impl crate::open_files::FileSource for DocRoot {
    type Error = TargetError;

    fn stat(&self, rel: &Path) -> io::Result<libc::stat> {
        DocRoot::stat(self, rel)
    }

    fn open_file(&self, rel: &Path) -> Result<(File, std::fs::Metadata), TargetError> {
        DocRoot::open_file(self, rel)
    }
}

/// `rel` as a C string for the `*at` calls relative to the root (`.` for the root itself).
fn c_name(rel: &Path) -> io::Result<std::ffi::CString> {
    let name = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    std::ffi::CString::new(name.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn map_open_error(e: &io::Error) -> TargetError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => {
            TargetError::NotFound
        }
        Some(libc::EXDEV) | Some(libc::ELOOP) | Some(libc::EACCES) | Some(libc::EPERM) => {
            TargetError::Forbidden
        }
        _ => TargetError::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_normalizes() {
        assert_eq!(
            relative_path("/a/b.mp4?x=1").unwrap(),
            PathBuf::from("a/b.mp4")
        );
        assert_eq!(
            relative_path("/a/./c/../b%20c.mp4").unwrap(),
            PathBuf::from("a/b c.mp4")
        );
        assert_eq!(
            relative_path("http://h:80/v.mp4").unwrap(),
            PathBuf::from("v.mp4")
        );
        assert_eq!(relative_path("//a//b").unwrap(), PathBuf::from("a/b"));
    }

    #[test]
    fn traversal_and_bad_escapes_rejected() {
        for bad in [
            "/../etc/passwd",
            "/a/../../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/%2E%2E%2Fetc%2Fpasswd",
            "/a%2f..%2f..%2fetc",
            "/x%00.mp4",
            "/bad%zz",
            "/trunc%2",
            "*",
            "etc/passwd",
            "/a%0ab.ts",
            "/a%0d%0ab.ts",
            "/a%7fb",
            "/a%5cb",
            "/a\\b",
        ] {
            assert_eq!(relative_path(bad), Err(TargetError::BadRequest), "{bad}");
        }
    }

    #[test]
    fn absolute_form_authority_ends_at_slash_query_or_fragment() {
        assert_eq!(path_part("http://x?/live/q/f.ts"), Ok("/"));
        assert_eq!(path_part("http://x#/live/q/f.ts"), Ok("/"));
        assert_eq!(
            path_part("https://x:8/live/q/f.ts?a=/b"),
            Ok("/live/q/f.ts")
        );
        assert_eq!(path_part("http://x"), Ok("/"));
    }

    #[test]
    fn normalized_paths_keep_their_slash_and_find_dot_segments() {
        assert_eq!(
            normalized_path("/live/a/../b/%73.ts?x").unwrap(),
            "/live/b/s.ts"
        );
        assert_eq!(
            normalized_path("http://h/live//q/f.ts").unwrap(),
            "/live/q/f.ts"
        );
        assert_eq!(normalized_path("/").unwrap(), "/");
        assert_eq!(normalized_path("/live/a/").unwrap(), "/live/a/");
        assert_eq!(normalized_path("/a%ff"), Err(TargetError::BadRequest));
        assert!(has_dot_segment("/live/q/%2e%2e/f.ts"));
        assert!(has_dot_segment("/live/q/..%2ff.ts"));
        assert!(has_dot_segment("/live/./f.ts"));
        assert!(!has_dot_segment("/live/q/..f.ts"));
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_decoder() {
        // Every target built from these pieces, fast path or not, decodes as the general
        // decoder would (which the tests above pin down).
        let pieces = [
            "a", "b.mp4", "", ".", "..", "%41", "x%2F", "c d", "\\", "~u",
        ];
        let mut checked = 0;
        for p in pieces {
            for q in pieces {
                for r in pieces {
                    let target = format!("/{p}/{q}/{r}");
                    let path = path_part(&target).unwrap();
                    assert_eq!(relative_path(&target), decode_path(path), "{target}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 1000);
    }
}

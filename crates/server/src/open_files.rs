//! The open-file cache: descriptors of files served lately, kept open and reused while the
//! file under that name is still the same one (device, inode, size, modification and
//! change times, checked by an `fstatat`). A title watched by thousands is then opened
//! once, not once per request: an `openat2`, a `statx` and a `close` per response were a
//! tenth of the server's CPU serving a popular title from memory.
//!
//! An entry is trusted for the validity (`--open-file-cache-valid`, default 1 s) after it
//! was last checked, like nginx's `open_file_cache_valid` (60 s there): serving a popular
//! title from memory, one `fstatat` per request was 3% of the server's CPU. A replaced,
//! truncated or rewritten file is therefore seen within the validity; 0 checks at every
//! request, as without the cache. What the cache does keep is the descriptor of a file
//! deleted since it was served, until the cache is full and starts over.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A served file: its descriptor (shared by every response that sends from it) and what
/// `statx` said of it when it was opened.
pub type OpenedFile = (Arc<File>, Metadata);

/// Default number of files kept open (`--open-file-cache`).
pub const DEFAULT_ENTRIES: usize = 1024;

/// Default time an entry is trusted without a look at the file (`--open-file-cache-valid`).
pub const DEFAULT_VALID: Duration = Duration::from_secs(1);

/// What the cache needs of the directory whose files it keeps ([`crate::target::DocRoot`]).
pub trait FileSource {
    /// Why a file could not be opened.
    type Error;
    /// `stat` of `rel`, following symlinks: does the name still lead to the same file?
    fn stat(&self, rel: &Path) -> std::io::Result<libc::stat>;
    /// Open the regular file `rel` for reading, with every check the source makes.
    fn open_file(&self, rel: &Path) -> Result<(File, Metadata), Self::Error>;
}

/// A cached file and when its name was last seen to lead to it unchanged.
#[derive(Debug)]
struct Cached {
    opened: OpenedFile,
    checked: Instant,
}

/// Files kept open by their path under the root.
#[derive(Debug)]
pub struct OpenFiles {
    entries: usize,
    valid: Duration,
    map: Mutex<HashMap<PathBuf, Cached>>,
}

impl OpenFiles {
    /// A cache of at most `entries` files, each trusted for `valid` after a check.
    pub fn new(entries: usize, valid: Duration) -> OpenFiles {
        OpenFiles {
            entries: entries.max(1),
            valid,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The file at `rel` under `root`: the cached descriptor when it was checked within the
    /// validity or the name still leads to the same unchanged file, else a fresh one
    /// (opened by [`FileSource::open_file`], with all its checks), which is then cached.
    /// Errors are never cached.
    pub fn open<S: FileSource>(&self, root: &S, rel: &Path) -> Result<OpenedFile, S::Error> {
        let now = Instant::now();
        let cached = self.lock().get(rel).map(|c| {
            let fresh = now.saturating_duration_since(c.checked) < self.valid;
            (c.opened.clone(), fresh)
        });
        if let Some(((file, meta), fresh)) = cached {
            if fresh {
                return Ok((file, meta));
            }
            if root.stat(rel).is_ok_and(|st| same_file(&st, &meta)) {
                if let Some(c) = self.lock().get_mut(rel) {
                    c.checked = now;
                }
                return Ok((file, meta));
            }
            self.lock().remove(rel);
        }
        let (file, meta) = root.open_file(rel)?;
        let file = Arc::new(file);
        let mut map = self.lock();
        if map.len() >= self.entries {
            // Full: start over (the files served next are the ones worth keeping).
            map.clear();
        }
        let opened = (file.clone(), meta.clone());
        map.insert(
            rel.to_path_buf(),
            Cached {
                opened,
                checked: now,
            },
        );
        Ok((file, meta))
    }

    /// How many files are open in the cache.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Cached>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether `now` (a `stat` of the name) describes the file `then` was taken of, unchanged.
fn same_file(now: &libc::stat, then: &Metadata) -> bool {
    now.st_dev == then.dev()
        && now.st_ino == then.ino()
        && now.st_size as u64 == then.size()
        && now.st_mtime == then.mtime()
        && now.st_mtime_nsec == then.mtime_nsec()
        && now.st_ctime == then.ctime()
        && now.st_ctime_nsec == then.ctime_nsec()
        && (now.st_mode & libc::S_IFMT) == libc::S_IFREG
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{DocRoot, TargetError};
    use std::io::Write as _;

    fn setup() -> (tempfile::TempDir, DocRoot) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.mp4"), b"first").unwrap();
        let root = DocRoot::open(dir.path(), false).unwrap();
        (dir, root)
    }

    #[test]
    fn a_second_request_gets_the_same_descriptor() {
        let (_dir, root) = setup();
        let cache = OpenFiles::new(8, Duration::ZERO);
        let (a, _) = cache.open(&root, Path::new("a.mp4")).unwrap();
        let (b, _) = cache.open(&root, Path::new("a.mp4")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_replaced_appended_or_deleted_file_is_seen_at_once() {
        let (dir, root) = setup();
        let cache = OpenFiles::new(8, Duration::ZERO);
        let rel = Path::new("a.mp4");
        let (a, m) = cache.open(&root, rel).unwrap();
        // Replaced by rename: a new inode.
        std::fs::write(dir.path().join("b.tmp"), b"second!").unwrap();
        std::fs::rename(dir.path().join("b.tmp"), dir.path().join("a.mp4")).unwrap();
        let (b, m2) = cache.open(&root, rel).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_ne!(m.ino(), m2.ino());
        assert_eq!(m2.len(), 7);
        // Appended in place: same inode, new size.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("a.mp4"))
            .unwrap();
        f.write_all(b"more").unwrap();
        drop(f);
        let (_, m3) = cache.open(&root, rel).unwrap();
        assert_eq!(m3.len(), 11);
        // Deleted: not found, and no longer cached.
        std::fs::remove_file(dir.path().join("a.mp4")).unwrap();
        assert_eq!(cache.open(&root, rel).err(), Some(TargetError::NotFound));
        assert!(cache.is_empty());
    }

    #[test]
    fn errors_are_not_cached_and_the_cache_stays_bounded() {
        let (dir, root) = setup();
        let cache = OpenFiles::new(3, Duration::ZERO);
        assert_eq!(
            cache.open(&root, Path::new("missing.mp4")).err(),
            Some(TargetError::NotFound)
        );
        assert!(cache.is_empty());
        for i in 0..10 {
            let name = format!("f{i}.mp4");
            std::fs::write(dir.path().join(&name), b"x").unwrap();
            cache.open(&root, Path::new(&name)).unwrap();
            assert!(cache.len() <= 3, "{} entries", cache.len());
        }
    }

    #[test]
    fn a_symlink_out_of_the_root_is_refused_even_after_the_file_was_cached() {
        let (dir, root) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"first").unwrap();
        let cache = OpenFiles::new(8, Duration::ZERO);
        cache.open(&root, Path::new("a.mp4")).unwrap();
        std::fs::remove_file(dir.path().join("a.mp4")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("a.mp4"))
            .unwrap();
        assert_eq!(
            cache.open(&root, Path::new("a.mp4")).err(),
            Some(TargetError::Forbidden)
        );
    }

    #[test]
    fn within_the_validity_the_cached_file_is_served_unchecked_then_checked_again() {
        let (dir, root) = setup();
        let rel = Path::new("a.mp4");
        let replace = |content: &[u8]| {
            std::fs::write(dir.path().join("b.tmp"), content).unwrap();
            std::fs::rename(dir.path().join("b.tmp"), dir.path().join("a.mp4")).unwrap();
        };
        // Trusted for an hour: the replacement is not seen.
        let cache = OpenFiles::new(8, Duration::from_secs(3600));
        let (a, _) = cache.open(&root, rel).unwrap();
        replace(b"second!");
        let (b, m) = cache.open(&root, rel).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(m.len(), 5);
        // Trusted for 50 ms: seen once that has passed.
        let cache = OpenFiles::new(8, Duration::from_millis(50));
        let (a, _) = cache.open(&root, rel).unwrap();
        replace(b"third!!!");
        std::thread::sleep(Duration::from_millis(80));
        let (b, m) = cache.open(&root, rel).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(m.len(), 8);
    }
}

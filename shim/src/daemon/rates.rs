//! Bit rates of the files behind reported misses (`vodkit prefetchd --catalog`), so that
//! policies sizing prefetches by bit rate (`auto`, `sqrt:`, `proportional:`) see the same
//! rates under the preload library as under `vodkit serve --catalog`.
//!
//! The daemon only receives a descriptor; the file's path comes from
//! `/proc/self/fd/N` and is looked up in a [`BitrateMap`]: relative to `--root` when one is
//! given, otherwise by its longest trailing run of components the catalog lists. Each file
//! is resolved once per identity (device, inode, change time), so the hot path is one
//! hash lookup.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use vodkit_prefetch::BitrateMap;

/// Resolved files kept before the cache starts over (bounds memory on huge file sets).
const CACHE_LIMIT: usize = 1 << 20;

/// Where the daemon's bit rates come from.
#[derive(Debug, Clone)]
pub struct FileRates {
    map: BitrateMap,
    source: PathBuf,
    /// `--root` as the kernel spells it (symbolic links resolved), if given.
    root: Option<PathBuf>,
}

impl FileRates {
    /// The rates of `map` (read by the caller from `source`, a workload catalog.json or a
    /// path→kbps file) for files under `root` (`None`: match paths by suffix). Errors are
    /// one line naming the root.
    pub fn new(map: BitrateMap, source: &Path, root: Option<&Path>) -> Result<FileRates, String> {
        let root = root
            .map(|r| {
                std::fs::canonicalize(r)
                    .map_err(|e| format!("--root {}: cannot resolve it: {e}", r.display()))
            })
            .transpose()?;
        let map = match &root {
            Some(r) => map.with_root(r),
            None => map,
        };
        Ok(FileRates {
            map,
            source: source.to_path_buf(),
            root,
        })
    }

    /// The catalog file the rates came from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The root paths are taken relative to, if one was given.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Files with a known bit rate.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bit rate of the file at `path`, if listed.
    pub fn kbps_of_path(&self, path: &str) -> Option<u32> {
        match self.root {
            Some(_) => self.map.get(path),
            None => self.map.get_by_suffix(path),
        }
    }
}

/// A file's identity for the cache: device and inode, plus the change time so that an
/// inode reused by a new file is resolved again.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct FileKey {
    pub id: u64,
    pub ctime_ns: i128,
}

/// Per-file lookups, cached.
#[derive(Default)]
pub(crate) struct RateCache {
    known: Mutex<HashMap<FileKey, Option<u32>>>,
}

impl RateCache {
    /// Bit rate of `file` (identified by `key`) according to `rates`.
    pub(crate) fn kbps(&self, rates: &FileRates, key: FileKey, file: &File) -> Option<u32> {
        let cached = self.known.lock().ok().and_then(|m| m.get(&key).copied());
        if let Some(hit) = cached {
            return hit;
        }
        let kbps = path_of(file).and_then(|p| rates.kbps_of_path(&p));
        if let Ok(mut m) = self.known.lock() {
            if m.len() >= CACHE_LIMIT {
                m.clear();
            }
            m.insert(key, kbps);
        }
        kbps
    }
}

/// The path the kernel has for an open file (`None` when it cannot say).
fn path_of(file: &File) -> Option<String> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    link.into_os_string().into_string().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_under_the_root_or_by_suffix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("hd")).unwrap();
        let map = dir.join("rates.txt");
        std::fs::write(&map, "hd/a.dat 1676\n").unwrap();
        let rates = || BitrateMap::from_rates([("hd/a.dat".to_string(), 1676)]);
        let file = dir.join("hd/a.dat");
        std::fs::write(&file, b"x").unwrap();
        let real = std::fs::canonicalize(&file).unwrap();
        let real = real.to_str().unwrap();

        let by_suffix = FileRates::new(rates(), &map, None).unwrap();
        assert_eq!(by_suffix.kbps_of_path(real), Some(1676));
        let under_root = FileRates::new(rates(), &map, Some(&dir)).unwrap();
        assert_eq!(under_root.kbps_of_path(real), Some(1676));
        let elsewhere = FileRates::new(rates(), &map, Some(&dir.join("hd"))).unwrap();
        assert_eq!(elsewhere.kbps_of_path(real), None);

        let cache = RateCache::default();
        let key = FileKey { id: 7, ctime_ns: 1 };
        let f = File::open(&file).unwrap();
        assert_eq!(cache.kbps(&by_suffix, key, &f), Some(1676));
        // the cached answer is used for the same identity, whatever the descriptor
        let other = File::open(&map).unwrap();
        assert_eq!(cache.kbps(&by_suffix, key, &other), Some(1676));
        let e = FileRates::new(rates(), &map, Some(&dir.join("nope"))).unwrap_err();
        assert!(e.contains("nope") && !e.contains('\n'), "{e}");
    }
}

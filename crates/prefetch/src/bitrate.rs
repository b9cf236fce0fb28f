//! Bit rates of served files, for policies that size prefetches by bit rate.
//!
//! The caller builds the map from whatever it read (`vodkit_workload::bitrates` reads a
//! catalog or a path→kbps file) and hands it over typed. Paths are relative to the served
//! root; lookups accept URL paths (`/v/t3.dat`), relative paths, and absolute paths under
//! the configured root. Unknown files get the default rate.

use crate::policy::DEFAULT_BITRATE_KBPS;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Path → bit rate (kbit/s).
#[derive(Clone, Debug)]
pub struct BitrateMap {
    rates: HashMap<String, u32>,
    default_kbps: u32,
    root: Option<PathBuf>,
}

impl Default for BitrateMap {
    fn default() -> Self {
        BitrateMap {
            rates: HashMap::new(),
            default_kbps: DEFAULT_BITRATE_KBPS,
            root: None,
        }
    }
}

fn key(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

impl BitrateMap {
    /// An empty map: every file gets `default_kbps`.
    pub fn with_default(default_kbps: u32) -> Self {
        BitrateMap {
            default_kbps,
            ..Default::default()
        }
    }

    /// Strip `root` from absolute paths before looking them up.
    pub fn with_root(mut self, root: &Path) -> Self {
        self.root = Some(root.to_path_buf());
        self
    }

    pub fn set_default(&mut self, kbps: u32) {
        self.default_kbps = kbps;
    }

    pub fn default_kbps(&self) -> u32 {
        self.default_kbps
    }

    pub fn insert(&mut self, path: &str, kbps: u32) {
        self.rates.insert(key(path), kbps);
    }

    pub fn len(&self) -> usize {
        self.rates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rates.is_empty()
    }

    /// A map of `rates` (path → kbit/s, e.g. from `vodkit_workload::bitrates`) with the
    /// policy default for other files.
    pub fn from_rates(rates: impl IntoIterator<Item = (String, u32)>) -> Self {
        let mut m = BitrateMap::default();
        for (p, k) in rates {
            m.insert(&p, k);
        }
        m
    }

    /// Known bit rate of a file, if any.
    pub fn get(&self, path: &str) -> Option<u32> {
        if let Some(&k) = self.rates.get(path.trim_start_matches('/')) {
            return Some(k);
        }
        let root = self.root.as_ref()?;
        let rel = Path::new(path).strip_prefix(root).ok()?;
        self.rates.get(rel.to_str()?).copied()
    }

    /// Known bit rate of a file named by a path whose root is unknown (say an absolute
    /// path a process resolved): the longest trailing run of its components that the map
    /// holds, e.g. `/srv/www/hd/t1.dat` finds `hd/t1.dat`.
    pub fn get_by_suffix(&self, path: &str) -> Option<u32> {
        if let Some(k) = self.get(path) {
            return Some(k);
        }
        let mut rest = path.trim_start_matches('/');
        while let Some((_, tail)) = rest.split_once('/') {
            if let Some(&k) = self.rates.get(tail) {
                return Some(k);
            }
            rest = tail;
        }
        None
    }

    /// Bit rate of a file, or the default.
    pub fn kbps(&self, path: &str) -> u32 {
        self.get(path).unwrap_or(self.default_kbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_by_url_path_root_and_suffix() {
        let m = BitrateMap::from_rates([
            ("sd/t1.dat".to_string(), 419),
            ("/hd/t1.dat".to_string(), 2095),
        ])
        .with_root(Path::new("/srv/www"));
        assert_eq!(m.len(), 2);
        assert_eq!(m.kbps("/hd/t1.dat"), 2095);
        assert_eq!(m.kbps("sd/t1.dat"), 419);
        assert_eq!(m.kbps("/srv/www/hd/t1.dat"), 2095);
        assert_eq!(m.get("/other.dat"), None);
        assert_eq!(m.kbps("/other.dat"), DEFAULT_BITRATE_KBPS);
        assert_eq!(m.get_by_suffix("/mnt/disk/files/hd/t1.dat"), Some(2095));
        assert_eq!(m.get_by_suffix("sd/t1.dat"), Some(419));
        assert_eq!(m.get_by_suffix("/mnt/disk/t1.dat"), None);
        assert_eq!(m.get_by_suffix("/mnt/hd/other.dat"), None);
        let mut d = BitrateMap::with_default(800);
        assert!(d.is_empty());
        assert_eq!(d.kbps("/x"), 800);
        d.set_default(900);
        assert_eq!((d.default_kbps(), d.kbps("/x")), (900, 900));
    }
}

//! Bit rates of served files, for policies that size prefetches by bit rate.
//!
//! Sources: a workload `catalog.json` (every rendition's files get its `bitrate_kbps`), a
//! JSON object `{"path": kbps, ...}`, or a text file with one `path kbps` pair per line
//! (`#` starts a comment). Paths are relative to the served root; lookups accept URL paths
//! (`/v/t3.dat`), relative paths, and absolute paths under the configured root. Unknown
//! files get the default rate.

use crate::policy::DEFAULT_BITRATE_KBPS;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use vodkit_workload::model::Catalog;

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

/// A bit-rate file that could not be read; one line naming the file (and line).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BitrateError(String);

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

    /// Every file of every rendition in the catalog.
    pub fn from_catalog(catalog: &Catalog) -> Self {
        let mut m = BitrateMap::default();
        for title in &catalog.titles {
            for r in &title.renditions {
                for f in &r.files {
                    m.insert(&f.path, r.bitrate_kbps);
                }
            }
        }
        m
    }

    /// Loads a catalog, a JSON map or a text map, telling them apart by content.
    pub fn load(path: &Path) -> Result<Self, BitrateError> {
        let name = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| BitrateError(format!("{name}: cannot read bit rates: {e}")))?;
        if text.trim_start().starts_with('{') {
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| BitrateError(format!("{name}:{}: invalid JSON: {e}", e.line())))?;
            if value.get("titles").is_some() {
                let catalog: Catalog = serde_json::from_value(value)
                    .map_err(|e| BitrateError(format!("{name}: not a valid catalog.json: {e}")))?;
                return Ok(Self::from_catalog(&catalog));
            }
            let obj: HashMap<String, u32> = serde_json::from_value(value).map_err(|e| {
                BitrateError(format!(
                    "{name}: expected a JSON object of path: kbps (positive integers): {e}"
                ))
            })?;
            let mut m = BitrateMap::default();
            for (p, k) in obj {
                m.insert(&p, k);
            }
            return Ok(m);
        }
        Self::parse_text(&text)
            .map_err(|(line, what)| BitrateError(format!("{name}:{line}: {what}")))
    }

    /// `path kbps` per line; errors carry the line number.
    pub fn parse_text(text: &str) -> Result<Self, (usize, String)> {
        let mut m = BitrateMap::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(p), Some(k), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err((i + 1, format!("expected `PATH KBPS`, got `{line}`")));
            };
            let kbps = k
                .parse::<u32>()
                .ok()
                .filter(|&k| k > 0)
                .ok_or_else(|| (i + 1, format!("`{k}` is not a bit rate in kbit/s")))?;
            m.insert(p, kbps);
        }
        Ok(m)
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
    use vodkit_workload::model::{FileRef, Layout, Media, Rendition, Title};

    #[test]
    fn catalog_renditions_give_rates() {
        let catalog = Catalog {
            spec: "t".into(),
            seed: 1,
            titles: vec![Title {
                id: 1,
                rank: 1,
                duration_s: 10.0,
                renditions: vec![
                    Rendition {
                        bitrate_kbps: 419,
                        media: Media::Combined,
                        size_bytes: 10,
                        layout: Layout::Unchunked,
                        files: vec![FileRef {
                            path: "sd/t1.dat".into(),
                            size_bytes: 10,
                        }],
                    },
                    Rendition {
                        bitrate_kbps: 2095,
                        media: Media::Combined,
                        size_bytes: 10,
                        layout: Layout::Unchunked,
                        files: vec![FileRef {
                            path: "hd/t1.dat".into(),
                            size_bytes: 10,
                        }],
                    },
                ],
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.json");
        std::fs::write(&path, serde_json::to_string(&catalog).unwrap()).unwrap();
        let m = BitrateMap::load(&path)
            .unwrap()
            .with_root(Path::new("/srv/www"));
        assert_eq!(m.kbps("/hd/t1.dat"), 2095);
        assert_eq!(m.kbps("sd/t1.dat"), 419);
        assert_eq!(m.kbps("/srv/www/hd/t1.dat"), 2095);
        assert_eq!(m.get("/other.dat"), None);
        assert_eq!(m.kbps("/other.dat"), DEFAULT_BITRATE_KBPS);
        assert_eq!(m.get_by_suffix("/mnt/disk/files/hd/t1.dat"), Some(2095));
        assert_eq!(m.get_by_suffix("sd/t1.dat"), Some(419));
        assert_eq!(m.get_by_suffix("/mnt/disk/t1.dat"), None);
        assert_eq!(m.get_by_suffix("/mnt/hd/other.dat"), None);
    }

    #[test]
    fn text_and_json_maps() {
        let m = BitrateMap::parse_text("# comment\n/a.mp4 800\n\nb.mp4 3000 # hd\n").unwrap();
        assert_eq!((m.kbps("a.mp4"), m.kbps("/b.mp4")), (800, 3000));
        assert_eq!(BitrateMap::parse_text("a.mp4\n").unwrap_err().0, 1);
        let err = BitrateMap::parse_text("ok 1\nbad fast\n").unwrap_err();
        assert_eq!(err.0, 2);
        assert!(err.1.contains("fast"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rates.json");
        std::fs::write(&p, r#"{"/x.ts": 1200}"#).unwrap();
        assert_eq!(BitrateMap::load(&p).unwrap().kbps("x.ts"), 1200);
        std::fs::write(&p, r#"{"/x.ts": "fast"}"#).unwrap();
        let e = BitrateMap::load(&p).unwrap_err().to_string();
        assert!(e.contains("rates.json") && !e.contains('\n'), "{e}");
        let t = dir.path().join("rates.txt");
        std::fs::write(&t, "a 1\nb -3\n").unwrap();
        let e = BitrateMap::load(&t).unwrap_err().to_string();
        assert!(e.contains("rates.txt:2:"), "{e}");
    }
}

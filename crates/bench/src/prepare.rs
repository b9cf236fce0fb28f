//! Preparing what a bench serves, once, cached by content key: the workload directory
//! (generated with the workload library from a spec, scale and overrides) and the file set
//! written from its catalog by `vodkit fileset create`'s library call.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use vodkit_workload::fileset::{self, CreateOptions, Marker};
use vodkit_workload::model::Catalog;
use vodkit_workload::WorkloadDir;

/// Cache directory for generated workloads and file sets: `$VODKIT_CACHE`, else
/// `/var/cache/vodkit/bench` for root, else `$XDG_CACHE_HOME/vodkit/bench`, else
/// `~/.cache/vodkit/bench`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("VODKIT_CACHE") {
        return PathBuf::from(d);
    }
    // As root, servers drop to unprivileged users (Apache: nobody), who cannot enter
    // /root: keep the file sets where they can.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/cache/vodkit/bench");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("vodkit").join("bench")
}

fn key(parts: &[&str]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Generate (or reuse) the workload for `spec` with `sets` at `scale` under `cache`.
pub fn workload(spec: &str, sets: &[&str], scale: f64, cache: &Path) -> Result<PathBuf, String> {
    let scale_text = scale.to_string();
    let mut parts = vec![spec, scale_text.as_str()];
    parts.extend_from_slice(sets);
    let dir = cache.join(format!("workload-{spec}-{}", key(&parts)));
    let w = WorkloadDir::new(&dir);
    if w.sessions_path().is_file() && w.existing_catalog().is_some() {
        return Ok(dir);
    }
    let pairs = sets
        .iter()
        .map(|s| vodkit_workload::spec::split_set(s).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let checked = vodkit_workload::spec::load(spec, &pairs, scale).map_err(|e| e.to_string())?;
    let seed = checked.spec.seed;
    let plan = vodkit_workload::generate::Plan::new(checked, seed);
    let tmp = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    vodkit_workload::generate::write_workload(&plan, &tmp)
        .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Read a workload's catalog.json (file paths checked as `vodkit fileset` checks them).
pub fn catalog(workload: &Path) -> Result<Catalog, String> {
    WorkloadDir::new(workload)
        .catalog()
        .map_err(|e| e.to_string())
}

/// Bytes of every file in the catalog.
pub fn fileset_bytes(c: &Catalog) -> u64 {
    c.titles
        .iter()
        .flat_map(|t| &t.renditions)
        .flat_map(|r| &r.files)
        .map(|f| f.size_bytes)
        .sum()
}

/// Write the catalog's files under `root` with `vodkit fileset create` (its library call):
/// complete files are kept, partial ones finished, in title order, with the deterministic
/// content so clients can verify every byte. `progress(written, to_write)` follows it.
pub fn write_fileset(
    c: &Catalog,
    root: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<(), String> {
    adopt_unmarked(c, root)?;
    let opts = CreateOptions {
        layout: None,
        progress: false,
        backing_image: vodkit_disk::testbed::image_behind(root),
    };
    fileset::create_with_progress(c, root, &opts, &mut progress)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Bench versions before the library call wrote file sets without `vodkit fileset`'s
/// marker, which `create` requires before it touches a non-empty directory. A root that
/// holds nothing but files of this catalog is one of those: mark it as this catalog's so
/// its files are reused (sizes and partial tails are checked by `create` as usual).
fn adopt_unmarked(c: &Catalog, root: &Path) -> Result<(), String> {
    let marker = root.join(fileset::MARKER);
    if marker.exists() || !root.is_dir() {
        return Ok(());
    }
    let ours: std::collections::HashSet<PathBuf> = fileset::planned_files(c, None)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(_, f)| PathBuf::from(f.path))
        .collect();
    let mut found = Vec::new();
    list_files(root, root, &mut found).map_err(|e| format!("{}: {e}", root.display()))?;
    if found.is_empty() || !found.iter().all(|f| ours.contains(f)) {
        // Empty: `create` claims it. Foreign files: `create` refuses with its own reason.
        return Ok(());
    }
    let m = Marker {
        spec: c.spec.clone(),
        seed: c.seed,
        digest: fileset::catalog_digest(c),
        layouts: Vec::new(),
    };
    let text = serde_json::to_string_pretty(&m).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&marker, text).map_err(|e| format!("{}: {e}", marker.display()))
}

/// Every non-directory entry under `dir`, relative to `root`.
fn list_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            list_files(root, &path, out)?;
        } else {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// Sequential read of the files the sessions request, in catalog order, after dropping
/// the page cache: the disk's practical ceiling for this file set (thesis 3.7.2 used `wc`).
/// Returns MB/s (10^6 bytes).
pub fn sequential_read_mb_s(
    c: &Catalog,
    root: &Path,
    wanted: &std::collections::HashSet<String>,
    limit_bytes: u64,
) -> Result<f64, String> {
    crate::experiment::drop_page_cache()?;
    let mut buf = vec![0u8; 1 << 20];
    let start = std::time::Instant::now();
    let mut read = 0u64;
    let files = c
        .titles
        .iter()
        .flat_map(|t| &t.renditions)
        .flat_map(|r| &r.files);
    for f in files.filter(|f| wanted.contains(f.path.trim_start_matches('/'))) {
        let path = root.join(f.path.trim_start_matches('/'));
        let mut file =
            std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        loop {
            let n = std::io::Read::read(&mut file, &mut buf)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if n == 0 {
                break;
            }
            read += n as u64;
        }
        if read >= limit_bytes {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-6);
    Ok(read as f64 / 1e6 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_key_depends_on_every_part() {
        assert_ne!(key(&["a", "1"]), key(&["a", "2"]));
        assert_eq!(key(&["a", "1"]), key(&["a", "1"]));
    }

    fn tiny_workload(dir: &Path) -> (PathBuf, Catalog) {
        let w = workload("youtube-2011", &[], 0.001, dir).unwrap();
        let mut c = catalog(&w).unwrap();
        // Keep the test fast: a handful of titles.
        c.titles.truncate(3);
        (w, c)
    }

    fn written(c: &Catalog, root: &Path) -> u64 {
        let mut last = 0;
        write_fileset(c, root, |w, t| {
            assert!(w <= t);
            last = w;
        })
        .unwrap();
        last
    }

    #[test]
    fn file_set_is_written_once_then_reused_and_repaired() {
        if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (_, c) = tiny_workload(dir.path());
        let root = dir.path().join("files");
        assert_eq!(written(&c, &root), fileset_bytes(&c));
        let report = fileset::verify(&c, &root, None, false).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(written(&c, &root), 0, "a complete file set is reused");
        let first = &c.titles[0].renditions[0].files[0];
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join(&first.path))
            .unwrap();
        f.set_len(first.size_bytes / 2).unwrap();
        assert_eq!(written(&c, &root), first.size_bytes - first.size_bytes / 2);
        assert!(fileset::verify(&c, &root, None, false)
            .unwrap()
            .problems
            .is_empty());
    }

    #[test]
    fn a_file_set_from_the_earlier_bench_writer_is_adopted_and_foreign_files_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_, c) = tiny_workload(dir.path());
        let root = dir.path().join("files");
        written(&c, &root);
        // What earlier bench versions left: the files without the marker.
        std::fs::remove_file(root.join(fileset::MARKER)).unwrap();
        assert_eq!(written(&c, &root), 0, "adopted, nothing rewritten");
        assert!(root.join(fileset::MARKER).is_file());
        // A directory with someone else's file is not adopted; `create` refuses it.
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        let e = write_fileset(&c, &other, |_, _| {}).unwrap_err();
        assert!(e.contains("notes.txt"), "{e}");
        assert!(!other.join(fileset::MARKER).exists());
    }
}

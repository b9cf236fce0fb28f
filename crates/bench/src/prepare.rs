//! Preparing what a bench serves, once, cached by content key: the workload directory
//! (generated with the workload library from a spec, scale and overrides) and the file set
//! written from its catalog with the deterministic content function.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use vodkit_workload::model::Catalog;

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
    if dir.join("sessions.jsonl").is_file() && dir.join("catalog.json").is_file() {
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

/// Read a workload's catalog.json.
pub fn catalog(workload: &Path) -> Result<Catalog, String> {
    let p = workload.join("catalog.json");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}:{}: {e}", p.display(), e.line()))
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

/// Write the catalog's files under `root` (skipping files already of the right size), in
/// catalog order, with the deterministic content so clients can verify every byte.
/// Interim writer until `vodkit fileset create` (issue #2) is available as a library call.
pub fn write_fileset(
    c: &Catalog,
    root: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<(), String> {
    let total = fileset_bytes(c);
    let mut done = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for f in c
        .titles
        .iter()
        .flat_map(|t| &t.renditions)
        .flat_map(|r| &r.files)
    {
        let rel = f.path.trim_start_matches('/');
        let path = root.join(rel);
        if std::fs::metadata(&path)
            .map(|m| m.len() == f.size_bytes)
            .unwrap_or(false)
        {
            done += f.size_bytes;
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
        let k = vodkit_workload::content::path_key(rel);
        let mut off = 0u64;
        while off < f.size_bytes {
            let n = buf.len().min((f.size_bytes - off) as usize);
            vodkit_workload::content::fill(k, off, &mut buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| format!("{}: {e}", path.display()))?;
            off += n as u64;
        }
        out.flush()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        done += f.size_bytes;
        progress(done, total);
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
}

//! Where the process's cgroups are and what they allow: the one reading of
//! `/proc/self/cgroup` for every crate that needs it. cgroup v1 (a hierarchy per controller,
//! `/sys/fs/cgroup/CONTROLLER/…`) and v2 (one hierarchy, `/sys/fs/cgroup/…`, or
//! `/sys/fs/cgroup/unified/…` on a hybrid host) are both read.
//!
//! [`own`] finds the directory a controller's cgroup of this process is in (where a budget
//! cgroup is created below it); [`memory_limit`] and [`cpu_limit`] read the limits the
//! process runs under, from its cgroup or the nearest limited ancestor. Every function
//! has an `_in` form that takes the `/proc/self/cgroup` text and the hierarchy root, for
//! tests.

use std::path::{Path, PathBuf};

/// The cgroup interface of a hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The process's membership file.
pub const PROC_CGROUP: &str = "/proc/self/cgroup";
/// Where the hierarchies are mounted.
pub const ROOT: &str = "/sys/fs/cgroup";

/// The directories of the process's cgroups that may hold `controller`'s files, in
/// `/proc/self/cgroup` order: a v1 hierarchy that lists the controller
/// (`root/controller/…`) and the v2 one (`root/…`).
pub fn controller_dirs<'a>(
    proc_cgroup_text: &'a str,
    root: &'a Path,
    controller: &'a str,
) -> impl Iterator<Item = (PathBuf, CgroupVersion)> + 'a {
    proc_cgroup_text.lines().filter_map(move |line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            Some((root.join(rel), CgroupVersion::V2))
        } else if controllers.split(',').any(|c| c == controller) {
            Some((root.join(controller).join(rel), CgroupVersion::V1))
        } else {
            None
        }
    })
}

/// The process's cgroup directory for `controller` and its interface: on cgroup v1 the
/// controller's own hierarchy (recognised by its file `v1_file`), else the v2 hierarchy
/// that offers the controller; an error saying which controller is missing.
pub fn own(controller: &str, v1_file: &str) -> Result<(PathBuf, CgroupVersion), String> {
    let text = std::fs::read_to_string(PROC_CGROUP).map_err(|e| format!("{PROC_CGROUP}: {e}"))?;
    own_in(&text, Path::new(ROOT), controller, v1_file).ok_or_else(|| {
        format!(
            "no {controller} cgroup controller is mounted (need cgroup v1 {controller} or v2 with {controller})"
        )
    })
}

/// [`own`] for the membership text `proc_cgroup_text` and the hierarchies under `root`.
pub fn own_in(
    proc_cgroup_text: &str,
    root: &Path,
    controller: &str,
    v1_file: &str,
) -> Option<(PathBuf, CgroupVersion)> {
    let v1 = controller_dirs(proc_cgroup_text, root, controller)
        .find(|(dir, v)| *v == CgroupVersion::V1 && dir.join(v1_file).exists());
    if v1.is_some() {
        return v1;
    }
    for unified in [root.to_path_buf(), root.join("unified")] {
        let offered =
            std::fs::read_to_string(unified.join("cgroup.controllers")).unwrap_or_default();
        if offered.split_whitespace().any(|c| c == controller) {
            let path = proc_cgroup_text
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            return Some((
                unified.join(path.trim_start_matches('/')),
                CgroupVersion::V2,
            ));
        }
    }
    None
}

/// The memory limit (bytes) of the process's cgroup or its nearest limited ancestor (v2
/// `memory.max`, v1 `memory.limit_in_bytes`); `None` when no level sets one.
pub fn memory_limit() -> Option<u64> {
    memory_limit_in(Path::new(PROC_CGROUP), Path::new(ROOT))
}

/// [`memory_limit`] for the membership file `proc_cgroup` and the hierarchies under `root`.
pub fn memory_limit_in(proc_cgroup: &Path, root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_cgroup).ok()?;
    let limit = controller_dirs(&text, root, "memory").find_map(|(dir, version)| {
        let file = match version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        nearest_limit(&dir, root, file)
    });
    limit
}

/// Walks from `dir` up to `root` and returns the first real limit in `file`.
fn nearest_limit(dir: &Path, root: &Path, file: &str) -> Option<u64> {
    let mut at = Some(dir);
    while let Some(d) = at {
        if let Ok(v) = std::fs::read_to_string(d.join(file)) {
            let v = v.trim();
            // v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages).
            if let Ok(n) = v.parse::<u64>() {
                if n < (1u64 << 60) {
                    return Some(n);
                }
            }
        }
        if d == root {
            break;
        }
        at = d.parent();
    }
    None
}

/// The CPU bandwidth the process's cgroup and its ancestors allow, in cores (v2 `cpu.max`,
/// v1 `cpu.cfs_quota_us` over `cpu.cfs_period_us`): the smallest quota on the way up to
/// the root; `None` when no level sets one.
pub fn cpu_limit() -> Option<f64> {
    cpu_limit_in(Path::new(PROC_CGROUP), Path::new(ROOT))
}

/// [`cpu_limit`] for the membership file `proc_cgroup` and the hierarchies under `root`.
pub fn cpu_limit_in(proc_cgroup: &Path, root: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(proc_cgroup).ok()?;
    let mut limit: Option<f64> = None;
    for (dir, version) in controller_dirs(&text, root, "cpu") {
        let mut at = Some(dir.as_path());
        while let Some(d) = at.filter(|d| d.starts_with(root)) {
            let quota = match version {
                CgroupVersion::V1 => {
                    let read = |f: &str| std::fs::read_to_string(d.join(f)).ok();
                    match (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
                        (Some(q), Some(p)) => cores(q.trim(), p.trim()),
                        _ => None,
                    }
                }
                CgroupVersion::V2 => {
                    std::fs::read_to_string(d.join("cpu.max"))
                        .ok()
                        .and_then(|t| {
                            let mut f = t.split_whitespace();
                            cores(f.next()?, f.next().unwrap_or("100000"))
                        })
                }
            };
            if let Some(q) = quota {
                limit = Some(limit.map_or(q, |l: f64| l.min(q)));
            }
            at = d.parent();
        }
    }
    limit
}

/// `quota` over `period` microseconds in cores; `None` for "no limit" (`max`, `-1`) or bad text.
fn cores(quota: &str, period: &str) -> Option<f64> {
    let (q, p): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
    (q > 0.0 && p > 0.0).then(|| q / p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_limited_cgroup_wins() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/memory.max"), "max\n").unwrap();
        std::fs::write(root.join("a/memory.max"), "268435456\n").unwrap();
        let cg = root.join("cgroup");
        std::fs::write(&cg, "0::/a/b\n").unwrap();
        assert_eq!(memory_limit_in(&cg, root), Some(256 << 20));
        std::fs::write(root.join("a/memory.max"), "max\n").unwrap();
        assert_eq!(memory_limit_in(&cg, root), None, "no limit anywhere");
        // cgroup v1
        std::fs::create_dir_all(root.join("memory/x")).unwrap();
        std::fs::write(root.join("memory/x/memory.limit_in_bytes"), "1073741824\n").unwrap();
        std::fs::write(&cg, "4:memory:/x\n").unwrap();
        assert_eq!(memory_limit_in(&cg, root), Some(1 << 30));
    }

    #[test]
    fn the_smallest_cpu_quota_on_the_way_up_wins() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let cg = root.join("cgroup");
        std::fs::write(&cg, "0::/a/b\n").unwrap();
        assert_eq!(cpu_limit_in(&cg, root), None, "no cpu.max anywhere");
        std::fs::write(root.join("a/b/cpu.max"), "max 100000\n").unwrap();
        std::fs::write(root.join("a/cpu.max"), "150000 100000\n").unwrap();
        assert_eq!(cpu_limit_in(&cg, root), Some(1.5));
        std::fs::write(root.join("a/b/cpu.max"), "25000 100000\n").unwrap();
        assert_eq!(cpu_limit_in(&cg, root), Some(0.25));
        std::fs::write(root.join("a/b/cpu.max"), "nonsense\n").unwrap();
        assert_eq!(cpu_limit_in(&cg, root), Some(1.5), "bad text is no limit");
        // cgroup v1 (the unified line of a hybrid host has no cpu.max: skipped)
        std::fs::create_dir_all(root.join("cpu/x/y")).unwrap();
        std::fs::write(root.join("cpu/x/y/cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::write(root.join("cpu/x/y/cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(root.join("cpu/x/cpu.cfs_quota_us"), "50000\n").unwrap();
        std::fs::write(root.join("cpu/x/cpu.cfs_period_us"), "200000\n").unwrap();
        std::fs::write(&cg, "2:cpuacct:/x/y\n1:cpu:/x/y\n0::/\n").unwrap();
        assert_eq!(cpu_limit_in(&cg, root), Some(0.25));
        assert_eq!(cores("max", "100000"), None);
        assert_eq!(cores("-1", "100000"), None);
        assert_eq!(cores("0", "100000"), None);
    }

    #[test]
    fn the_own_cgroup_is_the_v1_hierarchy_with_the_file_else_the_v2_one_offering_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let text = "4:memory:/x\n0::/a\n";
        let memory = || own_in(text, root, "memory", "memory.limit_in_bytes");
        // Neither a v1 hierarchy with the file nor a v2 one offering the controller.
        assert_eq!(memory(), None);
        // v2 offering it (on a hybrid host, under unified/).
        std::fs::create_dir_all(root.join("unified")).unwrap();
        std::fs::write(root.join("unified/cgroup.controllers"), "cpu memory io\n").unwrap();
        assert_eq!(memory(), Some((root.join("unified/a"), CgroupVersion::V2)));
        assert_eq!(own_in(text, root, "pids", "pids.max"), None);
        // The v1 hierarchy, recognised by its file, comes first.
        std::fs::create_dir_all(root.join("memory/x")).unwrap();
        std::fs::write(root.join("memory/x/memory.limit_in_bytes"), "1\n").unwrap();
        assert_eq!(memory(), Some((root.join("memory/x"), CgroupVersion::V1)));
    }
}

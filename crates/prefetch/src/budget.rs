//! How much memory the server may fill with file data: `--memory`, else the memory cgroup's
//! limit, else the machine's RAM (Linux: `/proc/self/cgroup`, `/sys/fs/cgroup`,
//! `/proc/meminfo`); and how much CPU time its cgroup allows ([`cpu_limit`]), which sizes
//! the server's event loops.

use std::path::{Path, PathBuf};

/// Where a budget came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetSource {
    /// Given by the user (`--memory`).
    Flag,
    /// The limit of the cgroup the process runs in (v2 `memory.max`, v1
    /// `memory.limit_in_bytes`), the nearest limited ancestor.
    Cgroup,
    /// `MemTotal` of `/proc/meminfo`.
    Ram,
}

impl BudgetSource {
    pub fn name(self) -> &'static str {
        match self {
            BudgetSource::Flag => "--memory",
            BudgetSource::Cgroup => "cgroup limit",
            BudgetSource::Ram => "total RAM",
        }
    }
}

/// `--memory` of `vodkit serve` and `vodkit prefetchd`: whether the engine runs the memory
/// manager, and with which budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemorySetting {
    /// No manager: the kernel's LRU decides, the policy alone sizes prefetches.
    Off,
    /// Manager on, budget from the cgroup limit or total RAM.
    #[default]
    Auto,
    /// Manager on with this budget (bytes).
    Budget(u64),
}

impl MemorySetting {
    /// The manager's configuration (`None` when off).
    pub fn config(self) -> Option<crate::memory::MemoryConfig> {
        match self {
            MemorySetting::Off => None,
            MemorySetting::Auto => Some(crate::memory::MemoryConfig::for_budget(detect(None).0)),
            MemorySetting::Budget(b) => Some(crate::memory::MemoryConfig::for_budget(b)),
        }
    }

    /// Where the budget comes from (meaningless when off).
    pub fn source(self) -> BudgetSource {
        match self {
            MemorySetting::Budget(_) => BudgetSource::Flag,
            _ => detect(None).1,
        }
    }
}

impl From<vodkit_units::Memory> for MemorySetting {
    fn from(m: vodkit_units::Memory) -> Self {
        match m {
            vodkit_units::Memory::Off => MemorySetting::Off,
            vodkit_units::Memory::Auto => MemorySetting::Auto,
            vodkit_units::Memory::Size(b) => MemorySetting::Budget(b),
        }
    }
}

impl std::str::FromStr for MemorySetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(vodkit_units::parse_memory(s)?.into())
    }
}

/// The budget: `flag` if given, else the cgroup's limit, else total RAM (1 GiB if even that
/// cannot be read).
pub fn detect(flag: Option<u64>) -> (u64, BudgetSource) {
    if let Some(b) = flag {
        return (b, BudgetSource::Flag);
    }
    if let Some(b) = cgroup_limit(Path::new("/proc/self/cgroup"), Path::new("/sys/fs/cgroup")) {
        return (b, BudgetSource::Cgroup);
    }
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| mem_total(&t))
        .unwrap_or(1 << 30);
    (ram, BudgetSource::Ram)
}

/// `MemTotal` in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory limit of the process's cgroup or its nearest limited ancestor.
fn cgroup_limit(proc_cgroup: &Path, root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_cgroup).ok()?;
    let limit = controller_dirs(&text, root, "memory").find_map(|(dir, v1)| {
        let file = if v1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        nearest_limit(&dir, root, file)
    });
    limit
}

/// The directories of the process's cgroups that may hold `controller`'s files, in
/// `/proc/self/cgroup` order, each with whether it is a v1 hierarchy (`root/controller/…`)
/// rather than the v2 one (`root/…`).
fn controller_dirs<'a>(
    proc_cgroup_text: &'a str,
    root: &'a Path,
    controller: &'a str,
) -> impl Iterator<Item = (PathBuf, bool)> + 'a {
    proc_cgroup_text.lines().filter_map(move |line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            Some((root.join(rel), false))
        } else if controllers.split(',').any(|c| c == controller) {
            Some((root.join(controller).join(rel), true))
        } else {
            None
        }
    })
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
    cpu_limit_in(Path::new("/proc/self/cgroup"), Path::new("/sys/fs/cgroup"))
}

fn cpu_limit_in(proc_cgroup: &Path, root: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(proc_cgroup).ok()?;
    let mut limit: Option<f64> = None;
    for (dir, v1) in controller_dirs(&text, root, "cpu") {
        let mut at = Some(dir.as_path());
        while let Some(d) = at.filter(|d| d.starts_with(root)) {
            let quota = if v1 {
                let read = |f: &str| std::fs::read_to_string(d.join(f)).ok();
                match (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
                    (Some(q), Some(p)) => cores(q.trim(), p.trim()),
                    _ => None,
                }
            } else {
                std::fs::read_to_string(d.join("cpu.max"))
                    .ok()
                    .and_then(|t| {
                        let mut f = t.split_whitespace();
                        cores(f.next()?, f.next().unwrap_or("100000"))
                    })
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
    fn meminfo_total_is_read_in_bytes() {
        assert_eq!(
            mem_total("MemTotal:       1000 kB\nMemFree: 5 kB\n"),
            Some(1_024_000)
        );
        assert_eq!(mem_total("MemFree: 5 kB\n"), None);
    }

    #[test]
    fn the_nearest_limited_cgroup_wins() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/memory.max"), "max\n").unwrap();
        std::fs::write(root.join("a/memory.max"), "268435456\n").unwrap();
        let cg = root.join("cgroup");
        std::fs::write(&cg, "0::/a/b\n").unwrap();
        assert_eq!(cgroup_limit(&cg, root), Some(256 << 20));
        std::fs::write(root.join("a/memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit(&cg, root), None, "no limit anywhere");
        // cgroup v1
        std::fs::create_dir_all(root.join("memory/x")).unwrap();
        std::fs::write(root.join("memory/x/memory.limit_in_bytes"), "1073741824\n").unwrap();
        std::fs::write(&cg, "4:memory:/x\n").unwrap();
        assert_eq!(cgroup_limit(&cg, root), Some(1 << 30));
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
    fn memory_settings_parse() {
        assert_eq!("off".parse(), Ok(MemorySetting::Off));
        assert_eq!("auto".parse(), Ok(MemorySetting::Auto));
        assert_eq!("256MiB".parse(), Ok(MemorySetting::Budget(256 << 20)));
        let e = "lots".parse::<MemorySetting>().unwrap_err();
        assert!(e.contains("lots") && e.contains("1GiB"), "{e}");
        assert!("0".parse::<MemorySetting>().is_err());
        assert_eq!(MemorySetting::Off.config(), None);
        assert_eq!(
            MemorySetting::Budget(1 << 30)
                .config()
                .map(|c| c.budget_bytes),
            Some(1 << 30)
        );
    }

    #[test]
    fn a_flag_overrides_everything() {
        assert_eq!(detect(Some(123)), (123, BudgetSource::Flag));
        let (b, _) = detect(None);
        assert!(b > 0);
    }
}

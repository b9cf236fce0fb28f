//! CPU quotas for a server under test: a cgroup with a CFS bandwidth limit (v1
//! `cpu.cfs_quota_us`, v2 `cpu.max`), so a server can be given, say, half a core.
//!
//! The bench shares one machine between the server and the load generator. Where the
//! content is served from memory (seed 004's popular cells) neither the disk nor the server
//! gives out first: the machine stops delivering what the clients are offered while both
//! are half idle. A quota smaller than what either side needs there makes the server the
//! resource that saturates, as it was on the seed's dedicated server, and its capacity
//! then measures how much CPU each server spends per viewer. Needs root, like
//! [`crate::memory`].

use crate::memory::{CgroupVersion, Error};
use std::path::{Path, PathBuf};
use std::process::Command;

/// CFS period of every quota (the kernel's default, 100 ms).
pub const PERIOD_US: u64 = 100_000;

/// Smallest quota the kernel accepts per period (1 ms).
const MIN_QUOTA_US: u64 = 1_000;

/// A cgroup whose processes together get at most `cores` CPUs' worth of time.
#[derive(Debug)]
pub struct CpuQuota {
    dir: PathBuf,
    cores: f64,
}

/// The caller's CPU cgroup directory and the interface version.
pub fn own_cpu_cgroup() -> Result<(PathBuf, CgroupVersion), Error> {
    crate::memory::own_cgroup("cpu", "cpu.cfs_quota_us")
}

/// The quota in microseconds per [`PERIOD_US`] for `cores` CPUs, or why it cannot be one.
pub fn quota_us(cores: f64) -> Result<u64, Error> {
    if !cores.is_finite() || cores <= 0.0 {
        return Err(Error::Unsupported(format!(
            "CPU quota {cores}: expected a positive number of cores (e.g. 0.5)"
        )));
    }
    let us = (cores * PERIOD_US as f64).round();
    if us < MIN_QUOTA_US as f64 {
        return Err(Error::Unsupported(format!(
            "CPU quota {cores}: below the kernel's smallest, {} cores",
            MIN_QUOTA_US as f64 / PERIOD_US as f64
        )));
    }
    Ok(us as u64)
}

impl CpuQuota {
    /// Create a cgroup named `name` below the caller's CPU cgroup, limited to `cores` CPUs.
    pub fn create(name: &str, cores: f64) -> Result<Self, Error> {
        let quota = quota_us(cores)?;
        let (parent, version) = own_cpu_cgroup()?;
        if version == CgroupVersion::V2 {
            // Children only get the controller when the parent hands it down.
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+cpu");
        }
        let dir = parent.join(name);
        crate::memory::create_cgroup_dir(&dir)?;
        let q = CpuQuota { dir, cores };
        let writes: Vec<(&str, String)> = match version {
            CgroupVersion::V1 => vec![
                ("cpu.cfs_period_us", PERIOD_US.to_string()),
                ("cpu.cfs_quota_us", quota.to_string()),
            ],
            CgroupVersion::V2 => vec![("cpu.max", format!("{quota} {PERIOD_US}"))],
        };
        for (file, value) in writes {
            if let Err(e) = std::fs::write(q.dir.join(file), &value) {
                let err = Error::Io {
                    context: format!("{}/{file}", q.dir.display()),
                    cause: e,
                };
                let _ = q.remove();
                return Err(err);
            }
        }
        Ok(q)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CPUs' worth of time the cgroup may use.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// File a process joins the quota through.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Make `cmd` join the quota between fork and exec.
    pub fn confine(&self, cmd: &mut Command) -> Result<(), Error> {
        crate::memory::confine_to(&self.procs_file(), cmd)
    }

    /// Periods in which the cgroup ran out of its quota, so far (`cpu.stat` `nr_throttled`).
    pub fn throttled_periods(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Kill what is left inside and remove the cgroup.
    pub fn remove(self) -> Result<(), Error> {
        crate::memory::empty_and_remove(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_is_cores_times_the_period_and_refuses_nonsense() {
        assert_eq!(quota_us(0.5).unwrap(), 50_000);
        assert_eq!(quota_us(2.0).unwrap(), 200_000);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 0.001] {
            let e = quota_us(bad).unwrap_err().to_string();
            assert!(e.contains("CPU quota"), "{bad}: {e}");
        }
    }
}

//! How much memory the server may fill with file data: `--memory`, else the memory cgroup's
//! limit, else the machine's RAM (`/proc/meminfo`); and how much CPU time its cgroup allows
//! ([`cpu_limit`]), which sizes the server's event loops. The cgroups are read by
//! [`vodkit_cgroup`].

/// The CPU bandwidth the process's cgroups allow, in cores (`None`: no quota).
pub use vodkit_cgroup::cpu_limit;

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
    if let Some(b) = vodkit_cgroup::memory_limit() {
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

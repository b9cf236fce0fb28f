//! The block-queue settings of the loop device that matter for streaming reads
//! (seed 001 §6.3, §6.5): `read_ahead_kb`, `max_sectors_kb`, the I/O scheduler and the
//! rotational flag, read from and written to `/sys/block/<dev>/queue/`.

use super::Error;
use serde::{Deserialize, Serialize};

/// Current queue settings of a block device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSettings {
    pub device: String,
    pub read_ahead_kb: u64,
    pub max_sectors_kb: u64,
    /// Largest value `max_sectors_kb` accepts.
    pub max_hw_sectors_kb: u64,
    /// Active scheduler.
    pub scheduler: String,
    /// All schedulers the kernel offers for this queue.
    pub schedulers: Vec<String>,
    pub rotational: bool,
}

/// Requested changes; `None` leaves a setting alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueTuning {
    pub read_ahead_kb: Option<u64>,
    pub max_sectors_kb: Option<u64>,
    pub scheduler: Option<String>,
    pub rotational: Option<bool>,
}

fn path(device: &str, attr: &str) -> String {
    format!("/sys/block/{device}/queue/{attr}")
}

fn read_attr(device: &str, attr: &str) -> Result<String, Error> {
    std::fs::read_to_string(path(device, attr))
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::Tool(format!("{}: {e}", path(device, attr))))
}

fn write_attr(device: &str, attr: &str, value: &str) -> Result<(), Error> {
    std::fs::write(path(device, attr), value)
        .map_err(|e| Error::Tool(format!("cannot set {} to {value}: {e}", path(device, attr))))
}

fn number(device: &str, attr: &str) -> Result<u64, Error> {
    let text = read_attr(device, attr)?;
    text.parse().map_err(|_| {
        Error::Tool(format!(
            "{}: expected a number, got `{text}`",
            path(device, attr)
        ))
    })
}

/// Read the queue settings of `device` (a name like `loop3`).
pub fn read(device: &str) -> Result<QueueSettings, Error> {
    let sched = read_attr(device, "scheduler")?;
    let schedulers: Vec<String> = sched
        .split_whitespace()
        .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string())
        .collect();
    let active = sched
        .split_whitespace()
        .find(|s| s.starts_with('['))
        .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string())
        .unwrap_or_else(|| sched.clone());
    Ok(QueueSettings {
        device: device.to_string(),
        read_ahead_kb: number(device, "read_ahead_kb")?,
        max_sectors_kb: number(device, "max_sectors_kb")?,
        max_hw_sectors_kb: number(device, "max_hw_sectors_kb")?,
        scheduler: active,
        schedulers,
        rotational: number(device, "rotational")? == 1,
    })
}

/// Apply `tuning` to `device` and return the resulting settings.
pub fn apply(device: &str, tuning: &QueueTuning) -> Result<QueueSettings, Error> {
    if let Some(r) = tuning.rotational {
        write_attr(device, "rotational", if r { "1" } else { "0" })?;
    }
    if let Some(s) = &tuning.scheduler {
        let now = read(device)?;
        if !now.schedulers.iter().any(|x| x == s) {
            return Err(Error::Input(format!(
                "scheduler `{s}` is not offered for {device} (available: {})",
                now.schedulers.join(", ")
            )));
        }
        write_attr(device, "scheduler", s)?;
    }
    if let Some(kb) = tuning.max_sectors_kb {
        let hw = number(device, "max_hw_sectors_kb")?;
        if kb > hw || kb < 4 {
            return Err(Error::Input(format!(
                "max_sectors_kb {kb} is outside 4..={hw} for {device}"
            )));
        }
        write_attr(device, "max_sectors_kb", &kb.to_string())?;
    }
    if let Some(kb) = tuning.read_ahead_kb {
        write_attr(device, "read_ahead_kb", &kb.to_string())?;
    }
    read(device)
}

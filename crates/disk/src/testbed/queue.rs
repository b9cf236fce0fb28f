//! The block-queue settings of the loop device that matter for streaming reads
//! (seed 001 §6.3, §6.5): `read_ahead_kb`, `max_sectors_kb`, the I/O scheduler and the
//! rotational flag, read from and written to `/sys/block/<dev>/queue/`; and the values
//! Linux gives a real rotational disk by default, which the testbed applies at `up`.

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

/// A Linux release, major and minor number (`6.18` of `6.18.44-fc-v669`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        KernelVersion { major, minor }
    }

    /// Parse a release string as `uname -r` prints it; `None` when it does not start
    /// with `MAJOR.MINOR`.
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut parts = release.trim().split(['.', '-', '+', '_']);
        let major = parts.next()?.parse().ok()?;
        let minor_text: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some(KernelVersion::new(major, minor_text.parse().ok()?))
    }

    /// The running kernel, from `/proc/sys/kernel/osrelease`.
    pub fn running() -> Result<KernelVersion, Error> {
        let path = "/proc/sys/kernel/osrelease";
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::Tool(format!("{path}: {e}")))?;
        KernelVersion::parse(&text).ok_or_else(|| {
            Error::Tool(format!(
                "{path}: expected a release like 6.18.1, got `{}`",
                text.trim()
            ))
        })
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The bus a preset's drive is attached by; it decides which SCSI path sets its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Interface {
    /// A SATA disk on an AHCI controller (libata under the SCSI disk driver `sd`).
    #[serde(rename = "SATA")]
    Sata,
    /// A SAS disk on a SAS host bus adapter (`sd` over `scsi_transport_sas`).
    #[serde(rename = "SAS")]
    Sas,
}

impl std::fmt::Display for Interface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Interface::Sata => "SATA",
            Interface::Sas => "SAS",
        })
    }
}

/// The interface of the drive a preset imitates (`hp-10k` is the seed's 10,000 rpm SAS
/// drive; the others are SATA desktop and NAS drives).
pub fn interface(preset: &str) -> Interface {
    match preset {
        "hp-10k" => Interface::Sas,
        "wd-red" | "hitachi-5k3000" | "seagate-7200" => Interface::Sata,
        // A preset added later is a SATA drive unless listed above.
        _ => Interface::Sata,
    }
}

/// `VM_READAHEAD_PAGES` (include/linux/mm.h): 128 KiB, every block device's initial
/// read-ahead (mm/backing-dev.c) and what a disk reporting no optimal I/O size kept
/// before Linux 6.17.
pub const VM_READAHEAD_KB: u64 = 128;

/// The queue settings Linux gives a real rotational disk by default, by kernel version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskDefaults {
    pub interface: Interface,
    /// Kernel whose defaults these are.
    pub kernel: KernelVersion,
    pub read_ahead_kb: u64,
    pub max_sectors_kb: u64,
    pub scheduler: String,
}

/// What Linux `kernel` gives a real rotational disk of `preset` by default: a disk that
/// reports no optimal I/O size, on a controller with one hardware queue (or tags shared
/// between its queues) and a `max_hw_sectors_kb` above the block layer's cap.
///
/// * `max_sectors_kb` is `min(max_hw_sectors_kb, cap)` (block/blk-settings.c
///   `blk_validate_limits`; in older kernels drivers/scsi/sd.c `sd_revalidate_disk`). The
///   cap (`BLK_DEF_MAX_SECTORS`, later `BLK_DEF_MAX_SECTORS_CAP`, include/linux/blkdev.h)
///   is 1024 sectors = 512 KiB before 4.3, 2560 sectors = 1280 KiB from 4.3 (commit
///   d2be537c3ba3 "block: bump BLK_DEF_MAX_SECTORS to 2560") and 8192 sectors =
///   4096 KiB from 6.17 (commit 9b8b84879d4a "block: Increase BLK_DEF_MAX_SECTORS_CAP").
///   3.19–4.2 applied no cap to disks (commit 34b48db66e08, reverted in 4.3); that span
///   is not modelled (it gets 512).
///   A SATA disk's `max_hw_sectors_kb` is 32767 (libata's `ATA_MAX_SECTORS_LBA48`).
/// * `read_ahead_kb` is `max(2 × io_opt, VM_READAHEAD_PAGES)` (block/blk-settings.c
///   `blk_apply_bdi_limits`), so 128 KiB while the disk reports no optimal I/O size, which
///   no ATA disk does. From 6.17 (commit 459779d04ae8 "block: Improve read ahead size for
///   rotational devices") a rotational queue without one uses its `max_sectors` in its
///   place: `read_ahead_kb = 2 × max_sectors_kb`.
/// * The scheduler is `mq-deadline` for a queue with one hardware queue or shared tags
///   (block/elevator.c: `elevator_get_default`, in recent kernels `use_default_elevator`;
///   loop devices opt out with `BLK_MQ_F_NO_SCHED_BY_DEFAULT`, hence their `none`); SCSI
///   disks have used the multi-queue path by default since 4.19 (scsi-mq). Before that the
///   legacy path's default elevator was `cfq` (`CONFIG_DEFAULT_IOSCHED`).
///
/// The presets differ only in interface: every SATA preset gets the same values, and the
/// SAS preset gets them too as long as its host adapter reports no optimal I/O size
/// (drivers/scsi/scsi_transport_sas.c derives one from the DMA mapping limits on some
/// platforms since 6.0; docs/disk.md says more).
pub fn rotational_defaults(preset: &str, kernel: KernelVersion) -> DiskDefaults {
    let v = |major, minor| KernelVersion::new(major, minor);
    let max_sectors_kb = if kernel >= v(6, 17) {
        4096
    } else if kernel >= v(4, 3) {
        1280
    } else {
        512
    };
    let read_ahead_kb = if kernel >= v(6, 17) {
        2 * max_sectors_kb
    } else {
        VM_READAHEAD_KB
    };
    let scheduler = if kernel >= v(4, 19) {
        "mq-deadline"
    } else {
        "cfq"
    };
    DiskDefaults {
        interface: interface(preset),
        kernel,
        read_ahead_kb,
        max_sectors_kb,
        scheduler: scheduler.to_string(),
    }
}

/// The queue settings a testbed came up with and where they came from (kept in its state
/// file, shown by `vodkit hdd up` and `vodkit hdd status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedQueue {
    /// What a real disk of the preset gets on this kernel.
    pub defaults: DiskDefaults,
    /// The settings read back from the queue after they were applied.
    pub read_ahead_kb: u64,
    pub max_sectors_kb: u64,
    pub scheduler: String,
    /// Settings the user gave instead of the defaults (`read_ahead_kb`, ...).
    pub overridden: Vec<String>,
    /// Defaults the device could not take, and what it got instead.
    pub notes: Vec<String>,
}

impl AppliedQueue {
    /// Record what `device` reads back (`now`) after applying `plan`.
    pub fn new(defaults: DiskDefaults, plan: &QueuePlan, now: &QueueSettings) -> AppliedQueue {
        AppliedQueue {
            defaults,
            read_ahead_kb: now.read_ahead_kb,
            max_sectors_kb: now.max_sectors_kb,
            scheduler: now.scheduler.clone(),
            overridden: plan.overridden.clone(),
            notes: plan.notes.clone(),
        }
    }

    /// One line: `queue: read_ahead_kb=… max_sectors_kb=… scheduler=… (defaults of a
    /// rotational SATA disk on Linux 6.18[; notes])`.
    pub fn line(&self) -> String {
        let d = &self.defaults;
        let mut why = vec![format!(
            "defaults of a rotational {} disk on Linux {}",
            d.interface, d.kernel
        )];
        if !self.overridden.is_empty() {
            why.push(format!("{} set by the user", self.overridden.join(", ")));
        }
        why.extend(self.notes.iter().cloned());
        format!(
            "queue: read_ahead_kb={} max_sectors_kb={} scheduler={} ({})",
            self.read_ahead_kb,
            self.max_sectors_kb,
            self.scheduler,
            why.join("; ")
        )
    }
}

/// The tuning to apply to a device: the defaults, with the user's settings winning, fitted
/// to what the device accepts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueuePlan {
    pub tuning: QueueTuning,
    /// Settings taken from the user rather than the defaults.
    pub overridden: Vec<String>,
    /// Defaults the device cannot take, and what it gets instead.
    pub notes: Vec<String>,
}

/// Merge `defaults` with the user's `user` tuning for a device whose current settings are
/// `now`. A user setting always wins (and is checked when applied); a default scheduler the
/// device does not offer falls back to `bfq` for `cfq` (its successor), else to `none` (what
/// the kernel itself uses when `mq-deadline` is missing), else to the first offered; a
/// default `max_sectors_kb` above the device's `max_hw_sectors_kb` is capped there.
pub fn plan(defaults: &DiskDefaults, user: &QueueTuning, now: &QueueSettings) -> QueuePlan {
    let mut p = QueuePlan {
        tuning: QueueTuning {
            rotational: user.rotational,
            ..QueueTuning::default()
        },
        ..QueuePlan::default()
    };
    match user.read_ahead_kb {
        Some(kb) => {
            p.tuning.read_ahead_kb = Some(kb);
            p.overridden.push("read_ahead_kb".into());
        }
        None => p.tuning.read_ahead_kb = Some(defaults.read_ahead_kb),
    }
    match user.max_sectors_kb {
        Some(kb) => {
            p.tuning.max_sectors_kb = Some(kb);
            p.overridden.push("max_sectors_kb".into());
        }
        None if defaults.max_sectors_kb > now.max_hw_sectors_kb => {
            p.tuning.max_sectors_kb = Some(now.max_hw_sectors_kb);
            p.notes.push(format!(
                "max_sectors_kb {} capped at {}'s max_hw_sectors_kb {}",
                defaults.max_sectors_kb, now.device, now.max_hw_sectors_kb
            ));
        }
        None => p.tuning.max_sectors_kb = Some(defaults.max_sectors_kb),
    }
    match &user.scheduler {
        Some(s) => {
            p.tuning.scheduler = Some(s.clone());
            p.overridden.push("scheduler".into());
        }
        None => {
            let offered = |name: &str| now.schedulers.iter().any(|s| s == name);
            let wanted = defaults.scheduler.as_str();
            let pick = if offered(wanted) {
                Some(wanted.to_string())
            } else if wanted == "cfq" && offered("bfq") {
                Some("bfq".to_string())
            } else if offered("none") {
                Some("none".to_string())
            } else {
                now.schedulers.first().cloned()
            };
            if let Some(got) = &pick {
                if got != wanted {
                    p.notes.push(format!(
                        "scheduler {wanted} is not offered for {} (offered: {}), using {got}",
                        now.device,
                        now.schedulers.join(" ")
                    ));
                }
            }
            p.tuning.scheduler = pick;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a WD Red under Linux `kernel` is planned to get on a device set as `now`, the
    /// user asking for nothing.
    fn wd_red_plan(kernel: KernelVersion, now: &QueueSettings) -> QueuePlan {
        plan(
            &rotational_defaults("wd-red", kernel),
            &QueueTuning::default(),
            now,
        )
    }

    fn loop_queue(schedulers: &[&str], max_hw: u64) -> QueueSettings {
        QueueSettings {
            device: "loop9".into(),
            read_ahead_kb: 2560,
            max_sectors_kb: 1280,
            max_hw_sectors_kb: max_hw,
            scheduler: "none".into(),
            schedulers: schedulers.iter().map(|s| s.to_string()).collect(),
            rotational: true,
        }
    }

    #[test]
    fn kernel_releases_parse_to_major_and_minor() {
        let k = |t| KernelVersion::parse(t);
        assert_eq!(k("6.18.44-fc-v669"), Some(KernelVersion::new(6, 18)));
        assert_eq!(k("5.15.0-105-generic\n"), Some(KernelVersion::new(5, 15)));
        assert_eq!(k("6.17-rc3"), Some(KernelVersion::new(6, 17)));
        assert_eq!(k("3.2.0-4-amd64"), Some(KernelVersion::new(3, 2)));
        assert_eq!(k("linux"), None);
        assert_eq!(k("6"), None);
        assert!(KernelVersion::new(6, 9) < KernelVersion::new(6, 17));
        assert_eq!(KernelVersion::new(6, 18).to_string(), "6.18");
    }

    #[test]
    fn defaults_follow_the_kernel_version() {
        let d = |major, minor| rotational_defaults("wd-red", KernelVersion::new(major, minor));
        let triple = |x: DiskDefaults| (x.read_ahead_kb, x.max_sectors_kb, x.scheduler);
        // 6.17 raised the cap to 4 MiB and read-ahead to twice the request size.
        assert_eq!(triple(d(6, 18)), (8192, 4096, "mq-deadline".into()));
        assert_eq!(triple(d(6, 17)), (8192, 4096, "mq-deadline".into()));
        assert_eq!(triple(d(6, 16)), (128, 1280, "mq-deadline".into()));
        assert_eq!(triple(d(5, 4)), (128, 1280, "mq-deadline".into()));
        assert_eq!(triple(d(4, 19)), (128, 1280, "mq-deadline".into()));
        assert_eq!(triple(d(4, 18)), (128, 1280, "cfq".into()));
        assert_eq!(triple(d(4, 3)), (128, 1280, "cfq".into()));
        assert_eq!(triple(d(4, 2)).1, 512);
        // Seed 001's Linux 3.2.
        assert_eq!(triple(d(3, 2)), (128, 512, "cfq".into()));
    }

    #[test]
    fn every_preset_gets_the_defaults_of_its_interface() {
        let k = KernelVersion::new(6, 18);
        for name in crate::model::PRESET_NAMES {
            let d = rotational_defaults(name, k);
            let expected = if name == "hp-10k" {
                Interface::Sas
            } else {
                Interface::Sata
            };
            assert_eq!(d.interface, expected, "{name}");
            assert_eq!(
                (d.read_ahead_kb, d.max_sectors_kb, d.scheduler.as_str()),
                (8192, 4096, "mq-deadline"),
                "{name}"
            );
        }
    }

    #[test]
    fn plan_caps_at_the_device_and_lets_the_user_win() {
        let d = rotational_defaults("wd-red", KernelVersion::new(6, 18));
        let now = loop_queue(&["none", "mq-deadline", "kyber", "bfq"], 1280);
        let p = plan(&d, &QueueTuning::default(), &now);
        assert_eq!(p.tuning.read_ahead_kb, Some(8192));
        assert_eq!(p.tuning.max_sectors_kb, Some(1280));
        assert_eq!(p.tuning.scheduler.as_deref(), Some("mq-deadline"));
        assert!(p.overridden.is_empty());
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
        assert!(p.notes[0].contains("4096") && p.notes[0].contains("1280"));

        let p = wd_red_plan(KernelVersion::new(6, 12), &now);
        assert_eq!(p.tuning.max_sectors_kb, Some(1280));
        assert_eq!(p.tuning.read_ahead_kb, Some(128));
        assert!(p.notes.is_empty(), "{:?}", p.notes);

        let user = QueueTuning {
            read_ahead_kb: Some(2560),
            scheduler: Some("bfq".into()),
            ..QueueTuning::default()
        };
        let p = plan(&d, &user, &now);
        assert_eq!(p.tuning.read_ahead_kb, Some(2560));
        assert_eq!(p.tuning.scheduler.as_deref(), Some("bfq"));
        assert_eq!(p.tuning.max_sectors_kb, Some(1280));
        assert_eq!(p.overridden, ["read_ahead_kb", "scheduler"]);
    }

    #[test]
    fn a_missing_scheduler_falls_back_and_says_so() {
        let p = wd_red_plan(
            KernelVersion::new(6, 18),
            &loop_queue(&["none", "bfq"], 4096),
        );
        assert_eq!(p.tuning.scheduler.as_deref(), Some("none"));
        assert_eq!(p.tuning.max_sectors_kb, Some(4096));
        assert!(p
            .notes
            .iter()
            .any(|n| n.contains("mq-deadline is not offered")));

        let p = wd_red_plan(
            KernelVersion::new(3, 2),
            &loop_queue(&["none", "bfq"], 1280),
        );
        assert_eq!(p.tuning.scheduler.as_deref(), Some("bfq"));
        assert_eq!(p.tuning.max_sectors_kb, Some(512));
    }

    #[test]
    fn the_line_names_the_settings_and_their_origin() {
        let d = rotational_defaults("seagate-7200", KernelVersion::new(6, 12));
        let now = loop_queue(&["none", "mq-deadline"], 1280);
        let p = plan(&d, &QueueTuning::default(), &now);
        let applied = QueueSettings {
            read_ahead_kb: 128,
            scheduler: "mq-deadline".into(),
            ..now
        };
        assert_eq!(
            AppliedQueue::new(d, &p, &applied).line(),
            "queue: read_ahead_kb=128 max_sectors_kb=1280 scheduler=mq-deadline \
             (defaults of a rotational SATA disk on Linux 6.12)"
        );
    }
}

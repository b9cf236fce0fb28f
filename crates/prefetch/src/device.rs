//! Which block device holds a file, so reads can be queued per device (Linux).
//!
//! A file's `st_dev` gives the major:minor of the device its filesystem sits on;
//! `/sys/dev/block/MAJ:MIN` links to the device's sysfs directory, and a partition's
//! directory sits inside its disk's directory and contains a `partition` file. Reads to
//! two partitions of one disk therefore share one queue. Filesystems without a block
//! device (tmpfs, overlay, FUSE) get a name of the form `dev-MAJ:MIN`.
//!
//! [`DeviceMap`] applies overrides (`MAJ:MIN=name` or `sda=name`), e.g. to give the
//! emulated disk a readable name or to put everything on one queue.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Resolves `st_dev` values to device (queue) names.
#[derive(Clone, Debug, Default)]
pub struct DeviceMap {
    overrides: HashMap<String, String>,
    single: Option<String>,
    sysfs: PathBuf,
}

impl DeviceMap {
    pub fn new() -> Self {
        DeviceMap {
            overrides: HashMap::new(),
            single: None,
            sysfs: PathBuf::from("/sys/dev/block"),
        }
    }

    /// Puts every file on one queue called `name`.
    pub fn single(name: &str) -> Self {
        DeviceMap {
            single: Some(name.to_string()),
            ..DeviceMap::new()
        }
    }

    /// Adds an override `KEY=NAME` where KEY is `MAJ:MIN` or a discovered device name.
    pub fn add_override(&mut self, spec: &str) -> Result<(), String> {
        let (k, v) = spec
            .split_once('=')
            .filter(|(k, v)| !k.trim().is_empty() && !v.trim().is_empty())
            .ok_or_else(|| {
                format!("device override `{spec}`: expected MAJ:MIN=NAME or DEVICE=NAME")
            })?;
        self.overrides
            .insert(k.trim().to_string(), v.trim().to_string());
        Ok(())
    }

    /// Reads sysfs from another root (tests).
    pub fn with_sysfs(mut self, dir: &Path) -> Self {
        self.sysfs = dir.to_path_buf();
        self
    }

    /// The queue name for a file on `st_dev`.
    pub fn name_for(&self, st_dev: u64) -> String {
        if let Some(s) = &self.single {
            return s.clone();
        }
        let (maj, min) = (libc::major(st_dev), libc::minor(st_dev));
        let key = format!("{maj}:{min}");
        if let Some(n) = self.overrides.get(&key) {
            return n.clone();
        }
        let found = disk_name(&self.sysfs, maj, min).unwrap_or_else(|| format!("dev-{key}"));
        self.overrides.get(&found).cloned().unwrap_or(found)
    }
}

/// Name of the whole disk holding block device `maj:min`, from sysfs.
fn disk_name(sysfs: &Path, maj: u32, min: u32) -> Option<String> {
    let dir = std::fs::canonicalize(sysfs.join(format!("{maj}:{min}"))).ok()?;
    let disk = if dir.join("partition").exists() {
        dir.parent()?
    } else {
        &dir
    };
    disk.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// For tests: a `/sys/dev/block` under `root` holding one disk, `disk` (a path below
/// `root` ending in its name), at `maj:min`, and its first partition at `maj:min+1`.
/// Returns the links directory and the disk's directory.
#[cfg(test)]
pub(crate) fn fake_sysfs(root: &Path, disk: &str, maj: u32, min: u32) -> (PathBuf, PathBuf) {
    let disk = root.join(disk);
    let name = disk.file_name().unwrap().to_string_lossy();
    let partition = disk.join(format!("{name}1"));
    std::fs::create_dir_all(&partition).unwrap();
    std::fs::write(partition.join("partition"), "1\n").unwrap();
    let links = root.join("block");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(&disk, links.join(format!("{maj}:{min}"))).unwrap();
    std::os::unix::fs::symlink(&partition, links.join(format!("{maj}:{}", min + 1))).unwrap();
    (links, disk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn partitions_resolve_to_their_disk() {
        let root = tempfile::tempdir().unwrap();
        let (links, _) = fake_sysfs(root.path(), "devices/pci0/block/sdb", 8, 16);
        let map = DeviceMap::new().with_sysfs(&links);
        assert_eq!(map.name_for(libc::makedev(8, 16)), "sdb");
        assert_eq!(map.name_for(libc::makedev(8, 17)), "sdb");
        assert_eq!(map.name_for(libc::makedev(0, 44)), "dev-0:44");
        let mut map = map;
        map.add_override("sdb=media").unwrap();
        map.add_override("0:44=fuse").unwrap();
        assert_eq!(map.name_for(libc::makedev(8, 17)), "media");
        assert_eq!(map.name_for(libc::makedev(0, 44)), "fuse");
        assert!(map.add_override("nonsense").is_err());
        assert!(map.add_override("=x").is_err());
    }

    #[test]
    fn real_files_get_a_device_name() {
        let dir = tempfile::tempdir().unwrap();
        let dev = std::fs::metadata(dir.path()).unwrap().dev();
        let name = DeviceMap::new().name_for(dev);
        assert!(!name.is_empty());
        assert_eq!(DeviceMap::single("all").name_for(dev), "all");
    }
}

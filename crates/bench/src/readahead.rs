//! Kernel readahead tuning for the block device holding the file set (seed 001 §6.5):
//! set `read_ahead_kb` and `max_sectors_kb` in sysfs while a server runs, and put the old
//! values back afterwards.

use crate::sut::Readahead;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The sysfs `queue` directory of the whole disk that holds `path`.
pub fn queue_dir(path: &Path) -> Result<PathBuf, String> {
    let dev = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        return Err(format!(
            "{} is not on a block device (tmpfs/overlay); readahead tuning needs the emulated disk or a real one",
            path.display()
        ));
    }
    let node = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let node = node
        .canonicalize()
        .map_err(|e| format!("{}: {e}", node.display()))?;
    let disk = if node.join("partition").exists() {
        node.parent().map(Path::to_path_buf).unwrap_or(node)
    } else {
        node
    };
    let q = disk.join("queue");
    if q.join("read_ahead_kb").exists() {
        Ok(q)
    } else {
        Err(format!("{} has no read_ahead_kb", q.display()))
    }
}

/// How [`Applied::describe`] begins (report notes are recognized by it).
pub const SET_NOTE: &str = "ran with the file set's device queue set to";

/// Applied settings; [`Applied::restore`] (or drop) puts the previous values back.
#[derive(Debug)]
pub struct Applied {
    queue: PathBuf,
    previous: Vec<(&'static str, String)>,
    /// The values written, in order.
    set: Vec<(&'static str, String)>,
    pub notes: Vec<String>,
}

fn read(q: &Path, name: &str) -> Result<String, String> {
    std::fs::read_to_string(q.join(name))
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("{}/{name}: {e}", q.display()))
}

fn write(q: &Path, name: &str, value: &str) -> Result<(), String> {
    std::fs::write(q.join(name), value)
        .map_err(|e| format!("setting {}/{name} to {value}: {e}", q.display()))
}

/// Apply `ra` to the device holding `root`.
pub fn apply(root: &Path, ra: &Readahead) -> Result<Applied, String> {
    let queue = queue_dir(root)?;
    let mut applied = Applied {
        queue: queue.clone(),
        previous: Vec::new(),
        set: Vec::new(),
        notes: Vec::new(),
    };
    if let Some(ms) = ra.max_sectors_kb {
        let hw: u32 = read(&queue, "max_hw_sectors_kb")?.parse().unwrap_or(ms);
        let value = ms.min(hw);
        if value < ms {
            applied.notes.push(format!(
                "max_sectors_kb {ms} capped at the device's max_hw_sectors_kb {hw}"
            ));
        }
        applied
            .previous
            .push(("max_sectors_kb", read(&queue, "max_sectors_kb")?));
        write(&queue, "max_sectors_kb", &value.to_string())?;
        applied.set.push(("max_sectors_kb", value.to_string()));
    }
    applied
        .previous
        .push(("read_ahead_kb", read(&queue, "read_ahead_kb")?));
    write(&queue, "read_ahead_kb", &ra.read_ahead_kb.to_string())?;
    applied
        .set
        .push(("read_ahead_kb", ra.read_ahead_kb.to_string()));
    Ok(applied)
}

impl Applied {
    /// One line: what was set, from what, and the launcher's own notes.
    pub fn describe(&self) -> String {
        let set: Vec<String> = self
            .set
            .iter()
            .map(|(name, value)| {
                let was = self
                    .previous
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("?", |(_, v)| v.as_str());
                format!("{name} {value} (was {was})")
            })
            .collect();
        let mut line = format!("{SET_NOTE} {}", set.join(", "));
        for n in &self.notes {
            line.push_str("; ");
            line.push_str(n);
        }
        line
    }

    pub fn restore(mut self) -> Result<(), String> {
        self.restore_inner()
    }

    fn restore_inner(&mut self) -> Result<(), String> {
        let mut first_err = Ok(());
        while let Some((name, value)) = self.previous.pop() {
            if let Err(e) = write(&self.queue, name, &value) {
                first_err = first_err.and(Err(e));
            }
        }
        first_err
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        let _ = self.restore_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_says_what_was_set_and_from_what() {
        let dir = tempfile::tempdir().unwrap();
        let applied = Applied {
            queue: dir.path().to_path_buf(),
            previous: vec![
                ("max_sectors_kb", "1280".into()),
                ("read_ahead_kb", "8192".into()),
            ],
            set: vec![
                ("max_sectors_kb", "128".into()),
                ("read_ahead_kb", "0".into()),
            ],
            notes: vec!["capped".into()],
        };
        assert_eq!(
            applied.describe(),
            format!("{SET_NOTE} max_sectors_kb 128 (was 1280), read_ahead_kb 0 (was 8192); capped")
        );
        // Dropping it writes the previous values back.
        drop(applied);
        let back = std::fs::read_to_string(dir.path().join("read_ahead_kb")).unwrap();
        assert_eq!(back, "8192");
    }

    #[test]
    fn tmpfs_or_block_device_is_reported_sensibly() {
        // /proc is never on a block device.
        let e = queue_dir(Path::new("/proc")).unwrap_err();
        assert!(e.contains("not on a block device"), "{e}");
        let e = queue_dir(Path::new("/no/such/dir")).unwrap_err();
        assert!(e.contains("/no/such/dir"), "{e}");
    }
}

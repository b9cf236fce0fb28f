//! How the server reads what is not in memory: the `--io` modes and the adapter that asks
//! the prefetch engine (`vodkit-prefetch`) to make a range resident before sendfile.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crate::range::ByteRange;

/// The four server configurations compared in Libception §5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// sendfile lets the kernel read; possibly-blocking sends run on a thread pool.
    #[default]
    Vanilla,
    /// Misses go to one FIFO worker per device that reads exactly the requested bytes.
    Serialized,
    /// Misses read the prefetch size, on many threads at once.
    Prefetch,
    /// Misses go to one FIFO worker per device that reads the full prefetch size.
    Asap,
}

impl FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "vanilla" => Ok(IoMode::Vanilla),
            "serialized" => Ok(IoMode::Serialized),
            "prefetch" => Ok(IoMode::Prefetch),
            "asap" => Ok(IoMode::Asap),
            other => Err(format!(
                "unknown I/O mode {other:?} (expected vanilla, serialized, prefetch or asap)"
            )),
        }
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoMode::Vanilla => "vanilla",
            IoMode::Serialized => "serialized",
            IoMode::Prefetch => "prefetch",
            IoMode::Asap => "asap",
        })
    }
}

/// I/O settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct IoSettings {
    pub mode: IoMode,
    /// Prefetch policy text as accepted by `--prefetch` (e.g. `fixed:2MiB`).
    pub prefetch: Option<String>,
    /// catalog.json giving bit rates per path.
    pub catalog: Option<PathBuf>,
}

/// What the engine decided for one range before it is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Bytes of the range that were already in memory.
    pub from_memory: u64,
    /// Bytes of the range that had to come from the disk.
    pub from_disk: u64,
    /// Whether sendfile may still block on the disk and must run on the thread pool.
    pub send_blocking: bool,
}

/// The server's view of the disk path.
#[derive(Debug)]
pub struct DiskIo {
    settings: IoSettings,
}

impl DiskIo {
    pub fn new(settings: IoSettings) -> Result<DiskIo, String> {
        if settings.mode != IoMode::Vanilla {
            return Err(format!(
                "--io {} needs the prefetch engine, which is not wired into this build yet",
                settings.mode
            ));
        }
        Ok(DiskIo { settings })
    }

    pub fn mode(&self) -> IoMode {
        self.settings.mode
    }

    /// Get a range ready for sendfile. Without residency information every range is
    /// treated as possibly on disk: counted as disk bytes and sent from the thread pool.
    pub async fn prepare(
        &self,
        _file: &Arc<File>,
        _path: &Path,
        _size: u64,
        range: ByteRange,
    ) -> Prepared {
        Prepared {
            from_memory: 0,
            from_disk: range.len(),
            send_blocking: true,
        }
    }
}

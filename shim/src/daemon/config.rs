//! How a daemon is set up ([`DaemonConfig`]): the floor under the daemon's threads and
//! its metrics.

use super::rates::FileRates;
use std::path::PathBuf;
use vodkit_prefetch::{IoMode, MemoryConfig, PolicySpec};

/// How a daemon is set up.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub socket: PathBuf,
    /// Prefetch policy (ignored in `serialized` and `vanilla` modes).
    pub policy: PolicySpec,
    /// One I/O worker per device instead of one for all devices.
    pub per_device: bool,
    /// What the daemon does with a miss ([`super::parse_mode`]).
    pub mode: IoMode,
    /// Bit rates of the served files (`--catalog`); without them every file is sized at
    /// the policy's reference rate.
    pub bitrates: Option<FileRates>,
    /// The engine's prefetch-aware memory manager (`vodkit_prefetch::memory`): the same
    /// one `vodkit serve` runs. The library sees no clients, so streams are told apart by
    /// position, and a request consumes what its stream asked for before it.
    pub memory: Option<MemoryConfig>,
    /// `GET /admit` on the admin listener (nginx's `auth_request`): how new streams are
    /// admitted ([`super::admit`]); `Off` lets every request through.
    pub admission: vodkit_prefetch::admission::AdmissionPolicy,
    /// The server's document root: where `/admit` finds the file a URI names.
    pub root: Option<PathBuf>,
    /// The order the engine's device worker serves queued reads in (`--io-order`).
    pub order: vodkit_prefetch::IoOrder,
}

impl DaemonConfig {
    /// Defaults: `asap`, `fixed:2MiB` (the seed's default prefetch size), one worker.
    pub fn new(socket: impl Into<PathBuf>) -> DaemonConfig {
        DaemonConfig {
            socket: socket.into(),
            policy: PolicySpec::default(),
            per_device: false,
            mode: IoMode::Asap,
            bitrates: None,
            memory: Some(MemoryConfig::for_budget(
                vodkit_prefetch::budget::detect(None).0,
            )),
            admission: Default::default(),
            root: None,
            order: Default::default(),
        }
    }
}

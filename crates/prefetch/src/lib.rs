//! The prefetch engine shared by `vodkit serve`, `vodkit prefetchd` and `vodkit simulate`.
//!
//! - [`policy`]: how much to read on a miss — pure state machines driven by the caller's
//!   clock, so the simulator runs exactly the code the server deploys;
//! - [`engine`]: residency checks, per-device FIFO workers or a thread pool, reads;
//! - [`direct`]: the `--io direct` buffer pool (`O_DIRECT` reads, no page cache);
//! - [`folio`]: page-cache reads as large folios (cheaper to `sendfile`);
//! - [`ledger`] and [`stats`]: prefetch evictions, eviction time, waste, disk time;
//! - [`metrics`]: the accounting as Prometheus metrics;
//! - [`chain`]: chains (thesis 5.3) — the one window, kinds and live trackers;
//! - [`memory`] and [`budget`]: the prefetch-aware memory manager and its budget;
//! - [`admission`]: which new streams a busy device takes (`--admission` of `vodkit serve`
//!   and of `vodkit prefetchd`'s `/admit`);
//! - [`schedule`]: the order a device's queue serves its reads in (`--io-order`),
//!   [`placement`]: where a read lies on its device, and [`service`]: what a read of it
//!   costs, learned from its reads;
//! - [`bitrate`], [`device`], [`residency`]: inputs the engine needs;
//! - [`pages`]: the process's own memory kept in small pages.
//!
//! See `docs/prefetch.md`.

pub mod admission;
pub mod bitrate;
pub mod budget;
pub mod chain;
pub mod clock;
pub mod device;
pub mod direct;
pub mod engine;
pub mod folio;
pub mod ledger;
pub mod memory;
pub mod metrics;
pub mod pages;
pub mod placement;
pub mod policy;
pub mod residency;
pub mod schedule;
pub mod service;
pub mod stats;

/// Hash maps keyed by stream, file and client ids, looked up several times per request:
/// with a fast hash (foldhash, seeded per process) instead of std's SipHash.
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Identity of a file as the policy sees it (e.g. device and inode folded together).
pub type FileId = u64;

pub use bitrate::BitrateMap;
pub use chain::{ChainKind, ChainPosition, ChainTracker, CHAIN_WINDOW_S};
pub use device::DeviceMap;
pub use direct::{BufferPool, Chunk, DirectStats, Slice};
pub use engine::{
    Begin, DirectOutcome, Engine, EngineConfig, FileFacts, IoMode, Pending, ReadOutcome,
    ReadRequest,
};
pub use ledger::{Ledger, LedgerConfig, LedgerTotals, SweepTarget};
pub use memory::{MemoryConfig, MemoryManager, MemoryTotals};
pub use policy::{
    Observation, Policy, PolicySpec, PolicyState, ReadContext, SpecError, DEFAULT_BITRATE_KBPS,
};
pub use residency::Probe;
pub use schedule::IoOrder;
pub use stats::{DeviceStats, Stats, StatsLog};

//! Prefetching for unmodified servers: an `LD_PRELOAD` library that reports page-cache
//! misses of file reads to `vodkit prefetchd`, which serializes and enlarges them.
//!
//! - [`library`]: the C preload library, built by `build.rs`, embedded here and written to
//!   a cache path on first use ([`library::path`]).
//! - [`protocol`]: the request/reply messages exchanged over the daemon's Unix socket.
//! - [`daemon`]: the prefetch daemon behind `vodkit prefetchd`.
//! - [`launch`]: running a command under the library (used by `vodkit preload` and the
//!   benchmark runner).

pub mod daemon;
pub mod launch;
pub mod library;
pub mod protocol;
mod signals;

pub use daemon::{parse_mode, Daemon, DaemonConfig};
pub use launch::{default_socket, run_command, Preload, PreloadError};
pub use vodkit_prefetch::IoMode;

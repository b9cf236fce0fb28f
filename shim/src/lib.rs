//! The preload shim: prefetching for unmodified servers. Its two parts are the library,
//! loaded with `LD_PRELOAD`, which reports page-cache misses of file reads, and the daemon
//! (`vodkit prefetchd`), which serializes and enlarges them. `vodkit preload` runs a program
//! under both. (This crate, `vodkit-preload` in `shim/`, holds both parts.)
//!
//! - [`library`]: the C library, built by `build.rs`, embedded here and written to
//!   a cache path on first use ([`library::path`]).
//! - [`protocol`]: the request/reply messages exchanged over the daemon's Unix socket.
//! - [`daemon`]: the shim's daemon, behind `vodkit prefetchd`.
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

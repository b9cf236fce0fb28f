//! Test support for vodkit's integration tests (a dev-dependency only).
//!
//! - [`need`]: what a test needs ([`Need::Root`], [`Need::Fuse`], [`Need::Peer`], ...) and
//!   what happens when it is missing: one `SKIPPED <test>: ...` line, or, under `CI=true`, a
//!   failure (CI installs everything, so a skip there would hide a test). The fast tier
//!   (`VODKIT_TEST_TIER=fast`, set by `./scripts/test --fast`) skips every test that needs
//!   more than the process itself.
//! - [`turn`]: tests that must not overlap (a cgroup name, the FUSE device, loop devices,
//!   CPU-sensitive runs) take turns on a file lock under the temporary directory, across
//!   test binaries.
//! - [`process`]: a server under test as a child process (`vodkit serve`, any command) with
//!   its stderr lines readable while it runs, and runs bounded by a time limit.
//! - [`peer`]: nginx or Apache serving a directory, started by `vodkit-peers`.
//! - [`http`]: a small blocking HTTP/1.1 client that reads responses byte-exactly.
//! - [`random`]: deterministic pseudo-random numbers ([`xorshift`]).
//! - `server` (feature `server`): the vodkit server in-process on a temporary root.

pub mod http;
pub mod need;
pub mod peer;
pub mod process;
pub mod random;
#[cfg(feature = "server")]
pub mod server;
pub mod turn;

pub use need::{fast_tier, needs, skip, test_name, Need};
pub use random::xorshift;
pub use turn::{turn, Turn};

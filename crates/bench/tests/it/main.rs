//! Integration tests of the bench: the procedure, the adapters for every server kind, the emulated
//! disk and the players.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod hdd;
mod hdd_steady;
mod peers;
mod players;
mod preload_daemon;
mod procedure;
mod smoke;
mod tls;

//! Integration tests of the preload shim: transparency, concurrency, the daemon and real servers.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod admission_nginx;
mod common;
mod concurrency;
mod daemon;
mod prefetch_effect;
mod servers;
mod transparency;

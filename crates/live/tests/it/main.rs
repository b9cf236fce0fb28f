//! Integration tests of live origins and title sources against the vodkit server and the peers.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod common;
mod low_latency;
mod origins;
mod title_source;

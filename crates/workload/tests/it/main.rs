//! Integration tests of workload generation, file sets and log formats.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod fileset;
mod generate;
mod logfmt_no_panic;
mod logfmt_round_trip;
mod statistics;

//! Integration tests of the prefetch engine, its I/O modes and its memory use.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod direct;
mod engine;
mod io_mode;
mod io_order;
mod memory;

//! Integration tests of the emulated disk, the memory budget and the CPU quota.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod cpu_quota;
mod direct_mount;
mod memory_budget;
mod testbed_e2e;

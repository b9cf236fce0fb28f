//! Disk-bound experiments on any Linux machine: an HDD timing model, an emulated disk
//! (FUSE device + loop + ext4), memory budgets per process and iostat-style sampling.
//!
//! * [`model`] — pure, deterministic timing of a zoned, seeking, rotating drive (also used
//!   by the policy simulator).
//! * [`testbed`] — the emulated device: a FUSE-served image delayed by the model, attached
//!   as a loop device, formatted ext4 and mounted (Linux, root).
//! * [`devbench`] — sequential and random read benchmarks against a testbed's device.
//! * [`memory`] — memory budgets (page cache included) through the memory cgroup.
//! * [`cpu`] — CPU quotas (CFS bandwidth) through the cpu cgroup.
//! * [`sys`] — per-interval disk, CPU, memory and network metrics from `/proc`.
//!
//! [`testbed`] and [`devbench`] are behind the default `testbed` feature; without it the
//! crate pulls in no FUSE library (the simulator depends on it that way).

pub mod cpu;
#[cfg(feature = "testbed")]
pub mod devbench;
pub mod memory;
pub mod model;
pub mod sys;
#[cfg(feature = "testbed")]
pub mod testbed;

pub use model::{Drive, DriveOptions, DriveSpec, Rotation};

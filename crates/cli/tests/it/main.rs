//! End-to-end tests of the vodkit binary: every subcommand, its errors, and the runs that need
//! root, FUSE, a peer or a browser.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod browser_live;
mod browser_player;
mod cluster;
mod common;
mod deploy;
mod disk_faults;
mod event_loops_quota;
mod from_log;
mod help_docs;
mod memory_on_hdd;
mod run_command;
mod shards;
mod subcommands;

//! `vodkit bench` and `vodkit demo`: run servers under test against a workload, search for
//! each one's maximum failure-free rate and report the results side by side.
//!
//! The pieces are independent of each other and of the other vodkit crates: [`sut`] parses
//! the server list, [`peers`]/[`process`] (from `vodkit-peers`) run the unmodified peers,
//! [`search`] is the pure capacity search, [`bound`] the capacity bound any server is read
//! against, [`report`] writes bench.json/report.md/report.html,
//! and [`scenario`] holds the seed experiments as data.

pub mod adapters;
pub mod bound;
pub mod demo;
pub mod experiment;
pub mod launch;
pub mod peers;
pub mod point;
pub mod prepare;
pub mod process;
pub mod readahead;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod scenario_run;
pub mod search;
pub mod sut;
pub mod system;

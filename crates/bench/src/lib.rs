//! `vodkit bench` and `vodkit demo`: run servers under test against a workload, search for
//! each one's maximum failure-free rate and report the results side by side.
//!
//! This is the crate that puts the others together: it generates workloads
//! (`vodkit-workload`), drives them (`vodkit-load`), starts the vodkit origin
//! (`vodkit-server`, `vodkit-prefetch`), the peers (`vodkit-peers`) and the preload shim
//! (`vodkit-preload`) on the emulated disk (`vodkit-disk`), and checks the simulator
//! (`vodkit-sim`, `vodkit-trace`) against a real run. The pure parts depend on none of
//! that: [`sut`] parses the server list, [`search`] is the capacity search, [`bound`] the
//! capacity bound any server is read against, [`warmup`] brings each point to steady state
//! (the fast-forward) and judges it, [`report`] writes
//! bench.json/report.md/report.html and [`scenario`] holds the seed experiments as data.
//! [`adapters`], [`launch`] and [`system`] connect the experiment's traits to the other
//! crates; [`runner`] and [`scenario_run`] run a request or a scenario; [`validate`] is the
//! simulator's real-run check.

pub mod adapters;
pub mod bound;
pub mod child;
pub mod demo;
pub mod early;
pub mod experiment;
pub mod failover;
pub mod interrupt;
pub mod launch;
pub mod live;
pub mod point;
pub mod preload;
pub mod prepare;
pub mod readahead;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod scenario_run;
pub mod search;
pub mod setup;
pub mod sut;
pub mod system;
pub mod validate;
pub mod warmup;

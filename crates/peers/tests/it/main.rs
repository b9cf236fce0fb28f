//! Integration tests of the peer servers' supervision.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod balancers;
mod supervision;

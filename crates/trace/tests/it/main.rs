//! Integration tests of the trace reader: edge cases and ground truth.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod edge_cases;
mod ground_truth;

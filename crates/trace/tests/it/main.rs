//! Integration tests of the trace reader: edge cases, ground truth and the parallel reader.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod edge_cases;
mod fromlog_stream;
mod ground_truth;
mod threads;

//! Integration tests of the trace reader: edge cases, ground truth, the parallel reader,
//! the analysis within a memory limit, streaming from-log and the SQL recipes on Parquet
//! output.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod duckdb;
mod edge_cases;
mod fromlog_stream;
mod ground_truth;
mod memory;
mod threads;
